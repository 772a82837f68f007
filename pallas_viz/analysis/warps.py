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

import numpy as np

from ..model import Finding
from .context import AnalysisContext, cell_key, line_key, sorted_cells
from .frame import cell, placed_mask, request_mask

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
        at_line = [r for r in rs if table.source_of(r) == src]
        whats = sorted({ctx.what(r) for r in at_line})
        ref_counts = sorted({int(c["initial_ref_count"][r]) for r in at_line})
        others = sorted({s for s in (table.source_of(r) for r in rs)
                         if s is not None and s != src},
                        key=line_key)
        out.append(Finding(
            kind="warp_allocation", severity="error", message=_message(whats, ref_counts),
            cells=sorted_cells(cell(table, r) for r in rs), events=sorted(rs), source=src,
            related=others, suggestion=WARP_HINT, kernel=kernel))
    return out


def _message(whats: list[str], ref_counts: list[int]) -> str:
    """What interpret mode does with a warp's allocation request: true whether one warp of
    a warpgroup or several made it (which of them got to it before a failure stopped the
    kernel varies from run to run, so the message does not count them)."""
    rc = ", ".join(map(str, ref_counts))
    return (f"{' and '.join(whats)} allocated inside warp-level code (a `pl.core_map` over "
            f"`plgpu.WarpMesh`): interpret mode makes a warp's request with its warpgroup's "
            f"key and ref count ({rc}), as if the warp were its whole warpgroup (warps of "
            f"one warpgroup that make it join one allocation, and one warp's free pulls it "
            f"from under the others); it does not simulate a warp-level allocation as a "
            f"GPU would, so what the interpreter raises, and the output, cannot be trusted "
            f"and vary from run to run")
