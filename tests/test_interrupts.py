"""`pv.trace()` under interruption, misuse and threads.

Fault injection, not random timing: a line tracer raises KeyboardInterrupt at the N-th line
pallas_viz executes while it sets up or tears down a trace (`trace.__enter__`/`__exit__`
and everything they call in capture.py and the JAX adapter), for every N until the code
runs through. After each: no hook is left on any JAX class, no trace is active, the
signal wake-up fd, the SIGINT handler and JAX's callback logger are what they were, and
the next `pv.trace()` around a real kernel records its events.
"""

from __future__ import annotations

import dis
import logging
import os
import signal
import sys
import threading
import time

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

import pallas_viz as pv
from pallas_viz import _jax as adapter
from pallas_viz import capture
from pallas_viz import examples as ex
from pallas_viz._jax import hooks as jax_hooks
from pallas_viz._jax import monitor as jax_monitor
from pallas_viz._jax.version import _import_internals
from pallas_viz.errors import TraceUsageError
from pallas_viz.examples.kernels import SHAPE, _kernel, _x

PKG = os.path.dirname(pv.__file__)
SETUP_FILES = {os.path.join(PKG, f) for f in (
    "capture.py", "_jax/hooks.py", "_jax/monitor.py", "_jax/races.py", "_jax/version.py")}
EDGES = {capture.trace.__enter__.__code__, capture.trace.__exit__.__code__}
_NOP = dis.opmap["NOP"]


# --------------------------------------------------------------------------- the harness

def _hooked_classes():
    _, _, _, gsm = _import_internals()
    classes = [gsm.GPUSharedMemory, gsm.Barrier, getattr(gsm, "ClusterBarrier", gsm.Barrier)]
    try:
        from jax._src.pallas.mosaic_gpu.interpret import race_detection_state as rds
        classes.append(rds.GPURaceDetectionState)
    except ImportError:  # pragma: no cover
        pass
    return classes


def _class_state():
    return [dict(vars(c)) for c in _hooked_classes()]


def _wakeup_fd() -> int:
    fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(fd)
    return fd


def _state():
    """Everything a trace changes while it records, and must give back."""
    w = jax_monitor._watcher
    return {
        "classes": _class_state(),
        "active": jax_hooks.active(),
        "wakeup_fd": _wakeup_fd(),
        "sigint": signal.getsignal(signal.SIGINT),
        "callback_log_disabled": logging.getLogger("jax._src.callback").disabled,
        "watching": None if w is None else w.active,
    }


class Injector:
    """A line tracer that raises KeyboardInterrupt at the `n`-th line executed in
    pallas_viz's set-up/tear-down code: frames of SETUP_FILES called, directly or not,
    from `trace.__enter__` or `__exit__` (those of `edges`)."""

    def __init__(self, n: int, edges=EDGES):
        self.n = n
        self.edges = edges
        self.count = 0
        self.where = None

    def __call__(self, frame, event, arg):
        if event != "call" or frame.f_code.co_filename not in SETUP_FILES:
            return None
        f = frame
        while f is not None and f.f_code not in self.edges:
            f = f.f_back
        return self._line if f is not None else None

    def _line(self, frame, event, arg):
        # A `try:` line starts with a NOP: CPython raises a signal's KeyboardInterrupt only
        # where it checks for signals (calls, loops), never at a NOP; and an exception a
        # tracer raises there skips the frame's handlers. Those lines are not counted.
        if event == "line" and frame.f_code.co_code[frame.f_lasti] != _NOP:
            self.count += 1
            if self.count == self.n:
                self.where = (f"{os.path.basename(frame.f_code.co_filename)}:"
                              f"{frame.f_code.co_name}:{frame.f_lineno}")
                raise KeyboardInterrupt(f"injected at line {self.n} ({self.where})")
        return self._line


def _check_next_kernel(fn, args):
    with pv.trace() as tr:
        fn(*args)
    assert len(tr.kernels) == 1 and len(tr.events) > 0 and tr.findings == [], tr


def _quiet_trace():
    return pv.trace(raise_errors=False)


