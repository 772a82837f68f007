"""The cells of a root cause in a kernel cut short: where its mistake is, the same every run.

A root about the threads' requests (a warp allocation, a partial collective, a mismatch,
a divergence) is lit where the run recorded those requests. When a failure, a deadlock or
an interrupt cuts the kernel short, that depends on how far each thread had got, which
varies from run to run; `settled` lights the places that run the same code at once.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from ..cells import cluster_dims
from ..model import Finding
from .collective import CLUSTER_HINT
from .context import AnalysisContext, cell_key
from .sequence import _signatures, thread_sequences


def settled(ctx: AnalysisContext, f: Finding) -> Finding:
    """`f` lit where its mistake is, not where a failure let threads get to it first.

    A root about the threads' requests (a warp allocation, a partial collective, a
    mismatch, a divergence) shows where the run recorded them. In a kernel cut short (a
    failure, a deadlock, an interrupt) that varies from run to run: a cluster's blocks,
    the devices and a block's threads run at once, so a failure in one stops the others
    at whichever point they had reached, before their requests at the line or after.
    Each block that ran at once with a block `f` lights (the blocks of its cluster; that
    cluster on every device, for the grid's first step, which every device starts, or
    a device that recorded that step) and was cut short too is lit with the threads `f`
    lights in its own blocks; for a warp allocation (made by every warpgroup that runs
    the warp-level code), with every thread of a block cut short that did not finish the
    kernel body without making such a request. Blocks and threads that finished the
    body without showing it stay out: what they did not do, they never do; so does a
    block whose threads' requests, as far as they got, are not those the same threads
    made in `f`'s blocks (they took other branches: not the same mistake). Grid steps
    run one after another: a later step the failure kept from running is not lit
    (nothing says the grid has it). A cluster barrier only some blocks of a cluster
    request names those blocks: it is left as it is."""
    kernel = f.kernel
    if (kernel is None or kernel not in ctx.unfinished
            or not 0 <= kernel < len(ctx.kernels) or f.suggestion == CLUSTER_HINT):
        return f
    info = ctx.kernels[kernel]
    shown = sorted({(d, b) for d, b, _ in f.cells if b is not None},
                   key=lambda p: cell_key((*p, 0)))
    if not shown:
        return f
    threads = sorted({t for _, b, t in f.cells if b is not None})
    exits = ctx.exits
    cells = set(f.cells)
    places = set(shown)
    steps = _Steps(ctx, kernel)
    warp = f.kind == "warp_allocation"
    seqs = None if warp else _block_sequences(ctx, kernel)
    for d, b in shown:
        step, blocks = steps.of(b)
        for dd in range(max(info.num_devices, d + 1)):
            if dd != d and not (all(x == 0 for x in step) or (dd, step) in steps.ran):
                continue
            for bb in blocks:
                if ((dd, bb) in places or exits.block_done(kernel, dd, bb)
                        or not (warp or _same_so_far(seqs, (dd, bb), shown))):
                    continue
                places.add((dd, bb))
                cells.update((dd, bb, t) for t in threads)
    if warp:
        for d, b in places:
            if not exits.block_done(kernel, d, b):
                cells.update((d, b, t) for t in range(info.threads_per_block)
                             if not exits.done(kernel, d, b, t))
    if cells == set(f.cells):
        return f
    return dataclasses.replace(f, cells=sorted(cells, key=cell_key))


def _block_sequences(ctx: AnalysisContext, kernel: int) -> dict:
    """(device, block) -> {thread: its requests in order, each as its request id (what
    the sequence analysis compares: `sequence._signatures`)}, of `kernel`'s blocks."""
    sig = _signatures(ctx.table)
    return {(d, ctx.table.block(b)): {t: tuple(sig[rows].tolist())
                                      for t, rows in by_thread.items()}
            for (k, d, b), by_thread in thread_sequences(ctx.table).items() if k == kernel}


def _same_so_far(seqs: dict, peer: tuple, shown: list) -> bool:
    """Whether each thread of block `peer` made what the same thread made in a block of
    `shown`, as far as either got: the same code, cut short at another point (not a
    block whose threads took other branches)."""
    for t, mine in seqs.get(peer, {}).items():
        theirs = [s[t] for p in shown if t in (s := seqs.get(p, {}))] or [()]
        if not any(mine[:len(x)] == x[:len(mine)] for x in theirs):
            return False
    return True


class _Steps:
    """The grid steps of a kernel: `of(block)` is (its step: the block's grid
    coordinates, the blocks of its cluster); `ran`, the (device, step) pairs the trace
    recorded a block of. A block's within-cluster coordinates are its trailing ones, as
    many as the kernel's blocks tell (`cells.cluster_dims`), or its only one (a cluster
    without a grid); when they do not tell, a block is a step and a cluster of its own."""

    def __init__(self, ctx: AnalysisContext, kernel: int):
        table = ctx.table
        c = table.columns
        rows = table.kernel_rows(kernel)
        pairs = (np.unique(np.stack([c["device"][rows], c["block"][rows]], axis=1), axis=0)
                 if len(rows) else np.zeros((0, 2), dtype=np.int64))
        recorded = {(d, tuple(table.block(b))) for d, b in pairs.tolist() if b >= 0}
        bpc = ctx.kernels[kernel].blocks_per_cluster
        blocks = {b for _, b in recorded}
        ndim = min(map(len, blocks), default=0)
        n = 0
        if bpc > 1 and ndim and all(len(b) == ndim for b in blocks):
            n = cluster_dims(blocks, bpc) or (1 if ndim == 1 else 0)
        self.inner = ndim - n
        self.extents = ([] if not n else [bpc] if n == 1 else
                        [max(b[i] for b in blocks) + 1 for i in range(self.inner, ndim)])
        self.ran = {(d, self.of(b)[0]) for d, b in recorded}

    def of(self, block: tuple) -> tuple[tuple, list[tuple]]:
        block = tuple(block)
        if not self.extents or len(block) != self.inner + len(self.extents):
            return block, [block]
        step = block[:self.inner]
        return step, [step + x for x in itertools.product(*map(range, self.extents))]
