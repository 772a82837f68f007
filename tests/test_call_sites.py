"""A line in a helper function names the call that led to it (`SourceLocation.via`).

JAX's traceback for a request ends at the function it traced (the kernel body, a branch,
a warp-level body); when the request's line is in a helper that function called, the
location keeps that call. A warp-level allocation made by a helper is the helper's
scope, reached through the call inside the `plgpu.WarpMesh` `core_map`: the root points
at the scope and names the call, and the advice is about the call.
"""

from __future__ import annotations

import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import two_devices_roots
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from roots_util import single_error_root

import pallas_viz as pv
from pallas_viz.errors import TraceFileError
from pallas_viz.examples import shapes as sh
from pallas_viz.render import payload
from pallas_viz.render.payload import build_state

RUNS = 4


def _fill(ctx, x_ref, o_ref):
    """A helper that opens a warpgroup-collective scope (wrong inside warp-level code)."""

    def scoped(buf):
        buf[...] = x_ref[...] + 1.0
        sh.store_block_rows(ctx, o_ref, buf[...])

    pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32),  # HELPER
                  collective_axes=ctx.axis)


def helper_in_warp_code(ctx, x_ref, o_ref):
    @pl.core_map(plgpu.WarpMesh(axis_name="warp"))
    def _():
        _fill(ctx, x_ref, o_ref)  # CALL


HELPER = sh.marked_line(_fill, "HELPER")
CALL = sh.marked_line(helper_in_warp_code, "CALL")


@pytest.mark.filterwarnings("ignore:jax.experimental.pallas.core_map is deprecated")
@pytest.mark.parametrize("shape", ["no_grid", "grid3", "cluster2"])
def test_a_helper_allocating_in_warp_code_names_its_call(shape):
    def run():
        tr, root = single_error_root(helper_in_warp_code, shape)
        assert root.kind == "warp_allocation" and root.source.line == HELPER, tr.summary()
        via = root.source.via
        assert via is not None and via.line == CALL and via.file == __file__, root.source
        assert "_fill(ctx, x_ref, o_ref)" in via.code
        assert (f"this scope is opened by a helper called at line {CALL}, inside the "
                "`plgpu.WarpMesh` `core_map`: move that call out of the `plgpu.WarpMesh` "
                "`core_map`, or open the scope there and pass its ref in") in root.suggestion, \
            root.suggestion
        assert re.search(rf"  = called from: \S*test_call_sites\.py:{CALL}:\d+ in "
                         rf"helper_in_warp_code\.<locals>\._  `_fill\(ctx, x_ref, o_ref\)",
                         tr.summary()), tr.summary()
        return root

    _same_every_run(run, RUNS)


def _same_every_run(run, runs=RUNS + 2) -> tuple:
    """`run()`'s root (line, call, message, advice), the same on each of `runs` runs."""
    seen = set()
    for _ in range(runs):
        root = run()
        seen.add((root.source.line, root.source.via.line, root.message, root.suggestion))
    assert len(seen) == 1, seen
    return seen.pop()


@pytest.mark.slow
def test_a_helper_allocating_in_warp_code_on_two_devices():
    kind, line, message = two_devices_roots.one_root(
        "test_call_sites", "helper_in_warp_code", 2, RUNS)
    assert kind == "warp_allocation" and line == HELPER, message


def _scratch(x_ref, o_ref):
    """A helper opening a collective scope every thread makes (clean: one writes)."""

    def scoped(buf):
        @pl.when(jax.lax.axis_index("wg") == 1)
        def _():
            buf[...] = x_ref[...] * 2.0
            o_ref[...] = buf[...]

    pl.run_scoped(scoped, plgpu.SMEM(sh.SHAPE, jnp.float32), collective_axes="wg")  # SCRATCH


def twice(x_ref, o_ref):
    _scratch(x_ref, o_ref)  # FIRST
    _scratch(x_ref, o_ref)  # SECOND


def once(x_ref, o_ref):
    _scratch(x_ref, o_ref)  # ONLY


def direct(x_ref, o_ref):
    """A kernel body that opens its scope itself."""

    def scoped(buf):
        @pl.when(jax.lax.axis_index("wg") == 1)
        def _():
            buf[...] = x_ref[...] * 2.0
            o_ref[...] = buf[...]

    pl.run_scoped(scoped, plgpu.SMEM(sh.SHAPE, jnp.float32), collective_axes="wg")  # OWN


