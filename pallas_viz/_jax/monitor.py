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


class Monitor:
    """The watchdog / interrupt thread of one `trace()`."""

    def __init__(self, hooks, timeout_s: float | None):
        self.hooks = hooks
        self.timeout_s = timeout_s
        self.interrupted = False
        self.deadlocked = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rfd = self._wfd = None
        self._old_wakeup_fd = -1
        self._catch_sigint = False

    # -- life cycle
    def start(self) -> None:
        if threading.current_thread() is threading.main_thread():
            try:
                r, w = os.pipe()
                os.set_blocking(r, False)
                os.set_blocking(w, False)
                self._old_wakeup_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
                self._rfd, self._wfd = r, w
                self._catch_sigint = True
            except (ValueError, OSError):  # pragma: no cover - no signals here
                self._catch_sigint = False
        if self._catch_sigint or self.timeout_s is not None:
            self._thread = threading.Thread(target=self._run, name="pallas_viz-monitor",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._wfd is not None:
            try:  # wake the thread from select() now rather than at its next tick
                os.write(self._wfd, b"\0")
            except OSError:  # pragma: no cover
                pass
        if self._catch_sigint:
            try:
                signal.set_wakeup_fd(self._old_wakeup_fd)
            except (ValueError, OSError):  # pragma: no cover
                pass
        if self._thread is not None:
            self._thread.join()
        for fd in (self._rfd, self._wfd):
            if fd is not None:
                os.close(fd)
        self._rfd = self._wfd = None

    # -- the thread
    def _progress(self) -> int:
        return len(self.hooks.recorder.records) + self.hooks.waits.arrivals

    def _run(self) -> None:
        tick = _TICK if self.timeout_s is None else max(0.01, min(_TICK, self.timeout_s / 10))
        last = self._progress()
        last_t = time.monotonic()
        while not self._stop.is_set():
            if self._rfd is not None:
                ready, _, _ = select.select([self._rfd], [], [], tick)
                if ready and not self._stop.is_set():
                    self._read_signals()
            else:
                self._stop.wait(tick)
            if self.timeout_s is None:
                continue
            now = time.monotonic()
            p = self._progress()
            sm = self.hooks.running_memory()
            if p != last or sm is None or not self.hooks.waits.waiting or (
                    sm._failure is not None):
                last, last_t = p, now
                continue
            if now - last_t >= self.timeout_s:
                self._stop_deadlock(sm, now - last_t)
                last_t = now

    def _read_signals(self) -> None:
        try:
            data = os.read(self._rfd, 512)
        except (BlockingIOError, OSError):
            return
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
