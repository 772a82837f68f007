"""`pallas_viz.trace_diff`: root causes fixed / still there / new, allocation rows, and
the `pallas-viz diff` command."""

from __future__ import annotations

import json

import pytest

import pallas_viz as pv
from pallas_viz import trace_diff as pvdiff
from pallas_viz.cli import main as cli
from pallas_viz.examples import kernels as ex
from pallas_viz.trace_diff import diff


def _run(builder, **kw):
    fn, args = builder(**kw)
    with pv.trace(raise_errors=False) as tr:
        fn(*args)
    return tr


@pytest.fixture(scope="module")
def traces():
    return {
        "bug": _run(ex.collective_in_branch),
        "fix": _run(ex.hoisted_collective),
        "bug3": _run(ex.collective_in_branch, grid=(3,)),
        "clean": _run(ex.clean_collective),
    }


@pytest.fixture(scope="module")
def files(traces, tmp_path_factory):
    d = tmp_path_factory.mktemp("diff")
    out = {}
    for name in ("bug", "fix"):
        out[name] = d / f"{name}.json"
        traces[name].save(out[name])
    return out


def test_quickstart_fix_fixes_one_root_cause(traces):
    d = diff(traces["bug"], traces["fix"])
    assert d.summary().splitlines()[0] == (
        "kernel collective_in_branch -> hoisted_collective (paired by order: the names "
        "differ): 1 root cause fixed, 0 still there, 0 new")
    assert [f.kind for f in d.fixed] == ["partial_collective"]
    assert d.still == [] and d.new == [] and d.new_errors == []
    assert not d.empty and d
    (k,) = d.kernels
    assert (k.index_before, k.index_after, k.status) == (0, 0, "both")
    assert k.peak_memory is None  # hook point: not computed yet
    # thread 0 allocates the same buffer on another line, thread 1 now allocates it too
    by_change = {c.change: c for c in k.allocations}
    assert sorted(by_change) == ["added", "changed"]
    changed, added = by_change["changed"], by_change["added"]
    assert changed.fields == ("line",)
    assert changed.before.source.line != changed.after.source.line
    assert {(b, t) for _, b, t, _ in changed.cells} == {((0,), 0), ((1,), 0)}
    assert {(b, t) for _, b, t, _ in added.cells} == {((0,), 1), ((1,), 1)}
    assert (added.after.memory_space, added.after.shape, added.after.dtype) == (
        "SMEM", (8, 128), "float32")
    assert added.after.source == changed.after.source
    text = d.summary()
    assert "fixed: error[partial_collective]" in text
    assert "blocks (0..1), t 1: + SMEM (8, 128) float32 at" in text  # the kernel's axis name
    assert "1 root cause fixed, 0 still there, 0 new (no new error)" in text.splitlines()[-1]


def test_reverting_the_fix_is_a_new_error(traces):
    d = diff(traces["fix"], traces["bug"])
    assert d.summary().splitlines()[0].endswith("0 root causes fixed, 0 still there, 1 new")
    assert [f.kind for f in d.new_errors] == ["partial_collective"]
    assert {c.change for c in d.allocations} == {"removed", "changed"}


def test_a_trace_against_itself_is_empty(traces):
    for t in traces.values():
        d = diff(t, t)
        assert d.empty and not d
        assert d.fixed == [] and d.new == [] and d.allocations == []
        assert len(d.still) == len(t.findings)
    text = diff(traces["bug"], traces["bug"]).summary()
    assert "kernel collective_in_branch: 0 root causes fixed, 1 still there, 0 new" in text
    assert "same sequences in every block and thread" in text
    assert text.splitlines()[-1].startswith("pallas_viz diff: no change")


def test_added_and_removed_allocation_rows(traces):
    # one more block: its thread 0 makes one more allocation; the root cause stays
    d = diff(traces["bug"], traces["bug3"])
    (change,) = d.allocations
    assert change.change == "added" and change.before is None
    assert [(b, t) for _, b, t, _ in change.cells] == [((2,), 0)]
    assert change.position_after == 0
    assert len(d.still) == 1 and d.fixed == [] and d.new == []
    back = diff(traces["bug3"], traces["bug"])
    (change,) = back.allocations
    assert change.change == "removed" and change.after is None
    assert "block (2), t 0: - SMEM (8, 128) float32 at" in back.summary()

    # clean_collective allocates a buffer and a barrier per thread; the fix only a buffer
    d = diff(traces["clean"], traces["fix"])
    removed = [c for c in d.allocations if c.change == "removed"]
    assert removed and all(c.before.resource == "barrier" for c in removed)
    cells = {(b, t) for c in removed for _, b, t, _ in c.cells}
    assert cells == {((0,), 0), ((0,), 1), ((1,), 0), ((1,), 1)}


