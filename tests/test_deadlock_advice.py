"""The advice of a `deadlock` finding fits the line it points at, in every run.

Every kernel really runs in GPU interpret mode (no mocks), two or three times (thread
interleaving varies): one finding per mistake, the same message, line and advice in each
run. The advice follows what the records show of the threads that should arrive: still
running when the watchdog stopped the kernel (a spin on memory), finished without ever
arriving, waiting themselves, or never allocating the barrier (the only case where
"allocate the barrier unconditionally" is right).
"""

from __future__ import annotations

import inspect
import json
import re

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from roots_util import assert_stays_clean, single_error_root

import pallas_viz as pv
from pallas_viz.analysis.deadlock import (
    CYCLE_HINT,
    DEADLOCK_HINT,
    FINISHED_HINT,
    GENERAL_HINT,
    MISSING_ARRIVAL_HINT,
    TOO_FEW_ARRIVALS_HINT,
)
from pallas_viz.examples import deadlock as dl
from pallas_viz.examples import shapes as sh
from pallas_viz.examples.kernels import SHAPE, _kernel, _x

RUNS = 3
TIMEOUT_S = 1.0  # spin_on_flag never ends: any timeout stops it; a short one is quick
BRANCH_ADVICE = "allocate the barrier unconditionally"


def _line_of(text: str, fn) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


def _deadlock(builder, timeout_s=None):
    """The trace and the one `deadlock` finding of one run of `builder`'s kernel."""
    fn, args = builder()
    sh.drain_effects()
    with pv.trace(raise_errors=False, timeout_s=timeout_s) as tr:
        jax.block_until_ready(fn(*args))
    roots = [f for f in tr.findings if f.severity == "error"]
    assert [f.kind for f in roots] == ["deadlock"], tr.summary()
    return tr, roots[0]


def _each_run(builder, timeout_s=None, runs=RUNS):
    """The deadlock finding of each run; asserts that they say the same every run."""
    seen, out = set(), []
    for _ in range(runs):
        _, f = _deadlock(builder, timeout_s)
        seen.add((f.message, f.suggestion, f.source.line, tuple(f.cells)))
        out.append(f)
    assert len(seen) == 1, seen
    return out[0]


# --------------------------------------------------------------------------- the watchdog

def test_a_thread_spinning_on_a_flag_gets_spin_advice_not_branch_advice():
    f = _each_run(dl.spin_on_flag, timeout_s=TIMEOUT_S)
    wait = _line_of("plgpu.barrier_wait(bar)", dl.spin_on_flag)
    alloc = _line_of("pl.run_scoped(scoped", dl.spin_on_flag)
    poll = _line_of("jax.lax.while_loop", dl.spin_on_flag)
    assert f.message == (
        "deadlock: the kernel made no progress for 1 s and was stopped by the watchdog "
        f"(timeout_s); block (0) t 0 waits at line {wait} on a barrier allocated at line "
        f"{alloc} (0 of 1 arrivals in phase 0) <- needs t 1 (running; last at line {poll})")
    assert f.source.line == wait and f.cells == [(0, (0,), 0)]
    assert {alloc, poll} <= {r.line for r in f.related}
    # where the thread that should arrive is, and why it never gets to its arrival
    assert f.suggestion.startswith(
        f"t 1 should arrive at this barrier but is still running (last recorded at line "
        f"{poll}) and never gets to the arrival: it is stuck before it, most often spinning "
        "on memory (a flag) that another thread sets only after this wait.")
    assert "set the flag (or do whatever the running thread waits for) before waiting" in (
        f.suggestion)
    assert "instead of polling memory" in f.suggestion
    assert f.suggestion.endswith("If t 1 is only slow, raise `timeout_s` (`--timeout` for "
                                 "`pallas-viz run`, `%pallas_trace`).")
    # the barrier is allocated unconditionally there: no advice about branches
    assert BRANCH_ADVICE not in f.suggestion and "thread-dependent branch" not in f.suggestion
    assert "never allocated it" not in f.message


def spin_on_flag_body(ctx, x_ref, o_ref):
    """`spin_on_flag` as a launch-shape body: thread 0 waits, the last thread spins on a
    flag thread 0 sets only after its wait, then arrives."""

    def scoped(flag, bar):
        @pl.when(ctx.thread == 0)
        def _():
            plgpu.barrier_wait(bar)  # WAIT
            flag[...] = jnp.ones(SHAPE, jnp.float32)
            o_ref[...] = x_ref[...]

        @pl.when(ctx.thread == sh.last_thread(ctx))
        def _():
            flag[...] = jnp.zeros(SHAPE, jnp.float32)
            jax.lax.while_loop(lambda i: flag[0, 0] == 0.0, lambda i: i + 1, 0)  # SPIN
            plgpu.barrier_arrive(bar)

    pl.run_scoped(scoped, plgpu.SMEM(SHAPE, jnp.float32), plgpu.Barrier(num_arrivals=1),  # ALLOC
                  collective_axes=ctx.axis)


