"""Barrier misuse: what the recorded barrier operations say about a kernel's barriers.

Reads `ctx.barrier_ops` (the JSON-able records of `Trace.meta["barrier_ops"]`, made
by `Recorder.barrier_ops_json`: one dict per arrival, wait start ("wait") and wait
end ("waited"), each with `step`, the number of allocation events recorded before
it) and `ctx.thread_exits` (`Trace.meta["thread_exits"]`, `Recorder.thread_exits_json`:
the threads that finished the kernel body). Five rules, each a `barrier_misuse`
finding pinned to the line to change:

- a phase that completes with no thread waiting for it, before the next phase
  completes (error): JAX's rule is that some thread observes every completion but
  the final ones (a pipeline skips its last "slot free" phases, and a barrier
  that completes once with nobody waiting is legal), and on a GPU a waiter tells
  phases apart by their parity. The interpreter checks only part of this (a
  thread that skips a phase it waits past; phase 0 unobserved when phase 1
  completes) and names no line; the finding names the arrivals.
- a wait for a phase that can never complete (error): the wait never ended, fewer
  than `num_arrivals` arrivals came, and every thread that arrives at the barrier
  or holds it has finished (or there is none). Only in kernels cut short (a deadlock,
  an interrupt, a failure), where a wait can be left hanging.
- an arrival made again before the phase of the thread's previous arrival completed
  (error): a thread that arrives at a barrier and waits on it too arrives a second time
  with nothing ordering that arrival after the first one's phase (it skipped its wait),
  while the barrier counts no more arrivals a phase than threads arrive at it. Whether
  the second arrival then counts toward the same phase (a phase completed without
  another thread's arrival) or the thread's next wait comes phases late (JAX's
  "waiting ... for the first time"), the interleaving decides: the finding is the same.
- a TMA copy arriving at a barrier no thread waits on (warning), in blocks whose
  threads all finished: nothing orders a read of its destination after it landed.
- an arrival at a freed barrier (error): the barrier was no longer allocated, or (a
  cluster barrier) the arrival lands in the part of a block whose threads had all
  left the barrier's scope: on a GPU it writes shared memory that block no longer owns.
"""

from __future__ import annotations

import collections
import functools
import re

import numpy as np

from ..cells import describe_cells, ranges
from ..model import Finding, SourceLocation
from .collective import branch_call
from .context import AnalysisContext, block_label
from .frame import CREATE, FREE, JOIN, RELEASE
from .grouping import FindingGroups
from .ordering import PhaseOrder

NO_WAIT_HINT = (
    "Arriving at a barrier only signals the threads that wait on it: add "
    "`plgpu.barrier_wait(bar)` in the thread that uses what the arrival publishes, before "
    "it reads it, or drop the arrival and the barrier.")
NO_WAIT_COPY_HINT = (
    "A TMA copy arrives at its barrier when its data has landed: wait on the barrier "
    "(`plgpu.barrier_wait(bar)`) before reading the copy's destination.")
NO_WAIT_MMA_HINT = (
    "tcgen05 arrives at the barrier when the MMA is done: wait on the barrier before "
    "reading the accumulator.")
EVERY_PHASE_HINT = (
    "Wait for every phase the arrivals complete: one `plgpu.barrier_wait(bar)` per phase "
    "(in the consumer's loop, matching the producer's arrivals), so that no phase completes "
    "before the one before it was waited for.")
ORDER_HINT = (
    "Each phase of a barrier must be observed before the next one completes: every thread "
    "that waits on the barrier waits once per phase (`plgpu.barrier_wait(bar)`), and the "
    "thread that arrives for the next phase first waits until they have (on a second "
    "barrier they arrive at once they have consumed the phase, like a pipeline's "
    "\"empty\" barrier).")
COPIES_HINT = (
    " Here each phase was completed by a TMA copy {who} started: each copy that signals a "
    "barrier is one arrival, so if the copies are meant for one phase, make `num_arrivals` "
    "the number of copies that signal it and wait once for them all; if each is meant for "
    "a phase of its own, start the next copy only once the phase before it was observed.")
TOO_FEW_HINT = (
    "Each phase of a barrier completes after `num_arrivals` arrivals: make `num_arrivals` "
    "the number of arrivals one phase really gets (threads calling `plgpu.barrier_arrive`, "
    "plus copies that arrive at it), or make the missing threads arrive.")
NO_ARRIVAL_HINT = (
    "No thread arrives at this barrier, so the wait cannot end: arrive at it "
    "(`plgpu.barrier_arrive(bar)`, or a copy that arrives at it) in the producer before "
    "the consumer waits, and check that the arriving code is reached (a `pl.when`).")
PARTIAL_HINT = (
    "The barrier was allocated in a thread-dependent branch, so only the threads that took "
    "the branch have it and the others cannot arrive: allocate it unconditionally, for all "
    "threads, and branch inside its scope.")
REARRIVAL_HINT = (
    "A thread that arrives at a barrier and waits on it too must wait for the phase it "
    "arrived for before it arrives again (`plgpu.barrier_wait(bar)` after every "
    "`plgpu.barrier_arrive(bar)`, on every iteration): move its wait out of the branch "
    "that skips it, or the arrival into that branch.")
FIXED_SLOT_HINT = (
    "Line {line} signals a fixed slot, `{name}`, of the {n} barriers in `{base}` every "
    "time it runs: every phase it completes lands in that one slot, and the other slots' "
    "phases never complete. If each pass is meant for the next slot, index `{base}` by it "
    "(`{base}.at[i % {n}]`, with the loop's index). If it does mean that one slot: ")
FREED_HINT = (
    "Arrive only while the barrier is allocated: keep the arriving code inside the "
    "barrier's `run_scoped`, and do not let a scope end while other threads may still "
    "arrive.")
FREED_PART_HINT = (
    "A cluster barrier has a part in each block's shared memory, and an arrival from one "
    "block lands in the others' parts: a block must not leave the barrier's scope while "
    "another block can still arrive. Make every block wait for the last phase the others "
    "arrive at (a `plgpu.barrier_wait` on this barrier) before its `run_scoped` ends.")


