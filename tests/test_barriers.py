"""Barrier operations: what is recorded, `barrier_misuse` findings, deadlocks found at once.

Every kernel here really runs in GPU interpret mode (no mocks). The deadlock examples run
without `timeout_s`: the wait-for check must stop them (its record says so); the kernel
that polls memory instead of waiting is the watchdog's and Ctrl-C's.
"""

from __future__ import annotations

import _thread
import inspect
import threading
import time

import pytest

import pallas_viz as pv
from pallas_viz import _jax as adapter
from pallas_viz import examples as ex
from pallas_viz.analysis.barriers import analyse_barriers
from pallas_viz.analysis.context import AnalysisContext
from pallas_viz.capture import _SourceCache
from pallas_viz.examples import deadlock as dl
from pallas_viz.examples import ops
from pallas_viz.recorder import BarrierOp

RUNS = range(3)


def _line_of(text: str, fn) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


def _run(builder, **trace_kw):
    """(tracer, trace) of one run of `builder`'s kernel, failures kept quiet."""
    fn, args = builder()
    tracer = pv.trace(raise_errors=False, **trace_kw)
    with tracer:
        fn(*args)
    return tracer, tracer.trace


def _ops_json(tracer) -> list[dict]:
    return tracer.trace.meta.get("barrier_ops") or tracer._recorder.barrier_ops_json(
        _SourceCache())


def _exits_json(tracer) -> list[dict]:
    return tracer.trace.meta.get("thread_exits") or tracer._recorder.thread_exits_json()


def _misuse(tracer) -> list:
    """The run's `barrier_misuse` findings (roots and consequences alike)."""
    tr = tracer.trace
    if "barrier_ops" in tr.meta:  # wired into the trace: the findings carry them
        return [f for r in tr.findings for f in [r, *r.consequences]
                if f.kind == "barrier_misuse"]
    ctx = AnalysisContext(table=tr.events, kernels=tr.kernels, failure=tr.failure,
                          deadlocks=list(tr.meta.get("deadlocks") or []),
                          stopped=set(tr.meta.get("stopped_kernels") or []))
    ctx.barrier_ops = _ops_json(tracer)
    ctx.thread_exits = _exits_json(tracer)
    return analyse_barriers(ctx)


def _assert_next_kernel_runs():
    fn, args = ex.hoisted_collective()
    with pv.trace() as tr:
        fn(*args)
    assert len(tr.kernels) == 1 and tr.findings == []


# --------------------------------------------------------------------------- recording

def test_operations_are_recorded_with_phase_allocation_and_line():
    tracer, tr = _run(dl.num_arrivals_too_high)
    raw = tracer._recorder.barrier_ops
    assert raw and all(isinstance(o, BarrierOp) for o in raw)
    ops_ = _ops_json(tracer)
    (alloc,) = {e.allocation for e in tr.events if e.resource == "barrier"}
    wait = next(o for o in ops_ if o["op"] == "wait")
    arrive = next(o for o in ops_ if o["op"] == "arrive")
    wait_line = _line_of("plgpu.barrier_wait(bar)  # phase 0", dl.num_arrivals_too_high)
    arrive_line = _line_of("plgpu.barrier_arrive(bar)  # the only", dl.num_arrivals_too_high)
    assert (wait["thread"], wait["block"], wait["device"], wait["warp"]) == (0, [0], 0, None)
    assert (wait["phase"], wait["num_arrivals"], wait["completes"]) == (0, 2, True)  # blocked
    assert wait["source"]["line"] == wait_line and wait["allocation"] == alloc
    assert (arrive["thread"], arrive["phase"], arrive["arrivals"]) == (1, 0, 1)
    assert arrive["completes"] is False and arrive["via"] == "thread"
    assert arrive["source"]["line"] == arrive_line and arrive["allocation"] == alloc
    assert arrive["resource"] == "barrier" and arrive["part"] is None and not arrive["freed"]
    # the step is the number of allocation events before it: after the barrier's create
    create = next(e for e in tr.events if e.allocation == alloc and e.op == "create")
    assert create.seq < min(wait["step"], arrive["step"]) <= len(tr.events)
    # the thread that finished says so
    assert {(x["thread"], tuple(x["block"])) for x in _exits_json(tracer)} == {(1, (0,))}
    assert {o["op"] for o in ops_} <= {"arrive", "wait", "waited"}
    assert not any(o["op"] == "waited" for o in ops_)  # the wait never ended


