"""A kernel whose helper holds the thread branch is named after its body, and the root
names the helper's call (`called from`).

JAX roots the tracebacks of a traced function at that function, so the requests of a
`pl.when` body written inside a helper do not show the kernel body's call of the helper
(review K2, D5: the kernel was named after the helper, and `called from` was missing).
The call comes from the equation that traced the body (`_jax.sources.note_enclosing`),
or, for a kernel JAX traced before the trace, from the source when the helper has one
call. Two kernels calling one such helper are each named after their own body, each root
with its own call. Real kernels in GPU interpret mode, in every launch shape they run
in, several runs each: the root, its line, its call and its message are the same in
every run; the fixed kernel stays clean and keeps its body's name.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl

import pallas_viz as pv
from pallas_viz._jax import sources
from pallas_viz.examples import shapes as sh

RUNS = 4
SHAPES = ["no_grid", "grid3", "cluster2", "core_map"]
FILE = __file__.rsplit("/", 1)[-1]


def only_leader_copies(ctx, x_ref, o_ref):
    @pl.when(ctx.thread == 0)  # BRANCH
    def _():
        def body(tmp):
            tmp[...] = x_ref[...]
            sh.store_block_rows(ctx, o_ref, tmp[...])

        pl.run_scoped(body, ctx.smem(sh.SHAPE, jnp.float32), collective_axes=ctx.axis)  # SCOPE


def my_kernel(ctx, x_ref, o_ref):
    o_ref[...] = x_ref[...]
    only_leader_copies(ctx, x_ref, o_ref)  # CALL


def leader_stage(ctx, x_ref, o_ref, value):
    @pl.when(ctx.thread == 0)  # STAGE_BRANCH
    def _():
        def body(tmp):
            tmp[...] = x_ref[...] + value
            sh.store_block_rows(ctx, o_ref, tmp[...])

        pl.run_scoped(body, ctx.smem(sh.SHAPE, jnp.float32),  # STAGE_SCOPE
                      collective_axes=ctx.axis)


def scale_kernel(ctx, x_ref, o_ref):
    leader_stage(ctx, x_ref, o_ref, 2.0)  # SCALE_CALL


def shift_kernel(ctx, x_ref, o_ref):
    o_ref[...] = x_ref[...]
    leader_stage(ctx, x_ref, o_ref, 5.0)  # SHIFT_CALL


def all_copy(ctx, x_ref, o_ref):
    def body(tmp):
        @pl.when(ctx.thread == 0)
        def _():
            tmp[...] = x_ref[...]
            sh.store_block_rows(ctx, o_ref, tmp[...])

    pl.run_scoped(body, ctx.smem(sh.SHAPE, jnp.float32), collective_axes=ctx.axis)


def fixed_kernel(ctx, x_ref, o_ref):
    o_ref[...] = x_ref[...]
    all_copy(ctx, x_ref, o_ref)


LINES = {m: sh.marked_line(f, m) for f, ms in [
    (only_leader_copies, ("BRANCH", "SCOPE")), (my_kernel, ("CALL",)),
    (leader_stage, ("STAGE_BRANCH", "STAGE_SCOPE")), (scale_kernel, ("SCALE_CALL",)),
    (shift_kernel, ("SHIFT_CALL",))] for m in ms}


def _check_root(tr, root, kernel: str, scope: str, call: str, branch: str):
    assert root.kind == "partial_collective", tr.summary()
    assert root.source.line == LINES[scope] and root.source.file == __file__, root.source
    via = root.source.via
    assert via is not None and via.line == LINES[call] and via.file == __file__, root.source
    assert via.function == kernel, via
    assert root.branch is not None and root.branch.line == LINES[branch], tr.summary()
    assert tr.kernels[root.kernel].name == kernel, tr.summary()
    text = tr.summary()
    assert f"in kernel {root.kernel} ({kernel}):" in text, text
    assert re.search(rf"  = called from: \S*{re.escape(FILE)}:{LINES[call]}:\d+ in {kernel}  `",
                     text), text


def _key(root):
    return (root.kind, root.source.line, root.source.via.line, root.message, root.suggestion,
            tuple(sorted(root.cells)))


@pytest.mark.parametrize("shape", SHAPES)
def test_a_helper_holding_the_branch_names_the_kernel_and_its_call(shape, tmp_path):
    seen = set()
    for _ in range(RUNS):
        fn, args = sh.launch(my_kernel, shape)
        tr, _ = sh.run_traced(fn, args)
        errors = [f for f in tr.findings if f.severity == "error"]
        assert len(errors) == 1, tr.summary()
        _check_root(tr, errors[0], "my_kernel", "SCOPE", "CALL", "BRANCH")
        seen.add(_key(errors[0]))
        # a loaded trace says the same (its locations are saved with their calls)
        tr.save(tmp_path / "t.json")
        loaded = pv.load(tmp_path / "t.json")
        assert [_key(f) for f in loaded.findings if f.severity == "error"] == [
            _key(errors[0])]
        assert [k.name for k in loaded.kernels] == ["my_kernel"]
    assert len(seen) == 1, seen


@pytest.mark.parametrize("shape", SHAPES)
def test_two_kernels_calling_one_helper_are_named_after_their_bodies(shape):
    seen = set()
    for _ in range(RUNS):
        (f1, a1), (f2, a2) = sh.launch(scale_kernel, shape), sh.launch(shift_kernel, shape)
        sh.drain_effects()
        with pv.trace(raise_errors=False, timeout_s=10.0) as tr:
            jax.block_until_ready(f1(*a1))
            jax.block_until_ready(f2(*a2))
        assert [k.name for k in tr.kernels] == ["scale_kernel", "shift_kernel"], tr.summary()
        errors = [f for f in tr.findings if f.severity == "error"]
        assert [f.kernel for f in errors] == [0, 1], tr.summary()
        _check_root(tr, errors[0], "scale_kernel", "STAGE_SCOPE", "SCALE_CALL", "STAGE_BRANCH")
        _check_root(tr, errors[1], "shift_kernel", "STAGE_SCOPE", "SHIFT_CALL", "STAGE_BRANCH")
        seen.add(tuple(_key(f) for f in errors))
    assert len(seen) == 1, seen


def test_a_kernel_not_traced_again_reads_the_call_from_the_source():
    # jit-cached: the second run is not traced again, and with the equations noted while
    # it was (and the lines resolved from them) gone, as when the record is evicted, the
    # helper's one call in the file is read from the source
    fn, args = sh.launch(my_kernel, "no_grid")
    jitted = jax.jit(fn)
    sh.run_traced(jitted, args)
    for _ in range(RUNS):
        for cache in ("_enclosing", "_resolved"):
            getattr(sources, cache, {}).clear()
        tr, _ = sh.run_traced(jitted, args)
        assert not getattr(sources, "_enclosing", {})  # (not traced again: the source says)
        errors = [f for f in tr.findings if f.severity == "error"]
        assert len(errors) == 1, tr.summary()
        _check_root(tr, errors[0], "my_kernel", "SCOPE", "CALL", "BRANCH")


@pytest.mark.parametrize("shape", SHAPES)
def test_the_fixed_kernel_stays_clean_and_keeps_its_name(shape):
    for _ in range(2):
        fn, args = sh.launch(fixed_kernel, shape)
        tr, _ = sh.run_traced(fn, args)
        assert not tr.findings, tr.summary()
        assert [k.name for k in tr.kernels] == ["fixed_kernel"], tr.summary()
