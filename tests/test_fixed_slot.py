"""A two-slot ring whose producer signals a fixed slot (`full.at[0]`, not `full.at[s]`).

Every phase the producer completes lands in slot 0, so a phase of slot 0 completes
before the consumer observed the one before it (JAX stops the run: "Barrier completed
phase 1, but no threads observed phase 0"), and slot 1's phases never complete: the
consumer waits on `full.at[1]` while the producer waits on `empty.at[1]`. Which of the
two a run shows first varies with the interleaving; the root is the arrival's line in
every run, its advice names the fixed slot, and the deadlock on the other slot (when a
run gets that far) is folded under it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from roots_util import assert_stays_clean, single_error_root

from pallas_viz.analysis.barriers import ORDER_HINT
from pallas_viz.examples import shapes as sh

RUNS = 3
# every shape a two-thread ring can be written in (warp-level code cannot allocate a
# barrier; pallas_call's blocks have one thread)
SHAPES = ["no_grid", "grid1", "grid3", "cluster2", "core_map", "core_map_grid", "tmem"]


def _ring(ctx, x_ref, o_ref, fixed: bool):
    def scoped(buf, acc, full, empty):
        def produce(i, c):
            s = i % 2

            @pl.when(i >= 2)
            def _():
                plgpu.barrier_wait(empty.at[s])

            buf[s] = x_ref[...] + i.astype(jnp.float32)
            if fixed:
                plgpu.barrier_arrive(full.at[0])  # FIXED
            else:
                plgpu.barrier_arrive(full.at[s])
            return c

        def consume(i, c):
            s = i % 2
            plgpu.barrier_wait(full.at[s])
            acc[...] += buf[s]

            @pl.when(i + 2 < 4)  # (only the slots the producer waits for again)
            def _():
                plgpu.barrier_arrive(empty.at[s])
            return c

        @pl.when(ctx.thread == 0)
        def _():
            jax.lax.fori_loop(0, 4, produce, 0)

        @pl.when(ctx.thread == 1)
        def _():
            acc[...] = jnp.zeros(sh.SHAPE, jnp.float32)
            jax.lax.fori_loop(0, 4, consume, 0)
            sh.store_block_rows(ctx, o_ref, acc[...])

    pl.run_scoped(scoped, plgpu.SMEM((2,) + sh.SHAPE, jnp.float32),  # ALLOC
                  plgpu.SMEM(sh.SHAPE, jnp.float32),
                  plgpu.Barrier(num_arrivals=1, num_barriers=2),
                  plgpu.Barrier(num_arrivals=1, num_barriers=2), collective_axes=ctx.axis)


def fixed_slot(ctx, x_ref, o_ref):
    _ring(ctx, x_ref, o_ref, fixed=True)


def slot_by_index(ctx, x_ref, o_ref):
    """The fix: signal the slot the iteration filled."""
    _ring(ctx, x_ref, o_ref, fixed=False)


FIXED = sh.marked_line(_ring, "FIXED")
ALLOC = sh.marked_line(_ring, "ALLOC")


@pytest.mark.parametrize("shape", SHAPES)
def test_fixed_slot_is_one_root(shape):
    seen = set()
    for _ in range(RUNS):
        tr, root = single_error_root(fixed_slot, shape)
        assert root.kind == "barrier_misuse" and root.source.line == FIXED, tr.summary()
        assert (f"phase 0 of the barrier allocated at line {ALLOC} (`full.at[0]` of its "
                "`pl.run_scoped`) completed") in root.message, root.message
        assert root.suggestion == (
            f"Line {FIXED} signals a fixed slot, `full.at[0]`, of the 2 barriers in `full` "
            "every time it runs: every phase it completes lands in that one slot, and the "
            "other slots' phases never complete. If each pass is meant for the next slot, "
            "index `full` by it (`full.at[i % 2]`, with the loop's index). If it does mean "
            "that one slot: " + ORDER_HINT)
        assert {t for _, _, t in root.cells} == {0}
        # a run that got as far as the deadlock on slot 1 shows it under the root
        assert {c.kind for c in root.consequences} <= {"interpreter_error", "deadlock"}
        assert root.consequences, tr.summary()
        seen.add((root.source.line, root.message, root.suggestion))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "cluster2"])
def test_slot_by_index_stays_clean(shape):
    assert_stays_clean(slot_by_index, shape)
