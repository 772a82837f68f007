"""Collective (all-threads) allocations: who requested them, and whether they agree.

Finds `partial_collective`, `nonzero_thread_collective` (the event side) and
`collective_mismatch`.
"""

from __future__ import annotations

import numpy as np

from ..cells import ranges
from ..model import Finding
from ..store import EventTable
from .frame import cell, group_starts, in_block_mask, request_mask
from .grouping import FindingGroups

PARTIAL_HINT = (
    "Every thread of the block must reach a collective `pl.run_scoped` (or barrier "
    "allocation): hoist it out of the thread-dependent branch (`pl.when` on the thread "
    "index) and branch inside its body instead.")
NONZERO_HINT = (
    "Allocations for all threads belong to thread 0 of the block. Make the allocation "
    "unconditionally (outside `pl.when(thread == ...)`) so that thread 0 requests it too.")
MISMATCH_HINT = (
    "Threads merged different allocations into one buffer, so they alias each other's "
    "memory. Make every thread perform the same collective allocations in the same order.")


def partial_message(details, cells) -> str:
    """The text of a `partial_collective` finding; details: (have, missing, what, n)."""
    have, missing, what, n = details[0]
    blocks = {b for _, b, _ in cells}
    absent = (f"thread(s) {ranges(missing)} never request it" if missing
              else "the other threads sharing it never request it")
    return (f"collective {what} is requested only by thread(s) {ranges(have)} of {n}; "
            f"{absent}, so its ref count can never reach zero and later collective "
            f"allocations of those threads alias the wrong buffers ({len(blocks)} block(s))")


def _what(table: EventTable, i: int) -> str:
    e = table.event(i)
    if e.resource != "buffer":
        return e.resource.replace("_", " ")
    return f"{e.memory_space} buffer {e.shape} {e.dtype}"


def analyse_collectives(table: EventTable, divergent: set[tuple] = frozenset(),
                        unfinished: set[int] = frozenset()) -> list[Finding]:
    """Collective buffers whose requests disagree, or whose requesters fall short.

    `divergent` holds (kernel, device, block index) whose threads' sequences part;
    `analyse_sequences` already pins their partial collectives to the right line.
    """
    c = table.columns
    mask = request_mask(table) & in_block_mask(table) & (c["initial_ref_count"] > 1) & (
        c["allocation"] >= 0)
    idx = np.flatnonzero(mask)
    if len(idx) == 0:
        return []
    order = idx[np.argsort(c["allocation"][idx], kind="stable")]
    allocs = c["allocation"][order]
    starts = group_starts(allocs)
    ends = np.r_[starts[1:], len(order)]
    keep = _suspect_groups(c, order, starts)
    starts, ends = starts[keep], ends[keep]
    groups = FindingGroups()
    for s, e in zip(starts.tolist(), ends.tolist()):
        rows = order[s:e]
        expected = int(c["initial_ref_count"][rows[0]])
        # a cluster barrier is shared by the threads of several blocks
        requesters = sorted(set(zip(c["block"][rows].tolist(), c["thread"][rows].tolist())))
        first = int(rows[0])
        kernel = int(c["kernel"][first])
        src = table.source_of(first)
        block_cells = [cell(table, int(r)) for r in rows]
        # -- partial: fewer threads requested it than share it (a ref-count mismatch)
        where = (kernel, int(c["device"][first]), int(c["block"][first]))
        # (in an unfinished kernel the other threads may simply not have got there)
        if len(requesters) < expected and where not in divergent and kernel not in unfinished:
            req_threads = sorted({t for _, t in requesters})
            missing = sorted(set(range(expected)) - set(req_threads)) if len(
                {b for b, _ in requesters}) == 1 else []
            creator = int(c["thread"][first])
            what = _what(table, first)
            miss_cells = [(block_cells[0][0], block_cells[0][1], t) for t in missing]
            detail = (req_threads, missing, what, expected)

            groups.add("partial_collective", "error", kernel, (src, tuple(req_threads)), src,
                       block_cells + miss_cells, rows.tolist(), partial_message, PARTIAL_HINT,
                       detail=detail)
            if creator != 0 and 0 not in req_threads:
                def msg0(details, cells):
                    creator, what = details[0]
                    return (f"collective {what} was created by thread {creator}, but thread 0 "
                            f"of its block never requested it; allocations for all threads "
                            f"belong to thread 0")

                groups.add("nonzero_thread_collective", "error", kernel, (src, creator), src,
                           block_cells, rows.tolist(), msg0, NONZERO_HINT,
                           detail=(creator, what))
        # -- mismatch: merged requests disagree on line, kind, shape or dtype
        sig = set(zip(c["source"][rows].tolist(), c["resource"][rows].tolist(),
                      c["shape"][rows].tolist(), c["dtype"][rows].tolist()))
        if len(sig) > 1:
            parts = []
            related = []
            for r in rows.tolist():
                ev = table.event(r)
                where = ev.source.short() if ev.source else "unknown line"
                parts.append(f"thread {ev.thread}: {_what(table, r)} at {where}")
                related.append(ev.source)

            def msgm(details, cells):
                return ("requests merged into one collective buffer disagree: "
                        + "; ".join(details[0]))

            key = tuple(sorted(sig))
            groups.add("collective_mismatch", "error", kernel, key, src, block_cells,
                       rows.tolist(), msgm, MISMATCH_HINT, related=related, detail=parts)
    return groups.findings()


def _suspect_groups(c, order: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Mask of the lifetimes (runs of `order` from `starts`) that may yield a finding.

    A lifetime needs a closer look only if fewer distinct (block, thread) pairs request
    it than its initial ref count, or if its requests disagree on line, kind, shape or
    dtype; all the others are clean, and skipping them here keeps the loop short.
    """
    n = len(order)
    group = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, n]))
    # distinct (block, thread) pairs per lifetime
    blk, thr = c["block"][order], c["thread"][order]
    by = np.lexsort((thr, blk, group))
    g2, b2, t2 = group[by], blk[by], thr[by]
    new_pair = np.r_[True, (g2[1:] != g2[:-1]) | (b2[1:] != b2[:-1]) | (t2[1:] != t2[:-1])]
    distinct = np.bincount(g2[new_pair], minlength=len(starts))
    expected = c["initial_ref_count"][order[starts]]
    # requests that differ from the lifetime's first request
    first = order[starts][group]
    differs = np.zeros(n, dtype=bool)
    for name in ("source", "resource", "shape", "dtype"):
        col = c[name]
        differs |= col[order] != col[first]
    mismatch = np.bincount(group[differs], minlength=len(starts)) > 0
    return (distinct < expected) | mismatch
