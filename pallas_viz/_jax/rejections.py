"""Kernels JAX rejected while tracing or lowering them for GPU interpret mode, even
when caught.

JAX traces a Pallas kernel's body to a jaxpr (`partial_eval.trace_to_jaxpr`, called from
its Pallas package), then lowers it for interpret mode in `interpret_pallas_call`, which
interprets the jaxpr at trace time and raises on what the interpreter cannot run (a
scoped allocation without the thread axis, ...). When the code inside the traced block
catches such an error, nothing reaches the trace's end but an empty run: wrapping those
two functions (module attributes JAX reads at every call) keeps the first error leaving
them, with its user line read before JAX filters its traceback, and whether Pallas's own
checks raised it or the kernel's own code did (`raised_by_pallas`). A ref used after its
`pl.run_scoped` returned is rejected outside both, when the kernel is called: JAX's
`core.escaped_tracer_error`, which builds that error, is wrapped too.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import NamedTuple

from .messages import trace_error_hint
from .sources import escaped_scope_location, silent_failure_text, traceback_user_location

_PALLAS = "/jax/_src/pallas/"


class Rejection(NamedTuple):
    """The first error JAX raised lowering a kernel of this trace."""

    error: BaseException
    source: object  # `SourceLocation` | None: the user's line behind it
    silent: str  # for an error without a message: what raised it (`silent_failure_text`)
    in_body: bool  # the kernel's own code raised it while JAX traced the body


class Rejections:
    """Wraps `interpret_pallas_call` for one trace; `first` is its first rejection."""

    def __init__(self, owns: Callable[[threading.Thread], bool]):
        self.first: Rejection | None = None
        self._owns = owns  # whether a thread's kernels are this trace's
        self._installed: list[tuple] = []  # (module, name, JAX's function)

    def install(self) -> None:
        self._installed = []
        try:
            from jax._src.interpreters import partial_eval as pe
            from jax._src.pallas.mosaic_gpu.interpret import interpret_pallas_call as module
        except ImportError:  # pragma: no cover - both supported versions have them
            return
        self._wrap(module, "interpret_pallas_call", lambda caller: True)
        # (any jaxpr JAX traces: only an error on its way out to JAX's Pallas package, which
        # traces kernel bodies with it, is noted)
        self._wrap(pe, "trace_to_jaxpr",
                   lambda caller: _PALLAS in caller.f_code.co_filename.replace(os.sep, "/"))
        # a scoped ref the kernel kept and used after its `pl.run_scoped` returned: JAX
        # builds the `UnexpectedTracerError` here when the kernel is called, outside its
        # Pallas package (the error's way out passes neither function above)
        from jax._src import core

        self._wrap_escaped(core, "escaped_tracer_error")

    def _wrap(self, module, name: str, noted: Callable) -> None:
        orig = getattr(module, name, None)
        if orig is None:  # pragma: no cover - both supported versions have them
            return
        rejections = self

        def wrapper(*args, **kwargs):
            try:
                return orig(*args, **kwargs)
            except Exception as e:
                if rejections.first is None and noted(sys._getframe(1)):
                    rejections.note(e)
                raise

        self._installed.append((module, name, orig))  # (recorded before it is replaced)
        setattr(module, name, wrapper)

    def _wrap_escaped(self, module, name: str) -> None:
        orig = getattr(module, name, None)
        if orig is None:  # pragma: no cover - both supported versions have it
            return
        rejections = self

        def wrapper(*args, **kwargs):
            error = orig(*args, **kwargs)  # (JAX raises what it returns)
            if rejections.first is None:
                rejections.note_escaped(error)
            return error

        self._installed.append((module, name, orig))
        setattr(module, name, wrapper)

    def remove(self) -> None:
        """Restore JAX's functions (idempotent)."""
        for module, name, orig in reversed(getattr(self, "_installed", ())):
            setattr(module, name, orig)
        self._installed = []

    def dispose(self) -> None:
        """Once the trace is built: drop the error (its traceback holds the lowering's
        frames) and the owner test (a bound method of the hooks: a cycle)."""
        self.first = None
        self._owns = _nobody

    def note(self, error: Exception) -> None:
        if self.first is not None or not self._owns(threading.current_thread()):
            return
        try:
            source = traceback_user_location(error)
            silent = "" if str(error) else silent_failure_text(error)
            in_body = not raised_by_pallas(error)
        except Exception:  # noqa: BLE001 - noting must never change the kernel's error
            source, silent, in_body = None, "", False
        self.first = Rejection(error, source, silent, in_body)

    def note_escaped(self, error: BaseException) -> None:
        """Keep `error` when it is JAX's error for a ref used after its `pl.run_scoped`
        (`escaped_scope_location`: the scope's line, the kernel's own mistake)."""
        if self.first is not None or not self._owns(threading.current_thread()):
            return
        try:
            source = escaped_scope_location(error)
        except Exception:  # noqa: BLE001 - noting must never change the kernel's error
            source = None
        if source is not None:
            self.first = Rejection(error, source, "", True)


def raised_by_pallas(exc: BaseException) -> bool:
    """True if one of JAX's Pallas checks raised `exc` (it was raised inside JAX's Pallas
    package, or it is a known trace error raised inside JAX); False for an error the
    kernel's own code raised while JAX traced it (a `NameError` in its body, a store of
    the wrong shape) or other code raised."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    raised_in = tb.tb_frame.f_code.co_filename.replace(os.sep, "/")
    if _PALLAS in raised_in:
        return True
    return trace_error_hint(str(exc)) is not None and "/jax/" in raised_in


def _nobody(thread: threading.Thread) -> bool:
    return False
