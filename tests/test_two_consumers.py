"""One producer, two consumers that each release the tile by arriving at `empty`,
declared with `num_arrivals=1` (it should count both).

Each consumer's arrival completes a phase of `empty` of its own (an over-arrival, found
at the allocation), so the producer's wait on `empty` lets it go before the other
consumer observed `full`, and `full` then completes a phase before it was observed.
When a run shows both, the over-arrival is the root: the producer's early arrival is its
consequence (it had been folded the other way, as a pipeline's "empty" released by its
"full"). Which phases the run first showed it at varies; its message does not name them.

Not deterministic yet (an open item): in a run where one consumer starts so late that
the other alone released `empty` before the run stopped, only one thread ever arrived
at `empty`, so no over-arrival is recorded and the root is `full`'s misuse.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_viz.examples import shapes as sh

RUNS = 6
SHAPES = ["no_grid", "grid3", "cluster2", "core_map", "tmem"]


def _broadcast(ctx, x_ref, o_ref, releases):
    def scoped(buf, acc, full, empty):
        @pl.when(ctx.thread == 0)
        def _():
            def produce(i, c):
                @pl.when(i > 0)
                def _():
                    plgpu.barrier_wait(empty)

                buf[...] = x_ref[...] * i.astype(jnp.float32)
                plgpu.barrier_arrive(full)  # PRODUCE
                return c

            jax.lax.fori_loop(0, 3, produce, 0)

        @pl.when(ctx.thread > 0)
        def _():
            def consume(i, c):
                plgpu.barrier_wait(full)
                c = c + buf[0, 0]

                @pl.when(i < 2)  # (only the phases the producer waits for)
                def _():
                    plgpu.barrier_arrive(empty)  # RELEASE
                return c

            jax.lax.fori_loop(0, 3, consume, jnp.float32(0))

        @pl.when(ctx.thread == 0)
        def _():
            sh.store_block_rows(ctx, o_ref, x_ref[...])

    pl.run_scoped(scoped, plgpu.SMEM(sh.SHAPE, jnp.float32),  # ALLOC
                  plgpu.SMEM(sh.SHAPE, jnp.float32), plgpu.Barrier(num_arrivals=1),
                  plgpu.Barrier(num_arrivals=releases), collective_axes=ctx.axis)


def one_arrival_for_two(ctx, x_ref, o_ref):
    _broadcast(ctx, x_ref, o_ref, 1)


def counts_both(ctx, x_ref, o_ref):
    """The fix: `empty` counts both consumers' arrivals."""
    _broadcast(ctx, x_ref, o_ref, 2)


ALLOC = sh.marked_line(_broadcast, "ALLOC")
PRODUCE = sh.marked_line(_broadcast, "PRODUCE")
RELEASE = sh.marked_line(_broadcast, "RELEASE")
OVER = ("the barrier allocated here counts 1 arrival(s) a phase (`num_arrivals=1`), but "
        f"w 1..2 arrive at it at line {RELEASE}, so each arrival completes a phase of its "
        "own, the next before any thread observed the one before it")


def _is_over_arrival(f):
    return f.kind == "barrier_misuse" and f.message.startswith("the barrier allocated here")


@pytest.mark.parametrize("shape", SHAPES)
def test_the_over_arrival_is_the_root_whenever_a_run_shows_it(shape):
    roots = set()
    for _ in range(RUNS):
        fn, args = sh.launch(one_arrival_for_two, shape, num_threads=3)
        tr, _ = sh.run_traced(fn, args)
        errors = [f for f in tr.findings if f.severity == "error"]
        assert len(errors) == 1, tr.summary()
        (root,) = errors
        assert not any(_is_over_arrival(c) for c in root.consequences), tr.summary()
        if _is_over_arrival(root):
            assert root.message == OVER and root.source.line == ALLOC, root.message
        else:  # (the open item above)
            assert root.source.line == PRODUCE, tr.summary()
        roots.add(root.source.line)
    assert ALLOC in roots, roots  # (in most runs)


@pytest.mark.parametrize("shape", ["no_grid", "cluster2"])
def test_counting_both_stays_clean(shape):
    for _ in range(2):
        fn, args = sh.launch(counts_both, shape, num_threads=3)
        tr, _ = sh.run_traced(fn, args)
        assert tr.findings == [] and tr.failure is None, tr.summary()
