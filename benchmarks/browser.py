"""Front-end timings in headless Chromium (Playwright), measured with `performance.now()`.

A synthetic trace of 1,024 blocks x 16 threads (about 1M events, with a leak finding)
is exported with `pallas_viz.render.html.write_html` and opened from disk. Timings:

* first paint: from the page script's start (its first large `JSON.parse`, the embedded
  data) to the end of the first grid draw on the canvas; also reported from navigation
  start (which includes reading the large HTML file) and up to the next animation frame.
* click to source panel: `click()` on a finding (the source panel emptied first) until
  the panel shows its line (a MutationObserver); the next animation frame is reported too.
* replay step: `click()` on "1 ▶" until the grid is redrawn (synchronous; the next
  animation frame is reported too).
* timeline first paint: on a fresh page once the grid is painted, `click()` on the
  "Timeline" tab until the pane has drawn its block (the first root cause's: live-memory
  curve, lanes, the buffers live at the peak; the `data-lanes` attribute its draw sets),
  and to the next animation frame; on the same trace, and on one of as many events in a
  single block of 16 threads (the pane's worst case: every hold in the lanes it draws).
"""

from __future__ import annotations

import os
import statistics

CHROMIUM = "/usr/bin/chromium"

_INIT = """
(() => {
  const pv = window.__pv = { scriptStart: null, parseEnd: null, drawStart: null, drawEnd: null,
                             frame: null };
  const parse = JSON.parse;
  JSON.parse = function (s, ...rest) {
    const big = pv.scriptStart === null && typeof s === "string" && s.length > 100000;
    if (big) pv.scriptStart = performance.now();
    const out = parse.call(this, s, ...rest);
    if (big) pv.parseEnd = performance.now();
    return out;
  };
  const fillRect = CanvasRenderingContext2D.prototype.fillRect;
  CanvasRenderingContext2D.prototype.fillRect = function (...a) {
    if (pv.drawStart === null && this.canvas.classList.contains("pv-canvas")) {
      pv.drawStart = performance.now();
      queueMicrotask(() => { pv.drawEnd = performance.now(); });
      requestAnimationFrame(() => { pv.frame = performance.now(); });
    }
    return fillRect.apply(this, a);
  };
})();
"""

_CLICK_FINDING = """
async (i) => {
  const items = document.querySelectorAll(".pv-finding");
  const el = items[i % items.length];
  const pane = document.querySelector(".pv-source");
  pane.replaceChildren();  // so that re-showing the same line counts as a change
  const before = pane.innerHTML;
  let done;
  const changed = new Promise((r) => { done = r; });
  const obs = new MutationObserver(() => {
    if (pane.querySelector(".pv-line-hit") && pane.innerHTML !== before) done(performance.now());
  });
  obs.observe(pane, { childList: true, subtree: true, characterData: true });
  const t0 = performance.now();
  el.click();
  const tSync = performance.now();
  const tShown = await Promise.race([changed, new Promise((r) => setTimeout(() => r(null), 5000))]);
  obs.disconnect();
  const tFrame = await new Promise((r) => requestAnimationFrame(() => r(performance.now())));
  return { sync: tSync - t0, shown: tShown === null ? null : tShown - t0, frame: tFrame - t0 };
}
"""

_STEP = """
async () => {
  const btn = [...document.querySelectorAll(".pv-replay button")].find(
    (b) => b.textContent.trim() === "1 ▶");
  const t0 = performance.now();
  btn.click();
  const t1 = performance.now();
  const tFrame = await new Promise((r) => requestAnimationFrame(() => r(performance.now())));
  return { sync: t1 - t0, frame: tFrame - t0 };
}
"""

