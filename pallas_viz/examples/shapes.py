"""Launch-shape harness: one thread body, run in every launch shape GPU interpret mode supports.

A *body* is a function ``body(ctx, x_ref, o_ref)``; `launch(body, shape)` builds a kernel of
that launch shape around it and returns ``(fn, args)``; ``fn(*args)`` runs it in GPU
interpret mode on the CPU and returns an (8, 128) float32 array. ``ctx`` gives:

- ``ctx.thread``: the traced index that tells the body's threads apart: the thread axis
  index (``jax.lax.axis_index("w")``); the *warp* index in "warp_mesh"; ``pl.program_id(0)``
  in "pallas_call", which has one thread per block (and whose program id the interpreter
  fixes to 0, see `SUPPORTED`);
- ``ctx.axis``: what to pass as ``collective_axes=`` to a scoped allocation ("w", or ``()``
  in "pallas_call", which has no thread axis);
- ``ctx.smem(shape, dtype)``: the memory space to allocate in (`plgpu.SMEM`; `plgpu.TMEM`
  in "tmem", with 16x the rows, because TMEM refs must have 64 or 128 rows);
- ``ctx.store(ref, value)`` / ``ctx.load(ref, rows)``: write / read such a buffer (TMEM
  goes through ``async_store_tmem`` / ``async_load_tmem``);
- ``ctx.num_threads``: how many values ``ctx.thread`` takes.

The buggy bodies below (`BUGGY`) mark their allocation line with ``# ALLOC`` and their
branch line with ``# BRANCH``; `lines(body)` returns those line numbers.
`SUPPORTED[(body_name, shape)]` is ``True`` or the reason the pair cannot express the bug;
`EXPECTED[(body_name, shape)]` is what a run does (measured with jax 0.12.0.1, 3 runs each).

Warp-level code ("warp_mesh"): the warp axis cannot be a collective axis (``Collective axis
`warp` not found``); an allocation made inside warp code is requested by every warp with its
warpgroup's key and ref count (the number of warpgroups for a collective one, 1 otherwise),
so the interpreter counts "one warp per warpgroup allocates" as balanced and frees (then
re-creates) a buffer that all warps allocate: allocating for all warps inside warp code fails
at random (KeyError), and with a barrier handshake a wait on a freed barrier never ended
(pallas_viz aborts such waits when the kernel fails). Every body that allocates is diagnosed
there as one `warp_allocation` root at its ``# ALLOC`` line (`tests/test_warp_allocations.py`):
allocate at warpgroup level (outside the `plgpu.WarpMesh`) instead; the allocating `CLEAN`
bodies are not in the clean corpus there. ``launch(body, "warp_mesh", warps_in=...)`` puts the
warp code in a kernel without grid (the default), with a grid of 3 ("grid3"), a cluster of 2
("cluster2") or on two devices ("two_devices"): the same one root in each.

"two_devices" needs 2 CPU devices, which must be requested before JAX initialises its
backend: ``XLA_FLAGS=--xla_force_host_platform_device_count=2`` in the environment, or
``jax.config.update("jax_num_cpu_devices", 2)`` right after ``import jax``. In a process
that already ran JAX with one device, use `run_isolated` (a subprocess).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import json
import os
import re
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

SHAPES = ("no_grid", "grid1", "grid3", "core_map", "core_map_grid", "cluster2", "warp_mesh",
          "tmem", "pallas_call", "two_devices")

SHAPE = (8, 128)
THREAD_AXIS = "w"
GRID_AXIS = "g"
CLUSTER_AXIS = "c"
WARP_AXIS = "warp"
DEVICE_AXIS = "d"
WARPS_PER_WARPGROUP = 4
TMEM_ROW_SCALE = 16  # (8, 128) -> TMEM (128, 128); (4, 128) -> TMEM (64, 128)
B200 = "NVIDIA B200"
TWO_DEVICES_ENV = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}

_CORE_MAP_DEPRECATION = "jax.experimental.pallas.core_map is deprecated"


# --------------------------------------------------------------------------- context


@dataclasses.dataclass(frozen=True)
class Ctx:
    """What a body needs to know about the launch shape it runs in."""

    thread: Any
    axis: str | tuple[str, ...]
    smem: Callable[..., Any]
    num_threads: int
    shape: str
    tmem: bool = False
    # the launch's block axis and number of blocks (`BLOCKS`; in "warp_mesh", those of the
    # launch the warp code runs in): (None, 1) for one block
    blocks: tuple[str | None, int] = (None, 1)

    def block(self):
        """(this block's index along `blocks`' axis, the number of blocks): (0, 1) for one."""
        axis, n = self.blocks
        return (jax.lax.axis_index(axis), n) if axis else (0, 1)

    def store(self, ref, value):
        """``ref[...] = value`` for SMEM; an async TMEM store (rows padded) for TMEM."""
        if not self.tmem:
            ref[...] = value
            return
        rows = ref.shape[0]
        pad = jnp.zeros((rows - value.shape[0],) + value.shape[1:], value.dtype)
        plgpu.async_store_tmem(ref, jnp.concatenate([value, pad], axis=0))
        plgpu.commit_tmem()

    def load(self, ref, rows: int):
        """The first `rows` rows of `ref` (SMEM or TMEM)."""
        if not self.tmem:
            return ref[...][:rows]
        value = plgpu.async_load_tmem(ref)
        plgpu.wait_load_tmem()
        return value[:rows]


def _tmem(shape, dtype):
    return plgpu.TMEM((shape[0] * TMEM_ROW_SCALE,) + tuple(shape[1:]), dtype)


def last_thread(ctx: Ctx):
    """Thread 2 of 4 (warps), else the last thread: the lone thread of `collective_in_branch`."""
    return min(2, ctx.num_threads - 1)


# --------------------------------------------------------------------------- launch


def _x():
    return jnp.arange(SHAPE[0] * SHAPE[1], dtype=jnp.float32).reshape(SHAPE)


def _out():
    return jax.ShapeDtypeStruct(SHAPE, jnp.float32)


def _params(**kw):
    return plgpu.InterpretGPUParams(**kw)


@contextlib.contextmanager
def _quiet_core_map():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_CORE_MAP_DEPRECATION,
                                category=DeprecationWarning)
        yield


@contextlib.contextmanager
def gpu_device(kind: str = B200, num_cores: int = 8):
    """Pretend the (abstract) device is a GPU of `kind` (used by the "tmem" shape)."""
    mesh = jax.sharding.AbstractMesh((), (), abstract_device=jax.sharding.AbstractDevice(
        device_kind=kind, platform="gpu", num_cores=num_cores))
    with jax.sharding.use_abstract_mesh(mesh):
        yield


def _thread_ctx(shape, num_threads, smem=plgpu.SMEM, tmem=False, blocks=None):
    return Ctx(thread=jax.lax.axis_index(THREAD_AXIS), axis=THREAD_AXIS, smem=smem,
               num_threads=num_threads, shape=shape, tmem=tmem,
               blocks=blocks or BLOCKS.get(shape, (None, 1)))


def _plgpu_kernel(kbody, num_threads, params=None, **mesh_kw):
    return plgpu.kernel(kbody, out_type=_out(), num_threads=num_threads,
                        thread_name=THREAD_AXIS, interpret=params or _params(), **mesh_kw)


# The launch shapes with a grid or a cluster: their block axis and number of blocks (the
# blocks of a grid or a cluster run concurrently on a GPU and no barrier of a block orders
# another block: a clean body gives each block its own rows, `store_block_rows`).
BLOCKS = {"grid1": (GRID_AXIS, 1), "grid3": (GRID_AXIS, 3), "core_map_grid": (GRID_AXIS, 2),
          "cluster2": (CLUSTER_AXIS, 2)}


def _mesh_kw(shape: str) -> dict:
    """`plgpu.kernel`'s grid or cluster arguments for `shape` (none for one block)."""
    if shape not in BLOCKS:
        return {}
    axis, n = BLOCKS[shape]
    what = "cluster" if axis == CLUSTER_AXIS else "grid"
    return {what: (n,), f"{what}_names": (axis,)}


