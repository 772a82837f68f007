"""A 64-block kernel whose bug sits in one block: the widget must open on it.

Every block's two threads (axis "w") share a collective barrier; in block 41 alone each
thread takes a collective SMEM scratch buffer in its own `pl.when(...)` branch, at two
different lines: thread 1 never requests thread 0's buffer (nor thread 0 thread 1's), and
the interpreter merges the two into one. A partial collective in block (41) only, invisible
in the other 63 (both threads still make the same number of requests there, so the
interpreter's per-thread counters, which carry on from block to block, stay aligned and the
run finishes).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

SHAPE = (8, 128)
BLOCKS = 64
BAD_BLOCK = 41


def one_bad_block(blocks: int = BLOCKS, bad: int = BAD_BLOCK):
    """`(fn, args)`: `blocks` blocks x 2 threads; block `bad` leaks a collective buffer."""

    def body(x_ref, o_ref):
        w = jax.lax.axis_index("w")
        g = jax.lax.axis_index("g")

        def scoped(bar):
            @pl.when(w == 0)
            def _():
                o_ref[...] = x_ref[...] + 1.0

        pl.run_scoped(scoped, plgpu.Barrier(num_arrivals=1), collective_axes="w")

        @pl.when(jnp.logical_and(g == bad, w == 0))
        def _():
            def scratch(tmp):
                tmp[...] = x_ref[...] * 2.0

            pl.run_scoped(scratch, plgpu.SMEM(SHAPE, jnp.float32), collective_axes="w")

        @pl.when(jnp.logical_and(g == bad, w == 1))
        def _():
            def other_scratch(tmp):
                tmp[...] = x_ref[...] * 3.0

            pl.run_scoped(other_scratch, plgpu.SMEM(SHAPE, jnp.float32), collective_axes="w")

    fn = plgpu.kernel(
        body,
        out_type=jax.ShapeDtypeStruct(SHAPE, jnp.float32),
        grid=(blocks,),
        grid_names=("g",),
        num_threads=2,
        thread_name="w",
        interpret=plgpu.InterpretGPUParams(),
    )
    x = jnp.arange(SHAPE[0] * SHAPE[1], dtype=jnp.float32).reshape(SHAPE)
    return fn, (x,)
