"""The front end's unit tests (decoding, layout, replay, escaping) under Node."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

JS = pathlib.Path(__file__).resolve().parent.parent / "js"


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
def test_node_unit_tests():
    r = subprocess.run(["node", "--test", "tests/"], cwd=JS, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "# fail 0" in r.stdout
