"""The compare view of a trace diff: per-cell statuses (trace_diff.GridStatus) on real
kernels, the widget's state and its notebook display, and the view drawing exactly those
statuses under Node."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess

import pytest

import pallas_viz as pv
from pallas_viz.examples import kernels as ex
from pallas_viz.examples.large import one_bad_block
from pallas_viz.render.compare_widget import (
    CompareWidget,
    compare_state,
    html_document,
    static_html,
)
from pallas_viz.trace_diff import CELL_STATUSES, diff

JS = pathlib.Path(__file__).resolve().parent.parent / "js"
EVIL = "</script><script>alert(1)</script><img src=x onerror=alert(2)>"


def _run(*builders):
    with pv.trace(raise_errors=False) as tr:
        for b, kw in builders:
            fn, args = b(**kw)
            fn(*args)
    return tr


@pytest.fixture(scope="module")
def traces():
    # barrier_in_branch fails at the kernel's end (a barrier left allocated): it runs last
    return {
        "bug": _run((ex.collective_in_branch, {"grid": (3,)}), (ex.barrier_in_branch, {})),
        "fix": _run((ex.hoisted_collective, {"grid": (3,)}), (ex.barrier_in_branch, {})),
        "one_bad": _run((one_bad_block, {"blocks": 8, "bad": 5})),
        "none_bad": _run((one_bad_block, {"blocks": 8, "bad": 99})),
    }


def _cells(g, status):
    return {(b, t) for _, b, t in g.cells_with(status)}


ALL = {((b,), t) for b in range(3) for t in range(2)}


def test_tutorial_fix_marks_every_cell_of_the_root_fixed(traces):
    d = diff(traces["bug"], traces["fix"])
    k0, k1 = d.kernels
    assert [f.kind for f in k0.fixed] == ["partial_collective"] and len(k1.still) == 1
    for side in ("before", "after"):
        g = k0.cell_status[side]
        assert g.rows == [(0, (0,)), (0, (1,)), (0, (2,))] and g.threads == 2
        assert _cells(g, "fixed") == ALL, side  # was an error cell before, clean after
        assert g.counts() == {"clean": 0, "fixed": 6, "still": 0, "new": 0}
        assert all(ids == [0] for row in g.roots for ids in row)
        assert k0.roots()[0] == ("fixed", k0.fixed[0])
        # the barrier root is there on both sides, in both threads of its block
        h = k1.cell_status[side]
        assert _cells(h, "still") == {((0,), 0), ((0,), 1)}
        assert h.status_of(0, (0,), 1) == "still"
    assert [g.side for g in d.cells()] == ["before", "after", "before", "after"]


def test_reverting_the_fix_makes_new_cells_after_only(traces):
    d = diff(traces["fix"], traces["bug"])
    before, after = d.kernels[0].cell_status["before"], d.kernels[0].cell_status["after"]
    assert _cells(before, "clean") == ALL
    assert _cells(after, "new") == ALL
    assert d.kernels[0].roots() == [("new", d.new[0])]


def test_only_the_bad_block_is_fixed(traces):
    d = diff(traces["one_bad"], traces["none_bad"])
    (k,) = d.kernels
    assert len(k.fixed) == 1 and not k.still and not k.new
    for side in ("before", "after"):
        g = k.cell_status[side]
        assert len(g.rows) == 8
        assert {b for b, _ in _cells(g, "fixed")} == {(5,)}, side
        assert g.count("clean") == 16 - g.count("fixed")
    # the widget's rows: blocks (0..4) fold into one run, (6) and (7) are too few to fold
    runs = compare_state(d)["compare"]["kernels"][0]["sides"]["before"]["runs"]
    assert [(r["first"], r["last"], r["count"]) for r in runs] == [
        ("(0)", "(4)", 5), ("(5)", "(5)", 1), ("(6)", "(6)", 1), ("(7)", "(7)", 1)]
    assert runs[1]["cells"][0][0] == CELL_STATUSES.index("fixed")



def test_each_cell_carries_the_changes_of_its_allocation_sequence(traces):
    """Hoisting the collective: thread 0's buffer moved from the branch (line 60) to line
    77, thread 1 gained it; every block alike. The widget's cells carry exactly
    `KernelDiff.changes_at` and the kernel the texts, so a click can list them."""
    d = diff(traces["bug"], traces["fix"])
    k0 = d.kernels[0]
    by_thread = {t: k0.changes_at(0, (b,), t) for b in range(3) for t in range(2)}
    moved, added = (k0.allocations[by_thread[0][0]], k0.allocations[by_thread[1][0]])
    assert [len(by_thread[t]) for t in (0, 1)] == [1, 1]
    assert moved.change == "changed" and moved.fields == ("line",)
    assert (moved.before.source.line, moved.after.source.line) == (60, 77)
    assert added.change == "added" and added.after.source.line == 77
    assert moved.body().startswith("~ SMEM (8, 128) float32 moved from ")
    assert moved.body().endswith("kernels.py:77 (request #0)")
    assert added.body().startswith("+ SMEM (8, 128) float32 at ") and "kernels.py:77" in (
        added.body())
    assert k0.changes_at(0, (7,), 0) == [] and k0.changes_at(0, None, 0) == []
    state = compare_state(d)["compare"]["kernels"]
    assert [c["text"] for c in state[0]["changes"]] == [c.body() for c in k0.allocations]
    for side in ("before", "after"):
        runs = state[0]["sides"][side]["runs"]
        assert sum(r["count"] for r in runs) == 3  # the 3 blocks alike (may fold into one)
        assert all(r["cells"] == [[CELL_STATUSES.index("fixed"), [0], by_thread[t]]
                                  for t in range(2)] for r in runs)
    # the barrier kernel is the same on both sides: no cell has a change
    assert all(ch == [] for run in state[1]["sides"]["after"]["runs"]
               for _, _, ch in run["cells"])


def _f(kind, line, cells, kernel=0):
    src = pv.SourceLocation("k.py", line, 4, "body", f"x{line} = f()")
    return pv.Finding(kind=kind, severity="error", message="m", cells=list(cells), events=[],
                      source=src, kernel=kernel)


def _k(name="k"):
    return pv.KernelInfo(index=0, name=name, launch=None, num_devices=1,
                         threads_per_block=2, blocks_per_cluster=1)


def test_a_cell_gets_its_highest_status_and_fixed_only_where_nothing_is_left():
    a, b = _f("leak", 10, [(0, (0,), 0), (0, (0,), 1)]), _f("leak", 20, [(0, (1,), 0)])
    b2, c = _f("leak", 20, [(0, (1,), 0)]), _f("race", 30, [(0, (0,), 1), (0, (1,), 0)])
    d = diff(pv.Trace(kernels=[_k()], findings=[a, b]),
             pv.Trace(kernels=[_k()], findings=[b2, c]))
    (k,) = d.kernels
    assert [st for st, _ in k.roots()] == ["fixed", "still", "new"]
    before, after = k.cell_status["before"], k.cell_status["after"]
    assert before.status == [["fixed", "fixed"], ["still", "clean"]]
    # (0) t 1: fixed root gone but a new one there; (1) t 0: still and new -> new
    assert after.status == [["fixed", "new"], ["new", "clean"]]
    assert after.roots == [[[0], [2]], [[1, 2], []]]
    # a kernel on one side only has that side's grid
    d = diff(pv.Trace(kernels=[_k()], findings=[a]), pv.Trace())
    assert set(d.kernels[0].cell_status) == {"before"}
    assert _cells(d.kernels[0].cell_status["before"], "fixed") == {((0,), 0), ((0,), 1)}


def test_notebook_display_is_the_compare_widget_with_text_and_html(traces):
    d = diff(traces["bug"], traces["fix"])
    data, _meta = d._repr_mimebundle_()
    assert data["text/plain"] == d.summary()
    assert "application/vnd.jupyter.widget-view+json" in data
    assert "1 root cause fixed, 1 still, 0 new" in data["text/html"]
    # blocks (0..2) fold into one row: 2 fixed cells per side
    assert data["text/html"].count('data-status="fixed"') == 4
    assert "(0)..(2) ×3" in data["text/html"]
    assert data["text/html"].count('data-status="still"') == 4
    w = CompareWidget(d)
    assert w.data == json.loads(json.dumps(compare_state(d)))  # JSON only
    s = w.data["compare"]
    assert s["counts"] == {"fixed": 1, "still": 1, "new": 0, "new_errors": 0}
    assert s["kernels"][0]["roots"][0]["where"] == "kernels.py:60"
    assert s["kernels"][0]["sides"]["after"]["counts"]["fixed"] == 6


def _hostile():
    cell = [(0, (0,), 0)]
    loc = pv.SourceLocation("/k/evil" + EVIL + ".py", 3, 0, "body" + EVIL, "x = 1 # " + EVIL)
    f = pv.Finding("partial_collective", "error", "only " + EVIL, cell, [], loc, kernel=0)
    return diff(pv.Trace(kernels=[_k("k" + EVIL)], findings=[f]),
                pv.Trace(kernels=[_k("k" + EVIL)]))


def test_kernel_text_is_escaped_in_the_static_html_and_the_page():
    d = _hostile()
    text = static_html(d)
    assert EVIL not in text and "<img" not in text and "<script" not in text
    assert "&lt;/script&gt;" in text
    page = html_document(d)
    assert EVIL not in page and "<img src=x" not in page
    assert page.count("<script") == 2  # the JSON document and the bundle, nothing else


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
def test_the_view_draws_the_statuses_python_computed(traces):
    """js/views/compare.js under Node draws, per side, as many cells of each status as
    trace_diff computed (folded runs counted per block)."""
    for a, b in (("bug", "fix"), ("fix", "bug"), ("one_bad", "none_bad")):
        d = diff(traces[a], traces[b])
        script = ("import { installDom } from './tests/dom.js';"
                  "import { CompareView } from './views/compare.js';"
                  "installDom();"
                  "let s = ''; process.stdin.on('data', (c) => { s += c; });"
                  "process.stdin.on('end', () => { const v = new CompareView(JSON.parse(s));"
                  "console.log(JSON.stringify(v.drawnCounts())); });")
        r = subprocess.run(["node", "--input-type=module", "-e", script], cwd=JS,
                           input=json.dumps(compare_state(d)["compare"]), capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stderr[-2000:]
        drawn = json.loads(r.stdout)
        want: dict = {}
        for g in d.cells():
            for st, n in g.counts().items():
                if n:
                    want.setdefault(g.side, {}).setdefault(st, 0)
                    want[g.side][st] += n
        assert drawn == want, (a, b)
