"""Deadlocks: kernels stopped by the wait-for check or by the watchdog.

The wait-for check (`_jax.monitor.BarrierWaits`) stops a kernel the moment every
thread of its cluster has finished or waits on a barrier phase no running thread
can complete; its record names, per waiting thread, the threads that should have
arrived (`expects`) and where each one is. The watchdog (`pv.trace(timeout_s=...)`)
stops a kernel that made no progress for that long, for the waits the check cannot
see (a thread spinning on a flag, warps running under their warpgroup).

The advice (`suggestion`) follows what the records show of the threads that should
arrive, most specific first: some threads of the block never allocated the barrier (a
thread-dependent branch: allocate it unconditionally); a waiter went past the branch
around the arrival another thread made for the phase it waits for (`pl.when(c == 0)`
around a cluster barrier's arrival: that branch is the finding's `branch`); one is still
running when the watchdog stops the kernel (stuck before its arrival, most often spinning
on memory set after the wait: named with its last line); one finished without arriving,
or arrived for earlier phases only; or each one waits itself (a cycle). Without a record
of who should arrive (an older trace), the advice names no cause.
"""

from __future__ import annotations

import collections

import numpy as np

from ..model import Finding, SourceLocation
from ..store import EventTable
from .collective import branch_call
from .context import AnalysisContext, block_label, is_array_slot, sorted_cells
from .frame import CREATE, request_mask

DEADLOCK_HINT = (
    "A thread waits on a barrier that no other thread will arrive at. A barrier allocated "
    "in a thread-dependent branch (`pl.when` on the thread index) exists only for the "
    "threads that took the branch, so the others cannot arrive: allocate the barrier "
    "unconditionally, for all threads, and make every thread that should arrive do so "
    "(check `num_arrivals`).")
TOO_FEW_ARRIVALS_HINT = (
    "The phase the thread waits for needs `num_arrivals` arrivals, and fewer threads arrive "
    "at the barrier: make `num_arrivals` the number of arrivals one phase really gets, or "
    "make the missing threads call `plgpu.barrier_arrive`.")
TOO_FEW_NAMED = " Here {who} {holds} the barrier and finished without arriving at it."
FINISHED_HINT = (
    "The threads that arrive at this barrier arrived for its earlier phases and have "
    "finished, so the phase this thread waits for never completes: wait as many times as "
    "they arrive (give the waiting and the arriving loops the same trip count), or make "
    "them arrive for this phase too.")
CYCLE_HINT = (
    "The threads wait for each other: each one's arrival comes after its own wait. Arrive "
    "before waiting (signal first, then wait for the other side), or reorder the waits so "
    "that one thread's arrival does not depend on the wait it unblocks.")
NO_ARRIVAL_HINT = (
    "No thread arrives at the barrier the thread waits on: arrive at it "
    "(`plgpu.barrier_arrive`, or a copy that arrives at it) before the wait can end, and "
    "check that the arriving code is reached (a `pl.when` on the thread index).")
GENERAL_HINT = (
    "A thread waits on a barrier phase that never completes. Check that every thread that "
    "should arrive at the barrier reaches its `plgpu.barrier_arrive` (not skipped by a "
    "`pl.when` on the thread index), that `num_arrivals` is the number of arrivals one phase "
    "gets, and that no thread's arrival comes after a wait it unblocks.")
RUNNING_HINT = (
    "{who} should arrive at this barrier but {is_} still running ({where}) and never "
    "gets to the arrival: {it} is stuck before it, most often spinning on memory (a flag) "
    "that another thread sets only after this wait. Make the arrival independent of the "
    "wait it unblocks: set the flag (or do whatever the running thread waits for) before "
    "waiting, or synchronise through a barrier (`plgpu.barrier_arrive` / "
    "`plgpu.barrier_wait`) instead of polling memory. If {who} {is_} only slow, {slow}.")
# what RUNNING_HINT advises for a kernel that is only slow, by what stopped it
_SLOW = {"interrupt": "let the kernel run longer before interrupting it",
         None: "raise `timeout_s` (`--timeout` for `pallas-viz run`, `%pallas_trace`)"}