# What the warp-level code of "warp_mesh" can run in (`launch(..., warps_in=...)`).
WARPS_IN = ("no_grid", "grid3", "cluster2", "two_devices")


def launch(body, shape: str, num_threads: int = 2, *, params=None, warps_in: str = "no_grid"):
    """Build a kernel of launch `shape` around `body`: returns ``(fn, args)``.

    `num_threads` is the number of Pallas threads (warpgroups) per block; in "warp_mesh"
    the body runs once per warp (4 per warpgroup), in a kernel of launch `warps_in` (one
    of `WARPS_IN`); "pallas_call" always has 1 thread. `params` overrides the
    `plgpu.InterpretGPUParams` (e.g. ``detect_races=True``).
    """
    if shape not in SHAPES:
        raise ValueError(f"unknown launch shape {shape!r}; expected one of {SHAPES}")
    if warps_in not in WARPS_IN or (warps_in != "no_grid" and shape != "warp_mesh"):
        raise ValueError(f"warps_in={warps_in!r}: one of {WARPS_IN}, for \"warp_mesh\" only")
    x = _x()

    if shape in ("no_grid", "grid1", "grid3", "cluster2"):
        mesh_kw = _mesh_kw(shape)

        def kbody(x_ref, o_ref):
            body(_thread_ctx(shape, num_threads), x_ref, o_ref)

        return _plgpu_kernel(kbody, num_threads, params, **mesh_kw), (x,)

    if shape in ("core_map", "core_map_grid"):
        grid_kw = _mesh_kw(shape)

        def fn(x):
            mesh = plgpu.Mesh(num_threads=num_threads, thread_name=THREAD_AXIS, **grid_kw)

            @pl.run_state
            def run(refs):
                x_ref, o_ref = refs

                @pl.core_map(mesh, interpret=params or _params())
                def _():
                    body(_thread_ctx(shape, num_threads), x_ref, o_ref)

            with _quiet_core_map():
                return run((x, jnp.zeros(SHAPE, jnp.float32)))[1]

        return fn, (x,)

    if shape == "warp_mesh":
        def kbody(x_ref, o_ref):
            @pl.core_map(plgpu.WarpMesh(axis_name=WARP_AXIS))
            def _():
                ctx = Ctx(thread=jax.lax.axis_index(WARP_AXIS), axis=THREAD_AXIS,
                          smem=plgpu.SMEM, num_threads=WARPS_PER_WARPGROUP, shape=shape,
                          blocks=BLOCKS.get(warps_in, (None, 1)))
                body(ctx, x_ref, o_ref)

        if warps_in == "two_devices":
            kernel = _on_two_devices(lambda: _plgpu_kernel(kbody, num_threads, params))
        else:
            kernel = _plgpu_kernel(kbody, num_threads, params, **_mesh_kw(warps_in))

        def fn(x):
            with _quiet_core_map():
                return kernel(x)

        return fn, (x,)

    if shape == "tmem":
        def kbody(x_ref, o_ref):
            body(_thread_ctx(shape, num_threads, smem=_tmem, tmem=True), x_ref, o_ref)

        kernel = _plgpu_kernel(kbody, num_threads, params)

        def fn(x):
            with gpu_device(B200):
                return kernel(x)

        return fn, (x,)

    if shape == "pallas_call":
        def kbody(x_ref, o_ref):
            ctx = Ctx(thread=pl.program_id(0), axis=(), smem=plgpu.SMEM, num_threads=1,
                      shape=shape)
            body(ctx, x_ref, o_ref)

        return pl.pallas_call(kbody, out_shape=_out(), grid=(2,),
                              interpret=params or _params()), (x,)

    # two_devices
    def kbody(x_ref, o_ref):
        body(_thread_ctx(shape, num_threads), x_ref, o_ref)

    return _on_two_devices(lambda: _plgpu_kernel(kbody, num_threads, params)), (x,)