# the waiting cells per launch shape: the blocks of a grid run one after the other (the
# first one spins forever), the blocks of a cluster together
SPIN_CELLS = {
    "no_grid": [(0, (), 0)], "grid1": [(0, (0,), 0)], "grid3": [(0, (0,), 0)],
    "cluster2": [(0, (0,), 0), (0, (1,), 0)], "core_map": [(0, (), 0)],
    "core_map_grid": [(0, (0,), 0)],
}


@pytest.mark.parametrize("shape", list(SPIN_CELLS))
def test_spin_advice_in_every_launch_shape(shape):
    wait = sh.marked_line(spin_on_flag_body, "WAIT")
    spin = sh.marked_line(spin_on_flag_body, "SPIN")
    alloc = sh.marked_line(spin_on_flag_body, "ALLOC")
    f = _each_run(lambda: sh.launch(spin_on_flag_body, shape), TIMEOUT_S, runs=2)
    assert f.source.line == wait and f.cells == SPIN_CELLS[shape]
    assert f.message.startswith(
        "deadlock: the kernel made no progress for 1 s and was stopped by the watchdog")
    assert f.message.count(f"<- needs w 1 (running; last at line {spin})") == len(f.cells)
    assert f"on a barrier allocated at line {alloc} (0 of 1" in f.message
    assert "never allocated it" not in f.message
    assert f.suggestion.startswith(
        f"w 1 should arrive at this barrier but is still running (last recorded at line "
        f"{spin}) and never gets to the arrival")
    assert BRANCH_ADVICE not in f.suggestion


# --------------------------------------------------------------------------- wait-for check

def test_a_forgotten_arrival_names_the_thread_not_the_allocation():
    f = _each_run(dl.missing_arrival)
    wait = _line_of("plgpu.barrier_wait(bar)", dl.missing_arrival)
    alloc = _line_of("pl.run_scoped(scoped", dl.missing_arrival)
    assert f.message == (
        "deadlock: every thread has finished or waits on a barrier that no running thread "
        "can complete; stopped at once by the wait-for check; block (0) t 0 waits at line "
        f"{wait} on a barrier allocated at line {alloc} (0 of 1 arrivals in phase 0) "
        f"<- needs t 1 (finished; last at line {alloc})")
    assert f.source.line == wait and f.cells == [(0, (0,), 0)]
    assert f.suggestion == MISSING_ARRIVAL_HINT.format(who="t 1", holds="holds")
    assert f.suggestion.startswith(
        "t 1 holds the barrier but finished without ever arriving at it")
    assert "`plgpu.barrier_arrive` on this barrier" in f.suggestion
    assert BRANCH_ADVICE not in f.suggestion


def missing_arrival_body(ctx, x_ref, o_ref):
    """The last thread writes a buffer and never arrives; thread 0 waits for it."""

    def scoped(buf, bar):
        @pl.when(ctx.thread == sh.last_thread(ctx))
        def _():
            buf[...] = x_ref[...] * 2.0

        @pl.when(ctx.thread == 0)
        def _():
            plgpu.barrier_wait(bar)  # WAIT
            o_ref[...] = buf[...]

    pl.run_scoped(scoped, plgpu.SMEM(SHAPE, jnp.float32), plgpu.Barrier(num_arrivals=1),
                  collective_axes=ctx.axis)


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "cluster2", "core_map_grid"])
def test_forgotten_arrival_advice_in_launch_shapes(shape):
    f = _each_run(lambda: sh.launch(missing_arrival_body, shape), runs=2)
    assert f.source.line == sh.marked_line(missing_arrival_body, "WAIT")
    assert "never allocated it" not in f.message
    assert f.suggestion == MISSING_ARRIVAL_HINT.format(who="w 1", holds="holds")


