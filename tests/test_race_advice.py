"""Race findings between blocks get advice a block's barrier cannot contradict.

A barrier (`plgpu.barrier_arrive` / `plgpu.barrier_wait`) orders the threads of one
block; the blocks of one cluster are ordered by a cluster barrier only and the blocks
of different grid points by nothing. So a race between blocks must not be told to "put
a barrier between the write and the other thread's access". Real kernels in GPU
interpret mode (`pallas_viz.examples.races`), 3 runs each (interleavings vary), in the
launch shapes with more than one block: a grid (`plgpu.kernel`), a cluster, `core_map`
over a `plgpu.Mesh` with a grid, two devices (own process), and `pallas_call`. A kernel
without a grid has one block: no race between blocks there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl

from pallas_viz.analysis import races as analysis
from pallas_viz.examples import races as ex
from pallas_viz.examples import shapes as sh

RUNS = 3
LINE = sh.marked_line(ex._every_block_writes_all, "SAME_OUTPUT")
# the two sides in grid order, whichever access JAX checked second
SIDES = (f"write by block (0) thread 0 at line {LINE} is not ordered with the write by "
         f"block (1) thread 0 at line {LINE}")
GRID_MESSAGE = (f"data race on GMEM buffer (8, 128) float32: {SIDES}: blocks (0) and (1) "
                f"are different blocks of the grid, which run concurrently and which no "
                f"barrier orders")
CLUSTER_TAIL = (": blocks (0) and (1) are blocks of one cluster, which a block's own "
                "barrier does not order")
SMEM_MESSAGE = (
    "data race on SMEM buffer (8, 128) float32: write by block (1) thread 0 is not ordered "
    "with the write by block (0) thread 0. On a GPU each block has its own SMEM: these "
    "accesses are to the one copy of a kernel-level SMEM buffer that GPU interpret mode "
    "shares among the blocks of the grid")
BARRIER_ADVICE = "put a barrier between the write and the other thread's access"


def _races(tr):
    return [f for f in tr.findings if f.kind == "race"]


def _run(builder, shape, detect_races=True):
    fn, args = builder(shape)
    tr, _ = sh.run_traced(fn, args, detect_races=detect_races)
    return tr


def test_hints_name_the_right_orderings():
    assert analysis.GRID_RACE_HINT == (
        "Different blocks of the grid run concurrently on a GPU, in any order, and no barrier "
        "orders them (`plgpu.barrier_arrive` / `plgpu.barrier_wait` order the threads of one "
        "block, a `plgpu.ClusterBarrier` the blocks of one cluster): give each block its own "
        "part of the buffer, e.g. the output rows of its grid index (`jax.lax.axis_index` of "
        "the grid axis), or let a single block write it.")
    assert "plgpu.ClusterBarrier(collective_axes=...)" in analysis.CLUSTER_RACE_HINT
    assert "axis_index` of the cluster axis" in analysis.CLUSTER_RACE_HINT
    for hint in (analysis.GRID_RACE_HINT, analysis.CLUSTER_RACE_HINT,
                 analysis.BLOCK_RACE_HINT, analysis.SHARED_SMEM_HINT):
        assert BARRIER_ADVICE not in hint


@pytest.mark.parametrize("shape", ["grid", "core_map"])
def test_blocks_of_a_grid_writing_one_output(shape):
    """Thread 0 of each grid block writes the whole GMEM output: no barrier can order
    blocks of different grid points, so the advice is a part of the output per block."""
    for _ in range(RUNS):
        tr = _run(ex.blocks_write_same_output, shape)
        (f,) = _races(tr)
        assert tr.findings == [f], tr.summary()
        assert f.severity == "error" and f.cells == [(0, (0,), 0), (0, (1,), 0)]
        assert f.message == GRID_MESSAGE, f.message
        assert f.suggestion == analysis.GRID_RACE_HINT
        assert BARRIER_ADVICE not in f.suggestion
        assert f.source.line == LINE
        summary = tr.summary()
        assert "are different blocks of the grid" in summary
        assert "give each block its own part of the buffer" in summary
        assert BARRIER_ADVICE not in summary


def test_blocks_of_one_cluster_writing_one_output():
    """cluster=(2,): the blocks run at once; a cluster barrier could order them, a
    block's own barrier cannot."""
    for _ in range(RUNS):
        tr = _run(ex.blocks_write_same_output, "cluster")
        (f,) = _races(tr)
        assert tr.findings == [f], tr.summary()
        assert f.cells == [(0, (0,), 0), (0, (1,), 0)]
        head = "data race on GMEM buffer (8, 128) float32: "
        assert f.message == head + SIDES + CLUSTER_TAIL, f.message
        assert f.suggestion == analysis.CLUSTER_RACE_HINT
        assert BARRIER_ADVICE not in f.suggestion


