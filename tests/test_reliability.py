"""Deadlocks, Ctrl-C, concurrent traces and the JAX version gate, with real kernels."""

from __future__ import annotations

import _thread
import inspect
import os
import signal
import threading
import time

import jax
import pytest

import pallas_viz as pv
from pallas_viz import _jax as adapter
from pallas_viz import examples as ex
from pallas_viz.errors import UnsupportedJaxError
from pallas_viz.examples.deadlock import spin_on_flag


def _line_of(text: str, fn) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


def _assert_next_kernel_runs():
    fn, args = ex.hoisted_collective()
    with pv.trace() as tr:
        fn(*args)
    assert len(tr.kernels) == 1 and tr.findings == []


# --------------------------------------------------------------------------- deadlocks

# The watchdog's idle time in the deadlock tests: the kernel deadlocks for sure, so any
# timeout stops it; a short one keeps the tests quick.
DEADLOCK_TIMEOUT_S = 1.0


def test_deadlock_is_stopped_and_explained():
    fn, args = ex.barrier_handshake_in_branch()
    with pytest.raises(pv.KernelError) as info:
        with pv.trace(timeout_s=DEADLOCK_TIMEOUT_S) as tr:
            fn(*args)
    root = info.value.finding
    wait_line = _line_of("plgpu.barrier_wait(bar)", ex.barrier_handshake_in_branch)
    alloc_line = _line_of("pl.run_scoped(scoped, plgpu.Barrier", ex.barrier_handshake_in_branch)
    branch_line = _line_of("@pl.when(t == 0)", ex.barrier_handshake_in_branch)
    # the root: the barrier allocated in t 0's branch, which t 1 (finished) never requests;
    # the deadlock it causes is its consequence
    assert root.kind == "partial_collective" and root.source.line == alloc_line
    assert root.branch.line == branch_line
    (f,) = [c for c in root.consequences if c.kind == "deadlock"]
    assert f.severity == "error"
    assert f.cells == [(0, (0,), 0)]  # thread 0 of block 0 waits; thread 1 finished
    assert f.source.line == wait_line and f.source.file.endswith("examples/deadlock.py")
    assert alloc_line in [r.line for r in f.related]
    assert "t 1 never allocated it" in f.message  # the kernel's own thread axis name
    # the barrier's allocation event is linked
    (seq,) = f.events
    ev = tr.events[seq]
    assert (ev.op, ev.resource, ev.thread, ev.source.line) == ("create", "barrier", 0, alloc_line)
    assert tr.findings[0] is root or tr.findings[0] == root
    (d,) = tr.meta["deadlocks"]
    assert d["waiters"][0]["num_arrivals"] == 1 and d["waiters"][0]["arrivals"] == 0
    assert "deadlock" in str(info.value)
    assert isinstance(info.value.__cause__, jax.errors.JaxRuntimeError)
    assert not adapter.hooks_installed()
    _assert_next_kernel_runs()


def test_deadlock_quiet_and_round_trip(tmp_path):
    fn, args = ex.barrier_handshake_in_branch()
    with pv.trace(timeout_s=DEADLOCK_TIMEOUT_S, raise_errors=False) as tr:
        fn(*args)
    kinds = [f.kind for f in tr.findings]
    assert kinds == ["partial_collective"], tr.summary()
    assert {"deadlock", "barrier_misuse"} <= {c.kind for c in tr.findings[0].consequences}
    # (no leak: the stopped kernel never ended, nothing of it "leaks")
    path = tmp_path / "deadlock.json"
    tr.save(path)
    back = pv.load(path)
    assert back.findings == tr.findings and back.meta["deadlocks"] == tr.meta["deadlocks"]
    _assert_next_kernel_runs()


def test_timeout_does_not_stop_a_kernel_that_finishes():
    fn, args = ex.clean_collective(grid=(3,))
    with pv.trace(timeout_s=3) as tr:
        fn(*args)
    assert tr.findings == [] and "deadlocks" not in tr.meta