def test_cli_diff_exit_codes(files, tmp_path, capsys):
    """`pallas-viz diff A B`: 0, 1 when B has a new error root cause, 2 on a bad file."""
    assert cli(["diff", str(files["bug"]), str(files["fix"]), "--color", "never"]) == 0
    out = capsys.readouterr().out
    assert "1 root cause fixed, 0 still there, 0 new" in out
    assert cli(["diff", str(files["fix"]), str(files["bug"])]) == 1
    assert "1 new" in capsys.readouterr().out
    assert cli(["diff", str(files["bug"]), str(files["bug"]), "--color", "always"]) == 0
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "pallas_viz.trace", "version": 1')
    assert cli(["diff", str(files["bug"]), str(bad)]) == 2
    assert cli(["diff", str(tmp_path / "missing.json"), str(files["bug"])]) == 2
    err = capsys.readouterr().err
    assert "pallas-viz: " in err and "not valid JSON" in err
    # a file that parses but is not a trace, or is corrupt: the message names which one
    for i, text in enumerate(['[]', '{"format": "pallas_viz.trace", "version": 99}',
                              '{"format": "pallas_viz.trace", "version": 2, "kernels": 3}']):
        other = tmp_path / f"other{i}.json"
        other.write_text(text)
        assert cli(["diff", str(files["bug"]), str(other)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"pallas-viz: {other}: "), err


def test_color_summary(traces):
    text = diff(traces["fix"], traces["bug"]).summary(color=True)
    assert "\033[1;31m1 new\033[0m" in text


def test_save_load_round_trip_then_diff(traces, files):
    a, b = pv.load(files["bug"]), pv.load(files["fix"])
    assert diff(a, traces["bug"]).empty
    assert diff(a, b).to_dict() == diff(traces["bug"], traces["fix"]).to_dict()
    d = json.loads(json.dumps(diff(a, b).to_dict()))
    assert d["counts"] == {"fixed": 1, "still": 0, "new": 0, "new_errors": 0,
                           "allocation_changes": 2}
    assert d["kernels"][0]["before"]["name"] == "collective_in_branch"
    assert d["kernels"][0]["peak_memory"] is None


# -- pieces, on synthetic records (no kernel runs)


def _k(i, name):
    return pv.KernelInfo(index=i, name=name, launch=None, num_devices=1,
                         threads_per_block=2, blocks_per_cluster=1)


def test_kernel_pairing_by_name_then_index():
    before = [_k(0, "a"), _k(1, "b"), _k(2, "a")]
    after = [_k(0, "b"), _k(1, "a"), _k(2, "c"), _k(3, "d")]
    # a->1 (first a), b->0, the second a has no a left: index 2 -> c; d only after
    assert pvdiff._pair_kernels(before, after) == [(0, 1), (1, 0), (2, 2), (None, 3)]
    assert pvdiff._pair_kernels([_k(0, "a")], []) == [(0, None)]
    assert pvdiff._pair_kernels([], [_k(0, "a")]) == [(None, 0)]


def _f(kind, line, message="m", cells=(), code="x = f()", function="body", kernel=0):
    src = pv.SourceLocation("k.py", line, 4, function, code)
    return pv.Finding(kind=kind, severity="error", message=message, cells=list(cells),
                      events=[], source=src, kernel=kernel)


def test_root_identity_ignores_message_and_cells():
    a = [_f("partial_collective", 10, "old words", [(0, (0,), 0)])]
    b = [_f("partial_collective", 10, "new words", [(0, (1,), 1)])]
    fixed, still, new = pvdiff._match_roots(a, b)
    assert (fixed, new) == ([], []) and still == [(a[0], b[0])]
    fixed, still, new = pvdiff._match_roots(a, [_f("leak", 10)])
    assert len(fixed) == 1 and len(new) == 1 and still == []
    # the same line and code text in another function: the function (a kernel) was renamed
    # (review P: a renamed kernel's unchanged bug read "1 fixed, 1 new", exit 1)
    b = [_f("partial_collective", 10, function="g")]
    fixed, still, new = pvdiff._match_roots(a, b)
    assert (fixed, new) == ([], []) and still == [(a[0], b[0])]
    kd = pvdiff.KernelDiff(0, 0, "f", "g", still=still)
    assert "moved" not in pvdiff.TraceDiff([kd]).summary()
    b = [_f("partial_collective", 12, function="g")]  # renamed, and an edit above it
    assert pvdiff._match_roots(a, b)[1] == [(a[0], b[0])]
    fixed, still, new = pvdiff._match_roots(
        a, [_f("partial_collective", 10, function="g", code="y()")])
    assert len(fixed) == 1 and len(new) == 1


def test_a_root_moved_by_an_edit_is_still_there():
    a, b = _f("partial_collective", 10), _f("partial_collective", 14)
    fixed, still, new = pvdiff._match_roots([a], [b])
    assert still == [(a, b)] and fixed == [] and new == []
    kd = pvdiff.KernelDiff(0, 0, "k", "k", still=[(a, b)])
    assert kd.changed  # the line moved
    text = pvdiff.TraceDiff([kd]).summary()
    assert "(moved from line 10 to 14)" in text
    # another code text on another line is another root cause
    fixed, still, new = pvdiff._match_roots([a], [_f("partial_collective", 14, code="y()")])
    assert len(fixed) == 1 and len(new) == 1


def test_the_fixed_count_says_which_kernels_no_longer_run():
    # (review P: a kernel only before counted its root causes as fixed, unqualified)
    before = pv.Trace(kernels=[_k(0, "a"), _k(1, "b")],
                      findings=[_f("partial_collective", 10), _f("leak", 20, kernel=1)])
    after = pv.Trace(kernels=[_k(0, "a")], findings=[])
    text = diff(before, after).summary()
    assert ("pallas_viz diff: 2 root causes fixed (1 of them in kernel(s) that run only "
            "before), 0 still there, 0 new") in text, text


def test_findings_outside_any_kernel_and_kernels_on_one_side():
    rejected = _f("trace_error", 5, kernel=None)
    before = pv.Trace(kernels=[_k(0, "a")], findings=[_f("partial_collective", 10)])
    after = pv.Trace(kernels=[], findings=[rejected])
    d = diff(before, after)
    assert [k.status for k in d.kernels] == ["removed", "outside"]
    assert d.new_errors == [rejected]
    text = d.summary()
    assert "kernel a (runs only before): 1 root cause fixed" in text
    assert "outside any kernel run: 0 root causes fixed, 0 still there, 1 new" in text
    assert diff(pv.Trace(), pv.Trace()).summary() == (
        "pallas_viz diff: no Pallas kernel ran in either trace")


def test_one_line_form():
    f = _f("leak", 3)
    assert f.one_line() == "error[leak] k.py:3:5: m"
    assert pv.Finding("race", "warning", "r", [], []).one_line() == "warning[race] ?: r"


def test_blocks_a_stopped_run_never_reached_are_not_compared():
    # before: fails in block (0) of 3 (blocks (1) and (2) never ran); after: runs all three
    before = _run(ex.mismatched_collective_shapes, grid=(3,))
    after = _run(ex.clean_collective, grid=(3,))
    assert before.failure is not None and after.failure is None
    d = diff(before, after)
    (k,) = d.kernels
    assert k.not_run == {"before": [(0, (1,)), (0, (2,))]}
    assert all(b == (0,) for ch in k.allocations for _, b, _, _ in ch.cells)
    # (it may have no such block: a trace does not record its grid, review W)
    assert ("not compared: block(s) (1), (2), which the before run did not run (it stopped "
            "early, or has no such block)") in d.summary()
    assert d.to_dict()["kernels"][0]["not_run"] == {
        "before": [{"device": 0, "block": [1]}, {"device": 0, "block": [2]}]}
    # the other way round: the after run stopped
    (k,) = diff(after, before).kernels
    assert k.not_run == {"after": [(0, (1,)), (0, (2,))]}
    # two runs that both ended compare every block
    (k,) = diff(after, after).kernels
    assert k.not_run == {}


def test_alike_changes_in_a_row_are_one_line():
    # a `plgpu.Barrier(num_barriers=4)` is four barrier requests from one line
    src = pv.SourceLocation("k.py", 60, 4, "body", "pl.run_scoped(...)")
    bar = pvdiff.Allocation("barrier", None, None, None, src)
    buf = pvdiff.Allocation("buffer", "SMEM", (8, 128), "float32", src)
    cells = [(0, (0,), 0, None)]
    changes = ([pvdiff.AllocationChange("added", None, buf, None, 0, (), cells)]
               + [pvdiff.AllocationChange("added", None, bar, None, p, (), cells)
                  for p in range(1, 5)]
               + [pvdiff.AllocationChange("added", None, bar, None, 7, (), cells)])
    runs = pvdiff._runs(changes)
    assert [(ch.position_after, n) for ch, n in runs] == [(0, 1), (1, 4), (7, 1)]
    first, n = runs[1]
    assert first.describe("w", n) == "block (0), w 0: + 4 x barrier at k.py:60 (requests #1..#4)"
    assert runs[2][0].describe("w") == "block (0), w 0: + barrier at k.py:60 (request #7)"


def test_the_diff_summary_keeps_a_trace_files_escape_sequences_inert(files, tmp_path):
    d = json.loads(files["bug"].read_text())
    d["kernels"][0]["name"] = "k\x1b[8m\x1b]0;PWNED\x07"
    for s in d["events"]["sources"]:
        s["file"] += "\x1b[5m"
    d["events"]["dtypes"] = [t + "\x1b[30;40m" for t in d["events"]["dtypes"]]
    evil = tmp_path / "evil.json"
    evil.write_text(json.dumps(d))
    after = pv.load(evil)
    plain = diff(pv.load(files["fix"]), after).summary(color=False)
    assert "\x1b" not in plain and "\x07" not in plain
    assert "\\x1b[8m" in plain  # shown, escaped
    colored = diff(pv.load(files["fix"]), after).summary(color=True)
    for raw in ("\x1b[8m", "\x1b[5m", "\x1b[30;40m", "\x1b]0;", "\x07"):
        assert raw not in colored
    assert "\x1b[1;31m" in colored  # its own colours are kept


def _copy_kernel(rows: int):
    """A kernel that allocates nothing itself: its only requests are its operands."""
    import jax
    import jax.numpy as jnp
    from jax.experimental.pallas import mosaic_gpu as plgpu

    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    k = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((rows, 128), jnp.float32),
                     num_threads=2, thread_name="t", interpret=plgpu.InterpretGPUParams())
    return k, (jnp.ones((rows, 128), jnp.float32),)


