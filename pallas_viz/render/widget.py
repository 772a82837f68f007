"""`TraceWidget`: the interactive grid of a trace in Jupyter (anywidget)."""

from __future__ import annotations

import pathlib

import anywidget
import numpy as np
import traitlets
from anywidget.experimental import command

from . import payload
from .source_names import snippet

STATIC = pathlib.Path(__file__).resolve().parent.parent / "static"
MAX_ROWS_PER_REPLY = payload.MAX_ROWS_PER_REPLY


def _bundle(name: str) -> pathlib.Path | str:
    path = STATIC / name
    if path.exists():
        return path
    if name.endswith(".js"):
        return ("export default { render({ el }) { el.textContent = "
                "'pallas_viz: the widget bundle is missing; reinstall with "
                "pip install -e . (needs npm).'; } };")
    return ""


class TraceWidget(anywidget.AnyWidget):
    """Blocks x threads grid of a trace: findings, per-cell events, source lines, replay.

    The synced state carries everything the front end shows (`payload.front_end_state`):
    a restarted or dead kernel, or a notebook reopened with its widget state saved, still
    lists a cell's events and shows its lines. Only traces of more than
    `payload.INLINE_DETAILS_MAX_EVENTS` events fetch event details from Python, through
    anywidget commands (`events`, `source`) that the front end times out.
    """

    _esm = _bundle("widget.js")
    _css = _bundle("widget.css")
    data = traitlets.Any().tag(sync=True)
    # The `data-pv` of the static snapshot shown just before this widget (render.display):
    # front ends without JupyterLab's output area hide it from the widget's own code.
    snapshot_id = traitlets.Unicode("").tag(sync=True)

    def __init__(self, trace, **kwargs):
        trace.require_kernels("show a widget for")
        self._trace = trace
        self._index = payload.CellIndex(trace)
        super().__init__(data=payload.front_end_state(trace, self._index), **kwargs)

    @property
    def trace(self):
        return self._trace

    @command
    def events(self, msg, buffers):
        """anywidget command: one cell's event rows (`_answer` with type "events")."""
        return self._safe_answer({**(msg if isinstance(msg, dict) else {}), "type": "events"}), []

    @command
    def source(self, msg, buffers):
        """anywidget command: the stored lines around one line."""
        return self._safe_answer({**(msg if isinstance(msg, dict) else {}), "type": "source"}), []

    def _safe_answer(self, content) -> dict:
        try:
            return self._answer(content)
        except Exception as e:  # noqa: BLE001 - a comm handler must not raise
            rid = content.get("id") if isinstance(content, dict) else None
            return _error(None, _reply_id(rid),
                          f"cannot answer the request: {type(e).__name__}: {e}")

    def _handle_custom_msg(self, content, buffers=None) -> dict | None:
        """ipywidgets' hook for a front-end message: send the answer back, and return it.

        anywidget commands (`{"kind": "anywidget-command"}`) go to anywidget's handler;
        other messages are the older request form `{"type", "id", ...}`. Never raises: a
        malformed request, or a failure while answering it, gets a reply with an `error`
        field (see `_answer`).
        """
        if isinstance(content, dict) and content.get("kind") == "anywidget-command":
            try:
                super()._handle_custom_msg(content, buffers)
            except Exception:  # noqa: BLE001 - a comm handler must not raise
                pass
            return None
        try:
            reply = self._answer(content, buffers)
        except Exception as e:  # noqa: BLE001 - a comm handler must not raise
            rid = content.get("id") if isinstance(content, dict) else None
            reply = _error(None, _reply_id(rid),
                           f"cannot answer the request: {type(e).__name__}: {e}")
        try:
            self.send(reply)
        except Exception:  # noqa: BLE001 - a closed comm: nobody is listening
            pass
        return reply

    def _answer(self, content, buffers=None) -> dict:
        """Answer a front-end request: `{"type": "events"|"source", "id": ...}`.

        Every reply echoes `type` and `id`. A request that cannot be served gets an `error`
        string; an events or source error reply still has the fields the front end reads
        (empty `rows`, empty `lines`).
        """
        if not isinstance(content, dict):
            return _error(None, None, "a request must be a JSON object")
        rid = _reply_id(content.get("id"))
        kind = content.get("type")
        if kind == "events":
            return self._events(content, rid)
        if kind == "source":
            return self._source(content, rid)
        if kind is None:
            return _error(None, rid, "the request has no \"type\"")
        return _error(None, rid, f"unknown request type {str(kind)[:40]!r}")

    def _events(self, content: dict, rid) -> dict:
        if content.get("operands"):
            return self._operand_events(content, rid)
        n = self._index.num_cells
        cell = content.get("cell")
        reply = {"type": "events", "id": rid, "cell": cell if _is_int(cell) else None,
                 "offset": 0, "total": 0, "rows": [], "sources": {}}
        if not _is_int(cell) or not 0 <= cell < n:
            reply["error"] = f"\"cell\" must be an integer in 0..{n - 1}"
            return reply
        offset = content.get("offset", 0)
        if not _is_int(offset) or offset < 0:
            reply["error"] = "\"offset\" must be a non-negative integer"
            return reply
        limit = content.get("limit", 500)
        if not _is_int(limit) or limit < 1:
            reply["error"] = "\"limit\" must be a positive integer"
            return reply
        seqs = self._index.seqs(cell)
        offset, limit = min(offset, len(seqs)), min(MAX_ROWS_PER_REPLY, limit)
        reply.update(payload.event_rows(self._trace, seqs[offset:offset + limit]))
        reply.update(offset=offset, total=len(seqs))
        return reply

    def _operand_events(self, content: dict, rid) -> dict:
        """The kernel-level requests (operands) of one kernel: `{"operands": true, "kernel"}`."""
        k = content.get("kernel")
        reply = {"type": "events", "id": rid, "cell": None, "operands": True,
                 "kernel": k if _is_int(k) else None, "offset": 0, "total": 0, "rows": [],
                 "sources": {}}
        if not _is_int(k):
            reply["error"] = "\"kernel\" must be an integer"
            return reply
        c = self._trace.events.columns
        seqs = np.flatnonzero((self._index.event_cell < 0) & (c["kernel"] == k))
        reply.update(payload.event_rows(self._trace, seqs[:MAX_ROWS_PER_REPLY]))
        reply["total"] = len(seqs)
        return reply

    def _source(self, content: dict, rid) -> dict:
        """The lines around `line` of `file`, from the snippets stored in the trace.

        Never opens a file: the trace read its snippets while it was recorded (a loaded
        trace may come from anyone, and names any path it likes).
        """
        file, line = content.get("file"), content.get("line")
        ok_file = isinstance(file, str) and 0 < len(file) <= 4096
        ok_line = _is_int(line) and 1 <= line <= 10_000_000
        reply = {"type": "source", "id": rid, "file": file if ok_file else None,
                 "line": line if ok_line else None, "lines": [], "start": 1,
                 "name": "", "label": ""}
        if not ok_file:
            reply["error"] = "\"file\" must be a non-empty string"
            return reply
        if not ok_line:
            reply["error"] = "\"line\" must be a positive integer"
            return reply
        reply.update(snippet(self._trace, file, line))
        reply["file"] = file
        if not reply["lines"]:
            reply["error"] = "this trace holds no code for that line"
        return reply

    def _repr_mimebundle_(self, **kwargs):
        from .display import first_screen, widget_view

        view = widget_view(self, **kwargs)
        if view is None:
            return None
        data, meta = view
        data.update(first_screen(self._trace))
        return data, meta


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _reply_id(rid):
    """The request's id if it is one a reply can echo (a number, a string or null)."""
    if rid is None or _is_int(rid) or (isinstance(rid, str) and len(rid) <= 200):
        return rid
    if isinstance(rid, float) and rid == rid and abs(rid) != float("inf"):
        return rid
    return None


def _error(kind, rid, message: str) -> dict:
    return {"type": kind or "error", "id": rid, "error": message}


