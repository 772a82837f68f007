"""A corpus of CLEAN kernels in every launch shape: pallas_viz must report no findings on them.

`CLEAN_KERNELS[name]()` returns ``(fn, args)``; ``fn(*args)`` runs the kernel in GPU
interpret mode on the CPU (each within a few seconds). Names say the launch shape (see
`pallas_viz.examples.shapes.SHAPES`). Sources:

- the real kernels of `pallas_viz.examples.ops` (`OPS`, slow: ~1-2 s each);
- the clean kernels of `pallas_viz.examples.kernels` in several grids;
- the clean bodies of `pallas_viz.examples.shapes` launched in every shape where the
  interpreter runs them reliably;
- kernels written here: barrier handshakes, nested and looped `run_scoped`, several buffers,
  a REGS accumulator, TMEM for all threads and a `tcgen05_mma`, cluster barriers, a
  `pallas_call` with scratch, warp-level code, and two devices under `shard_map`.

`NEEDS_TWO_DEVICES` lists the kernels that need 2 CPU devices (see `shapes.TWO_DEVICES_ENV`).

Clean under race detection too (`pv.trace(detect_races=True)`, `tests/test_clean_under_races.py`):
the blocks of a grid or a cluster run concurrently on a GPU, so each block writes its own
rows of the output, and one thread of a block writes what another reads only after a
barrier. Except the `pallas_call` kernels with a grid (``*pallas_call*``): GPU interpret
mode runs their grid points on one shared copy of the SMEM operands and scratch, and JAX
reports the race on it, the interpreter's, not the kernel's (the `race` finding says so:
`pallas_viz.analysis.races.SHARED_SMEM_HINT`).

Left out on purpose (see `shapes`): a collective `run_scoped` *inside* warp-level code
(`plgpu.WarpMesh`), which the interpreter over-subscribes (4 warps per warpgroup request a
buffer whose ref count is the number of warpgroups: KeyError or hang, by chance); barriers
in "two_devices" kernels (the interpreter's end-of-kernel check `assert_no_barriers_allocated`
looks at every device's memory, so one device finishing while the other still holds its
barrier fails at random, ~1 run in 5).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from . import kernels, ops, shapes
from .shapes import SHAPE, THREAD_AXIS, launch

F32 = jnp.float32


def _x():
    return jnp.arange(SHAPE[0] * SHAPE[1], dtype=F32).reshape(SHAPE)


def _kernel(body, num_threads=2, params=None, **kw):
    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(SHAPE, F32),
                        num_threads=num_threads, thread_name=THREAD_AXIS,
                        interpret=params or plgpu.InterpretGPUParams(), **kw)


def _t():
    return jax.lax.axis_index(THREAD_AXIS)


# --------------------------------------------------------------------------- own kernels


def handshake_scratch(grid=()):
    """Buffer + barrier as kernel scratch (allocated for all threads): 0 arrives, 1 waits."""

    def body(x_ref, o_ref, buf, bar):
        t = _t()

        @pl.when(t == 0)
        def _():
            buf[...] = x_ref[...] + 1.0
            plgpu.barrier_arrive(bar)

        @pl.when(t == 1)
        def _():
            plgpu.barrier_wait(bar)
            kernels.write_block_rows(o_ref, buf[...], grid)  # this block's rows only

    kw = dict(grid=grid, grid_names=tuple(f"g{i}" for i in range(len(grid)))) if grid else {}
    return _kernel(body, scratch_types=[plgpu.SMEM(SHAPE, F32), plgpu.Barrier(num_arrivals=1)],
                   **kw), (_x(),)


def handshake_fori_loop():
    """A producer/consumer queue of 2 slots over 4 steps, with produced/consumed barriers."""
    steps, slots = 4, 2

    def body(x_ref, o_ref):
        t = _t()

        def scoped(queue, produced, consumed):
            def produce(i, _):
                slot = jax.lax.rem(i, slots)

                @pl.when(i >= slots)
                def _():
                    plgpu.barrier_wait(consumed.at[slot])

                queue[slot] = x_ref[...] + i.astype(F32)
                plgpu.barrier_arrive(produced.at[slot])

            def consume(i, _):
                slot = jax.lax.rem(i, slots)
                plgpu.barrier_wait(produced.at[slot])
                o_ref[...] = queue[slot]
                plgpu.barrier_arrive(consumed.at[slot])

            def drain(i, _):
                plgpu.barrier_wait(consumed.at[jax.lax.rem(i, slots)])

            pl.when(t == 0)(lambda: jax.lax.fori_loop(0, steps, produce, None))
            pl.when(t == 1)(lambda: jax.lax.fori_loop(0, steps, consume, None))
            pl.when(t == 0)(lambda: jax.lax.fori_loop(steps - slots, steps, drain, None))

        pl.run_scoped(scoped, plgpu.SMEM((slots,) + SHAPE, F32),
                      plgpu.Barrier(num_arrivals=1, num_barriers=slots),
                      plgpu.Barrier(num_arrivals=1, num_barriers=slots),
                      collective_axes=THREAD_AXIS)

    return _kernel(body), (_x(),)


def nested_run_scoped(grid=()):
    """A collective scope inside another: both reached by every thread."""

    def body(x_ref, o_ref):
        t = _t()

        def outer(a):
            def inner(b):
                @pl.when(t == 0)
                def _():
                    a[...] = x_ref[...]
                    b[...] = a[...] * 2.0
                    kernels.write_block_rows(o_ref, b[...] + a[...], grid, names=("g",))

            pl.run_scoped(inner, plgpu.SMEM(SHAPE, F32), collective_axes=THREAD_AXIS)

        pl.run_scoped(outer, plgpu.SMEM(SHAPE, F32), collective_axes=THREAD_AXIS)

    kw = dict(grid=grid, grid_names=("g",)) if grid else {}
    return _kernel(body, **kw), (_x(),)


def run_scoped_in_fori_loop(steps=3):
    """Every thread allocates (and frees) a collective buffer in each loop iteration;
    thread 0 alone zeroes the output and then adds to it (no race with the other thread)."""

    def body(x_ref, o_ref):
        t = _t()

        @pl.when(t == 0)  # thread 0 alone: the other thread's write would race with its adds
        def _():
            o_ref[...] = jnp.zeros(SHAPE, F32)

        def step(i, _):
            def scoped(buf):
                @pl.when(t == 0)
                def _():
                    buf[...] = x_ref[...] * i.astype(F32)
                    o_ref[...] += buf[...]

            pl.run_scoped(scoped, plgpu.SMEM(SHAPE, F32), collective_axes=THREAD_AXIS)

        jax.lax.fori_loop(0, steps, step, None)

    return _kernel(body), (_x(),)


def multiple_buffers(num_threads=4):
    """Three buffers and a barrier in one collective scope, 4 threads; thread 3 waits."""

    def body(x_ref, o_ref):
        t = _t()

        def scoped(a, b, c, bar):
            @pl.when(t == 0)
            def _():
                a[...] = x_ref[...]
                b[...] = x_ref[...] * 2.0
                c[...] = a[...] + b[...]
                plgpu.barrier_arrive(bar)

            @pl.when(t == num_threads - 1)
            def _():
                plgpu.barrier_wait(bar)
                o_ref[...] = c[...]

        pl.run_scoped(scoped, plgpu.SMEM(SHAPE, F32), plgpu.SMEM(SHAPE, F32),
                      plgpu.SMEM(SHAPE, F32), plgpu.Barrier(num_arrivals=1),
                      collective_axes=THREAD_AXIS)

    return _kernel(body, num_threads=num_threads), (_x(),)


def four_threads_hoisted():
    """`shapes.hoisted_collective` with 4 threads (thread 2 of 4 writes)."""
    return launch(shapes.hoisted_collective, "no_grid", num_threads=4)


def regs_accumulator():
    """A one-thread kernel with a wgmma accumulator (REGS, `plgpu.ACC`) in `run_scoped`."""
    m = n = k = 64
    tiles = (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128))

    def body(a_ref, b_ref, o_ref, a_smem, b_smem):
        a_smem[...] = a_ref[...]
        b_smem[...] = b_ref[...]
        plgpu.commit_smem()

        def scoped(acc):
            plgpu.wgmma(acc, a_smem, b_smem)
            plgpu.wgmma_wait(0)
            o_ref[...] = acc[...]

        pl.run_scoped(scoped, plgpu.ACC((m, n), F32))

    ka, kb = jax.random.split(jax.random.key(4))
    a = jax.random.normal(ka, (m, k), jnp.float16)
    b = jax.random.normal(kb, (k, n), jnp.float16)
    fn = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((m, n), F32),
                      scratch_types=[plgpu.SMEM((m, k), jnp.float16, transforms=tiles),
                                     plgpu.SMEM((k, n), jnp.float16, transforms=tiles)],
                      interpret=plgpu.InterpretGPUParams())
    return functools.partial(_on_device, ops.H100, fn), (a, b)


def _on_device(kind, fn, *args):
    with shapes.gpu_device(kind):
        return fn(*args)


def tmem_for_all_threads():
    """TMEM scratch allocated for both threads; thread 1 stores, thread 0 loads after a wait."""

    def body(x_ref, o_ref, tm, bar):
        t = _t()

        @pl.when(t == 1)
        def _():
            v = jnp.concatenate([x_ref[...], jnp.zeros((120, 128), F32)], axis=0)
            plgpu.async_store_tmem(tm, v)
            plgpu.commit_tmem()
            plgpu.barrier_arrive(bar)

        @pl.when(t == 0)
        def _():
            plgpu.barrier_wait(bar)
            v = plgpu.async_load_tmem(tm)
            plgpu.wait_load_tmem()
            o_ref[...] = v[:8]

    fn = _kernel(body, scratch_types=[plgpu.TMEM((128, 128), F32),
                                      plgpu.Barrier(num_arrivals=1)])
    return functools.partial(_on_device, shapes.B200, fn), (_x(),)


def tcgen05_mma():
    """A one-thread Blackwell MMA: SMEM operands, a TMEM accumulator, a tensor-core barrier."""
    tiles = (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128))

    def body(a_ref, b_ref, o_ref, a_smem, b_smem, acc, done):
        a_smem[...] = a_ref[...]
        b_smem[...] = b_ref[...]
        plgpu.commit_smem()
        plgpu.tcgen05_mma(acc, a_smem, b_smem, accumulate=False)
        plgpu.tcgen05_commit_arrive(done)
        plgpu.barrier_wait(done)
        o_ref[...] = plgpu.async_load_tmem(acc)
        plgpu.wait_load_tmem()

    ka, kb = jax.random.split(jax.random.key(5))
    a = jax.random.normal(ka, (128, 128), jnp.float16)
    b = jax.random.normal(kb, (128, 128), jnp.float16)
    fn = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((128, 128), F32),
                      scratch_types=[plgpu.SMEM((128, 128), jnp.float16, transforms=tiles),
                                     plgpu.SMEM((128, 128), jnp.float16, transforms=tiles),
                                     plgpu.TMEM((128, 128), F32),
                                     plgpu.Barrier(num_arrivals=1, orders_tensor_core=True)],
                      interpret=plgpu.InterpretGPUParams())
    return functools.partial(_on_device, shapes.B200, fn), (a, b)


def cluster_barrier_exchange():
    """Two blocks of a cluster swap rows through GMEM, synchronised by a cluster barrier."""
    x = jnp.arange(2 * 128, dtype=F32).reshape(2, 128)

    # (the exchange buffer is an output: JAX 0.12.1 refuses a write to an input passed as
    # an array)
    def body(x_ref, o_ref, exchange_ref, cbar):
        c = jax.lax.axis_index(shapes.CLUSTER_AXIS)
        exchange_ref[c, :] = x_ref[c, :]
        plgpu.barrier_arrive(cbar)
        plgpu.barrier_wait(cbar)
        o_ref[c, :] = exchange_ref[1 - c, :]

    out = jax.ShapeDtypeStruct(x.shape, F32)
    fn = plgpu.kernel(body, out_type=(out, out),
                      scratch_types=[plgpu.ClusterBarrier(
                          collective_axes=(shapes.CLUSTER_AXIS,), num_arrivals=1)],
                      cluster=(2,), cluster_names=(shapes.CLUSTER_AXIS,),
                      interpret=plgpu.InterpretGPUParams())
    return fn, (x,)


def cluster_threads_barrier():
    """cluster=(2,) with 2 threads per block: a per-block buffer + barrier handshake."""
    return launch(shapes.hoisted_barrier, "cluster2")


def pallas_call_scratch():
    """`pl.pallas_call` with grid=(2,) and an SMEM scratch buffer (kernel-level)."""

    def body(x_ref, o_ref, scratch):
        scratch[...] = x_ref[...] * 2.0
        o_ref[...] = scratch[...]

    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(SHAPE, F32), grid=(2,),
                          scratch_shapes=[plgpu.SMEM(SHAPE, F32)],
                          interpret=plgpu.InterpretGPUParams()), (_x(),)


def pallas_call_run_scoped():
    """`pl.pallas_call` (grid=(3,)) whose body allocates a buffer and a barrier per block."""

    def body(x_ref, o_ref):
        def scoped(buf, bar):
            buf[...] = x_ref[...] + 1.0
            plgpu.barrier_arrive(bar)
            plgpu.barrier_wait(bar)
            o_ref[...] = buf[...]

        pl.run_scoped(scoped, plgpu.SMEM(SHAPE, F32), plgpu.Barrier(num_arrivals=1))

    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(SHAPE, F32), grid=(3,),
                          interpret=plgpu.InterpretGPUParams()), (_x(),)


def warp_specialized_handoff():
    """Warp-level code done right: buffer and barrier allocated for the whole warpgroup
    (kernel scratch), then warp 0 writes and arrives, warp 1 waits and reads."""

    def body(x_ref, o_ref, buf, bar):
        @pl.core_map(plgpu.WarpMesh(axis_name=shapes.WARP_AXIS))
        def _():
            w = jax.lax.axis_index(shapes.WARP_AXIS)

            @pl.when(w == 0)
            def _():
                buf[...] = x_ref[...] * 3.0
                plgpu.barrier_arrive(bar)

            @pl.when(w == 1)
            def _():
                plgpu.barrier_wait(bar)
                o_ref[...] = buf[...]

    fn = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(SHAPE, F32),
                      scratch_types=[plgpu.SMEM(SHAPE, F32), plgpu.Barrier(num_arrivals=1)],
                      interpret=plgpu.InterpretGPUParams())
    return _quiet(fn), (_x(),)


def warp_scoped_outside():
    """2 warpgroups allocate a collective buffer, then enter warp-level code that uses it."""

    def body(x_ref, o_ref):
        t = _t()

        def scoped(buf):
            @pl.core_map(plgpu.WarpMesh(axis_name=shapes.WARP_AXIS))
            def _():
                w = jax.lax.axis_index(shapes.WARP_AXIS)

                @pl.when((w == 2) & (t == 1))
                def _():
                    buf[...] = x_ref[...] + 2.0
                    o_ref[...] = buf[...]

        pl.run_scoped(scoped, plgpu.SMEM(SHAPE, F32), collective_axes=THREAD_AXIS)

    return _quiet(_kernel(body)), (_x(),)


def _quiet(fn):
    def run(*args):
        with shapes._quiet_core_map():
            return fn(*args)

    return run


def pl_kernel_mesh():
    """`pl.kernel(..., mesh=plgpu.Mesh(...))` (the non-deprecated core_map form), grid (2,)."""
    mesh = plgpu.Mesh(grid=(2,), grid_names=("g",), num_threads=2, thread_name=THREAD_AXIS)

    def body(x_ref, o_ref):
        shapes.hoisted_collective(shapes._thread_ctx("core_map_grid", 2), x_ref, o_ref)

    fn = pl.kernel(body, out_type=jax.ShapeDtypeStruct(SHAPE, F32), mesh=mesh,
                   interpret=plgpu.InterpretGPUParams())
    return fn, (_x(),)


# --------------------------------------------------------------------------- the corpus


def _shape(body, shape, **kw):
    return functools.partial(launch, body, shape, **kw)


OPS: dict[str, Callable] = {f"ops_{name}": builder for name, builder in ops.ALL.items()}

CLEAN_KERNELS: dict[str, Callable[[], tuple]] = {
    **OPS,
    # pallas_viz.examples.kernels, several grids
    "kernels_clean_collective_no_grid": functools.partial(kernels.clean_collective, grid=()),
    "kernels_clean_collective_grid1": functools.partial(kernels.clean_collective, grid=(1,)),
    "kernels_clean_collective_grid2": functools.partial(kernels.clean_collective, grid=(2,)),
    "kernels_clean_collective_grid3": functools.partial(kernels.clean_collective, grid=(3,)),
    "kernels_hoisted_collective_no_grid": functools.partial(kernels.hoisted_collective,
                                                            grid=()),
    "kernels_hoisted_collective_grid2": functools.partial(kernels.hoisted_collective,
                                                          grid=(2,)),
    # the harness's clean bodies, shape by shape
    **{f"hoisted_collective_{s}": _shape(shapes.hoisted_collective, s)
       for s in shapes.SHAPES if s != "warp_mesh"},
    **{f"hoisted_barrier_{s}": _shape(shapes.hoisted_barrier, s)
       for s in ("no_grid", "grid1", "grid3", "core_map", "core_map_grid", "tmem")},
    **{f"plain_copy_{s}": _shape(shapes.plain_copy, s)
       for s in ("warp_mesh", "pallas_call", "two_devices")},
    # written here
    "handshake_scratch_no_grid": handshake_scratch,
    "handshake_scratch_grid2": functools.partial(handshake_scratch, grid=(2,)),
    "handshake_fori_loop": handshake_fori_loop,
    "nested_run_scoped_no_grid": nested_run_scoped,
    "nested_run_scoped_grid3": functools.partial(nested_run_scoped, grid=(3,)),
    "run_scoped_in_fori_loop": run_scoped_in_fori_loop,
    "multiple_buffers_4_threads": multiple_buffers,
    "four_threads_hoisted": four_threads_hoisted,
    "regs_accumulator": regs_accumulator,
    "tmem_for_all_threads": tmem_for_all_threads,
    "tcgen05_mma": tcgen05_mma,
    "cluster_barrier_exchange": cluster_barrier_exchange,
    "cluster_threads_barrier": cluster_threads_barrier,
    "pallas_call_scratch": pallas_call_scratch,
    "pallas_call_run_scoped": pallas_call_run_scoped,
    "warp_specialized_handoff": warp_specialized_handoff,
    "warp_scoped_outside": warp_scoped_outside,
    "pl_kernel_mesh": pl_kernel_mesh,
}

NEEDS_TWO_DEVICES = frozenset(n for n in CLEAN_KERNELS if n.endswith("two_devices"))
SLOW = frozenset(OPS)
