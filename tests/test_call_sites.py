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
import pytest
import two_devices_roots
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from roots_util import single_error_root

import pallas_viz as pv
from pallas_viz.errors import TraceFileError
from pallas_viz.examples import shapes as sh
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
    seen = set()
    for _ in range(RUNS):
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
        seen.add((root.source.line, via.line, root.message, root.suggestion))
    assert len(seen) == 1, seen


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


def _source_at(tr, body, mark):
    line = sh.marked_line(body, mark)
    (src,) = {s for s in tr.events.sources if s.line == line and s.file == __file__}
    return src


MESHES = [{}, {"grid": (3,), "grid_names": ("g",)}]


@pytest.mark.parametrize("mesh", MESHES, ids=["no_grid", "grid3"])
def test_a_line_reached_through_two_calls_names_neither(mesh):
    # the kernel body calls the helper twice: its scope's line came through both calls
    assert _source_at(_run_clean(twice, **mesh), _scratch, "SCRATCH").via is None
    tr = _run_clean(once, **mesh)
    via = _source_at(tr, _scratch, "SCRATCH").via
    assert via is not None and via.line == sh.marked_line(once, "ONLY"), via
    assert via.function == "once" and via.code.strip().startswith("_scratch(x_ref, o_ref)")


@pytest.mark.parametrize("mesh", MESHES, ids=["no_grid", "grid3"])
def test_a_line_in_the_traced_function_itself_names_no_call(mesh):
    tr = _run_clean(direct, **mesh)
    own = _source_at(tr, direct, "OWN")
    assert own.via is None and own.function == "direct", own
    assert "called from" not in tr.summary()


def test_the_call_is_saved_and_checked(tmp_path):
    tr, root = single_error_root(helper_in_warp_code, "no_grid")
    path = tmp_path / "t.json"
    tr.save(path)
    back = pv.load(path)
    (again,) = [f for f in back.findings if f.severity == "error"]
    assert again.source.via == root.source.via and again.source.via.line == CALL
    assert again.suggestion == root.suggestion
    # the widget's payload carries it with the finding's line
    (shown,) = [f["source"] for f in build_state(back)["meta"]["findings"]
                if f["severity"] == "error"]
    assert shown["via"]["line"] == CALL and shown["via"]["label"].endswith(f":{CALL}"), shown

    d = json.loads(path.read_text())
    (src,) = [s for s in d["events"]["sources"] if s["line"] == HELPER]
    src["via"] = {"file": 3, "line": CALL}
    path.write_text(json.dumps(d))
    with pytest.raises(TraceFileError, match=r"sources\[\d+\]\.via\.file"):
        pv.load(path)
    src["via"] = None
    path.write_text(json.dumps(d))
    loaded = pv.load(path)  # no call: as recorded before calls were kept
    assert [f.source.via for f in loaded.findings if f.source is not None
            and f.source.line == HELPER] == [None]


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
        b.close()
    assert not errors, errors
