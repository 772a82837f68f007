"""Real kernels of `jax.experimental.pallas.ops.gpu` that run in GPU interpret mode on the CPU.

Each factory returns `(name, fn, args)`: `fn` is jitted and must be called inside
`interpret_context(params)` (which forces GPU interpret mode with `params` and, for the
Hopper kernels, supplies an abstract H100 mesh so `get_num_sms()` works on the CPU).
"""

from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp


def _params(logging: bool = False):
    from jax.experimental.pallas import mosaic_gpu as plgpu

    from pallas_viz.examples.ops import logging_interpret_params

    return logging_interpret_params() if logging else plgpu.InterpretGPUParams()


def _blackwell_params(logging: bool = False):
    from jax.experimental.pallas import mosaic_gpu as plgpu

    from pallas_viz.examples.ops import logging_interpret_params

    kw = {"inline_mgpu": "ignore"}
    return logging_interpret_params(**kw) if logging else plgpu.InterpretGPUParams(**kw)


@contextlib.contextmanager
def _h100_mesh():
    from jax.sharding import AbstractDevice, AbstractMesh

    mesh = AbstractMesh((), (), abstract_device=AbstractDevice(
        device_kind="NVIDIA H100 80GB HBM3", platform="gpu", num_cores=8))
    with jax.sharding.use_abstract_mesh(mesh):
        yield


@contextlib.contextmanager
def interpret_context(kernel, logging: bool = False):
    """Force GPU interpret mode (optionally with JAX's SHARED_MEMORY logging) for `kernel`."""
    from jax.experimental.pallas import mosaic_gpu as plgpu

    params = kernel.params(logging)
    with contextlib.ExitStack() as st:
        if kernel.h100:
            st.enter_context(_h100_mesh())
        st.enter_context(plgpu.force_gpu_interpret_mode(params))
        yield


class Kernel:
    def __init__(self, name, fn, args, params=_params, h100=True):
        self.name, self.fn, self.args, self.params, self.h100 = name, fn, args, params, h100

    def __call__(self):
        return jax.block_until_ready(self.fn(*self.args))


def _f16(key, shape):
    return jax.random.uniform(jax.random.key(key), shape, jnp.float16, -1, 1)


def hopper_matmul(size: int, cluster: bool = False) -> Kernel:
    from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hm

    if cluster:
        m, n, k = 512, 256, 128
    else:
        m = n = k = size
    cfg = hm.TuningConfig(
        tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2, epi_tile_m=64,
        epi_tile_n=64, wg_dimension=hm.MatmulDimension.M,
        cluster_dimension=hm.MatmulDimension.M if cluster else None)
    fn = jax.jit(functools.partial(hm.matmul, c=None, config=cfg))
    name = f"hopper_matmul_cluster {m}x{n}x{k}" if cluster else f"hopper_matmul {size}^3"
    return Kernel(name, fn, (_f16(1, (m, k)), _f16(2, (k, n))))


def ragged_dot() -> Kernel:
    from jax.experimental.pallas.ops.gpu import ragged_dot_mgpu as rd

    m, k, n, groups = 256, 128, 128, 2
    fn = jax.jit(functools.partial(
        rd.ragged_dot, block_m=128, block_n=128, block_k=64, max_concurrent_steps=2,
        grid_block_n=1))
    sizes = jnp.array([96, 160], dtype=jnp.int32)
    return Kernel(f"ragged_dot {m}x{k}x{n} g{groups}", lambda a, b, s: fn(a, b, group_sizes=s),
                  (_f16(1, (m, k)), _f16(2, (groups, k, n)), sizes))


def blackwell_matmul() -> Kernel:
    from jax.experimental.pallas.ops.gpu import blackwell_matmul_mgpu as bm

    cfg = bm.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2,
                          collective=False, epilogue_tile_n=64)
    fn = jax.jit(functools.partial(bm.matmul_kernel, config=cfg))
    return Kernel("blackwell_matmul 128^2", fn, (_f16(1, (128, 128)), _f16(2, (128, 128))),
                  params=_blackwell_params, h100=False)


def all_kernels() -> list[Kernel]:
    return [hopper_matmul(256), hopper_matmul(512), hopper_matmul(512, cluster=True),
            ragged_dot(), blackwell_matmul()]


def smallest_kernel() -> Kernel:
    return blackwell_matmul()


def kernel_named(name: str) -> Kernel | None:
    """The kernel of `all_kernels()` whose name starts with `name`; None, with the names
    there are on stderr, if no kernel is so named (a command line's answer)."""
    import sys

    kernels = all_kernels()
    kernel = next((k for k in kernels if k.name.startswith(name)), None)
    if kernel is None:
        print(f"no kernel named {name!r}: " + ", ".join(k.name for k in kernels),
              file=sys.stderr)
    return kernel
