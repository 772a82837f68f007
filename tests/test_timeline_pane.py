"""The widget's timeline pane: its payload (`meta.timeline`, computed by the timeline plot's
own helpers), its node unit tests, and the pane in Chromium (HTML export): one bar per hold
of `thread_holds` in each lane, barrier ticks, the limit line and the peak, a bar's click
showing its source line, the replay cursor."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time

import numpy as np
import pytest
from browser_util import REPO, artifact, open_offline

from pallas_viz.analysis.budget import block_budgets
from pallas_viz.analysis.context import resolve_device
from pallas_viz.devices import get_device
from pallas_viz.render import payload
from pallas_viz.render.html import write_html
from pallas_viz.render.timeline import barrier_ops_of, live_memory, thread_holds

LABEL_W, RIGHT_PAD, LANE_PAD = 112, 10, 6  # js/views/timeline.js


def _arr(spec):
    return np.frombuffer(base64.b64decode(spec[1]), spec[0])


@pytest.fixture(scope="module")
def traces(example_traces):
    from conftest import run_traced

    import pallas_viz.examples.deadlock as dl

    out = dict(example_traces)
    out["arrive_after_block_exit"] = run_traced(dl.arrive_after_block_exit)
    return out


@pytest.mark.parametrize("name", ["collective_in_branch", "clean_collective",
                                  "arrive_after_block_exit"])
def test_payload_is_the_helpers_output(traces, name):
    tr = traces[name]
    state = payload.build_state(tr)
    tl = state["meta"]["timeline"]
    h = thread_holds(tr.events, tr.events.columns["block"] >= 0)
    np.testing.assert_array_equal(_arr(tl["holds"]["begin"]), h["begin"])
    np.testing.assert_array_equal(_arr(tl["holds"]["end"]), h["end"])
    dev = get_device(resolve_device(tr.meta.get("device"), tr.events))
    assert tl["device"]["smem_per_block"] == dev.smem_per_block
    index = payload.CellIndex(tr)
    live = live_memory(tr.events, device=dev)
    offs = _arr(tl["live"]["SMEM"]["offsets"])
    steps, values = _arr(tl["live"]["SMEM"]["steps"]), _arr(tl["live"]["SMEM"]["values"])
    peaks = _arr(tl["live"]["peaks"]).reshape(-1, 4)
    budgets = {(b.kernel, b.device, b.block): b for b in block_budgets(tr.events, tr.kernels,
                                                                          dev)}
    for r, key in enumerate(index.rows):
        s, v = live[key]["SMEM"]
        np.testing.assert_array_equal(steps[offs[r]:offs[r + 1]], s)
        np.testing.assert_array_equal(values[offs[r]:offs[r + 1]], v)
        k, d, b = key
        assert peaks[r, 0] == budgets[(k, d, tr.events.blocks[b])].smem.peak
    ops = barrier_ops_of(tr)
    assert tl["barriers"]["count"] == len(ops)
    assert list(_arr(tl["barriers"]["step"])) == [o["step"] for o in ops]


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
def test_node_layout_unit_tests():
    t0 = time.perf_counter()
    r = subprocess.run(["node", "--test", "tests/timeline.test.js"], cwd=REPO / "js",
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert time.perf_counter() - t0 < 60


def _expected_lanes(tr, row):
    """(thread, warp) -> number of holds `thread_holds` gives for block row `row`."""
    index = payload.CellIndex(tr)
    k, d, b = index.rows[row]
    c = tr.events.columns
    h = thread_holds(tr.events, c["block"] >= 0)
    want = {}
    for beg in h["begin"].tolist():
        if (c["kernel"][beg], c["device"][beg], c["block"][beg]) == (k, d, b):
            key = (int(c["thread"][beg]), int(c["warp"][beg]))
            want[key] = want.get(key, 0) + 1
    return index, want


@pytest.mark.browser
@pytest.mark.parametrize("name", ["collective_in_branch", "clean_collective",
                                  "arrive_after_block_exit"])
def test_timeline_pane_in_the_browser(playwright_browser, traces, tmp_path, name):
    tr = traces[name]
    path = tmp_path / f"{name}.html"
    write_html(tr, path)
    page, errors = open_offline(playwright_browser, path, viewport={"width": 1280, "height": 1100})
    page.wait_for_selector(".pv-finding, .pv-badge-clean")
    page.click(".pv-tab-timeline")
    page.wait_for_selector(".pv-timeline[data-lanes]")
    row = int(page.get_attribute(".pv-timeline", "data-row"))
    if tr.findings:  # the first root cause's block by default
        assert row == payload.build_state(tr)["meta"]["findings"][0]["rows"][0]
    lanes = json.loads(page.get_attribute(".pv-timeline", "data-lanes"))
    index, want = _expected_lanes(tr, row)
    got = {(ln["thread"], ln["warp"]): ln["bars"] for ln in lanes if ln["bars"]}
    assert got == want
    assert sum(got.values()) > 0
    # barrier operations of the block drawn as ticks (arrive) and waits
    k, d, bi = index.rows[row]
    ops = [o for o in barrier_ops_of(tr) if o["kernel"] == k and o["device"] == d
           and o["block"] == tr.events.blocks[bi] and o["kind"] != "wait_end"]
    assert sum(ln["ticks"] for ln in lanes) == len(ops)
    # the limit line and the peak, the peak the budget's
    curve = json.loads(page.get_attribute(".pv-timeline", "data-curve"))["smem"]
    dev = get_device(resolve_device(tr.meta.get("device"), tr.events))
    budget = next(x for x in block_budgets(tr.events, tr.kernels, dev)
                  if (x.kernel, x.device, x.block) == (k, d, tr.events.blocks[bi]))
    assert curve["limit"] == dev.smem_per_block
    assert curve["peak"] == budget.smem.peak  # the budget's peak, whichever block
    assert curve["limitY"] is not None
    # (the root's first block can be a cluster partner holding no SMEM of its own)
    assert (curve["peakX"] is not None) == (budget.smem.peak > 0)
    # the limit line is drawn in vermillion across the plot
    px = page.evaluate("""([y]) => {
        const c = document.querySelector('.pv-tl-curve');
        const r = devicePixelRatio;
        const d = c.getContext('2d').getImageData(0, Math.floor(y * r), c.width, 1).data;
        let red = 0;
        for (let i = 0; i < d.length; i += 4)
            if (d[i + 3] > 200 && d[i] > 150 && d[i + 2] < 100) red++;
        return red;
    }""", [curve["limitY"]])
    assert px > 100
    # click the first bar of the first lane with one: its request's line is shown
    lane = next(ln for ln in lanes if ln["bars"])
    c = tr.events.columns
    begin = next(x for x in thread_holds(tr.events, c["block"] >= 0)["begin"].tolist()
                 if (c["kernel"][x], c["device"][x], c["block"][x], c["thread"][x],
                     c["warp"][x]) == (k, d, bi, lane["thread"], lane["warp"]))
    v0, v1 = json.loads(page.get_attribute(".pv-timeline", "data-window"))
    box = page.locator(".pv-tl-lanes").bounding_box()
    pw = box["width"] - LABEL_W - RIGHT_PAD
    x = LABEL_W + (begin - v0) / max(1, v1 - v0) * pw + 1.5
    page.mouse.click(box["x"] + x, box["y"] + lane["y"] + LANE_PAD / 2 + 4)
    page.wait_for_selector(f".pv-timeline[data-selected='{begin}']")
    loc = tr.events.sources[int(c["source"][begin])]
    page.wait_for_selector(".pv-line-hit")
    assert page.inner_text(".pv-line-hit .pv-text") == loc.code
    assert f":{loc.line}" in page.inner_text(".pv-sourcepane .pv-srcname")
    # the replay cursor: a vertical line once replaying
    assert page.get_attribute(".pv-timeline", "data-cursor") == ""
    page.click("text=|◀")
    # the cursor shows once the replay reaches this block's window (the block shown
    # may start after other blocks' events: step until it does, at most to its end)
    for _ in range(v1 + 2):
        page.keyboard.press("]")
        if page.get_attribute(".pv-timeline", "data-cursor") != "":
            break
    page.wait_for_function(
        "document.querySelector('.pv-timeline').dataset.cursor !== ''")
    page.screenshot(path=artifact(f"timeline-{name}.png"), full_page=True)
    page.close()
    assert not errors


# Each of the Hopper matmul's 2 compute warpgroups (split along M) holds a (tile_m, tile_n)
# float32 accumulator in registers: 128 x 128 x 4 bytes.
REGS_ROW = ["(128, 128)", "float32", "64.0 KiB"]

@pytest.mark.browser
def test_buffers_at_the_peak_in_the_browser(playwright_browser, hopper, tmp_path):
    """The real Hopper matmul: under the timeline, the block's SMEM peak against the H100's
    227 KiB and its 7 live buffers (3 SMEM buffers, 4 barriers), largest first; clicking
    one selects its request and shows its line."""
    from pallas_viz.analysis.budget import peak_text

    tr = hopper
    path = tmp_path / "hopper.html"
    write_html(tr, path)
    index = payload.CellIndex(tr)
    by_key = {(b.kernel, b.device, b.block): b for b in tr.budget("h100")}
    page, errors = open_offline(playwright_browser, path, viewport={"width": 1280, "height": 1100})
    page.wait_for_selector(".pv-finding, .pv-badge-clean")
    # the selected cell's events name its block's peak and link to the list
    link = page.wait_for_selector(".pv-peak-link")
    assert link.inner_text() == (
        "SMEM peak 128.0 KiB / 227 KiB (56 %) at line 141 · 7 buffers live ›")
    link.click()
    page.wait_for_selector(".pv-peak[data-row] .pv-peak-row")
    row = int(page.get_attribute(".pv-peak", "data-row"))
    assert row == int(page.get_attribute(".pv-timeline", "data-row"))
    k, d, bi = index.rows[row]
    sp = by_key[(k, d, tr.events.blocks[bi])].smem
    # SMEM: 3 buffers, 4 barriers; REGS: the accumulators of the 2 compute warpgroups
    # (block (0, 0), selected first, computes one of the 2 output tiles)
    assert tr.events.blocks[bi] == (0, 0)
    assert json.loads(page.get_attribute(".pv-peak", "data-counts")) == {
        "SMEM": 7, "REGS": 2}
    regs = page.locator(".pv-peak-space[data-space='REGS']")
    assert regs.locator(".pv-peak-head").inner_text() == peak_text(
        by_key[(k, d, tr.events.blocks[bi])].regs, by_key[(k, d, tr.events.blocks[bi])].target)
    assert [[c.strip() for c in regs.locator(".pv-peak-row").nth(i).locator(
        "td").all_inner_texts()][:3] for i in range(2)] == [REGS_ROW] * 2
    rows = page.locator(".pv-peak-space[data-space='SMEM'] .pv-peak-row")
    assert rows.count() == len(sp.live) == 7
    assert all(rows.nth(i).is_visible() for i in range(7))
    head = page.inner_text(".pv-peak-head")
    assert head == peak_text(sp, by_key[(k, d, tr.events.blocks[bi])].target)
    assert head == "SMEM peak 128.0 KiB / 227 KiB (56 %) at line 141"
    cells = [[c.strip() for c in rows.nth(i).locator("td").all_inner_texts()]
             for i in range(7)]
    assert [c[:3] for c in cells] == [
        ["(2, 256, 64)", "float16", "64.0 KiB"], ["(2, 2, 64, 64)", "float16", "32.0 KiB"],
        ["(2, 64, 128)", "float16", "32.0 KiB"]] + [["barrier", "", "8 B"]] * 4
    assert {c[3] for c in cells} == {"hopper_matmul_mgpu.py:141"}
    events = [int(rows.nth(i).get_attribute("data-event")) for i in range(7)]
    assert events == [x.event for x in sp.live]
    # a row's click selects its request (its bar outlined) and shows its line
    rows.nth(1).click()
    page.wait_for_selector(f".pv-timeline[data-selected='{events[1]}']")
    page.wait_for_selector(".pv-peak-row.pv-peak-sel")
    assert page.get_attribute(".pv-peak-row.pv-peak-sel", "data-event") == str(events[1])
    page.wait_for_selector(".pv-line-hit")
    assert page.inner_text(".pv-line-hit .pv-text") == sp.live[1].source.code
    assert ":141" in page.inner_text(".pv-sourcepane .pv-srcname")
    page.locator(".pv-peak").screenshot(path=artifact("timeline-peak-hopper.png"))
    page.close()
    assert not errors