def _on_two_devices(make_kernel):
    """``fn(x)``: the kernel `make_kernel()` builds, run on 2 devices through shard_map."""
    def per_device(x):
        return make_kernel()(x)

    def fn(x):
        if jax.device_count() < 2:
            raise RuntimeError(
                "the two_devices shape needs 2 CPU devices: set XLA_FLAGS="
                "--xla_force_host_platform_device_count=2 before JAX initialises (or "
                "jax.config.update('jax_num_cpu_devices', 2) right after `import jax`), "
                "or use pallas_viz.examples.shapes.run_isolated(...)")
        mesh = jax.sharding.Mesh(jax.devices()[:2], (DEVICE_AXIS,))
        spec = jax.sharding.PartitionSpec()
        return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=spec, out_specs=spec,
                                     check_vma=False))(x)

    return fn


# --------------------------------------------------------------------------- buggy bodies


def collective_in_branch(ctx, x_ref, o_ref):
    """Thread 2 of 4 (or the last thread) alone reaches a collective allocation.

    The buffer's ref count (one per thread of the block) never reaches zero: a silent leak.
    In "warp_mesh" it is warp 2 of each warpgroup, which the interpreter counts as balanced.
    """
    k = last_thread(ctx)

    @pl.when(ctx.thread == k)  # BRANCH
    def _():
        def scoped(buf):
            ctx.store(buf, x_ref[...] * 2.0)
            o_ref[...] = ctx.load(buf, SHAPE[0])

        pl.run_scoped(scoped, ctx.smem(SHAPE, jnp.float32), collective_axes=ctx.axis)  # ALLOC