def _ops(ctx: AnalysisContext) -> list[dict]:
    return list(getattr(ctx, "barrier_ops", None) or [])


def _block(b):
    return None if b is None else tuple(map(int, b))


def _by_id(table: dict):
    """`table[id(o)]` as a function of `o` (the operations are alive while it is read)."""
    get = table.__getitem__
    return lambda o: get(id(o))


def _cell(o: dict):
    return (int(o["device"]), _block(o.get("block")), int(o["thread"]))


def _actor(o: dict) -> tuple:
    """Who made `o`, in program order: its cell and, in warp-level code, its warp (the
    warps of a warpgroup run apart: one's wait does not order another's arrival)."""
    return (*_cell(o), o.get("warp"))


def _src(o: dict) -> SourceLocation | None:
    return SourceLocation.from_dict(o.get("source"))


def _barrier_key(o: dict) -> tuple:
    """Which barrier: (kernel, resource, allocation) or, named barriers, their key."""
    if o.get("allocation", -1) >= 0:
        return (o["kernel"], o["resource"], int(o["allocation"]))
    return (o["kernel"], o["resource"], -1, o.get("barrier_id"), _block(o.get("block")))


class _Allocations:
    """The allocation events behind barrier operations (create row, holders, releases)."""

    def __init__(self, ctx: AnalysisContext):
        self.table = ctx.table
        self._cache: dict[int, dict | None] = {}

    def get(self, alloc: int) -> dict | None:
        if alloc < 0:
            return None
        if alloc not in self._cache:
            self._cache[alloc] = self._load(alloc)
        return self._cache[alloc]

    def _load(self, alloc: int) -> dict | None:
        t = self.table
        c = t.columns
        rows = np.flatnonzero(c["allocation"] == alloc)
        if len(rows) == 0:
            return None
        # the ops, blocks and threads of these rows only (a few), as Python ints
        ops = c["op"][rows].tolist()
        blocks = c["block"][rows].tolist()
        threads = c["thread"][rows].tolist()
        rows = rows.tolist()
        first = next((r for r, o in zip(rows, ops) if o == CREATE), rows[0])
        holders = collections.defaultdict(set)  # block -> threads that requested it
        released = collections.defaultdict(dict)  # block -> thread -> row of its release
        for r, o, b, th in zip(rows, ops, blocks, threads):
            if o == CREATE or o == JOIN:
                holders[t.block(b)].add(th)
            elif o == RELEASE or o == FREE:
                released[t.block(b)].setdefault(th, r)
        return {"row": first, "source": t.source_of(first), "holders": dict(holders),
                "released": dict(released), "initial": int(c["initial_ref_count"][first]),
                "rows": rows}


def analyse_barriers(ctx: AnalysisContext) -> list[Finding]:
    """`barrier_misuse` findings from the recorded barrier operations."""
    ops = _ops(ctx)
    if not ops:
        return []
    allocs = _Allocations(ctx)
    groups = FindingGroups()
    by_barrier: dict[tuple, list[dict]] = collections.defaultdict(list)
    exits = None  # the threads that finished: read only for a kernel cut short
    orders: dict = {}  # kernel -> its `PhaseOrder` (clocks computed on first use)
    # each operation's barrier and actor, worked out once (the clocks read them again)
    keys: dict[int, tuple] = {}
    actors: dict[int, tuple] = {}
    for o in ops:
        if o.get("op") in ("arrive", "wait", "waited"):
            key = keys[id(o)] = _barrier_key(o)
            actors[id(o)] = _actor(o)
            by_barrier[key].append(o)
    key_of = _by_id(keys)
    actor_of = _by_id(actors)
    for key, bops in by_barrier.items():
        kernel = key[0]
        # its allocation's rows, loaded (once: `get` caches) only by a rule that reads them
        alloc = functools.partial(allocs.get, key[2])
        if kernel not in orders:
            orders[kernel] = PhaseOrder(ops, kernel, key_of, actor_of)
        cut = kernel in ctx.unfinished
        if cut and exits is None:
            exits = ctx.exits
        parts = collections.defaultdict(list)  # a cluster barrier's part -> its operations
        for o in bops:
            parts[o.get("part")].append(o)
        _rearrival(ctx, groups, kernel, parts, alloc, orders[kernel], actor_of,
                   exits if cut else None)
        if not _every_holder_arrives(ctx, groups, kernel, parts, alloc):
            _unobserved(ctx, groups, kernel, parts, alloc, orders[kernel],
                        exits if cut else None)
        _never_awaited(ctx, groups, kernel, parts, alloc, exits if cut else None)
        if cut:
            _never_completes(ctx, groups, kernel, bops, alloc(), exits)
        _freed(ctx, groups, kernel, bops, alloc)
    return groups.findings()


def _what(o: dict) -> str:
    return {"cluster_barrier": "cluster barrier", "named_barrier": "named barrier"}.get(
        o.get("resource"), "barrier")


def _at(ctx, alloc: dict | None, o: dict) -> str:
    """" allocated at line 61", naming which of its scope's barriers it is when the scope
    allocates several (" (`full`, operand 2 of 3 of its `pl.run_scoped`)")."""
    if o.get("resource") == "named_barrier":
        bid = o.get("barrier_id")
        return f" {bid}" if bid is not None else ""
    src = alloc["source"] if alloc is not None else None
    if src is None:
        return ""
    return f" allocated at line {src.line}{ctx.operand(alloc['row'])}"


def _thread(ctx, kernel, o: dict) -> str:
    """"t 1", "block (1)" (one thread per block) or "block (1) t 0" (`o` of another block)."""
    single = 0 <= kernel < len(ctx.kernels) and ctx.kernels[kernel].threads_per_block == 1
    if single:
        return f"block {block_label(_block(o.get('block')))}"
    return f"{ctx.thread_word(kernel)} {o['thread']}"


