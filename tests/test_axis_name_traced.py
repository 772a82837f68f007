"""A thread axis whose name the source does not spell out is read from the kernel as JAX
traced it (review: axis names passed as parameters, attributes or conditionals read
"clean").

`kernel_source` resolves `axis_index(NAME)` when NAME is a literal or a name bound once to
one. Kernels also take the name as a parameter (`def body(..., wg_axis)`: JAX's own
`blackwell_ragged_dot_mgpu`), from an attribute (`ctx.axis`) or an expression. While JAX
traces a kernel inside `pv.trace()`, the interpreter sees each `axis_index` with its axis
name resolved; pallas_viz notes them by line, so a branch on such an index is a branch on
the thread index, and threads taking turns at a collective scope under it are reported
(the bug `test_merged_requests` pins with a literal name). Real kernels in GPU interpret
mode, in every launch shape with a thread axis, several runs each (two devices too);
their fixes stay clean.
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

import pallas_viz as pv
from pallas_viz import kernel_source
from pallas_viz.examples import shapes as sh
from pallas_viz.model import UNNAMED_AXIS

RUNS = 3
SHAPES = ["no_grid", "grid3", "cluster2", "core_map", "core_map_grid", "tmem"]


def turns_attribute(ctx, x_ref, o_ref):
    t = jax.lax.axis_index(ctx.axis)  # THREAD_INDEX

    def step(i, carry):
        @pl.when(i % 2 == t)  # TAKES_TURNS
        def _():
            def scoped(buf):
                ctx.store(buf, x_ref[...])

            pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32),  # IN_TURN
                          collective_axes=ctx.axis)

        return carry

    jax.lax.fori_loop(0, 4, step, 0)
    sh.store_block_rows(ctx, o_ref, x_ref[...])


def _turns_by(wg_axis):
    """A kernel body made for its thread axis (the name a parameter of the factory)."""

    def turns_parameter(ctx, x_ref, o_ref):
        def step(i, carry):
            @pl.when(jax.lax.axis_index(wg_axis) == i % 2)  # TAKES_TURNS
            def _():
                def scoped(buf):
                    ctx.store(buf, x_ref[...])

                pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32),  # IN_TURN
                              collective_axes=wg_axis)

            return carry

        jax.lax.fori_loop(0, 4, step, 0)
        sh.store_block_rows(ctx, o_ref, x_ref[...])

    return turns_parameter


turns_parameter = _turns_by(sh.THREAD_AXIS)


def turns_conditional(ctx, x_ref, o_ref):
    axis = ctx.axis if x_ref.shape[0] > 0 else None
    t = jax.lax.axis_index(axis_name=axis)

    def step(i, carry):
        @pl.when(i % 2 == t)  # TAKES_TURNS
        def _():
            def scoped(buf):
                ctx.store(buf, x_ref[...])

            pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32),  # IN_TURN
                          collective_axes=axis)

        return carry

    jax.lax.fori_loop(0, 4, step, 0)
    sh.store_block_rows(ctx, o_ref, x_ref[...])


def turns_hoisted(ctx, x_ref, o_ref):
    t = jax.lax.axis_index(ctx.axis)

    def step(i, carry):
        def scoped(buf):
            @pl.when(i % 2 == t)
            def _():
                ctx.store(buf, x_ref[...])

        pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32), collective_axes=ctx.axis)
        return carry

    jax.lax.fori_loop(0, 4, step, 0)
    sh.store_block_rows(ctx, o_ref, x_ref[...])


BODIES = [turns_attribute, turns_parameter, turns_conditional]


@pytest.mark.parametrize("body", BODIES, ids=lambda b: b.__name__)
@pytest.mark.parametrize("shape", SHAPES)
def test_a_branch_on_a_thread_axis_the_source_does_not_name_is_not_clean(shape, body):
    assert_takes_turns_root(body, shape, RUNS)


@pytest.mark.slow
@pytest.mark.parametrize("body", [turns_attribute, turns_parameter],
                         ids=lambda b: b.__name__)
def test_on_two_devices(body):
    assert_takes_turns_on_two_devices("test_axis_name_traced", body, RUNS)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_hoisted_fix_stays_clean(shape):
    assert_stays_clean(turns_hoisted, shape)


def test_a_noted_thread_axis_holds_while_its_line_reads_as_noted(tmp_path):
    import linecache

    src = tmp_path / "k.py"
    body = ("def k(ctx):\n"
            "    pl.run_scoped(f, collective_axes=ctx.axis)\n"
            "    pl.run_scoped(g, collective_axes=ctx.axis)\n")
    src.write_text(body)
    file = str(src)
    assert kernel_source.thread_axis_at(file, 2) is None
    assert kernel_source.note_thread_axis(file, 2, "w")
    assert not kernel_source.note_thread_axis(file, 2, "w")  # known already
    assert kernel_source.thread_axis_at(file, 2) == "w"
    assert kernel_source.thread_axis_at(file, 3) is None  # another line
    assert kernel_source.note_thread_axis(file, 3, "w") and kernel_source.note_thread_axis(
        file, 3, "v")  # a line two kernels of different thread axes reach: none of them
    assert kernel_source.thread_axis_at(file, 3) is None
    src.write_text(body.replace("f, collective", "h, collective"))  # edited since
    linecache.checkcache(file)
    assert kernel_source.thread_axis_at(file, 2) is None


def _cached_runs(body) -> dict:
    """`body` in every shape, jit-compiled before any trace, traced RUNS times; then traced
    afresh (after `jax.clear_caches()`); then RUNS times from the cache again (a fresh
    process: `cached_kernel_findings`). Checks that each phase ran as named: no scope
    traced while cached, some when fresh."""
    import cached_kernel_findings

    out = cached_kernel_findings.run("test_axis_name_traced", body.__name__, RUNS, SHAPES)
    for shape in SHAPES:
        cached, fresh, again = out["traced"][shape]
        assert cached == 0 and fresh > 0 and again == 0, (shape, out["traced"])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("body", BODIES, ids=lambda b: b.__name__)
def test_a_kernel_compiled_before_the_trace_is_not_called_clean(body):
    # (review: JAX does not trace a jit-cached kernel again, so the hook never sees its
    # axis names: a branch on `axis_index(ctx.axis)` read "clean". Now the branch is a
    # warning saying why it cannot be checked, and how to have it checked; once JAX traced
    # the kernel inside a trace, its names are known for good: the error, cached or not.)
    out = _cached_runs(body)
    in_turn = sh.marked_line(body, "IN_TURN")
    takes_turns = sh.marked_line(body, "TAKES_TURNS")
    for shape in SHAPES:
        messages = set()
        for findings in out["cached"][shape]:
            assert len(findings) == 1, (shape, findings)
            kind, severity, line, branch, axes, message, suggestion, threads, views = findings[0]
            assert (kind, severity, line, branch) == (
                "partial_collective", "warning", in_turn, takes_turns), (shape, findings)
            assert axes == [UNNAMED_AXIS] and threads == [0, 1]
            # (review: the views called this branch "threads part here", which the warning
            # does not know)
            label = "branch here (its axis not known)"
            assert [t.split(":")[0] for t in views["text"]] == [f"= {label}"], views
            assert views["html"] == [label] and views["payload"] == label, views
            assert [t.split(":")[0] for t in views["png"]] == [label], views
            assert f"at line {takes_turns} whose condition reads an axis index whose axis " \
                "pallas_viz could not name" in message, message
            assert "jax.clear_caches()" in suggestion and "hoist" in suggestion
            messages.add(message)
        assert out["thread_axis"][shape] == [None, "w", "w"]
        for findings in [out["fresh"][shape], *out["again"][shape]]:
            assert len(findings) == 1, (shape, findings)
            kind, severity, line, branch, axes, message, suggestion, threads, views = findings[0]
            assert (kind, severity, line, branch, axes) == (
                "partial_collective", "error", in_turn, takes_turns, ["w"]), (shape, findings)
            label = "threads part here"
            assert [t.split(":")[0] for t in views["text"]] == [f"= {label}"], views
            assert views["html"] == [label] and views["payload"] == label, views
            assert [t.split(":")[0] for t in views["png"]] == [label], views
            assert "hoist it out of the thread-dependent branch" in suggestion
            assert threads == [0, 1]
        assert len(messages) == 1, messages  # the same every run


@pytest.mark.slow
def test_the_hoisted_fix_compiled_before_the_trace_stays_clean():
    out = _cached_runs(turns_hoisted)
    for shape in SHAPES:
        assert out["cached"][shape] == [[]] * RUNS, shape
        assert out["fresh"][shape] == [] and out["again"][shape] == [[]] * RUNS, shape


def test_collective_axes_given_by_an_attribute_are_not_read_from_the_source():
    # (the thread axis of these kernels is the mesh's, seen while JAX traces them)
    line = sh.marked_line(turns_attribute, "IN_TURN")
    assert kernel_source.collective_axes_at(__file__, line) == ()


def test_the_axis_index_hook_goes_with_the_trace():
    from jax._src.pallas.mosaic_gpu.interpret import jaxpr_interpret as jxi

    from pallas_viz._jax import hooks_installed

    before = jxi.JaxprInterpreter._interpret_axis_index_p
    fn, args = sh.launch(turns_attribute, "no_grid")
    with pytest.raises(ZeroDivisionError):
        with pv.trace():
            assert jxi.JaxprInterpreter._interpret_axis_index_p is not before
            jax.block_until_ready(fn(*args))
            1 / 0  # noqa: B018
    assert jxi.JaxprInterpreter._interpret_axis_index_p is before
    assert not hooks_installed()


def test_a_noted_axis_holds_while_its_line_reads_as_noted(tmp_path):
    import linecache

    src = tmp_path / "k.py"
    body = ("def k(ctx):\n"
            "    t = lax.axis_index(ctx.axis)\n"
            "\n"
            "    @pl.when(t == 0)\n"
            "    def body():\n"
            "        pl.run_scoped(f, collective_axes=ctx.axis)\n")
    src.write_text(body)
    file = str(src)
    # not noted: some axis's index, which one not known
    assert kernel_source.enclosing_branch(file, "body", 4).axes == (UNNAMED_AXIS,)
    assert kernel_source.note_traced_axis(file, 2, "w")
    assert not kernel_source.note_traced_axis(file, 2, "w")  # known already
    assert kernel_source.enclosing_branch(file, "body", 4).axes == ("w",)
    src.write_text(body.replace("ctx.axis)\n\n", "ctx.grid_axis)\n\n"))  # edited since
    linecache.checkcache(file)
    assert kernel_source.enclosing_branch(file, "body", 4).axes == (UNNAMED_AXIS,)
