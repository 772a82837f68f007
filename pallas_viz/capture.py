"""`trace()`: record every allocation of the Pallas GPU kernels run inside it."""

from __future__ import annotations

import contextlib

from . import _jax as adapter
from ._jax import hooks as adapter_hooks
from .analysis.context import unfinished_kernels
from .analysis.failures import (
    failure_from_record,
    trace_failure,
)
from .build import build_trace, named_by_barrier_ops, named_kernels
from .errors import KernelError, TraceActiveError, TraceUsageError
from .kernel_source import barrier_calls_around
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

    Exceptions: only a kernel failure becomes `KernelError` (an error the interpreter
    raised while running a kernel, a JAX trace-time rejection of the kernel, a deadlock
    or race pallas_viz stopped); any other exception leaves the block unchanged (type,
    message, traceback), whatever `raise_errors` says, including one the kernel's own
    code raised while JAX traced it (a `NameError` in the kernel body).

    Threads: kernels run by the Python thread that entered the block, or by threads it
    started inside it, are recorded; kernels of threads that were already running are
    not (``trace.meta["other_thread_kernels"]`` counts them). Leaving the block waits
    for a kernel another thread is still running (at most `_jax.hooks.EXIT_WAIT_S`
    seconds, then `TraceUsageError`, and the interpreter is not reset under it).

    A `trace` object records once: entering it again raises `TraceUsageError`.

    `device` names the GPU whose limits the memory budget checks ("h100", "h200",
    "b200", "sm120"; "auto": b200 for a trace that uses tensor memory, else h100).
    """

    def __init__(self, *, raise_errors: bool = True, detect_races: bool = False,
                 timeout_s: float | None = None, device: str = "auto"):
        if device != "auto":
            from .devices import get_device

            get_device(device)  # an unknown name fails here, listing the presets
        self.device = device
        self.raise_errors = raise_errors
        self.detect_races = detect_races
        self.timeout_s = checked_timeout(timeout_s)
        self.trace = Trace()
        self._recorder = Recorder()
        self._ctx = contextlib.ExitStack()
        self._hooks = None
        self._entered = False
        # For tools that trace code which may trace itself (the pytest plugin): a trace
        # entered inside this one in the same Python thread suspends it until it ends,
        # instead of raising `TraceActiveError`; this trace's `meta["nested_traces"]` and
        # `meta["nested_trace_kernels"]` count those traces and the kernel runs they
        # recorded (which are theirs, not this trace's).
        self._yield_to_nested = False
        self._trace_exc = None  # the exception a trace-time failure was made from

    def __enter__(self) -> Trace:
        if self._entered:
            raise TraceUsageError(
                "this pallas_viz.trace() was already used: a trace object records once; "
                "start a new one (`with pv.trace() as tr:`)")
        self._entered = True
        stack = self._ctx
        try:
            version = adapter.check_supported()
            self._hooks = stack.enter_context(adapter.hooked(
                self._recorder, detect_races=self.detect_races, timeout_s=self.timeout_s,
                yields=self._yield_to_nested))
            stack.enter_context(adapter.quiet_callback_log())
            self.trace.meta.update(jax_version=version, started=now_iso(),
                                   detect_races=self.detect_races)
            if self.timeout_s is not None:
                self.trace.meta["timeout_s"] = self.timeout_s
            if self.device != "auto":
                self.trace.meta["device"] = self.device
            return self.trace
        except BaseException:
            # `__exit__` is not called when `__enter__` raises: undo what was set up
            # (twice: the second is a no-op unless the first was interrupted)
            try:
                stack.close()
            finally:
                stack.close()
            raise

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            try:
                self._ctx.__exit__(exc_type, exc, tb)
            finally:
                self._ctx.close()  # a no-op unless the first was interrupted
        finally:
            try:
                self._finish(exc)
            finally:
                hooks, self._hooks = self._hooks, None
                if hooks is not None:
                    hooks.dispose()
        left = getattr(hooks, "left_running", None)
        if exc is None:
            if left is not None:
                raise TraceUsageError(
                    f"pallas_viz.trace() ended while Python thread {left.name!r} was still "
                    f"running a kernel (waited {adapter_hooks.EXIT_WAIT_S:g} s); its events "
                    "after that are not recorded and the interpreter was not reset. Join "
                    "the threads that run kernels before the trace ends.")
            return False
        if isinstance(exc, (KeyboardInterrupt, TraceActiveError, TraceUsageError)):
            return False
        if not self._is_kernel_failure(exc):
            return False  # the user's own exception goes on, unchanged
        if self.trace.meta.get("interrupted"):
            # Ctrl-C aborted the kernel, which surfaced as the interpreter's error.
            raise KeyboardInterrupt() from exc
        finding = self._root_finding(exc)
        if finding is None:
            return False
        if not self.raise_errors:
            return True
        from .render.text import render_finding

        raise KernelError(render_finding(finding, self.trace, color=False), finding,
                          self.trace) from exc

    def _is_kernel_failure(self, exc: BaseException) -> bool:
        """True if `exc` is a kernel's failure: the error JAX raised when a kernel it ran
        failed (the interpreter's failure, a deadlock or race stopped, an interrupt), or
        the trace-time rejection the trace's failure was made from."""
        if exc is self._trace_exc:
            return True
        t = self.trace
        recorded = (t.failure is not None and t.failure.phase == "run") or bool(
            t.meta.get("deadlocks") or t.meta.get("races") or t.meta.get("interrupted"))
        return recorded and _is_runtime_error(exc)

    def _finish(self, exc) -> None:
        rec = self._recorder
        resolve = _SourceCache()
        rows = rec.rows()
        table = EventTable.from_records(rows, resolve)
        # the mesh's own names for kernels JAX traced inside this trace
        names = getattr(getattr(self, "_hooks", None), "axis_names", None)
        axes = names.thread_axes((r[0], r[16]) for r in rows) if names else {}
        kernels = named_kernels([
            KernelInfo(index=k["index"], name=None, launch=k.get("launch"),
                       num_devices=k["num_devices"], threads_per_block=k["threads_per_block"],
                       blocks_per_cluster=k["blocks_per_cluster"],
                       thread_axis=axes.get(k["index"])) for k in rec.kernels], table)
        failure = None
        hooks = getattr(self, "_hooks", None)
        monitor = getattr(hooks, "monitor", None)
        stopped = bool(rec.deadlocks) or (monitor is not None and monitor.interrupted)
        # the first kernel JAX rejected while lowering it, seen on the error's way out
        rejected = getattr(getattr(hooks, "rejections", None), "first", None)
        if rec.failures:
            failure = failure_from_record(rec.failures[0], kernels, resolve)
        elif rejected is not None and exc is rejected.error and not stopped:
            failure = trace_failure(exc, rejected.source or adapter.traceback_user_location(exc),
                                    rejected.silent or None, in_body=rejected.in_body)
            if not rejected.in_body:  # (the kernel's own error stays the user's to see)
                self._trace_exc = exc
        elif exc is not None and not stopped and _traced_kernel_failed(exc):
            in_body = not adapter.raised_by_pallas(exc)
            failure = trace_failure(exc, adapter.traceback_user_location(exc),
                                    None if str(exc) else adapter.silent_failure_text(exc),
                                    in_body=in_body)
            if not in_body:
                self._trace_exc = exc
        elif (exc is not None and not rec.kernels and _is_runtime_error(exc)
              and adapter.earlier_kernel_failure(exc)):
            # no kernel ran here: an earlier run's failure JAX kept and raised again
            self.trace.meta["earlier_failure"] = adapter.earlier_kernel_failure(exc)
        elif rejected is not None and not stopped:
            # the code in the block caught the error (and maybe raised one of its own)
            failure = trace_failure(rejected.error, rejected.source, rejected.silent or None,
                                    caught=True, in_body=rejected.in_body)
        meta = self.trace.meta
        if hooks is not None and hooks.foreign_kernels:
            meta["other_thread_kernels"] = hooks.foreign_kernels
        if hooks is not None and hooks.left_running is not None:
            meta["left_running"] = hooks.left_running.name
        if hooks is not None and hooks.nested_traces:
            meta["nested_traces"] = hooks.nested_traces
            meta["nested_trace_kernels"] = hooks.nested_kernels
        deadlocks = [_resolved(d, resolve) for d in rec.deadlocks]
        races = [_with_barrier_calls(_resolved(r, resolve)) for r in rec.races]
        if deadlocks:
            meta["deadlocks"] = deadlocks
        if races:
            meta["races"] = races
        if rec.barrier_op_rows:
            meta["barrier_ops"] = rec.barrier_ops_json(resolve)
            kernels = named_by_barrier_ops(kernels, meta["barrier_ops"])
        interrupted = isinstance(exc, KeyboardInterrupt) or (
            monitor is not None and monitor.interrupted)
        if interrupted:
            meta["interrupted"] = True
            # an interrupted kernel did not end: what it still holds is no leak
            if exc is not None and kernels:
                meta["stopped_kernels"] = [kernels[-1].index]
        # which threads finished matters only in a kernel cut short (a wait left hanging)
        cut_short = unfinished_kernels(deadlocks, meta.get("stopped_kernels") or (), failure,
                                       kernels)
        exits = rec.thread_exits_json(cut_short) if rec.thread_exits and cut_short else None
        if exits:
            meta["thread_exits"] = exits
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
        if errors:
            return errors[0]
        # JAX's race detection stopped the run on a race of its own making (a warning:
        # the SMEM copy GPU interpret mode shares among a `pallas_call`'s blocks)
        return next((f for f in t.findings if f.kind == "race" and t.meta.get("races")
                     and (kernel is None or f.kernel == kernel)), None)


def _is_runtime_error(exc: BaseException) -> bool:
    """The error JAX raises when a computation it ran failed (a kernel's callback)."""
    return any(c.__name__ in ("JaxRuntimeError", "XlaRuntimeError") for c in type(exc).__mro__)


def _traced_kernel_failed(exc: BaseException) -> bool:
    """True if `exc` left JAX's Pallas package while JAX traced or lowered a kernel: one
    of Pallas's checks rejected it, or the kernel's own code raised it
    (`adapter.raised_by_pallas` tells which). Not a kernel's run-time failure, nor an
    interrupt."""
    if isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)) or _is_runtime_error(exc):
        return False
    return adapter.raised_in_pallas(exc)


def _with_barrier_calls(race: dict) -> dict:
    """A race record whose thread accesses carry the barrier waits and arrivals written
    around their lines (`kernel_source.barrier_calls_around`), read now from the live
    source: a saved trace keeps them, and no file a trace names is read again."""
    for name in ("access", "other"):
        a = race.get(name)
        src = a.get("source") if isinstance(a, dict) and "thread" in a else None
        if src:
            calls = barrier_calls_around(src["file"], src["line"])
            if calls:
                a["barriers"] = [list(c) for c in calls]
    return race


def _resolved(record: dict, resolve) -> dict:
    """A deadlock/race record made JSON-able: JAX `SourceInfo`s become location dicts."""
    out = {}
    for k, v in record.items():
        if k == "source_info":
            loc = resolve(v)
            if loc is not None or "source" not in record:  # (else the summary's line)
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


def checked_timeout(value):
    """`timeout_s` as given, if None or a finite positive number of seconds; else a
    ValueError (a zero, negative or NaN timeout would stop every kernel at once, or none)."""
    import math
    import numbers

    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, numbers.Real)
            or not math.isfinite(value) or value <= 0):
        raise ValueError(f"timeout_s must be None or a finite positive number of seconds, "
                         f"not {value!r}")
    return float(value)
