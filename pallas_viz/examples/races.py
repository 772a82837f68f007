"""Kernels with data races, for `pv.trace(detect_races=True)`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from .kernels import SHAPE, _kernel, _x


def unsynchronized_handoff(grid=(1,)):
    """Thread 0 writes a shared SMEM buffer that thread 1 reads, with no barrier between."""

    def body(x_ref, o_ref):
        t = jax.lax.axis_index("t")

        def scoped(buf):
            @pl.when(t == 0)
            def _():
                buf[...] = x_ref[...] * 2.0

            @pl.when(t == 1)
            def _():
                o_ref[...] = buf[...]  # races with thread 0's write

        pl.run_scoped(scoped, plgpu.SMEM(SHAPE, jnp.float32), collective_axes="t")

    return _kernel(body, grid=grid), _x()


def race_after_divergent_collective(grid=(1,)):
    """A collective allocation in thread 0's branch makes the threads alias a later buffer.

    Thread 0 alone allocates `tmp`; the buffer both threads then allocate is, for
    thread 1, merged into thread 0's `tmp`. JAX reports a race on that buffer: really
    the threads use different buffers that alias.
    """

    def body(x_ref, o_ref):
        t = jax.lax.axis_index("t")

        @pl.when(t == 0)
        def _():
            def scratch(tmp):
                tmp[...] = x_ref[...] + 1.0

            pl.run_scoped(scratch, plgpu.SMEM(SHAPE, jnp.float32), collective_axes="t")

        def shared(buf):
            @pl.when(t == 0)
            def _():
                buf[...] = x_ref[...]

            @pl.when(t == 1)
            def _():
                o_ref[...] = buf[...]

        pl.run_scoped(shared, plgpu.SMEM(SHAPE, jnp.float32), collective_axes="t")

    return _kernel(body, grid=grid), _x()


# --------------------------------------------------------------------------- between blocks
# Blocks of a grid run at once on a GPU, in no fixed order, and no barrier orders blocks of
# different clusters (a `plgpu.ClusterBarrier` orders the blocks of one cluster only).
# GPU interpret mode runs a grid's clusters one after another, but its race detection still
# reports two blocks touching the same GMEM: that is a real race.

# Launch shapes with more than one block (see `pallas_viz.examples.shapes.SHAPES`): a grid
# of 2 (`plgpu.kernel`), a cluster of 2, `core_map` over a `plgpu.Mesh` with a grid of 2, a
# grid of 2 on each of two devices (needs 2 CPU devices, see `shapes.TWO_DEVICES_ENV`), and
# a `pallas_call` with a grid of 2. A kernel without a grid has one block: no such race.
BLOCK_SHAPES = ("grid", "cluster", "core_map", "two_devices", "pallas_call")
ROWS_PER_BLOCK = SHAPE[0] // 2


def _every_block_writes_all(ctx, x_ref, o_ref):
    @pl.when(ctx.thread == 0)
    def _():
        # every block writes every row of the output
        o_ref[...] = x_ref[...] * 2.0  # SAME_OUTPUT


def _each_block_writes_its_rows(ctx, x_ref, o_ref):
    b, _ = ctx.block()
    rows = pl.ds(b * ROWS_PER_BLOCK, ROWS_PER_BLOCK)

    @pl.when(ctx.thread == 0)
    def _():
        o_ref[rows] = x_ref[rows] * 2.0  # each block writes its own rows


def _launch_blocks(body, shape, detect_races):
    from . import shapes

    if shape not in BLOCK_SHAPES:
        raise ValueError(f"unknown shape {shape!r}; expected one of {BLOCK_SHAPES}")
    params = plgpu.InterpretGPUParams(detect_races=detect_races)
    if shape in ("grid", "two_devices"):  # a grid of 2 (on each of two devices)
        blocks = (shapes.GRID_AXIS, 2)

        def kbody(x_ref, o_ref):
            body(shapes._thread_ctx("grid", 2, blocks=blocks), x_ref, o_ref)

        def kernel():
            return shapes._plgpu_kernel(kbody, 2, params, grid=(2,),
                                        grid_names=(shapes.GRID_AXIS,))

        if shape == "two_devices":
            return shapes._on_two_devices(kernel), (shapes._x(),)
        return kernel(), (shapes._x(),)
    launch_shape = {"cluster": "cluster2", "core_map": "core_map_grid",
                    "pallas_call": "pallas_call"}[shape]
    return shapes.launch(body, launch_shape, params=params)


def blocks_write_same_output(shape="grid", detect_races=False):
    """Thread 0 of every block writes the whole output: the blocks race on GMEM.

    `shape` is one of `BLOCK_SHAPES`. In "pallas_call" (whose program id GPU interpret mode
    fixes to 0, so a block cannot pick its rows) JAX reports the race on the SMEM copy of
    the operands that the interpreter shares among the grid's blocks (see
    `pallas_viz.analysis.races`).
    """
    return _launch_blocks(_every_block_writes_all, shape, detect_races)


def blocks_write_own_rows(shape="grid", detect_races=False):
    """The fix of `blocks_write_same_output`: each block writes its own rows (not in
    "pallas_call", where every block has program id 0 in GPU interpret mode)."""
    if shape == "pallas_call":
        raise ValueError("GPU interpret mode gives every pallas_call block program id 0")
    return _launch_blocks(_each_block_writes_its_rows, shape, detect_races)
