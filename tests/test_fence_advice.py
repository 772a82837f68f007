"""Races whose fix is a fence, not a barrier: `plgpu.commit_smem()` / `plgpu.commit_tmem()`.

A TMA copy or an MMA accesses shared memory through the async proxy, which is not
ordered with ordinary loads and stores until they are fenced; JAX's race detection
reports the missing fence as a race. The advice used to call the thread's own ordinary
store "the asynchronous write it started", or to ask for a barrier the kernel already
has. Each kernel runs with race detection in the shapes it can be written in, several
runs each; the fixed kernels stay clean.
"""

from __future__ import annotations

import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_viz.analysis import races
from pallas_viz.examples import shapes as sh

RUNS = 2
SMEM_SHAPES = ["no_grid", "grid3", "cluster2", "core_map", "core_map_grid"]
ROWS = (2, 128)


def store_then_copy(ctx, x_ref, o_ref):
    """One thread writes a staging tile and TMA-stores it, with no fence between."""
    def scoped(stage):
        @pl.when(ctx.thread == 0)
        def _():
            b, _ = ctx.block()
            stage[...] = x_ref[pl.ds(0, 2)] * 2.0  # STAGE
            plgpu.copy_smem_to_gmem(stage, o_ref.at[pl.ds(b * 2, 2)])  # COPY_OUT
            plgpu.wait_smem_to_gmem(0)

    pl.run_scoped(scoped, plgpu.SMEM(ROWS, jnp.float32), collective_axes=ctx.axis)


def store_commit_copy(ctx, x_ref, o_ref):
    """The fix."""
    def scoped(stage):
        @pl.when(ctx.thread == 0)
        def _():
            b, _ = ctx.block()
            stage[...] = x_ref[pl.ds(0, 2)] * 2.0
            plgpu.commit_smem()
            plgpu.copy_smem_to_gmem(stage, o_ref.at[pl.ds(b * 2, 2)])
            plgpu.wait_smem_to_gmem(0)

    pl.run_scoped(scoped, plgpu.SMEM(ROWS, jnp.float32), collective_axes=ctx.axis)


def handoff_to_copy(ctx, x_ref, o_ref):
    """w 0 writes the tile and arrives; w 1 waits and TMA-stores it: no fence."""
    def scoped(tile, ready):
        @pl.when(ctx.thread == 0)
        def _():
            tile[...] = x_ref[pl.ds(0, 2)] * 3.0  # HANDOFF_WRITE
            plgpu.barrier_arrive(ready)  # READY_ARRIVE

        @pl.when(ctx.thread == 1)
        def _():
            b, _ = ctx.block()
            plgpu.barrier_wait(ready)  # READY_WAIT
            plgpu.copy_smem_to_gmem(tile, o_ref.at[pl.ds(b * 2, 2)])  # HANDOFF_COPY
            plgpu.wait_smem_to_gmem(0)

    pl.run_scoped(scoped, plgpu.SMEM(ROWS, jnp.float32), plgpu.Barrier(num_arrivals=1),
                  collective_axes=ctx.axis)


def handoff_committed(ctx, x_ref, o_ref):
    """The fix: w 0 commits its stores before it arrives."""
    def scoped(tile, ready):
        @pl.when(ctx.thread == 0)
        def _():
            tile[...] = x_ref[pl.ds(0, 2)] * 3.0
            plgpu.commit_smem()
            plgpu.barrier_arrive(ready)

        @pl.when(ctx.thread == 1)
        def _():
            b, _ = ctx.block()
            plgpu.barrier_wait(ready)
            plgpu.copy_smem_to_gmem(tile, o_ref.at[pl.ds(b * 2, 2)])
            plgpu.wait_smem_to_gmem(0)

    pl.run_scoped(scoped, plgpu.SMEM(ROWS, jnp.float32), plgpu.Barrier(num_arrivals=1),
                  collective_axes=ctx.axis)


def _pad(v):
    return jnp.concatenate([v, jnp.zeros((128 - v.shape[0], 128), v.dtype)], axis=0)


def tmem_handoff(ctx, x_ref, o_ref):
    """w 0 stores into TMEM asynchronously and arrives; w 1 waits and loads: no commit."""
    def scoped(acc, bar):
        @pl.when(ctx.thread == 0)
        def _():
            plgpu.async_store_tmem(acc, _pad(x_ref[...] * 2.0))  # TMEM_STORE
            plgpu.barrier_arrive(bar)  # TMEM_ARRIVE

        @pl.when(ctx.thread == 1)
        def _():
            plgpu.barrier_wait(bar)
            v = plgpu.async_load_tmem(acc)  # TMEM_LOAD
            plgpu.wait_load_tmem()
            o_ref[...] = v[:8]

    pl.run_scoped(scoped, plgpu.TMEM((128, 128), jnp.float32), plgpu.Barrier(num_arrivals=1),
                  collective_axes=ctx.axis)


