"""Per-kernel counts: events, buffers and bytes per memory space, barriers."""

from __future__ import annotations

import dataclasses

from ..model import MEMORY_SPACES, KernelInfo
from ..store import RESOURCE_CODE, EventTable
from .frame import CREATE


@dataclasses.dataclass(frozen=True)
class KernelStats:
    kernel: int
    events: int
    blocks: int
    threads: int
    buffers: dict[str, int]  # memory space -> buffers created
    bytes: dict[str, int]  # memory space -> bytes created
    barriers: int
    cluster_barriers: int
    no_grid: bool = False  # the kernel's one block has no grid coordinates
    # the run stopped in this kernel (a failure, a deadlock, an interrupt): `blocks`
    # counts only the blocks that ran before it stopped
    cut_short: bool = False


def kernel_stats(table: EventTable, kernels: list[KernelInfo],
                 failed: set[int] | frozenset = frozenset()) -> list[KernelStats]:
    """Counts per kernel; `failed`: the kernels that did not end normally
    (`context.failed_kernels`)."""
    out = []
    for k in kernels:
        rows = table.kernel_rows(k.index)
        c = {name: col[rows] for name, col in table.columns.items()
             if name in ("op", "resource", "memory_space", "nbytes", "device", "block")}
        create = c["op"] == CREATE
        buf = create & (c["resource"] == RESOURCE_CODE["buffer"])
        buffers, nbytes = {}, {}
        for i, space in enumerate(MEMORY_SPACES):
            s = buf & (c["memory_space"] == i)
            if s.any():
                buffers[space] = int(s.sum())
                nbytes[space] = int(c["nbytes"][s].sum())
        inb = c["block"] >= 0  # in a block (`frame.in_block_mask`): not kernel-level
        cells = set(zip(c["device"][inb].tolist(), c["block"][inb].tolist()))
        no_grid = bool(cells) and all(table.blocks[b] == () for _, b in cells)
        out.append(KernelStats(
            kernel=k.index, events=len(rows), blocks=len(cells),
            threads=k.threads_per_block,
            buffers=buffers, bytes=nbytes,
            barriers=int((create & (c["resource"] == RESOURCE_CODE["barrier"])).sum()),
            cluster_barriers=int(
                (create & (c["resource"] == RESOURCE_CODE["cluster_barrier"])).sum()),
            no_grid=no_grid,
            cut_short=k.index in failed,
        ))
    return out
