"""`lax.switch` whose case list is built: a factory's calls, or a list bound to a name.

A collective scope in some of the cases of a `lax.switch` on the thread index is one
`partial_collective` root at the scope's line; the threads part at the switch. The
branch search found the switch only when its list named the case functions directly:
with `[make(1.0), skip, make(3.0)]` (a factory returning the case) or `cases = [...]`
it named no branch, and the advice spoke of a `pl.when` the kernel does not have. Where
no branch is found, the advice names no one construct.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from roots_util import single_error_root

from pallas_viz.analysis.collective import partial_hint
from pallas_viz.examples import shapes as sh
from pallas_viz.model import SourceLocation

RUNS = 2
SHAPES = ["no_grid", "grid3", "cluster2", "core_map"]


def factory_cases(ctx, x_ref, o_ref):
    """Threads 0 and 2 open a scope (two calls of one factory); thread 1 does not."""
    def scaled(scale):
        def case():
            def scoped(buf):
                ctx.store(buf, x_ref[...] * scale)

            pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32),  # ALLOC
                          collective_axes=ctx.axis)

        return case

    def skip():
        pass

    jax.lax.switch(jnp.minimum(ctx.thread, 2), [scaled(1.0), skip, scaled(3.0)])  # BRANCH
    sh.store_block_rows(ctx, o_ref, x_ref[...])


def bound_cases(ctx, x_ref, o_ref):
    """Only thread 0 opens the scope; the case list is bound to a name first."""
    def with_buf():
        def scoped(buf):
            ctx.store(buf, x_ref[...])

        pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32),  # ALLOC
                      collective_axes=ctx.axis)

    def no_buf():
        pass

    cases = [with_buf if i == 0 else no_buf for i in range(3)]
    jax.lax.switch(jnp.minimum(ctx.thread, 2), cases)  # BRANCH
    sh.store_block_rows(ctx, o_ref, x_ref[...])


def _cases_from_elsewhere(ctx, x_ref):
    def with_buf():
        def scoped(buf):
            ctx.store(buf, x_ref[...])

        pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32),  # ALLOC
                      collective_axes=ctx.axis)

    def no_buf():
        pass

    return [with_buf, no_buf, no_buf]


def unfound_cases(ctx, x_ref, o_ref):
    """The case list comes from another function (found through the call's line)."""
    jax.lax.switch(jnp.minimum(ctx.thread, 2), _cases_from_elsewhere(ctx, x_ref))  # BRANCH
    sh.store_block_rows(ctx, o_ref, x_ref[...])


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("body, missing", [(factory_cases, "w 1 never requests it"),
                                           (bound_cases, "w 1..2 never request it")])
def test_the_switch_of_a_built_case_list_is_named(shape, body, missing):
    alloc, branch = sh.marked_line(body, "ALLOC"), sh.marked_line(body, "BRANCH")
    seen = set()
    for _ in range(RUNS):
        tr, root = single_error_root(body, shape, num_threads=3)
        assert root.kind == "partial_collective", tr.summary()
        assert root.source.line == alloc and root.branch is not None, tr.summary()
        assert root.branch.line == branch and "lax.switch" in root.branch.code
        assert "hoist it out of the thread-dependent branch (`lax.switch` on the thread " \
               "index)" in root.suggestion, root.suggestion
        assert missing in root.message, root.message
        seen.add((root.message, root.suggestion, root.branch.line))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("shape", ["no_grid", "grid3"])
def test_a_case_list_from_another_function_is_found_through_the_call(shape):
    tr, root = single_error_root(unfound_cases, shape, num_threads=3)
    assert root.kind == "partial_collective" and root.branch is not None, tr.summary()
    assert root.source.line == sh.marked_line(_cases_from_elsewhere, "ALLOC")
    assert root.branch.line == sh.marked_line(unfound_cases, "BRANCH")
    assert "(`lax.switch` on the thread index)" in root.suggestion, root.suggestion


def test_advice_for_a_branch_not_found_names_no_one_construct():
    src = SourceLocation(file="k.py", line=3, function="body")
    assert src.branch is None
    hint = partial_hint(src)
    assert "branch (a `pl.when`, `lax.cond` or `lax.switch` on the thread index)" in hint
    assert "(`pl.when` on the thread index)" not in hint


def test_a_name_bound_to_a_helper_s_result_is_not_the_helper(tmp_path):
    # `r = helper(1); jnp.sum(r)` passes what helper returns, not helper: the search for
    # names bound to a case list took it for a use of helper, and gave the helper's lines
    # the branch its caller sits in
    from pallas_viz import kernel_source

    src = tmp_path / "helper_mod.py"
    src.write_text(
        "import jax.numpy as jnp\n"
        "from jax.experimental import pallas as pl\n"
        "\n"
        "\n"
        "def kernel(t):\n"
        "    @pl.when(t == 0)\n"
        "    def _():\n"
        "        r = helper(1)\n"
        "        jnp.sum(r)\n"
        "\n"
        "\n"
        "def helper(x):\n"
        "    return x\n")
    assert kernel_source.enclosing_branch(str(src), "helper", 12) is None
