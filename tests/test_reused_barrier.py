"""One barrier used for two things: a TMA load's completion, then a rendezvous of both
threads (which it counts as one arrival).

Thread 0's copy completes phase 0, then one thread's arrival at the rendezvous completes
phase 1, before the other thread waited for phase 0. Whether that other thread had
started its wait when the next phase completed varies with the interleaving: if it had,
the arrival is not ordered after its wait (a misuse the analysis finds); if not, JAX
raises at its late wait ("waiting at barrier for the first time, but barrier is already
at phase 2"). A thread's first wait is for phase 0 in both cases (the recorder no longer
takes the barrier's current phase for it), so the root is the same in every run.
"""

from __future__ import annotations

import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from roots_util import assert_stays_clean, single_error_root

from pallas_viz.examples import shapes as sh

RUNS = 4
SHAPES = ["no_grid", "grid1", "grid3", "cluster2", "core_map", "core_map_grid"]


def reused(ctx, x_ref, o_ref):
    def scoped(xs, out, bar):
        @pl.when(ctx.thread == 0)
        def _():
            plgpu.copy_gmem_to_smem(x_ref, xs, bar)  # COPY

        plgpu.barrier_wait(bar)
        half = pl.ds(ctx.thread * 4, 4)
        out[half, :] = xs[half, :] * 2.0
        plgpu.barrier_arrive(bar)  # REUSE_ARRIVE
        plgpu.barrier_wait(bar)

        @pl.when(ctx.thread == 0)
        def _():
            sh.store_block_rows(ctx, o_ref, out[...])

    pl.run_scoped(scoped, plgpu.SMEM(sh.SHAPE, jnp.float32),  # ALLOC
                  plgpu.SMEM(sh.SHAPE, jnp.float32), plgpu.Barrier(num_arrivals=1),
                  collective_axes=ctx.axis)


def separate_barriers(ctx, x_ref, o_ref):
    """The fix: one barrier for the load, another (counting both threads) for the
    rendezvous."""
    def scoped(xs, out, loaded, done):
        @pl.when(ctx.thread == 0)
        def _():
            plgpu.copy_gmem_to_smem(x_ref, xs, loaded)

        plgpu.barrier_wait(loaded)
        half = pl.ds(ctx.thread * 4, 4)
        out[half, :] = xs[half, :] * 2.0
        plgpu.barrier_arrive(done)
        plgpu.barrier_wait(done)

        @pl.when(ctx.thread == 0)
        def _():
            sh.store_block_rows(ctx, o_ref, out[...])

    pl.run_scoped(scoped, plgpu.SMEM(sh.SHAPE, jnp.float32), plgpu.SMEM(sh.SHAPE, jnp.float32),
                  plgpu.Barrier(num_arrivals=1), plgpu.Barrier(num_arrivals=ctx.num_threads),
                  collective_axes=ctx.axis)


COPY = sh.marked_line(reused, "COPY")
REUSE_ARRIVE = sh.marked_line(reused, "REUSE_ARRIVE")
ALLOC = sh.marked_line(reused, "ALLOC")


@pytest.mark.parametrize("shape", SHAPES)
def test_a_reused_barrier_has_one_root_in_every_run(shape):
    seen = set()
    for _ in range(RUNS):
        tr, root = single_error_root(reused, shape)
        assert root.kind == "barrier_misuse" and root.source.line == COPY, tr.summary()
        assert (f"phase 0 of the barrier allocated at line {ALLOC} completed (arrivals: w 0 "
                f"at line {COPY} (a TMA copy)) and the next phase completed after it (at "
                f"line {REUSE_ARRIVE})") in root.message, root.message
        assert "waiting at barrier for the first time" not in root.message
        assert all(c.kind == "interpreter_error" for c in root.consequences), tr.summary()
        assert [k.name for k in tr.kernels] == ["reused"]
        seen.add((root.source.line, root.message, root.suggestion))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "cluster2", "core_map"])
def test_separate_barriers_stay_clean(shape):
    assert_stays_clean(separate_barriers, shape)