_TIMELINE = """
async () => {
  const tab = document.querySelector(".pv-tab-timeline");
  const drawn = () => {
    const el = document.querySelector(".pv-timeline");
    return !!(el && el.dataset.lanes);
  };
  let done;
  const seen = new Promise((r) => { done = r; });
  const obs = new MutationObserver(() => { if (drawn()) done(performance.now()); });
  obs.observe(document.body, { attributes: true, subtree: true, attributeFilter: ["data-lanes"] });
  const t0 = performance.now();
  tab.click();
  const tSync = performance.now();
  const late = new Promise((r) => setTimeout(() => r(null), 10000));
  const tShown = drawn() ? tSync : await Promise.race([seen, late]);
  obs.disconnect();
  const tFrame = await new Promise((r) => requestAnimationFrame(() => r(performance.now())));
  const el = document.querySelector(".pv-timeline");
  const lanes = JSON.parse(el.dataset.lanes || "[]");
  return { sync: tSync - t0, shown: tShown === null ? null : tShown - t0, frame: tFrame - t0,
           row: +el.dataset.row, lanes_drawn: lanes.length,
           bars_drawn: lanes.reduce((s, l) => s + l.bars, 0),
           peak_rows: document.querySelectorAll(".pv-peak-row").length };
}
"""

_SEEK_MIDDLE = """
() => {
  const s = document.querySelector(".pv-slider");
  s.value = String(Math.floor(+s.max / 2));
  s.dispatchEvent(new Event("input"));
  return +s.value;
}
"""


def grid_trace(n_events: int, threads: int = 16, blocks: int = 1024):
    """A Trace of `blocks` x `threads` cells with about `n_events` events and a leak."""
    from benchmarks.synthetic import _template, synthetic_table
    from pallas_viz.analysis import analyse
    from pallas_viz.model import KernelInfo
    from pallas_viz.trace import Trace

    per_iter = len(_template(threads, 1, None).rows)
    iters = max(1, round(n_events / blocks / per_iter))
    per_block = len(_template(threads, iters, "leak").rows)
    table = synthetic_table(per_block * blocks, kernels=((threads, iters, 1.0, "leak"),))
    kernels = [KernelInfo(0, "grid_kernel", None, 1, threads, 1)]
    return Trace(table, kernels, analyse(table, kernels))


def _med(xs):
    xs = [x for x in xs if x is not None]
    return float(statistics.median(xs)) if xs else float("nan")


def _timeline_runs(browser, path: str, reps: int) -> list[dict]:
    """The timeline pane's first paint, on a fresh page each time once its grid is painted."""
    out = []
    for _ in range(reps):
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.add_init_script(_INIT)
        page.goto("file://" + path, wait_until="load", timeout=120_000)
        page.wait_for_function("window.__pv && window.__pv.frame !== null", timeout=120_000)
        page.wait_for_timeout(300)  # idle work after the first paint settles
        out.append(page.evaluate(_TIMELINE))
        page.close()
    return out


