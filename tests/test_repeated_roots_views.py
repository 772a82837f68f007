"""A kernel called in a loop: every view lists its root cause once, naming the runs.

Each run of a kernel is analysed on its own (three runs, three root causes); the text
summary groups them (`analysis.repeats`), and so must the widget's and the HTML export's
findings list, the PNG's numbered roots and the static snapshot.
"""

from __future__ import annotations

import jax
import pytest
from browser_util import artifact, open_offline

import pallas_viz as pv
from pallas_viz.examples import shapes as sh
from pallas_viz.render import html, payload, png

SHAPES = ["no_grid", "grid3"]


def _looped(shape: str):
    """Three runs of a buggy kernel, then one of a clean one."""
    fn, args = sh.launch(sh.collective_in_branch, shape)
    good, good_args = sh.launch(sh.hoisted_collective, shape)
    with pv.trace(raise_errors=False) as tr:
        for _ in range(3):
            jax.block_until_ready(fn(*args))
        jax.block_until_ready(good(*good_args))
    assert [f.kernel for f in tr.findings] == [0, 1, 2], tr.summary()
    return tr


@pytest.fixture(scope="module", params=SHAPES)
def looped(request):
    return request.param, _looped(request.param)


def test_the_payload_sends_one_root_cause_with_every_run_s_cells(looped):
    _, tr = looped
    meta = payload.build_state(tr)["meta"]
    (f,) = meta["findings"]
    assert f["runs"] == [0, 1, 2] and f["kernel"] == 0
    kernel_of = [r["kernel"] for r in meta["rows"]]
    row_of_cell = payload.CellIndex(tr).cell_row
    lit = {kernel_of[int(row_of_cell[c])] for c in f["cells"]}
    assert lit == {0, 1, 2}  # every run's cells lit, none of the clean kernel's
    assert {kernel_of[int(row_of_cell[m["cell"]])] for m in f["missing"]} == {0, 1, 2}
    assert f["num_events"] == sum(len(x.events) for x in tr.findings)
    # each run's consequences folded under the one root cause, with every run's cells
    assert [c["kind"] for c in f["consequences"]] == [c.kind for c in tr.findings[0].consequences]
    for j, c in enumerate(f["consequences"]):
        assert c["num_events"] == sum(len(x.consequences[j].events) for x in tr.findings)
        assert {kernel_of[int(row_of_cell[i])] for i in c["cells"]} == {0, 1, 2}


def test_the_png_numbers_the_root_cause_once(looped):
    _, tr = looped
    lines = [text for text, _, _ in png.root_lines(tr, 1)]
    heads = [t for t in lines if "error[partial_collective]" in t]
    assert len(heads) == 1 and "(kernel runs 0..2)" in heads[0], lines
    assert not any("plot(kernel=" in t for t in lines)
    # the plotted run (1) is one of the runs: its root is detailed (line, cells) and marked 1
    assert any(t.strip().startswith(f"{tr.findings[1].source.line} |") for t in lines)
    assert [(n, f.kernel) for n, f in png.kernel_cells(tr, 1).roots] == [(1, 1)]
    assert png.kernel_cells(tr, 3).roots == []  # the clean kernel
    other = [text for text, _, _ in png.root_lines(tr, 3)]
    assert any("(kernel runs 0..2: plot(kernel=0))" in t for t in other), other
    assert not any("more root cause" in t for t in other)


def test_the_static_snapshot_names_the_runs(looped):
    _, tr = looped
    snap = html.static_snapshot(tr)
    assert "in kernel runs 0..2" in snap
    assert "more root cause" not in snap
    assert "3 error(s)" in snap  # as the text summary counts them


@pytest.mark.browser
def test_the_html_export_shows_one_card_that_follows_the_run_shown(playwright_browser, looped,
                                                                   tmp_path):
    shape, tr = looped
    path = tmp_path / "looped.html"
    html.write_html(tr, path)
    page, errors = open_offline(playwright_browser, path,
                                viewport={"width": 1280, "height": 1000})
    page.wait_for_selector(".pv-finding")
    assert page.locator(".pv-finding").count() == 1
    card = page.locator(".pv-finding")
    assert "in kernel runs 0..2" in card.inner_text()
    assert "3 errors" in page.inner_text(".pv-header")
    word = tr.kernels[0].thread_axis
    blocks = "block (no grid)" if shape == "no_grid" else "blocks (0), (1), (2)"
    # its cells named once, in one run (the first: the grid shows it)
    assert page.inner_text(".pv-where-missing") == f"never did: {blocks} · {word} 0"
    # the run shown is run 1: the card stays, the grid shows run 1's blocks lit, and
    # selecting the card keeps run 1 (its cells there) instead of jumping to run 0
    page.select_option(".pv-select", "1")
    page.locator(".pv-finding").click()
    assert page.input_value(".pv-select") == "1"
    assert "Events of block" in page.inner_text(".pv-events")
    page.wait_for_selector(".pv-line-hit")
    assert page.inner_text(".pv-line-hit .pv-text") == tr.findings[1].source.code
    # the clean kernel: still one card; selecting it goes to the root's first run
    page.select_option(".pv-select", "3")
    assert page.locator(".pv-finding").count() == 1
    page.locator(".pv-finding").click()
    assert page.input_value(".pv-select") == "0"
    page.screenshot(path=artifact(f"repeated_roots_{shape}.png"), full_page=True)
    page.close()
    assert not errors