def _who(ctx, kernel, ops: list[dict]) -> str:
    """"t 0 at line 60 (a TMA copy)" for each distinct (thread, line, via), in grid and
    thread order (not the order the run's threads happened to arrive in)."""
    seen = []
    for o in sorted(ops, key=_who_order):
        s = _src(o)
        via = {"copy": " (a TMA copy)", "mma": " (tcgen05_mma)", "commit": " (tcgen05 commit)",
               "named": ""}.get(o.get("via"), "")
        item = _thread(ctx, kernel, o) + (f" at line {s.line}" if s is not None else "") + via
        if item not in seen:
            seen.append(item)
    return ", ".join(seen)


def _every_holder_arrives(ctx, groups, kernel, parts, alloc) -> bool:
    """A barrier that counts fewer arrivals a phase than the threads that arrive, read
    from where the arrival is written: a line no branch on the thread index encloses
    (`SourceLocation.branch` is None), run by every thread holding the barrier (its
    collective allocation's ref count: the threads of a block sharing it). Reported at
    the allocation; which arrivals a run recorded before a failure (a race at the
    waiter's read, the leftover arrival at the scope's end) does not change it. True if
    reported (the barrier's other misuses are its symptoms)."""
    pops = parts.get(None) or ()
    arr = [o for o in pops if o["op"] == "arrive" and o.get("via") == "thread"
           and o.get("resource") == "barrier" and o.get("warp") is None]
    if not arr or any(o["op"] == "arrive" and o.get("via") != "thread" for o in pops):
        return False  # (a barrier copies arrive at too: its count is theirs as well)
    n = int(arr[0].get("num_arrivals") or 0)
    srcs = [_src(o) for o in arr]
    lines = sorted({s for s in srcs if s is not None and s.branch is None
                    and s.kind is None}, key=_line)
    if n <= 0 or not lines:
        return False
    # what the run saw must not contradict it: in a kernel that ran to its end, more
    # threads than it counts arrived there in some block (the branch search may have
    # missed a branch on the thread index); a run cut short may have stopped them first.
    # (Checked before the allocation is loaded: most barriers stop here.)
    at_lines = {_line(s) for s in lines}
    per_block = collections.defaultdict(set)
    for o, s in zip(arr, srcs):
        if s is not None and _line(s) in at_lines:
            d, b, t = _cell(o)
            per_block[(d, b)].add(t)
    if kernel not in ctx.unfinished and max(map(len, per_block.values())) <= n:
        return False
    a = alloc()
    if a is None or a["source"] is None or a["initial"] <= n:
        return False
    count, at = a["initial"], lines[0]
    blocks = sorted({(d, b) for d, b, _ in map(_cell, arr)}, key=lambda x: (x[0], x[1] or ()))
    cells = [(d, b, t) for d, b in blocks for t in range(count)]
    who = ctx.threads(kernel, list(range(count)))

    def msg(details, cells_):
        return (f"the barrier allocated here counts {n} arrival(s) a phase "
                f"(`num_arrivals={n}`), but {who} arrive at it at line {at.line}, a line "
                f"every thread holding it runs ({count} a block), so a phase completes "
                f"before all of them arrived")

    groups.add("barrier_misuse", "error", kernel, ("every_holder", _line(a["source"])),
               a["source"], cells, [a["row"]], msg,
               EVERY_HOLDER_HINT.format(line=at.line, count=count, n=n), related=[at])
    return True


def _who_order(o: dict) -> tuple:
    d, b, t, w = _actor(o)
    return (d, b or (), t, -1 if w is None else w, _line(_src(o)))


def _unobserved(ctx, groups, kernel, parts, alloc, order: PhaseOrder, exits) -> None:
    """Phases that completed, then the next one did, before their waiters observed them:
    no thread waited for the phase, or nothing ordered the next phase's arrivals after
    a waiter's wait (`PhaseOrder`: what the kernel guarantees, not what one
    interleaving did). `parts`: the barrier's operations by part; `exits`: the finished
    threads (`ctx.exits`), None if the kernel ran to its end."""
    for part, pops in parts.items():
        done = {}
        for o in pops:
            if o["op"] == "arrive" and o.get("completes"):
                done.setdefault(int(o["phase"]), o)
        if len(done) < 2:
            continue
        waits = collections.defaultdict(list)
        arrivals = collections.defaultdict(list)
        for o in pops:
            if o["op"] in ("wait", "waited"):
                waits[int(o["phase"])].append(o)
            elif o["op"] == "arrive":
                arrivals[int(o["phase"])].append(o)
        pos = None
        phases = sorted(done)
        for phase, nxt in zip(phases, phases[1:]):
            if phase in waits:
                if pos is None:
                    pos = {id(o): i for i, o in enumerate(pops)}
                if not order.unordered_waiters(waits[phase], arrivals[nxt], pos):
                    continue
            complete = phase not in waits and _block_done(ctx, kernel, done[phase], exits)
            _report_unobserved(ctx, groups, kernel, pops, alloc(), part, phase, done[nxt],
                               done, complete)
            if not complete:
                break  # (later phases of a run cut short, or out of order, vary by run)


