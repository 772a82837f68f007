"""A kernel that deadlocks in GPU interpret mode: run it under `pv.trace(timeout_s=...)`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from .kernels import SHAPE, _kernel, _x


def barrier_handshake_in_branch(grid=(1,)):
    """A handshake barrier allocated in thread 0's branch: thread 0 waits forever.

    Thread 0 allocates the barrier inside `pl.when(t == 0)` and waits for thread 1
    to arrive; thread 1 never allocates it, so it can never arrive. Without a
    timeout the interpreter hangs; with `pv.trace(timeout_s=...)` the run is
    stopped and a `deadlock` finding names the waiting thread and line.
    """

    def body(x_ref, o_ref):
        t = jax.lax.axis_index("t")

        @pl.when(t == 0)
        def _():
            def scoped(bar):
                plgpu.barrier_wait(bar)  # waits for thread 1's arrival, which never comes
                o_ref[...] = x_ref[...]

            pl.run_scoped(scoped, plgpu.Barrier(num_arrivals=1), collective_axes="t")

        @pl.when(t == 1)
        def _():
            o_ref[...] = x_ref[...] + jnp.zeros(SHAPE, jnp.float32)  # "signals" nothing

    return _kernel(body, grid=grid), _x()
