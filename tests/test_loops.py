"""Collective allocations in loops whose trip count depends on the thread.

The threads part at the loop, not at a branch: the root cause names the loop line and
advises on its trip count, every run, in every way of writing the loop. The source
reading behind it (`kernel_source.enclosing_branch`) is checked on small sources too:
which of several enclosing constructs it names, and that a loop with a literal trip
count is never named.
"""

from __future__ import annotations

import linecache
import textwrap

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_viz.examples import shapes as sh
from pallas_viz.kernel_source import enclosing_branch

RUNS = 3


def _store(ctx, x_ref, o_ref):
    def scoped(buf):
        ctx.store(buf, x_ref[...] * 2.0)
        o_ref[...] = ctx.load(buf, sh.SHAPE[0])
    return scoped


def in_while_loop(ctx, x_ref, o_ref):
    last = ctx.thread == sh.last_thread(ctx)

    def body(i):
        pl.run_scoped(_store(ctx, x_ref, o_ref), ctx.smem(sh.SHAPE, jnp.float32),  # ALLOC
                      collective_axes=ctx.axis)
        return i + 1

    jax.lax.while_loop(lambda i: i < 1 + last.astype(jnp.int32), body, 0)  # BRANCH


def in_pl_loop(ctx, x_ref, o_ref):
    trips = 1 + (ctx.thread == sh.last_thread(ctx)).astype(jnp.int32)

    @pl.loop(0, trips)  # BRANCH
    def _(i):
        pl.run_scoped(_store(ctx, x_ref, o_ref), ctx.smem(sh.SHAPE, jnp.float32),  # ALLOC
                      collective_axes=ctx.axis)


def barrier_in_loop(ctx, x_ref, o_ref):
    """Thread 0 runs the loop twice: its second barrier is never freed (the interpreter
    raises at the kernel's end), folded under the root."""
    trips = 1 + (ctx.thread == 0).astype(jnp.int32)

    def step(i, carry):
        def scoped(bar):
            o_ref[...] = x_ref[...]

        pl.run_scoped(scoped, plgpu.Barrier(num_arrivals=1), collective_axes=ctx.axis)  # ALLOC
        return carry

    jax.lax.fori_loop(0, trips, step, 0)  # BRANCH


def in_fori_loop_by_keyword(ctx, x_ref, o_ref):
    trips = 1 + (ctx.thread == sh.last_thread(ctx)).astype(jnp.int32)

    def step(i, carry):
        pl.run_scoped(_store(ctx, x_ref, o_ref), ctx.smem(sh.SHAPE, jnp.float32),  # ALLOC
                      collective_axes=ctx.axis)
        return carry

    jax.lax.fori_loop(0, trips, body_fun=step, init_val=0)  # BRANCH


def in_nd_loop(ctx, x_ref, o_ref):
    """One more step than threads, dealt out along the thread axis: thread 0 gets two."""

    @plgpu.nd_loop((ctx.num_threads + 1,), collective_axes=ctx.axis)  # BRANCH
    def _(info):
        pl.run_scoped(_store(ctx, x_ref, o_ref), ctx.smem(sh.SHAPE, jnp.float32),  # ALLOC
                      collective_axes=ctx.axis)


def static_loop_in_branch(ctx, x_ref, o_ref):
    """The branch parts the threads; the loop inside it runs twice on every thread."""

    @pl.when(ctx.thread == sh.last_thread(ctx))  # BRANCH
    def _():
        def step(i, carry):
            pl.run_scoped(_store(ctx, x_ref, o_ref), ctx.smem(sh.SHAPE, jnp.float32),  # ALLOC
                          collective_axes=ctx.axis)
            return carry

        jax.lax.fori_loop(0, 2, step, 0)


BODIES = {f.__name__: (f, kind) for f, kind in (
    (in_while_loop, "loop"), (in_pl_loop, "loop"), (barrier_in_loop, "loop"),
    (in_fori_loop_by_keyword, "loop"), (in_nd_loop, "loop"),
    (static_loop_in_branch, "branch"),
    (sh.BUGGY["collective_in_loop"], "loop"))}


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "cluster2"])
@pytest.mark.parametrize("name", list(BODIES))
def test_loop_root_names_the_loop_every_run(name, shape):
    body, kind = BODIES[name]
    want = sh.lines(body)
    seen = set()
    for _ in range(RUNS):
        fn, args = sh.launch(body, shape)
        tr, _ = sh.run_traced(fn, args)
        (root,) = [f for f in tr.findings if f.severity == "error"]
        assert root.kind == "partial_collective", tr.summary()
        assert root.source.line == want.alloc[0]
        assert root.branch is not None and root.branch.line == want.branch[0], tr.summary()
        assert root.branch.kind == kind
        assert ("trip count" in root.suggestion) is (kind == "loop")
        # a loop's root says how many times each thread made the request, and which of
        # them only some threads make (never that a thread "never requests it")
        assert ("is requested 2 times in" in root.message) is (kind == "loop")
        assert (" and 1 time in " in root.message) is (kind == "loop")
        assert ("each request after the 1st is made only by" in root.message) is (
            kind == "loop")
        assert ("never request" in root.message) is (kind != "loop")
        text = tr.summary()
        (part,) = [ln for ln in text.splitlines() if "threads part here:" in ln]
        assert f".py:{root.branch.line}:" in part, part
        seen.add((root.kind, root.source.line, root.branch.line, root.message, root.suggestion))
    assert len(seen) == 1, seen