MISSING_ARRIVAL_HINT = (
    "{who} {holds} the barrier but finished without ever arriving at it, so nothing "
    "completes the phase the waiting thread waits for: make the thread that should signal "
    "call `plgpu.barrier_arrive` on this barrier (after the writes it publishes), and check "
    "that the arrival is reached (not skipped by a `pl.when` on the thread index or a loop "
    "that runs too few times).")
SKIPPED_ARRIVAL_HINT = (
    "{who} {wait} at line {wait_line} for a phase of this barrier without arriving at it: "
    "the arrival at line {arrive_line} is inside the {call} at line {branch_line}, whose "
    "condition is false for {them} ({arrivals} of {num_arrivals} arrivals came). Move the "
    "arrival out of the branch, so that every thread the phase counts arrives once per "
    "phase (branch inside it on what differs instead), or make `num_arrivals` the number "
    "of arrivals one phase really gets.")
LOOPED_HINT = (
    "{who} {holds} the barrier and should arrive at it, but went around {its} loop without "
    "ever arriving at it ({it} {waits} at line {line} again), so this wait is not one half "
    "of a cycle: the arrival is missing from {its} loop, or skipped by a `pl.when`. Make "
    "{who} call `plgpu.barrier_arrive` on this barrier once per iteration, once {it} {is_} "
    "done with what the barrier guards (as a pipeline's consumer releases a slot by "
    "arriving at its \"empty\" barrier).")
SKIPPED_SOME_HINT = (
    "{who} holds the barrier and arrives at it once per iteration of its loop, but went "
    "around the loop more times than it arrived (it waits at line {line} after going "
    "round {trips} time(s), and arrived {arrived} time(s)): an iteration skipped the arrival, on "
    "a path of a `pl.when` or `lax.cond` (on data or on the thread) that does not arrive. "
    "Make {who} arrive in every iteration, on every path of the branch, once it is done "
    "with what the barrier guards.")
EXTRA_WAIT_HINT = (
    "{who} waits for phase {phase} of this barrier, but the only arrivals at it come from "
    "the TMA copies (or tcgen05 operations) {who} started itself, and they completed the "
    "phases before it: one wait too many. Wait once per copy that signals the barrier (each "
    "wait is for the next phase), or start a copy for every phase you wait for.")
SIBLING_HINT = (
    " Here {who} arrived at {what} instead{at}, another barrier of the same "
    "`pl.run_scoped`: if that arrival was meant for this barrier, arrive at the barrier "
    "that is waited on, or wait on the one arrived at (check the barrier, or the slot "
    "index).")
COPY_SIBLING_HINT = (
    "No arrival ever came to the barrier {who} waits on, and the TMA copies {who} started "
    "signal another barrier of the same `pl.run_scoped`: {what}{at}. If one of them was "
    "meant for this barrier, pass it the barrier that is waited on (check the barrier, or "
    "the slot index: `bars.at[slot]`), or wait on the barrier the copy signals.")
MISSING_OR_CYCLE_HINT = (
    " If the arrival should come instead from {who}, which {waits} itself: arrive before "
    "waiting (signal first, then wait for the other side).")


def _allocation_info(table: EventTable, alloc: int, block):
    """(create row, threads of `block` that requested it, initial ref count, source) of
    one allocation."""
    if alloc < 0:
        return None
    c = table.columns
    rows = np.flatnonzero((c["allocation"] == alloc) & request_mask(table))
    creates = rows[c["op"][rows] == CREATE]
    if len(creates) == 0:
        return None
    first = int(creates[0])
    # a cluster barrier is one allocation for every block of the cluster: its ref count
    # counts the threads of all of them, its requests come from each
    threads = sorted({int(c["thread"][r]) for r in rows
                      if table.block(int(c["block"][r])) == block})
    return first, threads, int(c["initial_ref_count"][first]), table.source_of(first)


