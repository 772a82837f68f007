"""Every kernel the project calls clean stays clean under JAX's race detection.

`pv.trace(detect_races=True)` (`pallas-viz run --races`) turns JAX's race reports into `race`
findings. The clean corpus (`examples.corpus.CLEAN_KERNELS`), the clean bodies of the
launch-shape harness (`examples.shapes.CLEAN`) in every launch shape they run in, and the
demo's clean kernels (`examples.kernels.clean_collective`, `hoisted_collective`: the fix of
the demo's bug) must give no finding at all there: the blocks of a grid or a cluster run
concurrently on a GPU, so each writes its own rows of the output, and a thread's write is
ordered with the other threads' accesses (a barrier, or a single writer).

Listed exceptions, each with its reason: the `pallas_call` kernels with a grid, on which JAX
reports a race that is GPU interpret mode's own (`SHARED_SMEM_RACES`), and one real kernel
of `jax.experimental.pallas.ops.gpu` that fails the interpreter's kernel-end check that only
race detection makes (`RACE_MODE_FAILURES`). "two_devices" runs in a subprocess with 2 CPU
devices (`shapes.TWO_DEVICES_ENV`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

import pallas_viz as pv
from pallas_viz.analysis.races import SHARED_SMEM_HINT
from pallas_viz.examples import corpus, kernels, shapes

# GPU interpret mode runs a `pallas_call`'s grid points one after another on ONE copy of its
# SMEM operands and scratch (whole-array blocks are the only BlockSpec it supports, and it
# fixes every grid point's program id to 0, so a block cannot pick its own rows), resetting
# the clocks between them: JAX reports the grid points' accesses to that copy as a race. On
# a GPU every block has its own SMEM: not the kernel's race. The `race` finding says so
# (`SHARED_SMEM_HINT`). Kernel name (corpus) or (body, shape) (harness) -> reason.
_SHARED_SMEM_WHY = ("pallas_call with grid=(2,): GPU interpret mode shares one SMEM copy of "
                    "the operands among the grid points (the interpreter's race, not the "
                    "kernel's)")
SHARED_SMEM_RACES: dict[object, str] = {
    "pallas_call_scratch": _SHARED_SMEM_WHY + "; and of the kernel-level scratch",
    "pallas_call_run_scoped": _SHARED_SMEM_WHY,
    "hoisted_collective_pallas_call": _SHARED_SMEM_WHY,
    "plain_copy_pallas_call": _SHARED_SMEM_WHY,
    **{(body, "pallas_call"): _SHARED_SMEM_WHY for body in shapes.CLEAN},
}

# Findings other than races that only race detection brings out, in kernels pallas_viz does
# not own: name -> (finding kind, text of its message, reason).
RACE_MODE_FAILURES: dict[str, tuple[str, str, str]] = {
    "ops_blackwell_matmul": (
        "interpreter_error", "was never awaited",
        "jax.experimental.pallas.ops.gpu.blackwell_matmul_mgpu's epilogue awaits its last "
        "copy_smem_to_gmem with wait_smem_to_gmem(1, wait_read_only=True) only; with "
        "detect_races the interpreter checks that every copy's SMEM reads completed when a "
        "thread finishes the kernel (shared_memory.kernel_thread_finished) and raises. No race."),
}

# (body, shape) pairs of the harness that are not clean kernels at all, so not checked here.
NOT_CLEAN: dict[tuple[str, str], str] = {
    **{(body, "warp_mesh"): "allocates inside warp-level code: the documented "
       "`warp_allocation` bug (see `shapes`, tests/test_warp_allocations.py)"
       for body in ("hoisted_collective", "hoisted_barrier")},
    # the interpreter's end-of-kernel barrier check sees every device's memory: one device
    # finishing while the other still holds its barrier fails at random (see `corpus`)
    ("hoisted_barrier", "two_devices"): "barriers on two devices fail the interpreter's "
    "end-of-kernel check at random (~1 run in 5), whatever the kernel",
}

# What each clean body writes to the output, from the input x.
OUTPUT = {"hoisted_collective": lambda x: x * 2.0, "hoisted_barrier": lambda x: x + 1.0,
          "plain_copy": lambda x: x * 2.0}

IN_PROCESS_SHAPES = [s for s in shapes.SHAPES if s != "two_devices"]
PAIRS = [(b, s) for b in shapes.CLEAN for s in IN_PROCESS_SHAPES if (b, s) not in NOT_CLEAN]
TWO_DEVICE_BODIES = [b for b in shapes.CLEAN if (b, "two_devices") not in NOT_CLEAN]


def _run(fn, args):
    """``fn(*args)`` traced with race detection: (trace, output or None if it failed)."""
    shapes.drain_effects()
    out = None
    with pv.trace(raise_errors=False, timeout_s=60, detect_races=True) as tr:
        try:
            out = jax.block_until_ready(fn(*args))
        except Exception:  # noqa: BLE001 - the trace has the failure and its finding
            out = None
    return tr, out


def _describe(tr) -> str:
    return "\n".join(f"{f.kind} at line {f.source.line if f.source else None}: {f.message}"
                     for f in tr.findings) or "no findings"


def _assert_clean(tr):
    races = [f for f in tr.findings if f.kind == "race"]
    assert races == [], _describe(tr)
    assert tr.findings == [] and tr.failure is None, _describe(tr)
    assert not tr.meta.get("races") and not tr.meta.get("deadlocks"), tr.meta.get("races")
    assert len(tr.events) > 0


def _assert_shared_smem_races(tr):
    """Only the interpreter's shared-SMEM race of a `pallas_call` grid, said to be its own."""
    assert tr.findings, "JAX no longer reports the shared SMEM copy: drop the exception"
    for f in tr.findings:
        assert f.kind == "race" and f.suggestion == SHARED_SMEM_HINT, _describe(tr)
        # the interpreter's, not the kernel's: a warning (a correct kernel does not fail
        # `pallas-viz run --races` or `--pallas-viz-fail-on=error`), never called clean
        assert f.severity == "warning", f
        if tr.failure is not None:
            assert "race detection stopped the run there" in f.message, f.message
        assert "SMEM" in f.message and "GPU interpret mode shares" in f.message, f.message
    assert not tr.errors


