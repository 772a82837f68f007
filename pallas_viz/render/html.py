"""One self-contained HTML file: the widget's bundle, its CSS and the trace, inline.

The page needs no network: binary columns are embedded in base64, and a small
model shim (js/standalone.js) answers the widget's detail requests from data in
the file (extra columns, string tables and pre-read source snippets).

Two JSON documents: `#pallas-viz-data` with what the first grid draw needs (metadata,
cells, the per-event columns the grid counts, string tables, snippets) and
`#pallas-viz-more` with the rest (replay/tooltip columns, event details), which the page
parses only when first needed.
"""

from __future__ import annotations

import base64
import html
import json
import os
import re

from ..analysis.repeats import root_groups
from ..cells import describe_cells, ranges
from ..snippets import locations
from . import payload
from .inert import html_text, one_line
from .source_names import snippet
from .widget import STATIC

_PAGE_CSS = """
:root { color-scheme: light dark; }
html, body { margin: 0; background: var(--jp-layout-color0, #fff); }
body { padding: 18px; }
.pv-page-foot { font: 12px system-ui, sans-serif; color: var(--jp-ui-font-color2, #6a737d);
  margin-top: 10px; }
@media (prefers-color-scheme: dark) {
  :root { --jp-layout-color0: #16181d; --jp-layout-color1: #1d2027; --jp-layout-color2: #2a2e37;
    --jp-ui-font-color1: #e6e8ec; --jp-ui-font-color2: #9aa3ae; --jp-border-color2: #333944;
    --jp-brand-color1: #5b9bff; }
}
"""


# Per-event columns the first grid draw reads (js/data.js `cellCounts`); the others wait.
FIRST_PAINT_COLUMNS = ("cell", "warp")


def _b64(buffers: dict) -> dict:
    return {k: base64.b64encode(bytes(v)).decode("ascii") for k, v in buffers.items()}


