"""`trace()`: record every allocation of the Pallas GPU kernels run inside it."""

from __future__ import annotations

import contextlib

from . import _jax as adapter
from .analysis.failures import (
    failure_from_record,
    is_known_trace_error,
    trace_failure,
)
from .build import build_trace, named_kernels
from .errors import KernelError, TraceActiveError
from .model import KernelInfo
from .recorder import Recorder
from .snippets import collect as collect_snippets
from .store import EventTable
from .trace import Trace, now_iso


class trace:  # noqa: N801 - used like a function: `with pv.trace() as tr:`
    """Record allocations of every Pallas GPU interpret-mode kernel run in the block.

    `raise_errors=False` keeps a kernel failure quiet (the finding is still in the
    trace); `detect_races` turns on JAX's race detection (a race becomes a `race`
    finding); `timeout_s` stops a kernel whose threads wait on barriers without any
    progress (no allocation event, no barrier arrival) for that many seconds and
    reports a `deadlock` finding. Ctrl-C (KeyboardInterrupt) aborts the running
    kernel; the partial trace is kept with ``trace.meta["interrupted"] = True``.
    """

    def __init__(self, *, raise_errors: bool = True, detect_races: bool = False,
                 timeout_s: float | None = None):
        self.raise_errors = raise_errors
        self.detect_races = detect_races
        self.timeout_s = timeout_s
        self.trace = Trace()
        self._recorder = Recorder()
        self._ctx = None

    def __enter__(self) -> Trace:
        version = adapter.check_supported()
        self._ctx = contextlib.ExitStack()
        self._hooks = self._ctx.enter_context(adapter.hooked(
            self._recorder, detect_races=self.detect_races, timeout_s=self.timeout_s))
        self._ctx.enter_context(adapter.quiet_callback_log())
        self.trace.meta.update(jax_version=version, started=now_iso(),
                               detect_races=self.detect_races)
        if self.timeout_s is not None:
            self.trace.meta["timeout_s"] = self.timeout_s
        return self.trace

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            self._ctx.__exit__(exc_type, exc, tb)
        finally:
            self._finish(exc)
        if exc is None or isinstance(exc, (KeyboardInterrupt, TraceActiveError)):
            return False
        if self.trace.meta.get("interrupted"):
            # Ctrl-C aborted the kernel, which surfaced as the interpreter's error.
            raise KeyboardInterrupt() from exc
        finding = self._root_finding(exc)
        if finding is None:
            return False  # not a kernel failure: the user's own exception goes on
        if not self.raise_errors:
            return True
        from .render.text import render_finding

        raise KernelError(render_finding(finding, self.trace, color=False), finding,
                          self.trace) from exc

    def _finish(self, exc) -> None:
        rec = self._recorder
        resolve = _SourceCache()
        table = EventTable.from_records(rec.records, resolve)
        kernels = named_kernels([
            KernelInfo(index=k["index"], name=None, launch=k.get("launch"),
                       num_devices=k["num_devices"], threads_per_block=k["threads_per_block"],
                       blocks_per_cluster=k["blocks_per_cluster"]) for k in rec.kernels], table)
        failure = None
        monitor = getattr(getattr(self, "_hooks", None), "monitor", None)
        stopped = bool(rec.deadlocks) or (monitor is not None and monitor.interrupted)
        if rec.failures:
            failure = failure_from_record(rec.failures[0], kernels, resolve)
        elif exc is not None and not stopped and not isinstance(exc, KeyboardInterrupt) and (
                is_known_trace_error(exc) or adapter.raised_in_pallas(exc)):
            failure = trace_failure(exc, adapter.traceback_user_location(exc))
        meta = self.trace.meta
        deadlocks = [_resolved(d, resolve) for d in rec.deadlocks]
        races = [_resolved(r, resolve) for r in rec.races]
        if deadlocks:
            meta["deadlocks"] = deadlocks
        if races:
            meta["races"] = races
        if rec.barrier_ops:
            meta["barrier_ops"] = rec.barrier_ops_json(resolve)
        if rec.thread_exits:
            meta["thread_exits"] = rec.thread_exits_json()
        interrupted = isinstance(exc, KeyboardInterrupt) or (
            monitor is not None and monitor.interrupted)
        if interrupted:
            meta["interrupted"] = True
            # an interrupted kernel did not end: what it still holds is no leak
            if exc is not None and kernels:
                meta["stopped_kernels"] = [kernels[-1].index]
        built = build_trace(table, kernels, failure, meta)
        t = self.trace
        t.adopt(built)
        t.snippets = collect_snippets(t)

    def _root_finding(self, exc):
        """The root cause behind the exception that left the block, if a kernel's."""
        t = self.trace
        if t.failure is None and not t.meta.get("deadlocks") and not t.meta.get("races"):
            return None
        kernel = t.failure.kernel if t.failure is not None else None
        errors = [f for f in t.findings if f.severity == "error"]
        for f in errors:
            if kernel is None or f.kernel == kernel:
                return f
        return errors[0] if errors else None


def _resolved(record: dict, resolve) -> dict:
    """A deadlock/race record made JSON-able: JAX `SourceInfo`s become location dicts."""
    out = {}
    for k, v in record.items():
        if k == "source_info":
            loc = resolve(v)
            out["source"] = None if loc is None else loc.to_dict()
        elif isinstance(v, dict):
            out[k] = _resolved(v, resolve)
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            out[k] = [_resolved(x, resolve) for x in v]
        elif hasattr(v, "to_dict"):
            out[k] = v.to_dict()
        else:
            out[k] = v
    return out


class _SourceCache:
    """Resolve JAX `SourceInfo` objects to `SourceLocation`s, once each."""

    def __init__(self):
        self._cache: dict[int, object] = {}
        self._keep: list = []

    def __call__(self, source_info):
        if source_info is None:
            return None
        key = id(source_info)
        if key not in self._cache:
            self._keep.append(source_info)
            self._cache[key] = adapter.source_location(source_info)
        return self._cache[key]
