"""`CompareWidget`: a trace diff as two grids side by side (before | after), each block x
thread cell coloured by the diff status `trace_diff` computed for it (fixed, still, new or
clean), a header "N root cause(s) fixed, M still, K new" and the root causes of each status
with their file:line. What `pv.diff(a, b)` shows in a notebook; `TraceDiff.to_html` writes
the same view to one offline page.

Nothing here decides a status: `compare_state` only encodes `KernelDiff.cell_status` (runs
of blocks whose cells have the same statuses and roots become one row) for the view
(js/views/compare.js).
"""

from __future__ import annotations

import html
import os

import anywidget
import traitlets

from ..cells import block_label
from ..trace_diff import CELL_STATUSES, GridStatus, KernelDiff, TraceDiff
from .inert import html_text
from .payload import FOLD_MIN_RUN
from .source_names import describe_location
from .widget import _bundle

VERSION = 2  # 2: cells carry their allocation change ids; kernels their `changes`
MARKS = {"clean": "", "fixed": "✓", "still": "●", "new": "✚"}
# static HTML colours (Okabe-Ito, as the widget's CSS): fill, border
_STATIC_COLORS = {"clean": ("#eef3f8", "#c9d6e3"), "fixed": ("#d2ede3", "#009e73"),
                  "still": ("#fbefd6", "#e69f00"), "new": ("#f7e1d3", "#d55e00")}


def headline(fixed: int, still: int, new: int) -> str:
    return f"{fixed} root cause{'' if fixed == 1 else 's'} fixed, {still} still, {new} new"


def _root(i: int, status: str, f) -> dict:
    s = f.source
    return {"id": i, "status": status, "kind": f.kind, "severity": f.severity,
            "message": f.message,
            "where": describe_location(s.file, s.line) if s is not None else "?",
            "file": None if s is None else s.file, "line": None if s is None else s.line,
            "function": None if s is None else s.function,
            "code": None if s is None or not s.code else s.code.strip()}


def _grid(g: GridStatus, k: KernelDiff) -> dict:
    """One side: runs of `FOLD_MIN_RUN` or more blocks whose cells have the same statuses,
    roots and allocation changes fold into one row; cells as [status code, root ids,
    change ids] (ids index the kernel's `roots` and `changes`)."""
    code = {s: n for n, s in enumerate(CELL_STATUSES)}
    multi_device = len({d for d, _ in g.rows}) > 1
    label = [(f"d{d} " if multi_device else "") + block_label(b) for d, b in g.rows]
    runs: list[dict] = []
    for r, (d, b) in enumerate(g.rows):
        cells = [[code[s], ids, k.changes_at(d, b, t)]
                 for t, (s, ids) in enumerate(zip(g.status[r], g.roots[r]))]
        if runs and runs[-1]["cells"] == cells:
            runs[-1]["rows"].append(label[r])
        else:
            runs.append({"rows": [label[r]], "cells": cells})
    runs = [{"first": rows[0], "last": rows[-1], "count": len(rows), "cells": run["cells"]}
            for run in runs
            for rows in ([run["rows"]] if len(run["rows"]) >= FOLD_MIN_RUN
                         else [[x] for x in run["rows"]])]
    return {"kernel": g.kernel, "name": g.name, "thread_axis": g.thread_axis or "thread",
            "threads": g.threads, "blocks": len(g.rows), "runs": runs, "counts": g.counts()}


def _kernel(k: KernelDiff) -> dict:
    return {"label": k.label, "status": k.status,
            "headline": headline(len(k.fixed), len(k.still), len(k.new)),
            "roots": [_root(i, st, f) for i, (st, f) in enumerate(k.roots())],
            "changes": [{"id": i, "change": ch.change, "text": ch.body()}
                        for i, ch in enumerate(k.allocations)],
            "sides": {side: _grid(g, k) if (g := k.cell_status.get(side)) else None
                      for side in ("before", "after")}}


def compare_state(d: TraceDiff) -> dict:
    """The compare widget's synced state (JSON only)."""
    return {"compare": {
        "version": VERSION, "statuses": list(CELL_STATUSES), "marks": MARKS,
        "counts": {"fixed": len(d.fixed), "still": len(d.still), "new": len(d.new),
                   "new_errors": len(d.new_errors)},
        "headline": headline(len(d.fixed), len(d.still), len(d.new)),
        "empty": d.empty,
        "kernels": [_kernel(k) for k in d.kernels],
    }}


class CompareWidget(anywidget.AnyWidget):
    """Before | after grids of a `TraceDiff` (the trace widget's bundle draws both)."""

    _esm = _bundle("widget.js")
    _css = _bundle("widget.css")
    data = traitlets.Any().tag(sync=True)
    snapshot_id = traitlets.Unicode("").tag(sync=True)  # see render.display

    def __init__(self, diff: TraceDiff, **kwargs):
        self._diff = diff
        super().__init__(data=compare_state(diff), **kwargs)

    @property
    def diff(self) -> TraceDiff:
        return self._diff

    def _repr_mimebundle_(self, **kwargs):
        from .display import widget_view

        view = widget_view(self, **kwargs)
        if view is None:
            return None
        data, meta = view
        data["text/plain"] = self._diff.summary()
        data["text/html"] = static_html(self._diff)
        return data, meta