def test_changed_operand_shapes_read_as_operands():
    # every warp joins the kernel's operands, which have no line: no "at ?", no warp range
    d = diff(_run(lambda: _copy_kernel(8)), _run(lambda: _copy_kernel(16)))
    (line,) = [ln for ln in d.summary().splitlines() if "~" in ln]
    assert line.strip() == ("kernel operands: ~ 2 x GMEM (8, 128) float32 -> GMEM (16, 128) "
                            "float32 (shape changed) (operands #0..#1)")


def test_a_warning_that_became_an_error_is_a_new_error(tmp_path, capsys):
    # The SMEM peak near the limit (a warning) and over it (an error) are one root at one
    # line: "still there", but an error now, so `pallas-viz diff` must fail (review W).
    from pallas_viz.examples import budget

    near, over = _run(budget.smem_at_budget), _run(budget.smem_over_budget)
    (a,), (b,) = near.findings, over.findings
    assert (a.kind, a.severity, b.kind, b.severity) == (
        "smem_over_budget", "warning", "smem_over_budget", "error")
    d = diff(near, over)
    assert [f.severity for f in d.new_errors] == ["error"] and not d.empty
    text = d.summary()
    assert "(now an error: it was a warning)" in text and "1 new error(s)" in text, text
    paths = [tmp_path / "near.json", tmp_path / "over.json"]
    near.save(paths[0])
    over.save(paths[1])
    assert cli(["diff", str(paths[0]), str(paths[1]), "--color", "never"]) == 1
    capsys.readouterr()
    # the other way round it is no new error, and still a change
    back = diff(over, near)
    assert back.new_errors == [] and not back.empty
    assert "(now a warning: it was an error)" in back.summary()
    assert cli(["diff", str(paths[1]), str(paths[0]), "--color", "never"]) == 0


