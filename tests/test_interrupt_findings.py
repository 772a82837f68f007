"""A kernel stopped with Ctrl-C is never a clean run.

The user interrupts a kernel that hangs where the wait-for check cannot prove it (a
thread spinning on memory), or one with no barrier at all. With threads waiting on
barriers the trace says who waits where and what they need (a possible deadlock: a
warning, the kernel may have been only slow); with none, it says the kernel was
interrupted. `pallas-viz diff` against the same hang stopped by the watchdog calls it
still there, never fixed.
"""

from __future__ import annotations

import _thread
import threading
import time

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl

import pallas_viz as pv
from pallas_viz.examples import deadlock as dl
from pallas_viz.examples import shapes as sh


def spin_without_barriers(ctx, x_ref, o_ref):
    """Every thread polls a flag that no thread sets: no barrier anywhere."""

    def scoped(flag):
        ctx.store(flag, jnp.zeros(sh.SHAPE, jnp.float32))
        jax.lax.while_loop(lambda c: flag[0, 0] < 1.0, lambda c: c + 1, 0)
        sh.store_block_rows(ctx, o_ref, x_ref[...])

    pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32), collective_axes=ctx.axis)


def _interrupted(fn, args, after_s: float = 1.5):
    """Run `fn(*args)` traced and interrupt it (Ctrl-C) `after_s` seconds after it starts."""
    tracer = pv.trace()
    timer = threading.Timer(after_s, _thread.interrupt_main)
    with pytest.raises(KeyboardInterrupt):
        with tracer:
            timer.start()
            jax.block_until_ready(fn(*args))
            time.sleep(60)  # (not reached: the kernel never ends)
    timer.join()
    return tracer.trace


@pytest.mark.parametrize("shape", ["no_grid", "grid3"])
def test_an_interrupted_kernel_with_no_barrier_is_not_clean(shape):
    for _ in range(2):
        fn, args = sh.launch(spin_without_barriers, shape)
        tr = _interrupted(fn, args)
        assert tr.meta["interrupted"] is True and "deadlocks" not in tr.meta
        (f,) = tr.findings
        assert f.kind == "interrupted" and f.severity == "warning", tr.summary()
        assert "no thread waiting on a barrier" in f.message
        assert f.source is not None and f.source == tr.kernels[0].launch
        assert "clean" not in tr.summary()


def test_the_diff_of_a_hang_and_the_same_hang_interrupted_is_still_there():
    fn, args = dl.spin_on_flag()
    with pv.trace(raise_errors=False, timeout_s=1.0) as watched:
        jax.block_until_ready(fn(*args))
    (before,) = watched.findings
    assert before.kind == "deadlock" and before.severity == "error"
    after = _interrupted(fn, args)
    (f,) = after.findings
    assert f.kind == "deadlock" and f.source.line == before.source.line
    d = pv.diff(watched, after)
    assert (len(d.fixed), len(d.still), len(d.new)) == (0, 1, 0), d.summary()