def _rearrival(ctx, groups, kernel, parts, alloc, order: PhaseOrder, actor_of,
               exits) -> None:
    """Threads that arrive at the barrier, then arrive again with no wait of theirs in
    between and nothing else ordering the second arrival after a wait that observed the
    first one's phase, although they wait on the barrier too (each arrival is meant for a
    phase of its own) and it counts no more arrivals a phase than threads arrive at it (no
    thread is meant to arrive twice in one). Plain thread arrivals only (a copy's arrival
    is ordered by the copy). Pinned to the second arrival, whichever phase it landed in.
    `parts`: the barrier's operations by part (one part, None, but for a cluster barrier);
    `actor_of(o)`: `_actor(o)`, worked out once; `exits`: the finished threads, None if
    the kernel ran to its end. In a kernel cut short the threads that hold the barrier and
    had not finished count among those that arrive at it; in a cluster barrier cut short,
    a thread of the part's block that had not finished and had not waited yet counts as
    waiting on it when the same thread of another block waits on its part (the same code:
    whether it got to its wait before the failure varies from run to run), and that wait
    stands for its line."""
    same_code = None  # (thread, warp) -> its first wait on the barrier, in any part
    for part, pops in parts.items():
        arrivals = [o for o in pops if o["op"] == "arrive"]
        if not arrivals or any(o.get("via") != "thread" for o in arrivals):
            continue
        if same_code is None:
            same_code = {}
            for o in (o for ops in parts.values() for o in ops if o["op"] == "wait"):
                same_code.setdefault(actor_of(o)[2:], o)
        n = int(arrivals[0].get("num_arrivals") or 0)
        arrivers = {actor_of(o) for o in arrivals}
        waiters = {actor_of(o) for o in pops if o["op"] == "wait"} & arrivers
        threads = len(arrivers)
        if exits is not None:
            # cut short: the threads that hold the barrier and had not finished may
            # still have arrived (and waited)
            device = int(arrivals[0]["device"])
            held = (alloc() or {}).get("holders", {})
            threads += len({(b, t) for b, ts in held.items() for t in ts
                            if not exits.done(kernel, device, b, t)}
                           - {a[1:3] for a in arrivers})
            if part is not None:
                target = _block(pops[0].get("target_block"))
                waiters |= {a for a in arrivers if a[1] == target and a[2:] in same_code
                            and not exits.done(kernel, a[0], a[1], a[2])}
        if n <= 0 or n > threads or not waiters:
            continue
        observers = None
        last: dict[tuple, tuple] = {}  # actor -> (its last arrival, whether it waited since)
        for i, o in enumerate(pops):
            t = actor_of(o)
            if t not in waiters:
                continue
            if o["op"] != "arrive":
                if t in last:
                    last[t] = (last[t][0], True)
                continue
            prev = last.get(t)
            last[t] = (o, False)
            if prev is None or prev[1]:
                continue
            if observers is None:
                observers = [w for w in pops if w["op"] == "waited" or (
                    w["op"] == "wait" and not w.get("completes"))]
            phase = int(prev[0]["phase"])
            if order.after_any(o, [w for w in observers if int(w["phase"]) >= phase]):
                continue
            _report_rearrival(ctx, groups, kernel, pops, alloc(), part, prev[0], o, i, n,
                              actor_of, same_code.get(t[2:]))


def _report_rearrival(ctx, groups, kernel, pops, alloc, part, first, again, at, n,
                      actor_of, same_code) -> None:
    """`again`, the thread's arrival after `first` (at index `at` of `pops`); `same_code`:
    the first wait of the same thread (of any block) on the barrier."""
    src, first_src = _src(again), _src(first)
    t = actor_of(again)
    mine = [(j, o) for j, o in enumerate(pops) if o["op"] == "wait" and actor_of(o) == t]
    wait = next((o for j, o in mine if j > at), mine[-1][1] if mine else same_code)
    wsrc = _src(wait) if wait is not None else None
    branch = wsrc.branch if wsrc is not None else None
    related = [x for x in (wsrc, branch, alloc["source"] if alloc is not None else None)
               if x is not None and x != src]
    what, where = _what(again), _at(ctx, alloc, again)
    first_at = f"line {first_src.line}" if first_src is not None else "an unknown line"
    wait_at = f" at line {wsrc.line}" if wsrc is not None else ""
    skipped = (f"; the wait{wait_at} is inside the {branch_call(branch)} at line "
               f"{branch.line}" if branch is not None and branch.kind != "loop" else "")
    detail = (first_at, wait_at, skipped, again.get("warp"))

    def msg(details, cells):
        first_at, wait_at, skipped, _ = details[0]
        who = ctx.threads(kernel, sorted({c[2] for c in cells}))
        warps = sorted({d[3] for d in details if d[3] is not None})
        if warps:  # (warp-level code: each warp arrives and waits on its own)
            who += f" warp{'s' if len(warps) > 1 else ''} {ranges(warps)}"
        return (f"{who} arrive(s) at the {what}{where} again here before waiting for the "
                f"phase of the previous arrival ({first_at}), though waiting on it{wait_at} "
                f"too, and nothing else orders this arrival after that phase: it can count "
                f"toward the same phase, which then completes without another thread's "
                f"arrival (the barrier counts {n} arrival(s) a phase){skipped}")

    events = [alloc["row"]] if alloc is not None else []
    groups.add("barrier_misuse", "error", kernel, ("rearrival", _line(src), part), src,
               [_cell(again)], events, msg, REARRIVAL_HINT, related=related, detail=detail)


def _never_awaited(ctx, groups, kernel, parts, alloc, exits) -> None:
    """A barrier that a TMA copy arrives at once, and that no thread waits on, in blocks
    whose threads all finished: nothing orders a use of what the copy wrote after it
    landed (a race, which `detect_races=True` shows at the read). A warning: a copy whose
    data is never used is only wasted. (Not a tcgen05 MMA's arrival: that one often
    signals "operands consumed" to a producer, whose last such phase nobody needs to
    wait for. Two completions are `_unobserved`'s.) `exits`: the finished threads, None
    if the kernel ran to its end."""
    for part, pops in parts.items():
        if any(o["op"] != "arrive" for o in pops):
            continue  # someone waits on it
        done = [o for o in pops if o.get("completes")]
        if len(done) != 1 or done[0].get("via") != "copy":
            continue
        o = done[0]
        if not _block_done(ctx, kernel, o, exits):
            continue  # its threads could still have waited
        src = _src(o)
        a = alloc()
        at = f" at line {src.line}" if src is not None else ""
        detail = (at, _what(o), _at(ctx, a, o))

        def msg(details, cells):
            at, what, where = details[0]
            return (f"the TMA copy{at} arrives at the {what}{where} when its data has landed, "
                    f"and no thread waits on that barrier: nothing orders a use of its result "
                    f"after it (reading it then is a race: `detect_races=True` shows where)")

        groups.add("barrier_misuse", "warning", kernel, ("never_awaited", _line(src), part),
                   src, [_cell(o)], [a["row"]] if a is not None else [], msg,
                   NO_WAIT_COPY_HINT,
                   related=[a["source"]] if a is not None and a["source"] else [],
                   detail=detail)