def shorter_loop_body(ctx, x_ref, o_ref):
    """Both threads arrive and wait each round of a loop on one shared barrier; thread 0
    runs one round more, so its last wait gets its own arrival only."""
    rounds = 2 + (ctx.thread == 0).astype(jnp.int32)

    def scoped(bar):
        def step(i, carry):
            plgpu.barrier_arrive(bar)
            plgpu.barrier_wait(bar)  # WAIT
            return carry

        jax.lax.fori_loop(0, rounds, step, 0)

    pl.run_scoped(scoped, plgpu.Barrier(num_arrivals=2), collective_axes=ctx.axis)


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "cluster2", "core_map", "tmem"])
def test_a_thread_that_arrived_for_earlier_phases_gets_trip_count_advice(shape):
    """The phase thread 0 waits for has its own arrival of two; thread 1 arrived for every
    earlier phase and finished: the loops' trip counts differ (not `num_arrivals` set too
    high, which no phase could reach)."""
    f = _each_run(lambda: sh.launch(shorter_loop_body, shape))
    assert f.source.line == sh.marked_line(shorter_loop_body, "WAIT")
    assert "(1 of 2 arrivals in phase 2" in f.message
    assert f.suggestion == FINISHED_HINT


def test_a_wait_behind_a_wait_is_not_called_a_cycle():
    f = _each_run(dl.wait_behind_a_wait)
    wait_a = _line_of("plgpu.barrier_wait(a)", dl.wait_behind_a_wait)
    wait_b = _line_of("plgpu.barrier_wait(b)", dl.wait_behind_a_wait)
    assert f.cells == [(0, (0,), 0), (0, (0,), 1)] and f.source.line == wait_a
    assert f"<- needs t 1 (itself waiting at line {wait_b}), t 2 (finished;" in f.message
    assert f.suggestion != CYCLE_HINT
    assert f.suggestion == (
        MISSING_ARRIVAL_HINT.format(who="t 2", holds="holds")
        + " If the arrival should come instead from t 1, which waits itself: arrive before "
        "waiting (signal first, then wait for the other side).")


def too_few_arrivals_of_three(grid=(1,)):
    """`num_arrivals=2`: thread 1 arrives, thread 2 holds the barrier and never does."""

    def body(x_ref, o_ref):
        t = jax.lax.axis_index("t")

        def scoped(bar):
            @pl.when(t == 1)
            def _():
                plgpu.barrier_arrive(bar)

            @pl.when(t == 0)
            def _():
                plgpu.barrier_wait(bar)
                o_ref[...] = x_ref[...]

        pl.run_scoped(scoped, plgpu.Barrier(num_arrivals=2), collective_axes="t")

    return _kernel(body, grid=grid, num_threads=3), _x()


def test_too_few_arrivals_names_the_thread_that_did_not_arrive():
    f = _each_run(too_few_arrivals_of_three)
    arrive = _line_of("plgpu.barrier_arrive(bar)", too_few_arrivals_of_three)
    assert f"(1 of 2 arrivals in phase 0: t 1 at line {arrive}) <- needs t 2 (finished;" in (
        f.message)
    assert f.suggestion == (TOO_FEW_ARRIVALS_HINT
                            + " Here t 2 holds the barrier and finished without arriving at it.")


def cluster_barrier_one_block_silent():
    """A cluster barrier allocated by every thread of both blocks; thread 0 of each block
    waits, only block 0's thread 1 arrives (block 1's never does)."""

    def body(x_ref, o_ref):
        t = jax.lax.axis_index("t")
        c = jax.lax.axis_index("c")

        def scoped(bar):
            @pl.when((t == 1) & (c == 0))
            def _():
                plgpu.barrier_arrive(bar)

            @pl.when(t == 0)
            def _():
                plgpu.barrier_wait(bar)
                o_ref[...] = x_ref[...]

        pl.run_scoped(scoped, plgpu.ClusterBarrier(collective_axes=("c",)), collective_axes="t")

    kernel = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(SHAPE, jnp.float32),
                          cluster=(2,), cluster_names=("c",), num_threads=2, thread_name="t",
                          interpret=plgpu.InterpretGPUParams())
    return kernel, _x()


def test_a_cluster_barrier_of_all_threads_is_not_called_partially_allocated():
    f = _each_run(cluster_barrier_one_block_silent)
    arrive = _line_of("plgpu.barrier_arrive(bar)", cluster_barrier_one_block_silent)
    assert f.cells == [(0, (0,), 0), (0, (1,), 0)]
    # its ref count counts the threads of both blocks; each block's threads all requested it
    assert "never allocated it" not in f.message and " only; " not in f.message
    # block 1's clause names the block of the thread that arrived
    assert f"(1 of 2 arrivals in phase 0: block (0) t 1 at line {arrive})" in f.message
    assert f.suggestion == (TOO_FEW_ARRIVALS_HINT + " Here block (1) t 1 holds the barrier "
                            "and finished without arriving at it.")
    assert BRANCH_ADVICE not in f.suggestion


