"""Errors the interpreter raises when a kernel ends, pinned to the kernel line that caused
them (not to the launch), in every launch shape, the same on every run.

- An SMEM -> GMEM copy never awaited (`detect_races=True`): JAX fails when the thread
  ends, with no line; pallas_viz points at the `copy_smem_to_gmem`.
- A tcgen05 barrier whose phase completes twice unobserved: one `barrier_misuse` root,
  the interpreter's error folded under it.
- A read of a tcgen05 accumulator before the MMA completes: a race of one thread with
  its own asynchronous write, placed in its block, with advice for that line.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_viz.examples import shapes as sh

RUNS = 3
COPY_LINE = sh.marked_line(sh._half_copy, "COPY")


def _run(body, shape, detect_races=True):
    fn, args = sh.launch(body, shape)
    tr, _ = sh.run_traced(fn, args, timeout_s=10, detect_races=detect_races)
    return tr


@pytest.mark.parametrize("shape", [s for s in sh.KERNEL_END_SHAPES if s != "two_devices"])
def test_unawaited_copy_is_pinned_to_its_line(shape):
    seen = set()
    for _ in range(RUNS):
        tr = _run(sh.unawaited_copy, shape)
        assert tr.failure is not None and "read-side" in tr.failure.message
        (root,) = tr.findings
        assert root.severity == "error" and root.kind == "interpreter_error", tr.summary()
        assert root.source.line == COPY_LINE, tr.summary()
        assert "wait_smem_to_gmem(0)" in root.suggestion
        # the thread that ended with the copy pending, in its block (never "kernel level")
        ((_, block, thread),) = root.cells
        assert block is not None
        if shape != "pallas_call":
            assert thread == 1 and "by w 1 was never awaited" in root.message
        text = tr.summary()
        assert f":{COPY_LINE}:" in text and "kernel level" not in text
        seen.add((root.kind, root.source.line, root.message))
    assert len(seen) == 1, seen


# The harness's pallas_call (grid (2,), whole-array blocks) has both blocks write the one
# output block the interpreter keeps for the device: JAX's race detection reports that
# for any body, so it is no test of the copy.
@pytest.mark.parametrize("shape", [s for s in sh.KERNEL_END_SHAPES
                                   if s not in ("two_devices", "pallas_call")])
def test_awaited_copy_stays_clean(shape):
    tr = _run(sh.awaited_copy, shape)
    assert tr.findings == [], tr.summary()
    assert "clean: no findings" in tr.summary()


@pytest.mark.slow
def test_unawaited_copy_on_two_devices():
    out = sh.run_isolated("unawaited_copy", "two_devices")
    assert [r[:2] for r in out["roots"]] == [["interpreter_error", COPY_LINE]], out
    clean = sh.run_isolated("awaited_copy", "two_devices")
    assert clean["roots"] == [] and clean["outcome"] == "runs", clean


# --------------------------------------------------------------------------- tcgen05

_TILES = (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128))


# "no_grid": one block; "grid2": two blocks, each writing its own rows of the output.
MMA_SHAPES = ("no_grid", "grid2")


def _mma_kernel(body, shape="no_grid"):
    ka, kb = jax.random.split(jax.random.key(5))
    a = jax.random.normal(ka, (128, 128), jnp.float16)
    b = jax.random.normal(kb, (128, 128), jnp.float16)
    blocks = 2 if shape == "grid2" else 1
    kw = dict(grid=(2,), grid_names=("g",)) if blocks > 1 else {}

    def kbody(a_ref, b_ref, o_ref, *scratch):
        g = jax.lax.axis_index("g") if blocks > 1 else 0
        body(a_ref, b_ref, o_ref.at[pl.ds(g * 128, 128)], *scratch)

    fn = plgpu.kernel(
        kbody, out_type=jax.ShapeDtypeStruct((128 * blocks, 128), jnp.float32), **kw,
        scratch_types=[plgpu.SMEM((128, 128), jnp.float16, transforms=_TILES),
                       plgpu.SMEM((128, 128), jnp.float16, transforms=_TILES),
                       plgpu.TMEM((128, 128), jnp.float32),
                       plgpu.Barrier(num_arrivals=1, orders_tensor_core=True)],
        interpret=plgpu.InterpretGPUParams())

    def run(a, b):
        with sh.gpu_device(sh.B200):
            return fn(a, b)

    return functools.partial(run, a, b)


def mma_twice_unobserved(a_ref, b_ref, o_ref, a_smem, b_smem, acc, done):
    a_smem[...] = a_ref[...]
    b_smem[...] = b_ref[...]
    plgpu.commit_smem()
    plgpu.tcgen05_mma(acc, a_smem, b_smem, accumulate=False)
    plgpu.tcgen05_commit_arrive(done)  # FIRST: nobody waits for this phase
    plgpu.tcgen05_mma(acc, a_smem, b_smem, accumulate=True)
    plgpu.tcgen05_commit_arrive(done)  # SECOND
    plgpu.barrier_wait(done)
    o_ref[...] = plgpu.async_load_tmem(acc)
    plgpu.wait_load_tmem()


def mma_read_early(a_ref, b_ref, o_ref, a_smem, b_smem, acc, done):
    a_smem[...] = a_ref[...]
    b_smem[...] = b_ref[...]
    plgpu.commit_smem()
    plgpu.tcgen05_mma(acc, a_smem, b_smem, accumulate=False)  # MMA
    plgpu.tcgen05_commit_arrive(done)
    o_ref[...] = plgpu.async_load_tmem(acc)  # READ: before barrier_wait(done)
    plgpu.wait_load_tmem()
    plgpu.barrier_wait(done)


@pytest.mark.parametrize("shape", MMA_SHAPES)
def test_unobserved_tcgen05_phase_is_one_root_with_the_interpreter_error_under_it(shape):
    first = sh.marked_line(mma_twice_unobserved, "FIRST: nobody waits for this phase")
    second = sh.marked_line(mma_twice_unobserved, "SECOND")
    seen = set()
    for _ in range(RUNS):
        tr, _ = sh.run_traced(_mma_kernel(mma_twice_unobserved, shape), ())
        (root,) = tr.findings
        assert root.kind == "barrier_misuse" and root.source.line == first, tr.summary()
        assert [c.kind for c in root.consequences] == ["interpreter_error"], tr.summary()
        assert root.consequences[0].source.line == second
        assert "(while serving tcgen05_commit_arrive)" in root.consequences[0].message
        # the first block (the interpreter stops the kernel there)
        assert {b for _, b, _ in root.cells} == ({()} if shape == "no_grid" else {(0,)})
        seen.add((root.source.line, root.message))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("shape", MMA_SHAPES)
def test_read_before_the_mma_completes_is_a_race_with_its_own_async_write(shape):
    mma = sh.marked_line(mma_read_early, "MMA")
    read = sh.marked_line(mma_read_early, "READ: before barrier_wait(done)")
    seen = set()
    for _ in range(RUNS):
        tr, _ = sh.run_traced(_mma_kernel(mma_read_early, shape), (), detect_races=True)
        (root,) = [f for f in tr.findings if f.severity == "error"]
        assert root.kind == "race" and root.source.line == read, tr.summary()
        assert mma in [r.line for r in root.related]
        assert "asynchronous write it started" in root.message
        # (one thread: its block is in the cells)
        assert f"read by thread 0 at line {read} is not ordered" in root.message
        assert "block" not in root.message and "kernel level" not in tr.summary()
        assert "tcgen05_commit_arrive" in root.suggestion and "barrier_wait" in root.suggestion
        assert {b for _, b, _ in root.cells} == ({()} if shape == "no_grid" else {(0,)})
        seen.add((root.source.line, root.message))
    assert len(seen) == 1, seen