def _block_done(ctx, kernel, o: dict, exits) -> bool:
    """Whether every thread of `o`'s block finished the kernel body (so what its threads
    did not do, they never do): the kernel ran to its end (`exits` None), or its thread
    exits say so."""
    return exits is None or exits.block_done(kernel, int(o["device"]), _block(o.get("block")))


OVER_ARRIVAL_HINT = (
    "The barrier is declared with `num_arrivals={n}`, and {count} threads arrive at it for "
    "what reads as one phase: each of their arrivals completes a phase of its own. If one "
    "phase should gather them all, declare `plgpu.Barrier(num_arrivals={count})`; if each "
    "arrival is meant as its own phase, a thread must wait for every phase before the next "
    "arrival.")
EVERY_HOLDER_HINT = (
    "Every thread that holds the barrier arrives at line {line} ({count} a block), but it "
    "counts {n} a phase: the phase completes after the first {n} arrivals, so a waiter can "
    "go on before the others arrived (and before what they did first, like their writes), "
    "and their arrivals start a phase that never completes. Declare "
    "`plgpu.Barrier(num_arrivals={count})`, the number of threads that arrive, or make only "
    "{n} of them arrive (under a `pl.when` on the thread index).")
CLUSTER_OVER_ARRIVAL_HINT = (
    "Each block's part of a `plgpu.ClusterBarrier` completes a phase after its "
    "`num_arrivals` times the blocks that arrive there ({n} arrivals here), and more "
    "threads arrive at it for what reads as one phase: each arrival beyond that completes a "
    "phase of its own. If one phase should gather them all, declare "
    "`plgpu.ClusterBarrier(..., num_arrivals=N)` with N the arrivals one block makes a "
    "phase (the threads of a block that arrive at it; the interpreter multiplies it by the "
    "blocks), not the cluster's; if each arrival is meant as its own phase, a thread must "
    "wait for every phase before the next arrival.")


def _over_arrival(ctx, groups, kernel, pops, alloc, part, phase, nxt) -> bool:
    """Phase `phase` and the next each completed by the arrivals of other threads, at the
    same line (or at other lines, each thread arriving once in all), with nobody waiting
    between them: more threads arrive than `num_arrivals`
    counts (a barrier declared for one producer, arrived at by several). Reported at the
    allocation (where `num_arrivals` is set), naming every thread that arrived at those
    lines in either phase (whichever came first varies from run to run)."""
    if alloc is None or alloc.get("source") is None:
        return False
    nphase = int(nxt["phase"])
    arr = [o for o in pops if o["op"] == "arrive" and int(o["phase"]) in (phase, nphase)]
    if not arr or any(o.get("via") != "thread" for o in arr):
        return False
    cells = {p: {_cell(o) for o in arr if int(o["phase"]) == p} for p in (phase, nphase)}
    lines = {p: {_line(_src(o)) for o in arr if int(o["phase"]) == p} for p in (phase, nphase)}
    n = int(arr[0].get("num_arrivals") or 0)
    if not cells[phase] or cells[phase] & cells[nphase]:
        return False
    if lines[phase] != lines[nphase]:
        # at different lines: still one phase's arrivals when each of these threads arrives
        # once in all (which of them came first, and so completed which phase, varies)
        once = collections.Counter(_cell(o) for o in pops if o["op"] == "arrive")
        if any(once[c] != 1 for c in cells[phase] | cells[nphase]):
            return False
    threads = sorted(cells[phase] | cells[nphase])
    if n <= 0 or len(threads) <= n:
        return False
    src = alloc["source"]
    arrive_srcs = sorted({s for s in map(_src, arr) if s is not None}, key=_line)
    blocks = sorted({(d, b) for d, b, _ in threads})
    who = ctx.threads(kernel, [t for _, _, t in threads]) if len(blocks) == 1 else (
        describe_cells(threads, ctx.thread_word(kernel)))
    at = ", ".join(f"line {x.line}" for x in arrive_srcs) or "an unknown line"
    detail = (phase, nphase)
    what = _what(arr[0])
    cluster = arr[0].get("resource") == "cluster_barrier"

    def msg(details, cells_):
        if cluster:  # (which threads of which blocks came before the failure varies)
            return (f"the {what} allocated here completes a phase at each block after {n} "
                    "arrival(s) (its `num_arrivals` times the blocks that arrive there), but "
                    f"more threads arrive at it at {at}, so each arrival completes a phase of "
                    "its own, the next before any thread observed the one before it")
        return (f"the {what} allocated here counts {n} arrival(s) a phase "
                f"(`num_arrivals={n}`), but {who} arrive at it at {at}, so each arrival "
                "completes a phase of its own, the next before any thread observed the one "
                "before it")  # (not which phases: where the run first showed it varies)

    if cluster:
        # (every part of one cluster barrier over-arrives alike: one root, not one a block;
        # how many threads a block has arrive is not given as a number: a failure may stop
        # some before they do, and the count would vary from run to run)
        hint = CLUSTER_OVER_ARRIVAL_HINT.format(n=n)
        key = ("over_arrival", _line(src), "cluster")
    else:
        hint = OVER_ARRIVAL_HINT.format(n=n, count=len(threads))
        key = ("over_arrival", _line(src), part)
    groups.add("barrier_misuse", "error", kernel, key, src, threads, [alloc["row"]], msg,
               hint, related=arrive_srcs, detail=detail)
    return True