def _expected_text(ctx: AnalysisContext, kernel, w: dict, related: list,
                   alloc_row: int | None = None,
                   primary: SourceLocation | None = None) -> str:
    """" <- needs t 1 (finished, last at line 35)": the wait-for chain of one waiter;
    `alloc_row`: the create of the barrier it waits on, if known; `primary`: the line
    the finding is at (a line in another file is named with its file)."""
    expects = w.get("expects")
    if expects is None:
        return ""
    if not expects:
        return " <- no other thread arrives at it"
    word = ctx.thread_word(kernel)
    items = []
    for e in expects:
        src = SourceLocation.from_dict(e.get("source"))
        if src is not None:
            related.append(src)
        # (a thread may have no line recorded: one whose only requests were the kernel's
        # own, its scratch operands)
        at = f" at {src.label(primary)}" if src is not None else ""
        # (a line in another file, a helper's: with the call that led there)
        last = ("" if src is None else f"; last at {src.label_with_call(primary, call=True)}"
                if _elsewhere(src, primary) else f"; last at {src.label(primary)}")
        block = e.get("block")
        where = "" if block == w.get("block") else f"block {block_label(_block(block))} "
        if e.get("state") == "waiting":
            items.append(f"{where}{word} {e['thread']} (itself waiting{at})")
        elif e.get("state") == "finished":
            sibling = _arrived_elsewhere(ctx, kernel, alloc_row, e, primary)
            instead = f"; it arrived at {sibling[0]} instead{sibling[1]}" if sibling else ""
            items.append(f"{where}{word} {e['thread']} (finished{last}{instead})")
        else:
            items.append(f"{where}{word} {e['thread']} ({e.get('state')}{last})")
    return " <- needs " + ", ".join(items)


def _elsewhere(src: SourceLocation, primary: SourceLocation | None) -> bool:
    return primary is not None and src.file != primary.file


def _arrived_elsewhere(ctx: AnalysisContext, kernel, alloc_row: int | None, e: dict,
                       primary: SourceLocation | None = None,
                       copies: bool = False) -> tuple[str, str] | None:
    """("`empty` (operand 3 of that `pl.run_scoped`)", ", at line 16") when the thread `e`
    never arrived at the barrier created at `alloc_row` but did arrive at another barrier
    the same `pl.run_scoped` allocated (a `full` / `empty` mix-up, a wrong slot index).
    A barrier `e` also waits on is not one it arrived at instead: a rendezvous it takes
    part in (its arrival there is meant for it). `copies`: the arrivals of the TMA copies
    `e` started only (whatever it waits on)."""
    if alloc_row is None or not ctx.barrier_ops:
        return None
    hit = ctx.operand_run(alloc_row)
    if hit is None:
        return None
    c = ctx.table.columns
    alloc = int(c["allocation"][alloc_row])
    run = hit[1]
    siblings = {int(c["allocation"][r]): i for i, r in enumerate(run)
                if int(c["allocation"][r]) != alloc}
    block = _block(e.get("block"))
    mine = [o for o in ctx.barrier_ops
            if o.get("kernel") == kernel and int(o.get("thread", -1)) == int(e["thread"])
            and _block(o.get("block")) == block]
    waited = {int(o.get("allocation", -1)) for o in mine if o.get("op") == "wait"}
    for o in mine:
        if (o.get("op") == "arrive" and int(o.get("allocation", -1)) in siblings
                and (o.get("via") == "copy" if copies
                     else int(o["allocation"]) not in waited)):
            src = SourceLocation.from_dict(o.get("source"))
            at = f", at {src.label(primary)}" if src is not None else ""
            index = siblings[int(o["allocation"])]
            name = ctx.operand_name(run[index])
            what = (f"`{name}`" if is_array_slot(name)
                    else f"`{name}` (operand {index + 1} of that `pl.run_scoped`)" if name
                    else f"operand {index + 1} of that `pl.run_scoped`")
            return what, at
    return None


def _arrived_text(ctx: AnalysisContext, kernel, w: dict, related: list,
                  primary: SourceLocation | None = None) -> str:
    """": t 1 at line 64": who made the arrivals the waited-for phase got, in grid and
    thread order (not the order the run's threads happened to arrive in)."""
    items = []
    for a, src in sorted(((a, SourceLocation.from_dict(a.get("source")))
                          for a in w.get("arrived") or []), key=_arrival_order):
        if src is not None:
            related.append(src)
        via = " (a TMA copy)" if a.get("via") == "copy" else ""
        block = a.get("block")
        where = "" if block == w.get("block") else f"block {block_label(_block(block))} "
        item = (f"{where}{ctx.thread_word(kernel)} {a['thread']}"
                + (f" at {src.label(primary)}" if src is not None else "") + via)
        if item not in items:
            items.append(item)
    return (": " + ", ".join(items)) if items else ""