def test_a_completed_wait_and_cluster_parts_are_recorded():
    tracer, tr = _run(dl.arrive_after_block_exit)
    ops_ = _ops_json(tracer)
    assert {o["resource"] for o in ops_} == {"cluster_barrier"}
    # a cluster arrival lands in every block's part: one record per part
    arrivals = [o for o in ops_ if o["op"] == "arrive"]
    assert {(tuple(o["block"]), o["part"], tuple(o["target_block"])) for o in arrivals} == {
        ((0,), 0, (0,)), ((0,), 1, (1,)), ((1,), 0, (0,)), ((1,), 1, (1,))}
    # each part needs an arrival from both blocks; the second one completes it
    done = [o for o in arrivals if o["completes"]]
    assert done and all(o["arrivals"] == o["num_arrivals"] == 2 for o in done)
    waited = [o for o in ops_ if o["op"] == "waited"]
    assert waited and all(o["target_block"] == o["block"] for o in waited)
    assert tr.failure is None and "deadlocks" not in tr.meta


# --------------------------------------------------------------------------- deadlocks

DEADLOCKS = ["barrier_handshake_in_branch", "num_arrivals_too_high", "crossed_waits"]


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("name", DEADLOCKS)
def test_deadlock_is_stopped_by_the_wait_for_check(name, run):
    fn, args = getattr(dl, name)()
    with pytest.raises(pv.KernelError) as info:
        with pv.trace() as tr:  # no timeout_s: only the wait-for check can stop it
            fn(*args)
    f = info.value.finding
    if name == "barrier_handshake_in_branch":
        # the barrier t 0 alone allocated is the root (t 1 finished: it never will); the
        # deadlock it causes folds under it
        assert f.kind == "partial_collective", f
        (f,) = [c for c in f.consequences if c.kind == "deadlock"]
    assert f.kind == "deadlock" and f.severity == "error"
    (d,) = tr.meta["deadlocks"]
    assert d["detected_by"] == "wait_for" and "timeout_s" not in d
    assert "stopped at once by the wait-for check" in f.message
    assert "watchdog" not in f.message
    assert not adapter.hooks_installed()
    _assert_next_kernel_runs()


def test_handshake_chain_names_the_thread_that_should_arrive():
    fn, args = dl.barrier_handshake_in_branch()
    with pytest.raises(pv.KernelError) as info:
        with pv.trace() as tr:
            fn(*args)
    (f,) = [c for c in info.value.finding.consequences if c.kind == "deadlock"]
    assert f.cells == [(0, (0,), 0)]
    wait = _line_of("plgpu.barrier_wait(bar)", dl.barrier_handshake_in_branch)
    last = _line_of('o_ref[...] = x_ref[...] + jnp.zeros', dl.barrier_handshake_in_branch)
    assert f.source.line == wait
    (w,) = tr.meta["deadlocks"][0]["waiters"]
    (e,) = w["expects"]
    assert (e["thread"], e["state"], e["source"]["line"]) == (1, "finished", last)
    assert f"<- needs t 1 (finished; last at line {last})" in f.message
    assert "allocate the barrier unconditionally" in f.suggestion


def test_too_few_arrivals_names_who_arrived_and_advises_num_arrivals():
    fn, args = dl.num_arrivals_too_high()
    with pytest.raises(pv.KernelError) as info:
        with pv.trace():
            fn(*args)
    f = info.value.finding
    arrive = _line_of("plgpu.barrier_arrive(bar)  # the only", dl.num_arrivals_too_high)
    assert f"(1 of 2 arrivals in phase 0: t 1 at line {arrive})" in f.message
    assert "no other thread arrives at it" in f.message
    assert "num_arrivals" in f.suggestion


def test_crossed_waits_chain_is_a_cycle():
    fn, args = dl.crossed_waits()
    with pytest.raises(pv.KernelError) as info:
        with pv.trace() as tr:
            fn(*args)
    f = info.value.finding
    w0 = _line_of("plgpu.barrier_wait(to_0)", dl.crossed_waits)
    w1 = _line_of("plgpu.barrier_wait(to_1)", dl.crossed_waits)
    assert f.cells == [(0, (0,), 0), (0, (0,), 1)]
    assert f"t 0 waits at line {w0}" in f.message
    assert f"<- needs t 1 (itself waiting at line {w1})" in f.message
    assert f"<- needs t 0 (itself waiting at line {w0})" in f.message
    waiters = tr.meta["deadlocks"][0]["waiters"]
    assert [e["waits_on"]["allocation"] for w in waiters for e in w["expects"]] == [
        waiters[1]["allocation"], waiters[0]["allocation"]]
    assert "Arrive before waiting" in f.suggestion


def test_polling_kernel_is_left_to_the_watchdog():
    tracer, tr = _run(dl.spin_on_flag, timeout_s=1.0)
    (d,) = tr.meta["deadlocks"]
    assert d["detected_by"] == "timeout"
    (f,) = [x for x in tr.findings if x.kind == "deadlock"]
    poll = _line_of("jax.lax.while_loop", dl.spin_on_flag)
    assert "stopped by the watchdog (timeout_s)" in f.message
    assert f"<- needs t 1 (running; last at line {poll})" in f.message
    _assert_next_kernel_runs()


