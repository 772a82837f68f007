"""Per-block fingerprints: which blocks' threads made identical request sequences.

Two blocks are *alike* when every thread of one made the same requests (request or end,
resource,
memory space, shape, dtype, bytes, line, warp, collective or not), in the same order, as
the same thread of the other. Buffer ids, sequence numbers and allocation ids are left out:
they differ from block to block by construction. Views fold runs of alike blocks into one
row; the fingerprint is an analysis result, computed once over the columns (no Python loop
per event).
"""

from __future__ import annotations

import numpy as np

from ..store import EventTable

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)
_K1 = np.uint64(0x9E3779B97F4A7C15)
_K2 = np.uint64(0xBF58476D1CE4E5B9)
_K3 = np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser over uint64 arrays (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * _K2
        x = x ^ (x >> np.uint64(27))
        x = x * _K3
        return x ^ (x >> np.uint64(31))


def event_signature_hash(table: EventTable) -> np.ndarray:
    """One uint64 per event from what makes two requests "the same" across blocks."""
    c = table.columns
    h = np.zeros(len(table), np.uint64)
    # which thread creates a collective buffer and which joins it is a race: both request
    op = c["op"].astype(np.int64)
    kind = np.where(op <= 1, 0, np.where(op <= 3, 1, 2))
    with np.errstate(over="ignore"):
        h = _mix(h * _K1 + kind.astype(np.uint64))
        for name in ("resource", "memory_space", "shape", "dtype", "nbytes", "source",
                     "warp"):
            h = _mix(h * _K1 + c[name].astype(np.int64).astype(np.uint64))
        h = _mix(h * _K1 + (c["initial_ref_count"] > 1).astype(np.uint64))
    return h


def block_fingerprints(table: EventTable) -> dict[tuple[int, int, int], int]:
    """(kernel, device, block index) -> fingerprint class (small int; equal = alike).

    Kernel-level requests (block -1) are left out. Class ids are numbered in order of
    first appearance (by kernel, device, block index).
    """
    c = table.columns
    inb = np.flatnonzero(c["block"] >= 0)
    if len(inb) == 0:
        return {}
    h = event_signature_hash(table)[inb]
    kernel = c["kernel"][inb].astype(np.int64)
    device = c["device"][inb].astype(np.int64)
    block = c["block"][inb].astype(np.int64)
    thread = c["thread"][inb].astype(np.int64)
    order = np.lexsort((inb, thread, block, device, kernel))
    kernel, device, block, thread, h = (a[order] for a in (kernel, device, block, thread, h))
    # position of each event within its (kernel, device, block, thread) sequence
    key = np.stack([kernel, device, block, thread], axis=1)
    new = np.r_[True, np.any(key[1:] != key[:-1], axis=1)]
    starts = np.flatnonzero(new)
    group = np.cumsum(new) - 1
    pos = np.arange(len(h)) - starts[group]
    with np.errstate(over="ignore"):
        # a position-keyed sum: order matters, no per-sequence loop
        per_event = _mix(h + _mix(pos.astype(np.uint64) + np.uint64(1)))
        seq_hash = np.add.reduceat(per_event, starts)
        lengths = np.diff(np.r_[starts, len(h)]).astype(np.uint64)
        seq_hash = _mix(seq_hash ^ (lengths * _K2))
        th = thread[starts].astype(np.uint64)
        thread_term = _mix(seq_hash + _mix(th + np.uint64(7)))
    bkey = key[starts][:, :3]
    bnew = np.r_[True, np.any(bkey[1:] != bkey[:-1], axis=1)]
    bstarts = np.flatnonzero(bnew)
    with np.errstate(over="ignore"):
        block_hash = np.add.reduceat(thread_term, bstarts)
        nthreads = np.diff(np.r_[bstarts, len(thread_term)]).astype(np.uint64)
        block_hash = _mix(block_hash ^ (nthreads * _K3))
    _, first, inverse = np.unique(block_hash, return_index=True, return_inverse=True)
    # class ids in order of first appearance
    rank = np.empty(len(first), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    classes = rank[inverse.reshape(-1)]
    out = {}
    for (k, d, b), cls in zip(bkey[bstarts].tolist(), classes.tolist()):
        out[(k, d, b)] = int(cls)
    return out