@pytest.mark.parametrize("shape", ["grid", "cluster", "core_map"])
def test_the_advised_fix_is_race_free(shape):
    """Each block writes its own rows (the advice): JAX reports no race."""
    for _ in range(RUNS):
        tr = _run(ex.blocks_write_own_rows, shape)
        assert tr.findings == [] and tr.failure is None, tr.summary()


def test_pallas_call_blocks_share_the_interpreters_smem_copy():
    """GPU interpret mode keeps one SMEM copy of a pallas_call's operands for the whole
    grid: JAX reports its grid points' accesses to it (the interpreter's own copy into it,
    no kernel line). The finding says that on a GPU each block has its own SMEM."""
    for _ in range(RUNS):
        tr = _run(ex.blocks_write_same_output, "pallas_call")
        (f,) = _races(tr)
        assert f.cells == [(0, (0,), 0), (0, (1,), 0)]
        # JAX 0.12 stops the run on it (0.11 logs it): the message says so when it did
        stopped = (": JAX's race detection stopped the run there, so the blocks after it "
                   "did not run and were not checked") if tr.failure is not None else ""
        assert f.message == SMEM_MESSAGE + stopped, f.message
        assert f.severity == "warning"
        assert f.suggestion == analysis.SHARED_SMEM_HINT
        assert f.suggestion.startswith("Not a race in the kernel's code: on a GPU every "
                                       "block has its own SMEM.")
        assert "run it with a grid of one block" in f.suggestion
        assert BARRIER_ADVICE not in f.suggestion


def test_race_within_one_block_keeps_the_barrier_advice():
    from pallas_viz.examples import unsynchronized_handoff

    for _ in range(RUNS):
        fn, args = unsynchronized_handoff()
        tr, _ = sh.run_traced(fn, args, detect_races=True)
        (f,) = _races(tr)
        assert f.suggestion == analysis.RACE_HINT
        assert "blocks" not in f.message


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "cluster2", "core_map_grid"])
def test_a_race_within_one_block_reads_the_same_every_run(shape):
    # the blocks of a cluster run at once: JAX catches the race in either block, run to
    # run; the message leaves the block to the cells
    call = sh.marked_line(both_threads_store, "CALL")
    seen = set()
    for _ in range(4):
        fn, args = sh.launch(both_threads_store, shape)
        tr, _ = sh.run_traced(fn, args, detect_races=True)
        (f,) = _races(tr)
        assert f.message == (
            f"data race on SMEM buffer (8, 128) float32: write by w 0 at line {f.source.line} "
            f"is not ordered with the write by w 1 at line {f.source.line}"), f.message
        assert f.source.via.line == call and f.suggestion == analysis.RACE_HINT
        # (its cells: the block or blocks JAX caught it in, which varies by run)
        assert {t for *_, t in f.cells} == {0, 1}
        seen.add(f.message)
    assert len(seen) == 1, seen


def both_threads_store(ctx, x_ref, o_ref):
    """Both threads write one SMEM buffer through a helper (the harness's `ctx.store`),
    with nothing between the writes."""

    def scoped(buf):
        ctx.store(buf, x_ref[...])  # CALL

    pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32), collective_axes=ctx.axis)


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "core_map"])
def test_a_race_in_a_helper_names_the_call_that_led_there(shape):
    """JAX keeps only a one-frame summary of the earlier access: its whole location (the
    helper's line and the kernel's call of it) is pallas_viz's own record, so the race
    names the call whichever thread's access leads (the first in grid order)."""
    call = sh.marked_line(both_threads_store, "CALL")
    for _ in range(RUNS):
        fn, args = sh.launch(both_threads_store, shape)
        tr, _ = sh.run_traced(fn, args, detect_races=True)
        (f,) = _races(tr)
        assert f.source.function == "Ctx.store", f.source
        assert f.source.via is not None and f.source.via.line == call, f.source


