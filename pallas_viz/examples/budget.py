"""Kernels sized around a block's SMEM / TMEM budget, for `pallas_viz.analysis.budget`.

Each builder returns `(fn, args)`; `fn(*args)` runs the kernel in GPU interpret mode on
the CPU. The interpreter does not check budgets: every one of these runs, however much
it allocates. All use a grid of 2 blocks and 2 threads ("t") sharing collective
allocations, so a block's budget is visible twice. With `interpret=False` the builders
return the same kernel for Mosaic GPU, to lower (`jax.jit(fn).trace(*args).lower(
lowering_platforms=("cuda",))`, no GPU needed) and compare with Mosaic GPU's own count.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from .ops import B200, _gpu_device

SHAPE = (8, 128)
ROW = 256  # float32 elements in 1 KiB


def _kernel(body, interpret=True):
    params = {"interpret": plgpu.InterpretGPUParams()} if interpret else {}
    return plgpu.kernel(
        body,
        out_type=jax.ShapeDtypeStruct(SHAPE, jnp.float32),
        grid=(2,),
        grid_names=("g",),
        num_threads=2,
        thread_name="t",
        **params,
    )


def _x():
    return (jnp.ones(SHAPE, jnp.float32),)


def _copy(x_ref, o_ref):
    @pl.when(jax.lax.axis_index("t") == 0)
    def _():
        o_ref[...] = x_ref[...]


def _scoped_kernel(allocs, interpret):
    """A kernel holding `allocs` in one collective `run_scoped`."""

    def body(x_ref, o_ref):
        def scoped(*refs):
            _copy(x_ref, o_ref)

        pl.run_scoped(scoped, *allocs, collective_axes="t")

    return _kernel(body, interpret)


def smem_buffers(*shapes, dtype=jnp.float32, barriers: int = 0, interpret=True):
    """One collective `run_scoped` holding SMEM buffers of `shapes` (and `barriers`)."""
    allocs = [plgpu.SMEM(s, dtype) for s in shapes]
    if barriers:
        allocs.append(plgpu.Barrier(num_arrivals=1, num_barriers=barriers))
    return _scoped_kernel(allocs, interpret), _x()


def smem_kib(*kib: int, barriers: int = 0, interpret=True):
    """SMEM buffers of `kib` KiB each: float32 `(kib, 256)`."""
    return smem_buffers(*[(k, ROW) for k in kib], barriers=barriers, interpret=interpret)


def smem_over_budget(interpret=True):
    """228 KiB of SMEM: 1 KiB over an H100 block's 227 KiB."""
    return smem_kib(128, 100, interpret=interpret)


def smem_at_budget(interpret=True):
    """227 KiB of SMEM: exactly an H100 block's limit (fits; above 90 % of it)."""
    return smem_kib(128, 99, interpret=interpret)


def smem_near_budget(interpret=True):
    """226 KiB of SMEM: fits an H100 block, above 90 % of it."""
    return smem_kib(128, 98, interpret=interpret)


def smem_within_budget(interpret=True):
    """200 KiB of SMEM: 88 % of an H100 block."""
    return smem_kib(128, 72, interpret=interpret)


def smem_over_by_alignment(interpret=True):
    """Two float16 (454, 128) buffers: 113.5 KiB each, 227 KiB byte for byte, but
    Mosaic GPU aligns each to 1024 bytes: 2 x 114 KiB = 228 KiB, over budget."""
    return smem_buffers((454, 128), (454, 128), dtype=jnp.float16, interpret=interpret)


def smem_over_by_barrier(interpret=True):
    """227 KiB of buffers and one 8-byte mbarrier: over by 8 bytes."""
    return smem_kib(128, 99, barriers=1, interpret=interpret)


def sequential_scopes(interpret=True):
    """Two 128 KiB scopes, one after the other, the second with a nested 64 KiB scope:
    320 KiB allocated in all, at most 192 KiB at a time."""

    def body(x_ref, o_ref):
        def first(buf):
            _copy(x_ref, o_ref)

        def second(buf):
            def inner(buf2):
                _copy(x_ref, o_ref)

            pl.run_scoped(inner, plgpu.SMEM((64, ROW), jnp.float32), collective_axes="t")

        pl.run_scoped(first, plgpu.SMEM((128, ROW), jnp.float32), collective_axes="t")
        pl.run_scoped(second, plgpu.SMEM((128, ROW), jnp.float32), collective_axes="t")

    return _kernel(body, interpret), _x()


def pallas_call_scratch():
    """A grid-of-2 `pallas_call` with one SMEM scratch buffer: its (8, 128) float32 block
    buffers and scratch are kernel-level requests in interpret mode, 3 x 4 KiB that every
    block holds on a GPU."""

    def body(x_ref, o_ref, s_ref):
        s_ref[...] = x_ref[...] + 1
        o_ref[...] = s_ref[...]

    spec = pl.BlockSpec((8, 128), lambda i: (0, 0))
    f = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                       grid=(2,), in_specs=[spec], out_specs=spec,
                       scratch_shapes=[plgpu.SMEM((8, 128), jnp.float32)],
                       interpret=plgpu.InterpretGPUParams())
    return f, (jnp.ones((8, 128), jnp.float32),)


def tmem_columns(*columns: int, packed16: int = 0, interpret=True):
    """TMEM float32 `(128, c)` for each of `columns` (and a packed float16
    `(128, packed16)` if given) in one collective scope, on a pretend B200."""
    allocs = [plgpu.TMEM((128, c), jnp.float32) for c in columns]
    if packed16:
        allocs.append(plgpu.TMEM((128, packed16), jnp.float16, packed=True))
    kernel = _scoped_kernel(allocs, interpret)

    def run(x):
        with _gpu_device(B200):
            return kernel(x)

    return run, _x()


ALL = {
    "smem_over_budget": smem_over_budget,
    "smem_at_budget": smem_at_budget,
    "smem_near_budget": smem_near_budget,
    "smem_within_budget": smem_within_budget,
    "smem_over_by_alignment": smem_over_by_alignment,
    "smem_over_by_barrier": smem_over_by_barrier,
    "sequential_scopes": sequential_scopes,
}