def _arrival_order(item) -> tuple:
    a, src = item
    warp = a.get("warp")
    return (_block(a.get("block")) or (), int(a["thread"]), -1 if warp is None else int(warp),
            -1 if src is None else src.line, str(a.get("via")))


def _threads_per_block(ctx: AnalysisContext, kernel, default: int) -> int:
    if kernel is not None and 0 <= kernel < len(ctx.kernels):
        return int(ctx.kernels[kernel].threads_per_block or default)
    return default


def _block(b):
    return None if b is None else tuple(int(x) for x in b)


def analyse_deadlocks(ctx: AnalysisContext) -> list[Finding]:
    """One `deadlock` finding per stopped kernel, naming every waiting thread."""
    table = ctx.table
    findings = []
    for d in ctx.deadlocks:
        waiters = d.get("waiters") or []
        if not waiters:
            continue
        cells, events, related, parts = [], [], [], []
        source = None
        hint = None
        skipped = _skipped_arrival(ctx, d)
        for w in waiters:
            block = None if w.get("block") is None else tuple(int(b) for b in w["block"])
            cells.append((int(w["device"]), block, int(w["thread"])))
            wait_src = SourceLocation.from_dict(w.get("source"))
            if source is None:
                source = wait_src
            elif wait_src is not None and wait_src != source:
                related.append(wait_src)
            what = w.get("resource", "barrier").replace("_", " ")
            arrivals = ""
            if w.get("num_arrivals") is not None:
                came = _arrived_text(ctx, d.get("kernel"), w, related, source)
                arrivals = (f" ({w.get('arrivals', 0)} of {w['num_arrivals']} arrivals in "
                            f"phase {w.get('phase', 0)}{came})")
            alloc = _allocation_info(table, int(w.get("allocation", -1)), block)
            origin = ""
            partial = False
            if alloc is not None:
                row, threads, expected, alloc_src = alloc
                events.append(row)
                if alloc_src is not None:
                    related.append(alloc_src)
                    origin = f" allocated at {alloc_src.label(source)}{ctx.operand(row)}"
                else:  # (JAX's code allocated it for the kernel: no line of the user's)
                    origin = " of the kernel's scratch operands"
                # the threads of the waiter's block that should have requested it (all of
                # them for an allocation over the thread axis)
                per_block = min(expected, _threads_per_block(ctx, d.get("kernel"), expected))
                if len(threads) < per_block:
                    missing = sorted(set(range(per_block)) - set(threads))
                    k = d.get("kernel")
                    origin += (f" by {ctx.threads(k, threads)} only; "
                               f"{ctx.threads(k, missing)} never allocated it")
                    # the barrier really was allocated by only some threads: the others
                    # cannot arrive at it
                    partial = True
            choice = ((0, DEADLOCK_HINT) if partial else (1, skipped[0]) if skipped
                      else _hint(ctx, d.get("kernel"), w, d.get("detected_by"),
                                 None if alloc is None else alloc[0]))
            if hint is None or choice[0] < hint[0]:
                hint = choice  # the most specific advice; the first waiter's on a tie
            at = f" at {wait_src.label(source)}" if wait_src is not None else ""
            warp = f" warp {w['warp']}" if w.get("warp") is not None else ""
            needs = _expected_text(ctx, d.get("kernel"), w, related,
                                   None if alloc is None else alloc[0], source)
            parts.append(f"block {block_label(block)} {ctx.thread_word(d.get('kernel'))} "
                         f"{w['thread']}{warp} waits{at} on "
                         f"a {what}{origin}{arrivals}{needs}")
        if d.get("detected_by") == "wait_for":
            message = ("deadlock: every thread has finished or waits on a barrier that no "
                       "running thread can complete; stopped at once by the wait-for check; "
                       + "; ".join(parts))
        elif d.get("detected_by") == "interrupt":
            # the user gave up on the kernel (Ctrl-C): most often a hang the wait-for
            # check cannot prove (a thread spinning on memory), unless it was only slow
            message = ("possible deadlock: the kernel was interrupted (Ctrl-C) while threads "
                       "waited on barriers (a hang, unless it was only slow); "
                       + "; ".join(parts))
        else:
            # the configured timeout, not the measured idle time (a few ms more, different
            # in every run): the message is the same in every run
            idle = d.get("timeout_s") or d.get("idle_s")
            span = f"{idle:g} s" if isinstance(idle, (int, float)) else "too long"
            message = (f"deadlock: the kernel made no progress for {span} and was stopped "
                       "by the watchdog (timeout_s); " + "; ".join(parts))
        seen = []
        for r in related:
            if r is not None and r != source and r not in seen:
                seen.append(r)
        findings.append(Finding(
            kind="deadlock", severity="warning" if d.get("detected_by") == "interrupt"
            else "error", message=message, cells=sorted_cells(cells),
            events=sorted(set(events)), source=source, related=seen,
            suggestion=hint[1] if hint else GENERAL_HINT, kernel=d.get("kernel"),
            branch=skipped[1] if skipped and hint and hint[1] == skipped[0] else None))
    return findings