def test_ctrl_c_stops_a_kernel_the_check_cannot_see():
    fn, args = dl.spin_on_flag()
    tracer = pv.trace()

    def interrupt():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            hooks = getattr(tracer, "_hooks", None)
            if hooks is not None and hooks.waits.waiting:
                waker.saw_wait = True
                break
            time.sleep(0.005)
        time.sleep(0.2)  # the polling thread keeps running: the check must not fire
        _thread.interrupt_main()

    waker = threading.Thread(target=interrupt, daemon=True)
    waker.saw_wait = False
    waker.start()
    with pytest.raises(KeyboardInterrupt):
        with tracer:
            fn(*args)
    waker.join()
    assert waker.saw_wait
    tr = tracer.trace
    assert tr.meta["interrupted"] is True
    # who waited where when the user gave up is a possible deadlock (a warning: the
    # kernel may have been only slow), never a clean run
    (d,) = tr.meta["deadlocks"]
    assert d["detected_by"] == "interrupt"
    (f,) = tr.findings
    assert f.kind == "deadlock" and f.severity == "warning", tr.summary()
    poll = _line_of("jax.lax.while_loop", dl.spin_on_flag)
    assert f.message.startswith("possible deadlock: the kernel was interrupted (Ctrl-C)")
    assert f"<- needs t 1 (running; last at line {poll})" in f.message
    assert f.suggestion.endswith("let the kernel run longer before interrupting it.")
    _assert_next_kernel_runs()


# --------------------------------------------------------------------------- misuse

@pytest.mark.parametrize("run", RUNS)
def test_phase_completing_with_nobody_waiting(run):
    tracer, tr = _run(dl.arrive_without_wait)
    (f,) = _misuse(tracer)
    arrive = _line_of("plgpu.barrier_arrive(bar)  # signals", dl.arrive_without_wait)
    alloc = _line_of("pl.run_scoped(scoped", dl.arrive_without_wait)
    assert f.severity == "error" and f.source.line == arrive
    assert alloc in [r.line for r in f.related]
    assert f.cells == [(0, (0,), 0)]
    # the interpreter fails the run at the second completion, before every thread got to
    # its end: which waits it would have made is not known, so the message says only what
    # the kernel failed to order (the same in every interleaving)
    assert "phase 0 of the barrier" in f.message
    assert "with nothing making that arrival wait until it had been observed" in f.message
    assert "plgpu.barrier_wait(bar)" in f.suggestion and '"empty" barrier' in f.suggestion
    # the interpreter's own error says the same, without a line
    assert tr.failure is not None and "no threads observed phase 0" in tr.failure.message


@pytest.mark.parametrize("run", RUNS)
def test_phase_skipped_by_the_only_waiter(run):
    tracer, tr = _run(dl.unobserved_phase)
    (f,) = _misuse(tracer)
    arrive = _line_of("# phases 1 and 2: nobody waits", dl.unobserved_phase)
    assert f.severity == "error" and f.source.line == arrive
    assert "phase 1 of the barrier" in f.message
    if tr.failure is None:  # JAX 0.12 runs it to its end: who waits for what is known
        assert "threads wait only for phase(s) 0" in f.message
        assert "Wait for every phase" in f.suggestion
    else:  # 0.11 fails the run when the barrier is freed: only what was not ordered
        assert "had only observed barrier up to phase 0" in tr.failure.message
        assert "with nothing making that arrival wait until it had been observed" in f.message
        assert "plgpu.barrier_wait(bar)" in f.suggestion
        assert [c.kind for c in f.consequences] == ["interpreter_error"]


@pytest.mark.parametrize("run", RUNS)
def test_arrival_after_the_block_left_the_scope(run):
    tracer, tr = _run(dl.arrive_after_block_exit)
    (f,) = _misuse(tracer)
    arrive = _line_of("# lands in block 0's part too", dl.arrive_after_block_exit)
    alloc = _line_of("pl.run_scoped(inner", dl.arrive_after_block_exit)
    assert f.severity == "error" and f.source.line == arrive
    assert f.cells == [(0, (1,), 0)]
    assert alloc in [r.line for r in f.related]
    assert "block (1) arrive(s) at the cluster barrier" in f.message
    assert "after block(s) (0) left its scope" in f.message
    assert "before its `run_scoped` ends" in f.suggestion
    # the barrier's create and block 0's release are linked
    linked = {(tr.events[i].op, tr.events[i].block) for i in f.events}
    assert ("release", (0,)) in linked or ("free", (0,)) in linked