def mimebundle(d: TraceDiff):
    """`TraceDiff._repr_mimebundle_`: the widget, or text and static HTML without one."""
    try:
        out = CompareWidget(d)._repr_mimebundle_()
        if out is not None:
            return out
    except Exception:  # noqa: BLE001 - display falls back to the static forms
        pass
    return {"text/plain": d.summary(), "text/html": static_html(d)}


# --------------------------------------------------------------------------- static HTML


def _static_grid(side: str, g: dict | None, roots: list[dict]) -> str:
    esc = html_text
    if g is None:
        return (f"<div><b>{side}</b><div style=\"color: #6a737d;\">the kernel does not run "
                "on this side</div></div>")
    out = [f"<div><b>{side}</b> <span style=\"color: #6a737d;\">{esc(g['name'] or '')} · "
           f"{g['blocks']} block(s) × {g['threads']} {esc(g['thread_axis'])}</span>",
           "<table style=\"border-collapse: separate; border-spacing: 2px; font-size: 11px;\">"
           "<tr><th></th>"]
    out += [f"<th>{esc(g['thread_axis'])} {t}</th>" for t in range(g["threads"])]
    out.append("</tr>")
    for run in g["runs"]:
        label = run["first"] if run["count"] == 1 else (
            f"{run['first']}..{run['last']} ×{run['count']}")
        out.append(f"<tr><th style=\"text-align: right; font-weight: normal;\">{esc(label)}</th>")
        for code, ids, _changes in run["cells"]:
            st = CELL_STATUSES[code]
            fill, border = _STATIC_COLORS[st]
            tip = "; ".join(f"{roots[i]['kind']} at {roots[i]['where']}" for i in ids)
            out.append(f"<td data-status=\"{st}\" title=\"{esc(st + (': ' + tip if tip else ''))}\""
                       f" style=\"background: {fill}; color: #24292e; border: 1px solid {border};"
                       " width: 28px;"
                       f" height: 18px; text-align: center;\">{MARKS[st]}</td>")
        out.append("</tr>")
    out.append("</table></div>")
    return "".join(out)


def static_html(d: TraceDiff) -> str:
    """A script-free rendering of the compare view (text/html for viewers without the
    widget): the counts, per kernel both grids and the root causes of each status."""
    esc = html_text
    state = compare_state(d)["compare"]
    parts = ["<div class=\"pv-static pv-compare-static\" style=\"font-family: system-ui, "
             "sans-serif; font-size: 13px; border: 1px solid #ccc; border-radius: 8px; "
             "padding: 8px 12px;\">",
             f"<div><b>pallas_viz diff</b> · {esc(state['headline'])}</div>"]
    if not state["kernels"]:
        parts.append("<div>no Pallas kernel ran in either trace</div>")
    for k in state["kernels"]:
        parts.append(f"<div style=\"margin-top: 8px;\"><b>{esc(k['label'])}</b>: "
                     f"{esc(k['headline'])}</div>")
        if k["sides"]["before"] or k["sides"]["after"]:
            parts.append("<div style=\"display: flex; gap: 24px; flex-wrap: wrap;\">"
                         + _static_grid("before", k["sides"]["before"], k["roots"])
                         + _static_grid("after", k["sides"]["after"], k["roots"]) + "</div>")
        for st in ("fixed", "still", "new"):
            for r in (r for r in k["roots"] if r["status"] == st):
                parts.append(f"<div>{MARKS[st]} {st}: {esc(r['severity'])}[{esc(r['kind'])}] "
                             f"<code>{esc(r['where'])}</code> {esc(r['message'])}</div>")
    parts.append("<div style=\"color: #6a737d; font-size: 11px;\">Static view: run the cell "
                 "for the interactive compare widget.</div></div>")
    return "".join(parts)


# --------------------------------------------------------------------------- HTML export


def html_document(d: TraceDiff, title: str | None = None) -> str:
    """One self-contained page: the widget's bundle, its CSS and the compare state."""
    from .html import _PAGE_CSS, _asset, _script_js, _script_json, _style_css

    title = title or f"pallas_viz diff: {compare_state(d)['compare']['headline']}"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>{html.escape(title)}</title>\n"
        f"<style>{_style_css(_asset('widget.css'))}{_PAGE_CSS}</style>\n</head>\n<body>\n"
        "<div id=\"pallas-viz-root\"></div>\n"
        "<noscript><pre>" + html.escape(d.summary()) + "</pre></noscript>\n"
        "<script type=\"application/json\" id=\"pallas-viz-data\">"
        + _script_json({"state": compare_state(d)}) + "</script>\n"
        "<script>" + _script_js(_asset("standalone.js")) + "</script>\n</body>\n</html>\n")


def write_html(d: TraceDiff, path: str | os.PathLike, title: str | None = None) -> str:
    """Write the compare view as one self-contained HTML file (atomic); returns the path."""
    from ..fileio import atomic_write_text

    return atomic_write_text(path, html_document(d, title))
