"""`TraceWidget`: the interactive grid of a trace in Jupyter (anywidget)."""

from __future__ import annotations

import base64
import pathlib

import anywidget
import traitlets

from . import payload

STATIC = pathlib.Path(__file__).resolve().parent.parent / "static"
MAX_ROWS_PER_REPLY = 2000


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

    Event details and source lines are fetched from Python on demand.
    """

    _esm = _bundle("widget.js")
    _css = _bundle("widget.css")
    data = traitlets.Any().tag(sync=True)

    def __init__(self, trace, **kwargs):
        trace.require_kernels("show a widget for")
        self._trace = trace
        self._index = payload.CellIndex(trace)
        super().__init__(data=payload.build_state(trace, self._index), **kwargs)

    @property
    def trace(self):
        return self._trace

    def _handle_custom_msg(self, content, buffers=None) -> dict | None:
        """ipywidgets' hook for a front-end message: send the answer back, and return it."""
        reply = self._answer(content, buffers)
        if reply is not None:
            self.send(reply)
        return reply

    def _answer(self, content, buffers=None) -> dict | None:
        """Answer a front-end request: `{"type": "events"|"source", "id": ...}`."""
        if not isinstance(content, dict):
            return None
        kind, rid = content.get("type"), content.get("id")
        if kind == "events":
            cell = int(content.get("cell", -1))
            seqs = self._index.seqs(cell) if 0 <= cell < self._index.num_cells else []
            offset = max(0, int(content.get("offset", 0)))
            limit = min(MAX_ROWS_PER_REPLY, max(1, int(content.get("limit", 500))))
            reply = payload.event_rows(self._trace, seqs[offset:offset + limit])
            reply.update(type="events", id=rid, cell=cell, offset=offset, total=len(seqs))
            return reply
        if kind == "source":
            file = str(content.get("file", ""))
            if file not in self._known_files():
                return {"type": "source", "id": rid, "file": file, "line": content.get("line"),
                        "lines": [], "start": 1, "name": file, "label": file}
            reply = payload.source_snippet(file, int(content.get("line", 1)))
            reply.update(type="source", id=rid)
            return reply
        return None

    def _known_files(self) -> set[str]:
        t = self._trace
        files = {s.file for s in t.events.sources if s is not None}
        for f in t.findings:
            files |= {loc.file for loc in [f.source, *f.related] if loc is not None}
        if t.failure is not None and t.failure.source is not None:
            files.add(t.failure.source.file)
        files |= {k.launch.file for k in t.kernels if k.launch is not None}
        return files

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        data, meta = bundle if isinstance(bundle, tuple) else (bundle, {})
        data = dict(data)
        data["text/plain"] = self._trace.summary()
        try:
            from .png import render_png
        except ImportError:
            render_png = None
        if render_png is not None:
            try:
                png = render_png(self._trace)
                data["image/png"] = base64.b64encode(png).decode("ascii")
            except Exception:  # noqa: BLE001 - the static fallback must never break display
                pass
        return data, meta
