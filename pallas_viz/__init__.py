"""pallas_viz: see the allocations of Pallas Mosaic GPU kernels in interpret mode.

    import pallas_viz as pv
    with pv.trace() as tr:
        y = kernel(x)
    print(tr.summary())
"""

from __future__ import annotations

from .capture import trace
from .errors import (
    EmptyTraceError,
    KernelError,
    PallasVizError,
    TraceActiveError,
    TraceFileError,
    TraceUsageError,
    UnsupportedJaxError,
)
from .model import Event, Failure, Finding, KernelInfo, SourceLocation
from .trace import Trace, load
from .trace_diff import diff

__version__ = "0.1.0"

__all__ = [
    "EmptyTraceError", "Event", "Failure", "Finding", "KernelError", "KernelInfo",
    "PallasVizError", "SourceLocation", "Trace", "TraceActiveError", "TraceFileError",
    "TraceUsageError",
    "UnsupportedJaxError", "diff", "load", "trace",
]


def load_ipython_extension(ipython):  # pragma: no cover - exercised through IPython
    """`%load_ext pallas_viz`: register the `%pallas_trace` magic."""
    from .magic import load_ipython_extension as _load

    _load(ipython)


def __getattr__(name):
    # Lazy: `import pallas_viz` must not import anywidget/ipywidgets.
    if name == "TraceWidget":
        from .render.widget import TraceWidget

        return TraceWidget
    raise AttributeError(f"module 'pallas_viz' has no attribute {name!r}")