# --------------------------------------------------------------------------- Ctrl-C

def _interrupt_when_stuck(tracer, how: str, limit_s: float = 60.0):
    """Send Ctrl-C `how` as soon as a kernel thread of `tracer` waits on a barrier (or after
    `limit_s`, so a broken test cannot hang); the thread's `.saw_wait` tells which it was."""

    def run():
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            hooks = getattr(tracer, "_hooks", None)
            if hooks is not None and hooks.waits.waiting:
                t.saw_wait = True
                break
            time.sleep(0.005)
        if how == "interrupt_main":
            _thread.interrupt_main()
        elif how == "kill":
            os.kill(os.getpid(), signal.SIGINT)  # delivered to any thread, like Ctrl-C
        else:
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    t = threading.Thread(target=run, daemon=True)
    t.saw_wait = False
    t.start()
    return t


@pytest.mark.parametrize("how", ["interrupt_main", "kill", "pthread_kill"])
def test_keyboard_interrupt_stops_a_stuck_kernel(how):
    fn, args = spin_on_flag()  # a thread polls memory: only Ctrl-C (or timeout_s) ends it
    tracer = pv.trace()  # no timeout: only Ctrl-C can end this kernel
    waker = _interrupt_when_stuck(tracer, how)
    with pytest.raises(KeyboardInterrupt):
        with tracer:
            fn(*args)
    waker.join()
    assert waker.saw_wait  # the interrupt stopped a kernel that was waiting forever
    tr = tracer.trace
    assert tr.meta["interrupted"] is True
    assert len(tr.kernels) == 1 and len(tr.events) > 0  # the partial trace is kept
    # no leak (the kernel did not end), and the waiting thread is a possible deadlock
    assert [f.kind for f in tr.findings] == ["deadlock"], tr.summary()
    assert tr.findings[0].severity == "warning" and "clean" not in tr.summary()
    assert not adapter.hooks_installed()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    _assert_next_kernel_runs()


# --------------------------------------------------------------------------- concurrency

def test_trace_in_another_thread_is_refused_and_first_trace_intact():
    fn, args = ex.clean_collective()
    errors = []

    def other():
        try:
            with pv.trace():
                pass
        except pv.TraceActiveError as e:
            errors.append(e)

    with pv.trace() as tr:
        t = threading.Thread(target=other)
        t.start()
        t.join()
        fn(*args)
    assert len(errors) == 1 and "already recording" in str(errors[0])
    assert len(tr.kernels) == 1 and len(tr.events) == 36 and tr.findings == []
    assert not adapter.hooks_installed()


def test_nested_trace_keeps_outer_trace():
    fn, args = ex.clean_collective()
    with pv.trace() as outer:
        fn(*args)
        with pytest.raises(pv.TraceActiveError):
            with pv.trace():
                pass
        fn(*args)
    assert len(outer.kernels) == 2 and outer.findings == []


def test_kernels_in_a_worker_thread_are_traced():
    fn, args = ex.collective_in_branch()
    with pv.trace(timeout_s=30) as tr:
        t = threading.Thread(target=lambda: fn(*args))
        t.start()
        t.join()
    assert {f.kind for f in tr.findings} >= {"partial_collective"}


# --------------------------------------------------------------------------- versions

@pytest.mark.parametrize("version", ["0.11.0", "0.11.2", "0.12.0", "0.12.0.1"])
def test_supported_versions_pass_the_gate(version):
    adapter.check_version(version)


@pytest.mark.parametrize("version", ["0.10.2", "0.4.38", "0.13.0", "1.0.0", "garbage"])
def test_unsupported_versions_get_a_clear_error(version):
    with pytest.raises(UnsupportedJaxError) as info:
        adapter.check_version(version)
    msg = str(info.value)
    assert f"this is JAX {version}" in msg
    assert "0.11.x and 0.12.x" in msg and "pip install" in msg


# --------------------------------------------------------------------------- races

