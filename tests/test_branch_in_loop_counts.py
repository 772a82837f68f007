"""A collective scope under a thread-dependent `pl.when` inside a loop.

`pl.when(i >= thread)` in a two-step loop: thread 0 opens the scope twice, thread 1
once. The partial-collective root said "w 1 never requests it", which is false: w 1
requests it, once. It now gives each thread's count and names the branch that skips it
in some iterations; with a third thread (which never gets there) the counts follow the
message. A branch outside any loop keeps its message (no counts).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from roots_util import single_error_root

from pallas_viz.examples import shapes as sh

SHAPES = ["no_grid", "grid3", "cluster2", "core_map", "tmem"]


def when_in_loop(ctx, x_ref, o_ref):
    def step(i, carry):
        @pl.when(i >= ctx.thread)  # BRANCH
        def _():
            def scoped(buf):
                ctx.store(buf, x_ref[...])

            pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32),  # ALLOC
                          collective_axes=ctx.axis)

        return carry

    jax.lax.fori_loop(0, 2, step, 0)
    sh.store_block_rows(ctx, o_ref, x_ref[...])


ALLOC = sh.marked_line(when_in_loop, "ALLOC")
BRANCH = sh.marked_line(when_in_loop, "BRANCH")


@pytest.mark.parametrize("shape", SHAPES)
def test_every_thread_that_makes_it_is_counted(shape):
    seen = set()
    for _ in range(2):
        tr, root = single_error_root(when_in_loop, shape)
        assert root.kind == "partial_collective" and root.source.line == ALLOC, tr.summary()
        assert root.branch is not None and root.branch.line == BRANCH
        assert "never requests" not in root.message, root.message
        assert ("is requested 2 times in w 0 and 1 time in w 1 (the `pl.when` at line "
                f"{BRANCH} skips it in some iterations of its loop): each request after the "
                "1st is made only by w 0 of 2") in root.message, root.message
        seen.add((root.message, root.suggestion))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("shape", ["no_grid", "grid3"])
def test_a_thread_that_never_gets_there_is_named_with_the_counts(shape):
    tr, root = single_error_root(when_in_loop, shape, num_threads=3)
    assert root.kind == "partial_collective", tr.summary()
    assert "w 2 never requests it" in root.message
    assert root.message.endswith(
        f"; under the `pl.when` at line {BRANCH} it is made 2 times in w 0 and 1 time in w 1 "
        "and 0 times in w 2"), root.message


def test_a_branch_outside_a_loop_keeps_its_message():
    tr, root = single_error_root(sh.collective_in_branch, "no_grid")
    assert root.kind == "partial_collective", tr.summary()
    assert "never requests it" in root.message and "times" not in root.message
