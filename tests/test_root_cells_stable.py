"""The cells a root cause lights are the same every run, and the right ones.

The interpreter's threads interleave differently each run, so when a buggy kernel fails,
which threads, blocks of a cluster or devices got to the buggy line before the failure
stopped the rest varies. The root's line and message did not vary; its cells did: a
warp allocation lit warpgroup 0, warpgroup 1 or both; a thread-level partial collective
in a cluster lit block (0), block (1) or both; on two devices, device 0, device 1 or
both. They must light every place that runs the buggy code at once (the blocks of the
cluster, the devices, a block's warpgroups), whichever got there first. (The steps of a
grid run one after another: a failure in step 0 keeps the later steps from running at
all, and the trace does not say the grid had them; those are not checked here.)
"""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import pytest

from pallas_viz.examples import shapes as sh

RUNS = 5


def _roots(tr) -> list[tuple]:
    return [(f.kind, f.source.line if f.source else None, sorted(f.cells)) for f in tr.findings]


def _cells(devices: int, blocks: list, threads: int) -> list:
    return sorted((d, b, t) for d in range(devices) for b in blocks for t in range(threads))


def _check_runs(body_name: str, shape: str, kind: str, want: list, **launch_kw):
    seen = set()
    for _ in range(RUNS):
        fn, args = sh.launch(sh.BUGGY[body_name], shape, **launch_kw)
        tr, _ = sh.run_traced(fn, args, timeout_s=10)
        roots = _roots(tr)
        assert roots == [(kind, sh.ALLOC_LINE[body_name], want)], (roots, tr.summary())
        seen.add(repr(roots))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("num_threads", [1, 2])
@pytest.mark.parametrize("name", list(sh.BUGGY))
def test_a_warp_allocation_lights_every_warpgroup(name, num_threads):
    # warp-level code in one block: every warpgroup runs it and makes the request (a
    # failure in one warpgroup's warps used to leave the other unlit, about one run in 4
    # for `mismatched_shapes`)
    _check_runs(name, "warp_mesh", "warp_allocation", _cells(1, [()], num_threads),
                num_threads=num_threads)


@pytest.mark.parametrize("name", ["mismatched_shapes", "collective_in_loop",
                                  "collective_in_branch"])
def test_a_warp_allocation_in_a_cluster_lights_both_blocks(name):
    _check_runs(name, "warp_mesh", "warp_allocation", _cells(1, [(0,), (1,)], 2),
                num_threads=2, warps_in="cluster2")


@pytest.mark.parametrize("name", list(sh.BUGGY))
def test_a_thread_level_root_in_a_cluster_lights_both_blocks(name):
    # the blocks of a cluster run at once: a failure in one (`mismatched_shapes` goes out
    # of bounds) stopped the other before or after its threads' requests, and the
    # root lit block (0), block (1) or both
    _check_runs(name, "cluster2", "partial_collective", _cells(1, [(0,), (1,)], 2),
                num_threads=2)


_TWO_DEVICES = """
import json, sys
from pallas_viz.examples import shapes as sh
shape, warps_in, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
for name in sys.argv[4:]:
    for _ in range(runs):
        fn, args = sh.launch(sh.BUGGY[name], shape, num_threads=2, warps_in=warps_in)
        tr, _ = sh.run_traced(fn, args, timeout_s=10)
        print(json.dumps([name, [[f.kind, f.source.line if f.source else None,
                                  sorted([d, list(b), t] for d, b, t in f.cells)]
                                 for f in tr.findings]]), flush=True)
"""


def _two_devices(shape: str, warps_in: str, names: list[str]) -> dict[str, list]:
    """name -> the roots of each of `RUNS` runs on two devices (a process of its own)."""
    import os

    env = dict(os.environ, **sh.TWO_DEVICES_ENV)
    proc = subprocess.run([sys.executable, "-c", _TWO_DEVICES, shape, warps_in, str(RUNS),
                           *names], env=env, capture_output=True, text=True, timeout=300)
    out: dict[str, list] = {n: [] for n in names}
    for line in proc.stdout.splitlines():
        if line.startswith("["):
            name, roots = json.loads(line)
            out[name].append(roots)
    assert all(len(v) == RUNS for v in out.values()), proc.stdout[-2000:] + proc.stderr[-3000:]
    return out


@pytest.mark.skipif(jax.__version__.startswith("0.11."), reason=(
    "JAX 0.11's interpreter raises a two-device kernel's failure again in the next kernel "
    "the process runs, so one process cannot run several failing kernels"))
@pytest.mark.parametrize("shape,warps_in,kind,names", [
    ("two_devices", "no_grid", "partial_collective",
     ["mismatched_shapes", "barrier_in_branch", "collective_in_branch"]),
    ("warp_mesh", "two_devices", "warp_allocation",
     ["mismatched_shapes", "collective_in_loop", "barrier_in_branch"]),
])
def test_a_root_on_two_devices_lights_both_devices(shape, warps_in, kind, names):
    # each device runs the kernel at once: a failure on one stopped the other, and the
    # root lit device 0, device 1 or both (`mismatched_shapes`: never both in 8 runs)
    want = [[d, [], t] for d in range(2) for t in range(2)]
    for name, runs in _two_devices(shape, warps_in, names).items():
        for roots in runs:
            assert roots == [[kind, sh.ALLOC_LINE[name], want]], (name, runs)
