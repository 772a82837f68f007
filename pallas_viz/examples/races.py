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