@pytest.mark.parametrize("run", RUNS)
def test_wait_that_can_never_end(run):
    tracer, tr = _run(dl.num_arrivals_too_high)
    (f,) = _misuse(tracer)
    wait = _line_of("plgpu.barrier_wait(bar)  # phase 0", dl.num_arrivals_too_high)
    arrive = _line_of("plgpu.barrier_arrive(bar)  # the only", dl.num_arrivals_too_high)
    assert f.severity == "error" and f.source.line == wait and f.cells == [(0, (0,), 0)]
    assert "a wait for phase 0 of the barrier" in f.message and "can never end" in f.message
    assert f"needs 2 arrival(s), 1 came (from t 1 at line {arrive})" in f.message
    assert "num_arrivals" in f.suggestion


def test_wait_on_a_barrier_only_the_waiter_holds():
    tracer, tr = _run(dl.barrier_handshake_in_branch)
    (f,) = _misuse(tracer)
    assert "none came, and no other thread holds it or arrives at it" in f.message
    assert "thread-dependent branch" in f.suggestion


def test_cycle_is_no_misuse_of_either_barrier():
    # each barrier alone could still complete: only the deadlock finding explains it
    tracer, tr = _run(dl.crossed_waits)
    assert _misuse(tracer) == []


@pytest.mark.parametrize("name", ["clean_collective", "hoisted_collective"])
def test_clean_kernels_have_no_barrier_misuse(name):
    tracer, tr = _run(getattr(ex, name))
    assert _misuse(tracer) == [] and "deadlocks" not in tr.meta


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ops.ALL))
def test_real_kernels_are_never_stopped_and_have_no_misuse(name):
    tracer, tr = _run(ops.ALL[name])  # no timeout_s: only the wait-for check could stop it
    assert "deadlocks" not in tr.meta and tr.failure is None
    assert _misuse(tracer) == []
    ops_ = _ops_json(tracer)
    arrivals = [o for o in ops_ if o["op"] == "arrive"]
    waits = [o for o in ops_ if o["op"] == "wait"]
    assert arrivals and waits
    assert {o["via"] for o in arrivals} >= {"copy"}  # TMA copies arrive when they land
    assert all(o["allocation"] >= 0 for o in arrivals + waits)
    # every wait ended
    assert len([o for o in ops_ if o["op"] == "waited"]) == len(waits)


def _corpus_param(name):
    from pallas_viz.examples import corpus

    marks = [pytest.mark.slow] if name in corpus.SLOW else []
    return pytest.param(name, marks=marks, id=name)


def _corpus_names():
    from pallas_viz.examples import corpus

    return [n for n in corpus.CLEAN_KERNELS if n not in corpus.NEEDS_TWO_DEVICES]


@pytest.mark.parametrize("name", [_corpus_param(n) for n in _corpus_names()])
def test_clean_corpus_is_never_stopped_and_has_no_misuse(name):
    # handshakes, cluster barriers, warp-level code, tcgen05, pallas_call: no timeout_s, so
    # a false deadlock would stop the kernel
    from pallas_viz.examples import corpus

    tracer, tr = _run(corpus.CLEAN_KERNELS[name])
    assert "deadlocks" not in tr.meta and tr.failure is None, tr.summary()
    assert _misuse(tracer) == []
    # grid steps allocate their barriers under the same keys again: each operation names
    # its own step's allocation (numbered after the run, replaying the requests in order)
    _check_op_allocations(tr, _ops_json(tracer))


def _check_op_allocations(tr, ops_) -> int:
    """Every barrier operation names the allocation its barrier had at its step: created
    before it and freed at or after it, or (an operation on a freed barrier) freed before
    it. Returns how many operations named one."""
    created = {e.allocation: e.seq for e in tr.events if e.op == "create"}
    freed_at = {e.allocation: e.seq for e in tr.events if e.op == "free"}
    named = 0
    for o in ops_:
        a = o["allocation"]
        if o["resource"] == "named_barrier":
            assert a == -1
            continue
        assert a >= 0, o  # every operation here is on a barrier that was allocated
        named += 1
        if o["freed"]:
            assert freed_at[a] < o["step"], o
        else:
            assert created[a] < o["step"] <= freed_at.get(a, len(tr.events)), o
    return named


@pytest.mark.parametrize("run", RUNS)
def test_a_late_arrival_at_a_released_part_names_its_allocation(run):
    """Block 1 arrives at the cluster barrier's part in block 0 after block 0 released it:
    the barrier is still allocated (block 1 holds it), and the arrival names that
    allocation, whichever order the threads ran in."""
    tracer, tr = _run(dl.arrive_after_block_exit)
    ops_ = _ops_json(tracer)
    assert _check_op_allocations(tr, ops_) == len(ops_) > 0
    release = min(e.seq for e in tr.events if e.op == "release" and e.resource ==
                  "cluster_barrier")
    late = [o for o in ops_ if o["op"] == "arrive" and o["step"] > release]
    assert late and all(not o["freed"] for o in late)
