"""Allocations requested inside warp-level code, which interpret mode cannot simulate.

In a `pl.core_map` over `plgpu.WarpMesh` every warp runs the body, and interpret mode
makes each warp's allocation request with its warpgroup's key and ref count: the warps
of a warpgroup join one buffer (or barrier), one warp's free pulls it from under the
others, and which warp creates, joins or frees it changes from run to run. What follows
(a `KeyError` for a freed key, an out-of-bounds access, merged requests that disagree, a
wait that never ends, a leak) is a consequence, and varies; the allocation line does
not. Finds `warp_allocation`, pinned to the warpgroups (cells) whose warps made such
requests.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..model import Finding, SourceLocation
from .context import AnalysisContext, and_list, cell_key, line_key, sorted_cells
from .frame import cell, placed_mask, request_mask

# the other branches' starts named with the root (a `lax.switch` may have many)
MAX_STARTS_RELATED = 8
WARP_CODE = "warp-level code (a `pl.core_map` over `plgpu.WarpMesh`)"
WARP_HINT = (
    "Allocate at warpgroup level: move the `pl.run_scoped` (or the barrier allocation) out "
    "of the `plgpu.WarpMesh` `core_map` and use its ref inside it; every warp can read and "
    "write a buffer its warpgroup allocated.")


def analyse_warp_allocations(ctx: AnalysisContext) -> list[Finding]:
    """One `warp_allocation` error per kernel whose warps requested a block's buffer or
    barrier (kernel-level operands, which every thread joins, aside): one mistake, one
    fix. It points at the earliest such request in a warp's own sequence (of those, the
    first in the source, then by block in grid order), never at the line a warp or block
    got to first: a cluster's blocks run at once, and a failure in one can stop the
    others before they reach a line; and a warp's later requests may not be made before
    the failure they cause stops it. The kernel's other such lines are `related`."""
    table = ctx.table
    c = table.columns
    if not bool((c["warp"] >= 0).any()):
        return []
    rows = np.flatnonzero(request_mask(table) & placed_mask(table) & (c["warp"] >= 0))
    by_kernel: dict[int, list[int]] = {}
    for r in rows.tolist():
        by_kernel.setdefault(int(c["kernel"][r]), []).append(r)

    seq = c["thread_seq"]  # each event's position in its warp's own sequence

    def place(r: int) -> tuple:  # its position, the line (none last), (device, block)
        src = table.source_of(r)
        return int(seq[r]), src is None, line_key(src), cell_key(cell(table, r))[:2]

    out = []
    for kernel, rs in by_kernel.items():
        first = min(rs, key=place)
        src = table.source_of(first)
        parting = _parting_branch(table, [r for r in rs if seq[r] == seq[first]])
        if parting is not None:  # where the branches start, whichever warps got there
            branch, starts = parting
            src = dataclasses.replace(starts[0], branch=branch)
            message = _message(_branches_open(branch, starts), None)
        else:
            at_line = [r for r in rs if table.source_of(r) == src]
            whats = " and ".join(sorted({ctx.what(r) for r in at_line}))
            message = _message(f"{whats} allocated inside {WARP_CODE}",
                               sorted({int(c["initial_ref_count"][r]) for r in at_line}))
        seen = {(src.file, src.line)} if src is not None else set()
        others = []  # each other line once: the other branches' starts, then as recorded
        for s in [*(parting[1][:MAX_STARTS_RELATED] if parting else ()),
                  *sorted({s for s in map(table.source_of, rs) if s is not None}, key=line_key)]:
            if (s.file, s.line) not in seen:
                seen.add((s.file, s.line))
                others.append(s)
        others.sort(key=line_key)
        out.append(Finding(
            kind="warp_allocation", severity="error", message=message,
            cells=sorted_cells(cell(table, r) for r in rs), events=sorted(rs), source=src,
            related=others, suggestion=_hint(src), kernel=kernel))
    return out


def _hint(src: SourceLocation | None) -> str:
    """`WARP_HINT`, or, for a scope a helper opens (`src.via`: the call in the warp-level
    body that led to it), the same advice for that call."""
    via = None if src is None else src.via
    if via is None:
        return WARP_HINT
    return (f"Allocate at warpgroup level: this scope is opened by a helper called at "
            f"{via.label(src)}, inside the `plgpu.WarpMesh` `core_map`: move that call out "
            f"of the `plgpu.WarpMesh` `core_map`, or open the scope there and pass its ref "
            f"in; every warp can read and write a buffer its warpgroup allocated.")


def _parting_branch(table, firsts: list[int]):
    """(the branch, where each of its branches opens its first scope, first in the source
    first) when the warps' first requests (`firsts`) open the first scopes of the
    branches of one `lax.cond` / `lax.switch` that start in different places; else None.
    Read from the source when recorded (the branch's `starts`), as a warp that would take
    the other branch may not have made its request before the failure stopped it."""
    for r in firsts:
        s = table.source_of(r)
        b = None if s is None else s.branch
        if b is None or b.kind != "branch":
            continue
        starts = b.starts or ()
        lines = {(x.file, x.line) for x in starts}
        if len(lines) > 1 and (s.file, s.line) in lines:
            return b, sorted(starts, key=line_key)
    return None


def _branches_open(branch: SourceLocation, starts: list[SourceLocation]) -> str:
    code = branch.code or ""
    call = next((f"`lax.{n}`" for n in ("cond", "switch") if f"{n}(" in code), "branch")
    lines = sorted({s.line for s in starts})
    at = and_list(lines)
    return (f"each branch of the {call} at line {branch.line} opens a scope inside "
            f"{WARP_CODE}, first at lines {at}")


def _message(head: str, ref_counts: list[int] | None) -> str:
    """What interpret mode does with a warp's allocation request: true whether one warp of
    a warpgroup or several made it (which of them got to it before a failure stopped the
    kernel varies from run to run, so the message does not count them)."""
    rc = f" ({', '.join(map(str, ref_counts))})" if ref_counts else ""
    return (f"{head}: interpret mode makes a warp's request with its warpgroup's "
            f"key and ref count{rc}, as if the warp were its whole warpgroup (warps of "
            f"one warpgroup that make it join one allocation, and one warp's free pulls it "
            f"from under the others); it does not simulate a warp-level allocation as a "
            f"GPU would, so what the interpreter raises, and the output, cannot be trusted "
            f"and vary from run to run")
