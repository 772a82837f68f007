"""More threads arrive at a barrier than its `num_arrivals` counts.

Two producer threads each arrive once at a barrier declared with `num_arrivals=1`;
a third thread waits once. Each arrival completes a phase of its own, the second before
anyone observed the first (JAX raises, or the waiter reads half a tile: it varies). The
root cause is the declaration, at the allocation's line, naming both producers (which
arrived first varies, the finding does not) and advising `num_arrivals=2`.
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import pytest
import two_devices_roots
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from roots_util import single_error_root

import pallas_viz as pv
from pallas_viz.examples import shapes as sh

RUNS = 4
FIXTURES = pathlib.Path(__file__).parent / "fixtures"
SHAPES = ["no_grid", "grid3", "cluster2", "core_map", "core_map_grid", "tmem"]


def two_producers_one_arrival(ctx, x_ref, o_ref):
    """Threads 0 and 1 each write half the tile and arrive; thread 2 waits, then stores."""

    def scoped(buf, ready):
        @pl.when(ctx.thread < 2)
        def _():
            if ctx.tmem:  # (a TMEM store writes from row 0: each producer all of it)
                ctx.store(buf, x_ref[...] * 2.0)
            else:
                half = pl.ds(ctx.thread * 4, 4)
                buf[half, :] = x_ref[half, :] * 2.0
            plgpu.barrier_arrive(ready)  # ARRIVE

        @pl.when(ctx.thread == 2)
        def _():
            plgpu.barrier_wait(ready)
            sh.store_block_rows(ctx, o_ref, ctx.load(buf, sh.SHAPE[0]))

    pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32),  # ALLOC
                  plgpu.Barrier(num_arrivals=1), collective_axes=ctx.axis)


ALLOC = sh.marked_line(two_producers_one_arrival, "ALLOC")
ARRIVE = sh.marked_line(two_producers_one_arrival, "ARRIVE")


@pytest.mark.parametrize("shape", SHAPES)
def test_two_producers_at_a_one_arrival_barrier(shape):
    seen = set()
    for _ in range(RUNS):
        tr, root = single_error_root(two_producers_one_arrival, shape, num_threads=3)
        assert root.kind == "barrier_misuse" and root.source.line == ALLOC, tr.summary()
        assert "(`num_arrivals=1`), but w 0..1 arrive at it at line " \
               f"{ARRIVE}" in root.message, root.message
        assert "declare `plgpu.Barrier(num_arrivals=2)`" in root.suggestion
        assert {t for _, _, t in root.cells} == {0, 1}
        seen.add((root.source.line, root.message))
    assert len(seen) == 1, seen


def two_producers_at_two_lines(ctx, x_ref, o_ref):
    """`two_producers_one_arrival` with each producer's arrival at a line of its own."""

    def scoped(buf, ready):
        @pl.when(ctx.thread == 0)
        def _():
            ctx.store(buf, x_ref[...] * 2.0)
            plgpu.barrier_arrive(ready)  # FIRST

        @pl.when(ctx.thread == 1)
        def _():
            ctx.store(buf, x_ref[...] * 3.0)
            plgpu.barrier_arrive(ready)  # SECOND

        @pl.when(ctx.thread == 2)
        def _():
            plgpu.barrier_wait(ready)
            sh.store_block_rows(ctx, o_ref, ctx.load(buf, sh.SHAPE[0]))

    pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32),  # AT_TWO
                  plgpu.Barrier(num_arrivals=1), collective_axes=ctx.axis)


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "cluster2", "core_map"])
def test_two_producers_arriving_at_two_lines(shape):
    # (review K2: the root was the unobserved phase, at whichever producer's arrival came
    # first (line 13 in 15 runs of 24, line 17 in 9), advising an "empty" barrier)
    lines = [sh.marked_line(two_producers_at_two_lines, m) for m in ("FIRST", "SECOND")]
    seen = set()
    for _ in range(RUNS + 2):
        tr, root = single_error_root(two_producers_at_two_lines, shape, num_threads=3)
        assert root.kind == "barrier_misuse", tr.summary()
        assert root.source.line == sh.marked_line(two_producers_at_two_lines, "AT_TWO")
        assert (f"(`num_arrivals=1`), but w 0..1 arrive at it at line {lines[0]}, line "
                f"{lines[1]}, so each arrival completes a phase of its own") in root.message, \
            root.message
        assert "declare `plgpu.Barrier(num_arrivals=2)`" in root.suggestion
        assert {t for _, _, t in root.cells} == {0, 1}
        # (the blocks lit: those that ran before JAX failed the kernel, when it does)
        seen.add((root.source.line, root.message))
    assert len(seen) == 1, seen


