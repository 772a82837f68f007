"""A thread that arrives at a barrier every iteration but skips its wait in one.

Every thread of a block arrives at a shared barrier (`num_arrivals` = the threads) and
waits on it, each iteration of a loop; the last thread skips its wait in the first
iteration (a `pl.when` on the thread and the iteration). Its second arrival can then
count toward the first phase. Which symptom a run shows depends on how the
interpreter's threads interleave: the second arrival completes phase 0 and the next
phase completes before anyone observed it (a phase overrun), or the phases complete in
order and JAX fails the skipping thread's first wait ("waiting ... for the first time,
but barrier is already at phase 2"), or neither shows before the run ends. The root is
the same every run: the second arrival, made again before waiting, with the wait's
branch named; the other symptoms fold under it. (Before, the root was JAX's bare error
at the wait in some runs and the phase overrun, naming different arrivals, in others.)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from roots_util import assert_stays_clean, single_error_root

from pallas_viz.analysis.barriers import REARRIVAL_HINT
from pallas_viz.examples import shapes as sh

RUNS = 4
# every launch shape with a thread axis whose threads can share a barrier (warp-level
# code cannot allocate one; pallas_call has one thread per block); two devices below
SHAPES = ["no_grid", "grid1", "grid3", "cluster2", "core_map", "core_map_grid", "tmem"]


def _arrive_and_wait(bar, skips):
    """Three iterations: arrive at `bar`, then wait on it unless `skips(i)` (traced)."""
    def step(i, carry):
        plgpu.barrier_arrive(bar)  # ARRIVE
        @pl.when(jnp.logical_not(skips(i)))  # BRANCH
        def _():
            plgpu.barrier_wait(bar)  # WAIT
        return carry

    jax.lax.fori_loop(0, 3, step, 0)


def skipped_wait(ctx, x_ref, o_ref):
    """The last thread skips its wait in the first iteration."""
    last = ctx.num_threads - 1

    def scoped(bar):
        _arrive_and_wait(bar, lambda i: (ctx.thread == last) & (i == 0))

    pl.run_scoped(scoped, plgpu.Barrier(num_arrivals=ctx.num_threads),  # ALLOC
                  collective_axes=ctx.axis)


def waits_every_time(ctx, x_ref, o_ref):
    """The fix: every thread waits after every arrival."""
    pl.run_scoped(lambda bar: _arrive_and_wait(bar, lambda i: False),
                  plgpu.Barrier(num_arrivals=ctx.num_threads), collective_axes=ctx.axis)


def _line(marker):
    return sh.marked_line(skipped_wait if marker == "ALLOC" else _arrive_and_wait, marker)


@pytest.mark.parametrize("num_threads", [2, 3])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_skipped_wait_is_one_root_at_the_second_arrival(shape, num_threads):
    seen = set()
    symptoms = set()
    for _ in range(RUNS):
        tr, root = single_error_root(skipped_wait, shape, num_threads=num_threads)
        assert root.kind == "barrier_misuse", tr.summary()
        assert root.suggestion == REARRIVAL_HINT
        assert root.source.line == _line("ARRIVE")
        assert [r.line for r in root.related] == [_line("WAIT"), _line("BRANCH"),
                                                   _line("ALLOC")]
        assert {t for _, _, t in root.cells} == {num_threads - 1}, root.cells
        assert f"w {num_threads - 1} arrive(s)" in root.message
        assert (f"the wait at line {_line('WAIT')} is inside the `pl.when` at line "
                f"{_line('BRANCH')}") in root.message
        # whatever else the run showed is folded under it
        for c in root.consequences:
            assert c.kind in ("barrier_misuse", "interpreter_error"), tr.summary()
            symptoms.add(c.kind)
        seen.add((root.kind, root.source.line, root.message))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "cluster2", "core_map"])
def test_the_fix_is_clean(shape):
    assert_stays_clean(waits_every_time, shape)


def _warps_kernel(skip: bool, grid):
    """Warp-level code: the warpgroup allocates the barrier, its four warps arrive and wait
    each iteration; warp 3 skips its first wait when `skip`."""
    def kbody(x_ref, o_ref):
        def scoped(bar):
            @pl.core_map(plgpu.WarpMesh(axis_name="warp"))
            def _():
                w = jax.lax.axis_index("warp")
                _arrive_and_wait(bar, lambda i: (w == 3) & (i == 0) & skip)

        pl.run_scoped(scoped, plgpu.Barrier(num_arrivals=4))
        o_ref[...] = x_ref[...]

    kw = {"grid": grid, "grid_names": ("g",)} if grid else {}
    return plgpu.kernel(kbody, out_type=jax.ShapeDtypeStruct(sh.SHAPE, jnp.float32),
                        interpret=plgpu.InterpretGPUParams(), **kw)


@pytest.mark.filterwarnings("ignore:jax.experimental.pallas.core_map is deprecated")
@pytest.mark.parametrize("grid", [None, (2,)])
def test_a_warp_that_skips_its_wait_is_named(grid):
    x = jnp.ones(sh.SHAPE, jnp.float32)
    seen = set()
    for _ in range(RUNS):
        tr, _ = sh.run_traced(_warps_kernel(True, grid), (x,))
        (root,) = [f for f in tr.findings if f.severity == "error"]
        assert root.suggestion == REARRIVAL_HINT, tr.summary()
        assert root.source.line == _line("ARRIVE")
        assert "thread(s) 0 warp 3 arrive(s)" in root.message
        assert f"`pl.when` at line {_line('BRANCH')}" in root.message
        seen.add(root.message)
    assert len(seen) == 1, seen
    tr, _ = sh.run_traced(_warps_kernel(False, grid), (x,))
    assert tr.findings == [] and tr.failure is None, tr.summary()


def _cluster_kernel(skip: bool, num_threads: int):
    """A `plgpu.ClusterBarrier` over a cluster of 2: every thread arrives and waits each
    iteration; block (1)'s threads skip their first wait when `skip`."""
    def kbody(x_ref, o_ref):
        c = jax.lax.axis_index("c")

        def scoped(bar):
            _arrive_and_wait(bar, lambda i: (c == 1) & (i == 0) & skip)

        pl.run_scoped(scoped, plgpu.ClusterBarrier(collective_axes=("c",),
                                                   num_arrivals=num_threads),
                      collective_axes="w")

        @pl.when(jax.lax.axis_index("w") == 0)
        def _():
            sh.store_block_rows(sh.Ctx(thread=0, axis="w", smem=plgpu.SMEM, num_threads=1,
                                       shape="cluster2", blocks=("c", 2)),
                                o_ref, x_ref[...])

    return plgpu.kernel(kbody, out_type=jax.ShapeDtypeStruct(sh.SHAPE, jnp.float32),
                        interpret=plgpu.InterpretGPUParams(), cluster=(2,),
                        cluster_names=("c",), num_threads=num_threads, thread_name="w")


