"""A thread axis named through a constant is read as the thread axis (review: the
thread-branch rule read only literal axis names).

Kernel authors often name their mesh axes once (`WG = "wg"`) and write
`lax.axis_index(WG)`. A branch on such an index is a branch on the thread index: threads
taking turns at a collective scope under it are the bug `test_merged_requests` pins with
a literal name, and a kernel naming its axis through a constant must not read "clean"
for it. The constants read: a module-level or enclosing-function name bound once to a
string (or a tuple of strings), used in `axis_index(...)` (positional or `axis_name=`)
and in `collective_axes=`; and a helper's parameter given such a value at every call of
the helper (`do_matmul(..., wg_axis="wg")`). Real kernels in GPU interpret mode, in
several launch shapes, several runs each (two devices too); their fixes stay clean.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from roots_util import (
    assert_stays_clean,
    assert_takes_turns_on_two_devices,
    assert_takes_turns_root,
)

from pallas_viz import kernel_source
from pallas_viz.examples import shapes as sh

RUNS = 3
SHAPES = ["no_grid", "grid3", "cluster2", "core_map", "core_map_grid", "tmem"]
THREAD = "w"  # the shapes' thread axis, named once
AXES = (THREAD,)


def turns_module_constant(ctx, x_ref, o_ref):
    t = jax.lax.axis_index(THREAD)

    def step(i, carry):
        @pl.when(i % 2 == t)  # TAKES_TURNS
        def _():
            def scoped(buf):
                ctx.store(buf, x_ref[...])

            pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32),  # IN_TURN
                          collective_axes=AXES)

        return carry

    jax.lax.fori_loop(0, 4, step, 0)
    sh.store_block_rows(ctx, o_ref, x_ref[...])


def turns_local_constant(ctx, x_ref, o_ref):
    wg_axis = "w"

    def step(i, carry):
        @pl.when(i % 2 == jax.lax.axis_index(axis_name=wg_axis))  # TAKES_TURNS
        def _():
            def scoped(buf):
                ctx.store(buf, x_ref[...])

            pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32),  # IN_TURN
                          collective_axes=wg_axis)

        return carry

    jax.lax.fori_loop(0, 4, step, 0)
    sh.store_block_rows(ctx, o_ref, x_ref[...])


def _turns_at(ctx, x_ref, wg_axis):
    """The turns, in a helper given the axis name (`do_matmul(..., wg_axis="wg")` in JAX's
    blackwell_ragged_dot_mgpu)."""

    def step(i, carry):
        @pl.when(jax.lax.axis_index(wg_axis) == i % 2)  # TAKES_TURNS
        def _():
            def scoped(buf):
                ctx.store(buf, x_ref[...])

            pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32),  # IN_TURN
                          collective_axes=wg_axis)

        return carry

    jax.lax.fori_loop(0, 4, step, 0)


def turns_argument(ctx, x_ref, o_ref):
    _turns_at(ctx, x_ref, wg_axis=THREAD)
    sh.store_block_rows(ctx, o_ref, x_ref[...])


def turns_hoisted(ctx, x_ref, o_ref):
    t = jax.lax.axis_index(THREAD)

    def step(i, carry):
        def scoped(buf):
            @pl.when(i % 2 == t)
            def _():
                ctx.store(buf, x_ref[...])

        pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32), collective_axes=AXES)
        return carry

    jax.lax.fori_loop(0, 4, step, 0)
    sh.store_block_rows(ctx, o_ref, x_ref[...])


@pytest.mark.parametrize("body", [turns_module_constant, turns_local_constant])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_branch_on_a_thread_axis_named_by_a_constant_is_not_clean(shape, body):
    assert_takes_turns_root(body, shape, RUNS)


@pytest.mark.slow
@pytest.mark.parametrize("body", [turns_module_constant, turns_local_constant],
                         ids=lambda b: b.__name__)
def test_on_two_devices(body):
    assert_takes_turns_on_two_devices("test_axis_name_constants", body, RUNS)


@pytest.mark.parametrize("shape", ["no_grid", "grid3"])
def test_a_kernel_jax_traced_before_the_trace_reads_its_axis_from_the_constants(shape):
    # (the mesh's names are seen only while JAX traces the kernel inside `pv.trace()`; a
    # jit-cached kernel's thread axis is read from its `collective_axes=` in the source)
    fn, args = sh.launch(turns_module_constant, shape)
    fn = jax.jit(fn)
    jax.block_until_ready(fn(*args))  # traced and cached by JAX, outside any trace
    for _ in range(RUNS):
        tr, _ = sh.run_traced(fn, args)
        assert tr.kernels[0].thread_axis == "w"
        (root,) = [f for f in tr.findings if f.severity == "error"]
        assert root.kind == "partial_collective", tr.summary()
        assert root.source.line == sh.marked_line(turns_module_constant, "IN_TURN")


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "cluster2", "core_map"])
def test_an_axis_name_given_as_an_argument_is_read_at_the_call(shape):
    # (a kernel JAX traced before the trace: only its source can name the axis, through
    # the helper's calls, where the parameter gets a constant)
    fn, args = sh.launch(turns_argument, shape)
    fn = jax.jit(fn)
    jax.block_until_ready(fn(*args))  # traced and cached by JAX, outside any trace
    seen = set()
    for _ in range(RUNS):
        tr, _ = sh.run_traced(fn, args)
        assert tr.kernels[0].thread_axis == "w"
        (root,) = [f for f in tr.findings if f.severity == "error"]
        assert root.kind == "partial_collective", tr.summary()
        assert root.source.line == sh.marked_line(_turns_at, "IN_TURN")
        assert root.branch.line == sh.marked_line(_turns_at, "TAKES_TURNS")
        assert root.branch.axes == ("w",)
        seen.add(root.message)
    assert len(seen) == 1, seen


def test_an_argument_is_not_read_where_a_call_does_not_resolve_or_the_body_rebinds(tmp_path):
    src = tmp_path / "k.py"
    src.write_text(
        "def helper(ctx, ax, other='x'):\n"
        "    pl.run_scoped(f, collective_axes=ax)\n"
        "    pl.run_scoped(f, collective_axes=other)\n"
        "def rebinding(ctx, ax):\n"
        "    ax = ax + '_'\n"
        "    pl.run_scoped(f, collective_axes=ax)\n"
        "def kernel(ctx, a):\n"
        "    helper(ctx, 'w')\n"
        "    functools.partial(helper, ax='w')\n"
        "    rebinding(ctx, 'w')\n")
    file = str(src)
    assert kernel_source.collective_axes_at(file, 2) == ("w",)  # positional, then partial
    assert kernel_source.collective_axes_at(file, 3) == ("x",)  # its default
    assert kernel_source.collective_axes_at(file, 6) == ()  # rebound in the body
    src.write_text(src.read_text() + "    helper(ctx, a)\n")  # a call it cannot resolve
    import linecache

    linecache.checkcache(file)
    assert kernel_source.collective_axes_at(file, 2) == ()


@pytest.mark.parametrize("shape", SHAPES)
def test_the_hoisted_fix_stays_clean(shape):
    assert_stays_clean(turns_hoisted, shape)


def test_collective_axes_named_by_constants_are_read_from_the_source():
    line = sh.marked_line(turns_module_constant, "IN_TURN")
    assert kernel_source.collective_axes_at(__file__, line) == ("w",)
    line = sh.marked_line(turns_local_constant, "IN_TURN")
    assert kernel_source.collective_axes_at(__file__, line) == ("w",)


def test_a_name_bound_twice_is_not_read_as_a_constant(tmp_path):
    src = tmp_path / "k.py"
    src.write_text(
        "AXIS = 'w'\n"
        "AXIS = 'x'\n"
        "def k():\n"
        "    pl.run_scoped(f, collective_axes=AXIS)\n")
    assert kernel_source.collective_axes_at(str(src), 4) == ()