@pytest.mark.parametrize("builder, hint", [
    (dl.crossed_waits, CYCLE_HINT),
    (dl.num_arrivals_too_high, TOO_FEW_ARRIVALS_HINT),
    (lambda: dl.ping_pong(waits=3), FINISHED_HINT),
], ids=["crossed_waits", "num_arrivals_too_high", "ping_pong3"])
def test_the_other_deadlocks_keep_their_advice(builder, hint):
    f = _each_run(builder)
    assert f.suggestion == hint
    # the branch advice only where the barrier really was allocated by some threads only
    assert "never allocated it" not in f.message


def test_a_barrier_allocated_in_a_branch_is_the_root_of_its_deadlock():
    """Thread 0 alone allocates the handshake barrier (in its branch) and waits; thread 1
    finished without it. The allocation under the branch is the root, at its line, with
    the branch; the deadlock folds under it, keeping its branch advice, every run."""
    fn = dl.barrier_handshake_in_branch
    alloc = _line_of("pl.run_scoped(scoped, plgpu.Barrier", fn)
    branch = _line_of("@pl.when(t == 0)", fn)
    wait = _line_of("plgpu.barrier_wait(bar)", fn)
    seen = set()
    for _ in range(RUNS):
        fn_, args = fn()
        sh.drain_effects()
        with pv.trace(raise_errors=False) as tr:
            jax.block_until_ready(fn_(*args))
        roots = [f for f in tr.findings if f.severity == "error"]
        assert [f.kind for f in roots] == ["partial_collective"], tr.summary()
        (root,) = roots
        assert (root.source.line, root.branch.line) == (alloc, branch)
        assert "hoist it out of the thread-dependent branch" in root.suggestion
        (d,) = [c for c in root.consequences if c.kind == "deadlock"]
        assert d.source.line == wait and d.suggestion == DEADLOCK_HINT
        assert "t 1 never allocated it" in d.message
        seen.add((root.message, d.message))
    assert len(seen) == 1, seen


# --------------------------------------------------------------------------- saved traces

def test_a_loaded_trace_gives_the_same_advice(tmp_path):
    for builder, timeout_s in ((dl.spin_on_flag, TIMEOUT_S), (dl.wait_behind_a_wait, None)):
        tr, f = _deadlock(builder, timeout_s)
        path = tmp_path / "t.json"
        tr.save(path)
        (g,) = [x for x in pv.load(path).findings if x.kind == "deadlock"]
        assert (g.message, g.suggestion) == (f.message, f.suggestion)


def test_without_the_wait_for_record_the_advice_is_general(tmp_path):
    """A trace whose deadlock record does not say who should arrive (no `expects`): the
    advice names no cause it cannot see (no branch, no spin)."""
    tr, _ = _deadlock(dl.spin_on_flag, TIMEOUT_S)
    path = tmp_path / "t.json"
    tr.save(path)
    d = json.loads(path.read_text())
    for w in d["meta"]["deadlocks"][0]["waiters"]:
        w.pop("expects")
    path.write_text(json.dumps(d))
    (g,) = [x for x in pv.load(path).findings if x.kind == "deadlock"]
    assert g.suggestion == GENERAL_HINT
    assert BRANCH_ADVICE not in g.suggestion


def _arrives_at_the_other_barrier(ctx, x_ref, o_ref):
    """Thread 0 arrives at `empty`; thread 1 waits on `full`: both from one run_scoped."""

    def scoped(buf, full, empty):
        @pl.when(ctx.thread == 0)
        def _():
            buf[...] = x_ref[...]
            plgpu.barrier_arrive(empty)  # WRONG

        @pl.when(ctx.thread == 1)
        def _():
            plgpu.barrier_wait(full)
            sh.store_block_rows(ctx, o_ref, buf[...])

    pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32), plgpu.Barrier(num_arrivals=1),
                  plgpu.Barrier(num_arrivals=1), collective_axes=ctx.axis)