# --------------------------------------------------------------------------- the source


def _branch(tmp_path, source: str, scope: str):
    """`enclosing_branch` for the function `scope` of `source`, written to a file."""
    path = tmp_path / "kernel.py"
    text = textwrap.dedent(source)
    path.write_text(text)
    linecache.checkcache(str(path))
    lines = text.splitlines()
    first = next(i + 1 for i, s in enumerate(lines)
                 if s.strip().startswith((f"def {scope}(", "@")) and (
                     f"def {scope}(" in s or f"def {scope}(" in lines[i + 1]))
    return enclosing_branch(str(path), scope, first)


HEAD = """\
import jax
from jax.experimental import pallas as pl
"""


def test_a_loop_bound_read_from_the_thread_index_is_named(tmp_path):
    src = HEAD + """
def kernel(x_ref):
    t = jax.lax.axis_index("t")
    n = 2 + t
    def step(i, c):
        pl.run_scoped(lambda b: None, None, collective_axes="t")
        return c
    jax.lax.fori_loop(0, n, step, 0)
"""
    b = _branch(tmp_path, src, "step")
    assert (b.line, b.kind) == (10, "loop") and "fori_loop" in b.code


def test_the_thread_dependent_construct_wins_over_an_inner_one(tmp_path):
    """A name assigned from one read of the thread index counts (`last = t == 3`)."""
    src = HEAD + """
def kernel(x_ref):
    t = jax.lax.axis_index("t")
    last = t == 3
    @pl.when(last)
    def _():
        def step(i, c):
            @pl.when(i == 0)
            def inner():
                pl.run_scoped(lambda b: None, None, collective_axes="t")
            return c
        jax.lax.fori_loop(0, 4, step, 0)
"""
    b = _branch(tmp_path, src, "inner")
    assert (b.line, b.kind) == (7, "branch") and "pl.when(last)" in b.code


def test_a_branch_wins_over_a_loop_when_neither_reads_the_thread(tmp_path):
    src = HEAD + """
def kernel(x_ref, ctx):
    @pl.when(ctx.thread == 1)
    def _():
        def step(i, c):
            pl.run_scoped(lambda b: None, None, collective_axes="t")
            return c
        jax.lax.fori_loop(0, ctx.steps, step, 0)
"""
    b = _branch(tmp_path, src, "step")
    assert (b.line, b.kind) == (5, "branch")


def test_a_loop_with_a_literal_trip_count_is_never_named(tmp_path):
    src = HEAD + """
def kernel(x_ref):
    def step(i, c):
        pl.run_scoped(lambda b: None, None, collective_axes="t")
        return c
    jax.lax.fori_loop(0, 2 * 4, step, 0)
"""
    assert _branch(tmp_path, src, "step") is None


def test_a_while_loop_condition_function_by_name_is_read(tmp_path):
    src = HEAD + """
def kernel(x_ref):
    t = jax.lax.axis_index("t")
    def cond(i):
        return i < t
    def body(i):
        pl.run_scoped(lambda b: None, None, collective_axes="t")
        return i + 1
    jax.lax.while_loop(cond, body, 0)
"""
    b = _branch(tmp_path, src, "body")
    assert (b.line, b.kind) == (11, "loop")
    # the condition function itself is not a loop body
    assert _branch(tmp_path, src, "cond") is None


def test_loop_arguments_by_keyword_are_read(tmp_path):
    src = HEAD + """
def kernel(x_ref):
    t = jax.lax.axis_index("t")
    def step(i, c):
        pl.run_scoped(lambda b: None, None, collective_axes="t")
        return c
    jax.lax.fori_loop(lower=0, upper=t + 1, body_fun=step, init_val=0)
    def body(i):
        pl.run_scoped(lambda b: None, None, collective_axes="t")
        return i + 1
    jax.lax.while_loop(cond_fun=lambda i: i < 2, body_fun=body, init_val=t)
"""
    b = _branch(tmp_path, src, "step")
    assert (b.line, b.kind) == (9, "loop")
    b = _branch(tmp_path, src, "body")
    assert (b.line, b.kind) == (13, "loop") and "init_val=t" in b.code


def test_a_loop_factory_called_on_its_body_is_a_loop(tmp_path):
    src = HEAD + """
def kernel(x_ref):
    t = jax.lax.axis_index("t")
    def body(i):
        pl.run_scoped(lambda b: None, None, collective_axes="t")
    pl.loop(0, t)(body)
"""
    b = _branch(tmp_path, src, "body")
    assert (b.line, b.kind) == (8, "loop")


def test_an_nd_loop_is_named_even_with_a_literal_grid_but_below_a_branch(tmp_path):
    src = HEAD + """
from jax.experimental.pallas import mosaic_gpu as plgpu
def kernel(x_ref, ctx):
    @plgpu.nd_loop((4, 3), collective_axes="sm")
    def steps(info):
        pl.run_scoped(lambda b: None, None, collective_axes="t")
    @pl.when(ctx.thread == 0)
    def _():
        @plgpu.nd_loop((4, 3), collective_axes="sm")
        def inner(info):
            pl.run_scoped(lambda b: None, None, collective_axes="t")
"""
    b = _branch(tmp_path, src, "steps")
    assert (b.line, b.kind) == (6, "loop") and "nd_loop" in b.code
    b = _branch(tmp_path, src, "inner")
    assert (b.line, b.kind) == (9, "branch")
