"""Data races reported by JAX's race detection (`pv.trace(detect_races=True)`).

A race between two threads on a collective buffer that they did not mean to
share is really aliasing: a collective allocation made by only some threads (in
a thread-dependent branch) shifted the others' buffer ids, so later requests from
different lines were merged into one buffer. That case points at the divergent
allocation.
"""

from __future__ import annotations

import numpy as np

from ..model import Finding, SourceLocation
from ..store import EventTable
from .frame import CREATE, in_block_mask, request_mask

RACE_HINT = (
    "Two threads access the same buffer without ordering: put a barrier between the write "
    "and the other thread's access (`plgpu.barrier_arrive` / `plgpu.barrier_wait`), or "
    "give each thread its own part of the buffer.")
ALIAS_HINT = (
    "The threads do not share this buffer on purpose: their requests from different lines "
    "were merged into one collective buffer because a collective allocation was made by "
    "only some threads. Hoist that allocation out of the thread-dependent branch "
    "(`pl.when` on the thread index) so every thread makes the same collective "
    "allocations in the same order.")


def _cell(a: dict):
    return (int(a.get("device", 0)), tuple(int(b) for b in a.get("block", ())),
            int(a.get("thread", -1)))


def _block_str(block) -> str:
    return "(" + ", ".join(str(b) for b in block) + ")"


def _what(r: dict, table: EventTable, row: int | None) -> str:
    space = r.get("memory_space") or "buffer"
    if row is None:
        return f"{space} buffer"
    e = table.event(row)
    return f"{space} buffer {e.shape} {e.dtype}"


def _divergent_allocation(table: EventTable, row: int) -> int | None:
    """The latest partial collective allocation of `row`'s block made before it."""
    c = table.columns
    same = ((c["kernel"] == c["kernel"][row]) & (c["device"] == c["device"][row])
            & (c["block"] == c["block"][row]) & request_mask(table) & in_block_mask(table)
            & (c["initial_ref_count"] > 1) & (c["allocation"] >= 0))
    rows = np.flatnonzero(same)
    best = None
    for a in sorted(set(c["allocation"][rows].tolist())):
        if a == int(c["allocation"][row]):
            continue
        member = rows[c["allocation"][rows] == a]
        creates = member[c["op"][member] == CREATE]
        if len(creates) == 0 or int(creates[0]) > row:
            continue
        if len(set(c["thread"][member].tolist())) < int(c["initial_ref_count"][member[0]]):
            best = int(creates[0]) if best is None else max(best, int(creates[0]))
    return best


def analyse_races(table: EventTable, races: list[dict]) -> list[Finding]:
    """One `race` finding per JAX race report."""
    c = table.columns
    findings = []
    for r in races:
        acc, other = r.get("access") or {}, r.get("other") or {}
        cells = [_cell(acc)] + ([_cell(other)] if "thread" in other else [])
        src = SourceLocation.from_dict(acc.get("source"))
        osrc = SourceLocation.from_dict(other.get("source"))
        alloc = int(r.get("allocation", -1))
        rows = np.flatnonzero((c["allocation"] == alloc) & request_mask(table)) if (
            alloc >= 0) else np.zeros(0, dtype=np.int64)
        create = next((int(x) for x in rows if c["op"][x] == CREATE), None)
        events = rows.tolist()
        related = [x for x in (osrc,) if x is not None]
        what = _what(r, table, create)

        def side(a, s):
            where = f" at {s.short()}" if s is not None else ""
            who = (f"block {_block_str(a.get('block', ()))} thread {a['thread']}"
                   if "thread" in a else "another thread")
            return f"{a.get('kind') or 'access'} by {who}{where}"

        message = (f"data race on {what}: {side(acc, src)} is not ordered with the "
                   f"{side(other, osrc)}")
        hint = RACE_HINT
        if create is not None:
            alloc_src = table.source_of(create)
            if alloc_src is not None:
                related.append(alloc_src)
            req_lines = {int(s) for s in c["source"][rows].tolist()}
            if len(req_lines) > 1:
                per_thread = sorted({(int(c["thread"][x]), table.source_of(int(x)))
                                     for x in rows}, key=lambda p: p[0])
                merged = "; ".join(
                    f"thread {t} requested it at line {s.line if s else '?'}"
                    for t, s in per_thread)
                message += (f". The threads alias one buffer by accident ({merged})")
                hint = ALIAS_HINT
                div = _divergent_allocation(table, create)
                if div is not None:
                    dsrc = table.source_of(div)
                    dthreads = sorted(set(c["thread"][(c["allocation"] == c["allocation"][div])
                                                      & request_mask(table)].tolist()))
                    message += (f": the collective allocation at line "
                                f"{dsrc.line if dsrc else '?'} was made by thread(s) "
                                f"{', '.join(map(str, dthreads))} only (a thread-divergent "
                                f"branch) and shifted the other threads' buffer ids")
                    events.append(div)
                    if dsrc is not None:
                        related.insert(0, dsrc)
        seen = []
        for x in related:
            if x is not None and x != src and x not in seen:
                seen.append(x)
        findings.append(Finding(kind="race", severity="error", message=message,
                                cells=sorted(set(cells)), events=sorted(set(events)),
                                source=src, related=seen, suggestion=hint,
                                kernel=r.get("kernel")))
    return findings