@pytest.mark.slow
def test_two_producers_on_two_devices():
    kind, line, message = two_devices_roots.one_root(
        "test_over_arrival", "two_producers_one_arrival", 3, RUNS)
    assert kind == "barrier_misuse" and line == ALLOC, message
    assert f"but w 0..1 arrive at it at line {ARRIVE}" in message, message


@pytest.mark.parametrize("warps_in", ["no_grid", "grid3"])
def test_two_producers_in_warp_code_are_a_warp_allocation(warps_in):
    # warps 0 and 1 arrive, warp 2 waits; the barrier is a warp's request made with its
    # warpgroup's key: that is the one root, at the allocation
    seen = set()
    for _ in range(RUNS):
        tr, root = single_error_root(two_producers_one_arrival, "warp_mesh",
                                     warps_in=warps_in)
        assert root.kind == "warp_allocation" and root.source.line == ALLOC, tr.summary()
        seen.add(root.message)
    assert len(seen) == 1, seen


def warp_producers(ctx, x_ref, o_ref):
    """Two warpgroups; in each, warp 0 writes and arrives, warp 1 waits and reads: two
    arrivals a phase at a barrier that counts one (allocated at warpgroup level)."""

    def scoped(buf, bar):
        @pl.core_map(plgpu.WarpMesh(axis_name="warp"))
        def _():
            warp = jax.lax.axis_index("warp")

            @pl.when(warp == 0)
            def _():
                buf[...] = x_ref[...] + 1.0
                plgpu.barrier_arrive(bar)  # WARP_ARRIVE

            @pl.when(warp == 1)
            def _():
                plgpu.barrier_wait(bar)
                sh.store_block_rows(ctx, o_ref, buf[...])

    pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32),  # WARP_ALLOC
                  plgpu.Barrier(num_arrivals=1), collective_axes=ctx.axis)


WARP_ALLOC = sh.marked_line(warp_producers, "WARP_ALLOC")
WARP_ARRIVE = sh.marked_line(warp_producers, "WARP_ARRIVE")


@pytest.mark.filterwarnings("ignore:jax.experimental.pallas.core_map is deprecated")
@pytest.mark.parametrize("shape", ["no_grid", "grid3", "cluster2"])
def test_warp_producers_of_two_warpgroups_at_a_one_arrival_barrier(shape):
    # whether a waiter observes phase 0 between the two arrivals varies from run to run
    # (each warp is a thread of its own: one warp's wait does not order another's
    # arrival, in any block); the root does not
    seen = set()
    for _ in range(RUNS + 2):
        tr, root = single_error_root(warp_producers, shape)
        assert root.kind == "barrier_misuse" and root.source.line == WARP_ALLOC, tr.summary()
        assert ("(`num_arrivals=1`), but w 0..1 arrive at it at line "
                f"{WARP_ARRIVE}") in root.message, root.message
        assert {t for _, _, t in root.cells} == {0, 1}, root.cells
        seen.add((root.source.line, root.message))
    assert len(seen) == 1, seen


@pytest.mark.slow
def test_warp_producers_on_two_devices():
    kind, line, message = two_devices_roots.one_root(
        "test_over_arrival", "warp_producers", 2, RUNS)
    assert kind == "barrier_misuse" and line == WARP_ALLOC, message
    assert f"but w 0..1 arrive at it at line {WARP_ARRIVE}" in message, message


def test_a_wait_between_the_arrivals_of_two_warps_is_no_order():
    # a recorded run of the same mistake (another file's kernel: warp 0 of each warpgroup
    # arrives at line 147, warp 1 waits at line 151, the barrier allocated at line 154)
    # in which warpgroup 1's warp 1 observed phase 0 between the two arrivals, and the
    # interpreter then failed warpgroup 0's warp 1 at a phase it had missed: the same
    # over-arrival root, the interpreter's error folded under it (it was the root, alone)
    tr = pv.load(FIXTURES / "warp_over_arrival_wait_between.json")
    ops = [(o["op"], o["thread"], o["warp"], o["phase"]) for o in tr.meta["barrier_ops"]]
    assert ops[:3] == [("wait", 1, 1, 0), ("arrive", 0, 0, 0), ("waited", 1, 1, 0)], ops
    (root,) = [f for f in tr.findings if f.severity == "error"]
    assert root.kind == "barrier_misuse" and root.source.line == 154, tr.summary()
    assert "(`num_arrivals=1`), but wg 0..1 arrive at it at line 147" in root.message
    assert [(c.kind, c.source.line) for c in root.consequences] == [("interpreter_error", 151)]
