"""Scratch operands (`plgpu.kernel(scratch_types=...)`): a barrier, buffers.

JAX's code allocates a kernel's scratch operands for it: their requests carry no line of
the user's. A deadlock on such a barrier read "waits at line 18 on a barrier (0 of 1
arrivals in phase 0) <- needs w 0 (finished; last at no recorded line)", in a kernel with
no name (kernels were named after their requests' lines only). Now the barrier is named
as one of the kernel's scratch operands, a thread with no recorded line is simply
"finished", and the kernel is named after its barrier operations' lines. One block, a
grid, a cluster; each run several times; the clean kernel stays clean. A scratch buffer
live at an SMEM peak over the limit is listed as a scratch operand (it had no words at all).
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
LAUNCH = {"no_grid": {}, "grid3": {"grid": (3,), "grid_names": ("g",)},
          "cluster2": {"cluster": (2,), "cluster_names": ("c",)}}
BLOCKS = {"no_grid": [()], "grid3": [(0,)], "cluster2": [(0,), (1,)]}


def scratch_kernel(kind: str, shape: str):
    """Thread 0 fills a scratch buffer and arrives at a scratch barrier; thread 1 waits
    on it (twice with "double_wait"; with "no_arrive" thread 0 never arrives)."""

    def body(x_ref, o_ref, buf, bar):
        t = jax.lax.axis_index("w")

        @pl.when(t == 0)
        def _():
            buf[...] = x_ref[...] + 1.0
            if kind != "no_arrive":
                plgpu.barrier_arrive(bar)

        @pl.when(t == 1)
        def _():
            plgpu.barrier_wait(bar)  # WAIT
            if kind == "double_wait":
                plgpu.barrier_wait(bar)  # WAIT_AGAIN
            o_ref[...] = buf[...]

    fn = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(sh.SHAPE, jnp.float32),
                      num_threads=2, thread_name="w",
                      scratch_types=[plgpu.SMEM(sh.SHAPE, jnp.float32),
                                     plgpu.Barrier(num_arrivals=1)],
                      interpret=plgpu.InterpretGPUParams(), **LAUNCH[shape])
    return fn, body


def _run(kind: str, shape: str):
    fn, body = scratch_kernel(kind, shape)
    x = jnp.arange(sh.SHAPE[0] * sh.SHAPE[1], dtype=jnp.float32).reshape(sh.SHAPE)
    with pv.trace(raise_errors=False, timeout_s=10) as tr:
        try:
            jax.block_until_ready(fn(x))
        except jax.errors.JaxRuntimeError:
            pass
    return tr, body


@pytest.mark.parametrize("shape", sorted(LAUNCH))
def test_the_clean_kernel_stays_clean(shape):
    for _ in range(2):
        tr, _ = _run("clean", shape)
        assert tr.findings == [] and tr.failure is None, tr.summary()
        # its scratch barrier: created and joined at the kernel's start, no user line
        assert any(e.resource == "barrier" and e.source is None for e in tr.events)


@pytest.mark.parametrize("kind,marker,phase,advice", [
    ("no_arrive", "WAIT", 0, "w 0 holds the barrier but finished without ever arriving"),
    ("double_wait", "WAIT_AGAIN", 1, "arrived for its earlier phases and have finished"),
])
@pytest.mark.parametrize("shape", sorted(LAUNCH))
def test_a_deadlock_on_a_scratch_barrier(shape, kind, marker, phase, advice):
    seen = set()
    for _ in range(RUNS):
        tr, body = _run(kind, shape)
        errors = [f for f in tr.findings if f.severity == "error"]
        assert [f.kind for f in errors] == ["deadlock"], tr.summary()
        (f,) = errors
        line = sh.marked_line(body, marker)
        assert (f.source.file, f.source.line) == (__file__, line)
        waits = "; ".join(
            f"block {'(no grid)' if b == () else '(' + ', '.join(map(str, b)) + ')'} w 1 "
            f"waits at line {line} on a barrier of the kernel's scratch operands (0 of 1 "
            f"arrivals in phase {phase}) <- needs w 0 (finished)" for b in BLOCKS[shape])
        assert f.message.endswith(waits), f.message
        assert "no recorded line" not in tr.summary()
        assert advice in f.suggestion
        # named after its barrier operations' lines (the function the body is in)
        assert tr.kernels[0].name == "scratch_kernel"
        assert "in kernel 0 (scratch_kernel)" in tr.summary()
        seen.add((f.message, f.suggestion))
    assert len(seen) == 1


def big_scratch(shape: str):
    """A 200 KiB scratch buffer and a 256 KiB scope: over an H100 block's 227 KiB."""

    def body(x_ref, o_ref, big, small):
        def scoped(extra):
            o_ref[...] = x_ref[...]

        pl.run_scoped(scoped, plgpu.SMEM((64, 1024), jnp.float32), collective_axes="w")  # EXTRA

    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(sh.SHAPE, jnp.float32),
                        num_threads=2, thread_name="w",
                        scratch_types=[plgpu.SMEM((200, 256), jnp.float32),
                                       plgpu.SMEM(sh.SHAPE, jnp.float32)],
                        interpret=plgpu.InterpretGPUParams(), **LAUNCH[shape]), body


@pytest.mark.parametrize("shape", sorted(LAUNCH))
def test_a_scratch_buffer_live_at_an_smem_peak_is_named_a_scratch_operand(shape):
    fn, body = big_scratch(shape)
    for _ in range(2):
        with pv.trace(raise_errors=False) as tr:
            jax.block_until_ready(fn(jnp.ones(sh.SHAPE, jnp.float32)))
        (f,) = tr.findings
        line = sh.marked_line(body, "EXTRA")
        assert f.kind == "smem_over_budget" and f.source.line == line, tr.summary()
        assert f.message.endswith(
            f"live then: (64, 1024) float32 256.0 KiB at test_scratch_barriers.py:{line}, "
            "(200, 256) float32 200.0 KiB (a scratch operand), (8, 128) float32 4.0 KiB "
            "(a scratch operand)"), f.message
