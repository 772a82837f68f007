"""Two-thread kernels, clean and buggy, that run in GPU interpret mode on the CPU."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

SHAPE = (8, 128)


def _kernel(body, grid=(2,), num_threads=2, thread_name="t", **kw):
    return plgpu.kernel(
        body,
        out_type=jax.ShapeDtypeStruct(SHAPE, jnp.float32),
        grid=grid,
        grid_names=tuple(f"g{i}" for i in range(len(grid))),
        num_threads=num_threads,
        thread_name=thread_name,
        interpret=plgpu.InterpretGPUParams(),
        **kw,
    )


def _x():
    return (jnp.arange(SHAPE[0] * SHAPE[1], dtype=jnp.float32).reshape(SHAPE),)


def clean_collective(grid=(2,)):
    """Every thread allocates a shared SMEM buffer and a barrier: no findings."""

    def body(x_ref, o_ref):
        t = jax.lax.axis_index("t")

        def scoped(buf, bar):
            @pl.when(t == 0)
            def _():
                buf[...] = x_ref[...] + 1.0
                write_block_rows(o_ref, buf[...], grid)  # this block's rows only

        pl.run_scoped(scoped, plgpu.SMEM(SHAPE, jnp.float32),
                      plgpu.Barrier(num_arrivals=1), collective_axes="t")

    return _kernel(body, grid=grid), _x()


def collective_in_branch(grid=(2,)):
    """Thread 0 alone reaches a collective allocation: it leaks, silently."""

    def body(x_ref, o_ref):
        t = jax.lax.axis_index("t")

        @pl.when(t == 0)
        def _():
            def scoped(buf):
                buf[...] = x_ref[...] * 2.0
                write_block_rows(o_ref, buf[...], grid)  # this block's rows only

            pl.run_scoped(scoped, plgpu.SMEM(SHAPE, jnp.float32), collective_axes="t")

    return _kernel(body, grid=grid), _x()


def hoisted_collective(grid=(2,)):
    """The fix of `collective_in_branch`: allocate for all threads, branch inside."""

    def body(x_ref, o_ref):
        t = jax.lax.axis_index("t")

        def scoped(buf):
            @pl.when(t == 0)
            def _():
                buf[...] = x_ref[...] * 2.0
                write_block_rows(o_ref, buf[...], grid)  # this block's rows only

        pl.run_scoped(scoped, plgpu.SMEM(SHAPE, jnp.float32), collective_axes="t")

    return _kernel(body, grid=grid), _x()


def collective_in_branch_nonzero(grid=(2,)):
    """Thread 1 alone creates a collective buffer that belongs to thread 0."""

    def body(x_ref, o_ref):
        t = jax.lax.axis_index("t")

        @pl.when(t == 1)
        def _():
            def scoped(buf):
                buf[...] = x_ref[...] - 1.0
                o_ref[...] = buf[...]

            pl.run_scoped(scoped, plgpu.SMEM(SHAPE, jnp.float32), collective_axes="t")

    return _kernel(body, grid=grid), _x()


def mismatched_collective_shapes(grid=(1,)):
    """Threads put differently shaped buffers in the same collective slot."""

    def body(x_ref, o_ref):
        t = jax.lax.axis_index("t")

        @pl.when(t == 0)
        def _():
            def scoped(buf):
                buf[...] = x_ref[...]

            pl.run_scoped(scoped, plgpu.SMEM(SHAPE, jnp.float32), collective_axes="t")

        @pl.when(t == 1)
        def _():
            def scoped(buf):
                buf[...] = x_ref[:4, :]

            pl.run_scoped(scoped, plgpu.SMEM((4, 128), jnp.float32), collective_axes="t")

    return _kernel(body, grid=grid), _x()


def barrier_in_branch(grid=(1,)):
    """A barrier allocated in a thread-divergent branch: it is never freed."""

    def body(x_ref, o_ref):
        t = jax.lax.axis_index("t")

        @pl.when(t == 0)
        def _():
            def scoped(bar):
                o_ref[...] = x_ref[...]

            pl.run_scoped(scoped, plgpu.Barrier(num_arrivals=1), collective_axes="t")

    return _kernel(body, grid=grid), _x()


def missing_collective_axes():
    """A scoped allocation without the thread axis: rejected at trace time."""

    def body(x_ref, o_ref):
        def scoped(buf):
            buf[...] = x_ref[...]
            o_ref[...] = buf[...]

        pl.run_scoped(scoped, plgpu.SMEM(SHAPE, jnp.float32))

    return _kernel(body), _x()


def aliased_after_branch(grid=(1,)):
    """A collective allocation in a branch shifts thread 1's ids: its buffer is a barrier.

    Thread 0 alone allocates a scratch buffer; the next collective scope (a buffer and
    a barrier for a handshake) then pairs thread 0's buffer with thread 1's view of
    the scratch, and thread 0's barrier with thread 1's buffer. The interpreter fails
    with "Allocation with key ... is not a `Buffer`".
    """

    def body(x_ref, o_ref):
        t = jax.lax.axis_index("t")

        @pl.when(t == 0)
        def _():
            def scratch(tmp):
                tmp[...] = x_ref[...]

            pl.run_scoped(scratch, plgpu.SMEM(SHAPE, jnp.float32), collective_axes="t")

        def handshake(buf, bar):
            @pl.when(t == 0)
            def _():
                buf[...] = x_ref[...] + 1.0
                plgpu.barrier_arrive(bar)

            @pl.when(t == 1)
            def _():
                plgpu.barrier_wait(bar)
                o_ref[...] = buf[...]

        pl.run_scoped(handshake, plgpu.SMEM(SHAPE, jnp.float32),
                      plgpu.Barrier(num_arrivals=1), collective_axes="t")

    return _kernel(body, grid=grid), _x()


# --------------------------------------------------------------------------- helpers
# Defined last: the line numbers of the kernels above are part of the documentation
# (README.md's quick start shows `collective_in_branch` at lines 54 and 60).


def block_index(grid, names=None):
    """The block's index in `grid`, row-major over its axes `names` (``g0, g1, ...``)."""
    names = names or tuple(f"g{i}" for i in range(len(grid)))
    b = 0
    for name, n in zip(names, grid):
        b = b * n + jax.lax.axis_index(name)
    return b