@pytest.mark.parametrize("shape", ["no_grid", "grid3"])
def test_a_wait_names_which_of_a_scopes_barriers_it_waits_on(shape):
    # both barriers come from one line: the message says which operand (`full`, the 2nd),
    # by the scoped function's own name for it
    for _ in range(2):
        fn, args = sh.launch(_arrives_at_the_other_barrier, shape)
        tr, _ = sh.run_traced(fn, args)
        root = next(f for f in tr.findings if f.kind == "deadlock")
        assert "(`full`, operand 2 of 3 of its `pl.run_scoped`)" in root.message, root.message
        # and that the thread it needs arrived at the other one instead
        wrong = sh.marked_line(_arrives_at_the_other_barrier, "WRONG")
        assert ("it arrived at `empty` (operand 3 of that `pl.run_scoped`) instead, at line "
                f"{wrong}" in root.message), root.message


def _waits_on_the_other_slot(ctx, x_ref, o_ref):
    """Thread 0 arrives at slot 0 of a two-barrier array; thread 1 waits on slot 1."""

    def scoped(buf, bars):
        @pl.when(ctx.thread == 0)
        def _():
            buf[...] = x_ref[...]
            plgpu.barrier_arrive(bars.at[0])  # WRONG

        @pl.when(ctx.thread == 1)
        def _():
            plgpu.barrier_wait(bars.at[1])
            sh.store_block_rows(ctx, o_ref, buf[...])

    pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32),
                  plgpu.Barrier(num_arrivals=1, num_barriers=2), collective_axes=ctx.axis)


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "cluster2", "core_map", "core_map_grid"])
@pytest.mark.parametrize("body, other", [
    (_arrives_at_the_other_barrier, "`empty` (operand 3 of that `pl.run_scoped`)"),
    (_waits_on_the_other_slot, "`bars.at[0]`")])
def test_an_arrival_at_the_scopes_other_barrier_is_named_in_the_advice(shape, body, other):
    # the advice was only "w 0 ... finished without ever arriving at it: make the thread
    # call plgpu.barrier_arrive on this barrier", though w 0 did arrive, at a sibling
    wrong = sh.marked_line(body, "WRONG")
    seen = set()
    for _ in range(3):
        fn, args = sh.launch(body, shape)
        tr, _ = sh.run_traced(fn, args)
        (root,) = [f for f in tr.findings if f.severity == "error"]
        assert root.kind == "deadlock", tr.summary()
        assert (f"Here w 0 arrived at {other} instead, at line {wrong}, another barrier of "
                "the same `pl.run_scoped`: if that arrival was meant for this barrier, "
                "arrive at the barrier that is waited on, or wait on the one arrived at"
                in root.suggestion), root.suggestion
        seen.add((root.source.line, root.message, root.suggestion))
    assert len(seen) == 1, seen


def _signals_the_rendezvous_barrier(ctx, x_ref, o_ref):
    """Threads 0 and 1 meet at `pair`; thread 2 should signal `ready` to thread 0 but
    arrives at `pair` (a copy-paste slip)."""

    def scoped(buf, pair, ready):
        @pl.when(ctx.thread < 2)
        def _():
            plgpu.barrier_arrive(pair)
            plgpu.barrier_wait(pair)

        @pl.when(ctx.thread == 2)
        def _():
            buf[...] = x_ref[...]
            plgpu.barrier_arrive(pair)  # WRONG

        @pl.when(ctx.thread == 0)
        def _():
            plgpu.barrier_wait(ready)
            sh.store_block_rows(ctx, o_ref, buf[...])

    pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32), plgpu.Barrier(num_arrivals=2),
                  plgpu.Barrier(num_arrivals=1), collective_axes=ctx.axis)


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "cluster2", "core_map"])
def test_a_rendezvous_arrival_is_not_an_arrival_at_the_wrong_barrier(shape):
    # w 1 arrives at `pair` and waits there (its rendezvous with w 0): only w 2's arrival
    # is named as one at the wrong barrier (the advice named w 1's, at its own line)
    wrong = sh.marked_line(_signals_the_rendezvous_barrier, "WRONG")
    seen = set()
    for _ in range(3):
        fn, args = sh.launch(_signals_the_rendezvous_barrier, shape, num_threads=3)
        tr, _ = sh.run_traced(fn, args)
        (root,) = [f for f in tr.findings if f.severity == "error"]
        assert root.kind == "deadlock", tr.summary()
        assert re.search(r"w 1 \(finished; last at line \d+\)", root.message), root.message
        assert "it arrived at `pair` (operand 2 of that `pl.run_scoped`) instead, at line " \
            f"{wrong})" in root.message, root.message
        assert (f"Here w 2 arrived at `pair` (operand 2 of that `pl.run_scoped`) instead, at "
                f"line {wrong}, another barrier" in root.suggestion), root.suggestion
        seen.add((root.source.line, root.message, root.suggestion))
    assert len(seen) == 1, seen


