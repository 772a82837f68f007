"""Memory budget: the peak SMEM, TMEM and REGS each block holds, against a device's limits.

For every block of every kernel, the live amount of each memory space is followed event
by event: a buffer lifetime (the `allocation` column) counts once however many threads
share it (joins add nothing), from its `create` to the end of its scope: the first
release or free by any of its threads (`span="scope"`, the default; `span="buffer"` counts
to the `free`, see `block_budgets` for why that overcounts). The peak, the event where
it is first reached, and the buffers live there make a `BlockBudget`.

How each allocation is counted (see `pallas_viz.devices` for the sources):

- SMEM buffer: its bytes rounded up to `device.smem_granularity` (1024, Mosaic GPU's
  alignment of every scoped SMEM buffer); a barrier or cluster barrier: an 8-byte
  mbarrier in SMEM; a kernel with TMEM also holds a 4-byte SMEM slot for the TMEM
  address (`SpacePeak.overhead`). That is the sum Mosaic GPU compares with the
  device's 227 KiB when it compiles the kernel.
- TMEM buffer: columns of 128 lanes x 32 bits, ceil(bytes / 512), each buffer rounded up
  to 8 columns (Mosaic GPU sizes a kernel's TMEM in 128 x 8 chunks per ref). Narrow dtypes
  are counted packed (a (128, N) float16 takes N/2 columns); one allocated with
  `packed=False` really takes N, and the trace does not say which. `SpacePeak.allocated`
  is what `tcgen05.alloc` takes: the next power of two, at least 32.
- REGS (wgmma accumulators): their bytes, summed over the block's threads.

Kernel-level requests (column `block` == -1: operands and `pallas_call` scratch the
interpreter allocates once per device) are not made by a block. GMEM operands are no
part of a block's budget; kernel-level SMEM/TMEM (the blocks and scratch of a
`pallas_call`) is what each block of the kernel holds on a GPU, so it is added to every
block of its kernel for the whole run (a kernel with no block-level events gets one
`BlockBudget` with `block=None`, standing for each of its blocks).

The peak is the peak of this run: a branch not taken allocates nothing here, while
Mosaic GPU sizes SMEM for the largest branch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from ..devices import Device, get_device
from ..model import MEMORY_SPACES, RESOURCES, Cell, Finding, KernelInfo, SourceLocation
from ..store import OP_CODE, RESOURCE_CODE, SMALL_TABLE, SPACE_CODE, EventTable
from .context import sorted_cells
from .frame import group_starts, request_mask

SPACES = ("SMEM", "TMEM", "REGS")
_SMEM, _TMEM, _REGS = range(3)
_CREATE, _RELEASE, _FREE = OP_CODE["create"], OP_CODE["release"], OP_CODE["free"]
_JOIN = OP_CODE["join"]
_NEVER = np.iinfo(np.int64).max
# A peak above this fraction of the limit is a warning (above the limit: an error).
WARN_FRACTION = 0.9

SMEM_HINT = (
    "Mosaic GPU will refuse to compile this kernel (\"kernel exceeds available shared "
    "memory\"). Hold less in SMEM at once: fewer pipeline stages (max_concurrent_steps), "
    "smaller tiles (tile_m / tile_n / tile_k, epilogue tiles), fewer output slots, or end "
    "a run_scoped before the next one starts. Every SMEM buffer is rounded up to 1024 "
    "bytes.")
SMEM_WARN_HINT = (
    "This fits, with little room: one more pipeline stage or a larger tile will not. "
    "Fewer stages or smaller tiles leave headroom (and more blocks per SM).")
TMEM_HINT = (
    "A block can allocate at most {limit} TMEM columns (128 lanes x 32 bit each), in "
    "powers of two from 32. Use a smaller tile_n, fewer accumulator buffers, or pack "
    "16-bit data (packed=True).")
TMEM_WARN_HINT = (
    "This fits in TMEM with little room: a larger tile_n or one more accumulator buffer "
    "will not. TMEM is allocated in powers of two, so this block takes {allocated} "
    "columns of the SM's {limit}.")
NO_TMEM_HINT = (
    "{device} ({arch}) has no tensor memory: TMEM and tcgen05 MMA are sm_100 features "
    "(b200). Keep the accumulator in registers (plgpu.ACC with wgmma) on this GPU.")


@dataclasses.dataclass(frozen=True)
class LiveBuffer:
    """One allocation live at a peak."""

    event: int  # the row of its `create` event
    allocation: int
    memory_space: str  # "SMEM", "TMEM" or "REGS" (barriers: "SMEM")
    resource: str  # "buffer", "barrier" or "cluster_barrier"
    shape: tuple[int, ...] | None
    dtype: str | None
    nbytes: int  # as requested
    charge: int  # what it counts for: bytes (SMEM, REGS), columns (TMEM)
    source: SourceLocation | None
    kernel_level: bool = False

    def describe(self, count: int = 1) -> str:
        """`(2, 256, 64) float16 64.0 KiB at f.py:141:3`; with `count`, `2 x ...`."""
        if self.resource != "buffer":
            what = self.resource.replace("_", " ") + ("s" if count > 1 else "")
            size = format_bytes(self.charge * count)
            many = f"{count} " if count > 1 else ""
        else:
            what = f"{self.shape} {self.dtype}"
            many = f"{count} x " if count > 1 else ""
            size = self.size_text()
            if self.memory_space == "TMEM" and self.narrow:
                size += " if packed (twice that with packed=False)"
        # (a block's request with no line of the user's: JAX allocated it for the kernel)
        where = (f" at {self.source.label()}" if self.source is not None
                 else "" if self.kernel_level else " (a scratch operand)")
        level = " (kernel-level)" if self.kernel_level else ""
        return f"{many}{what} {size}{where}{level}"

    @property
    def narrow(self) -> bool:
        """A dtype narrower than 32 bits (TMEM: counted packed)."""
        elems = int(np.prod(self.shape)) if self.shape else 0
        return bool(elems) and self.nbytes < 4 * elems

    def size_text(self) -> str:
        """What it counts for: `64.0 KiB`, `113.5 KiB (114.0 KiB aligned)`, `8 B` (a
        barrier), `256 columns` (TMEM)."""
        if self.resource == "buffer" and self.memory_space == "TMEM":
            return f"{self.charge} columns"
        if self.resource == "buffer" and self.charge != self.nbytes:
            return f"{format_bytes(self.nbytes)} ({format_bytes(self.charge)} aligned)"
        return format_bytes(self.charge)

    def _same(self) -> tuple:
        return (self.memory_space, self.resource, self.shape, self.dtype, self.nbytes,
                self.charge, self.source, self.kernel_level)


def describe_live(live: Sequence[LiveBuffer]) -> list[str]:
    """One entry per kind of live allocation (equal ones counted), largest first."""
    counts: dict[tuple, list[LiveBuffer]] = {}
    for x in live:
        counts.setdefault(x._same(), []).append(x)
    groups = sorted(counts.values(), key=lambda g: (-g[0].charge * len(g), g[0].event))
    return [g[0].describe(len(g)) for g in groups]


@dataclasses.dataclass(frozen=True)
class SpacePeak:
    """The peak of one memory space in one block."""

    space: str
    peak: int  # bytes (SMEM, REGS) or columns (TMEM)
    allocated: int  # SMEM: peak in whole 128-byte units; TMEM: tcgen05.alloc's columns
    limit: int  # the device's per-block limit, in the same unit (0: none on this GPU)
    step: int  # event index where the peak is first reached (-1: nothing allocated)
    live: tuple[LiveBuffer, ...]  # largest first
    overhead: int = 0  # counted but tied to no buffer (SMEM: the TMEM address slot)

    @property
    def unit(self) -> str:
        return "columns" if self.space == "TMEM" else "bytes"

    @property
    def fraction(self) -> float:
        if self.limit <= 0:
            return float("inf") if self.peak > 0 else 0.0
        return self.peak / self.limit

    @property
    def over(self) -> bool:
        return self.peak > self.limit

    @property
    def peak_bytes(self) -> int:
        return self.peak * 128 * 4 if self.space == "TMEM" else self.peak


@dataclasses.dataclass(frozen=True)
class BlockBudget:
    """Peak SMEM, TMEM and REGS of one block over a kernel run."""

    kernel: int
    device: int
    block: tuple[int, ...] | None  # None: every block (kernel-level allocations only)
    cells: tuple[Cell, ...]
    smem: SpacePeak
    tmem: SpacePeak
    regs: SpacePeak
    target: Device

    def space(self, name: str) -> SpacePeak:
        return {"SMEM": self.smem, "TMEM": self.tmem, "REGS": self.regs}[name]


@dataclasses.dataclass(frozen=True)
class KernelBudget:
    """The block budgets of one kernel run."""

    kernel: int
    blocks: tuple[BlockBudget, ...]
    target: Device

    def worst(self, space: str = "SMEM") -> BlockBudget | None:
        """The block with the highest peak of `space` (the first one on ties)."""
        if not self.blocks:
            return None
        return max(self.blocks, key=lambda b: b.space(space).peak)


def kernel_budgets(budgets: Sequence[BlockBudget]) -> list[KernelBudget]:
    """`block_budgets`' result, one `KernelBudget` per kernel (in kernel order)."""
    by_kernel: dict[int, list[BlockBudget]] = {}
    for b in budgets:
        by_kernel.setdefault(b.kernel, []).append(b)
    return [KernelBudget(k, tuple(bs), bs[0].target) for k, bs in sorted(by_kernel.items())]