def _run_clean(body, **mesh):
    kernel = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(sh.SHAPE, jnp.float32),
                          num_threads=2, thread_name="wg",
                          interpret=plgpu.InterpretGPUParams(), **mesh)
    tr, _ = sh.run_traced(kernel, (jnp.ones(sh.SHAPE, jnp.float32),))
    assert tr.findings == [] and tr.failure is None, tr.summary()
    return tr


def _calls_at(tr, body, mark) -> list:
    """The line of the call each event at `body`'s line `mark` came through (None: none),
    in record order; the table's line itself names no call."""
    line = sh.marked_line(body, mark)
    (idx,) = [i for i, s in enumerate(tr.events.sources) if s.line == line and s.file == __file__]
    assert tr.events.sources[idx].via is None
    rows = np.flatnonzero(tr.events.columns["source"] == idx).tolist()
    assert rows
    return [getattr(tr.events.source_of(r).via, "line", None) for r in rows]


MESHES = [{}, {"grid": (3,), "grid_names": ("g",)}]


@pytest.mark.parametrize("mesh", MESHES, ids=["no_grid", "grid3"])
def test_each_request_names_the_call_it_came_through(mesh):
    # the kernel body calls the helper twice: one line, two calls, each request its own
    tr = _run_clean(twice, **mesh)
    first, second = sh.marked_line(twice, "FIRST"), sh.marked_line(twice, "SECOND")
    assert set(_calls_at(tr, _scratch, "SCRATCH")) == {first, second}
    for cell in {(e.block, e.thread) for e in tr.events if e.block is not None}:
        calls = [e.source.via.line for e in tr.events if (e.block, e.thread) == cell
                 and e.op in ("create", "join")]
        assert calls == [first, second], (cell, calls)  # in each thread's order
    tr = _run_clean(once, **mesh)
    assert set(_calls_at(tr, _scratch, "SCRATCH")) == {sh.marked_line(once, "ONLY")}
    via = next(e.source.via for e in tr.events if e.source is not None)
    assert via.function == "once" and via.code.strip().startswith("_scratch(x_ref, o_ref)")


@pytest.mark.parametrize("mesh", MESHES, ids=["no_grid", "grid3"])
def test_a_line_in_the_traced_function_itself_names_no_call(mesh):
    tr = _run_clean(direct, **mesh)
    assert set(_calls_at(tr, direct, "OWN")) == {None}
    assert "called from" not in tr.summary()


def test_a_body_the_example_harness_launches_is_the_kernel_body():
    # `examples.shapes.launch` calls the body from its own kernel function: not the
    # user's call (before, the advice said to move that call of the harness)
    for _ in range(2):
        tr, root = single_error_root(sh.CLEAN["hoisted_collective"], "warp_mesh")
        assert root.kind == "warp_allocation" and root.source.via is None, root.source
        assert "move the `pl.run_scoped`" in root.suggestion
        # (an interpreter error inside one of the harness's `Ctx` helpers names the
        # body's call of it: that is the body's line)
        assert all(e.source is None or e.source.via is None for e in tr.events
                   if e.op != "error")


def shared_helper(x_ref, o_ref):
    """Opens a warpgroup-collective scope: right at warpgroup level, wrong in warp code."""

    def scoped(buf):
        buf[...] = x_ref[...] + 1.0
        o_ref[...] = buf[...]

    pl.run_scoped(scoped, plgpu.SMEM(sh.SHAPE, jnp.float32), collective_axes="wg")  # SHARED


def warpgroup_caller(x_ref, o_ref):
    shared_helper(x_ref, o_ref)  # AT_WARPGROUP


def warp_caller(x_ref, o_ref):
    @pl.core_map(plgpu.WarpMesh(axis_name="warp"))
    def _():
        shared_helper(x_ref, o_ref)  # IN_WARPS


def both_levels(x_ref, o_ref):
    shared_helper(x_ref, o_ref)  # BOTH_WARPGROUP

    @pl.core_map(plgpu.WarpMesh(axis_name="warp"))
    def _():
        shared_helper(x_ref, o_ref)  # BOTH_WARPS