def _reanalysed(tr, races):
    from pallas_viz.analysis import AnalysisContext

    return analysis.analyse_races(AnalysisContext(table=tr.events, kernels=tr.kernels,
                                                  failure=tr.failure, races=races))


def test_records_without_the_grid_point_fall_back():
    """Each access's grid point is recorded with the race. Records without it (a trace
    saved before) tell grid points apart by the kernel's one block per cluster, and else
    name both orderings; an untrusted value is ignored, not fatal."""
    import copy

    for shape, hint in (("grid", analysis.GRID_RACE_HINT),
                        ("cluster", analysis.BLOCK_RACE_HINT)):
        tr = _run(ex.blocks_write_same_output, shape)
        (r,) = tr.meta["races"]
        assert r["access"]["grid"] == ([1] if shape == "grid" else [])
        assert r["other"]["grid"] == ([0] if shape == "grid" else [])
        key = lambda fs: [(f.message, f.suggestion, f.cells) for f in fs]  # noqa: E731
        assert key(_reanalysed(tr, [r])) == key(_races(tr))
        old = copy.deepcopy(r)
        del old["access"]["grid"], old["other"]["grid"]
        (f,) = _reanalysed(tr, [old])
        assert f.suggestion == hint and BARRIER_ADVICE not in f.suggestion
        if shape == "cluster":
            assert f.message.endswith(": blocks (0) and (1) run concurrently and a block's "
                                      "barrier does not order them")
        old["access"]["grid"] = "x"
        (f,) = _reanalysed(tr, [old])
        assert f.suggestion == hint


_TWO_DEVICES = """
import json, sys
import jax
from pallas_viz.examples import races, shapes
out = []
for _ in range({runs}):
    fn, args = races.{builder}("two_devices")
    tr, _ = shapes.run_traced(fn, args, detect_races=True)
    shapes.drain_effects()
    out.append([[f.kind, [list(map(lambda x: x if not isinstance(x, tuple) else list(x), c))
                          for c in f.cells], f.message, f.suggestion] for f in tr.findings])
print(json.dumps(out), flush=True)
"""


def _two_devices(builder):
    env = dict(os.environ, **sh.TWO_DEVICES_ENV)
    proc = subprocess.run([sys.executable, "-c", _TWO_DEVICES.format(runs=RUNS,
                                                                     builder=builder)],
                          env=env, capture_output=True, text=True, timeout=300)
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("[")), None)
    assert line is not None, proc.stderr[-4000:]
    return json.loads(line)


def test_two_devices_each_device_has_its_blocks_race():
    """A grid of 2 on each of 2 devices (shard_map): each device's blocks race on that
    device's output; the race is between blocks of one device, never across devices."""
    for findings in _two_devices("blocks_write_same_output"):
        assert findings, "no race reported"
        devices = set()
        for kind, cells, message, suggestion in findings:
            assert kind == "race"
            # (the same race on both devices reads the same: one finding, each device's
            # pair of blocks in its cells)
            for d in {c[0] for c in cells}:
                devices.add(d)
                assert [c for c in cells if c[0] == d] == [[d, [0], 0], [d, [1], 0]], cells
            assert message == GRID_MESSAGE
            assert suggestion == analysis.GRID_RACE_HINT
    fixed = _two_devices("blocks_write_own_rows")
    assert fixed == [[]] * RUNS


@pytest.mark.parametrize("shape", ["grid", "cluster"])
def test_a_race_on_a_kernel_operand_saves_and_loads(shape, tmp_path):
    """The failure's event sits in the block that wrote the (kernel-level) output: the
    file loads, with the same root (it was refused as 'kernel-level in one event and in a
    block in the other')."""
    import pallas_viz as pv

    tr = _run(ex.blocks_write_same_output, shape)
    if tr.failure is not None:  # JAX 0.12 stops the run on the race (0.11 logs it)
        assert any(e.op == "error" and e.block is not None and e.memory_space == "GMEM"
                   for e in tr.events)
    assert [f.kind for f in tr.findings] == ["race"]
    path = str(tmp_path / "race.json")
    tr.save(path)
    back = pv.load(path)
    assert [(f.kind, f.message, f.suggestion) for f in back.findings] == [
        (f.kind, f.message, f.suggestion) for f in tr.findings]