def tmem_handoff_committed(ctx, x_ref, o_ref):
    """The fix: commit the TMEM store before arriving."""
    def scoped(acc, bar):
        @pl.when(ctx.thread == 0)
        def _():
            plgpu.async_store_tmem(acc, _pad(x_ref[...] * 2.0))
            plgpu.commit_tmem()
            plgpu.barrier_arrive(bar)

        @pl.when(ctx.thread == 1)
        def _():
            plgpu.barrier_wait(bar)
            v = plgpu.async_load_tmem(acc)
            plgpu.wait_load_tmem()
            o_ref[...] = v[:8]

    pl.run_scoped(scoped, plgpu.TMEM((128, 128), jnp.float32), plgpu.Barrier(num_arrivals=1),
                  collective_axes=ctx.axis)


def _line(fn, marker):
    return sh.marked_line(fn, marker)


def _race_root(body, shape):
    fn, args = sh.launch(body, shape)
    tr, _ = sh.run_traced(fn, args, detect_races=True)
    errors = [f for f in tr.findings if f.severity == "error"]
    assert len(errors) == 1 and errors[0].kind == "race", tr.summary()
    return errors[0]


def _same_every_run(body, shape, check):
    seen = set()
    for _ in range(RUNS):
        root = _race_root(body, shape)
        check(root)
        seen.add((root.source.line, root.message, root.suggestion))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("shape", SMEM_SHAPES)
def test_a_store_then_its_own_copy_needs_commit_smem(shape):
    stage, copy = _line(store_then_copy, "STAGE"), _line(store_then_copy, "COPY_OUT")

    def check(root):
        assert root.source.line == copy
        assert root.message.endswith(
            f"read by w 0 at line {copy} (`copy_smem_to_gmem`, asynchronous) is not ordered "
            f"with the thread's own write at line {stage} before it: no `plgpu.commit_smem()` "
            "between them"), root.message
        assert "asynchronous write it started" not in root.message
        assert root.suggestion == races.FENCE_SAME_THREAD_HINT.format(
            okind="write", oline=stage, call="copy_smem_to_gmem", line=copy)

    _same_every_run(store_then_copy, shape, check)


@pytest.mark.parametrize("shape", SMEM_SHAPES)
def test_a_handoff_to_another_thread_s_copy_needs_commit_smem(shape):
    write = _line(handoff_to_copy, "HANDOFF_WRITE")
    arrive = _line(handoff_to_copy, "READY_ARRIVE")
    wait = _line(handoff_to_copy, "READY_WAIT")
    copy = _line(handoff_to_copy, "HANDOFF_COPY")

    def check(root):
        assert root.message.endswith(
            f"write by w 0 at line {write} is not ordered with the read by w 1 at line {copy}: "
            f"the barrier `ready` orders them (w 0 arrives at line {arrive}, w 1 waits at line "
            f"{wait}), but the `copy_smem_to_gmem` reads through the async proxy and nothing "
            "fences the write for it"), root.message
        assert "put a barrier between" not in root.suggestion
        assert (f"call `plgpu.commit_smem()` after the write at line {write}, before w 0 "
                f"arrives at `ready` (line {arrive})") in root.suggestion, root.suggestion

    _same_every_run(handoff_to_copy, shape, check)


def test_a_tmem_handoff_needs_commit_tmem():
    store = _line(tmem_handoff, "TMEM_STORE")
    arrive = _line(tmem_handoff, "TMEM_ARRIVE")
    load = _line(tmem_handoff, "TMEM_LOAD")

    def check(root):
        assert f"is not ordered with the read by w 1 at line {load}" in root.message
        assert root.message.endswith("but the asynchronous TMEM store is not committed "
                                     "before the arrival"), root.message
        assert (f"the `async_store_tmem` at line {store} is asynchronous: call "
                f"`plgpu.commit_tmem()` after it, before w 0 arrives at `bar` (line {arrive})"
                ) in root.suggestion, root.suggestion

    _same_every_run(tmem_handoff, "tmem", check)


@pytest.mark.parametrize("body,shape", [
    (store_commit_copy, "no_grid"), (store_commit_copy, "cluster2"),
    (handoff_committed, "no_grid"), (handoff_committed, "core_map_grid"),
    (tmem_handoff_committed, "tmem")])
def test_the_fences_stay_clean(body, shape):
    for _ in range(2):
        fn, args = sh.launch(body, shape)
        tr, _ = sh.run_traced(fn, args, detect_races=True)
        assert tr.findings == [] and tr.failure is None, tr.summary()