def twice_in_warps(x_ref, o_ref):
    @pl.core_map(plgpu.WarpMesh(axis_name="warp"))
    def _():
        shared_helper(x_ref, o_ref)  # WARPS_FIRST
        shared_helper(x_ref, o_ref)  # WARPS_SECOND


def _kernel(body, **mesh):
    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(sh.SHAPE, jnp.float32),
                        num_threads=2, thread_name="wg",
                        interpret=plgpu.InterpretGPUParams(), **mesh)


def _warp_root(tr):
    (root,) = [f for f in tr.findings if f.severity == "error"]
    assert root.kind == "warp_allocation", tr.summary()
    assert root.source.line == sh.marked_line(shared_helper, "SHARED"), root.source
    return root


@pytest.mark.filterwarnings("ignore:jax.experimental.pallas.core_map is deprecated")
@pytest.mark.parametrize("mesh", MESHES, ids=["no_grid", "grid3"])
def test_a_clean_kernel_in_the_same_trace_leaves_the_warp_root_its_call(mesh):
    # the same helper, called by a clean kernel and, wrongly, in another kernel's warp
    # code, in one trace: the warp root still names its own call (review G: it lost it)
    x = jnp.ones(sh.SHAPE, jnp.float32)

    def run():
        sh.drain_effects()
        with pv.trace(raise_errors=False, timeout_s=10) as tr:
            jax.block_until_ready(_kernel(warpgroup_caller, **mesh)(x))
            jax.block_until_ready(_kernel(warp_caller, **mesh)(x))
        assert [f.kernel for f in tr.findings] == [1], tr.summary()
        assert _calls_at(tr, shared_helper, "SHARED").count(
            sh.marked_line(warpgroup_caller, "AT_WARPGROUP")) >= 2
        return _warp_root(tr)

    line, via, _, hint = _same_every_run(run)
    assert via == sh.marked_line(warp_caller, "IN_WARPS")
    assert f"opened by a helper called at line {via}," in hint


@pytest.mark.filterwarnings("ignore:jax.experimental.pallas.core_map is deprecated")
@pytest.mark.parametrize("mesh", MESHES, ids=["no_grid", "grid3"])
@pytest.mark.parametrize("body,mark", [(twice_in_warps, "WARPS_FIRST"),
                                       (both_levels, "BOTH_WARPS")],
                         ids=["twice_in_warps", "both_levels"])
def test_the_warp_root_names_the_call_its_first_request_came_through(mesh, body, mark):
    # warp code calls the helper twice (whether a failing run recorded the second call
    # varied, and the root's call and advice with it: review G), or the kernel calls it
    # at warpgroup level, rightly, then in its warp code: the call the warp requests came
    # through, on every run
    x = jnp.ones(sh.SHAPE, jnp.float32)

    def run():
        tr, _ = sh.run_traced(_kernel(body, **mesh), (x,))
        return _warp_root(tr)

    _, via, _, hint = _same_every_run(run)
    assert via == sh.marked_line(body, mark)
    assert f"opened by a helper called at line {via}," in hint


def big_helper(x_ref, o_ref):
    def scoped(buf):
        o_ref[...] = x_ref[...]

    pl.run_scoped(scoped, plgpu.SMEM((256, 1024), jnp.float32), collective_axes="wg")  # BIG


def over_budget(x_ref, o_ref):
    big_helper(x_ref, o_ref)  # BIG_CALL


def test_other_findings_and_the_event_panel_name_the_call():
    # a finding made from a row's line (the SMEM budget) names its call too (review G2:
    # it lost it when the calls moved to the events), and so do the widget's and the
    # HTML page's event lines: one per line and call
    tr = sh.run_traced(_kernel(over_budget), (jnp.ones(sh.SHAPE, jnp.float32),))[0]
    (f,) = [f for f in tr.findings if f.kind == "smem_over_budget"]
    assert f.source.line == sh.marked_line(big_helper, "BIG"), tr.summary()
    assert f.source.via.line == sh.marked_line(over_budget, "BIG_CALL")
    assert "= called from: " in tr.summary()

    tr = _run_clean(twice)
    index, lines = tr.events.lines_with_calls()
    first, second = sh.marked_line(twice, "FIRST"), sh.marked_line(twice, "SECOND")
    at = sh.marked_line(_scratch, "SCRATCH")
    assert sorted(loc.via.line for loc in lines if loc.line == at) == [first, second]
    for r in range(len(tr.events)):
        src = tr.events.source_of(r)
        assert (index[r] < 0) == (src is None)
        if src is not None:
            assert lines[index[r]] == src and lines[index[r]].via == src.via
    shown = payload.string_tables(tr)["sources"]
    reply = payload.event_rows(tr, range(len(tr.events)))
    for row in reply["rows"]:
        if row[-1] >= 0:
            got = reply["sources"][str(row[-1])]
            assert got == shown[row[-1]]
            want = tr.events.source_of(row[0])
            assert (got["line"], got["via"]["line"] if "via" in got else None) == (
                want.line, want.via.line if want.via else None)