def test_diff_takes_traces_or_their_paths(traces, files):
    by_path = pv.diff(str(files["bug"]), files["fix"])  # a str and a pathlib.Path
    assert by_path.summary() == pv.diff(pv.load(files["bug"]), pv.load(files["fix"])).summary()
    assert len(by_path.fixed) == 1
    with pytest.raises(TypeError, match=r"pv\.diff\(after=\.\.\.\) takes a pv\.Trace or the "
                                        r"path of a saved trace, not dict"):
        pv.diff(traces["bug"], {"kernels": []})


def _runs(*builders):
    """One trace of the kernels of `builders`, run in order until one fails (a failure
    ends the block, as a raised error ends a script)."""
    with pv.trace(raise_errors=False) as tr:
        for builder in builders:
            fn, args = builder()
            fn(*args).block_until_ready()
    return tr


def test_a_kernel_the_stopped_run_never_reached_is_not_fixed():
    # after: the first kernel fails and the run ends there, so the before run's second
    # kernel was never run after: not compared, not "fixed" (review W)
    before = _runs(ex.hoisted_collective, ex.collective_in_branch)
    after = _runs(ex.aliased_after_branch, ex.collective_in_branch)
    assert len(after.kernels) == 1 and 0 in after.failed_kernels()
    d = diff(before, after)
    (k,) = [k for k in d.kernels if k.index_after is None]
    assert k.unreached == ("after", 0) and k.fixed == [] and len(k.unreached_roots) == 1
    assert d.fixed == []
    text = d.summary()
    assert ("kernel collective_in_branch (not compared: the after run stopped at kernel #0, "
            "which failed, before it): 0 root causes fixed, 0 still there, 0 new") in text, text
    assert "  not compared: error[partial_collective]" in text
    assert k.to_dict()["unreached"]["side"] == "after"
    # the other way round: the before run stopped first
    back = diff(after, before)
    (k,) = [k for k in back.kernels if k.index_before is None]
    assert k.unreached == ("before", 0) and k.new == [] and back.new_errors == []


