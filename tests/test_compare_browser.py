"""The compare view of a trace diff in a real Chromium: the quickstart's bug and its fix,
exported with `TraceDiff.to_html` and opened offline, draw fixed cells in both grids, in the
widget's own "fixed" colour; a cell's click (or Enter) lists its root and its allocation
changes."""

from __future__ import annotations

import re

import pytest
from browser_util import artifact, open_offline

import pallas_viz as pv
from pallas_viz.examples import kernels as ex

pytestmark = pytest.mark.browser

EVIL = "</script><script>alert(1)</script><img src=x onerror=alert(2)>"

# A CSS variable of the view resolved by the browser (a probe inside the view's root)
VAR_JS = """([root, name]) => {
  const probe = document.createElement('div');
  probe.style.backgroundColor = `var(${name})`;
  root.appendChild(probe);
  const css = getComputedStyle(probe).backgroundColor;
  probe.remove();
  return css;
}"""


def _run(builder):
    fn, args = builder()
    with pv.trace(raise_errors=False) as tr:
        fn(*args)
    return tr


def test_compare_page_draws_fixed_cells_for_the_fix(playwright_browser, tmp_path):
    d = pv.diff(_run(ex.collective_in_branch), _run(ex.hoisted_collective))
    path = tmp_path / "diff.html"
    d.to_html(path)
    page, errors = open_offline(playwright_browser, path, viewport={"width": 1100, "height": 700})
    dialogs: list[str] = []
    page.on("dialog", lambda dlg: (dialogs.append(dlg.message), dlg.dismiss()))
    page.wait_for_selector("td.pv-cmp-cell", timeout=15_000)
    root = page.locator(".pv-compare")
    assert "1 root cause fixed, 0 still, 0 new" in root.locator(".pv-header").inner_text()
    for side in ("before", "after"):
        grid = root.locator(f"table.pv-cmp-grid[data-side={side}]")
        statuses = grid.locator("td.pv-cmp-cell").evaluate_all(
            "els => els.map(e => e.dataset.status)")
        assert statuses == ["fixed"] * 4, side  # blocks (0), (1) x t 0, 1
        assert grid.locator("th").all_inner_texts()[:3] == ["block", "t 0", "t 1"]
    cell = root.locator("td.pv-cmp-fixed").first
    fill = cell.evaluate("e => getComputedStyle(e).backgroundColor")
    handle = root.element_handle()
    assert fill == page.evaluate(VAR_JS, [handle, "--pv-cell-fixed"])
    assert fill != page.evaluate(VAR_JS, [handle, "--pv-cell-clean"])
    assert cell.inner_text() == "✓"
    fixed = root.locator(".pv-cmp-roots-fixed")
    assert "error[partial_collective] kernels.py:60" in fixed.inner_text()
    # hovering the root outlines its cells in both grids
    fixed.locator("li.pv-cmp-root").hover()
    assert root.locator("td.pv-cmp-lit").count() == 8
    # a click on a cell lists its root and how its allocations changed
    after = root.locator("table.pv-cmp-grid[data-side=after] td.pv-cmp-cell")
    after.nth(1).click()  # block (0), t 1: gained the hoisted buffer
    detail = root.locator(".pv-cmp-detail").first
    page.wait_for_selector(".pv-cmp-detail[data-selected='after (0) 1']")
    text = detail.inner_text()
    assert "after · block (0) · t 1: fixed" in text
    assert "fixed: error[partial_collective] kernels.py:60" in text
    (text,) = detail.locator("li.pv-cmp-ch").all_inner_texts()
    assert re.fullmatch(r"\+ SMEM \(8, 128\) float32 at \S*kernels\.py:77 "
                        r"\(request #0\)", text), text
    assert root.locator("td.pv-cmp-sel").count() == 1
    # and from the keyboard (the clicked cell has the focus; the left arrow moves
    # it): thread 0's buffer moved out of the branch
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("Enter")
    page.wait_for_selector(".pv-cmp-detail[data-selected='after (0) 0']")
    (text,) = detail.locator("li.pv-cmp-ch").all_inner_texts()
    assert re.fullmatch(r"~ SMEM \(8, 128\) float32 moved from \S*kernels\.py:60 to "
                        r"\S*kernels\.py:77 \(request #0\)", text), text
    root.screenshot(path=str(artifact("compare-fixed.png")))
    assert errors == [] and dialogs == []

    # kernel text full of markup stays text
    loc = pv.SourceLocation("/k/evil" + EVIL + ".py", 3, 0, "body" + EVIL, EVIL)
    f = pv.Finding("leak", "error", "m" + EVIL, [(0, (0,), 0)], [], loc, kernel=0)
    k = pv.KernelInfo(0, "k" + EVIL, None, 1, 2, 1)
    evil = tmp_path / "evil.html"
    pv.diff(pv.Trace(kernels=[k]), pv.Trace(kernels=[k], findings=[f])).to_html(evil)
    page, errors = open_offline(playwright_browser, evil)
    page.on("dialog", lambda dlg: (dialogs.append(dlg.message), dlg.dismiss()))
    page.wait_for_selector("td.pv-cmp-new", timeout=15_000)
    assert EVIL in page.locator(".pv-cmp-roots-new").inner_text()
    assert page.locator(".pv-compare img").count() == 0
    assert errors == [] and dialogs == []
