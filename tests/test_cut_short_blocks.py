"""Kernels cut short: what the threads that finished the body did not request, they never
will, so it is judged even though the run stopped.

A kernel that fails in a later block: the blocks that ran to their end are still judged.

Grid steps run one after another. When a thread of block 0 alone makes a collective
barrier, block 0 still finishes, leaving the barrier stranded, and a later block then
fails on the shifted allocation ids. Block 0's threads all finished the body, so what
they did not request they never would: the stranded barrier is the root cause, at its
line, and the later block's interpreter error folds under it. (The old rule excused
every block of a kernel that failed anywhere, and reported only the interpreter's error,
at an innocent line that changed from run to run.)

A block that deadlocks after thread 0 skipped a collective scope (`skipped_by_thread0`):
the block never finishes, but thread 0 did, without requesting the scope's operands. The
scope under the branch is the root cause, at its line, with the branch; the deadlock and
the wait that can never end fold under it. (The old rule excused the whole block: the
deadlock was the root, at the wait's line, its advice about the allocation two lines
away, and no branch named.)
"""

from __future__ import annotations

import inspect

import jax.numpy as jnp
import pytest
import two_devices_roots
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from roots_util import single_error_root

from pallas_viz.examples import shapes as sh

RUNS = 3
# launch shapes with several blocks one after another, and one block for comparison
SHAPES = ["grid3", "core_map_grid", "no_grid"]


def stranded_barrier(ctx, x_ref, o_ref):
    """The last thread alone allocates a collective barrier inside a shared buffer's scope."""
    k = sh.last_thread(ctx)

    def main(buf):
        @pl.when(ctx.thread == k)  # BRANCH
        def _():
            pl.run_scoped(lambda bar: None, plgpu.Barrier(num_arrivals=1),  # ALLOC
                          collective_axes=ctx.axis)

        @pl.when(ctx.thread == 0)
        def _():
            ctx.store(buf, x_ref[...] + 1.0)
            sh.store_block_rows(ctx, o_ref, ctx.load(buf, sh.SHAPE[0]))

    pl.run_scoped(main, ctx.smem(sh.SHAPE, jnp.float32), collective_axes=ctx.axis)


LINES = sh.lines(stranded_barrier)


@pytest.mark.parametrize("num_threads", [2, 4])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_later_block_failing_keeps_the_finished_blocks_root(shape, num_threads):
    seen = set()
    failed = 0
    for _ in range(RUNS):
        tr, root = single_error_root(stranded_barrier, shape, num_threads=num_threads)
        assert root.kind == "partial_collective", tr.summary()
        assert root.source.line == LINES.alloc[0]
        assert root.branch is not None and root.branch.line == LINES.branch[0]
        assert {c[1] for c in root.cells} == ({()} if shape == "no_grid" else {(0,)})
        # the interpreter's error, wherever it struck, is a consequence of this root
        if tr.failure is not None:
            failed += 1
            kinds = [c.kind for c in root.consequences]
            assert "interpreter_error" in kinds, tr.summary()
        seen.add((root.kind, root.source.line, root.branch.line, root.message))
    assert len(seen) == 1, seen
    if shape != "no_grid":
        # (the point of the test: a grid's later block did fail on these runs)
        assert failed == RUNS


@pytest.mark.slow
@pytest.mark.parametrize("num_threads", [2, 4])
def test_the_stranded_barrier_on_two_devices(num_threads):
    # each device runs the one block; the root is the same on both, at the allocation
    kind, line, message = two_devices_roots.one_root(
        "test_cut_short_blocks", "stranded_barrier", num_threads, RUNS)
    assert kind == "partial_collective" and line == LINES.alloc[0], message


def skipped_by_thread0(ctx, x_ref, o_ref):
    """`hoisted_barrier` (thread 0 arrives, thread 1 waits, on a barrier of their scope)
    under a branch thread 0 skips."""

    @pl.when(ctx.thread != 0)  # BRANCH
    def _():
        sh.hoisted_barrier(ctx, x_ref, o_ref)  # CALL


SKIPPED_BRANCH = sh.marked_line(skipped_by_thread0, "BRANCH")
SKIPPED_CALL = sh.marked_line(skipped_by_thread0, "CALL")
SKIPPED_ALLOC = sh.lines(sh.hoisted_barrier).alloc[0]
_LINES, _FIRST = inspect.getsourcelines(sh.hoisted_barrier)
WAIT_LINE = _FIRST + next(i for i, t in enumerate(_LINES) if "plgpu.barrier_wait(bar)" in t)
SKIPPED_SHAPES = ["no_grid", "grid1", "grid3", "core_map", "core_map_grid", "cluster2", "tmem"]


@pytest.mark.parametrize("num_threads", [2, 4])
@pytest.mark.parametrize("shape", SKIPPED_SHAPES)
def test_a_block_that_deadlocks_is_judged_by_the_threads_that_finished(shape, num_threads):
    seen = set()
    for _ in range(RUNS):
        tr, root = single_error_root(skipped_by_thread0, shape, num_threads=num_threads)
        assert root.kind == "partial_collective", tr.summary()
        assert (root.source.file, root.source.line) == (sh.__file__, SKIPPED_ALLOC)
        assert root.source.via is not None and root.source.via.line == SKIPPED_CALL
        assert root.branch is not None and root.branch.line == SKIPPED_BRANCH
        assert "hoist it out of the thread-dependent branch" in root.suggestion
        assert (0 in {t for _, _, t in root.cells}), root.cells  # the thread that skipped
        kinds = {c.kind: c for c in root.consequences}
        assert "deadlock" in kinds and kinds["deadlock"].source.line == WAIT_LINE, tr.summary()
        seen.add((root.kind, root.source.line, root.branch.line, root.message))
    assert len(seen) == 1, seen


@pytest.mark.slow
def test_the_skipped_scope_on_two_devices():
    kind, line, message = two_devices_roots.one_root(
        "test_cut_short_blocks", "skipped_by_thread0", 2, RUNS)
    assert kind == "partial_collective" and line == SKIPPED_ALLOC, message
