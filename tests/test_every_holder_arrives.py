"""Four threads each write their rows of a tile and arrive at `done`; thread 0 waits and
stores the tile. `done` counts 3 arrivals (the author forgot that the reader arrives
too), so its phase completes after three of the four arrivals: thread 0 can read before
the fourth thread's write (a race, with race detection), and the fourth arrival is left
pending when the scope ends (JAX: "Barrier deallocated with 1 arrivals pending").

Which of those a run shows varies; the root is the barrier's allocation in every run,
read from where the arrival is written (a line every thread holding the barrier runs),
with the race folded under it.
"""

from __future__ import annotations

import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_viz.examples import shapes as sh

RUNS = 3
THREADS = 4
SHAPES = ["no_grid", "grid3", "cluster2", "core_map", "core_map_grid"]


def _gather(ctx, x_ref, o_ref, arrivals):
    t = ctx.thread

    def scoped(tile, done):
        tile[pl.ds(t * 2, 2)] = x_ref[pl.ds(t * 2, 2)] + 1.0
        plgpu.barrier_arrive(done)  # ARRIVE

        @pl.when(t == 0)
        def _():
            plgpu.barrier_wait(done)
            sh.store_block_rows(ctx, o_ref, tile[...])

    pl.run_scoped(scoped, plgpu.SMEM(sh.SHAPE, jnp.float32),  # ALLOC
                  plgpu.Barrier(num_arrivals=arrivals), collective_axes=ctx.axis)


def counts_three(ctx, x_ref, o_ref):
    _gather(ctx, x_ref, o_ref, THREADS - 1)


def counts_all(ctx, x_ref, o_ref):
    """The fix: the barrier counts every arriving thread."""
    _gather(ctx, x_ref, o_ref, ctx.num_threads)


def reader_skips(ctx, x_ref, o_ref):
    """The other way round: `done` counts all four, and the reader skips its arrival."""
    t = ctx.thread

    def scoped(tile, done):
        tile[pl.ds(t * 2, 2)] = x_ref[pl.ds(t * 2, 2)] + 1.0

        @pl.when(t != 0)  # SKIP_BRANCH
        def _():
            plgpu.barrier_arrive(done)  # SKIPPED_ARRIVE

        @pl.when(t == 0)
        def _():
            plgpu.barrier_wait(done)  # READER_WAIT
            sh.store_block_rows(ctx, o_ref, tile[...])

    pl.run_scoped(scoped, plgpu.SMEM(sh.SHAPE, jnp.float32),
                  plgpu.Barrier(num_arrivals=ctx.num_threads), collective_axes=ctx.axis)


ALLOC = sh.marked_line(_gather, "ALLOC")
ARRIVE = sh.marked_line(_gather, "ARRIVE")
MESSAGE = ("the barrier allocated here counts 3 arrival(s) a phase (`num_arrivals=3`), but "
           f"w 0..3 arrive at it at line {ARRIVE}, a line every thread holding it runs (4 a "
           "block), so a phase completes before all of them arrived")


@pytest.mark.parametrize("races", [False, True], ids=["plain", "races"])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_barrier_counting_too_few_of_its_arriving_threads(shape, races):
    seen = set()
    for _ in range(RUNS):
        fn, args = sh.launch(counts_three, shape, num_threads=THREADS)
        tr, _ = sh.run_traced(fn, args, detect_races=races)
        errors = [f for f in tr.findings if f.severity == "error"]
        assert len(errors) == 1, tr.summary()
        (root,) = errors
        assert root.kind == "barrier_misuse" and root.source.line == ALLOC, tr.summary()
        assert root.message == MESSAGE, root.message
        assert "`plgpu.Barrier(num_arrivals=4)`" in root.suggestion
        assert {t for _, _, t in root.cells} == set(range(THREADS))
        seen.add((root.message, root.suggestion))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("shape", ["no_grid", "cluster2", "core_map"])
def test_counting_every_thread_stays_clean(shape):
    for _ in range(2):
        fn, args = sh.launch(counts_all, shape, num_threads=THREADS)
        tr, _ = sh.run_traced(fn, args, detect_races=True)
        assert tr.findings == [] and tr.failure is None, tr.summary()


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "core_map", "core_map_grid"])
def test_a_reader_that_skips_its_arrival_is_named_with_the_branch(shape):
    # the waiter's `pl.when` body and the one around the arrival are siblings in the
    # scope: the advice was the general "fewer threads arrive" one
    wait = sh.marked_line(reader_skips, "READER_WAIT")
    arrive = sh.marked_line(reader_skips, "SKIPPED_ARRIVE")
    branch = sh.marked_line(reader_skips, "SKIP_BRANCH")
    seen = set()
    for _ in range(2):
        fn, args = sh.launch(reader_skips, shape, num_threads=THREADS)
        tr, _ = sh.run_traced(fn, args)
        (root,) = [f for f in tr.findings if f.severity == "error"]
        assert root.kind == "deadlock" and root.source.line == wait, tr.summary()
        assert root.suggestion.startswith(
            f"w 0 waits at line {wait} for a phase of this barrier without arriving at it: "
            f"the arrival at line {arrive} is inside the `pl.when` at line {branch}, whose "
            "condition is false for it (3 of 4 arrivals came)."), root.suggestion
        seen.add((root.message, root.suggestion))
    assert len(seen) == 1, seen