def _exits_early(ctx, x_ref, o_ref):
    """Thread 0 writes its rows through a helper of another file and finishes; the others
    allocate a barrier every thread should arrive at, and wait."""

    def exit_early():
        sh.store_block_rows(ctx, o_ref, x_ref[...])  # EXIT

    def rest():
        def scoped(bar):
            plgpu.barrier_arrive(bar)
            plgpu.barrier_wait(bar)

        pl.run_scoped(scoped, plgpu.Barrier(num_arrivals=ctx.num_threads),
                      collective_axes=ctx.axis)

    jax.lax.cond(ctx.thread == 0, exit_early, rest)


@pytest.mark.parametrize("shape", ["no_grid", "core_map"])
def test_a_last_line_in_another_file_is_named_with_its_file_and_call(shape):
    # "w 0 (finished; last at line 224)" named line 224 of the helper's file, read as a
    # line of the kernel's: now "kernels.py:224 (called from line 40)"
    from pallas_viz.examples import kernels

    lines, first = inspect.getsourcelines(kernels.store_rows)
    store = first + next(i for i, t in enumerate(lines) if t.strip() == "o_ref[...] = value")
    exit_line = sh.marked_line(_exits_early, "EXIT")
    seen = set()
    for _ in range(2):
        tr, root = single_error_root(_exits_early, shape)
        (dl_,) = [c for c in root.consequences if c.kind == "deadlock"]
        assert (f"w 0 (finished; last at kernels.py:{store} (called from line {exit_line}))"
                in dl_.message), dl_.message
        seen.add(dl_.message)
    assert len(seen) == 1, seen


def _prefetch(ctx, x_ref, o_ref, slot_of_barrier):
    """Thread 0 prefetches through a two-slot ring with TMA copies, each signalling the
    barrier `slot_of_barrier(s)` of the slot `s` it fills, and waits on slot `s`'s."""

    def scoped(buf, acc, bars):
        @pl.when(ctx.thread == 0)
        def _():
            acc[...] = jnp.zeros(sh.SHAPE, jnp.float32)

            def step(i, carry):
                s = i % 2
                plgpu.copy_gmem_to_smem(x_ref, buf.at[s], bars.at[slot_of_barrier(s)])  # COPY
                plgpu.barrier_wait(bars.at[s])
                acc[...] += buf[s]
                return carry

            jax.lax.fori_loop(0, 4, step, 0)
            sh.store_block_rows(ctx, o_ref, acc[...])

    pl.run_scoped(scoped, plgpu.SMEM((2, *sh.SHAPE), jnp.float32),
                  plgpu.SMEM(sh.SHAPE, jnp.float32),
                  plgpu.Barrier(num_arrivals=1, num_barriers=2), collective_axes=ctx.axis)


def _copies_signal_slot_0(ctx, x_ref, o_ref):
    _prefetch(ctx, x_ref, o_ref, lambda s: 0)


def _copies_signal_their_slot(ctx, x_ref, o_ref):
    _prefetch(ctx, x_ref, o_ref, lambda s: s)


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "cluster2", "core_map", "core_map_grid"])
def test_a_copy_signalling_the_other_slot_is_named_in_the_advice(shape):
    # the advice was "w 1 holds the barrier but finished without ever arriving at it",
    # though w 1 was never meant to arrive: the copies w 0 started signal slot 0 only
    copy = sh.marked_line(_prefetch, "COPY")
    seen = set()
    for _ in range(2):
        tr, root = single_error_root(_copies_signal_slot_0, shape)
        assert root.kind == "deadlock", tr.summary()
        assert root.suggestion.startswith(
            "No arrival ever came to the barrier w 0 waits on, and the TMA copies w 0 started "
            f"signal another barrier of the same `pl.run_scoped`: `bars.at[0]`, at line {copy}."
        ), root.suggestion
        seen.add((root.source.line, root.message, root.suggestion))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("shape", ["no_grid", "grid3"])
def test_copies_signalling_their_own_slots_stay_clean(shape):
    assert_stays_clean(_copies_signal_their_slot, shape)