def _sweep(body, fn, args, edges=EDGES, limit=5000, make_trace=_quiet_trace):
    """Inject at every line N = 1, 2, ... of `body` run in `make_trace()` until a run goes
    through; returns the number of lines and the places where interrupts landed."""
    before = _state()
    places = []
    for n in range(1, limit):
        inj = Injector(n, edges)
        interrupted = False
        sys.settrace(inj)
        try:
            with make_trace():
                body()
        except KeyboardInterrupt as e:
            interrupted = True
            assert "injected" in str(e) or isinstance(e.__context__, KeyboardInterrupt) or \
                e.__cause__ is not None, e
        finally:
            sys.settrace(None)
        if inj.where is None:  # the code ran through: every line was tried
            assert not interrupted
            return n - 1, places
        assert interrupted, f"the interrupt at {inj.where} was swallowed"
        places.append(inj.where)
        after = _state()
        for key in before:
            assert after[key] == before[key], (key, inj.where)
        assert not adapter.hooks_installed(), inj.where
        _check_next_kernel(fn, args)
    raise AssertionError("the set-up/tear-down never ran through")


@pytest.fixture(scope="module")
def small_kernel():
    fn, args = ex.hoisted_collective(grid=(1,))
    _check_next_kernel(fn, args)  # compiled once
    return fn, args


@pytest.mark.slow
def test_interrupt_at_every_line_of_an_empty_trace(small_kernel):
    """Set-up and tear-down of a trace around nothing (about 600 lines, 0.15 s each)."""
    lines, places = _sweep(lambda: None, *small_kernel)
    assert lines > 100 and len(places) == lines
    # the sweep reached the hooks, the monitor and the tear-down
    names = {p.split(":")[1] for p in places}
    assert {"__enter__", "__exit__", "hooked", "install", "remove", "start", "stop",
            "_teardown", "_claim", "_release", "quiet_callback_log"} <= names, names


@pytest.mark.slow
def test_interrupt_at_every_line_of_the_tear_down_after_a_kernel(small_kernel):
    """Tear-down with a kernel's records to finish (the set-up is the one above)."""
    fn, args = small_kernel
    lines, places = _sweep(lambda: fn(*args), fn, args,
                           edges={capture.trace.__exit__.__code__})
    assert lines > 100
    assert any(p.split(":")[1] == "_finish" for p in places)


@pytest.mark.slow
def test_interrupt_at_every_line_of_suspending_and_resuming_a_yielding_trace(small_kernel):
    """The pytest plugin's trace yields to one the test starts: an interrupt at any line
    of suspending it for the nested trace or resuming it after (the steps a nested trace
    adds to the set-up and tear-down the sweeps above cover) leaves, once the outer trace
    ends too, no hook, no active trace and the process's state as it was; when none
    lands, the outer trace records the kernel run after the nested one."""
    fn, args = small_kernel
    outers = []

    def yielding():
        outer = pv.trace(raise_errors=False)
        outer._yield_to_nested = True
        outers.append(outer)
        return outer

    def body():
        with pv.trace(raise_errors=False):
            pass
        fn(*args)

    _, places = _sweep(body, fn, args, make_trace=yielding, edges={
        jax_hooks._yielding_outer.__code__, jax_hooks._teardown.__code__,
        jax_hooks._resume.__code__})
    to = outers[-1].trace  # the run that went through
    assert len(to.kernels) == 1 and len(to.events) > 0 and to.findings == [], to
    assert (to.meta["nested_traces"], to.meta["nested_trace_kernels"]) == (1, 0)
    names = {p.split(":")[1] for p in places}
    assert {"_yielding_outer", "_teardown", "_resume", "install", "remove", "start",
            "stop"} <= names, names


# --------------------------------------------------------------------------- exceptions

def _name_error_kernel():
    def body(x_ref, o_ref):
        undefined_in_kernel  # noqa: B018, F821 - the user's own bug

    return _kernel(body, grid=(1,)), _x()


