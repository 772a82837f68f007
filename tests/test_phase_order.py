"""A barrier's next phase completing before its waiters observed the last one.

Whether the interpreter notices (`Barrier completed phase 1, but no threads observed
phase 0.`) depends on how its threads interleave; the `barrier_misuse` root must not:
nothing in the kernel orders the second arrival after the waiter's wait, in every run
and every launch shape with a thread axis. A ping-pong whose arrivals wait for the
other side's acknowledgement is clean; one whose waiter waits once more than the other
side arrives deadlocks, with advice about the trip counts.
"""

from __future__ import annotations

import functools

import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_viz.analysis.barriers import ORDER_HINT
from pallas_viz.analysis.deadlock import FINISHED_HINT
from pallas_viz.examples import deadlock as dl
from pallas_viz.examples import shapes as sh

RUNS = 3
# (the shapes with a thread axis whose threads can use a barrier between them: no
# "pallas_call", which has one thread per block; "warp_mesh" waits per warp)
SHAPES = ["no_grid", "grid3", "cluster2", "core_map_grid", "tmem"]


def arrive_ahead(ctx, x_ref, o_ref):
    """The last thread arrives twice in a row; thread 0 waits twice."""
    def scoped(bar):
        @pl.when(ctx.thread == sh.last_thread(ctx))
        def _():
            @pl.loop(0, 2)
            def _(i):
                plgpu.barrier_arrive(bar)  # AHEAD

        @pl.when(ctx.thread == 0)
        def _():
            @pl.loop(0, 2)
            def _(i):
                plgpu.barrier_wait(bar)

            o_ref[...] = x_ref[...]

    pl.run_scoped(scoped, plgpu.Barrier(num_arrivals=1), collective_axes=ctx.axis)


def ping_pong(ctx, x_ref, o_ref, waits=2):
    """The last thread signals twice, each time waiting for thread 0's acknowledgement;
    thread 0 waits `waits` times."""
    def scoped(ready, ack):
        @pl.when(ctx.thread == sh.last_thread(ctx))
        def _():
            @pl.loop(0, 2)
            def _(i):
                plgpu.barrier_arrive(ready)
                plgpu.barrier_wait(ack)

        @pl.when(ctx.thread == 0)
        def _():
            @pl.loop(0, waits)
            def _(i):
                plgpu.barrier_wait(ready)  # WAIT
                plgpu.barrier_arrive(ack)

            o_ref[...] = x_ref[...]

    pl.run_scoped(scoped, plgpu.Barrier(num_arrivals=1), plgpu.Barrier(num_arrivals=1),
                  collective_axes=ctx.axis)


def _roots(tr):
    return [f for f in tr.findings if f.severity == "error"]


def _root_each_run(body, shape, kind):
    """The one error root of each of `RUNS` runs of `body` in `shape`, of `kind`."""
    for _ in range(RUNS):
        fn, args = sh.launch(body, shape)
        tr, _ = sh.run_traced(fn, args)
        (root,) = _roots(tr)
        assert root.kind == kind, tr.summary()
        yield root


@pytest.mark.parametrize("shape", SHAPES)
def test_an_arrival_running_ahead_of_its_waiter_is_one_root_every_run(shape):
    line = sh.marked_line(arrive_ahead, "AHEAD")
    seen = set()
    for root in _root_each_run(arrive_ahead, shape, "barrier_misuse"):
        assert root.source.line == line
        assert "with nothing making that arrival wait" in root.message
        assert root.suggestion == ORDER_HINT
        # when the interpreter noticed, its error is folded under the root
        assert all(c.kind != "barrier_misuse" for c in root.consequences)
        seen.add((root.source.line, root.message, root.suggestion))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("shape", SHAPES)
def test_a_ping_pong_that_waits_for_the_acknowledgement_is_clean(shape):
    for _ in range(2):
        fn, args = sh.launch(ping_pong, shape)
        tr, _ = sh.run_traced(fn, args)
        assert tr.findings == [] and tr.failure is None, tr.summary()


@pytest.mark.parametrize("shape", SHAPES)
def test_one_wait_too_many_is_a_deadlock_with_trip_count_advice(shape):
    line = sh.marked_line(ping_pong, "WAIT")
    body = functools.partial(ping_pong, waits=3)
    functools.update_wrapper(body, ping_pong)
    seen = set()
    for root in _root_each_run(body, shape, "deadlock"):
        assert root.source.line == line
        assert root.suggestion == FINISHED_HINT
        assert "(0 of 1 arrivals in phase 2)" in root.message
        seen.add((root.source.line, root.suggestion))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("run", range(RUNS))
def test_the_bundled_examples(run):
    (root,) = _roots(_trace(dl.arrive_ahead_of_waiter))
    assert root.kind == "barrier_misuse" and root.suggestion == ORDER_HINT
    assert _trace(dl.ping_pong).findings == []
    (root,) = _roots(_trace(functools.partial(dl.ping_pong, waits=3)))
    assert root.kind == "deadlock" and root.suggestion == FINISHED_HINT


def _trace(builder):
    fn, args = builder()
    tr, _ = sh.run_traced(fn, args)
    return tr
