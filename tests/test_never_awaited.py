"""A TMA copy whose barrier no thread ever waits on.

Thread 0 copies GMEM into an SMEM buffer with `plgpu.copy_gmem_to_smem(..., barrier)` and
reads the buffer at once, never waiting on the barrier. Interpret mode copies at once,
so the output is right and the kernel used to be called clean; on a GPU the read races
with the copy. Without race detection the run shows one warning at the copy's line (its
barrier completed once and nobody waited on it); with race detection, JAX's race at the
read is the root and that warning folds under it (JAX 0.11 runs on after a race, 0.12
stops the run there). Waiting on the barrier before the read is clean.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from roots_util import assert_stays_clean

from pallas_viz.analysis.barriers import NO_WAIT_COPY_HINT, is_never_awaited
from pallas_viz.examples import shapes as sh

RUNS = 3
SHAPES = ["no_grid", "grid1", "grid3", "cluster2", "core_map", "core_map_grid"]


def _copy(ctx, x_ref, o_ref, wait: bool):
    def scoped(buf, bar):
        @pl.when(ctx.thread == 0)
        def _():
            plgpu.copy_gmem_to_smem(x_ref, buf, bar)  # COPY
            if wait:
                plgpu.barrier_wait(bar)
            sh.store_block_rows(ctx, o_ref, buf[...])

    pl.run_scoped(scoped, plgpu.SMEM(sh.SHAPE, jnp.float32),  # ALLOC
                  plgpu.Barrier(num_arrivals=1), collective_axes=ctx.axis)


def copy_never_awaited(ctx, x_ref, o_ref):
    _copy(ctx, x_ref, o_ref, wait=False)


def copy_awaited(ctx, x_ref, o_ref):
    _copy(ctx, x_ref, o_ref, wait=True)


COPY = sh.marked_line(_copy, "COPY")
ALLOC = sh.marked_line(_copy, "ALLOC")


@pytest.mark.parametrize("shape", SHAPES)
def test_a_copy_never_awaited_is_a_warning_at_the_copy(shape):
    seen = set()
    for _ in range(RUNS):
        fn, args = sh.launch(copy_never_awaited, shape)
        tr, _ = sh.run_traced(fn, args)
        (f,) = tr.findings
        assert is_never_awaited(f) and f.severity == "warning", tr.summary()
        assert f.source.line == COPY and [r.line for r in f.related] == [ALLOC]
        assert f.suggestion == NO_WAIT_COPY_HINT
        assert {t for _, _, t in f.cells} == {0}
        seen.add(f.message)
    assert len(seen) == 1, seen
    assert f"the TMA copy at line {COPY} arrives at the barrier allocated at line {ALLOC}" in (
        f.message)


@pytest.mark.parametrize("shape", ["no_grid", "grid3"])
def test_with_race_detection_the_race_is_the_root(shape):
    for _ in range(RUNS):
        fn, args = sh.launch(copy_never_awaited, shape)
        tr, _ = sh.run_traced(fn, args, detect_races=True)
        (f,) = tr.findings
        assert f.kind == "race" and COPY in [r.line for r in f.related], tr.summary()
        # JAX 0.12 stops the run at the race; 0.11 runs on and the warning folds under it
        assert all(is_never_awaited(c) for c in f.consequences)
        if jax.__version__.startswith("0.11."):
            assert f.consequences, tr.summary()


@pytest.mark.parametrize("shape", SHAPES)
def test_waiting_for_the_copy_is_clean(shape):
    assert_stays_clean(copy_awaited, shape)



def copies_into_one_phase(ctx, x_ref, o_ref):
    """Two TMA copies signal a barrier that counts one arrival; one wait for both."""

    def scoped(a, b, bar):
        @pl.when(ctx.thread == 0)
        def _():
            plgpu.copy_gmem_to_smem(x_ref, a, bar)  # FIRST
            plgpu.copy_gmem_to_smem(x_ref, b, bar)
            plgpu.barrier_wait(bar)
            sh.store_block_rows(ctx, o_ref, a[...] + b[...])

    pl.run_scoped(scoped, plgpu.SMEM(sh.SHAPE, jnp.float32), plgpu.SMEM(sh.SHAPE, jnp.float32),
                  plgpu.Barrier(num_arrivals=1), collective_axes=ctx.axis)


@pytest.mark.parametrize("shape", SHAPES)
def test_copies_completing_a_phase_each_get_the_num_arrivals_advice(shape):
    seen = set()
    for _ in range(RUNS):
        fn, args = sh.launch(copies_into_one_phase, shape)
        tr, _ = sh.run_traced(fn, args)
        (root,) = [f for f in tr.findings if f.severity == "error"]
        assert root.kind == "barrier_misuse", tr.summary()
        assert root.source.line == sh.marked_line(copies_into_one_phase, "FIRST")
        assert root.suggestion.endswith(
            "Here each phase was completed by a TMA copy w 0 started: each copy that signals "
            "a barrier is one arrival, so if the copies are meant for one phase, make "
            "`num_arrivals` the number of copies that signal it and wait once for them all; if "
            "each is meant for a phase of its own, start the next copy only once the phase "
            "before it was observed."), root.suggestion
        seen.add((root.message, root.suggestion))
    assert len(seen) == 1, seen