def collective_in_branch_thread0(ctx, x_ref, o_ref):
    """Thread 0 alone reaches a collective allocation: it leaks, silently."""

    @pl.when(ctx.thread == 0)  # BRANCH
    def _():
        def scoped(buf):
            ctx.store(buf, x_ref[...] * 2.0)
            o_ref[...] = ctx.load(buf, SHAPE[0])

        pl.run_scoped(scoped, ctx.smem(SHAPE, jnp.float32), collective_axes=ctx.axis)  # ALLOC


def mismatched_shapes(ctx, x_ref, o_ref):
    """Thread 0 allocates (8, 128), thread 1 (4, 128), in the same collective slot."""

    @pl.when(ctx.thread == 0)  # BRANCH
    def _():
        def scoped(buf):
            ctx.store(buf, x_ref[...])
            o_ref[...] = ctx.load(buf, SHAPE[0])

        pl.run_scoped(scoped, ctx.smem(SHAPE, jnp.float32), collective_axes=ctx.axis)  # ALLOC

    @pl.when(ctx.thread == 1)  # BRANCH
    def _():
        def scoped(buf):
            ctx.store(buf, x_ref[:4, :])

        pl.run_scoped(scoped, ctx.smem((4, 128), jnp.float32), collective_axes=ctx.axis)  # ALLOC


def barrier_in_branch(ctx, x_ref, o_ref):
    """A collective barrier allocated in thread 0's branch: it is never freed."""

    @pl.when(ctx.thread == 0)  # BRANCH
    def _():
        def scoped(bar):
            o_ref[...] = x_ref[...]

        pl.run_scoped(scoped, plgpu.Barrier(num_arrivals=1), collective_axes=ctx.axis)  # ALLOC


def collective_in_cond(ctx, x_ref, o_ref):
    """`collective_in_branch` written with `jax.lax.cond` instead of `pl.when`."""
    k = last_thread(ctx)

    def true_fn():
        def scoped(buf):
            ctx.store(buf, x_ref[...] * 2.0)
            o_ref[...] = ctx.load(buf, SHAPE[0])

        pl.run_scoped(scoped, ctx.smem(SHAPE, jnp.float32), collective_axes=ctx.axis)  # ALLOC

    def false_fn():
        pass

    jax.lax.cond(ctx.thread == k, true_fn, false_fn)  # BRANCH


def collective_in_loop(ctx, x_ref, o_ref):
    """A collective allocation in a loop that the last thread runs once more than the
    others: its second buffer has one requester, a silent leak."""
    trips = 1 + (ctx.thread == last_thread(ctx)).astype(jnp.int32)

    def step(i, carry):
        def scoped(buf):
            ctx.store(buf, x_ref[...] * 2.0)
            o_ref[...] = ctx.load(buf, SHAPE[0])

        pl.run_scoped(scoped, ctx.smem(SHAPE, jnp.float32), collective_axes=ctx.axis)  # ALLOC
        return carry

    jax.lax.fori_loop(0, trips, step, 0)  # BRANCH


BUGGY: dict[str, Callable] = {
    f.__name__: f for f in (collective_in_branch, collective_in_branch_thread0,
                            mismatched_shapes, barrier_in_branch, collective_in_cond,
                            collective_in_loop)
}


# --------------------------------------------------------------------------- clean bodies
# Clean under race detection too: the blocks of a grid or a cluster run concurrently on a
# GPU and no barrier of a block orders another block, so each block writes its own rows of
# the output (`store_block_rows`), and one thread of the block writes them. ("pallas_call"
# cannot: GPU interpret mode gives every grid point program id 0, and shares one SMEM copy
# of the operands among them, which JAX reports as a race; see `pallas_viz.analysis.races`.)