def _access_lines(f):
    return {f.source.line} | {r.line for r in f.related}


# JAX 0.12 raises on the first race (the kernel stops); 0.11 prints it and runs on.
RACE_RAISES = tuple(int(p) for p in jax.__version__.split(".")[:2]) >= (0, 12)


def test_race_becomes_a_structured_finding():
    fn, args = ex.unsynchronized_handoff()
    if RACE_RAISES:
        with pytest.raises(pv.KernelError) as info:
            with pv.trace(detect_races=True) as tr:
                fn(*args)
        f = info.value.finding
        assert "RACE DETECTED" in str(info.value.__cause__)
        assert tr.findings[0] == f
    else:
        with pv.trace(detect_races=True) as tr:
            fn(*args)
        f = tr.findings[0]
    assert f.kind == "race" and f.severity == "error"
    assert f.cells == [(0, (0,), 0), (0, (0,), 1)]
    write = _line_of("buf[...] = x_ref[...] * 2.0", ex.unsynchronized_handoff)
    read = _line_of("o_ref[...] = buf[...]", ex.unsynchronized_handoff)
    alloc = _line_of("pl.run_scoped(scoped, plgpu.SMEM", ex.unsynchronized_handoff)
    assert {write, read, alloc} <= _access_lines(f)
    # (one block: the cells name it)
    assert f"write by t 0 at line {write} is not ordered with the read by t 1 at line {read}" in (
        f.message)
    assert "alias" not in f.message
    # the buffer's allocation events are linked: thread 0's create and thread 1's join
    evs = [tr.events[i] for i in f.events]
    assert {(e.op, e.thread, e.memory_space) for e in evs} == {
        ("create", 0, "SMEM"), ("join", 1, "SMEM")} or {
        ("create", 1, "SMEM"), ("join", 0, "SMEM")} == {(e.op, e.thread, e.memory_space)
                                                       for e in evs}
    assert all(e.source.line == alloc for e in evs)
    assert [x.kind for x in tr.findings].count("interpreter_error") == 0
    (r,) = tr.meta["races"]
    assert {r["access"]["kind"], r["other"]["kind"]} == {"read", "write"}
    assert not adapter.hooks_installed()
    _assert_next_kernel_runs()


def test_race_from_aliasing_points_to_the_divergent_allocation(tmp_path):
    fn, args = ex.race_after_divergent_collective()
    with pv.trace(detect_races=True, raise_errors=False) as tr:
        fn(*args)
    divergent = _line_of("pl.run_scoped(scratch", ex.race_after_divergent_collective)
    # the race the user saw is a consequence of the divergent allocation, the one root
    (root,) = tr.findings
    assert root.kind == "partial_collective" and root.source.line == divergent
    (f,) = [x for x in root.consequences if x.kind == "race"]
    assert "alias one buffer by accident" in f.message
    assert f"the collective allocation at line {divergent} was made by t 0 only" in f.message
    assert divergent == f.related[0].line or divergent in _access_lines(f)
    # the divergent allocation's first request is linked
    assert divergent in {tr.events[i].source.line for i in f.events}
    path = tmp_path / "race.json"
    tr.save(path)
    assert pv.load(path).findings == tr.findings


def test_clean_kernel_has_no_race():
    fn, args = ex.hoisted_collective(grid=(1,))
    with pv.trace(detect_races=True) as tr:
        fn(*args)
    assert tr.findings == [] and "races" not in tr.meta


def test_race_between_grid_points_names_both_blocks():
    # Both grid points write the whole output: on a GPU the blocks run concurrently.
    from pallas_viz.examples import races as race_ex

    fn, args = race_ex.blocks_write_same_output("grid")
    with pv.trace(detect_races=True, raise_errors=False) as tr:
        fn(*args)
    f = tr.findings[0]
    assert [x.kind for x in tr.findings].count("race") == 1
    assert f.kind == "race" and f.cells == [(0, (0,), 0), (0, (1,), 0)]
    assert "GMEM" in f.message