def test_the_call_is_saved_and_checked(tmp_path):
    tr, root = single_error_root(helper_in_warp_code, "no_grid")
    path = tmp_path / "t.json"
    tr.save(path)
    back = pv.load(path)
    (again,) = [f for f in back.findings if f.severity == "error"]
    assert again.source.via == root.source.via and again.source.via.line == CALL
    assert again.suggestion == root.suggestion
    assert back.events.vias.tolist() == tr.events.vias.tolist()
    # the widget's payload carries it with the finding's line
    (shown,) = [f["source"] for f in build_state(back)["meta"]["findings"]
                if f["severity"] == "error"]
    assert shown["via"]["line"] == CALL and shown["via"]["label"].endswith(f":{CALL}"), shown

    good = json.loads(path.read_text())
    for change, where in [
            (lambda e: e["calls"][0].update(file=3), r"events\.calls\[0\]\.file"),
            (lambda e: e["vias"].__setitem__(0, len(e["calls"])), r"events\.vias"),
            (lambda e: e["vias"].pop(), r"events\.vias"),
            (lambda e: e.pop("calls"), r"events.*calls")]:
        d = json.loads(json.dumps(good))
        change(d["events"])
        path.write_text(json.dumps(d))
        with pytest.raises(TraceFileError, match=where):
            pv.load(path)
    d = json.loads(json.dumps(good))  # a boolean is no index (numpy reads it as 1 or 0)
    d["events"]["vias"][0] = False
    path.write_text(json.dumps(d))
    with pytest.raises(TraceFileError, match=r"events\.vias\[0\]: expected an integer"):
        pv.load(path)
    d = json.loads(json.dumps(good))
    del d["events"]["calls"], d["events"]["vias"]
    # a call on a table's line would be every event's there: not read (review G2)
    (line,) = [x for x in d["events"]["sources"] if x["line"] == HELPER]
    line["via"] = {"file": __file__, "line": 1}
    path.write_text(json.dumps(d))
    loaded = pv.load(path)  # no calls: as recorded before calls were kept
    (old,) = [f for f in loaded.findings if f.severity == "error"]
    assert old.source.via is None and old.source == root.source
    assert "move the `pl.run_scoped`" in old.suggestion


@pytest.mark.browser
@pytest.mark.filterwarnings("ignore:jax.experimental.pallas.core_map is deprecated")
def test_the_source_panel_names_the_call(tmp_path):
    # the exported page in Chromium: the root's line, and under its title the call in the
    # warp-level body that led to it
    from browser_util import launch_chromium, open_offline, require_chromium
    from playwright.sync_api import sync_playwright

    from pallas_viz.render.html import write_html

    require_chromium()
    tr, root = single_error_root(helper_in_warp_code, "grid3")
    path = tmp_path / "t.html"
    write_html(tr, path)
    with sync_playwright() as p:
        b = launch_chromium(p)
        page, errors = open_offline(b, path, viewport={"width": 1280, "height": 1000})
        page.wait_for_selector(".pv-line-hit")
        assert page.inner_text(".pv-line-hit .pv-text") == root.source.code
        note = page.inner_text(".pv-callnote")
        assert note.startswith(f"called from: test_call_sites.py:{CALL}"), note
        assert "_fill(ctx, x_ref, o_ref)" in note, note
        assert page.get_attribute(".pv-callnote", "title") == __file__
        # an event of the root's cell, selected in the events list: its own line and call
        page.wait_for_selector(".pv-ev")
        page.locator(".pv-ev", has_text="SMEM").first.click()
        page.wait_for_selector(".pv-why:has-text('event')")
        assert page.inner_text(".pv-line-hit .pv-text") == root.source.code
        assert page.inner_text(".pv-callnote").startswith(
            f"called from: test_call_sites.py:{CALL}")
        b.close()
    assert not errors, errors


