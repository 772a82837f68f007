"""Buffers and barriers still allocated when their kernel ends."""

from __future__ import annotations

import numpy as np

from ..model import Finding
from .context import AnalysisContext, line_call_key, where_count
from .frame import CREATE, FREE, cell, placed_mask
from .grouping import FindingGroups

# Up to this many allocations, whether every one was freed is checked with a set first.
SET_ROWS = 4096

LEAK_HINT = (
    "Every thread that shares this allocation must reach the end of its scope. It usually "
    "leaks because some threads never requested it (see the partial-collective finding) "
    "or the kernel left its scope early.")


def analyse_leaks(ctx: AnalysisContext) -> list[Finding]:
    """One `leak` finding per allocation site; kernel-level operands are not leaks, and
    nothing a kernel that did not end (failed, deadlocked, interrupted) holds is."""
    table, failed_kernels = ctx.table, ctx.failed
    c = table.columns
    alloc = c["allocation"]
    blockish = placed_mask(table)
    created = np.flatnonzero((c["op"] == CREATE) & blockish & (alloc >= 0))
    freed = alloc[(c["op"] == FREE) & (alloc >= 0)]
    if len(created) <= SET_ROWS and set(freed.tolist()).issuperset(alloc[created].tolist()):
        # the usual clean run, every lifetime freed: a set says so without `np.isin`
        # (its sorting costs more than the rest of the analysis on a small table)
        return []
    leaked = created[~np.isin(alloc[created], freed)]
    if len(leaked) == 0:
        return []
    leaked = leaked[~np.isin(c["kernel"][leaked], list(failed_kernels))]
    if len(leaked) == 0:
        return []
    # all events of the leaked lifetimes, to report the final ref count and the cells
    ids = alloc[leaked]
    member = np.flatnonzero(np.isin(alloc, ids))
    last_rc: dict[int, int] = {}
    cells: dict[int, list] = {}
    rows: dict[int, list] = {}
    for r in member.tolist():
        a = int(alloc[r])
        last_rc[a] = int(c["ref_count"][r])
        cells.setdefault(a, []).append(cell(table, r))
        rows.setdefault(a, []).append(r)
    groups = FindingGroups()
    for r in leaked.tolist():
        a = int(alloc[r])
        ev = table.event(r)
        src = ev.source
        what = ctx.what(r)
        detail = (what, last_rc[a], ev.initial_ref_count)

        def msg(details, cells):
            what, rc, init = details[0]
            stuck = sorted({d[1] for d in details})
            return (f"{what} is never freed: its ref count is stuck at "
                    f"{', '.join(map(str, stuck))} (of {init}) when the kernel ends, in "
                    f"{where_count(cells)}")

        # (by line and call: the same line's table entries can differ in what the line
        # is nested in, and one leak then read as two identical findings, review K)
        groups.add("leak", "warning", ev.kernel, (line_call_key(src), ev.resource), src,
                   cells[a], rows[a], msg, LEAK_HINT, detail=detail)
    return groups.findings()
