"""The replay bar in a narrow notebook, in a real JupyterLab and a real Chromium.

(review N, section 9: at a 600 px viewport, with the widget 484 px wide, the replay row
overflowed its pane and the slider's end and thumb were clipped at its right border; at
820 px everything fitted.) At every width the row must stay inside the replay pane (it may
wrap, and the slider may shrink), the slider must keep a usable width, and a wide widget
must keep the whole row on one line.
"""

from __future__ import annotations

import pytest
from browser_util import (
    artifact,
    jupyter_server,
    write_notebook,
)
from test_browser import new_page, open_notebook, run_all

pytestmark = pytest.mark.browser

NOTEBOOK = [
    "%load_ext pallas_viz\nfrom pallas_viz.examples.kernels import collective_in_branch\n"
    "fn, args = collective_in_branch()",
    "%%pallas_trace --no-raise -o tr\nfn(*args)",
]

# What the replay pane holds and where: its own overflow, and each control's box against
# the pane's content box (inside its padding).
REPLAY_JS = """() => {
  const root = document.querySelector('.pv-root');
  const rep = root.querySelector('.pv-replay');
  const row = rep.querySelector('.pv-replay-row');
  const cs = getComputedStyle(rep);
  const rr = rep.getBoundingClientRect();
  const left = rr.left + parseFloat(cs.borderLeftWidth) + parseFloat(cs.paddingLeft);
  const right = rr.right - parseFloat(cs.borderRightWidth) - parseFloat(cs.paddingRight);
  const kids = [...row.children, ...rep.children].map((c) => {
    const b = c.getBoundingClientRect();
    return {name: c.className || c.tagName, left: b.left, right: b.right, top: b.top,
            bottom: b.bottom};
  });
  const slider = row.querySelector('.pv-slider').getBoundingClientRect();
  return {
    widget: root.getBoundingClientRect().width,
    replay: [rep.scrollWidth, rep.clientWidth], row: [row.scrollWidth, row.clientWidth],
    content: [left, right], kids, slider: [slider.left, slider.right, slider.width],
    rowTops: [...row.children].map((c) => c.getBoundingClientRect().top),
  };
}"""


@pytest.fixture(scope="module")
def narrow_lab(playwright_browser, tmp_path_factory):
    """JupyterLab with a traced kernel run, the left sidebar collapsed (as the review had)."""
    root = tmp_path_factory.mktemp("narrow")
    write_notebook(root / "narrow.ipynb", NOTEBOOK)
    with jupyter_server("lab", root) as server:
        page, errors = new_page(playwright_browser)
        try:
            open_notebook(page, server, "/lab/tree/narrow.ipynb")
            page.evaluate("() => window.jupyterapp.shell.collapseLeft()")
            page.wait_for_function("() => window.jupyterapp.shell.leftCollapsed",
                                   timeout=10_000)
            run_all(page)
            page.wait_for_selector(".pv-root .pv-replay .pv-slider", timeout=60_000)
        except Exception:
            page.screenshot(path=artifact("narrow-replay-run-failure.png"))
            print(server.log_tail())
            raise
        yield server, page, errors
        page.close()


def _replay(page, width: int) -> dict:
    page.set_viewport_size({"width": width, "height": 1000})
    page.wait_for_timeout(600)  # JupyterLab and the widget's container queries settle
    page.locator(".pv-root .pv-replay").scroll_into_view_if_needed()
    return page.evaluate(REPLAY_JS)


def _fits(s: dict) -> None:
    assert s["replay"][0] <= s["replay"][1] + 1, s  # nothing scrolls or spills sideways
    assert s["row"][0] <= s["row"][1] + 1, s
    left, right = s["content"]
    for k in s["kids"]:
        assert k["left"] >= left - 1 and k["right"] <= right + 1, (k, s)
    assert s["slider"][2] >= 100, s  # still a slider one can drag


# 600 and 820: the review's widths (a 484 px and a 704 px widget); 480 and 380 narrower
# still (a split notebook pane); 1400 the default.
@pytest.mark.parametrize("width", [380, 480, 600, 820, 1400])
def test_replay_row_fits_the_widget(narrow_lab, width):
    server, page, errors = narrow_lab
    try:
        s = _replay(page, width)
        page.locator(".pv-root .pv-replay").screenshot(
            path=artifact(f"narrow-replay-{width}.png"))
        page.locator(".pv-root").screenshot(path=artifact(f"narrow-widget-{width}.png"))
        _fits(s)
        if width == 1400:  # a wide widget keeps the whole row on one line
            assert max(s["rowTops"]) - min(s["rowTops"]) < 12, s
        # Replaying (live at a step: a long step text, the legend) changes nothing of that.
        replay = page.locator(".pv-root .pv-replay")
        replay.get_by_role("button", name="previous event").click()
        page.wait_for_timeout(200)
        assert "step" in replay.locator(".pv-steplabel").inner_text()
        live = page.evaluate(REPLAY_JS)
        replay.screenshot(path=artifact(f"narrow-replay-{width}-live.png"))
        _fits(live)
    finally:
        page.locator(".pv-root .pv-replay").get_by_role("button", name="last step").click()
        if page.locator(".pv-root .pv-mode").get_attribute("aria-pressed") == "true":
            page.locator(".pv-root .pv-mode").click()
        page.set_viewport_size({"width": 1400, "height": 1000})
    assert not errors