def store_block_rows(ctx, o_ref, value):
    """``o_ref[...] = value`` (all the rows), this block's rows only (`kernels.store_rows`)."""
    from .kernels import store_rows

    store_rows(o_ref, value, *ctx.block())


def hoisted_collective(ctx, x_ref, o_ref):
    """The fix of `collective_in_branch`: every thread allocates, the last thread writes."""
    k = last_thread(ctx)

    def scoped(buf):
        @pl.when(ctx.thread == k)
        def _():
            ctx.store(buf, x_ref[...] * 2.0)
            store_block_rows(ctx, o_ref, ctx.load(buf, SHAPE[0]))

    pl.run_scoped(scoped, ctx.smem(SHAPE, jnp.float32), collective_axes=ctx.axis)  # ALLOC


def hoisted_barrier(ctx, x_ref, o_ref):
    """A buffer and a barrier allocated by every thread; thread 0 arrives, thread 1 waits."""

    def scoped(buf, bar):
        @pl.when(ctx.thread == 0)
        def _():
            ctx.store(buf, x_ref[...] + 1.0)
            plgpu.barrier_arrive(bar)

        @pl.when(ctx.thread == 1)
        def _():
            plgpu.barrier_wait(bar)
            store_block_rows(ctx, o_ref, ctx.load(buf, SHAPE[0]))

    pl.run_scoped(scoped, ctx.smem(SHAPE, jnp.float32), plgpu.Barrier(num_arrivals=1),  # ALLOC
                  collective_axes=ctx.axis)


def plain_copy(ctx, x_ref, o_ref):
    """No allocation at all: thread 0 copies the input (in "warp_mesh": warp 0 of
    warpgroup 0, as every warpgroup has a warp 0)."""
    writes = ctx.thread == 0
    if ctx.shape == "warp_mesh":
        writes = writes & (jax.lax.axis_index(THREAD_AXIS) == 0)

    @pl.when(writes)
    def _():
        store_block_rows(ctx, o_ref, x_ref[...] * 2.0)


CLEAN: dict[str, Callable] = {
    f.__name__: f for f in (hoisted_collective, hoisted_barrier, plain_copy)
}


