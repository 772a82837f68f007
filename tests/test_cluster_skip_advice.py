"""A deadlock whose phase lacks an arrival a branch skipped names that branch.

A cluster barrier every block of the cluster waits on, arrived at only under
`pl.when(c == 0)`: block (1) passes the branch and waits for the phase its own arrival
should complete (review K2, D7). The same with a block barrier arrived at only under
`pl.when(t == 0)` while every thread waits: t 1 skips it. The root stays the wait, with
its cells; the advice names the skipping thread and the branch, and the finding's
`branch` (`threads part here`) is that branch, not the threads that finished holding the
barrier. Real kernels in GPU interpret mode, several runs each (the thread interleaving
varies; the root, its line and its message must not); the fixed kernels stay clean.
"""

from __future__ import annotations

import re

import jax
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_viz.analysis.deadlock import TOO_FEW_ARRIVALS_HINT
from pallas_viz.examples import shapes as sh

RUNS = 4


def cluster_arrival_skipped(ctx, x_ref, o_ref):
    c = jax.lax.axis_index(sh.CLUSTER_AXIS)

    def body(cbar):
        @pl.when(ctx.thread == 0)
        def _():
            @pl.when(c == 0)  # CLUSTER_BRANCH
            def _():
                plgpu.barrier_arrive(cbar)  # CLUSTER_ARRIVE

            plgpu.barrier_wait(cbar)  # CLUSTER_WAIT

            @pl.when(c == 0)
            def _():
                o_ref[...] = x_ref[...]

    pl.run_scoped(body, plgpu.ClusterBarrier(collective_axes=(sh.CLUSTER_AXIS,)),
                  collective_axes=ctx.axis)


def cluster_arrival_fixed(ctx, x_ref, o_ref):
    c = jax.lax.axis_index(sh.CLUSTER_AXIS)

    def body(cbar):
        @pl.when(ctx.thread == 0)
        def _():
            plgpu.barrier_arrive(cbar)
            plgpu.barrier_wait(cbar)

            @pl.when(c == 0)
            def _():
                o_ref[...] = x_ref[...]

    pl.run_scoped(body, plgpu.ClusterBarrier(collective_axes=(sh.CLUSTER_AXIS,)),
                  collective_axes=ctx.axis)


def thread_arrival_skipped(ctx, x_ref, o_ref):
    def body(bar):
        @pl.when(ctx.thread == 0)  # THREAD_BRANCH
        def _():
            plgpu.barrier_arrive(bar)  # THREAD_ARRIVE

        plgpu.barrier_wait(bar)  # THREAD_WAIT

        @pl.when(ctx.thread == 0)
        def _():
            o_ref[...] = x_ref[...]

    pl.run_scoped(body, plgpu.Barrier(num_arrivals=2), collective_axes=ctx.axis)


def thread_arrival_fixed(ctx, x_ref, o_ref):
    def body(bar):
        plgpu.barrier_arrive(bar)
        plgpu.barrier_wait(bar)

        @pl.when(ctx.thread == 0)
        def _():
            o_ref[...] = x_ref[...]

    pl.run_scoped(body, plgpu.Barrier(num_arrivals=2), collective_axes=ctx.axis)


def _root(body, shape):
    fn, args = sh.launch(body, shape)
    tr, _ = sh.run_traced(fn, args, timeout_s=30.0)
    errors = [f for f in tr.findings if f.severity == "error"]
    assert [f.kind for f in errors] == ["deadlock"], tr.summary()
    return tr, errors[0]


def _check(body, shape, branch, arrive, wait, who, cells, them="it"):
    seen = set()
    for _ in range(RUNS):
        tr, root = _root(body, shape)
        assert root.source is not None and root.source.line == wait, tr.summary()
        assert sorted(root.cells) == cells, tr.summary()  # the waiters
        assert root.branch is not None and root.branch.line == branch, tr.summary()
        assert "pl.when" in (root.branch.code or ""), root.branch
        assert root.suggestion.startswith(
            f"{who} {'waits' if them == 'it' else 'wait'} at line {wait} for a phase of this "
            f"barrier without arriving at it: the arrival at line {arrive} is inside the "
            f"`pl.when` at line {branch}, whose condition is false for {them} (1 of 2 "
            "arrivals came)."), root.suggestion
        assert "finished without arriving" not in root.suggestion
        assert TOO_FEW_ARRIVALS_HINT not in root.suggestion
        assert re.search(rf"  = threads part here: \S*test_cluster_skip_advice\.py:{branch}:"
                         rf"\d+  `@pl\.when\(", tr.summary()), tr.summary()
        seen.add((root.source.line, root.message, root.suggestion, tuple(sorted(root.cells)),
                  root.branch.line))
    assert len(seen) == 1, seen


CLUSTER = {m: sh.marked_line(cluster_arrival_skipped, m)
           for m in ("CLUSTER_BRANCH", "CLUSTER_ARRIVE", "CLUSTER_WAIT")}
THREAD = {m: sh.marked_line(thread_arrival_skipped, m)
          for m in ("THREAD_BRANCH", "THREAD_ARRIVE", "THREAD_WAIT")}


def test_a_cluster_arrival_a_block_skips_names_the_branch():
    # review K2 D7: block (1) t 0 passes `pl.when(c == 0)` and waits; the t 1 threads,
    # which finished holding the barrier, are not the ones that should arrive
    _check(cluster_arrival_skipped, "cluster2", CLUSTER["CLUSTER_BRANCH"],
           CLUSTER["CLUSTER_ARRIVE"], CLUSTER["CLUSTER_WAIT"], "block (1) w 0",
           [(0, (0,), 0), (0, (1,), 0)])


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "cluster2", "core_map"])
def test_a_block_barrier_arrival_a_thread_skips_names_the_branch(shape):
    # every block's t 1 passes `pl.when(w == 0)` and waits with t 0 for the phase its own
    # arrival should complete; a grid's blocks run one after another, so the first one's
    # deadlock stops the kernel; a cluster's run together
    blocks = [(0,), (1,)] if shape == "cluster2" else [(0,)] if shape == "grid3" else [()]
    who = "block (0) w 1 and block (1) w 1" if shape == "cluster2" else "w 1"
    _check(thread_arrival_skipped, shape, THREAD["THREAD_BRANCH"], THREAD["THREAD_ARRIVE"],
           THREAD["THREAD_WAIT"], who, sorted((0, b, t) for b in blocks for t in (0, 1)),
           them="them" if shape == "cluster2" else "it")


@pytest.mark.parametrize("body,shapes", [
    (cluster_arrival_fixed, ["cluster2"]),
    (thread_arrival_fixed, ["no_grid", "grid3", "cluster2", "core_map"]),
])
def test_the_fixed_kernels_stay_clean(body, shapes):
    for shape in shapes:
        for _ in range(2):
            fn, args = sh.launch(body, shape)
            tr, _ = sh.run_traced(fn, args, timeout_s=30.0)
            assert not tr.findings, tr.summary()