def _corpus_param(name):
    marks = [pytest.mark.slow] if name in corpus.SLOW else []
    return pytest.param(name, marks=marks, id=name)


IN_PROCESS_CORPUS = [n for n in corpus.CLEAN_KERNELS if n not in corpus.NEEDS_TWO_DEVICES]


def test_the_exceptions_name_real_kernels():
    for key in SHARED_SMEM_RACES:
        if isinstance(key, str):
            assert key in corpus.CLEAN_KERNELS and "pallas_call" in key, key
        else:
            assert key[0] in shapes.CLEAN and key[1] == "pallas_call", key
    assert all("pallas_call" not in n or n in SHARED_SMEM_RACES for n in corpus.CLEAN_KERNELS)
    assert set(RACE_MODE_FAILURES) <= set(corpus.CLEAN_KERNELS)
    assert all(why for why in (*SHARED_SMEM_RACES.values(), *NOT_CLEAN.values()))


@pytest.mark.parametrize("name", [_corpus_param(n) for n in IN_PROCESS_CORPUS])
def test_clean_corpus_kernel_has_no_race(name):
    fn, args = corpus.CLEAN_KERNELS[name]()
    tr, _ = _run(fn, args)
    if name in SHARED_SMEM_RACES:
        _assert_shared_smem_races(tr)
    elif name in RACE_MODE_FAILURES:
        kind, text, _why = RACE_MODE_FAILURES[name]
        assert [f.kind for f in tr.findings] == [kind], _describe(tr)
        assert text in tr.findings[0].message and not tr.meta.get("races")
    else:
        _assert_clean(tr)


@pytest.mark.parametrize("body,shape", PAIRS, ids=[f"{b}-{s}" for b, s in PAIRS])
def test_clean_body_has_no_race_in_its_launch_shape(body, shape):
    fn, args = shapes.launch(shapes.CLEAN[body], shape)
    tr, out = _run(fn, args)
    if (body, shape) in SHARED_SMEM_RACES:
        _assert_shared_smem_races(tr)
        return
    _assert_clean(tr)
    # each block writes its own rows: together, the whole output, as before
    np.testing.assert_array_equal(np.asarray(out), np.asarray(OUTPUT[body](args[0])))