def _report_unobserved(ctx, groups, kernel, pops, alloc, part, phase, nxt, done,
                       complete) -> None:
    """`complete`: no thread waited for `phase` and the block's threads all finished,
    so the message can say who waits for what; otherwise (a waiter not ordered before
    the next phase, or a run cut short) it says only what the kernel failed to order.
    `nxt`: the arrival that completed the next phase."""
    if _over_arrival(ctx, groups, kernel, pops, alloc, part, phase, nxt):
        return
    first = done[phase]
    arrivals = [o for o in pops if o["op"] == "arrive" and int(o["phase"]) == phase]
    via = {o.get("via") for o in arrivals}
    waited = sorted({int(o["phase"]) for o in pops if o["op"] in ("wait", "waited")})
    if not complete:
        hint, waits = ORDER_HINT, None
        copies = arrivals + [o for o in pops if o["op"] == "arrive"
                             and int(o["phase"]) == int(nxt["phase"])]
        if {o.get("via") for o in copies} == {"copy"} and len({_actor(o) for o in copies}) == 1:
            # TMA copies one thread started, each completing a phase: meant for one phase
            # (a `num_arrivals` that counts one copy), or for one phase each
            hint += COPIES_HINT.format(who=_thread(ctx, kernel, first))
    elif waited:
        hint = EVERY_PHASE_HINT
        waits = f"threads wait only for phase(s) {', '.join(map(str, waited))}"
    else:
        hint = (NO_WAIT_COPY_HINT if via == {"copy"} else NO_WAIT_MMA_HINT
                if via <= {"mma", "commit"} else NO_WAIT_HINT)
        waits = "no thread ever waits on it"
    src = _src(first)
    nsrc = _src(nxt)
    if nsrc == src:
        hint = _fixed_slot(ctx, alloc, src) + hint
    related = [alloc["source"]] if alloc is not None and alloc["source"] is not None else []
    related += [s for s in map(_src, arrivals) if s is not None and s != src]
    if nsrc is not None and nsrc != src and nsrc not in related:
        related.append(nsrc)
    events = [alloc["row"]] if alloc is not None else []
    what, at, who = _what(first), _at(ctx, alloc, first), _who(ctx, kernel, arrivals)
    part_txt = (f" (block {block_label(_block(first.get('target_block')))}'s part)"
                if part is not None else "")
    later = ("again at that line" if nsrc is not None and nsrc == src else
             f"at line {nsrc.line}" if nsrc is not None else "later")
    detail = (phase, int(nxt["phase"]))

    def msg(details, cells):
        ph = sorted({d[0] for d in details})
        phases = f"phase {ph[0]}" if len(ph) == 1 else f"phases {', '.join(map(str, ph))}"
        it = "it" if len(ph) == 1 else "each"
        if waits is None:
            return (f"{phases} of the {what}{at}{part_txt} completed (arrivals: {who}) and "
                    f"the next phase completed after {it} ({later}), with nothing making "
                    f"that arrival wait until {it} had been observed: every completion "
                    f"must be observed before the next one, or a waiter can mistake one "
                    f"phase for the other")
        return (f"{phases} of the {what}{at}{part_txt} completed (arrivals: {who}) and the "
                f"next phase completed after it ({later}), but no thread waited for it "
                f"({waits}): every completion must be observed by some thread before the "
                f"next one, or a waiter can mistake one phase for the other")

    groups.add("barrier_misuse", "error", kernel,
               ("unobserved", _line(src), part, complete), src,
               sorted({_cell(o) for o in arrivals}), events, msg, hint,
               related=related, detail=detail)


_SLOT = re.compile(r"\b([A-Za-z_]\w*)\.at\[\s*(\d+)\s*\]")


def slot_of(ctx: AnalysisContext, row: int) -> tuple[str, int] | None:
    """(array, index) when allocation row `row` is a slot of a barrier array its
    `pl.run_scoped` names (`full.at[1]` -> ("full", 1)), else None."""
    m = _SLOT.fullmatch(ctx.operand_name(row) or "")
    return (m.group(1), int(m.group(2))) if m else None


def _fixed_slot(ctx: AnalysisContext, alloc: dict | None, src: SourceLocation | None) -> str:
    """FIXED_SLOT_HINT's opening when the arrival line `src`, run again to complete the
    next phase (a loop), names this barrier's slot by a constant index (`full.at[0]`) of
    an array of several: read from the line's text and the scope's operand names, which
    no interleaving changes. "" otherwise."""
    if alloc is None or src is None or not src.code or alloc["source"] is None:
        return ""
    slot = slot_of(ctx, alloc["row"])
    if slot is None:
        return ""
    base, index = slot
    if not any(m.group(1) == base and int(m.group(2)) == index
               for m in _SLOT.finditer(src.code)):
        return ""
    n = sum(1 for o in alloc["source"].operands or () if o.startswith(base + ".at["))
    if n < 2:
        return ""
    return FIXED_SLOT_HINT.format(line=src.line, name=f"{base}.at[{index}]", base=base, n=n)


