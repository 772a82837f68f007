"""A thread that skips a collective allocation in one block of a grid leaves its buffer
allocated; in the next block the interpreter (whose allocation keys carry on from block
to block) hands that thread the stale buffer when it makes the request again. The
consequence in that later block says so: the thread did request it there."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_viz.examples import shapes as sh

SHAPE = (8, 128)


def one_block_skips(x_ref, o_ref):
    g = jax.lax.axis_index("g")
    t = jax.lax.axis_index("t")

    def scoped(buf):
        buf[...] = x_ref[...]

        @pl.when(g == 0)
        def _():
            o_ref[...] = buf[...]

    @pl.when(jnp.logical_not((g == 2) & (t == 1)))
    def _():
        pl.run_scoped(scoped, plgpu.SMEM(SHAPE, jnp.float32), collective_axes="t")  # ALLOC


@pytest.mark.parametrize("grid", [(4,), (3,)])
def test_the_block_after_a_skip_says_its_thread_got_the_stale_buffer(grid):
    fn = plgpu.kernel(one_block_skips, out_type=jax.ShapeDtypeStruct(SHAPE, jnp.float32),
                      grid=grid, grid_names=("g",), num_threads=2, thread_name="t",
                      interpret=plgpu.InterpretGPUParams())
    line = sh.marked_line(one_block_skips, "ALLOC")
    seen = set()
    for _ in range(3):
        tr, _ = sh.run_traced(fn, (jnp.ones(SHAPE, jnp.float32),))
        (root,) = [f for f in tr.findings if f.severity == "error"]
        assert root.kind == "partial_collective" and root.source.line == line
        assert {tuple(b) for _, b, _ in root.cells} == {(2,)}, root.cells
        assert "t 1 never requests it" in root.message
        later = [c for c in root.consequences if c.kind == "partial_collective"]
        if grid == (3,):  # no block after the skip
            assert later == [], tr.summary()
        else:
            (c,) = later
            assert {tuple(b) for _, b, _ in c.cells} == {(3,)}, c.cells
            assert c.message.endswith(
                "t 1 requests it at this line too, but the interpreter hands it the buffer "
                "block (2) left allocated (its key carries on from block to block), so the "
                "threads of this block do not share one buffer"), c.message
        seen.add((root.message, tuple(c.message for c in root.consequences)))
    assert len(seen) == 1, seen
