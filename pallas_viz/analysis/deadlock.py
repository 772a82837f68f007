"""Deadlocks: kernels stopped by the wait-for check or by the watchdog.

The wait-for check (`_jax.monitor.BarrierWaits`) stops a kernel the moment every
thread of its cluster has finished or waits on a barrier phase no running thread
can complete; its record names, per waiting thread, the threads that should have
arrived (`expects`) and where each one is. The watchdog (`pv.trace(timeout_s=...)`)
stops a kernel that made no progress for that long, for the waits the check cannot
see (a thread spinning on a flag, warps running under their warpgroup).
"""

from __future__ import annotations

import numpy as np

from ..model import Finding, SourceLocation
from ..store import EventTable
from .context import AnalysisContext, block_label, sorted_cells
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


def _allocation_info(table: EventTable, alloc: int):
    """(create row, requesting threads, initial ref count, source) of one allocation."""
    if alloc < 0:
        return None
    c = table.columns
    rows = np.flatnonzero((c["allocation"] == alloc) & request_mask(table))
    creates = rows[c["op"][rows] == CREATE]
    if len(creates) == 0:
        return None
    first = int(creates[0])
    threads = sorted(set(c["thread"][rows].tolist()))
    return first, threads, int(c["initial_ref_count"][first]), table.source_of(first)


def _expected_text(ctx: AnalysisContext, kernel, w: dict, related: list) -> str:
    """" <- needs t 1 (finished, last at line 35)": the wait-for chain of one waiter."""
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
        line = f"line {src.line}" if src is not None else "no recorded line"
        block = e.get("block")
        where = "" if block == w.get("block") else f"block {block_label(_block(block))} "
        if e.get("state") == "waiting":
            items.append(f"{where}{word} {e['thread']} (itself waiting at {line})")
        elif e.get("state") == "finished":
            items.append(f"{where}{word} {e['thread']} (finished; last at {line})")
        else:
            items.append(f"{where}{word} {e['thread']} ({e.get('state')}; last at {line})")
    return " <- needs " + ", ".join(items)


def _arrived_text(ctx: AnalysisContext, kernel, w: dict, related: list) -> str:
    """": t 1 at line 64": who made the arrivals the waited-for phase got."""
    items = []
    for a in w.get("arrived") or []:
        src = SourceLocation.from_dict(a.get("source"))
        if src is not None:
            related.append(src)
        via = " (a TMA copy)" if a.get("via") == "copy" else ""
        item = (f"{ctx.thread_word(kernel)} {a['thread']}"
                + (f" at line {src.line}" if src is not None else "") + via)
        if item not in items:
            items.append(item)
    return (": " + ", ".join(items)) if items else ""


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
                came = _arrived_text(ctx, d.get("kernel"), w, related)
                arrivals = (f" ({w.get('arrivals', 0)} of {w['num_arrivals']} arrivals in "
                            f"phase {w.get('phase', 0)}{came})")
            alloc = _allocation_info(table, int(w.get("allocation", -1)))
            origin = ""
            if alloc is not None:
                row, threads, expected, alloc_src = alloc
                events.append(row)
                if alloc_src is not None:
                    related.append(alloc_src)
                    origin = f" allocated at line {alloc_src.line}"
                if len(threads) < expected:
                    missing = sorted(set(range(expected)) - set(threads))
                    k = d.get("kernel")
                    origin += (f" by {ctx.threads(k, threads)} only; "
                               f"{ctx.threads(k, missing)} never allocated it")
                    hint = hint or DEADLOCK_HINT
            hint = hint or _hint(w)
            at = f" at line {wait_src.line}" if wait_src is not None else ""
            warp = f" warp {w['warp']}" if w.get("warp") is not None else ""
            needs = _expected_text(ctx, d.get("kernel"), w, related)
            parts.append(f"block {block_label(block)} {ctx.thread_word(d.get('kernel'))} "
                         f"{w['thread']}{warp} waits{at} on "
                         f"a {what}{origin}{arrivals}{needs}")
        if d.get("detected_by") == "wait_for":
            message = ("deadlock: every thread has finished or waits on a barrier that no "
                       "running thread can complete; stopped at once by the wait-for check; "
                       + "; ".join(parts))
        else:
            idle = d.get("idle_s") or d.get("timeout_s")
            message = (f"deadlock: the kernel made no progress for {idle} s and was stopped "
                       "by the watchdog (timeout_s); " + "; ".join(parts))
        seen = []
        for r in related:
            if r is not None and r != source and r not in seen:
                seen.append(r)
        findings.append(Finding(
            kind="deadlock", severity="error", message=message, cells=sorted_cells(cells),
            events=sorted(set(events)), source=source, related=seen,
            suggestion=hint or DEADLOCK_HINT, kernel=d.get("kernel")))
    return findings


def _hint(w: dict) -> str | None:
    """The advice for one waiter the wait-for check described (None: the general one)."""
    expects = w.get("expects")
    if expects is None:
        return None
    if any(e.get("state") == "waiting" for e in expects):
        return CYCLE_HINT
    if expects and all(e.get("state") == "finished" for e in expects) and (
            w.get("phase") or 0) > 0:
        return FINISHED_HINT
    if not expects and (w.get("arrivals") or 0) > 0:
        return TOO_FEW_ARRIVALS_HINT
    if not expects:
        return NO_ARRIVAL_HINT
    return None
