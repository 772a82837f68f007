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


def test_the_bundle_is_rebuilt_when_a_view_changes(tmp_path):
    """`hatch_build.py` rebuilds the bundle when any source under js/ changes, js/views/
    included (a stale bundle would test and ship old views); js/tests/ does not count."""
    import sys

    sys.path.insert(0, str(JS.parent))
    try:
        import hatch_build as hb
    finally:
        sys.path.remove(str(JS.parent))
    src = tmp_path / "js"
    shutil.copytree(JS, src, ignore=shutil.ignore_patterns("node_modules"))
    (src / "node_modules").mkdir()
    (src / "node_modules" / "x.js").write_text("// not a source")
    static = tmp_path / "static"
    static.mkdir()
    for o in hb.OUTPUTS:
        (static / o).write_text("built")
    (static / hb.BUILD_STAMP).write_text(hb.sources_hash(src) + "\n")
    assert not hb.is_stale(src, static)
    (src / "tests" / "peak.test.js").write_text("// a test changed")
    (src / "node_modules" / "x.js").write_text("// still not a source")
    assert not hb.is_stale(src, static)
    view = src / "views" / "compare.js"
    view.write_text(view.read_text() + "\n// changed\n")
    assert hb.is_stale(src, static)