def bench_browser(n_events: int, reps: int, out_dir: str) -> dict:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:
        return {"measured": False, "reason": f"playwright unavailable ({e})"}
    try:
        from pallas_viz.render.html import write_html
    except ImportError as e:
        return {"measured": False, "reason": f"pallas_viz.render.html unavailable ({e})"}
    if not os.path.exists(CHROMIUM):
        return {"measured": False, "reason": f"no Chromium at {CHROMIUM}"}
    import tempfile

    trace = grid_trace(n_events)
    tmp = tempfile.mkdtemp(prefix="pv-bench-")
    path = os.path.join(tmp, "trace.html")
    write_html(trace, path)
    size = os.path.getsize(path)
    paint, paint_nav, paint_frame, parse, to_draw = [], [], [], [], []
    clicks, steps = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            for rep in range(reps):
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.add_init_script(_INIT)
                page.goto("file://" + path, wait_until="load", timeout=120_000)
                page.wait_for_function("window.__pv && window.__pv.frame !== null",
                                       timeout=120_000)
                pv = page.evaluate("window.__pv")
                paint.append(pv["drawEnd"] - pv["scriptStart"])
                paint_nav.append(pv["drawEnd"])
                paint_frame.append(pv["frame"] - pv["scriptStart"])
                parse.append(pv["parseEnd"] - pv["scriptStart"])
                to_draw.append(pv["drawStart"] - pv["parseEnd"])
                if rep == 0:
                    n_find = page.evaluate("document.querySelectorAll('.pv-finding').length")
                    for i in range(10):
                        clicks.append(page.evaluate(_CLICK_FINDING, i))
                    page.evaluate(_SEEK_MIDDLE)
                    page.wait_for_timeout(50)
                    for _ in range(30):
                        steps.append(page.evaluate(_STEP))
                page.close()
            timeline = _timeline_runs(browser, path, reps)
            os.remove(path)
            # the worst case for the pane: all the events in one block (16 threads)
            one = grid_trace(n_events, blocks=1)
            one_events = len(one.events)
            write_html(one, path)
            del one
            timeline_one = _timeline_runs(browser, path, reps)
        finally:
            browser.close()
    os.remove(path)
    os.rmdir(tmp)
    click_shown = [c["shown"] for c in clicks]
    return {
        "measured": True,
        "events": len(trace.events),
        "cells": f"{len({b for b in trace.events.blocks if b != ()})} blocks x 16 threads",
        "html_bytes": size,
        "reps": reps,
        "first_paint_ms": _med(paint),
        "first_paint_runs_ms": paint,
        "first_paint_from_navigation_ms": _med(paint_nav),
        "first_paint_next_frame_ms": _med(paint_frame),
        "first_paint_json_parse_ms": _med(parse),
        "first_paint_parse_end_to_draw_start_ms": _med(to_draw),
        "findings_in_page": n_find,
        "click_to_source_ms": _med(click_shown),
        "click_to_source_next_frame_ms": _med([c["frame"] for c in clicks]),
        "click_runs": clicks,
        "replay_step_ms": _med([s["sync"] for s in steps]),
        "replay_step_next_frame_ms": _med([s["frame"] for s in steps]),
        "replay_runs": steps,
        "timeline_first_paint_ms": _med([t["shown"] for t in timeline]),
        "timeline_first_paint_next_frame_ms": _med([t["frame"] for t in timeline]),
        "timeline_runs": timeline,
        "timeline_one_block_events": one_events,
        "timeline_first_paint_one_block_ms": _med([t["shown"] for t in timeline_one]),
        "timeline_first_paint_one_block_next_frame_ms": _med([t["frame"] for t in timeline_one]),
        "timeline_one_block_runs": timeline_one,
        "notes": (
            "First paint counts from the page script's start (its JSON.parse of the "
            "embedded data) to the end of the first grid draw; from navigation start, "
            f"including reading the {size / 2**20:.0f} MiB HTML file: "
            f"{_med(paint_nav):.0f} ms; to the next animation frame: "
            f"{_med(paint_frame):.0f} ms. Of the first paint, JSON.parse of the embedded "
            f"document takes {_med(parse):.0f} ms and decoding + layout until the draw starts "
            f"{_med(to_draw):.0f} ms. Click to source: until the source panel shows the "
            f"finding's line (next frame: {_med([c['frame'] for c in clicks]):.1f} ms). "
            "Replay step: the synchronous seek + redraw (next frame: "
            f"{_med([s['frame'] for s in steps]):.1f} ms). Timeline first paint: a click "
            "on the Timeline tab of a freshly painted page until the pane has drawn its "
            "block (curve, visible lanes, buffers at the peak; next frame: "
            f"{_med([t['frame'] for t in timeline]):.1f} ms; "
            f"{timeline[0]['lanes_drawn']} lanes and {timeline[0]['bars_drawn']} bars "
            f"drawn, {timeline[0]['peak_rows']} buffers listed at the peak). Its worst case, "
            f"all {one_events:,} events in one block of 16 threads: "
            f"{_med([t['shown'] for t in timeline_one]):.1f} ms (next frame: "
            f"{_med([t['frame'] for t in timeline_one]):.1f} ms; "
            f"{timeline_one[0]['bars_drawn']:,} bars in the "
            f"{timeline_one[0]['lanes_drawn']} lanes in view)."),
    }