@pytest.mark.parametrize("raise_errors", [True, False])
def test_user_exception_while_jax_traces_the_kernel_is_unchanged(raise_errors):
    fn, args = _name_error_kernel()
    with pytest.raises(NameError) as plain:
        fn(*args)  # what the user sees without pallas_viz
    with pytest.raises(NameError) as info:
        with pv.trace(raise_errors=raise_errors) as tr:
            fn(*args)
    assert type(info.value) is NameError
    assert str(info.value) == str(plain.value) == "name 'undefined_in_kernel' is not defined"
    frames = [f.name for f in info.traceback]
    assert frames[-1] == "body" and "test_user_exception_while_jax_traces" in frames[0]
    # the trace names it as the kernel's own error at its line (not "no kernel ran")
    assert tr.failure.phase == "trace" and tr.failure.in_body and not tr.failure.caught
    (f,) = tr.findings
    assert f.kind == "trace_error" and f.message.startswith(
        "the kernel's code raised an error while JAX traced it: NameError: ")
    assert f.source.function.endswith("body") and "undefined_in_kernel" in f.source.code
    assert not adapter.hooks_installed()


@pytest.mark.parametrize("raise_errors", [True, False])
def test_user_exception_object_passes_through_the_same(raise_errors):
    fn, args = ex.barrier_in_branch()
    mine = ValueError("mine")
    with pytest.raises(ValueError) as info:
        with pv.trace(raise_errors=raise_errors) as tr:
            try:
                fn(*args)  # the kernel fails; the user catches JAX's error ...
            except jax.errors.JaxRuntimeError:
                pass
            raise mine  # ... and raises their own
    assert info.value is mine and info.value.__traceback__ is not None
    assert tr.failure is not None  # the kernel's failure is still in the trace
    assert tr.errors[0].kind == "partial_collective"


def test_known_trace_error_is_still_a_kernel_error():
    fn, args = ex.missing_collective_axes()
    with pytest.raises(pv.KernelError) as info:
        with pv.trace():
            fn(*args)
    assert info.value.finding.kind == "trace_error"
    with pv.trace(raise_errors=False) as tr:
        fn(*args)
    assert [f.kind for f in tr.findings] == ["trace_error"]


def test_interpreter_failure_is_a_kernel_error_or_quiet():
    fn, args = ex.barrier_in_branch()
    with pytest.raises(pv.KernelError):
        with pv.trace():
            fn(*args)
    with pv.trace(raise_errors=False) as tr:
        fn(*args)
    assert tr.errors and tr.errors[0].kind == "partial_collective"


# --------------------------------------------------------------------------- single use

def test_a_trace_object_is_single_use(small_kernel):
    fn, args = small_kernel
    t = pv.trace()
    with t as tr:
        fn(*args)
    assert len(tr.events) > 0
    with pytest.raises(TraceUsageError, match="records once"):
        with t:
            pass
    assert len(tr.events) > 0 and not adapter.hooks_installed()
    t2 = pv.trace()
    with t2 as tr2:
        with pytest.raises(TraceUsageError):
            t2.__enter__()  # re-entering the running one: the outer trace goes on
        fn(*args)
    assert len(tr2.kernels) == 1 and jax_hooks.active() is None


def test_usage_error_is_a_pallas_viz_error():
    assert issubclass(TraceUsageError, pv.PallasVizError)


# --------------------------------------------------------------------------- threads

def test_kernels_of_a_thread_running_before_the_trace_are_kept_apart(small_kernel):
    """Thread B, already running, runs an (untraced) buggy kernel while A traces: B's
    events never enter A's trace."""
    fn, args = small_kernel
    bfn, bargs = ex.collective_in_branch(grid=(1,))
    bfn(*bargs)  # compiled
    cfn, cargs = ex.clean_collective(grid=(1,))  # with a barrier
    cfn(*cargs)
    go, done = threading.Event(), threading.Event()

    def b():
        go.wait(30)
        try:
            bfn(*bargs)
            cfn(*cargs)
        finally:
            done.set()

    tb = threading.Thread(target=b, daemon=True)
    tb.start()
    with pv.trace() as tr:
        go.set()
        assert done.wait(60)
        fn(*args)
    tb.join(10)
    assert len(tr.kernels) == 1 and tr.findings == [], tr.summary()
    assert {e.kernel for e in tr.events} == {0}
    assert tr.meta["other_thread_kernels"] == 2
    for name in ("barrier_ops", "thread_exits"):  # B's barrier operations stay out too
        assert {o["kernel"] for o in tr.meta.get(name, [])} <= {0}, name
    _check_next_kernel(fn, args)