def _scope(ctx, x_ref, o_ref):
    """A helper opening a collective scope, in any launch shape."""

    def scoped(buf):
        ctx.store(buf, x_ref[...] * 2.0)
        sh.store_block_rows(ctx, o_ref, ctx.load(buf, sh.SHAPE[0]))

    pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32), collective_axes=ctx.axis)  # SCOPE


def partial_via_helper(ctx, x_ref, o_ref):
    @pl.when(ctx.thread == 0)
    def _():
        _scope(ctx, x_ref, o_ref)  # PCALL


def every_thread_via_helper(ctx, x_ref, o_ref):
    _scope(ctx, x_ref, o_ref)  # CCALL


@pytest.mark.filterwarnings("ignore:jax.experimental.pallas.core_map is deprecated")
@pytest.mark.parametrize("shape", ["no_grid", "grid3", "core_map", "core_map_grid",
                                   "cluster2", "tmem", "warp_mesh", "pallas_call"])
def test_a_helper_reached_in_a_branch_names_its_call_in_every_launch_shape(shape):
    # a collective scope a helper opens, called only by thread 0 (warp 0 in warp code,
    # where any scope is the mistake); its every-thread twin stays clean
    scope, call = sh.marked_line(_scope, "SCOPE"), sh.marked_line(partial_via_helper, "PCALL")
    kind = {"warp_mesh": "warp_allocation", "pallas_call": None}.get(shape, "partial_collective")
    seen = set()
    for _ in range(3):
        fn, args = sh.launch(partial_via_helper, shape)
        tr, _ = sh.run_traced(fn, args)
        errors = [f for f in tr.findings if f.severity == "error"]
        if kind is None:  # one thread a block: no other thread to miss the scope
            assert errors == [] and tr.failure is None, tr.summary()
            continue
        assert [(f.kind, f.source.line, f.source.via.line) for f in errors] == [
            (kind, scope, call)], tr.summary()
        seen.add((errors[0].message, errors[0].suggestion))
    assert len(seen) <= 1, seen
    fn, args = sh.launch(every_thread_via_helper, shape)
    tr, _ = sh.run_traced(fn, args)
    if shape == "warp_mesh":  # every warp opening a scope is the warp mistake itself
        assert [f.kind for f in tr.findings if f.severity == "error"] == ["warp_allocation"]
    else:
        assert tr.findings == [] and tr.failure is None, tr.summary()
        calls = {e.source.via.line for e in tr.events if e.source is not None}
        assert calls == {sh.marked_line(every_thread_via_helper, "CCALL")}, calls


def once_later(x_ref, o_ref):
    """`once` with its call of the helper on another line (nothing else changed)."""
    o_ref[...] = x_ref[...]
    _scratch(x_ref, o_ref)  # LATER


@pytest.mark.parametrize("mesh", MESHES, ids=["no_grid", "grid3"])
def test_the_diff_sees_a_helper_called_from_another_line(mesh):
    # The requests are the helper's line either way: only their call moved. The diff
    # used to align them by line alone and found nothing to report.
    before, after = _run_clean(once, **mesh), _run_clean(once_later, **mesh)
    only, later = sh.marked_line(once, "ONLY"), sh.marked_line(once_later, "LATER")
    d = pv.diff(before, after)
    (k,) = d.kernels
    (ch,) = k.allocations
    assert ch.change == "changed" and ch.fields == ("call",), ch
    blocks = 3 if mesh else 1
    assert len(ch.cells) == 2 * blocks  # every thread of every block
    scratch = sh.marked_line(_scratch, "SCRATCH")
    assert re.search(rf"~ SMEM \(8, 128\) float32 at \S*test_call_sites\.py:{scratch}: its "
                     rf"helper is called from \S*test_call_sites\.py:{later} \(was "
                     rf"\S*test_call_sites\.py:{only}\) \(request #0\)",
                     d.summary(color=False)), d.summary(color=False)
    assert ch.to_dict()["after"]["source"]["via"]["line"] == later
    assert pv.diff(after, after).empty

    # a call more or less: the request that went names its call
    d = pv.diff(_run_clean(twice, **mesh), after)
    text = d.summary(color=False)
    second = sh.marked_line(twice, "SECOND")
    assert re.search(rf"- SMEM \(8, 128\) float32 at \S*:{scratch} \(called from "
                     rf"\S*test_call_sites\.py:{second}\) \(request #1\)", text), text