def _never_completes(ctx, groups, kernel, bops, alloc, exits) -> None:
    waited = {(o["device"], _block(o.get("block")), o["thread"], o.get("warp"), o.get("part"),
               o["phase"]) for o in bops if o["op"] == "waited"}
    arrivals = [o for o in bops if o["op"] == "arrive"]
    for w in bops:
        if w["op"] != "wait" or not w.get("completes"):
            continue  # ended, or its phase had completed already
        k = (w["device"], _block(w.get("block")), w["thread"], w.get("warp"), w.get("part"),
             w["phase"])
        if k in waited:
            continue
        part, phase, n = w.get("part"), int(w["phase"]), int(w["num_arrivals"])
        here = [o for o in arrivals if o.get("part") == part and int(o["phase"]) == phase]
        if len(here) >= n:
            continue
        # who could still arrive: whoever arrived at it before, or holds it
        could = {(_block(o.get("block")), int(o["thread"])) for o in arrivals}
        if alloc is not None:
            could |= {(b, t) for b, ts in alloc["holders"].items() for t in ts}
        # threads that only wait, so cannot arrive; in warp-level code a waiting warp
        # blocks only itself, and another warp of its warpgroup may still arrive
        waiters_only = {(b, t) for b, t, warp in {_actor(o)[1:] for o in bops
                                                  if o["op"] == "wait"}
                        - {_actor(o)[1:] for o in arrivals} if warp is None}
        could -= waiters_only
        # the threads of a collective barrier's block that had not requested it yet
        # when a run was cut short may still arrive: certain only once they finished
        later = set()
        if alloc is not None and 0 <= kernel < len(ctx.kernels):
            tpb = ctx.kernels[kernel].threads_per_block
            if alloc["initial"] >= tpb:
                wb = _block(w.get("block"))
                later = {(wb, t) for t in range(tpb)} - waiters_only - could
        device = int(w["device"])
        if any(not exits.done(kernel, device, b, t) for b, t in could | later):
            continue  # some thread that might arrive was still running: not certain
        src = _src(w)
        what, at = _what(w), _at(ctx, alloc, w)
        partial = alloc is not None and sum(len(v) for v in alloc["holders"].values()) < min(
            alloc["initial"], ctx.kernels[kernel].threads_per_block
            if 0 <= kernel < len(ctx.kernels) else alloc["initial"])
        if here:
            came = f"{len(here)} came (from {_who(ctx, kernel, here)})"
            hint = TOO_FEW_HINT
        else:
            came = "none came"
            hint = PARTIAL_HINT if partial else NO_ARRIVAL_HINT
        if could:
            rest = "every thread that arrives at it or holds it has finished"
        else:
            rest = "no other thread holds it or arrives at it"
        related = [alloc["source"]] if alloc is not None and alloc["source"] else []
        related += [s for s in map(_src, here) if s is not None and s != src]
        events = [alloc["row"]] if alloc is not None else []
        part_txt = (f" (block {block_label(_block(w.get('target_block')))}'s part)"
                    if part is not None else "")
        detail = (phase, n, came, rest, part_txt)

        def msg(details, cells, what=what, at=at):
            phase, n, came, rest, part_txt = details[0]
            return (f"a wait for phase {phase} of the {what}{at}{part_txt} can never end: "
                    f"the phase needs {n} arrival(s), {came}, and {rest}")

        groups.add("barrier_misuse", "error", kernel, ("never", _line(src), part),
                   src, [_cell(w)], events, msg, hint, related=related, detail=detail)


def _freed(ctx, groups, kernel, bops, alloc_of) -> None:
    left: dict[tuple, tuple] = {}  # a target block as recorded -> (its block, last release)
    for o in bops:
        if o["op"] != "arrive" or (not o.get("freed") and o.get("part") is None):
            continue
        alloc = alloc_of()
        if o.get("freed"):
            src, where = _src(o), _cell(o)
            released = alloc and [r for b in alloc["released"].values() for r in b.values()
                                  if r < int(o["step"])]
            rel_src = ctx.table.source_of(max(released)) if released else None
            after = f" (its last holder released it at line {rel_src.line})" if rel_src else ""

            def msg(details, cells, o=o, after=after):
                return (f"{ctx.threads(kernel, sorted({c[2] for c in cells}))} arrive(s) at "
                        f"the {_what(o)}{_at(ctx, alloc, o)} after it was freed{after}")

            related = [x for x in ((alloc or {}).get("source"), rel_src) if x is not None]
            groups.add("barrier_misuse", "error", kernel, ("freed", _line(src)), src,
                       [where], [alloc["row"]] if alloc else [], msg, FREED_HINT,
                       related=related)
            continue
        tb = o.get("target_block")
        if o.get("part") is None or alloc is None or tb is None:
            continue
        tb = tuple(tb)
        if tb in left:
            target, last = left[tb]
        else:
            # when block `target`'s last holder released it (None: some still hold it)
            target = _block(tb)
            holders = alloc["holders"].get(target)
            released = alloc["released"].get(target, {})
            last = (max(released[t] for t in holders)
                    if holders and holders <= set(released) else None)
            left[tb] = (target, last)
        if last is None:
            continue
        if last >= int(o["step"]):
            continue  # block `target` still held it when this arrival landed
        src, where = _src(o), _cell(o)
        rel_src = ctx.table.source_of(last)
        detail = (target, rel_src)

        def msg(details, cells, o=o):
            blocks = sorted({d[0] for d in details})
            rel = details[0][1]
            by = ", ".join(dict.fromkeys(
                _thread(ctx, kernel, {"block": c[1], "thread": c[2]}) for c in cells))
            left = f" (released at line {rel.line})" if rel is not None else ""
            return (f"{by} arrive(s) at the {_what(o)}{_at(ctx, alloc, o)} after block(s) "
                    f"{', '.join(block_label(b) for b in blocks)} left its scope{left}: the "
                    f"arrival lands in that block's part of the barrier, shared memory the "
                    f"block no longer owns")

        related = [x for x in (alloc["source"], rel_src) if x is not None]
        groups.add("barrier_misuse", "error", kernel, ("freed_part", _line(src)), src,
                   [where], [alloc["row"], last], msg, FREED_PART_HINT, related=related,
                   detail=detail)


def _line(loc: SourceLocation | None) -> tuple:
    return ("", 0) if loc is None else (loc.file, loc.line)


def is_over_arrival(f: Finding) -> bool:
    """A `barrier_misuse` that more threads arrive at than its `num_arrivals` counts."""
    return f.kind == "barrier_misuse" and f.suggestion.startswith(
        (OVER_ARRIVAL_HINT.split("{")[0], CLUSTER_OVER_ARRIVAL_HINT.split("{")[0]))


def is_rearrival(f: Finding) -> bool:
    """A `barrier_misuse`: a thread arrived again before its previous arrival's phase
    completed (`REARRIVAL_HINT`)."""
    return f.kind == "barrier_misuse" and f.suggestion == REARRIVAL_HINT


_UNOBSERVED_HINTS = (ORDER_HINT, EVERY_PHASE_HINT, NO_WAIT_HINT, NO_WAIT_COPY_HINT,
                     NO_WAIT_MMA_HINT)


