"""A thread arrives at a barrier twice before it waits on it.

Thread 0 arrives twice at a one-arrival barrier, then waits: the second arrival
completes the next phase before any thread waited on the barrier, and JAX stops the
run there ("Barrier completed phase 1, but no threads observed phase 0"). The root is
the first arrival, and its message must not speak of "the threads waiting on the
barrier": none had waited (in pallas_call, whose blocks have one thread, none could).
Whether another thread had waited when a run stops varies with the interleaving, so
the message says what the kernel failed to order, in words true in every run.
"""

from __future__ import annotations

import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from roots_util import assert_stays_clean, single_error_root

from pallas_viz.analysis.barriers import ORDER_HINT
from pallas_viz.examples import shapes as sh

RUNS = 3
# every shape with barriers (warp-level code cannot allocate one; two devices aside)
SHAPES = ["no_grid", "grid1", "grid3", "cluster2", "core_map", "core_map_grid", "tmem",
          "pallas_call"]


def arrive_twice_then_wait(ctx, x_ref, o_ref):
    def scoped(bar):
        @pl.when(ctx.thread == 0)
        def _():
            plgpu.barrier_arrive(bar)  # FIRST
            plgpu.barrier_arrive(bar)  # SECOND
            plgpu.barrier_wait(bar)

        sh.store_block_rows(ctx, o_ref, x_ref[...])

    pl.run_scoped(scoped, plgpu.Barrier(num_arrivals=1), collective_axes=ctx.axis)  # ALLOC


def wait_between(ctx, x_ref, o_ref):
    """The fix: wait for each phase before arriving for the next."""
    def scoped(bar):
        @pl.when(ctx.thread == 0)
        def _():
            plgpu.barrier_arrive(bar)
            plgpu.barrier_wait(bar)
            plgpu.barrier_arrive(bar)
            plgpu.barrier_wait(bar)

        sh.store_block_rows(ctx, o_ref, x_ref[...])

    pl.run_scoped(scoped, plgpu.Barrier(num_arrivals=1), collective_axes=ctx.axis)


FIRST = sh.marked_line(arrive_twice_then_wait, "FIRST")
SECOND = sh.marked_line(arrive_twice_then_wait, "SECOND")
ALLOC = sh.marked_line(arrive_twice_then_wait, "ALLOC")


@pytest.mark.parametrize("shape", SHAPES)
def test_second_arrival_before_any_wait(shape):
    who = "block (0)" if shape == "pallas_call" else "w 0"
    seen = set()
    for _ in range(RUNS):
        tr, root = single_error_root(arrive_twice_then_wait, shape)
        assert root.kind == "barrier_misuse" and root.source.line == FIRST, tr.summary()
        assert (f"phase 0 of the barrier allocated at line {ALLOC} completed (arrivals: "
                f"{who} at line {FIRST}) and the next phase completed after it (at line "
                f"{SECOND}), with nothing making that arrival wait until it had been "
                "observed") in root.message, root.message
        assert "threads waiting on the barrier" not in root.message
        assert root.suggestion == ORDER_HINT
        assert {t for _, _, t in root.cells} == {0}
        assert [c.kind for c in root.consequences] == ["interpreter_error"], tr.summary()
        seen.add((root.source.line, root.message, root.suggestion))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("shape", SHAPES)
def test_waiting_between_arrivals_stays_clean(shape):
    assert_stays_clean(wait_between, shape)