def test_one_run_more_of_a_kernel_is_no_new_error():
    # the same buggy kernel run once, then twice: its root is still there, in both runs
    # of the after trace; none new, none fixed (review W: it was "1 new error", exit 1)
    once, twice = _runs(ex.collective_in_branch), _runs(ex.collective_in_branch,
                                                        ex.collective_in_branch)
    d = diff(once, twice)
    assert (len(d.fixed), len(d.still), len(d.new), d.new_errors) == (0, 2, 0, [])
    assert "runs only after" in d.summary() and not d.empty
    back = diff(twice, once)
    assert (len(back.fixed), len(back.still), len(back.new)) == (0, 2, 0)


RENAMED = '''
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu


def NAME(x_ref, o_ref):
    t = jax.lax.axis_index("t")
    EDIT
    @pl.when(t == 0)
    def _():
        def scoped(buf):
            buf[...] = x_ref[...]
            o_ref[...] = buf[...]
        pl.run_scoped(scoped, plgpu.SMEM((8, 128), jnp.float32), collective_axes="t")


def run():
    f = plgpu.kernel(NAME, out_type=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                     num_threads=2, thread_name="t", interpret=plgpu.InterpretGPUParams())
    return f(jnp.ones((8, 128), jnp.float32)).block_until_ready()
'''


@pytest.mark.parametrize("edit", ["", "u = t + 1"])
def test_a_renamed_kernel_keeps_its_root_cause(tmp_path, edit):
    # (review P: renaming the kernel function, nothing else changed, read "1 root cause
    # fixed, 1 new" and `pallas-viz diff` exited 1)
    import importlib.util

    path = tmp_path / "ren.py"
    traces = []
    for i, (name, body_edit) in enumerate((("old_name", ""), ("new_name", edit))):
        path.write_text(RENAMED.replace("NAME", name).replace("EDIT", body_edit or "pass"))
        spec = importlib.util.spec_from_file_location(f"ren_{i}_{len(edit)}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        with pv.trace(raise_errors=False) as tr:
            mod.run()
        traces.append(tr)
    assert [k.name for k in (traces[0].kernels[0], traces[1].kernels[0])] == [
        "old_name", "new_name"]
    d = diff(*traces)
    assert (len(d.fixed), len(d.still), len(d.new)) == (0, 1, 0), d.summary()
    assert not d.new_errors
    for i, tr in enumerate(traces):
        tr.save(tmp_path / f"{i}.json")
    assert cli(["diff", "--color", "never", str(tmp_path / "0.json"),
                str(tmp_path / "1.json")]) == 0
