"""Barrier waits, the deadlock watchdog and Ctrl-C while a kernel is interpreted.

Hooks `Barrier.wait`/`ClusterBarrier.wait` (who waits on which barrier, from
which line) and `arrive` (progress). A monitor thread stops a kernel that made no
progress for `timeout_s` while some thread waits on a barrier, and aborts the
kernel when SIGINT arrives (a Python signal handler alone cannot: the main
thread waits inside the interpreter's thread pool for threads that wait forever).
Both go through the interpreter's own failure path, `set_failed(..., top_level=False)`.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time

# Seconds between watchdog checks (at most; shorter for short timeouts).
_TICK = 0.25


class BarrierWaits:
    """Wraps the barrier classes' `wait` and `arrive`; the per-call cost is two dict ops."""

    def __init__(self, gsm):
        self.classes = [c for c in (getattr(gsm, "Barrier", None),
                                    getattr(gsm, "ClusterBarrier", None)) if c is not None]
        self.waiting: dict = {}  # thread object -> (barrier object, logging_info)
        self.arrivals = 0
        self._originals: list = []

    def install(self) -> None:
        for cls in self.classes:
            for name, wrap in (("wait", self._wrap_wait), ("arrive", self._wrap_arrive)):
                if not hasattr(cls, name):
                    continue
                orig = getattr(cls, name)
                self._originals.append((cls, name, orig, name in cls.__dict__))
                setattr(cls, name, wrap(orig))

    def remove(self) -> None:
        for cls, name, orig, own in reversed(self._originals):
            if own:
                setattr(cls, name, orig)
            elif name in cls.__dict__:
                delattr(cls, name)
        self._originals.clear()
        self.waiting.clear()

    def _wrap_wait(self, orig):
        waits = self

        def wait(bar, thread, *args, **kwargs):
            li = kwargs.get("logging_info", args[0] if args else None)
            waits.waiting[thread] = (bar, li)
            try:
                return orig(bar, thread, *args, **kwargs)
            finally:
                waits.waiting.pop(thread, None)

        return wait

    def _wrap_arrive(self, orig):
        waits = self

        def arrive(bar, *args, **kwargs):
            waits.arrivals += 1
            return orig(bar, *args, **kwargs)

        return arrive


class _Watcher:
    """The daemon thread, one per process, that serves the running trace's `Monitor`.

    Started by the first trace that needs it and kept: a trace only registers its
    monitor (and points the signal wake-up fd at the watcher's pipe), so starting and
    joining a thread is not part of every `trace()`. It sleeps in `select` on the pipe,
    with the monitor's tick while a watchdog timeout is set, else until a signal.
    `lock` is held while it serves a monitor, so once `Monitor.stop` has taken it and
    unregistered, the thread no longer touches that trace.
    """

    def __init__(self):
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        self.rfd, self.wfd = r, w
        self.lock = threading.Lock()
        self.active: Monitor | None = None
        self.pid = os.getpid()
        self.thread = threading.Thread(target=self._run, name="pallas_viz-monitor",
                                       daemon=True)
        self.thread.start()

    def wake(self) -> None:
        try:
            os.write(self.wfd, b"\0")  # no signal is numbered 0
        except OSError:  # pragma: no cover - pipe full: the thread wakes anyway
            pass

    def _run(self) -> None:
        while True:
            m = self.active
            tick = None if m is None else m.tick
            try:
                ready, _, _ = select.select([self.rfd], [], [], tick)
                data = os.read(self.rfd, 512) if ready else b""
            except BlockingIOError:
                data = b""
            except (OSError, ValueError):  # pragma: no cover - the pipe is gone
                return
            with self.lock:
                m = self.active
                if m is None:  # between traces: nothing to serve (as a stopped monitor)
                    continue
                try:
                    signals = data.replace(b"\0", b"")
                    if signals:
                        m._on_signals(signals)
                    if m.timeout_s is not None:
                        m._check_progress()
                except Exception:  # noqa: BLE001 - never let the watcher die
                    pass


_watcher_lock = threading.Lock()
_watcher: _Watcher | None = None