# --------------------------------------------------------------------------- kernel end
# Bugs the interpreter only finds when a kernel ends, under race detection
# (`run_traced(..., detect_races=True)`): the finding must point at the kernel line, not
# at the launch. Each block copies to its own rows of the output (blocks of a grid or a
# cluster run at once on a GPU), so the clean twin has no GMEM race.
def _half_copy(ctx, x_ref, o_ref, wait: bool):
    rows = (SHAPE[0] // 4,) + SHAPE[1:]  # up to 4 blocks

    def scoped(buf):
        @pl.when(ctx.thread == last_thread(ctx))
        def _():
            buf[...] = x_ref[pl.ds(0, rows[0])]
            plgpu.commit_smem()
            b, _ = ctx.block()
            dst = o_ref.at[pl.ds(b * rows[0], rows[0])]
            if wait:
                plgpu.copy_smem_to_gmem(buf, dst)
                plgpu.wait_smem_to_gmem(0)
            else:
                plgpu.copy_smem_to_gmem(buf, dst)  # COPY

    pl.run_scoped(scoped, plgpu.SMEM(rows, jnp.float32), collective_axes=ctx.axis)


def unawaited_copy(ctx, x_ref, o_ref):
    """One thread's SMEM -> GMEM copy is never awaited: JAX fails at the thread's end."""
    _half_copy(ctx, x_ref, o_ref, wait=False)


def awaited_copy(ctx, x_ref, o_ref):
    """The same copy, awaited with `plgpu.wait_smem_to_gmem(0)`: clean."""
    _half_copy(ctx, x_ref, o_ref, wait=True)


KERNEL_END: dict[str, Callable] = {"unawaited_copy": unawaited_copy}
KERNEL_END_CLEAN: dict[str, Callable] = {"awaited_copy": awaited_copy}
# Warp-level code cannot make the body's collective allocation (see the module docstring).
KERNEL_END_SHAPES = tuple(s for s in SHAPES if s != "warp_mesh")


def marked_line(fn, marker: str) -> int:
    """The first line of `fn`'s source that ends with ``# <marker>``."""
    src, first = inspect.getsourcelines(fn)
    return next(first + i for i, s in enumerate(src) if s.rstrip().endswith(f"# {marker}"))


# --------------------------------------------------------------------------- line numbers


@dataclasses.dataclass(frozen=True)
class BodyLines:
    """Source lines of a body: its file, allocation lines and branch lines (in order)."""

    file: str
    alloc: tuple[int, ...]
    branch: tuple[int, ...]


@functools.cache
def lines(body) -> BodyLines:
    """The ``# ALLOC`` and ``# BRANCH`` lines of `body` (a function or a name in `BUGGY`)."""
    fn = BUGGY[body] if isinstance(body, str) else body
    src, first = inspect.getsourcelines(fn)
    alloc = tuple(first + i for i, s in enumerate(src) if s.rstrip().endswith("# ALLOC"))
    branch = tuple(first + i for i, s in enumerate(src) if s.rstrip().endswith("# BRANCH"))
    return BodyLines(inspect.getsourcefile(fn), alloc, branch)


ALLOC_LINE = {name: lines(name).alloc[0] for name in BUGGY}
BRANCH_LINE = {name: lines(name).branch[0] for name in BUGGY}


# --------------------------------------------------------------------------- support table

_PALLAS_CALL_WHY = (
    "pallas_call has one thread per block and no thread axis (a GPU pallas_call cannot take "
    "a Mesh/num_threads), and GPU interpret mode evaluates pl.program_id to 0 in every block "
    "(jaxpr_interpret.py: 'zero is the only valid program id'), so a branch on the block is "
    "taken by every block or by none: the body runs, but it is not a bug there")


def _supported() -> dict[tuple[str, str], bool | str]:
    table: dict[tuple[str, str], bool | str] = {}
    for name in BUGGY:
        for shape in SHAPES:
            table[(name, shape)] = True
        table[(name, "pallas_call")] = _PALLAS_CALL_WHY
    return table


SUPPORTED = _supported()

_OOB = r"Out-of-bounds (swap|read)"
_TMEM_MISMATCH = r"Incorrect output shape|could not broadcast input array|Out-of-bounds"
_BARRIER_LEFT = r"Barrier remains allocated"


def _expected() -> dict[tuple[str, str], Any]:
    table: dict[tuple[str, str], Any] = {}
    for shape in SHAPES:
        for name in ("collective_in_branch", "collective_in_branch_thread0",
                     "collective_in_cond", "collective_in_loop"):
            table[(name, shape)] = "runs"  # the leak is silent
        table[("mismatched_shapes", shape)] = ("raises", _OOB)
        table[("barrier_in_branch", shape)] = ("raises", _BARRIER_LEFT)
    table[("mismatched_shapes", "tmem")] = ("raises", _TMEM_MISMATCH)
    # warp code: which warp creates the shared slot decides; ~9 runs in 10 raise, most
    # often out of bounds, sometimes a KeyError for a slot another warp already freed
    table[("mismatched_shapes", "warp_mesh")] = ("flaky", _OOB + r"|KeyError: HostAllocationKey")
    # warp 2 of each warpgroup runs the loop twice: the second buffer is most often freed
    # twice (a KeyError; 20 runs of 20 one day, and a run that ended cleanly the next)
    table[("collective_in_loop", "warp_mesh")] = ("flaky", r"KeyError: HostAllocationKey")
    # warp 0 of each warpgroup allocates: ref count (= warpgroups) is met, no error
    table[("barrier_in_branch", "warp_mesh")] = "runs"
    # program_id is 0 in every block: thread-0 branches run everywhere, others never
    table[("mismatched_shapes", "pallas_call")] = "runs"
    table[("barrier_in_branch", "pallas_call")] = "runs"
    return table


# What a traced run of each buggy pair does (jax 0.12.0.1, 2 threads, `run_pair`; 3 runs
# each, 10 for the error-message variants): "runs": the kernel returns; ("raises", regex):
# it fails with an interpreter error matching regex (`outcome(...)["error"]`); ("flaky",
# regex): it either runs or raises that. No buggy pair hangs.
EXPECTED: dict[tuple[str, str], Any] = _expected()


def matches_expected(expected, result: dict) -> bool:
    """Whether an `outcome` dict agrees with an `EXPECTED` entry."""
    if expected == "runs":
        return result["outcome"] == "runs"
    kind, regex = expected
    raised = result["outcome"] == "raises" and re.search(regex, result["error"] or "")
    if kind == "raises":
        return bool(raised)
    return bool(raised) or result["outcome"] == "runs"


# --------------------------------------------------------------------------- running


def drain_effects() -> None:
    """Drop the error a failed multi-device kernel left in JAX's runtime tokens.

    With 2 devices ("two_devices"), a kernel that fails leaves the error in the
    ordered-effect token; JAX re-raises it from the *next* effectful call (while resharding
    the token, jax/_src/dispatch.py `get_token_input`), before that kernel even starts.
    `jax.effects_barrier()` raises it once and clears the tokens.
    """
    try:
        jax.effects_barrier()
    except Exception:  # noqa: BLE001 - the previous run's error, already reported
        pass


def run_traced(fn, args, *, timeout_s: float | None = 10.0, detect_races: bool = False):
    """Run ``fn(*args)`` under ``pv.trace(raise_errors=False, timeout_s=...)``: (trace, s)."""
    import pallas_viz as pv

    drain_effects()
    t0 = time.perf_counter()
    with pv.trace(raise_errors=False, timeout_s=timeout_s, detect_races=detect_races) as tr:
        out = fn(*args)
        jax.block_until_ready(out)
    return tr, time.perf_counter() - t0


def error_line(type_name: str, message: str) -> str:
    """The root error of an interpreter failure in one line: the innermost `XError: ...`."""
    found = [ln for ln in message.splitlines()
             if re.match(r"^[A-Za-z_.]*(Error|Exception)\b.*:", ln)]
    first = message.splitlines()[0] if message else ""
    return (found[-1] if found else f"{type_name}: {first}")[:300]


def outcome(tr) -> dict:
    """A JSON-able summary of a trace: outcome ("runs"/"raises"/"hangs"), error, findings."""
    deadlocked = bool(tr.meta.get("deadlocks"))
    if deadlocked:
        what = "hangs"
    elif tr.failure is not None:
        what = "raises"
    else:
        what = "runs"
    err = None
    if tr.failure is not None:
        err = error_line(tr.failure.type, tr.failure.message)
    return {"outcome": what, "error": err, "events": len(tr.events),
            "findings": sorted({f.kind for f in tr.findings})}


def run_pair(body_name: str, shape: str, *, timeout_s: float | None = 10.0,
             num_threads: int = 2, warps_in: str = "no_grid") -> dict:
    """Run a buggy (or clean) body by name in `shape` (`warps_in`: see `launch`) once,
    traced: see `outcome`. The kernel-end bodies run with race detection; their result,
    and that of warp code outside one block, has the roots' kinds, lines and messages."""
    kernel_end = body_name in KERNEL_END or body_name in KERNEL_END_CLEAN
    body = (BUGGY.get(body_name) or CLEAN.get(body_name) or KERNEL_END.get(body_name)
            or KERNEL_END_CLEAN[body_name])
    fn, args = launch(body, shape, num_threads=num_threads, warps_in=warps_in)
    tr, secs = run_traced(fn, args, timeout_s=timeout_s, detect_races=kernel_end)
    out = dict(outcome(tr), seconds=round(secs, 2))
    if kernel_end or warps_in != "no_grid":
        out["roots"] = [[f.kind, f.source.line if f.source else None, f.message]
                        for f in tr.findings]
    return out


def run_isolated(body_name: str, shape: str, *, timeout_s: float = 10.0,
                 num_threads: int = 2, wall_timeout: float = 120.0,
                 warps_in: str = "no_grid") -> dict:
    """`run_pair` in a fresh Python process (with 2 CPU devices for "two_devices")."""
    env = dict(os.environ)
    if "two_devices" in (shape, warps_in):
        env.update(TWO_DEVICES_ENV)
    cmd = [sys.executable, "-m", "pallas_viz.examples.shapes", body_name, shape,
           str(timeout_s), str(num_threads), warps_in]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=wall_timeout)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"{' '.join(cmd)} printed no result (rc={proc.returncode}):\n"
                       f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")


def _main(argv):
    body_name, shape = argv[0], argv[1]
    timeout_s = float(argv[2]) if len(argv) > 2 else 10.0
    num_threads = int(argv[3]) if len(argv) > 3 else 2
    warps_in = argv[4] if len(argv) > 4 else "no_grid"
    print(json.dumps(run_pair(body_name, shape, timeout_s=timeout_s, num_threads=num_threads,
                              warps_in=warps_in)), flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