def write_block_rows(o_ref, value, grid, names=None):
    """``o_ref[...] = value`` (all the rows), this block of `grid`'s rows only.

    The blocks of a grid run concurrently on a GPU and no barrier orders them, so blocks
    that all write the whole output race (`pv.trace(detect_races=True)` reports it, and the
    result depends on which block writes last): each block writes its own rows.
    """
    n = 1
    for size in grid:
        n *= size
    store_rows(o_ref, value, block_index(grid, names) if n > 1 else 0, n)


def store_rows(o_ref, value, block, num_blocks):
    """``o_ref[...] = value``, the rows of block `block` of `num_blocks` only.

    Block ``b`` of ``n`` writes rows ``[b * r, (b + 1) * r)`` with ``r = rows // n``, the
    last block also the rows left over (8 rows, 3 blocks: rows 0-1, 2-3, 4-7); with more
    blocks than rows, block 0 writes them all.
    """
    rows = o_ref.shape[0]
    per, rest = divmod(rows, num_blocks)
    if num_blocks == 1:
        o_ref[...] = value
    elif per == 0:
        @pl.when(block == 0)
        def _():
            o_ref[...] = value
    else:
        o_ref[pl.ds(block * per, per)] = jax.lax.dynamic_slice_in_dim(value, block * per, per)
        if rest:
            @pl.when(block == num_blocks - 1)
            def _():
                o_ref[pl.ds(rows - rest, rest)] = value[rows - rest:]
