"""Real kernels from `jax.experimental.pallas.ops.gpu`, set up to run in interpret mode.

Each builder returns `(fn, args)`; `fn(*args)` runs the kernel under GPU interpret
mode on the CPU. These are clean kernels: pallas_viz must report no findings.
Pass `interpret_params` to override the `plgpu.InterpretGPUParams` used.
"""

from __future__ import annotations

import contextlib
import functools
import typing

import jax
import jax.numpy as jnp
from jax.experimental.pallas import mosaic_gpu as plgpu

H100 = "NVIDIA H100 80GB HBM3"
B200 = "NVIDIA B200"


def logging_interpret_params(**kw) -> plgpu.InterpretGPUParams:
    """`InterpretGPUParams` with JAX's own shared-memory logging on.

    `LoggingMode` is not exported publicly; it is read from the public dataclass's type.
    """
    hint = typing.get_type_hints(plgpu.InterpretGPUParams)["logging_mode"]
    mode = next(a for a in typing.get_args(hint) if a is not type(None))
    return plgpu.InterpretGPUParams(logging_mode=mode.SHARED_MEMORY, **kw)


@contextlib.contextmanager
def _gpu_device(kind: str, num_cores: int = 8):
    """Pretend to be a GPU of `kind` with `num_cores` SMs (the kernels size grids by it)."""
    mesh = jax.sharding.AbstractMesh(
        (), (), abstract_device=jax.sharding.AbstractDevice(
            device_kind=kind, platform="gpu", num_cores=num_cores))
    with jax.sharding.use_abstract_mesh(mesh):
        yield


def _run(kind, params, f, *args):
    with _gpu_device(kind), plgpu.force_gpu_interpret_mode(params):
        return f(*args)


def hopper_matmul(size: int = 256, cluster: bool = False, interpret_params=None):
    """`hopper_matmul_mgpu.matmul`, f16, warp-specialised with 3 warpgroups."""
    from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hm

    m, n, k = (size, size, size) if not cluster else (2 * size, size, size // 2)
    config = hm.TuningConfig(
        tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2, epi_tile_m=64,
        epi_tile_n=64, wg_dimension=hm.MatmulDimension.M,
        cluster_dimension=hm.MatmulDimension.M if cluster else None)
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (m, k), jnp.float16)
    b = jax.random.normal(kb, (k, n), jnp.float16)
    params = interpret_params or plgpu.InterpretGPUParams()
    fn = functools.partial(_run, H100, params, lambda a, b: hm.matmul(a, b, None, config))
    return fn, (a, b)


def _group_sizes(total: int, groups: int):
    base = total // groups
    sizes = [base] * groups
    sizes[-1] += total - base * groups
    return jnp.asarray(sizes, jnp.int32)


def ragged_dot(m: int = 256, k: int = 128, n: int = 128, groups: int = 2,
               interpret_params=None):
    """`ragged_dot_mgpu.ragged_dot` with `groups` row groups."""
    from jax.experimental.pallas.ops.gpu import ragged_dot_mgpu as rd

    ka, kb = jax.random.split(jax.random.key(1))
    lhs = jax.random.normal(ka, (m, k), jnp.float16)
    rhs = jax.random.normal(kb, (groups, k, n), jnp.float16)
    gs = _group_sizes(m, groups)
    params = interpret_params or plgpu.InterpretGPUParams()

    def f(lhs, rhs):
        return rd.ragged_dot(lhs, rhs, group_sizes=gs, block_m=64, block_n=64, block_k=64,
                             max_concurrent_steps=2, grid_block_n=1)

    return functools.partial(_run, H100, params, f), (lhs, rhs)


def transposed_ragged_dot(k: int = 256, m: int = 128, n: int = 128, groups: int = 2,
                          interpret_params=None):
    """`transposed_ragged_dot_mgpu.transposed_ragged_dot` with `groups` K groups."""
    from jax.experimental.pallas.ops.gpu import transposed_ragged_dot_mgpu as trd

    ka, kb = jax.random.split(jax.random.key(2))
    lhs = jax.random.normal(ka, (k, m), jnp.float16)
    rhs = jax.random.normal(kb, (k, n), jnp.float16)
    gs = _group_sizes(k, groups)
    params = interpret_params or plgpu.InterpretGPUParams()

    def f(lhs, rhs):
        # The kernel sizes its grid by `jax.devices()[0].core_count`, which CPU devices
        # lack: give the module a view of jax whose devices report 8 SMs.
        real = trd.jax
        trd.jax = _JaxWithCores(real, 8)
        try:
            return trd.transposed_ragged_dot(lhs, rhs, group_sizes=gs, block_m=64, block_n=64,
                                             block_k=64, max_concurrent_steps=2,
                                             grid_block_n=1)
        finally:
            trd.jax = real

    return functools.partial(_run, H100, params, f), (lhs, rhs)


class _DeviceWithCores:
    def __init__(self, device, cores):
        self._device, self.core_count = device, cores

    def __getattr__(self, name):
        return getattr(self._device, name)


class _JaxWithCores:
    """`jax`, except that `devices()` report `cores` SMs."""

    def __init__(self, jax_module, cores):
        self._jax, self._cores = jax_module, cores

    def devices(self, *a, **k):
        return [_DeviceWithCores(d, self._cores) for d in self._jax.devices(*a, **k)]

    def __getattr__(self, name):
        return getattr(self._jax, name)


def blackwell_matmul(size: int = 128, interpret_params=None):
    """`blackwell_matmul_mgpu.matmul_kernel` (TMEM accumulators), inline MGPU ignored."""
    from jax.experimental.pallas.ops.gpu import blackwell_matmul_mgpu as bm

    config = bm.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2,
                             collective=False)
    ka, kb = jax.random.split(jax.random.key(3))
    a = jax.random.normal(ka, (size, size), jnp.float16)
    b = jax.random.normal(kb, (size, size), jnp.float16)
    params = interpret_params or plgpu.InterpretGPUParams(inline_mgpu="ignore")
    fn = functools.partial(_run, B200, params, lambda a, b: bm.matmul_kernel(a, b, config))
    return fn, (a, b)


ALL = {
    "hopper_matmul": hopper_matmul,
    "hopper_matmul_cluster": functools.partial(hopper_matmul, cluster=True),
    "ragged_dot": ragged_dot,
    "transposed_ragged_dot": transposed_ragged_dot,
    "blackwell_matmul": blackwell_matmul,
}