@pytest.mark.parametrize("num_threads", [1, 2])
def test_a_cluster_barrier_wait_skipped_by_one_block(num_threads):
    """Whether block (1)'s threads got to their wait before the failure the overrun
    causes varies: the root does not."""
    x = jnp.ones(sh.SHAPE, jnp.float32)
    seen = set()
    for _ in range(RUNS + 2):
        tr, _ = sh.run_traced(_cluster_kernel(True, num_threads), (x,))
        (root,) = [f for f in tr.findings if f.severity == "error"]
        assert root.suggestion == REARRIVAL_HINT, tr.summary()
        assert root.source.line == _line("ARRIVE")
        assert {b for _, b, _ in root.cells} == {(1,)}, root.cells
        assert f"`pl.when` at line {_line('BRANCH')}" in root.message
        seen.add(root.message)
    assert len(seen) == 1, seen
    tr, _ = sh.run_traced(_cluster_kernel(False, num_threads), (x,))
    assert tr.findings == [] and tr.failure is None, tr.summary()


@pytest.mark.slow
def test_a_skipped_wait_on_two_devices():
    import two_devices_roots

    kind, line, message = two_devices_roots.one_root("test_skipped_wait", "skipped_wait", 2, 3)
    assert (kind, line) == ("barrier_misuse", _line("ARRIVE")), message
    assert "w 1 arrive(s)" in message