def _skipped_arrival(ctx: AnalysisContext, d: dict) -> tuple[str, SourceLocation] | None:
    """(advice, branch) when waiting threads skipped the arrival the phase they wait for
    lacks: a waiter that never arrived at its barrier waits in the function that holds the
    branch (`pl.when`, `lax.cond`, `lax.switch`) around the phase's arrival, past that
    branch, while another thread did arrive there (its condition is false for the waiter:
    an arrival under `pl.when(c == 0)` of a cluster barrier every block waits on). Told
    from the recorded locations alone (a loaded trace reads no source file). At most as
    many such waiters per barrier phase as arrivals it lacks; None if there is none."""
    kernel = d.get("kernel")
    found: SourceLocation | None = None
    skippers: list[dict] = []
    arrive_line = wait_line = None
    counts = (0, 0)
    per_phase: dict[tuple, int] = {}  # (barrier, part, phase) -> skippers
    for w in d.get("waiters") or []:
        wait = SourceLocation.from_dict(w.get("source"))
        if wait is None or w.get("num_arrivals") is None or not w.get("arrived"):
            continue
        if (_block(w.get("block")), w.get("thread")) in _arrivers(ctx, kernel, w):
            continue
        for a in w["arrived"]:
            src = SourceLocation.from_dict(a.get("source"))
            branch = src.branch if src is not None else None
            how = _skips(wait, src, branch) if branch is not None else ""
            if not how or (how == "sibling" and not _left_out(ctx, kernel, w, d)):
                continue
            if found is None:
                found, arrive_line, wait_line = branch, src.line, wait.line
                counts = (int(w.get("arrivals") or 0), int(w["num_arrivals"]))
            if (branch.file, branch.line) == (found.file, found.line):
                skippers.append(w)
                phase = (w.get("allocation"), w.get("part"), w.get("phase"))
                per_phase[phase] = per_phase.get(phase, 0) + 1
                if per_phase[phase] > int(w["num_arrivals"]) - int(w.get("arrivals") or 0):
                    return None  # more skip it than arrivals lack: not what holds it up
            break
    if found is None:
        return None
    skippers.sort(key=lambda w: (_block(w.get("block")) or (), int(w["thread"])))
    word = ctx.thread_word(kernel)
    blocks = {_block(w.get("block")) for w in d.get("waiters") or []}
    blocks |= {_block(a.get("block")) for w in d.get("waiters") or []
               for a in w.get("arrived") or []}
    names = [(f"block {block_label(_block(w.get('block')))} " if len(blocks) > 1 else "")
             + f"{word} {w['thread']}"
             + (f" warp {w['warp']}" if w.get("warp") is not None else "") for w in skippers]
    who = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    one = len(names) == 1
    text = SKIPPED_ARRIVAL_HINT.format(
        who=who, arrive_line=arrive_line, call=branch_call(found), branch_line=found.line,
        them="it" if one else "them", wait="waits" if one else "wait", wait_line=wait_line,
        arrivals=counts[0], num_arrivals=counts[1])
    return text, found


