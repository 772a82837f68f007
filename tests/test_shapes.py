"""Every buggy body in every launch shape: one root cause, at its line, with its branch.

Table-driven over `pallas_viz.examples.shapes`: each buggy body runs three times in
each launch shape the interpreter supports (thread interleaving varies from run to
run; the diagnosis must not), and the clean bodies must stay clean in every shape.
"""

from __future__ import annotations

import pytest

from pallas_viz.examples import shapes as sh

# Shapes whose threads can part: in "pallas_call" there is one thread per block (see
# `sh.SUPPORTED`); in "warp_mesh" the body runs per warp and every warpgroup makes the
# collective request once, so the warpgroups' sequences agree (nothing to report at
# the warpgroup level); "two_devices" needs its own process (below).
THREAD_SHAPES = [s for s in sh.SHAPES
                 if s not in ("pallas_call", "warp_mesh", "two_devices")]
RUNS = 3


def _diagnose(name: str, shape: str):
    fn, args = sh.launch(sh.BUGGY[name], shape)
    tr, _ = sh.run_traced(fn, args, timeout_s=10)
    return tr


@pytest.mark.parametrize("shape", THREAD_SHAPES)
@pytest.mark.parametrize("name", list(sh.BUGGY))
def test_one_root_at_the_line_with_its_branch(name, shape):
    seen = set()
    for _ in range(RUNS):
        tr = _diagnose(name, shape)
        errors = [f for f in tr.findings if f.severity == "error"]
        assert len(errors) == 1, tr.summary()
        (root,) = tr.findings
        assert root.kind == "partial_collective", tr.summary()
        assert root.source.line == sh.ALLOC_LINE[name]
        assert root.branch is not None and root.branch.line == sh.BRANCH_LINE[name]
        # advice for where the threads part: a loop's trip count, or a branch
        loop = name == "collective_in_loop"
        assert root.branch.kind == ("loop" if loop else "branch")
        assert ("trip count" in root.suggestion) is loop
        # (the branch named as the kernel wrote it: `pl.when`, or `lax.cond`)
        construct = "`lax.cond`" if name == "collective_in_cond" else "`pl.when`"
        assert (f"branch ({construct} on the thread index)" in root.suggestion) is not loop
        # the same root, line, branch and message on every run
        seen.add((root.kind, root.source.line, root.branch.line, root.message))
        text = tr.summary()
        assert "threads part here:" in text and "(0 analysed)" not in text
        assert f"{sh.THREAD_AXIS} " in root.message  # the kernel's own axis name ("w 1")
        # named after the body in every shape (core_map's was named after the harness)
        assert [k.name for k in tr.kernels] == [sh.BUGGY[name].__name__], tr.summary()
    assert len(seen) == 1, seen


@pytest.mark.parametrize("shape", THREAD_SHAPES + ["pallas_call"])
@pytest.mark.parametrize("name", list(sh.CLEAN))
def test_clean_bodies_stay_clean(name, shape):
    fn, args = sh.launch(sh.CLEAN[name], shape)
    tr, _ = sh.run_traced(fn, args, timeout_s=10)
    assert tr.findings == [], tr.summary()
    assert len(tr.events) > 0 and tr.unplaced_events() == 0
    assert "clean: no findings" in tr.summary()
    # (a body that requests nothing and waits on nothing has no line to be named by)
    body = None if name == "plain_copy" else sh.CLEAN[name].__name__
    assert [k.name for k in tr.kernels] == [body], tr.summary()


def test_no_grid_kernel_is_not_called_clean():
    """The first round's miss: 4 threads, no grid, one thread strands a collective buffer."""
    fn, args = sh.launch(sh.BUGGY["collective_in_branch"], "no_grid", num_threads=4)
    tr, _ = sh.run_traced(fn, args)
    (root,) = tr.findings
    assert {b for _, b, _ in root.cells} == {()}  # the kernel's one block
    assert "block (no grid)" in tr.summary()
    assert "clean" not in tr.summary()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["collective_in_branch", "barrier_in_branch"])
def test_two_devices(name):
    """Two devices through shard_map (own process: the device count is fixed at start)."""
    out = sh.run_isolated(name, "two_devices")
    assert out["findings"] == ["partial_collective"], out
