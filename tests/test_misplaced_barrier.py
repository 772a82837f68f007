"""A race between a producer and a consumer whose barrier is written on the wrong side
of an access.

The consumer reads the shared tile and only then waits on `full` (the wait at the end
of its loop body), or the producer arrives at `full` and only then writes the tile. The
barrier is there, so the general race advice ("put a barrier between the write and the
other thread's access") is wrong for the line: the advice names the misplaced call and
says which way to move it. The barrier calls around each access are read from the
kernel's source when the trace is recorded (a saved trace keeps them). Run with JAX's
race detection in every launch shape with two threads, several runs each.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

import pallas_viz as pv
from pallas_viz.examples import shapes as sh

RUNS = 3
SHAPES = ["no_grid", "grid1", "grid3", "cluster2", "core_map", "core_map_grid", "tmem"]
STEPS = 3


# (each step written out in its own function: the advice reads the barrier calls
# written around an access, and a Python `if` choosing between two placements would
# leave both in the source)
def _produce(x_ref, buf, full, empty):
    def step(i, c):
        @pl.when(i > 0)
        def _():
            plgpu.barrier_wait(empty)

        buf[...] = x_ref[...] + i.astype(jnp.float32)  # WRITE
        plgpu.barrier_arrive(full)  # ARRIVE
        return c

    jax.lax.fori_loop(0, STEPS, step, 0)


def _produce_early(x_ref, buf, full, empty):
    def step(i, c):
        @pl.when(i > 0)
        def _():
            plgpu.barrier_wait(empty)

        plgpu.barrier_arrive(full)  # EARLY_ARRIVE
        buf[...] = x_ref[...] + i.astype(jnp.float32)  # EARLY_WRITE
        return c

    jax.lax.fori_loop(0, STEPS, step, 0)


def _release(i, empty):
    @pl.when(i + 1 < STEPS)  # (only the phases the producer waits for)
    def _():
        plgpu.barrier_arrive(empty)


def _consume(buf, acc, full, empty):
    def step(i, c):
        plgpu.barrier_wait(full)  # WAIT
        acc[...] += buf[...]  # READ
        _release(i, empty)
        return c

    jax.lax.fori_loop(0, STEPS, step, 0)


def _consume_late(buf, acc, full, empty):
    def step(i, c):
        acc[...] += buf[...]  # LATE_READ
        plgpu.barrier_wait(full)  # LATE_WAIT
        _release(i, empty)
        return c

    jax.lax.fori_loop(0, STEPS, step, 0)


def _pipeline(ctx, x_ref, o_ref, produce, consume):
    def scoped(buf, acc, full, empty):
        @pl.when(ctx.thread == 0)
        def _():
            produce(x_ref, buf, full, empty)

        @pl.when(ctx.thread == 1)
        def _():
            acc[...] = jnp.zeros(sh.SHAPE, jnp.float32)
            consume(buf, acc, full, empty)
            sh.store_block_rows(ctx, o_ref, acc[...])

    pl.run_scoped(scoped, plgpu.SMEM(sh.SHAPE, jnp.float32), plgpu.SMEM(sh.SHAPE, jnp.float32),
                  plgpu.Barrier(num_arrivals=1), plgpu.Barrier(num_arrivals=1),
                  collective_axes=ctx.axis)


def wait_after_read(ctx, x_ref, o_ref):
    _pipeline(ctx, x_ref, o_ref, _produce, _consume_late)


def arrive_before_write(ctx, x_ref, o_ref):
    _pipeline(ctx, x_ref, o_ref, _produce_early, _consume)


def ordered(ctx, x_ref, o_ref):
    """The fix: the producer arrives after its write, the consumer waits before its read."""
    _pipeline(ctx, x_ref, o_ref, _produce, _consume)


def _line(marker):
    """The line marked `marker` in one of the steps."""
    for fn in (_produce, _produce_early, _consume, _consume_late):
        try:
            return sh.marked_line(fn, marker)
        except StopIteration:
            pass
    raise LookupError(marker)


def _race_root(body, shape):
    fn, args = sh.launch(body, shape)
    tr, _ = sh.run_traced(fn, args, detect_races=True)
    errors = [f for f in tr.findings if f.severity == "error"]
    assert len(errors) == 1 and errors[0].kind == "race", tr.summary()
    return tr, errors[0]


def _sides(write, read):
    return (f"write by w 0 at line {_line(write)} is not ordered with the read by w 1 at "
            f"line {_line(read)}")


@pytest.mark.parametrize("shape", SHAPES)
def test_a_wait_after_the_read_is_named(shape):
    seen = set()
    for _ in range(RUNS):
        tr, root = _race_root(wait_after_read, shape)
        assert root.message.endswith(
            f"{_sides('WRITE', 'LATE_READ')}: w 1 waits on `full` only after its read (at line "
            f"{_line('LATE_WAIT')})"), root.message
        assert root.suggestion == (
            "The barrier is there, but on the wrong side of the access: w 1 waits on "
            f"`full` at line {_line('LATE_WAIT')}, after its read at line "
            f"{_line('LATE_READ')}, "
            "so nothing orders that read after w 0's write at line "
            f"{_line('WRITE')} (which w 0 signals by arriving at `full` at line "
            f"{_line('ARRIVE')}). Move the `plgpu.barrier_wait(full)` before the read.")
        assert "put a barrier between" not in root.suggestion
        seen.add((root.message, root.suggestion, root.source.line))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("shape", SHAPES)
def test_an_arrival_before_the_write_is_named(shape):
    seen = set()
    for _ in range(RUNS):
        tr, root = _race_root(arrive_before_write, shape)
        assert root.message.endswith(
            f"{_sides('EARLY_WRITE', 'READ')}: w 0 arrives at `full` before its write (at line "
            f"{_line('EARLY_ARRIVE')})"), root.message
        assert root.suggestion == (
            "The barrier is there, but on the wrong side of the access: w 0 arrives at "
            f"`full` at line {_line('EARLY_ARRIVE')}, before its write at line "
            f"{_line('EARLY_WRITE')}, so w 1's wait on `full` (line {_line('WAIT')}) lets its read "
            f"at line {_line('READ')} run before that write. Move the "
            "`plgpu.barrier_arrive(full)` after the write.")
        seen.add((root.message, root.suggestion, root.source.line))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "cluster2", "core_map"])
def test_the_ordered_pipeline_stays_clean(shape):
    for _ in range(2):
        fn, args = sh.launch(ordered, shape)
        tr, _ = sh.run_traced(fn, args, detect_races=True)
        assert tr.findings == [] and tr.failure is None, tr.summary()


def test_a_saved_trace_keeps_the_advice_without_reading_the_source(tmp_path):
    fn, args = sh.launch(wait_after_read, "no_grid")
    tr, _ = sh.run_traced(fn, args, detect_races=True)
    (root,) = [f for f in tr.findings if f.severity == "error"]
    tr.save(tmp_path / "t.json")
    # the file names this test's source: a loaded trace must not read it again
    import linecache
    linecache.clearcache()
    real = linecache.getlines
    linecache.getlines = lambda *a, **k: (_ for _ in ()).throw(AssertionError("read"))
    try:
        again = pv.load(tmp_path / "t.json")
    finally:
        linecache.getlines = real
    (loaded,) = [f for f in again.findings if f.severity == "error"]
    assert (loaded.message, loaded.suggestion) == (root.message, root.suggestion)
