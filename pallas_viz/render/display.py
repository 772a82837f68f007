"""What a `Trace` looks like in IPython: the widget when available, else PNG and text.

In a Jupyter kernel a trace is shown as two outputs: a static snapshot (the first screen
as HTML, with the PNG) and then the live widget. A CSS rule in the snapshot hides the
snapshot while the widget is drawn right after it, and hides the widget's output when
it cannot be drawn. A notebook reopened without its widget state (JupyterLab's "Save
Widget State Automatically" is off by default) then shows the snapshot instead of
"Error displaying widget: model not found"; a live widget shows alone.
"""

from __future__ import annotations

import base64
import uuid

# The text of the PNG output `--static` shows in a Jupyter kernel (the summary follows it)
PNG_TEXT = "pallas_viz: the blocks x threads grid (PNG); the summary follows"


def static_bundle(trace) -> dict:
    """`image/png` (base64) and the text summary; the summary alone if nothing ran."""
    data = {"text/plain": trace.summary()}
    if trace.ran_kernels:
        from .png import render_png

        data["image/png"] = base64.b64encode(render_png(trace)).decode("ascii")
    return data


def widget_class():
    """`TraceWidget`, or None when the widget module is unavailable."""
    try:
        from .widget import TraceWidget
    except ImportError:
        return None
    return TraceWidget


def mimebundle(trace, static: bool = False):
    """The MIME bundle of a trace: the widget view plus the static fallback."""
    cls = None if static or not trace.ran_kernels else widget_class()
    if cls is None:
        return static_bundle(trace)
    bundle = cls(trace)._repr_mimebundle_()
    data, meta = bundle if isinstance(bundle, tuple) else (bundle or {}, {})
    if "image/png" not in data:
        data = {**data, **static_bundle(trace)}
    data["text/plain"] = trace.summary()
    return data, meta


# {sid} is a uuid4 hex string (nothing from the trace). The widget's root is `.pv-root`.
_SNAPSHOT_CSS = (
    ".jp-OutputArea-child:has(.pv-snapshot[data-pv=\"{sid}\"])"
    ":has(+ .jp-OutputArea-child .pv-root) {{ display: none; }}\n"
    ".jp-OutputArea-child:has(.pv-snapshot[data-pv=\"{sid}\"]) + "
    ".jp-OutputArea-child:not(:has(.pv-root)) {{ display: none; }}")
WIDGET_TEXT = "(pallas_viz widget: the trace's static view and summary are in the output above)"


def in_jupyter_kernel() -> bool:
    """True when IPython runs as a Jupyter kernel (a front end that may draw widgets)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


def _snapshot_html(body: str, sid: str) -> str:
    return (f"<style>{_SNAPSHOT_CSS.format(sid=sid)}</style>"
            f"<div class=\"pv-snapshot\" data-pv=\"{sid}\">{body}</div>")


def snapshot_bundle(trace, sid: str) -> dict:
    """The snapshot output: `text/html` (the first screen, the PNG, the hiding rule),
    `image/png` and the summary."""
    from .html import static_snapshot

    data = static_bundle(trace)
    data["text/html"] = _snapshot_html(static_snapshot(trace, data.get("image/png")), sid)
    return data


def widget_view(widget, **kwargs) -> tuple[dict, dict] | None:
    """The widget view alone: anywidget's own bundle (data, metadata), without the static
    fallbacks our widgets' `_repr_mimebundle_` add; None for a closed widget."""
    import anywidget

    bundle = anywidget.AnyWidget._repr_mimebundle_(widget, **kwargs)
    if bundle is None:
        return None
    data, meta = bundle if isinstance(bundle, tuple) else (bundle, {})
    return dict(data), dict(meta or {})


def first_screen(trace) -> dict:
    """The summary (`text/plain`), the PNG and the HTML first screen (`static_snapshot`)
    of a trace; a part that fails to render is left out (a fallback never breaks display)."""
    data = {"text/plain": trace.summary()}
    png_b64 = None
    if trace.ran_kernels:
        try:
            from .png import render_png

            png_b64 = base64.b64encode(render_png(trace)).decode("ascii")
            data["image/png"] = png_b64
        except Exception:  # noqa: BLE001 - the static fallback must never break display
            pass
    try:
        from .html import static_snapshot

        data["text/html"] = static_snapshot(trace, png_b64)
    except Exception:  # noqa: BLE001 - the static fallback must never break display
        pass
    return data


def _snapshot_then_widget(snapshot: dict, make_widget) -> None:
    """Display `snapshot` (its `text/html` wrapped with the hiding rule), then the widget
    `make_widget(snapshot_id)` makes, with a one-line `text/plain`."""
    from IPython.display import display

    sid = uuid.uuid4().hex
    snapshot = dict(snapshot)
    snapshot["text/html"] = _snapshot_html(snapshot.get("text/html", ""), sid)
    display(snapshot, raw=True)
    data, meta = widget_view(make_widget(sid)) or ({}, {})
    data["text/plain"] = WIDGET_TEXT
    display(data, metadata=meta, raw=True)


def show(trace, static: bool = False) -> None:
    """Display `trace` in IPython: snapshot then widget in a Jupyter kernel (`static`: the
    PNG, then the summary), else one output (`mimebundle`)."""
    from IPython.display import display

    cls = None if static or not trace.ran_kernels else widget_class()
    if static and trace.ran_kernels and in_jupyter_kernel():
        # A front end shows one type of a bundle (JupyterLab: the PNG, never its text):
        # the PNG, then the summary as an output of its own
        data = static_bundle(trace)
        summary = data.pop("text/plain")
        data["text/plain"] = PNG_TEXT
        display(data, raw=True)
        display({"text/plain": summary}, raw=True)
        return
    if cls is None or not in_jupyter_kernel():
        bundle = mimebundle(trace, static=static)
        data, meta = bundle if isinstance(bundle, tuple) else (bundle, {})
        display(data, metadata=meta, raw=True)
        return
    _snapshot_then_widget(first_screen(trace), lambda sid: cls(trace, snapshot_id=sid))


def show_diff(d) -> None:
    """Display a `TraceDiff`: in a Jupyter kernel its static compare view, then the compare
    widget (hiding it, as for a trace); elsewhere one output."""
    from IPython.display import display

    from . import compare_widget

    if not in_jupyter_kernel():
        bundle = compare_widget.mimebundle(d)
        data, meta = bundle if isinstance(bundle, tuple) else (bundle, {})
        display(data, metadata=meta, raw=True)
        return
    snap = {"text/plain": d.summary(), "text/html": compare_widget.static_html(d)}
    _snapshot_then_widget(snap, lambda sid: compare_widget.CompareWidget(d, snapshot_id=sid))