# -- computing the budgets

def _charges(table: EventTable, rows: np.ndarray, cls: np.ndarray, target: Device,
             own: bool = False) -> np.ndarray:
    """What each create row counts for, in its space's unit. A buffer into which threads
    merged requests of different sizes (a bug the collective analysis reports) counts as
    the largest of them, whichever thread happened to create it; with `own`, each request
    row counts what it asked for."""
    c = table.columns
    nbytes = (c["nbytes"].astype(np.int64) if own else _merged_nbytes(table))[rows]
    out = nbytes.copy()
    is_buf = c["resource"][rows] == RESOURCE_CODE["buffer"]
    smem = cls == _SMEM
    g = target.smem_granularity
    out[smem & is_buf] = -(-nbytes[smem & is_buf] // g) * g
    out[smem & ~is_buf] = target.barrier_bytes
    tmem = cls == _TMEM
    lane_bytes = target.tmem_lanes * 4  # one column: 128 lanes x 32 bit
    a = target.tmem_column_alignment
    cols = -(-nbytes[tmem] // lane_bytes)
    out[tmem] = -(-cols // a) * a
    return out


def _merged_nbytes(table: EventTable) -> np.ndarray:
    """Per row, its bytes; for a create, the most any request merged into its allocation
    asked for (its own and the joins'). Computed once per table."""
    cached = table.__dict__.get("_merged_nbytes")
    if cached is not None:
        return cached
    c = table.columns
    out = c["nbytes"].astype(np.int64)
    alloc, op = c["allocation"], c["op"]
    joins = np.flatnonzero((op == OP_CODE["join"]) & (alloc >= 0))
    if len(joins):
        most = np.zeros(int(alloc.max()) + 1, dtype=np.int64)
        np.maximum.at(most, alloc[joins], out[joins])
        creates = np.flatnonzero((op == _CREATE) & (alloc >= 0))
        out[creates] = np.maximum(out[creates], most[alloc[creates]])
    table.__dict__["_merged_nbytes"] = out
    return out


def _space_class(table: EventTable) -> np.ndarray:
    """Per row: 0 SMEM (buffers and barriers), 1 TMEM, 2 REGS, -1 not budgeted (GMEM)."""
    c = table.columns
    res, space = c["resource"], c["memory_space"]
    is_buf = res == RESOURCE_CODE["buffer"]
    cls = np.full(len(table), -1, dtype=np.int8)
    cls[is_buf & (space == SPACE_CODE["SMEM"])] = _SMEM
    cls[is_buf & (space == SPACE_CODE["TMEM"])] = _TMEM
    cls[is_buf & (space == SPACE_CODE["REGS"])] = _REGS
    cls[~is_buf] = _SMEM  # barriers and cluster barriers are mbarriers in SMEM
    return cls


def block_budgets(table: EventTable, kernels: Sequence[KernelInfo],
                  device: str | Device = "h100", span: str = "scope") -> list[BlockBudget]:
    """Peak SMEM / TMEM / REGS of every block of `kernels`, counted for `device`.

    One `BlockBudget` per (kernel, device, block) that made any request, sorted by
    kernel, device, block. Vectorised: a few sorts over the budgeted events.

    `span` says when a lifetime stops counting: "scope" (default) at the first release
    or free of any of its threads, "buffer" at its free. A collective buffer is freed
    by the last thread to leave its `run_scoped`; the interpreter runs the threads of a
    block with no order between them, so a fast thread may already be in the *next*
    scope while a slow one still holds the previous: with "buffer", two scopes that
    follow each other in the program overlap and are counted together, though Mosaic GPU
    gives them the same SMEM. A thread leaves a scope only after entering every scope
    nested in it, so with "scope" nested scopes always overlap and consecutive ones never:
    the peak is the largest stack of scopes, the way Mosaic GPU allocates them, whatever
    the thread interleaving.
    """
    if span not in ("scope", "buffer"):
        raise ValueError(f"span must be 'scope' or 'buffer', not {span!r}")
    target = get_device(device)
    c = table.columns
    n = len(table)
    wanted = np.array(sorted({k.index for k in kernels}), dtype=np.int64)
    kern, dev, blk = c["kernel"].astype(np.int64), c["device"].astype(np.int64), c["block"]
    blk = blk.astype(np.int64)
    alloc = c["allocation"].astype(np.int64)
    op = c["op"]
    if not n:
        in_kernels = np.zeros(0, dtype=bool)
    elif len(wanted) == 1:  # the usual case: one comparison, not np.isin's set-up
        in_kernels = kern == wanted[0]
    else:
        in_kernels = np.isin(kern, wanted)
    cls = _space_class(table) if n else np.zeros(0, dtype=np.int8)
    budgeted = in_kernels & (cls >= 0) & (alloc >= 0)

    # -- the blocks and their cells
    inb = np.flatnonzero(in_kernels & (blk >= 0))
    order = inb[np.lexsort((c["thread"][inb], blk[inb], dev[inb], kern[inb]))]
    bstart = group_starts(kern[order], dev[order], blk[order])
    cstart = group_starts(kern[order], dev[order], blk[order], c["thread"][order])
    block_keys = [(int(kern[r]), int(dev[r]), int(blk[r])) for r in order[bstart]]
    cells: dict[tuple, list[Cell]] = {k: [] for k in block_keys}
    for r in order[cstart].tolist():
        t = int(c["thread"][r])
        if t >= 0:
            key = (int(kern[r]), int(dev[r]), int(blk[r]))
            cells[key].append((key[1], table.blocks[key[2]], t))

    # -- lifetimes made in a block: +charge at create, -charge at free, per block
    creates = np.flatnonzero(budgeted & (op == _CREATE) & (blk >= 0))
    charge_c = _charges(table, creates, cls[creates], target)
    n_alloc = int(alloc.max()) + 1 if n else 0
    owner = np.full(n_alloc, -1, dtype=np.int64)  # create row of each lifetime
    owner[alloc[creates]] = creates
    charge_of = np.zeros(n_alloc, dtype=np.int64)
    charge_of[alloc[creates]] = charge_c
    # where each lifetime stops counting: its free ("buffer"), or the first thread's
    # release ("scope": the end of the run_scoped in program order, see the docstring)
    stop_ops = (op == _FREE) | ((op == _RELEASE) if span == "scope" else False)
    ends = np.flatnonzero(budgeted & stop_ops)
    ends = ends[owner[alloc[ends]] >= 0]
    ends = ends[np.unique(alloc[ends], return_index=True)[1]]  # the first one per lifetime
    end_row = np.full(n_alloc, _NEVER, dtype=np.int64)
    end_row[alloc[ends]] = ends
    own = owner[alloc[ends]]  # an end counts in the block that created the lifetime
    rows = np.concatenate([creates, ends])
    okey = np.concatenate([creates, own])  # the owning create row
    delta = np.concatenate([charge_c, -charge_of[alloc[ends]]])
    gk, gd, gb, gc = kern[okey], dev[okey], blk[okey], cls[okey].astype(np.int64)
    order = np.lexsort((rows, gc, gb, gd, gk))
    rows, okey, delta = rows[order], okey[order], delta[order]
    gk, gd, gb, gc = gk[order], gd[order], gb[order], gc[order]
    starts = group_starts(gk, gd, gb, gc)
    peaks: dict[tuple, tuple[int, int, list[int]]] = {}
    if len(rows):
        lengths, live, peak = _running_peaks(delta, starts)
        group = np.repeat(np.arange(len(starts)), lengths)
        at_peak = np.flatnonzero(live == peak[group])
        first = at_peak[np.unique(group[at_peak], return_index=True)[1]]
        peak_row = rows[first]
        # live at the peak: created at or before it (in the group), ended after it
        is_create = rows == okey
        pos_ok = np.arange(len(rows)) <= first[group]
        alive = is_create & pos_ok & (end_row[alloc[rows]] > peak_row[group])
        alive_pos = np.flatnonzero(alive)
        split = np.searchsorted(alive_pos, starts)
        for g, s in enumerate(starts.tolist()):
            lo = split[g]
            hi = split[g + 1] if g + 1 < len(starts) else len(alive_pos)
            key = (int(gk[s]), int(gd[s]), int(gb[s]), int(gc[s]))
            peaks[key] = (int(peak[g]), int(peak_row[g]), rows[alive_pos[lo:hi]].tolist())

    own: set[tuple] = set()  # the peaks one thread's own requests make (`_thread_peaks`)
    for key, held in _thread_peaks(table, budgeted, kern, dev, blk, cls, target).items():
        if held[0] > peaks.get(key, (0,))[0]:
            peaks[key] = held
            own.add(key)

    # -- kernel-level SMEM / TMEM: held by every block of its kernel, all run long
    base_rows = np.flatnonzero(budgeted & (op == _CREATE) & (blk < 0))
    base_charge = _charges(table, base_rows, cls[base_rows], target)
    baseline: dict[tuple, list[tuple[int, int]]] = {}  # (kernel, device, cls) -> rows
    for r, ch in zip(base_rows.tolist(), base_charge.tolist()):
        baseline.setdefault((int(kern[r]), int(dev[r]), int(cls[r])), []).append((r, ch))
    # kernels with TMEM hold a 4-byte SMEM slot for its address
    tmem_kernels = set(kern[budgeted & (cls == _TMEM)].tolist())

    # kernels whose only budgeted allocations are kernel-level: one stand-in block
    blocks_of = {(k, d) for k, d, _ in block_keys}
    extra = sorted({(k, d) for k, d, _ in baseline} - blocks_of)
    charge_of[alloc[base_rows]] = base_charge
    need = np.unique(np.concatenate(
        [np.asarray(p[2], dtype=np.int64) for k, p in peaks.items() if k not in own]
        + [base_rows]))
    buffers = _live_buffers(table, need, charge_of[alloc[need]])
    mine = np.unique(np.concatenate(  # a thread's own requests: as each asked
        [np.zeros(0, dtype=np.int64)]
        + [np.asarray(peaks[k][2], dtype=np.int64) for k in own]))
    if len(mine):
        buffers.update(_live_buffers(table, mine, _charges(
            table, mine, cls[mine], target, own=True), own=True))

    def space_peak(k: int, d: int, b: int | None, ci: int) -> SpacePeak:
        peak, step, live_rows = peaks.get((k, d, b, ci), (0, -1, []))
        base = baseline.get((k, d, ci), [])
        overhead = target.tmem_address_bytes if ci == _SMEM and k in tmem_kernels else 0
        peak += sum(ch for _, ch in base) + overhead
        if step < 0 and base:
            step = max(r for r, _ in base)
        live = sorted((buffers[r] for r in [*live_rows, *(r for r, _ in base)]),
                      key=lambda x: (-x.charge, x.event))
        if ci == _SMEM:
            unit = target.smem_alloc_unit
            allocated, limit = -(-peak // unit) * unit, target.smem_per_block
        elif ci == _TMEM:
            allocated, limit = target.tmem_allocated(peak), target.tmem_columns
        else:
            allocated, limit = peak, target.regs_per_block
        return SpacePeak(space=SPACES[ci], peak=peak, allocated=allocated, limit=limit,
                         step=step, live=tuple(live), overhead=overhead)

    out = []
    for k, d, b in block_keys:
        out.append(BlockBudget(
            kernel=k, device=d, block=table.blocks[b], cells=tuple(cells[(k, d, b)]),
            smem=space_peak(k, d, b, _SMEM), tmem=space_peak(k, d, b, _TMEM),
            regs=space_peak(k, d, b, _REGS), target=target))
    for k, d in extra:
        out.append(BlockBudget(
            kernel=k, device=d, block=None, cells=(),
            smem=space_peak(k, d, None, _SMEM), tmem=space_peak(k, d, None, _TMEM),
            regs=space_peak(k, d, None, _REGS), target=target))
    out.sort(key=lambda x: (x.kernel, x.device, x.block is None, x.block or ()))
    return out


def _running_peaks(delta: np.ndarray, starts: np.ndarray):
    """Per group of consecutive changes (`starts`: where each begins): its length, the
    running total after each change, counted from the group's start, and its peak."""
    lengths = np.diff(np.r_[starts, len(delta)])
    cs = np.cumsum(delta)
    live = cs - np.repeat(cs[starts] - delta[starts], lengths)
    return lengths, live, np.maximum.reduceat(live, starts)


def _thread_peaks(table: EventTable, budgeted: np.ndarray, kern, dev, blk, cls,
                  target: Device) -> dict[tuple, tuple[int, int, list[int]]]:
    """(kernel, device, block, class) -> (peak, its row, the request rows live then) of
    the thread (or warp) whose own requests add up to the most at once (the first of
    equals, in thread order), each request counted as it asked, from the request (create
    or join) to the thread's own release or free. Only blocks where the run merged
    requests that disagree (from different lines, or of different sizes) into one buffer:
    in the others a thread never holds more than the block's count.

    Threads that all make the same collective requests hold what the block holds. When
    the interpreter merged requests by their place in each thread's sequence (a
    thread-dependent branch), a buffer can count as another thread's smaller one, and one
    scope's two buffers as two scopes one after the other, depending on the interleaving:
    what one thread holds at once is what its code needs, in every run."""
    c = table.columns
    op, alloc = c["op"], c["allocation"].astype(np.int64)
    thread, warp = c["thread"].astype(np.int64), c["warp"].astype(np.int64)
    req = np.flatnonzero(budgeted & (blk >= 0) & ((op == _CREATE) | (op == _JOIN)))
    if not len(req):
        return {}
    a = alloc[req]
    n_alloc = int(a.max()) + 1
    disagree = np.zeros(n_alloc, dtype=bool)
    for col in (c["source"], c["nbytes"]):
        v = col[req].astype(np.int64)
        lo = np.full(n_alloc, np.iinfo(np.int64).max)
        hi = np.full(n_alloc, np.iinfo(np.int64).min)
        np.minimum.at(lo, a, v)
        np.maximum.at(hi, a, v)
        disagree |= lo != hi
    if not disagree.any():
        return {}
    width = int(blk.max()) + 2
    bkey = (kern * (int(dev.max()) + 1) + dev) * width + blk
    merged = np.unique(bkey[req[disagree[a]]])
    rows = np.flatnonzero(budgeted & (blk >= 0) & (thread >= 0) & (
        (op == _CREATE) | (op == _JOIN) | (op == _RELEASE) | (op == _FREE)))
    rows = rows[np.isin(bkey[rows], merged)]
    if not len(rows):
        return {}
    # pair each thread's request with its own first release or free of that allocation
    order = rows[np.lexsort((rows, alloc[rows], warp[rows], thread[rows], blk[rows],
                             dev[rows], kern[rows]))]
    pstart = group_starts(kern[order], dev[order], blk[order], thread[order], warp[order],
                          alloc[order])
    first = order[pstart]
    is_req = (op[first] == _CREATE) | (op[first] == _JOIN)
    first = first[is_req]
    # (a second request of a pair would be a second lifetime: ids count creates, so no)
    nxt = np.r_[pstart[1:], len(order)][is_req]
    has_end = nxt - pstart[is_req] > 1
    ends = order[(pstart[is_req] + 1)[has_end]]
    charge = _charges(table, first, cls[first], target, own=True)
    ev = np.concatenate([first, ends])
    delta = np.concatenate([charge, -charge[has_end]])
    owner = np.concatenate([first, first[has_end]])  # the request row of each change
    gk, gd, gb, gt, gw, gc = (kern[owner], dev[owner], blk[owner], thread[owner],
                              warp[owner], cls[owner].astype(np.int64))
    o = np.lexsort((ev, gc, gw, gt, gb, gd, gk))
    ev, delta, owner = ev[o], delta[o], owner[o]
    gk, gd, gb, gt, gw, gc = gk[o], gd[o], gb[o], gt[o], gw[o], gc[o]
    starts = group_starts(gk, gd, gb, gt, gw, gc)
    lengths, live, peak = _running_peaks(delta, starts)
    out: dict[tuple, tuple[int, int, list[int]]] = {}
    best: dict[tuple, int] = {}  # block and class -> the group of its largest thread peak
    for g, s in enumerate(starts.tolist()):
        key = (int(gk[s]), int(gd[s]), int(gb[s]), int(gc[s]))
        if key not in best or peak[g] > peak[best[key]]:
            best[key] = g
    for key, g in best.items():
        s, e = int(starts[g]), int(starts[g] + lengths[g])
        at = s + int(np.argmax(live[s:e] == peak[g]))  # where it is first reached
        held = set()
        for i in range(s, at + 1):  # the requests live there
            if delta[i] > 0:
                held.add(int(owner[i]))
            elif delta[i] < 0:
                held.discard(int(owner[i]))
        out[key] = (int(peak[g]), int(ev[at]), sorted(held))
    return out


# Tables up to this many rows are checked against the bound below before the budgets are
# computed (a Python pass over the creates; larger tables go straight to the full count).
BOUND_ROWS = 20_000


def fits_for_sure(table: EventTable, kernels: Sequence[KernelInfo], device: str | Device,
                  fraction: float = WARN_FRACTION) -> bool:
    """True when no block of `kernels` can reach `fraction` of `device`'s SMEM or TMEM
    limit: everything any of its blocks ever created, counted as `block_budgets` counts
    it (plus the kernel-level SMEM/TMEM and the TMEM address slot), stays at or below it.
    Every peak is at most that sum, so `budget_findings` would find nothing; the
    analysis then leaves the budgets to be computed when a view asks. False when the
    sum does not prove it (or the table is large): the budgets decide."""
    n = len(table)
    if n == 0:
        return True
    if n > BOUND_ROWS:
        return False
    target = get_device(device)
    c = table.columns
    wanted = {k.index for k in kernels}
    cls = _space_class(table)
    rows = np.flatnonzero((c["op"] == _CREATE) & (cls >= 0) & (c["allocation"] >= 0))
    if not len(rows):
        return True
    charge = _charges(table, rows, cls[rows], target).tolist()
    sums: dict[tuple, int] = {}  # (kernel, device, block or -1, class) -> bytes / columns
    for k, d, b, ci, ch in zip(c["kernel"][rows].tolist(), c["device"][rows].tolist(),
                               c["block"][rows].tolist(), cls[rows].tolist(), charge):
        if k in wanted:
            key = (k, d, b if b >= 0 else -1, ci)
            sums[key] = sums.get(key, 0) + ch
    tmem = {k for (k, _, _, ci) in sums if ci == _TMEM}
    limits = {_SMEM: fraction * target.smem_per_block, _TMEM: fraction * target.tmem_columns}
    for (k, d, b, ci), total in sums.items():
        if ci not in limits:
            continue
        if b >= 0:
            total += sums.get((k, d, -1, ci), 0)
        if ci == _SMEM and k in tmem:
            total += target.tmem_address_bytes
        if total > limits[ci]:
            return False
    return True


def _live_buffers(table: EventTable, rows: np.ndarray, charges: np.ndarray,
                  own: bool = False) -> dict[int, LiveBuffer]:
    """A `LiveBuffer` for each create row, read column-wise. Of the requests merged into
    it (threads whose requests from different lines share one buffer), the largest (the
    first in the file of those) gives its line, shape and bytes, whichever thread happened
    to create it; with `own`, each row (a create or join) is its own request."""
    c = table.columns
    cols = [c[k][rows].tolist() for k in (
        "resource", "memory_space", "shape", "dtype", "nbytes", "source", "allocation",
        "block")]
    if own:
        return _buffers(table, rows.tolist(), rows.tolist(), charges, cols)
    wanted = set(cols[6])
    candidates = np.flatnonzero((c["source"] >= 0) & request_mask(table))
    if len(candidates) > SMALL_TABLE:  # (numpy's set test sorts: dear on small tables)
        candidates = candidates[np.isin(c["allocation"][candidates],
                                        np.fromiter(wanted, np.int64, len(wanted)))]
    chosen: dict[int, tuple] = {}  # allocation -> (its representative request's key, row)
    sources = table.sources
    for r, al, src, nb in zip(candidates.tolist(), c["allocation"][candidates].tolist(),
                              c["source"][candidates].tolist(),
                              c["nbytes"][candidates].tolist()):
        if al not in wanted:
            continue
        key = (-nb, sources[src].file, sources[src].line)
        held = chosen.get(al)
        if held is None or key < held[0]:
            chosen[al] = (key, r)
    rep = [chosen[al][1] if al in chosen else r for al, r in zip(cols[6], rows.tolist())]
    for i, k in enumerate(("shape", "dtype", "nbytes", "source")):
        cols[2 + i] = c[k][rep].tolist()
    return _buffers(table, rows.tolist(), rep, charges, cols)


def _buffers(table: EventTable, rows: list[int], rep: list[int], charges: np.ndarray,
             cols: list[list]) -> dict[int, LiveBuffer]:
    out = {}
    for r, rr, ch, res, sp, sh, dt, nb, src, al, bl in zip(rows, rep, charges.tolist(),
                                                             *cols):
        resource = RESOURCES[res]
        out[r] = LiveBuffer(
            event=r, allocation=al,
            memory_space=MEMORY_SPACES[sp] if resource == "buffer" else "SMEM",
            resource=resource, shape=table.shapes[sh] if sh >= 0 else None,
            dtype=table.dtypes[dt] if dt >= 0 else None, nbytes=nb, charge=ch,
            source=table.source_of(rr) if src >= 0 else None, kernel_level=bl < 0)
    return out


# -- findings

def _limit_text(limit: int) -> str:
    return f"{limit / 1024:g} KiB" if limit % 1024 == 0 else format_bytes(limit)


def format_bytes(n: int) -> str:
    """`512 B`, `96.0 KiB`, `1.5 MiB`."""
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"


def _percent(peak: int, limit: int) -> str:
    p = 100 * peak / limit
    text = f"{p:.0f}"
    if text == "100" and peak != limit:
        text = f"{p:.1f}"
    return f"{text} %"


def _amount(sp: SpacePeak) -> str:
    if sp.space == "TMEM":
        return f"{sp.peak} columns"
    return f"{format_bytes(sp.peak)} ({sp.peak} bytes)"


def _signature(sp: SpacePeak) -> tuple:
    return tuple((x.memory_space, x.resource, x.shape, x.dtype, x.charge, x.source)
                 for x in sp.live) + (sp.peak,)


def budget_findings(budgets: Sequence[BlockBudget], device: str | Device | None = None,
                    warn_fraction: float = WARN_FRACTION) -> list[Finding]:
    """`smem_over_budget` / `tmem_over_budget` findings.

    An error when a block's peak exceeds the limit, a warning above `warn_fraction` of
    it. Blocks of one kernel with the same buffers live at their peak make one finding
    (its cells are all their threads). `device` overrides the budgets' own limits (the
    counting, e.g. the SMEM alignment, stays the one the budgets were computed with).
    """
    groups: dict[tuple, list[tuple[BlockBudget, SpacePeak]]] = {}
    for b in budgets:
        target = b.target if device is None else get_device(device)
        for space, limit in (("SMEM", target.smem_per_block), ("TMEM", target.tmem_columns)):
            sp = b.space(space)
            if sp.peak <= 0:
                continue
            sp = dataclasses.replace(sp, limit=limit)
            if sp.peak > limit:
                severity = "error"
            elif sp.peak > warn_fraction * limit:
                severity = "warning"
            else:
                continue
            kind = "smem_over_budget" if space == "SMEM" else "tmem_over_budget"
            key = (b.kernel, kind, severity, target, _signature(sp))
            groups.setdefault(key, []).append((b, sp))
    findings = []
    for (kernel, kind, severity, target, _), members in groups.items():
        findings.append(_finding(kernel, kind, severity, target, members, warn_fraction))
    findings.sort(key=lambda f: (f.kernel, f.severity != "error", f.kind, min(f.events or [-1])))
    return findings


def _finding(kernel: int, kind: str, severity: str, target: Device,
             members: list[tuple[BlockBudget, SpacePeak]], warn_fraction: float) -> Finding:
    b0, sp = members[0]
    space = sp.space
    n_blocks = len(members)
    where = f"{target.name} ({target.arch})" if target.arch else target.name
    blocks = f"in {n_blocks} block(s)" if b0.block is not None else "in every block"
    at = _at_line(sp)
    if space == "TMEM" and not target.has_tmem:
        head = (f"TMEM peak {sp.peak} columns {blocks}{at}, but {where} has no tensor "
                f"memory")
        hint = NO_TMEM_HINT.format(device=target.name, arch=target.arch or "this GPU")
    elif space == "TMEM":
        alloc = (f" (tcgen05.alloc rounds it up to {sp.allocated})"
                 if sp.allocated != sp.peak else "")
        if severity == "error":
            head = (f"TMEM peak {sp.peak} columns{alloc} exceeds the {sp.limit} columns a "
                    f"block of {where} can allocate, {blocks}{at}")
            hint = TMEM_HINT.format(limit=sp.limit)
        else:
            head = (f"TMEM peak {sp.peak} columns{alloc} is {_percent(sp.peak, sp.limit)} "
                    f"of the {sp.limit} columns of {where}, {blocks}{at}")
            hint = TMEM_WARN_HINT.format(allocated=sp.allocated, limit=sp.limit)
    else:
        lim = f"{_limit_text(sp.limit)} ({sp.limit} bytes) per block of {where}"
        if severity == "error":
            head = (f"SMEM peak {_amount(sp)} exceeds the {lim} by "
                    f"{format_bytes(sp.peak - sp.limit)}, {blocks}{at}")
            hint = SMEM_HINT
        else:
            head = (f"SMEM peak {_amount(sp)} is {_percent(sp.peak, sp.limit)} of the "
                    f"{lim} (warning above {_percent(warn_fraction, 1)}), {blocks}{at}")
            hint = SMEM_WARN_HINT
    parts = describe_live(sp.live)
    if sp.overhead:
        parts.append(f"TMEM address slot {sp.overhead} B")
    message = f"{head}; live then: {', '.join(parts) if parts else 'nothing'}"
    sourced = [x.source for x in sp.live if x.source is not None]
    source = sourced[0] if sourced else None
    related: list[SourceLocation] = []
    for s in sourced[1:]:
        if s != source and s not in related:
            related.append(s)
    cells: list[Cell] = []
    events: set[int] = set()
    for b, p in members:
        cells.extend(b.cells)
        events.update(x.event for x in p.live)
        if p.step >= 0:
            events.add(p.step)
    return Finding(kind=kind, severity=severity, message=message, cells=sorted_cells(cells),
                   events=sorted(events), source=source, related=related,
                   suggestion=hint, kernel=kernel)


# -- one line per kernel

def budget_line(kernel_budget: KernelBudget | Sequence[BlockBudget]) -> str:
    """`SMEM peak 96.0 KiB / 227 KiB (42 %) at line 118` for the kernel's worst block,
    then `; TMEM peak 256 / 512 columns (50 %) at line 240` when it uses TMEM."""
    if not isinstance(kernel_budget, KernelBudget):
        blocks = tuple(kernel_budget)
        if not blocks:
            return "no blocks"
        kernel_budget = KernelBudget(blocks[0].kernel, blocks, blocks[0].target)
    target = kernel_budget.target
    parts = []
    worst = kernel_budget.worst("SMEM")
    if worst is None:
        return "no blocks"
    parts.append(peak_text(worst.smem, target))
    tw = kernel_budget.worst("TMEM")
    if tw is not None and tw.tmem.peak > 0:
        parts.append(peak_text(tw.tmem, target))
    return "; ".join(parts)


def peak_text(sp: SpacePeak, target: Device) -> str:
    """One space's peak against the limit: `SMEM peak 96.0 KiB / 227 KiB (42 %) at line
    118`, `TMEM peak 256 / 512 columns (50 %) at line 240` (`... columns (h100 has no
    TMEM)` on a GPU without it); REGS: `REGS peak 128.0 KiB`."""
    if sp.space == "TMEM":
        if target.has_tmem and sp.limit > 0:
            return (f"TMEM peak {sp.peak} / {sp.limit} columns "
                    f"({_percent(sp.peak, sp.limit)}){_at_line(sp)}")
        return f"TMEM peak {sp.peak} columns ({target.name} has no TMEM){_at_line(sp)}"
    if sp.limit <= 0:
        return f"{sp.space} peak {format_bytes(sp.peak)}{_at_line(sp)}"
    return (f"{sp.space} peak {format_bytes(sp.peak)} / {_limit_text(sp.limit)} "
            f"({_percent(sp.peak, sp.limit)}){_at_line(sp)}")


def _at_line(sp: SpacePeak) -> str:
    """` at line N`: the allocation that reached the peak, else its largest live buffer."""
    line = peak_line(sp)
    return "" if line is None else f" at line {line}"


def peak_line(sp: SpacePeak) -> int | None:
    """The line of the allocation that reached the peak, else of its largest live buffer
    with a line (None: no live buffer has one)."""
    first = None
    for x in sp.live:
        if x.source is not None:
            if x.event == sp.step:
                return x.source.line
            if first is None:
                first = x.source.line
    return first


__all__ = [
    "BlockBudget", "KernelBudget", "LiveBuffer", "SpacePeak", "block_budgets",
    "budget_findings", "budget_line", "describe_live", "format_bytes", "kernel_budgets",
    "peak_line", "peak_text",
]