def _get_watcher() -> _Watcher:
    global _watcher
    with _watcher_lock:
        w = _watcher
        if w is None or w.pid != os.getpid() or not w.thread.is_alive():
            w = _watcher = _Watcher()
        return w


class Monitor:
    """The watchdog / interrupt handling of one `trace()` (served by the `_Watcher`)."""

    def __init__(self, hooks, timeout_s: float | None):
        self.hooks = hooks
        self.timeout_s = timeout_s
        self.tick = None if timeout_s is None else max(0.01, min(_TICK, timeout_s / 10))
        self.interrupted = False
        self.deadlocked = False
        self._watcher: _Watcher | None = None
        self._old_wakeup_fd = -1
        self._catch_sigint = False
        self._last = 0
        self._last_t = 0.0

    # -- life cycle
    def start(self) -> None:
        main = threading.current_thread() is threading.main_thread()
        if not main and self.timeout_s is None:
            return  # no signals reach this thread and there is no watchdog: nothing to do
        w = _get_watcher()
        if main:
            try:
                self._old_wakeup_fd = signal.set_wakeup_fd(w.wfd, warn_on_full_buffer=False)
                self._catch_sigint = True
            except (ValueError, OSError):  # pragma: no cover - no signals here
                self._catch_sigint = False
        if not self._catch_sigint and self.timeout_s is None:
            return
        self._last, self._last_t = self._progress(), time.monotonic()
        with w.lock:
            w.active = self
        self._watcher = w
        if self.timeout_s is not None:
            w.wake()  # start ticking

    def stop(self) -> None:
        if self._catch_sigint:
            try:
                signal.set_wakeup_fd(self._old_wakeup_fd)
            except (ValueError, OSError):  # pragma: no cover
                pass
            self._catch_sigint = False
        w, self._watcher = self._watcher, None
        if w is not None:
            with w.lock:  # waits for the watcher to finish serving this monitor
                if w.active is self:
                    w.active = None

    # -- served by the watcher thread, with its lock held
    def _progress(self) -> int:
        return len(self.hooks.recorder.records) + self.hooks.waits.arrivals

    def _check_progress(self) -> None:
        now = time.monotonic()
        p = self._progress()
        sm = self.hooks.running_memory()
        if p != self._last or sm is None or not self.hooks.waits.waiting or (
                sm._failure is not None):
            self._last, self._last_t = p, now
            return
        if now - self._last_t >= self.timeout_s:
            self._stop_deadlock(sm, now - self._last_t)
            self._last_t = now

    def _on_signals(self, data: bytes) -> None:
        if self._old_wakeup_fd >= 0:
            try:  # whoever listened before us (an event loop) still hears the signal
                os.write(self._old_wakeup_fd, data)
            except OSError:
                pass
        if signal.SIGINT in data:
            self.interrupted = True
            sm = self.hooks.running_memory()
            if sm is not None:
                self._abort(sm, RuntimeError(
                    "pallas_viz: the kernel was interrupted (KeyboardInterrupt)"))

    def _abort(self, sm, exception: Exception) -> None:
        with sm.lock:
            if sm._failure is not None:
                return
            # The failure is reported by pallas_viz (deadlock / interrupt), not as an
            # interpreter error: keep the set_failed hook from recording it.
            object.__setattr__(sm, "_pallas_viz_failed", True)
        sm.set_failed(exception, None, top_level=False)

    def _stop_deadlock(self, sm, idle_s: float) -> None:
        waiters = self.hooks.snapshot_waiters(sm)
        if not waiters:
            return
        self.deadlocked = True
        self.hooks.recorder.deadlock(getattr(sm, "_pallas_viz_kernel", -1), {
            "timeout_s": self.timeout_s, "idle_s": round(idle_s, 3), "waiters": waiters})
        who = ", ".join(f"block {w['block']} thread {w['thread']}" for w in waiters)
        self._abort(sm, TimeoutError(
            f"pallas_viz: no progress for {idle_s:.1f} s (timeout_s={self.timeout_s}); "
            f"waiting on barriers: {who}"))
