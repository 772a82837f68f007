"""What a `Trace` looks like in IPython: the widget when available, else PNG and text."""

from __future__ import annotations

import base64


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