def is_every_holder(f: Finding) -> bool:
    """A `barrier_misuse`: every thread holding the barrier arrives at an unconditional
    line, more of them than `num_arrivals` counts (`_every_holder_arrives`)."""
    return f.kind == "barrier_misuse" and f.suggestion.startswith(
        "Every thread that holds the barrier arrives at line")


def is_unobserved(f: Finding) -> bool:
    """A `barrier_misuse`: a phase completed again before a thread observed it (too many
    arrivals for `num_arrivals`, or arrivals nothing made wait for the waiters)."""
    return f.kind == "barrier_misuse" and f.severity == "error" and (
        any(h in f.suggestion for h in _UNOBSERVED_HINTS) or is_over_arrival(f))


def is_never_awaited(f: Finding) -> bool:
    """A `barrier_misuse` warning: a TMA copy arrived at a barrier no thread waits on
    (`_never_awaited`)."""
    return (f.kind == "barrier_misuse" and f.severity == "warning"
            and f.suggestion == NO_WAIT_COPY_HINT)


def _allocations(ctx: AnalysisContext, f: Finding) -> set[int]:
    """The barriers (allocation ids) of a barrier finding: those of its events."""
    col = ctx.table.columns["allocation"]
    return {int(col[r]) for r in f.events}


def same_barrier(ctx: AnalysisContext, a: Finding, b: Finding) -> bool:
    """Whether two barrier findings are about one barrier (an allocation in common)."""
    return a.kernel == b.kernel and bool(_allocations(ctx, a) & _allocations(ctx, b))


def sibling_slots(ctx: AnalysisContext, a: Finding, b: Finding) -> bool:
    """Whether findings `a` and `b` are about different slots of one barrier array (the
    same `pl.run_scoped` line and array name: `full.at[0]`, `full.at[1]`)."""
    if a.kernel != b.kernel:
        return False
    src = ctx.table.source_of

    def slots(f):
        return {(_line(src(r)), s[0], s[1]) for r in f.events
                if (s := slot_of(ctx, r)) is not None}
    sa, sb = slots(a), slots(b)
    return any(x[:2] == y[:2] and x[2] != y[2] for x in sa for y in sb)


def _same_site(ctx: AnalysisContext, f: Finding) -> set[int]:
    """The barriers (allocation ids) allocated where `f`'s are: the same line and operand
    of its `pl.run_scoped`, in every block (a cluster's blocks each allocate their own,
    and which block a run showed a misuse in varies)."""
    c = ctx.table.columns
    out = _allocations(ctx, f)
    for r in f.events:
        name = ctx.operand_name(r)
        same = np.flatnonzero((c["source"] == c["source"][r]) & (c["kernel"] == c["kernel"][r])
                              & (c["op"] == CREATE))
        out |= {int(c["allocation"][x]) for x in same.tolist() if ctx.operand_name(x) == name}
    return out


def _waits_and_arrivals(ctx: AnalysisContext, up: Finding, down: Finding,
                        by_site: bool = False):
    """The waits on `up`'s barriers and the arrivals at `down`'s, in record order, as
    ("wait" | "arrive", the operation) (the barriers: the allocations of each finding's
    events; `by_site`: and those allocated at the same place in other blocks); None when
    the two are not distinct barriers of one kernel."""
    barriers = _same_site if by_site else _allocations
    ups, downs = barriers(ctx, up), barriers(ctx, down)
    if not ups or not downs or ups & downs or up.kernel != down.kernel:
        return None
    out = []
    for o in _ops(ctx):
        if o.get("kernel") != up.kernel:
            continue
        alloc = int(o.get("allocation", -1))
        if o.get("op") in ("wait", "waited") and alloc in ups:
            out.append(("wait", o))
        elif o.get("op") == "arrive" and alloc in downs:
            out.append(("arrive", o))
    return out


def released_by(ctx: AnalysisContext, up: Finding, down: Finding) -> bool:
    """Whether every thread that arrives at `down`'s barriers waited on one of `up`'s
    before its first arrival there (program order): a consumer that arrives at an "empty"
    barrier once a "full" barrier's wait lets it go, so phases of `down` that complete
    too early follow from `up`'s (its waits ended too early)."""
    ops = _waits_and_arrivals(ctx, up, down)
    waited: set[tuple] = set()
    first: dict[tuple, bool] = {}  # actor -> whether it waited on `up` before it arrived
    for what, o in ops or ():
        if what == "wait":
            waited.add(_actor(o))
        else:
            first.setdefault(_actor(o), _actor(o) in waited)
    return bool(first) and all(first.values())


def waits_on_too(ctx: AnalysisContext, up: Finding, down: Finding) -> bool:
    """Whether a thread that arrives at `down`'s barriers also waits on `up`'s (in any
    block: `_same_site`): when `up`'s phases complete too soon (more threads arrive than
    it counts), its waits let that thread go early, and its arrivals at `down` come
    early."""
    ops = _waits_and_arrivals(ctx, up, down, by_site=True) or ()
    waiting = {_actor(o) for what, o in ops if what == "wait"}
    return any(_actor(o) in waiting for what, o in ops
               if what == "arrive" and o.get("via") == "thread")


def waited_on_by(ctx: AnalysisContext, f: Finding, cells) -> bool:
    """Whether a thread of `cells` waited on `f`'s barriers (in any block: `_same_site`):
    a race between it and a thread that had not arrived yet follows from a phase that
    completed too early."""
    mine = _same_site(ctx, f)
    cells = set(cells)
    return any(o.get("op") in ("wait", "waited") and o.get("kernel") == f.kernel
               and int(o.get("allocation", -1)) in mine and _cell(o) in cells
               for o in _ops(ctx))


def is_freed_part(f: Finding) -> bool:
    """A `barrier_misuse`: an arrival in a block's part of a cluster barrier that block
    had left (`FREED_PART_HINT`)."""
    return f.kind == "barrier_misuse" and f.suggestion == FREED_PART_HINT


__all__ = ["analyse_barriers"]