def _waits_for_empty_one_step_early(ctx, x_ref, o_ref):
    """A two-slot ring whose producer waits on `empty` from step 1 (`i >= 1`, not 2): it
    waits for slot 1's release before ever filling it, while the consumer waits on slot
    1's `full` (a cycle). The consumer's wait line comes round once, on the next slot."""

    def scoped(buf, full, empty):
        @pl.when(ctx.thread == 0)
        def _():
            def produce(i, carry):
                s = i % 2

                @pl.when(i >= 1)
                def _():
                    plgpu.barrier_wait(empty.at[s])

                buf[s] = x_ref[...]
                plgpu.barrier_arrive(full.at[s])
                return carry

            jax.lax.fori_loop(0, 4, produce, 0)

        @pl.when(ctx.thread == 1)
        def _():
            def consume(i, carry):
                s = i % 2
                plgpu.barrier_wait(full.at[s])
                plgpu.barrier_arrive(empty.at[s])
                return carry

            jax.lax.fori_loop(0, 4, consume, 0)
            sh.store_block_rows(ctx, o_ref, buf[0])

    pl.run_scoped(scoped, plgpu.SMEM((2, *sh.SHAPE), jnp.float32),
                  plgpu.Barrier(num_arrivals=1, num_barriers=2),
                  plgpu.Barrier(num_arrivals=1, num_barriers=2), collective_axes=ctx.axis)


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "cluster2", "core_map"])
def test_a_wait_on_the_next_slot_is_not_the_loop_going_round(shape):
    # the advice was LOOPED_HINT ("w 1 ... went around its loop without ever arriving at
    # it ... the arrival is missing from its loop"), though w 1 releases every slot it
    # consumed: its second wait at that line was on slot 1, its first wait there
    seen = set()
    for _ in range(2):
        tr, root = single_error_root(_waits_for_empty_one_step_early, shape)
        assert root.kind == "deadlock", tr.summary()
        assert root.suggestion == CYCLE_HINT, root.suggestion
        seen.add((root.source.line, root.message, root.suggestion))
    assert len(seen) == 1, seen


def _releases_only_non_empty_tiles(ctx, x_ref, o_ref):
    """A one-slot handoff whose consumer releases `empty` only when the tile it read is
    not all zeros (`lax.cond` on data); the second tile is zeros."""

    def scoped(buf, full, empty):
        @pl.when(ctx.thread == 0)
        def _():
            def produce(i, carry):
                @pl.when(i > 0)
                def _():
                    plgpu.barrier_wait(empty)

                buf[...] = x_ref[...] * jnp.where(i == 1, 0.0, 1.0)
                plgpu.barrier_arrive(full)
                return carry

            jax.lax.fori_loop(0, 3, produce, 0)

        @pl.when(ctx.thread == 1)
        def _():
            def consume(i, carry):
                plgpu.barrier_wait(full)  # CWAIT
                tile = buf[...]

                def release():
                    plgpu.barrier_arrive(empty)

                jax.lax.cond(jnp.any(tile != 0.0), release, lambda: None)
                return carry

            jax.lax.fori_loop(0, 3, consume, 0)
            sh.store_block_rows(ctx, o_ref, x_ref[...])

    pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32), plgpu.Barrier(num_arrivals=1),
                  plgpu.Barrier(num_arrivals=1), collective_axes=ctx.axis)


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "cluster2", "core_map", "core_map_grid"])
def test_an_arrival_skipped_in_some_iterations_is_named(shape):
    # the advice was the cycle's ("arrive before waiting"), which does not fix it: w 1
    # arrived at `empty` once, then went round its loop without arriving
    cwait = sh.marked_line(_releases_only_non_empty_tiles, "CWAIT")
    seen = set()
    for _ in range(2):
        tr, root = single_error_root(_releases_only_non_empty_tiles, shape)
        assert root.kind == "deadlock", tr.summary()
        assert root.suggestion.startswith(
            "w 1 holds the barrier and arrives at it once per iteration of its loop, but went "
            f"around the loop more times than it arrived (it waits at line {cwait} after "
            "going round 2 time(s), and arrived 1 time(s))"), root.suggestion
        seen.add((root.source.line, root.message, root.suggestion))
    assert len(seen) == 1, seen


def _one_error(fn, args):
    """(trace, its one error) of a traced run of `fn(*args)` (JAX's error caught)."""
    sh.drain_effects()
    with pv.trace(raise_errors=False) as tr:
        try:
            jax.block_until_ready(fn(*args))
        except jax.errors.JaxRuntimeError:
            pass
    (f,) = [f for f in tr.findings if f.severity == "error"]
    return tr, f


