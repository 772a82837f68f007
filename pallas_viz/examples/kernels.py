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
                o_ref[...] = buf[...]

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
                o_ref[...] = buf[...]

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
                o_ref[...] = buf[...]

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
