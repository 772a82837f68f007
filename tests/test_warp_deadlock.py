"""A deadlock inside warp-level code is stopped at once, without a timeout.

JAX runs a warpgroup's warps (`pl.core_map` over `plgpu.WarpMesh`) as tasks of a thread
pool of their own and reports no warp's end; the wait-for check counts those tasks, so
when every warp has ended or waits on a phase nobody can complete, the kernel stops at
once ("wait_for"), as it does for warpgroups. Warps that wait for a warp still running
are never stopped. (Before, such a kernel hung until `timeout_s`, or forever.)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

import pallas_viz as pv
from pallas_viz.examples import shapes as sh

SHAPE = (8, 128)
# (num_threads, grid): one warpgroup, no grid; two warpgroups in a grid of 2
LAUNCHES = [(1, ()), (2, (2,))]
RUNS = 3
# generous: a deadlock the check misses would hang for this long (and fail the test)
WATCHDOG_S = 60.0


def _kernel(num_threads, grid, arriving_warp, work=0):
    def body(x_ref, o_ref, buf, bar):
        @pl.core_map(plgpu.WarpMesh(axis_name="warp"))
        def _():
            w = jax.lax.axis_index("warp")

            @pl.when(w == arriving_warp)
            def _():
                def step(i, carry):
                    buf[...] = x_ref[...] + i.astype(jnp.float32)
                    return carry

                jax.lax.fori_loop(0, work + 1, step, 0)
                plgpu.barrier_arrive(bar)

            @pl.when(w == 0)
            def _():
                plgpu.barrier_wait(bar)  # WAIT
                o_ref[...] = buf[...]

    kw = dict(grid=grid, grid_names=("g",)) if grid else {}
    if num_threads > 1:
        kw.update(num_threads=num_threads, thread_name="t")
    return plgpu.kernel(
        body, out_type=jax.ShapeDtypeStruct(SHAPE, jnp.float32),
        scratch_types=[plgpu.SMEM(SHAPE, jnp.float32),
                       plgpu.Barrier(num_arrivals=num_threads)],
        interpret=plgpu.InterpretGPUParams(), **kw)


def _x():
    return jnp.arange(SHAPE[0] * SHAPE[1], dtype=jnp.float32).reshape(SHAPE)


WAIT_LINE = sh.marked_line(_kernel, "WAIT")


@pytest.mark.parametrize("num_threads,grid", LAUNCHES)
def test_warps_waiting_for_a_warp_that_does_not_exist(num_threads, grid):
    kernel = _kernel(num_threads, grid, arriving_warp=4)  # warps are 0..3: off by one
    for _ in range(RUNS):
        with sh._quiet_core_map(), pv.trace(raise_errors=False, timeout_s=WATCHDOG_S) as tr:
            kernel(_x())
        (d,) = tr.meta["deadlocks"]
        assert d["detected_by"] == "wait_for", d
        waiters = d["waiters"]
        assert {(w["thread"], w["warp"]) for w in waiters} == {
            (t, 0) for t in range(num_threads)}
        (root,) = [f for f in tr.findings if f.severity == "error"]
        assert root.kind == "deadlock" and root.source.line == WAIT_LINE
        assert "stopped at once by the wait-for check" in root.message
        # the waiter's own `pl.when(w == 0)` is not where threads part: not named as such
        assert root.branch is None and "threads part here" not in tr.summary()


@pytest.mark.parametrize("num_threads,grid", LAUNCHES)
def test_warps_waiting_for_a_busy_warp_are_not_stopped(num_threads, grid):
    # warp 3 stores 40 times before it arrives: warp 0 waits all along, warps 1 and 2
    # have ended; nothing may be declared stuck while warp 3 runs
    kernel = _kernel(num_threads, grid, arriving_warp=3, work=40)
    for _ in range(RUNS):
        with sh._quiet_core_map(), pv.trace(timeout_s=WATCHDOG_S) as tr:
            out = kernel(_x())
        assert tr.findings == [] and not tr.meta.get("deadlocks"), tr.summary()
        assert float(out[0, 1]) == 1.0 + 40.0