def _left_out(ctx: AnalysisContext, kernel, w: dict, d: dict) -> bool:
    """For a wait beside the branch around the arrival (`_skips`: "sibling"), whether the
    waiters read as the threads that branch left out: several threads of the waiter's
    block arrived (the branch picks most, not one producer: then `num_arrivals` is the
    likelier mistake), and every thread holding the barrier arrived or waits (a holder
    that did neither is the likelier one left out)."""
    arrivers = _arrivers(ctx, kernel, w)
    block = _block(w.get("block"))
    if sum(1 for b, _ in arrivers if b == block) < 2:
        return False
    table = ctx.table
    c = table.columns
    alloc = int(w.get("allocation", -1))
    if alloc < 0:
        return False
    rows = np.flatnonzero((c["allocation"] == alloc) & request_mask(table))
    holders = {(table.block(int(c["block"][r])), int(c["thread"][r])) for r in rows}
    waiting = {(_block(x.get("block")), int(x["thread"])) for x in d.get("waiters") or []}
    return not (holders - set(arrivers) - waiting)


def _skips(wait: SourceLocation, arrival: SourceLocation, branch: SourceLocation) -> str:
    """Whether a thread waiting at `wait` went past the branch around `arrival`: the
    arrival is in a function written directly in the wait's function ("nested") or beside
    it, in the function both are written in ("sibling"), the branch is in that function,
    before the wait; "" if not."""
    outer, inner = wait.function or "", arrival.function or ""
    sep = ".<locals>."
    if outer and inner and sep in outer and sep in inner and (
            outer.rsplit(sep, 1)[0] == inner.rsplit(sep, 1)[0]):
        # the wait and the arrival each in a function written directly in one function
        # (two `pl.when` bodies of a scope: the waiter's branch, and the branch around the
        # arrival it does not take), the branch before the wait
        parent = outer.rsplit(sep, 1)[0]
        return "sibling" if (
            branch.kind == "branch" and branch.file == wait.file == arrival.file
            and branch.function == parent.rsplit(".", 1)[-1] and branch.line < wait.line
        ) else ""
    if not outer or not inner.startswith(outer + sep):
        return ""
    if "." in inner[len(outer) + len(".<locals>."):]:
        return ""  # nested deeper: the branch that skipped it is not known
    return "nested" if (
        branch.kind == "branch" and branch.file == wait.file == arrival.file
        and branch.function == outer.rsplit(".", 1)[-1] and branch.line < wait.line) else ""


INTERRUPTED = (
    "the kernel was interrupted (Ctrl-C) before it ended, with no thread waiting on a "
    "barrier: a thread may loop for ever (a `lax.while_loop` whose condition never "
    "changes, or one polling memory no other thread writes), or the kernel was only slow. "
    "The findings cover only what it did before the interrupt.")


def analyse_interrupts(ctx: AnalysisContext) -> list[Finding]:
    """An `interrupted` warning for a kernel stopped by Ctrl-C while no thread waited on
    a barrier (with waiters, `analyse_deadlocks` reports them): its run is no clean run."""
    waited = {d.get("kernel") for d in ctx.deadlocks if d.get("waiters")}
    launch = {k.index: k.launch for k in ctx.kernels}
    return [Finding(kind="interrupted", severity="warning", message=INTERRUPTED, cells=[],
                    events=[], source=launch.get(k),
                    suggestion="Look for a loop that never ends in some thread: a "
                    "`lax.while_loop` polling memory that another thread writes only "
                    "later, or a trip count that depends on the thread. pallas_viz records "
                    "allocations and barrier operations, not loop iterations, so it cannot "
                    "name the spinning thread.", kernel=k)
            for k in sorted(ctx.stopped) if k not in waited]


def _arrivers(ctx: AnalysisContext, kernel, w: dict) -> set:
    """(block, thread) of every thread that ever arrived at the barrier `w` waits on."""
    return set(_arrival_counts(ctx, kernel, w))


def _arrival_counts(ctx: AnalysisContext, kernel, w: dict) -> collections.Counter:
    """(block, thread) -> how many times it arrived at the barrier `w` waits on."""
    alloc = int(w.get("allocation", -1))
    named = w.get("resource") == "named_barrier"
    out: collections.Counter = collections.Counter()
    if alloc < 0 and not named:
        return out
    for o in ctx.barrier_ops:
        if (o.get("op") != "arrive" or o.get("kernel") != kernel
                or o.get("device") != w.get("device")):
            continue
        if alloc >= 0 and o.get("allocation") != alloc:
            continue
        if alloc < 0 and (o.get("resource") != "named_barrier"
                          or o.get("barrier_id") != w.get("barrier_id")
                          or o.get("block") != w.get("block")):
            continue
        out[(_block(o.get("block")), o.get("thread"))] += 1
    return out