def _script_json(obj) -> str:
    """JSON safe inside <script>: no `<`, `>`, `&` or line separators in the raw text."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _script_js(code: str) -> str:
    """A JS bundle safe inside an inline <script> element."""
    return re.sub(r"<(/?)(script|!--)", lambda m: "\\x3c" + m.group(1) + m.group(2), code,
                  flags=re.IGNORECASE)


def _style_css(code: str) -> str:
    return re.sub(r"</(style)", r"\\3c/\1", code, flags=re.IGNORECASE)


def _snippets(trace) -> dict:
    """The stored code around every line the trace names (never read from disk here)."""
    out = {}
    for loc in locations(trace):
        key = f"{loc.file}:{loc.line}"
        if key not in out:
            out[key] = snippet(trace, loc.file, loc.line)
    return out


def _asset(name: str) -> str:
    path = STATIC / name
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: build the front end (cd js && npm install && npm run build, "
            "or pip install -e .)")
    return path.read_text(encoding="utf-8")


def html_document(trace, title: str | None = None) -> str:
    """The whole page as a string."""
    state = payload.build_state(trace)
    columns = _b64(state["columns"])
    details, detail_types = payload.detail_columns(trace)
    state["meta"]["protocol"]["detail_types"] = detail_types
    state["meta"]["inline_details"] = True
    doc = {
        "state": {"meta": state["meta"],
                  "columns": {k: columns[k] for k in FIRST_PAINT_COLUMNS},
                  "cells": _b64(state["cells"])},
        "tables": payload.string_tables(trace),
        "snippets": _snippets(trace),
    }
    more = {
        "columns": {k: v for k, v in columns.items() if k not in FIRST_PAINT_COLUMNS},
        "details": _b64(details),
    }
    title = title or f"pallas_viz trace: {len(trace.kernels)} kernel(s), {len(trace.events)} events"
    css = _asset("widget.css")
    js = _asset("standalone.js")
    summary = trace.summary()
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>{html.escape(one_line(title))}</title>\n"
        f"<style>{_style_css(css)}{_PAGE_CSS}</style>\n</head>\n<body>\n"
        "<div id=\"pallas-viz-root\"></div>\n"
        "<noscript><pre>" + html.escape(summary) + "</pre></noscript>\n"
        "<div class=\"pv-page-foot\">Exported by pallas_viz: hover a cell for its numbers, "
        "click it for its events; arrow keys move, Enter selects, [ and ] step the replay."
        "</div>\n"
        "<script type=\"application/json\" id=\"pallas-viz-data\">" + _script_json(doc)
        + "</script>\n"
        "<script type=\"application/json\" id=\"pallas-viz-more\">" + _script_json(more)
        + "</script>\n<script>" + _script_js(js) + "</script>\n</body>\n</html>\n"
    )


def write_html(trace, path: str | os.PathLike, title: str | None = None) -> str:
    """Write the trace as one self-contained HTML file; returns the path.

    Atomic: a failed write leaves any old file untouched and raises `OutputError`.
    """
    from ..fileio import atomic_write_text

    return atomic_write_text(path, html_document(trace, title))


def static_snapshot(trace, png_b64: str | None = None) -> str:
    """A script-free HTML rendering of the widget's first screen: the verdict, the first root
    cause (its blocks and threads, message, branch, fix), the offending line with a caret, and
    the PNG. It is the widget bundle's `text/html`, what front ends without the live widget
    show (nbconvert, GitHub, an untrusted notebook)."""
    esc = html_text
    errors = [f for f in trace.findings if f.severity == "error"]
    warnings = [f for f in trace.findings if f.severity != "error"]
    verdict = (f"{len(errors)} error(s), {len(warnings)} warning(s)" if trace.findings
               else "clean")
    parts = ["<div class=\"pv-static\" style=\"font-family: system-ui, sans-serif; "
             "font-size: 13px; border: 1px solid #ccc; border-radius: 8px; padding: 8px 12px;\">",
             f"<div><b>pallas_viz</b> · {esc(verdict)} · {len(trace.events)} events · "
             f"{len(trace.kernels)} kernel run(s)</div>"]
    if trace.failure is not None:
        fl = trace.failure
        what = "Tracing" if fl.phase == "trace" else "The run"
        parts.append(f"<div style=\"color: #cc79a7;\"><b>{what} failed:</b> "
                     f"{esc(fl.type)}: {esc(fl.message)}</div>")
    if trace.findings:
        f = errors[0] if errors else trace.findings[0]
        missing = {c for c, _ in f.missing}
        skipped = [c for c in f.cells if c in missing]
        made = [c for c in f.cells if c not in missing]
        # (the widget's labels: "made it" beside those who never did, else "where")
        cells = {key: describe_cells(group, _axis(trace, f.kernel)) for key, group in (
            ("made it" if skipped else "where", made), ("never did", skipped)) if group}
        colour = "#d55e00" if f.severity == "error" else "#e69f00"
        parts.append(f"<div style=\"margin-top: 6px; border-left: 4px solid {colour}; "
                     "padding-left: 8px;\">"
                     f"<div><b>{'●' if f.severity == 'error' else '▲'} "
                     f"{esc(f.kind.replace('_', ' '))}</b>"
                     + (f" <code>{esc(_where(f.source))}</code>" if f.source else "") + "</div>")
        for key, text in cells.items():
            parts.append(f"<div><span style=\"color: #6a737d;\">{key}:</span> "
                         f"<code>{esc(text)}</code></div>")
        parts.append(f"<div>{esc(f.message)}</div>")
        if f.source is not None and f.source.via is not None:
            v = f.source.via
            parts.append(f"<div><b>called from:</b> <code>{esc(_where(v))} "
                         f"{esc((v.code or '').strip())}</code></div>")
        if f.branch is not None:
            parts.append(f"<div><b>{esc(f.branch_label)}:</b> <code>{esc(_where(f.branch))} "
                         f"{esc((f.branch.code or '').strip())}</code></div>")
        if f.source is not None and f.source.code:
            code = f.source.code
            col = f.source.column
            caret = (" " * col + "^") if col is not None and 0 <= col < len(code) else ""
            # (its own text colour: the theme's may be light, on this fixed background)
            parts.append("<pre style=\"white-space: pre-wrap; background: #fbefd6; "
                         "color: #24292e; padding: 4px "
                         f"6px; margin: 4px 0;\">{esc(code)}" + (f"\n{esc(caret)}" if caret else "")
                         + "</pre>")
        if f.suggestion:
            parts.append(f"<div><b>fix:</b> {esc(f.suggestion)}</div>")
        groups = root_groups(trace.findings, trace.kernels)
        runs = next([trace.findings[i].kernel for i in g] for g in groups
                    if trace.findings[g[0]] is f)
        if len(runs) > 1:
            parts.append(f"<div style=\"color: #6a737d;\">in kernel runs {esc(ranges(runs))}"
                         " (the same root cause in each: a kernel called in a loop)</div>")
        if len(groups) > 1:
            parts.append(f"<div style=\"color: #6a737d;\">and {len(groups) - 1} more "
                         "root cause(s)</div>")
        parts.append("</div>")
    if png_b64:
        parts.append("<img alt=\"blocks x threads grid\" "
                     "style=\"max-width: 100%; margin-top: 6px;\" "
                     f"src=\"data:image/png;base64,{png_b64}\">")
    parts.append("<div style=\"color: #6a737d; font-size: 11px;\">Static view: run the cell "
                 "for the interactive widget.</div></div>")
    return "".join(parts)


def _where(loc) -> str:
    from .source_names import describe_location

    return describe_location(loc.file, loc.line)


def _axis(trace, kernel) -> str:
    k = None if kernel is None else trace.kernel_info(kernel)
    return (k.thread_axis if k is not None else None) or "thread"