def _wrapping(body):
    """A user's decorator: every kernel it builds runs its body through `wrapped`."""

    def wrapped(x_ref, o_ref):
        return body(x_ref, o_ref)  # FORWARD

    return wrapped


@pytest.mark.parametrize("mesh", MESHES, ids=["no_grid", "grid3"])
def test_kernels_are_named_after_their_bodies_not_a_shared_helper(mesh):
    # (reviews K and W: two kernels allocating through one helper were both named after
    # it, and the diff paired them by that name: reordering them read as a regression)
    x = jnp.ones(sh.SHAPE, jnp.float32)
    with pv.trace(raise_errors=False, timeout_s=10) as tr:
        for body in (once, once_later, twice, direct):
            jax.block_until_ready(_kernel(body, **mesh)(x))
    assert [k.name for k in tr.kernels] == ["once", "once_later", "twice", "direct"]
    # a decorator that forwards to each body calls them all: the bodies name the kernels
    with pv.trace(raise_errors=False, timeout_s=10) as tr:
        for body in (direct, _scratch):
            jax.block_until_ready(_kernel(_wrapping(body), **mesh)(x))
    assert [k.name for k in tr.kernels] == ["direct", "_scratch"]


def each_in_its_branch(x_ref, o_ref):
    """Each thread calls the allocating helper from a branch of its own: one line, two
    calls, merged into one buffer."""
    wg = jax.lax.axis_index("wg")

    @pl.when(wg == 0)
    def _():
        shared_helper(x_ref, o_ref)  # BRANCH0

    @pl.when(wg == 1)
    def _():
        shared_helper(x_ref, o_ref)  # BRANCH1


@pytest.mark.parametrize("mesh", MESHES, ids=["no_grid", "grid3"])
def test_requests_told_apart_by_their_calls_name_them(mesh):
    # (review K: "wg 1 makes SMEM buffer (8, 128) float32 at line 191 in its place" of a
    # request at line 191: the two differ only by their calls, which were not named)
    x = jnp.ones(sh.SHAPE, jnp.float32)
    line = sh.marked_line(shared_helper, "SHARED")
    b0 = sh.marked_line(each_in_its_branch, "BRANCH0")
    b1 = sh.marked_line(each_in_its_branch, "BRANCH1")
    seen = set()
    for _ in range(RUNS):
        tr, _ = sh.run_traced(_kernel(each_in_its_branch, **mesh), (x,))
        (root,) = [f for f in tr.findings if f.severity == "error"]
        assert root.kind == "partial_collective" and root.source.line == line, tr.summary()
        assert root.source.via.line == b0
        assert (f"is not requested by wg 1, which makes SMEM buffer (8, 128) float32 at line "
                f"{line} (called from line {b1}) in its place") in root.message, root.message
        (mismatch,) = [c for c in root.consequences if c.kind == "collective_mismatch"]
        # (each request names its call: they differ by nothing else)
        assert mismatch.message.endswith(
            f"disagree: wg 0: SMEM buffer (8, 128) float32 at line {line} (called from line "
            f"{b0}); wg 1: SMEM buffer (8, 128) float32 at line {line} (called from line "
            f"{b1})"), mismatch.message
        seen.add(root.message)
    assert len(seen) == 1, seen


def again_in_branch(x_ref, o_ref):
    """Every thread calls the helper; thread 0 calls it once more, in a branch."""
    shared_helper(x_ref, o_ref)  # EVERY

    @pl.when(jax.lax.axis_index("wg") == 0)
    def _():
        shared_helper(x_ref, o_ref)  # AGAIN