def _who(ctx: AnalysisContext, kernel, w: dict, expects: list) -> tuple[str, str]:
    """("t 1" / "t 1 and t 2", "last at line 123; ..."): the threads `expects` names, by
    block when not the waiter's, and their last recorded lines."""
    word = ctx.thread_word(kernel)
    names, wheres = [], []
    for e in expects:
        block = e.get("block")
        where = "" if block == w.get("block") else f"block {block_label(_block(block))} "
        name = f"{where}{word} {e['thread']}"
        src = SourceLocation.from_dict(e.get("source"))
        last = (f"last recorded at {src.label(SourceLocation.from_dict(w.get('source')))}"
                if src is not None else "no line recorded")
        names.append(name)
        wheres.append(f"{name} {last}" if len(expects) > 1 else last)
    who = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return who, "; ".join(wheres)


def _hint(ctx: AnalysisContext, kernel, w: dict, detected_by: str | None = None,
          alloc_row: int | None = None) -> tuple[int, str]:
    """(priority, advice) for one waiter, from what the records show of the threads that
    should arrive (`expects`); the lowest priority of a kernel's waiters is its advice.
    `alloc_row`: the create of the barrier it waits on, if known."""
    expects = w.get("expects")
    if expects is None:  # no wait-for record (an older trace): nothing specific is known
        return 4, GENERAL_HINT
    running = [e for e in expects if e.get("state") == "running"]
    waiting = [e for e in expects if e.get("state") == "waiting"]
    finished = [e for e in expects if e.get("state") == "finished"]
    if (w.get("phase") or 0) > 0 and not (w.get("arrivals") or 0) and _only_own_async(
            ctx, kernel, w):
        return 2, EXTRA_WAIT_HINT.format(who=f"{ctx.thread_word(kernel)} {w['thread']}",
                                         phase=w.get("phase"))
    wsrc = SourceLocation.from_dict(w.get("source"))
    if not (w.get("arrivals") or 0) and not _arrivers(ctx, kernel, w):
        copy = _arrived_elsewhere(ctx, kernel, alloc_row, w, wsrc, copies=True)
        if copy is not None:
            return 2, COPY_SIBLING_HINT.format(who=f"{ctx.thread_word(kernel)} {w['thread']}",
                                               what=copy[0], at=copy[1])
    if running:
        # stopped by the watchdog or Ctrl-C: the thread that should arrive never got to
        # its arrival
        who, where = _who(ctx, kernel, w, running)
        one = len(running) == 1
        return 1, RUNNING_HINT.format(who=who, where=where, is_="is" if one else "are",
                                      it="it" if one else "each",
                                      slow=_SLOW.get(detected_by, _SLOW[None]))
    if not expects:
        if (w.get("arrivals") or 0) > 0:
            return 2, TOO_FEW_ARRIVALS_HINT
        return 2, NO_ARRIVAL_HINT
    if finished:
        arrivers = _arrivers(ctx, kernel, w)
        came = [e for e in finished if (_block(e.get("block")), e.get("thread")) in arrivers]
        never = [e for e in finished if e not in came]
        if (w.get("arrivals") or 0) > 0:
            if not never and came and (w.get("phase") or 0) > 0:
                # earlier phases got their arrivals: those threads stopped arriving (a
                # shorter loop), not a `num_arrivals` no phase could reach
                return 2, FINISHED_HINT
            if not never:
                return 2, TOO_FEW_ARRIVALS_HINT
            who, _ = _who(ctx, kernel, w, never)
            return 2, TOO_FEW_ARRIVALS_HINT + TOO_FEW_NAMED.format(
                who=who, holds="holds" if len(never) == 1 else "hold")
        if came and (w.get("phase") or 0) > 0:
            return 2, FINISHED_HINT
        if never:
            who, _ = _who(ctx, kernel, w, never)
            hint = MISSING_ARRIVAL_HINT.format(
                who=who, holds="holds" if len(never) == 1 else "hold")
            for e in never:
                sibling = _arrived_elsewhere(ctx, kernel, alloc_row, e, wsrc)
                if sibling is not None:
                    one, _ = _who(ctx, kernel, w, [e])
                    hint += SIBLING_HINT.format(who=one, what=sibling[0], at=sibling[1])
                    break
            if waiting:
                other, _ = _who(ctx, kernel, w, waiting)
                hint += MISSING_OR_CYCLE_HINT.format(
                    who=other, waits="waits" if len(waiting) == 1 else "wait")
            return 2, hint
        return 2, FINISHED_HINT
    looped, short = _looped_without_arriving(ctx, kernel, w, waiting)
    if short:
        who, _ = _who(ctx, kernel, w, short[:1])
        e = short[0]
        return 2, SKIPPED_SOME_HINT.format(
            who=who, line=SourceLocation.from_dict(e.get("source")).line,
            trips=e["_waits"] - 1, arrived=e["_arrived"])
    if looped:
        who, _ = _who(ctx, kernel, w, looped)
        one = len(looped) == 1
        line = SourceLocation.from_dict(looped[0].get("source")).line
        return 2, LOOPED_HINT.format(who=who, holds="holds" if one else "hold",
                                     its="its" if one else "their", it="it" if one else "they",
                                     waits="waits" if one else "wait", line=line,
                                     is_="is" if one else "are")
    return 3, CYCLE_HINT


