"""A producer and a consumer thread, a "full" and an "empty" barrier: one root per bug.

The producer (thread 0) fills a buffer and arrives at "full"; the consumer (thread 1)
waits on "full", reads, and arrives at "empty", on which the producer waits before it
fills the buffer again. Two mistakes:

- the producer never waits on "empty" (`no_empty_wait`): "full" completes its next phase
  before the consumer observed the one before;
- the producer arrives at "full" twice an iteration (`double_arrive`).

Either lets the consumer run ahead too, so in some runs "empty" completes its phases
early as well, and JAX fails at one barrier or the other. Every run has one root, the
same: "full" running ahead at the producer's arrival; "empty"'s overrun (its arriving
thread, the consumer, waited on "full" before each arrival) and JAX's errors fold under
it. (Before, "empty"'s overrun was a second root in some runs.)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from roots_util import assert_stays_clean, single_error_root

from pallas_viz.analysis.barriers import is_unobserved
from pallas_viz.analysis.failures import UNOBSERVED_AT_FREE_HINT
from pallas_viz.examples import shapes as sh

RUNS = 4
SHAPES = ["no_grid", "grid1", "grid3", "cluster2", "core_map", "core_map_grid", "tmem"]


def _pipeline(ctx, x_ref, o_ref, wait_empty=True, arrivals=1):
    def scoped(buf, full, empty):
        def produce(i, carry):
            if wait_empty:
                @pl.when(i > 0)
                def _():
                    plgpu.barrier_wait(empty)
            ctx.store(buf, x_ref[...] + i.astype(jnp.float32))
            for _ in range(arrivals):
                plgpu.barrier_arrive(full)  # FULL
            return carry

        def consume(i, carry):
            plgpu.barrier_wait(full)
            ctx.load(buf, sh.SHAPE[0])
            plgpu.barrier_arrive(empty)  # EMPTY
            return carry

        @pl.when(ctx.thread == 0)
        def _():
            jax.lax.fori_loop(0, 3, produce, 0)

        @pl.when(ctx.thread == 1)
        def _():
            jax.lax.fori_loop(0, 3, consume, 0)

    pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32), plgpu.Barrier(num_arrivals=1),  # SCOPE
                  plgpu.Barrier(num_arrivals=1), collective_axes=ctx.axis)


def pipeline(ctx, x_ref, o_ref):
    _pipeline(ctx, x_ref, o_ref)


def no_empty_wait(ctx, x_ref, o_ref):
    _pipeline(ctx, x_ref, o_ref, wait_empty=False)


def double_arrive(ctx, x_ref, o_ref):
    _pipeline(ctx, x_ref, o_ref, arrivals=2)


FULL = sh.marked_line(_pipeline, "FULL")
EMPTY = sh.marked_line(_pipeline, "EMPTY")
SCOPE = sh.marked_line(_pipeline, "SCOPE")


@pytest.mark.parametrize("body", [no_empty_wait, double_arrive])
@pytest.mark.parametrize("shape", SHAPES)
def test_one_root_at_the_producer_s_arrival(body, shape):
    seen = set()
    for _ in range(RUNS):
        tr, root = single_error_root(body, shape)
        assert is_unobserved(root), tr.summary()
        assert root.source.line == FULL, tr.summary()
        assert "(arrivals: w 0 at line" in root.message
        # which of the scope's two barriers (one line allocates both)
        assert (f"of the barrier allocated at line {SCOPE} (`full`, operand 2 of 3 of its "
                "`pl.run_scoped`) completed") in root.message, root.message
        for c in root.consequences:
            assert c.kind in ("barrier_misuse", "interpreter_error"), tr.summary()
            assert c.source.line in (FULL, EMPTY) or c.kind == "interpreter_error"
        seen.add((root.kind, root.source.line, root.message))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("shape", SHAPES)
def test_the_pipeline_is_clean(shape):
    if jax.__version__.startswith("0.11."):
        # JAX 0.11 requires the producer to observe "empty"'s last phase before the scope
        # frees it (0.12 and a GPU do not): the interpreter's error gets that advice
        seen = set()
        for _ in range(RUNS):  # (the thread that frees the barrier last varies)
            tr, root = single_error_root(pipeline, shape)
            assert root.kind == "interpreter_error", tr.summary()
            assert root.suggestion == UNOBSERVED_AT_FREE_HINT
            assert [t for _, _, t in root.cells] == [0], tr.summary()
            seen.add((root.source.line, root.message))
        assert len(seen) == 1, seen
        return
    assert_stays_clean(pipeline, shape)


@pytest.mark.slow
@pytest.mark.parametrize("body", ["no_empty_wait", "double_arrive"])
def test_one_root_on_two_devices(body):
    import two_devices_roots

    kind, line, message = two_devices_roots.one_root("test_pipeline_barriers", body, 2, 3)
    assert (kind, line) == ("barrier_misuse", FULL), message
