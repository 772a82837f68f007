"""Exceptions raised by pallas_viz."""

from __future__ import annotations


class PallasVizError(Exception):
    """Base class of every pallas_viz error."""


class UnsupportedJaxError(PallasVizError):
    """The installed JAX does not fit the interpret-mode adapter."""


class TraceActiveError(PallasVizError):
    """A `trace()` was started while another one is recording; `same_thread`: that one
    was entered by this Python thread (a trace nested in it), not by another."""

    def __init__(self, message: str, same_thread: bool = False):
        super().__init__(message)
        self.same_thread = same_thread


class TraceUsageError(PallasVizError):
    """A `trace()` object used in a way it cannot be: entered a second time (each records
    once), or left while another Python thread was still running a kernel."""


class TraceFileError(PallasVizError):
    """A saved trace could not be read."""


class EmptyTraceError(PallasVizError):
    """The traced code ran no Pallas GPU kernel in interpret mode."""


class KernelError(PallasVizError):
    """A traced kernel failed or was rejected; `finding` says where and why."""

    def __init__(self, message: str, finding=None, trace=None):
        super().__init__(message)
        self.finding = finding
        self.trace = trace


class OutputError(PallasVizError):
    """An output file (trace JSON, HTML page, image) could not be written; the old one is kept."""