def test_threads_started_inside_the_trace_are_traced(small_kernel):
    fn, args = small_kernel
    with pv.trace() as tr:
        t = threading.Thread(target=lambda: fn(*args))
        t.start()
        t.join()
    assert len(tr.kernels) == 1 and len(tr.events) > 0
    assert "other_thread_kernels" not in tr.meta


def _slow_kernel(iterations: int):
    """Each thread reads and writes an SMEM buffer `iterations` times (a callback each)."""

    def body(x_ref, o_ref):
        def scoped(buf):
            buf[...] = x_ref[...]

            def step(i, carry):
                buf[...] = buf[...] + 1.0
                return carry

            jax.lax.fori_loop(0, iterations, step, 0)
            o_ref[...] = buf[...]

        pl.run_scoped(scoped, plgpu.SMEM(SHAPE, jnp.float32), collective_axes="t")

    return _kernel(body, grid=(1,)), _x()


def _run_in_thread(fn, args):
    out = {}

    def run():
        try:
            out["result"] = fn(*args)
            jax.block_until_ready(out["result"])
        except BaseException as e:  # noqa: BLE001 - reported by the test
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    return t, out


def _wait_until_running(t):
    for _ in range(2000):
        if jax_hooks.kernel_running_elsewhere() is t:
            return
        time.sleep(0.005)
    raise AssertionError("the kernel never started")


def test_leaving_the_trace_waits_for_another_threads_kernel():
    fn, args = _slow_kernel(60)
    t0 = time.monotonic()
    fn(*args)
    one_run = time.monotonic() - t0
    with pv.trace() as tr:
        t, out = _run_in_thread(fn, args)
        t.start()
        _wait_until_running(t)
    # the trace waited for the kernel: all of it is recorded, and nothing was reset
    assert "error" not in out, out
    t.join(10)
    assert len(tr.kernels) == 1 and tr.findings == [], tr.summary()
    assert len({e.thread for e in tr.events if e.block is not None}) == 2
    assert one_run > 0.05


def test_leaving_the_trace_gives_up_after_a_bounded_wait(monkeypatch, small_kernel):
    monkeypatch.setattr(jax_hooks, "EXIT_WAIT_S", 0.3)
    fn, args = _slow_kernel(2**30)  # runs until it is stopped
    t, out = _run_in_thread(fn, args)
    with pytest.raises(TraceUsageError, match="was still running a kernel"):
        with pv.trace() as tr:
            t.start()
            _wait_until_running(t)
    assert tr.meta["left_running"] == t.name
    assert not adapter.hooks_installed() and jax_hooks.active() is None
    # the interpreter was not reset under the kernel: it still runs; a new trace waits
    assert jax_hooks.kernel_running_elsewhere() is t
    with pytest.raises(pv.TraceActiveError, match="is running in Python thread"):
        with pv.trace():
            pass
    _, _, cb, _ = _import_internals()
    cb._shared_memory.set_failed(RuntimeError("stopped by the test"), None, top_level=False)
    t.join(30)
    assert not t.is_alive() and "stopped by the test" in str(out.get("error"))
    _check_next_kernel(*small_kernel)


def test_wakeup_fd_of_an_event_loop_is_given_back():
    r, w = os.pipe()
    os.set_blocking(w, False)
    old = signal.set_wakeup_fd(w)
    try:
        with pv.trace():
            assert _wakeup_fd() != w  # the watcher listens while the trace records
        assert _wakeup_fd() == w
    finally:
        signal.set_wakeup_fd(old)
        os.close(r)
        os.close(w)