def every_thread_one_short(ctx, x_ref, o_ref):
    def scoped(bar):
        plgpu.barrier_arrive(bar)  # ARRIVE
        plgpu.barrier_wait(bar)

    pl.run_scoped(scoped, plgpu.Barrier(num_arrivals=ctx.num_threads + 1),
                  collective_axes=ctx.axis)


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "cluster2", "core_map", "tmem"])
def test_the_arrivals_a_phase_got_are_listed_in_thread_order(shape):
    # both threads arrive, in an order that varies by run; the message lists them in
    # thread order, the same every run (it listed them in arrival order)
    fn, args = sh.launch(every_thread_one_short, shape)
    arrive = sh.marked_line(every_thread_one_short, "ARRIVE")
    seen = set()
    for _ in range(4):
        tr, f = _one_error(fn, args)
        assert f.kind == "deadlock", tr.summary()
        assert f"(2 of 3 arrivals in phase 0: w 0 at line {arrive}, w 1 at line {arrive})" in (
            f.message)
        assert f.suggestion.startswith(TOO_FEW_ARRIVALS_HINT)
        seen.add(f.message)
    assert len(seen) == 1, seen


def ring_without_release(ctx, x_ref, o_ref):
    """A two-slot pipeline whose consumer never arrives at `empty`: the producer's third
    fill waits on it forever, while the consumer waits for that fill."""

    def scoped(buf, full, empty):
        def produce(i, c):
            s = i % 2

            @pl.when(i >= 2)
            def _():
                plgpu.barrier_wait(empty.at[s])  # PWAIT

            buf[s] = x_ref[...]
            plgpu.barrier_arrive(full.at[s])
            return c

        def consume(i, c):
            plgpu.barrier_wait(full.at[i % 2])  # CWAIT
            return c

        @pl.when(ctx.thread == 0)
        def _():
            jax.lax.fori_loop(0, 4, produce, 0)

        @pl.when(ctx.thread == 1)
        def _():
            jax.lax.fori_loop(0, 4, consume, 0)

    pl.run_scoped(scoped, plgpu.SMEM((2,) + sh.SHAPE, jnp.float32),
                  plgpu.Barrier(num_arrivals=1, num_barriers=2),
                  plgpu.Barrier(num_arrivals=1, num_barriers=2), collective_axes=ctx.axis)


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "cluster2", "core_map", "tmem"])
def test_a_thread_that_loops_without_arriving_is_not_called_a_cycle(shape):
    # the consumer waits on `full` again (its loop went round) and never arrived at
    # `empty`: the advice is the missing release, not "arrive before waiting"
    fn, args = sh.launch(ring_without_release, shape)
    pwait = sh.marked_line(ring_without_release, "PWAIT")
    cwait = sh.marked_line(ring_without_release, "CWAIT")
    seen = set()
    for _ in range(RUNS):
        tr, f = _one_error(fn, args)
        assert f.kind == "deadlock" and f.source.line == pwait, tr.summary()
        assert "(`empty.at[0]` of its `pl.run_scoped`)" in f.message
        assert f.suggestion.startswith(
            f"w 1 holds the barrier and should arrive at it, but went around its loop without "
            f"ever arriving at it (it waits at line {cwait} again)"), f.suggestion
        assert f.suggestion != CYCLE_HINT
        seen.add((f.message, f.suggestion))
    assert len(seen) == 1, seen


def one_copy_two_waits(ctx, x_ref, o_ref):
    def scoped(buf, bar):
        @pl.when(ctx.thread == 0)
        def _():
            plgpu.copy_gmem_to_smem(x_ref, buf, bar)
            plgpu.barrier_wait(bar)
            plgpu.barrier_wait(bar)  # AGAIN
            sh.store_block_rows(ctx, o_ref, buf[...])

    pl.run_scoped(scoped, plgpu.SMEM(sh.SHAPE, jnp.float32), plgpu.Barrier(num_arrivals=1),
                  collective_axes=ctx.axis)


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "cluster2", "core_map"])
def test_a_wait_more_than_the_thread_s_own_copies_is_one_wait_too_many(shape):
    # (it read "w 1 holds the barrier but finished without ever arriving at it": w 1 was
    # never meant to arrive; the copy w 0 started was the only arrival)
    fn, args = sh.launch(one_copy_two_waits, shape)
    seen = set()
    for _ in range(RUNS):
        tr, f = _one_error(fn, args)
        assert f.kind == "deadlock", tr.summary()
        assert f.source.line == sh.marked_line(one_copy_two_waits, "AGAIN")
        assert f.suggestion.startswith(
            "w 0 waits for phase 1 of this barrier, but the only arrivals at it come from the "
            "TMA copies (or tcgen05 operations) w 0 started itself"), f.suggestion
        seen.add((f.message, f.suggestion))
    assert len(seen) == 1, seen
