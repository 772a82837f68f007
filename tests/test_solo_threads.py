"""Kernels whose clusters run one warpgroup: their threads' exits are not recorded
(`BarrierWaits.begin`), and deadlocks and barrier misuse are still found."""

from __future__ import annotations

import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

import pallas_viz as pv
from pallas_viz.examples import shapes
from pallas_viz.examples.kernels import SHAPE


def waits_alone(ctx, x_ref, o_ref):
    """The one thread of each block waits for an arrival nobody makes."""

    def scoped(buf, bar):
        ctx.store(buf, x_ref[...])
        plgpu.barrier_wait(bar)
        o_ref[...] = ctx.load(buf, SHAPE[0])

    pl.run_scoped(scoped, ctx.smem(SHAPE, jnp.float32), plgpu.Barrier(num_arrivals=1),
                  collective_axes=ctx.axis)


def arrives_then_waits(ctx, x_ref, o_ref):
    """The one thread arrives and waits for each of two phases: clean."""

    def scoped(buf, bar):
        ctx.store(buf, x_ref[...] + 1.0)
        for _ in range(2):
            plgpu.barrier_arrive(bar)
            plgpu.barrier_wait(bar)
        o_ref[...] = ctx.load(buf, SHAPE[0])

    pl.run_scoped(scoped, ctx.smem(SHAPE, jnp.float32), plgpu.Barrier(num_arrivals=1),
                  collective_axes=ctx.axis)


def _run(body, shape, num_threads=1, **kw):
    fn, args = shapes.launch(body, shape, num_threads=num_threads)
    t = pv.trace(raise_errors=False, **kw)
    with t as tr:
        fn(*args)
    return t, tr


@pytest.mark.parametrize("shape", ["no_grid", "grid3"])
def test_a_lone_thread_that_waits_forever_is_stopped_with_its_line(shape):
    """The wait-for check stops it at once (no timeout), the same way each run."""
    seen = set()
    for _ in range(3):
        t, tr = _run(waits_alone, shape)
        dl = tr.meta.get("deadlocks")
        assert dl and dl[0]["detected_by"] == "wait_for", tr.summary()
        errors = [(f.kind, f.source.line, f.message) for f in tr.errors]
        assert errors and errors[0][0] == "deadlock", tr.summary()
        assert errors[0][1] == waits_alone.__code__.co_firstlineno + 5  # barrier_wait
        # the lone warpgroup's exits are not recorded: none of its cluster can wait
        assert t._recorder.thread_exits == []
        seen.add(tuple(errors))
    assert len(seen) == 1


@pytest.mark.parametrize("shape", ["no_grid", "grid3"])
def test_a_lone_thread_using_its_barrier_is_clean(shape):
    t, tr = _run(arrives_then_waits, shape)
    assert not tr.findings, tr.summary()
    assert len(tr.meta["barrier_ops"]) >= 6
    assert t._recorder.thread_exits == []


def test_two_threads_per_block_still_record_their_exits():
    t, tr = _run(shapes.hoisted_barrier, "grid3", num_threads=2)
    assert not tr.findings, tr.summary()
    assert len(t._recorder.thread_exits) == 6 * 3 * 2  # six items per exit, 3 blocks x 2


def test_a_warp_mesh_of_one_warpgroup_is_clean_and_records_no_exit():
    t, tr = _run(shapes.plain_copy, "warp_mesh", num_threads=1)
    assert not tr.findings, tr.summary()
    assert tr.kernels[0].threads_per_block == 1
    assert t._recorder.thread_exits == []
