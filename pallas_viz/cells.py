"""Human descriptions of sets of (device, block, thread) cells."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from .model import Cell


def ranges(values: Iterable[int]) -> str:
    """`[0,1,2,3,5]` -> "0..3, 5"."""
    vs = sorted(set(values))
    out = []
    for _, grp in itertools.groupby(enumerate(vs), lambda p: p[1] - p[0]):
        g = [v for _, v in grp]
        out.append(str(g[0]) if len(g) == 1 else f"{g[0]}..{g[-1]}")
    return ", ".join(out)


def block_label(block: tuple[int, ...] | None) -> str:
    """"(3, 0)", "(no grid)" for the one block of a kernel without a grid, or
    "kernel level" for the requests the interpreter makes for a whole device."""
    if block is None:
        return "kernel level"
    block = tuple(block)
    if block == ():
        return "(no grid)"
    return "(" + ", ".join(str(b) for b in block) + ")"


def cluster_dims(blocks: Iterable[tuple[int, ...]], blocks_per_cluster: int) -> int:
    """How many trailing block coordinates are within-cluster coordinates (0 when the
    blocks seen do not tell: a block per cluster, or too few blocks seen)."""
    blocks = [tuple(b) for b in blocks]
    if blocks_per_cluster <= 1 or not blocks:
        return 0
    ndim = min(len(b) for b in blocks)
    extents = [max(b[i] for b in blocks) + 1 for i in range(ndim)]
    prod = 1
    for k in range(1, ndim + 1):
        prod *= extents[ndim - k]
        if prod == blocks_per_cluster:
            return k
    return 0


def describe_blocks(blocks: set) -> str:
    """A compact description of a set of block coordinates."""
    if blocks == {None}:
        return "kernel level (operands)"
    if blocks == {()}:
        return "block (no grid)"
    blocks = {b for b in blocks if b is not None} or blocks
    dims = {len(b) for b in blocks}
    if len(dims) == 1:
        n = dims.pop()
        per_dim = [sorted({b[i] for b in blocks}) for i in range(n)]
        product = 1
        for p in per_dim:
            product *= len(p)
        if product == len(blocks):
            inner = ", ".join(ranges(p) if len(p) > 1 else str(p[0]) for p in per_dim)
            word = "block" if len(blocks) == 1 else "blocks"
            return f"{word} ({inner})"
    shown = sorted(blocks)[:6]
    more = f" and {len(blocks) - 6} more" if len(blocks) > 6 else ""
    return "blocks " + ", ".join(str(b) for b in shown) + more


def describe_cells(cells: Iterable[Cell], thread_word: str = "thread") -> str:
    """E.g. "blocks (0..7, 0), thread 1; block (3, 0), threads 0, 1" (or "w 1")."""
    cells = list(cells)
    if not cells:
        return "no cells"
    devices = {d for d, _, _ in cells}
    parts = []
    for dev in sorted(devices):
        by_thread: dict[int, set] = {}
        for d, b, t in cells:
            if d == dev:
                by_thread.setdefault(t, set()).add(None if b is None else tuple(b))
        by_blocks: dict[frozenset, list[int]] = {}
        for t, bs in by_thread.items():
            by_blocks.setdefault(frozenset(bs), []).append(t)
        prefix = f"device {dev}: " if len(devices) > 1 or dev != 0 else ""
        for bs, threads in sorted(by_blocks.items(), key=lambda kv: min(kv[1])):
            tw = thread_word if thread_word != "thread" else (
                "thread" if len(threads) == 1 else "threads")
            parts.append(f"{prefix}{describe_blocks(set(bs))}, {tw} {ranges(threads)}")
    return "; ".join(parts)