def _only_own_async(ctx: AnalysisContext, kernel, w: dict) -> bool:
    """True if every arrival at the barrier `w` waits on came from a TMA copy or a tcgen05
    operation the waiting thread itself started (and there was one)."""
    alloc = int(w.get("allocation", -1))
    if alloc < 0:
        return False
    me = (w.get("device"), _block(w.get("block")), w.get("thread"), w.get("warp"))
    seen = False
    for o in ctx.barrier_ops:
        if (o.get("op") != "arrive" or o.get("kernel") != kernel
                or o.get("allocation") != alloc):
            continue
        if o.get("via") not in ("copy", "mma", "commit") or (
                o.get("device"), _block(o.get("block")), o.get("thread"), o.get("warp")) != me:
            return False
        seen = True
    return seen


def _looped_without_arriving(ctx: AnalysisContext, kernel, w: dict,
                             waiting: list) -> tuple[list, list]:
    """The expected threads of `waiting` that never arrived at the barrier `w` waits on and
    wait at a line where they had waited on the same barrier before (an earlier
    iteration of their loop went by without the arrival), those of one line: the first
    such line's, in thread order. (A wait at one line on the next slot of a barrier
    array, `full.at[i % 2]`, is a first wait on that slot, not the loop going round.)
    Second: the threads of `waiting` that did arrive at it, but fewer times than their
    loop went round (an iteration skipped the arrival), each with `_waits` and
    `_arrived`; only when the first list is empty."""
    counts = _arrival_counts(ctx, kernel, w)
    # (thread, line, barrier) -> waits there; thread -> the barrier of its latest wait
    waits: collections.Counter = collections.Counter()
    latest: dict = {}
    for o in ctx.barrier_ops:
        if o.get("op") == "wait" and o.get("kernel") == kernel:
            src = SourceLocation.from_dict(o.get("source"))
            who = (o.get("device"), _block(o.get("block")), o.get("thread"), o.get("warp"))
            latest[who] = o.get("allocation")
            if src is not None:
                waits[(*who, src.file, src.line, o.get("allocation"))] += 1
    out, short = [], []
    for e in waiting:
        src = SourceLocation.from_dict(e.get("source"))
        if src is None:
            continue
        who = (e.get("device"), _block(e.get("block")), e.get("thread"), e.get("warp"))
        n = waits[(*who, src.file, src.line, latest.get(who))]
        arrived = counts[(_block(e.get("block")), e.get("thread"))]
        if not arrived and n >= 2:
            out.append(e)
        elif arrived and n - 1 > arrived:  # (its loop went round n - 1 times)
            short.append({**e, "_waits": n, "_arrived": arrived})
    out.sort(key=lambda e: (_block(e.get("block")) or (), int(e["thread"])))
    if out:
        first = SourceLocation.from_dict(out[0].get("source"))
        out = [e for e in out if SourceLocation.from_dict(e.get("source")).line == first.line]
        return out, []
    short.sort(key=lambda e: (_block(e.get("block")) or (), int(e["thread"])))
    return [], short
