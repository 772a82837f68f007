"""The self-contained HTML export: offline, escaped, and interactive in a real browser."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest
from browser_util import artifact, open_offline

import pallas_viz as pv
from pallas_viz.model import Finding, KernelInfo, SourceLocation
from pallas_viz.render.html import html_document, write_html
from pallas_viz.store import COLUMNS, OP_CODE, RESOURCE_CODE, SPACE_CODE, EventTable
from pallas_viz.trace import Trace

EVIL = "</script><script>alert(1)</script><img src=x onerror=alert(2)>"


def _embedded(doc: str, name: str = "data") -> dict:
    m = re.search(rf'<script type="application/json" id="pallas-viz-{name}">(.*?)</script>',
                  doc, re.S)
    return json.loads(m.group(1))


def _hostile_trace(tmp_path, EVIL=EVIL) -> Trace:  # noqa: N803 - the module's EVIL
    """One block, two threads: a collective SMEM buffer only thread 0 requests, with a
    source file and code line full of markup (or of `EVIL`)."""
    src = tmp_path / "evil_kernel.py"
    src.write_text("def kernel():\n    # " + EVIL + "\n    pl.run_scoped(body)\n")
    loc = SourceLocation(str(src), 2, 4, "kernel" + EVIL, "    # " + EVIL)
    rows = [("create", 0), ("release", 0)]
    n = len(rows)
    cols = {k: np.zeros(n, v) for k, v in COLUMNS.items()}
    cols["op"][:] = [OP_CODE[o] for o, _ in rows]
    cols["resource"][:] = RESOURCE_CODE["buffer"]
    cols["memory_space"][:] = SPACE_CODE["SMEM"]
    cols["thread"][:] = [t for _, t in rows]
    cols["warp"][:] = -1
    cols["thread_seq"][:] = [0, 1]
    cols["buffer_id"][:] = 100
    cols["initial_ref_count"][:] = 2
    cols["ref_count"][:] = [2, 1]
    cols["nbytes"][:] = 4096
    cols["dtype"][:] = 0
    cols["shape"][:] = 0
    cols["source"][:] = 0
    table = EventTable(cols, [(0,)], [(8, 128)], ["float32" + EVIL], [loc])
    finding = Finding("partial_collective", "error", "only thread 0 " + EVIL,
                      [(0, (0,), 0), (0, (0,), 1)], [0], loc, suggestion="hoist " + EVIL,
                      kernel=0)
    return Trace(events=table, kernels=[KernelInfo(0, "k" + EVIL, None, 1, 2, 1)],
                 findings=[finding])


def test_export_is_self_contained(example_traces, tmp_path):
    tr = example_traces["collective_in_branch"]
    path = write_html(tr, tmp_path / "t.html")
    doc = open(path, encoding="utf-8").read()
    assert doc.startswith("<!DOCTYPE html>")
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", doc)
    assert "https://" not in doc and "http://" not in doc
    data = _embedded(doc)
    more = _embedded(doc, "more")
    n = len(tr.events)
    meta = data["state"]["meta"]
    assert meta["num_events"] == n
    # the first document has what the first grid draw reads; the second the rest
    assert set(data["state"]["columns"]) == {"cell", "warp"}
    assert set(data["state"]["columns"]) | set(more["columns"]) == set(meta["column_types"])
    cols = {k: np.frombuffer(base64.b64decode(v), meta["column_types"][k])
            for k, v in {**data["state"]["columns"], **more["columns"]}.items()}
    assert all(len(a) == n for a in cols.values())
    np.testing.assert_array_equal(cols["nbytes"], tr.events.columns["nbytes"])
    np.testing.assert_array_equal(cols["op"], tr.events.columns["op"])
    assert (cols["cell"] >= 0).sum() == sum(1 for e in tr.events if e.block is not None)
    types = meta["protocol"]["detail_types"]
    bid = np.frombuffer(base64.b64decode(more["details"]["buffer_id"]), types["buffer_id"])
    np.testing.assert_array_equal(bid, tr.events.columns["buffer_id"])
    loc = tr.findings[0].source
    snip = data["snippets"][f"{loc.file}:{loc.line}"]
    assert snip["lines"][loc.line - snip["start"]] == loc.code


def test_hostile_text_stays_text_in_the_file(tmp_path):
    doc = html_document(_hostile_trace(tmp_path))
    assert doc.count("<script") == 3 and doc.lower().count("</script") == 3
    assert "<img src=x" not in doc and "alert(1)</" not in doc
    data = _embedded(doc)  # and it decodes back to the original text
    assert data["state"]["meta"]["findings"][0]["message"] == "only thread 0 " + EVIL
    assert data["tables"]["sources"][0]["code"] == "    # " + EVIL


def _open_hostile(browser, tmp_path, text):
    """(page, errors, dialogs): `_hostile_trace` with `text` exported and open in a page of
    its own, its source line and events listed."""
    path = tmp_path / "hostile.html"
    write_html(_hostile_trace(tmp_path, text), path)
    page, errors, dialogs = _open(browser, path)
    page.wait_for_selector(".pv-line-hit")
    page.wait_for_selector(".pv-ev")
    return page, errors, dialogs


def _open(browser, path):
    """(page, errors, dialogs): the file `path` in a new page of `browser` (a context of
    its own, closed with the page)."""
    dialogs = []
    page, errors = open_offline(browser, path, viewport={"width": 1280, "height": 1000})
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.wait_for_selector(".pv-finding")
    return page, errors, dialogs


@pytest.mark.browser
def test_hostile_text_in_the_browser(playwright_browser, tmp_path):
    page, errors, dialogs = _open_hostile(playwright_browser, tmp_path, EVIL)
    assert page.inner_text(".pv-finding .pv-msg") == "only thread 0 " + EVIL
    assert page.inner_text(".pv-line-hit .pv-text") == "    # " + EVIL
    assert EVIL in page.inner_text(".pv-events")  # the dtype column
    assert page.locator("img").count() == 0
    page.close()
    assert not dialogs and not errors


# a line that reads as `x = 1 // tail` with the override (the comment's text reversed)
BIDI = "\u202e// \u2066x\u2069\u2028\u200f"
BIDI_SHOWN = "\\u202e// \\u2066x\\u2069\\u2028\\u200f"
UNSEEN = set("\u202e\u2066\u2069\u2028\u200f")


def test_unseen_characters_are_shown_in_the_static_snapshot(tmp_path):
    from pallas_viz.render.html import static_snapshot

    text = static_snapshot(_hostile_trace(tmp_path, BIDI))
    assert not UNSEEN & set(text) and BIDI_SHOWN in text


@pytest.mark.browser
def test_unseen_characters_are_shown_in_the_browser(playwright_browser, tmp_path):
    # bidi overrides and isolates, a line separator, a mark: shown as escapes, as the
    # terminal shows them, in the message, the code line, the events table and the titles
    page, errors, dialogs = _open_hostile(playwright_browser, tmp_path, BIDI)
    assert page.inner_text(".pv-finding .pv-msg") == "only thread 0 " + BIDI_SHOWN
    assert page.inner_text(".pv-line-hit .pv-text") == "    # " + BIDI_SHOWN
    shown = page.evaluate("""() => {
        const root = document.getElementById("pallas-viz-root");
        const w = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
        let t = "";
        while (w.nextNode()) t += w.currentNode.nodeValue;
        for (const el of root.querySelectorAll("[title]")) t += el.getAttribute("title");
        return t;
    }""")
    assert BIDI_SHOWN in shown and not UNSEEN & set(shown)
    page.close()
    assert not dialogs and not errors


@pytest.mark.browser
def test_export_is_interactive(playwright_browser, example_traces, tmp_path):
    tr = example_traces["collective_in_branch"]
    path = tmp_path / "t.html"
    write_html(tr, path)
    page, errors, dialogs = _open(playwright_browser, path)
    # the first error finding is selected, its source line shown, its cell's events listed
    first = tr.errors[0]
    assert "pv-selected" in page.get_attribute(".pv-finding >> nth=0", "class")
    assert "2 blocks × 2 t" in page.inner_text(".pv-kinfo")
    assert "stopped" not in page.get_attribute(".pv-kinfo", "title")
    page.wait_for_selector(".pv-line-hit")
    assert page.inner_text(".pv-line-hit .pv-text") == first.source.code
    page.wait_for_selector(".pv-ev")
    # click thread 1 of block (1): it made no request in this kernel
    box = page.locator(".pv-scroller").bounding_box()
    page.mouse.click(box["x"] + 8 + 132 + 64 + 4 + 20, box["y"] + 8 + 26 + 34 + 10)
    page.wait_for_selector("text=Events of block (1) · t 1")
    assert "made no allocation" in page.inner_text(".pv-events")
    # keyboard: left arrow + Enter moves to thread 0 of block (1), whose events are listed
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("Enter")
    page.wait_for_selector("text=Events of block (1) · t 0")
    want = [e.seq for e in tr.events if e.block == (1,) and e.thread == 0]
    got = [int(x) for x in page.locator(".pv-ev td:first-child").all_inner_texts()]
    assert got == want
    # replay over every event (kernel operands too), back to the start, then forward to
    # thread 0's create in block (0)
    page.uncheck(".pv-check input")
    page.click("text=|◀")
    create = next(e.seq for e in tr.events if e.block is not None and e.op == "create")
    for _ in range(create + 1):
        page.keyboard.press("]")
    assert page.inner_text(".pv-steplabel") == f"step {create + 1} / {len(tr.events)}"
    assert "create SMEM buffer" in page.inner_text(".pv-stepevent")
    page.screenshot(path=artifact("html_export.png"), full_page=True)
    page.close()
    assert not errors and not dialogs


@pytest.mark.browser
def test_export_of_a_kernel_cut_short_says_only_the_blocks_that_ran(playwright_browser,
                                                                   tmp_path):
    from pallas_viz import examples as ex

    fn, args = ex.mismatched_collective_shapes(grid=(3,))  # fails in block 0 of 3
    with pv.trace(raise_errors=False) as tr:
        fn(*args)
    path = tmp_path / "t.html"
    write_html(tr, path)
    page, errors, dialogs = _open(playwright_browser, path)
    assert "1 block ran × 2 t" in page.inner_text(".pv-kinfo")
    assert "only the blocks that ran are counted" in page.get_attribute(".pv-kinfo", "title")
    page.close()
    assert not errors and not dialogs


# ------------------------------------------------------------------ the front end, at scale
from browser_util import grid_geometry, large_example_trace, many_blocks_trace  # noqa: E402

G = grid_geometry()
# The (un-scrolled) content coordinates of a point inside cell (visual row v, thread t),
# clear of its marker and texts.
CELL_PX = """([v, t]) => {
  const g = GEOM;
  return [g.pad + g.labelW + t * (g.cellW + g.gap) + 16,
          g.pad + g.headerH + v * (g.cellH + g.gap) + g.cellH - 10];
}""".replace("GEOM", json.dumps(G))
PIXEL = """([x, y]) => {
  const sc = document.querySelector('.pv-scroller');
  const cv = sc.querySelector('canvas.pv-canvas');
  const d = window.devicePixelRatio || 1;
  const p = cv.getContext('2d').getImageData(
    Math.round((x - sc.scrollLeft) * d), Math.round((y - sc.scrollTop) * d), 1, 1).data;
  return [p[0], p[1], p[2]];
}"""
COLOR = """(name) => {
  const root = document.querySelector('.pv-root');
  const probe = document.createElement('div');
  probe.style.backgroundColor = `var(${name})`;
  root.appendChild(probe);
  const css = getComputedStyle(probe).backgroundColor;
  probe.remove();
  const cv = document.createElement('canvas'); cv.width = cv.height = 1;
  const ctx = cv.getContext('2d'); ctx.fillStyle = css; ctx.fillRect(0, 0, 1, 1);
  const p = ctx.getImageData(0, 0, 1, 1).data;
  return [p[0], p[1], p[2]];
}"""
# Whether visual row v is inside the grid's visible area.
ROW_VISIBLE = """(v) => {
  const g = GEOM;
  const sc = document.querySelector('.pv-scroller');
  const top = g.pad + g.headerH + v * (g.cellH + g.gap);
  return top >= sc.scrollTop + g.headerH && top + g.cellH <= sc.scrollTop + sc.clientHeight;
}""".replace("GEOM", json.dumps(G))


def _near(a, b, tol=3):
    return all(abs(x - y) <= tol for x, y in zip(a, b))


@pytest.fixture(scope="module")
def large_html(tmp_path_factory):
    path = tmp_path_factory.mktemp("large") / "large.html"
    write_html(large_example_trace(), path)
    return path


def _page(browser, path, width=1400, height=1000, scheme="light"):
    page, errors = open_offline(browser, path, viewport={"width": width, "height": height},
                                color_scheme=scheme)
    page.wait_for_selector(".pv-line-hit")
    page.wait_for_selector(".pv-ev")
    page.wait_for_function("document.querySelector('canvas.pv-canvas').width > 100")
    return page, errors


def _hit_line_whole(page) -> dict:
    """The offending line: its text, whether any of it is cut, where its caret is."""
    return page.evaluate("""() => {
      const line = document.querySelector('.pv-line-hit');
      const text = line.querySelector('.pv-text');
      const block = line.closest('.pv-codeblock');
      const col = line.querySelector('.pv-col');
      const after = col && getComputedStyle(col, '::after');
      const b = block.getBoundingClientRect(), t = text.getBoundingClientRect();
      const c = col && col.getBoundingClientRect();
      return {text: text.innerText,
              cut: block.scrollWidth > block.clientWidth + 1 || t.right > b.right + 1,
              caret: c ? {x: c.x, content: after.content, visible: after.content === '"^"'
                          && c.width > 0 && c.x >= b.x && c.x + 8 <= b.right} : null,
              colX: c && c.x};
    }""")


@pytest.mark.browser
@pytest.mark.parametrize("width,scheme", [(1400, "light"), (900, "dark"), (600, "light")])
def test_large_opens_on_the_culprit(playwright_browser, large_html, width, scheme):
    """64 blocks, the bug in block 41: block 41, the thread that skipped the allocation and
    the whole offending line are on the first screen, without scrolling or clicking."""
    page, errors = _page(playwright_browser, large_html, width=width, scheme=scheme)
    card = page.locator(".pv-finding.pv-selected")
    assert "made it: block (41) · w 0" in card.inner_text()
    assert "never did: block (41) · w 1" in card.inner_text()
    # alike blocks fold: (0)..(40), (41), (42)..(63); block 41 is visual row 1, in view
    assert page.evaluate(ROW_VISIBLE, 1)
    err = page.evaluate(COLOR, "--pv-cell-error")
    made = page.evaluate(PIXEL, page.evaluate(CELL_PX, [1, 0]))
    assert _near(made, err), (made, err)
    # the thread that never requested it: hollow (panel background) and hatched, not filled
    panel = page.evaluate(COLOR, "--pv-panel")
    x, y = page.evaluate(CELL_PX, [1, 1])
    line = [page.evaluate(PIXEL, [x + dx, y]) for dx in range(0, 40, 2)]
    assert not any(_near(px, err) for px in line)
    assert any(_near(px, panel) for px in line) and any(not _near(px, panel) for px in line)
    # its events list a placeholder where the request belongs
    missing = page.locator(".pv-ev-missing")
    assert "Events of block (41) · w 1" in page.inner_text(".pv-events")
    assert missing.inner_text().strip().startswith("∅")
    assert "never requested: SMEM (8, 128) float32 at line" in missing.inner_text()
    # the whole line, with a caret under its column, inside the page's first screen
    hit = _hit_line_whole(page)
    assert 'pl.run_scoped(scratch, plgpu.SMEM(SHAPE, jnp.float32), collective_axes="w")' in (
        hit["text"])
    assert not hit["cut"], hit
    caret = hit["caret"]
    assert caret and caret["visible"] and abs(caret["x"] - hit["colX"]) < 2, hit
    assert page.locator(".pv-line-branch").count() >= 1  # the branch line, highlighted too
    # no pane clipped: the grid shows both threads' columns whole, nothing overflows the widget
    geo = page.evaluate("""() => {
      const root = document.querySelector('.pv-root').getBoundingClientRect();
      const sc = document.querySelector('.pv-scroller');
      const panes = [...document.querySelectorAll(
          '.pv-gridpane, .pv-findpane, .pv-eventspane, .pv-sourcepane, .pv-replay')]
        .map((p) => p.getBoundingClientRect()).map((r) => [r.left, r.right]);
      return {root: [root.left, root.right], grid: sc.clientWidth, panes};
    }""")
    assert geo["grid"] >= G["pad"] * 2 + G["labelW"] + 2 * (G["cellW"] + G["gap"]), geo
    root = geo["root"]
    assert all(lft >= root[0] - 1 and rgt <= root[1] + 1 for lft, rgt in geo["panes"]), geo
    page.screenshot(path=artifact(f"large-{width}-{scheme}.png"), full_page=True)
    page.close()
    assert not errors


@pytest.mark.browser
def test_many_blocks_scroll_to_the_culprit_and_minimap_jumps(playwright_browser, tmp_path):
    path = tmp_path / "big.html"
    write_html(many_blocks_trace(4096, 3001), path)
    page, errors = _page(playwright_browser, path)
    assert "block (3001) · w 0" in page.inner_text(".pv-finding.pv-selected")
    assert page.evaluate(ROW_VISIBLE, 3001)  # nothing folds here: row 3001 is scrolled to
    assert page.locator(".pv-minimap").is_visible()
    # a click near the top of the overview brings the first blocks into view
    box = page.locator(".pv-minimap").bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + 2)
    assert any(page.evaluate(ROW_VISIBLE, v) for v in range(0, 40))
    assert not page.evaluate(ROW_VISIBLE, 3001)
    # ... and at 3001/4096 of its height, block 3001 again
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] * (3001.5 / 4096))
    assert any(page.evaluate(ROW_VISIBLE, v) for v in range(2990, 3012))
    # n / N visit the error cells (the grid keeps the key)
    page.locator(".pv-scroller").focus()
    page.keyboard.press("n")
    page.wait_for_selector("text=Events of block (3001)")
    page.screenshot(path=artifact("html-4096-blocks.png"))
    page.close()
    assert not errors


@pytest.mark.browser
def test_keyboard_only_from_the_first_finding_to_the_source_line(playwright_browser,
                                                                  large_html):
    page, errors = _page(playwright_browser, large_html)
    # Tab until the findings list has the focus; Escape clears, arrows and Enter select
    for _ in range(40):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.classList.contains('pv-finding')"):
            break
    assert page.evaluate("document.activeElement.classList.contains('pv-finding')")
    page.keyboard.press("Escape")
    assert page.locator(".pv-finding.pv-selected").count() == 0
    page.keyboard.press("ArrowDown")
    sel = page.locator(".pv-finding.pv-selected")
    assert sel.count() == 1 and sel.get_attribute("aria-selected") == "true"
    page.wait_for_selector(".pv-why:has-text('partial collective')")
    assert "collective_axes=\"w\"" in page.inner_text(".pv-line-hit")
    # Tab on to the grid; arrows move, Enter lists the cell's events; Enter on a row shows its line
    for _ in range(40):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.classList.contains('pv-scroller')"):
            break
    page.keyboard.press("Home")
    page.keyboard.press("Enter")
    page.wait_for_selector(".pv-events .pv-ev")
    for _ in range(60):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.classList.contains('pv-ev')"):
            break
    page.keyboard.press("Enter")
    page.wait_for_selector(".pv-why:has-text('event')")
    assert page.locator(".pv-line-hit").count() == 1
    # screen readers get the grid as a table of rows x threads
    table = page.locator("table.pv-a11y-grid")
    assert "never made the request" in table.inner_text()
    assert table.locator("th[scope=col]").count() == 3
    page.close()
    assert not errors


DEUTAN = "0.367 0.861 -0.228 0 0  0.280 0.673 0.047 0 0  -0.012 0.043 0.969 0 0  0 0 0 1 0"
PROTAN = "0.152 1.053 -0.205 0 0  0.115 0.786 0.099 0 0  -0.004 -0.048 1.052 0 0  0 0 0 1 0"


def _lab(rgb):
    """CIE L*a*b* of an sRGB triple (D65)."""
    def lin(c):
        c /= 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (lin(float(x)) for x in rgb)
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t):
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116
    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


@pytest.mark.browser
@pytest.mark.parametrize("kind,matrix", [("deuteranopia", DEUTAN), ("protanopia", PROTAN)])
def test_colour_vision_simulation_keeps_error_and_clean_apart(playwright_browser, large_html,
                                                              kind, matrix):
    """The page through a colour-blindness matrix (Machado et al. 2009, severity 1.0): the
    error and clean cells stay far apart (CIE76 distance), and the markers are >= 10 px."""
    import io

    from PIL import Image

    page, errors = _page(playwright_browser, large_html)
    page.evaluate("""(m) => {
      const ns = 'http://www.w3.org/2000/svg';
      const svg = document.createElementNS(ns, 'svg');
      svg.setAttribute('width', 0); svg.setAttribute('height', 0);
      svg.innerHTML = `<filter id="cvd" color-interpolation-filters="linearRGB">
        <feColorMatrix type="matrix" values="${m}"/></filter>`;
      document.body.appendChild(svg);
      document.documentElement.style.filter = 'url(#cvd)';
    }""", matrix)
    page.wait_for_timeout(100)
    shot = Image.open(io.BytesIO(page.screenshot())).convert("RGB")
    box = page.locator(".pv-scroller").bounding_box()

    def px(v, t):
        x, y = page.evaluate(CELL_PX, [v, t])
        return shot.getpixel((int(box["x"] + x), int(box["y"] + y)))
    err, clean = px(1, 0), px(0, 0)  # block 41 w 0 (error), blocks 0..40 (joined collective)
    lab_e, lab_c = _lab(err), _lab(clean)
    dist = sum((a - b) ** 2 for a, b in zip(lab_e, lab_c)) ** 0.5
    shot.save(artifact(f"cvd-{kind}.png"))
    assert dist >= 20, (kind, err, clean, dist)
    # the legend's error and clean swatches too
    sw = page.evaluate("""() => [...document.querySelectorAll('.pv-legend .pv-swatch')].map((s) => {
      const r = s.getBoundingClientRect();
      return [s.className, r.x + r.width / 2, r.y + r.height / 2, r.width, r.height]; })""")
    by = {c.split()[-1]: (x, y, w, hh) for c, x, y, w, hh in sw}
    assert all(w >= 10 and hh >= 10 for *_, w, hh in by.values())
    e = _lab(shot.getpixel((int(by["pv-l-error"][0]) - 6, int(by["pv-l-error"][1]) + 5)))
    c = _lab(shot.getpixel((int(by["pv-l-clean"][0]) - 6, int(by["pv-l-clean"][1]) + 5)))
    assert sum((a - b) ** 2 for a, b in zip(e, c)) ** 0.5 >= 15
    page.close()
    assert not errors


@pytest.mark.browser
def test_replay_skips_operands_has_a_legend_and_does_not_jump(playwright_browser, large_html):
    page, errors = _page(playwright_browser, large_html)
    bar = page.locator(".pv-replay")
    h0 = bar.bounding_box()["height"]
    n = int(page.get_attribute("input.pv-slider", "max"))
    assert n == 280 - 20  # the 20 kernel-operand events are not steps of the grid
    page.click("text=|◀")
    page.click("text=1 ▶")
    assert page.inner_text(".pv-steplabel") == f"step 1 / {n}"
    assert "block (" in page.inner_text(".pv-stepevent")
    assert page.locator(".pv-replay-legend").is_visible()
    assert bar.bounding_box()["height"] == h0
    page.uncheck(".pv-check input")
    assert int(page.get_attribute("input.pv-slider", "max")) == 280
    page.select_option(".pv-speed", "16")
    # Escape leaves the replay for the totals
    page.locator(".pv-scroller").focus()
    page.keyboard.press("Escape")
    page.keyboard.press("Escape")
    assert page.get_attribute(".pv-mode", "aria-pressed") == "false"
    for th in page.locator(".pv-table th").all():
        assert th.get_attribute("title")
    for el in page.locator(".pv-chip, .pv-legend-item, .pv-badge").all():
        assert el.get_attribute("title"), el.inner_text()
    # the kernel operands are a row like any other
    page.click(".pv-operand-row")
    page.wait_for_selector("text=Kernel operands of kernel 0")
    assert page.locator(".pv-events .pv-ev").count() == 20
    page.close()
    assert not errors


def test_the_static_snapshot_names_every_cell_and_keeps_its_code_readable():
    # (review N: it listed the first 6 cells with no "and N more", said "made it" of a
    # budget's blocks, and drew the code line in the theme's text colour, white in a dark
    # theme, on its fixed cream background)
    from pallas_viz.cells import describe_cells
    from pallas_viz.examples import budget
    from pallas_viz.examples import shapes as sh
    from pallas_viz.render.html import static_snapshot

    fn, args = sh.launch(sh.collective_in_branch, "grid3", num_threads=4)
    tr, _ = sh.run_traced(fn, args)
    (f,) = tr.errors
    missing = {c for c, _ in f.missing}
    made = [c for c in f.cells if c not in missing]
    assert made and len(missing) > 6
    axis = tr.kernels[f.kernel].thread_axis or "thread"
    text = static_snapshot(tr)
    assert f"made it:</span> <code>{describe_cells(made, axis)}</code>" in text, text
    assert f"never did:</span> <code>{describe_cells(missing, axis)}</code>" in text, text
    assert "background: #fbefd6; color: #24292e;" in text
    fn, args = budget.smem_over_by_alignment()
    with pv.trace(raise_errors=False) as tr:
        fn(*args)
    assert [f.kind for f in tr.errors] == ["smem_over_budget"], tr.summary()
    text = static_snapshot(tr)
    assert "where:</span>" in text and "made it" not in text, text


def test_views_look_up_lines_without_snippets_in_one_pass(monkeypatch):
    # (review S: each line without a stored snippet walked every location of the trace
    # again: a 920 KB trace file of 512 such lines took 104 s to export)
    from pallas_viz import snippets
    from pallas_viz.examples import shapes as sh
    fn, args = sh.launch(sh.collective_in_branch, "grid3")
    tr, _ = sh.run_traced(fn, args)
    tr.snippets = {}  # as in a file that stores none: every line is looked up the long way
    calls = []
    real = snippets.locations
    monkeypatch.setattr(snippets, "locations", lambda t: calls.append(1) or real(t))
    html_document(tr)  # (one pass lists the lines, one indexes them)
    n = len({(loc.file, loc.line) for loc in real(tr)})
    assert n >= 3 and len(calls) <= 2, (n, len(calls))
