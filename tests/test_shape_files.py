"""A trace of every launch shape survives its own file: saved, loaded, re-analysed.

The loader refuses what contradicts itself (e.g. a block's request from a thread its
kernel does not have); a real recording of any shape the interpreter supports must
never be refused, and its reloaded findings must be the recorded ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import pallas_viz as pv
from pallas_viz.examples import shapes as sh

IN_PROCESS = [s for s in sh.SHAPES if s != "two_devices"]


def _roots(tr):
    return [(f.kind, f.source.line if f.source else None, f.message) for f in tr.findings]


def _round_trip(tr, path):
    tr.save(path)
    return pv.load(path)


@pytest.mark.parametrize("shape", IN_PROCESS)
@pytest.mark.parametrize("name", ["collective_in_branch", "plain_copy"])
def test_a_recorded_shape_loads_with_its_findings(name, shape, tmp_path):
    body = sh.BUGGY.get(name) or sh.CLEAN[name]
    fn, args = sh.launch(body, shape)
    tr, _ = sh.run_traced(fn, args, timeout_s=10)
    assert tr.events
    back = _round_trip(tr, str(tmp_path / "t.json"))
    assert _roots(back) == _roots(tr)
    assert [k.threads_per_block for k in back.kernels] == [
        k.threads_per_block for k in tr.kernels]
    if name == "plain_copy":
        assert tr.findings == []


_TWO_DEVICES = """
import json, sys
import pallas_viz as pv
from pallas_viz.examples import shapes as sh
out = {}
for name in ("collective_in_branch", "plain_copy"):
    body = sh.BUGGY.get(name) or sh.CLEAN[name]
    fn, args = sh.launch(body, "two_devices")
    tr, _ = sh.run_traced(fn, args, timeout_s=10)
    path = sys.argv[1] + "/" + name + ".json"
    tr.save(path)
    back = pv.load(path)
    roots = lambda t: [[f.kind, f.source.line if f.source else None, f.message]
                       for f in t.findings]
    out[name] = [roots(tr), roots(back), len(tr.events)]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_two_devices_traces_load_with_their_findings(tmp_path):
    env = dict(os.environ, **sh.TWO_DEVICES_ENV)
    proc = subprocess.run([sys.executable, "-c", _TWO_DEVICES, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    recorded, loaded, events = out["collective_in_branch"]
    assert events and recorded and recorded == loaded
    assert recorded[0][0] == "partial_collective"
    recorded, loaded, events = out["plain_copy"]
    assert events and recorded == loaded == []