@pytest.mark.parametrize("num_threads", [1, 4])
def test_warp_code_has_no_race_with_other_warpgroups(num_threads):
    """In "warp_mesh" every warpgroup has a warp 0: only warpgroup 0's writes."""
    fn, args = shapes.launch(shapes.plain_copy, "warp_mesh", num_threads=num_threads)
    tr, out = _run(fn, args)
    _assert_clean(tr)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(args[0]) * 2.0)


@pytest.mark.parametrize("warps_in", ["grid3", "cluster2"])
def test_warp_code_in_a_grid_or_a_cluster_has_no_race_between_blocks(warps_in):
    """Warp code in a launch of several blocks: each block's warp 0 writes its own rows."""
    fn, args = shapes.launch(shapes.plain_copy, "warp_mesh", warps_in=warps_in)
    tr, out = _run(fn, args)
    _assert_clean(tr)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(args[0]) * 2.0)


@pytest.mark.parametrize("grid", [(), (1,), (2,), (3,), (8,), (2, 2)], ids=str)
@pytest.mark.parametrize("name", ["clean_collective", "hoisted_collective"])
def test_the_demos_clean_kernels_have_no_race(name, grid):
    """`hoisted_collective` is the fix of the demo's bug (`pallas-viz demo`), grid (2,) by
    default; `clean_collective` the clean two-thread kernel."""
    fn, args = getattr(kernels, name)(grid=grid)
    tr, out = _run(fn, args)
    _assert_clean(tr)
    x = np.asarray(args[0])
    expected = x + 1.0 if name == "clean_collective" else x * 2.0
    np.testing.assert_array_equal(np.asarray(out), expected)


def test_the_demos_bug_has_its_one_root_under_race_detection():
    """Fixing the one mistake of `collective_in_branch` fixes everything: its blocks write
    their own rows too, so race detection adds no root of its own."""
    fn, args = kernels.collective_in_branch()
    tr, _ = _run(fn, args)
    assert [f.kind for f in tr.findings] == ["partial_collective"], _describe(tr)
    fixed, _ = _run(*kernels.hoisted_collective())
    d = pv.diff(tr, fixed)
    assert [f.kind for f in d.fixed] == ["partial_collective"] and not d.new, d.summary()


# --------------------------------------------------------------------------- two devices

_TWO_DEVICES = """
import json, sys
import jax
assert jax.device_count() >= 2, jax.devices()
import numpy as np
from pallas_viz.examples import corpus, shapes
names, bodies = sys.argv[1].split(","), sys.argv[2].split(",")
runs = [(n, corpus.CLEAN_KERNELS[n]) for n in names]
runs += [(b, lambda b=b: shapes.launch(shapes.CLEAN[b], "two_devices")) for b in bodies]
for name, build in runs:
    fn, args = build()
    tr, _ = shapes.run_traced(fn, args, timeout_s=60, detect_races=True)
    out = np.asarray(fn(*args))
    print(json.dumps({"name": name, "findings": [[f.kind, f.message] for f in tr.findings],
                      "failure": tr.failure is not None, "events": len(tr.events),
                      "races": len(tr.meta.get("races") or []),
                      "out": float(out.sum())}),
          flush=True)
print(json.dumps({"done": True}), flush=True)
"""


@pytest.fixture(scope="module")
def two_device_rows():
    env = dict(os.environ, **shapes.TWO_DEVICES_ENV)
    proc = subprocess.run(
        [sys.executable, "-c", _TWO_DEVICES, ",".join(sorted(corpus.NEEDS_TWO_DEVICES)),
         ",".join(TWO_DEVICE_BODIES)],
        env=env, capture_output=True, text=True, timeout=300)
    rows = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert rows and rows[-1] == {"done": True}, proc.stderr[-3000:]
    return {r["name"]: r for r in rows[:-1]}


def test_two_devices_clean_kernels_have_no_race(two_device_rows):
    assert set(two_device_rows) == set(corpus.NEEDS_TWO_DEVICES) | set(TWO_DEVICE_BODIES)
    for name, r in two_device_rows.items():
        assert r["findings"] == [] and not r["failure"] and r["races"] == 0, (name, r)
        assert r["events"] > 0, (name, r)
    for body in TWO_DEVICE_BODIES:  # each device's output, as before
        got = two_device_rows[body]["out"]
        expected = float(np.asarray(OUTPUT[body](np.asarray(shapes._x()))).sum())
        assert got == pytest.approx(expected), (body, got, expected)
