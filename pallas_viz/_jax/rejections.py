"""Kernels JAX rejected while lowering them for GPU interpret mode, even when caught.

JAX lowers a Pallas GPU kernel for interpret mode in `interpret_pallas_call`, which
interprets the kernel's jaxpr at trace time and raises on what the interpreter cannot
run (a scoped allocation without the thread axis, ...). When the code inside the
traced block catches that error, nothing reaches the trace's end but an empty run:
wrapping that one function (a module attribute JAX reads at every lowering) keeps the
first error leaving it, with its user line read before JAX filters its traceback.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import NamedTuple

from .sources import silent_failure_text, traceback_user_location


class Rejection(NamedTuple):
    """The first error JAX raised lowering a kernel of this trace."""

    error: BaseException
    source: object  # `SourceLocation` | None: the user's line behind it
    silent: str  # for an error without a message: what raised it (`silent_failure_text`)


class Rejections:
    """Wraps `interpret_pallas_call` for one trace; `first` is its first rejection."""

    def __init__(self, owns: Callable[[threading.Thread], bool]):
        self.first: Rejection | None = None
        self._owns = owns  # whether a thread's kernels are this trace's
        self._module = None
        self._orig = None

    def install(self) -> None:
        try:
            from jax._src.pallas.mosaic_gpu.interpret import interpret_pallas_call as module
        except ImportError:  # pragma: no cover - both supported versions have it
            return
        orig = getattr(module, "interpret_pallas_call", None)
        if orig is None:  # pragma: no cover - both supported versions have it
            return
        rejections = self

        def interpret_pallas_call(*args, **kwargs):
            try:
                return orig(*args, **kwargs)
            except Exception as e:
                rejections.note(e)
                raise

        self._module, self._orig = module, orig  # (recorded before it is replaced)
        module.interpret_pallas_call = interpret_pallas_call

    def remove(self) -> None:
        """Restore JAX's function (idempotent)."""
        if self._module is not None:
            self._module.interpret_pallas_call = self._orig
        self._module = self._orig = None

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
        except Exception:  # noqa: BLE001 - noting must never change the kernel's error
            source, silent = None, ""
        self.first = Rejection(error, source, silent)


def _nobody(thread: threading.Thread) -> bool:
    return False