def test_consequences_at_one_helper_line_name_their_calls():
    # (review K: two leaks of one helper line, reached through two calls, read as two
    # identical lines)
    x = jnp.ones(sh.SHAPE, jnp.float32)
    for _ in range(RUNS):
        tr, _ = sh.run_traced(_kernel(again_in_branch, grid=(2,), grid_names=("g",)), (x,))
        text = tr.summary()
        lines = [ln for ln in text.splitlines() if ln.startswith("    - ")]
        assert lines and len(lines) == len(set(lines)), text
        every = sh.marked_line(again_in_branch, "EVERY")
        again = sh.marked_line(again_in_branch, "AGAIN")
        assert all(f"(called from line {every})" in ln or f"(called from line {again})" in ln
                   for ln in lines if "test_call_sites.py" in ln.split(": ")[0]), text


def _forwarding(body):
    """A decorator that hands every argument on: `wrapped(*refs)` calls `body(*refs)`."""

    def wrapped(*refs):
        return body(*refs)

    return wrapped


def test_a_body_behind_a_forwarding_decorator_names_its_kernel():
    # one decorated kernel alone in a trace (review G3: it was named after the decorator)
    x = jnp.ones(sh.SHAPE, jnp.float32)
    with pv.trace(raise_errors=False, timeout_s=10) as tr:
        jax.block_until_ready(_kernel(_forwarding(direct))(x))
    assert [k.name for k in tr.kernels] == ["direct"]


def test_a_body_behind_a_decorator_naming_each_argument_names_its_kernel():
    # `_wrapping`'s closure hands each of its parameters on, by name, to the body it
    # closed over: alone in a trace the kernel was named after the decorator (`_wrapping`)
    x = jnp.ones(sh.SHAPE, jnp.float32)
    for mesh in MESHES:
        with pv.trace(raise_errors=False, timeout_s=10) as tr:
            jax.block_until_ready(_kernel(_wrapping(direct), **mesh)(x))
        assert [k.name for k in tr.kernels] == ["direct"], mesh
    # a kernel body that calls a helper with its own refs is still the kernel's name
    with pv.trace(raise_errors=False, timeout_s=10) as tr:
        jax.block_until_ready(_kernel(once)(x))
    assert [k.name for k in tr.kernels] == ["once"]


def _stage(ctx, x_ref, o_ref):
    """A helper that opens a collective scope."""

    def scoped(buf):
        o_ref[...] = x_ref[...]

    pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32), collective_axes=ctx.axis)  # STAGE


def two_calls_on_one_line(ctx, x_ref, o_ref):
    _stage(ctx, x_ref, o_ref); pl.when(ctx.thread == 0)(lambda: _stage(ctx, x_ref, o_ref))  # noqa: E501, E702  # ONE_LINE


STAGE = sh.marked_line(_stage, "STAGE")
ONE_LINE = sh.marked_line(two_calls_on_one_line, "ONE_LINE")


@pytest.mark.parametrize("shape", ["grid3", "core_map_grid"])
def test_calls_that_share_a_line_are_told_apart_by_their_column(shape):
    """Thread 0 calls the helper a second time on the line of the first call: in the
    next blocks the threads' requests merge into buffers of the other call. The
    mismatch names each call by its column, the same on every run."""
    line = __import__("linecache").getline(__file__, ONE_LINE)
    first, second = line.index("_stage(") + 1, line.rindex("_stage(") + 1

    def run():
        tr, root = single_error_root(two_calls_on_one_line, shape)
        assert root.kind == "partial_collective" and root.source.line == STAGE, tr.summary()
        (mismatch,) = [c for c in root.consequences if c.kind == "collective_mismatch"]
        assert mismatch.message == (
            "requests merged into one collective buffer disagree: "
            f"w 1: SMEM buffer (8, 128) float32 at line {STAGE} (called from line "
            f"{ONE_LINE}, column {first}); w 0: SMEM buffer (8, 128) float32 at line "
            f"{STAGE} (called from line {ONE_LINE}, column {second})"), mismatch.message
        # the summary's consequence lines name each call by its column too: the two
        # leaks (one a call) read apart
        text = tr.summary()
        leaks = sorted(re.findall(rf"warning\[leak\] at \S+:{STAGE}:\d+ \(called from line "
                                  rf"{ONE_LINE}, column (\d+)\)", text))
        assert leaks == sorted([str(first), str(second)]), text
        return root

    _same_every_run(run, RUNS)
