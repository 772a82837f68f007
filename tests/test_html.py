"""The self-contained HTML export: offline, escaped, and interactive in a real browser."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest
from browser_util import artifact, launch_chromium, require_chromium

from pallas_viz.model import Finding, KernelInfo, SourceLocation
from pallas_viz.render.html import html_document, write_html
from pallas_viz.store import COLUMNS, OP_CODE, RESOURCE_CODE, SPACE_CODE, EventTable
from pallas_viz.trace import Trace

EVIL = "</script><script>alert(1)</script><img src=x onerror=alert(2)>"


def _embedded(doc: str, name: str = "data") -> dict:
    m = re.search(rf'<script type="application/json" id="pallas-viz-{name}">(.*?)</script>',
                  doc, re.S)
    return json.loads(m.group(1))


def _hostile_trace(tmp_path) -> Trace:
    """One block, two threads: a collective SMEM buffer only thread 0 requests, with a
    source file and code line full of markup."""
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


def _browser():
    require_chromium()
    from playwright.sync_api import sync_playwright

    return sync_playwright()


def _open(p, path):
    b = launch_chromium(p)
    page = b.new_page(viewport={"width": 1280, "height": 1000})
    errors, dialogs = [], []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:")
               else (errors.append("network: " + r.request.url), r.abort()))
    page.goto(path.as_uri())
    page.wait_for_selector(".pv-finding")
    return b, page, errors, dialogs


@pytest.mark.browser
def test_hostile_text_in_the_browser(tmp_path):
    path = tmp_path / "evil.html"
    write_html(_hostile_trace(tmp_path), path)
    with _browser() as p:
        b, page, errors, dialogs = _open(p, path)
        page.wait_for_selector(".pv-line-hit")
        page.wait_for_selector(".pv-ev")
        assert page.inner_text(".pv-finding .pv-msg") == "only thread 0 " + EVIL
        assert page.inner_text(".pv-line-hit .pv-text") == "    # " + EVIL
        assert EVIL in page.inner_text(".pv-events")  # the dtype column
        assert page.locator("img").count() == 0
        b.close()
    assert not dialogs and not errors


@pytest.mark.browser
def test_export_is_interactive(example_traces, tmp_path):
    tr = example_traces["collective_in_branch"]
    path = tmp_path / "t.html"
    write_html(tr, path)
    with _browser() as p:
        b, page, errors, dialogs = _open(p, path)
        # the first error finding is selected, its source line shown, its cell's events listed
        first = tr.errors[0]
        assert "pv-selected" in page.get_attribute(".pv-finding >> nth=0", "class")
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
        # replay: step back to the start, then forward to thread 0's create in block (0)
        page.click("text=|◀")
        create = next(e.seq for e in tr.events if e.block is not None and e.op == "create")
        for _ in range(create + 1):
            page.keyboard.press("]")
        assert page.inner_text(".pv-steplabel") == f"step {create + 1} / {len(tr.events)}"
        assert "create SMEM buffer" in page.inner_text(".pv-stepevent")
        page.screenshot(path=artifact("html_export.png"), full_page=True)
        b.close()
    assert not errors and not dialogs
