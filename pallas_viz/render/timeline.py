"""Lifetimes on a timeline: which thread holds which allocation, and a block's live memory.

There is no wall clock in a trace: the time axis is the *step*, an event's row in
recording order (`Event.seq`). A thread holds an allocation from its request (`create`
or `join`) to its own `release` (or the `free` of the last thread); one it never
releases is held to the end of its kernel.

The data helpers here (`thread_holds`, `live_memory`, `barrier_ops_of`) are numpy only
and shared with the Perfetto export; matplotlib is imported by the two plots:

- `plot_timeline`: per (block, thread) lanes with one bar per allocation held (coloured
  by memory space, Okabe-Ito palette), barrier operations, and above them the live SMEM
  (and TMEM) of each shown block against the device's limit.
- `plot_memory`: the live SMEM (and TMEM) of a kernel's blocks over the steps, the
  limit, and the peak from `pallas_viz.analysis.budget.block_budgets` with its step,
  line and live buffers.

Live memory is counted the way `block_budgets` counts it (its default `span="scope"`):
SMEM buffers aligned to the device's granularity, 8 bytes per barrier, TMEM in columns,
kernel-level SMEM/TMEM held by every block all run long, a lifetime counted from its
`create` to the first release or free by any of its threads.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence

import numpy as np

from ..analysis.budget import _charges, _space_class  # the budget's own counting
from ..analysis.frame import group_starts
from ..devices import Device, get_device
from ..model import MEMORY_SPACES
from ..store import OP_CODE, RESOURCE_CODE, EventTable
from .inert import one_line

CREATE, JOIN = OP_CODE["create"], OP_CODE["join"]
RELEASE, FREE = OP_CODE["release"], OP_CODE["free"]
BUFFER = RESOURCE_CODE["buffer"]
SPACES = ("SMEM", "TMEM", "REGS")  # the classes `live_memory` follows
BARRIER_KINDS = ("arrive", "wait_start", "wait_end")
# the recorder's `BarrierOp.op` names ("wait": a wait starts, "waited": it ended)
_RECORDER_OPS = {"arrive": "arrive", "wait": "wait_start", "waited": "wait_end"}
# fields of the recorder's barrier operations kept as they are (Perfetto args)
_OP_EXTRAS = ("phase", "arrivals", "num_arrivals", "completes", "via", "freed", "part",
              "target_block", "barrier_id")
STEP_NOTE = ("step = the event's row in recording order; the trace has no wall clock, so "
             "lengths count allocation events, not time")

# Okabe & Ito's colour-blind-safe palette (https://jfly.uni-koeln.de/color/)
OKABE_ITO = {
    "orange": "#E69F00", "sky_blue": "#56B4E9", "bluish_green": "#009E73",
    "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00",
    "reddish_purple": "#CC79A7", "black": "#000000",
}
# bar colour per kind of allocation: a memory space, or a barrier resource
KIND_COLORS = {
    "SMEM": OKABE_ITO["blue"], "TMEM": OKABE_ITO["reddish_purple"],
    "REGS": OKABE_ITO["bluish_green"], "GMEM": OKABE_ITO["orange"],
    "barrier": OKABE_ITO["sky_blue"], "cluster_barrier": OKABE_ITO["yellow"],
    "other": "#999999",
}
FINDING_COLOR = OKABE_ITO["vermillion"]
LIMIT_COLOR = OKABE_ITO["vermillion"]


# -- data (numpy only)

def _within(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Cumulative sums of `values` restarted at each group start."""
    cs = np.cumsum(values)
    base = cs[starts] - values[starts]
    return cs - np.repeat(base, lengths)


def thread_holds(table: EventTable, mask: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Each thread's hold of each allocation: from its request to its release.

    A request (`create`/`join`) of lifetime `allocation` by (device, block, thread, warp)
    is paired with that same requester's next `release`/`free` of it, first in first out.
    Returns arrays: `begin` (request row), `end` (release or free row, -1: never
    released), sorted by `begin`; and `orphans`, rows of releases no request of that
    requester precedes. `mask` restricts the rows looked at. Vectorised.
    """
    c = table.columns
    op = c["op"]
    is_req = (op == CREATE) | (op == JOIN)
    m = (is_req | (op == RELEASE) | (op == FREE)) & (c["allocation"] >= 0)
    if mask is not None:
        m &= mask
    rows = np.flatnonzero(m)
    empty = np.zeros(0, dtype=np.int64)
    if not len(rows):
        return {"begin": empty, "end": empty, "orphans": empty}
    keys = [c[k][rows].astype(np.int64) for k in ("allocation", "device", "block", "thread",
                                                   "warp")]
    order = np.lexsort((rows, *keys[::-1]))
    rows = rows[order]
    keys = [k[order] for k in keys]
    n = len(rows)
    starts = group_starts(*keys)
    lengths = np.diff(np.r_[starts, n])
    group = np.repeat(np.arange(len(starts)), lengths)
    req = is_req[rows].astype(np.int64)
    n_req = _within(req, starts, lengths)
    n_end = _within(1 - req, starts, lengths)
    # FIFO: ends with nothing to release are orphans; their count so far is the running
    # maximum of (ends - requests), floored at 0 (restarted per group by an offset)
    off = group * (2 * n + 2)
    orphans_so_far = np.maximum(np.maximum.accumulate(n_end - n_req + off) - off, 0)
    prev = np.r_[0, orphans_so_far[:-1]]
    prev[starts] = 0
    is_end = req == 0
    orphan = is_end & (orphans_so_far > prev)
    matched = is_end & ~orphan
    # the k-th matched end of a group releases its k-th request
    code_req = group[req == 1] * (n + 1) + n_req[req == 1]
    code_end = group[matched] * (n + 1) + (n_end - orphans_so_far)[matched]
    begin = rows[req == 1]
    end = np.full(len(begin), -1, dtype=np.int64)
    end[np.searchsorted(code_req, code_end)] = rows[matched]
    by_begin = np.argsort(begin, kind="stable")
    return {"begin": begin[by_begin], "end": end[by_begin],
            "orphans": np.sort(rows[orphan])}


def kernel_last_rows(table: EventTable) -> dict[int, int]:
    """kernel -> the row of its last event."""
    k = table.columns["kernel"]
    if not len(k):
        return {}
    ks, first_from_end = np.unique(k[::-1], return_index=True)
    return {int(a): len(k) - 1 - int(b) for a, b in zip(ks, first_from_end)}


def live_memory(table: EventTable, kernels: Iterable[int] | None = None,
                device: str | Device = "h100",
                blocks: Iterable[tuple[int, int, int]] | None = None
                ) -> dict[tuple[int, int, int], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """The live SMEM (bytes), TMEM (columns) and REGS (bytes) of each block, step by step.

    Keys are (kernel, device, block index) of blocks with any event (of `kernels`,
    default all; restricted to `blocks` when given). Each value maps a space to
    `(steps, values)`: the value holds from its step to the next one; the first entry is
    the block's first event with what kernel-level allocations (and the TMEM address
    slot) take, the last step is the block's last event. Counted as `block_budgets`
    counts (see the module docstring): its peak is the largest value here.
    """
    target = get_device(device)
    c = table.columns
    n = len(table)
    kern = c["kernel"].astype(np.int64)
    dev = c["device"].astype(np.int64)
    blk = c["block"].astype(np.int64)
    alloc = c["allocation"].astype(np.int64)
    op = c["op"]
    in_kernels = np.ones(n, dtype=bool)
    if kernels is not None:
        in_kernels = np.isin(kern, np.fromiter(kernels, dtype=np.int64))
    selected = in_kernels & (blk >= 0)
    if blocks is not None:
        wanted = sorted(set(blocks))
        if not wanted:
            return {}
        w = np.array(wanted, dtype=np.int64)
        # one int per (kernel, device, block): all three are small
        code = (kern * 65536 + dev) * (1 << 31) + blk
        selected &= np.isin(code, (w[:, 0] * 65536 + w[:, 1]) * (1 << 31) + w[:, 2])
    cls = _space_class(table) if n else np.zeros(0, dtype=np.int8)
    budgeted = in_kernels & (cls >= 0) & (alloc >= 0)

    # the selected blocks: first and last rows
    brows = np.flatnonzero(selected)
    order = brows[np.lexsort((brows, blk[brows], dev[brows], kern[brows]))]
    bstart = group_starts(kern[order], dev[order], blk[order])
    bend = np.r_[bstart[1:], len(order)] - 1
    block_keys = [(int(kern[r]), int(dev[r]), int(blk[r])) for r in order[bstart]]
    span = {key: (int(order[s]), int(order[e]))
            for key, s, e in zip(block_keys, bstart.tolist(), bend.tolist())}

    # kernel-level SMEM/TMEM: every block of the kernel holds it all run long
    base_rows = np.flatnonzero(budgeted & (op == CREATE) & (blk < 0))
    base_charge = _charges(table, base_rows, cls[base_rows], target)
    baseline: dict[tuple[int, int, int], int] = {}
    for r, ch in zip(base_rows.tolist(), base_charge.tolist()):
        key = (int(kern[r]), int(dev[r]), int(cls[r]))
        baseline[key] = baseline.get(key, 0) + ch
    tmem_kernels = set(kern[budgeted & (cls == 1)].tolist())

    # lifetimes created in the selected blocks, until their first release or free
    creates = np.flatnonzero(budgeted & (op == CREATE) & selected)
    charge_c = _charges(table, creates, cls[creates], target)
    n_alloc = int(alloc.max()) + 1 if n else 0
    owner = np.full(n_alloc, -1, dtype=np.int64)
    owner[alloc[creates]] = creates
    charge_of = np.zeros(n_alloc, dtype=np.int64)
    charge_of[alloc[creates]] = charge_c
    ends = np.flatnonzero(budgeted & ((op == FREE) | (op == RELEASE)))
    ends = ends[owner[alloc[ends]] >= 0]
    ends = ends[np.unique(alloc[ends], return_index=True)[1]]
    own = owner[alloc[ends]]
    rows = np.concatenate([creates, ends])
    okey = np.concatenate([creates, own])
    delta = np.concatenate([charge_c, -charge_of[alloc[ends]]])
    gk, gd, gb, gc = kern[okey], dev[okey], blk[okey], cls[okey].astype(np.int64)
    o = np.lexsort((rows, gc, gb, gd, gk))
    rows, delta = rows[o], delta[o]
    gk, gd, gb, gc = gk[o], gd[o], gb[o], gc[o]
    starts = group_starts(gk, gd, gb, gc)
    changes: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
    if len(rows):
        lengths = np.diff(np.r_[starts, len(rows)])
        live = _within(delta, starts, lengths)
        for s, e in zip(starts.tolist(), (starts + lengths).tolist()):
            key = (int(gk[s]), int(gd[s]), int(gb[s]), int(gc[s]))
            changes[key] = (rows[s:e], live[s:e])

    out = {}
    for key in block_keys:
        k, d, b = key
        first, last = span[key]
        spaces = {}
        for ci, name in enumerate(SPACES):
            base = baseline.get((k, d, ci), 0)
            if ci == 0 and k in tmem_kernels:
                base += target.tmem_address_bytes
            steps, values = changes.get((k, d, b, ci), (np.zeros(0, np.int64),
                                                         np.zeros(0, np.int64)))
            tail = max(last, int(steps[-1])) if len(steps) else last
            steps = np.concatenate([[first], steps, [tail]]).astype(np.int64)
            values = base + np.concatenate([[0], values, values[-1:] if len(values) else [0]])
            spaces[name] = (steps, values.astype(np.int64))
        out[key] = spaces
    return out


def barrier_ops_of(trace, barrier_ops: Sequence[dict] | dict | None = None) -> list[dict]:
    """Barrier operations, normalised: dicts with int `step`, `device`, `thread`, `warp`
    (-1: none), `allocation` (-1: unknown), `kernel` and `block` (a block tuple, None at
    kernel level), `kind` ("arrive", "wait_start", "wait_end"), `resource`, `barrier_id`,
    `source` (a `SourceLocation` dict or None) and `extra` (the recorder's phase,
    arrivals, via, ... when given), sorted by step.

    `barrier_ops` is a list of dicts with `step`, `thread`, `kind` and optionally the
    others (`block`: a block tuple or list, an index into `trace.events.blocks` with -1
    for kernel level, or None; `kernel` may be left out: it is read from the
    allocation's events, else from the event at `step`). The recorder's records
    (`op`: "arrive", "wait", "waited" instead of `kind`) are read as they are, and so is
    a dict of equal-length lists. Without it, `trace.meta["barrier_ops"]` is used when
    it is in one of these forms, else there are none. A malformed explicit list raises
    `ValueError`; a malformed one found in the trace's meta is ignored.
    """
    explicit = barrier_ops is not None
    if not explicit:
        barrier_ops = (getattr(trace, "meta", None) or {}).get("barrier_ops")
        if barrier_ops is None:
            return []
    try:
        return _normalise_ops(trace, barrier_ops)
    except (TypeError, ValueError, KeyError, IndexError) as e:
        if explicit:
            raise ValueError(f"bad barrier_ops: {type(e).__name__}: {e}") from None
        return []


def _normalise_ops(trace, ops) -> list[dict]:
    if isinstance(ops, dict):  # columnar
        names = list(ops)
        cols = [list(ops[k]) for k in names]
        if len({len(col) for col in cols}) > 1:
            raise ValueError("columns of different lengths")
        ops = [dict(zip(names, vals)) for vals in zip(*cols)]
    if not isinstance(ops, (list, tuple)) or not all(isinstance(o, dict) for o in ops):
        raise TypeError("expected a list of dicts or a dict of lists")
    table = trace.events
    c = table.columns
    n = len(table)
    create_kernel: dict[int, int] = {}
    allocs = {int(o["allocation"]) for o in ops if o.get("allocation") is not None}
    allocs.discard(-1)
    if allocs and n:
        rows = np.flatnonzero(np.isin(c["allocation"], list(allocs)))
        first = rows[np.unique(c["allocation"][rows], return_index=True)[1]]
        create_kernel = {int(c["allocation"][r]): int(c["kernel"][r]) for r in first}
    out = []
    for o in ops:
        kind = str(o["kind"] if "kind" in o else _RECORDER_OPS.get(o["op"], o["op"]))
        if kind not in BARRIER_KINDS:
            raise ValueError(f"unknown barrier operation kind {kind!r}")
        step = int(o["step"])
        alloc = -1 if o.get("allocation") is None else int(o["allocation"])
        b = o.get("block")
        if b is None:
            block = None
        elif isinstance(b, (list, tuple)):
            block = tuple(int(x) for x in b)
        else:
            block = table.block(int(b))
        kernel = o.get("kernel")
        if kernel is None:
            kernel = create_kernel.get(alloc)
        if kernel is None and n:
            kernel = int(c["kernel"][min(max(step, 0), n - 1)])
        warp = o.get("warp")
        out.append({
            "step": step, "kind": kind, "allocation": alloc,
            "kernel": -1 if kernel is None else int(kernel),
            "device": int(o.get("device", 0) or 0), "block": block,
            "thread": int(o["thread"]), "warp": -1 if warp is None else int(warp),
            "barrier_id": o.get("barrier_id"),
            "resource": str(o.get("resource") or "barrier"),
            "source": o.get("source") if isinstance(o.get("source"), dict) else None,
            "extra": {k: o[k] for k in _OP_EXTRAS if o.get(k) is not None},
        })
    out.sort(key=lambda x: x["step"])
    return out


def pair_waits(ops: list[dict]) -> list[tuple[dict, dict | None]]:
    """(wait_start, wait_end or None) per wait: each requester's start and next end of
    the same barrier, in order."""
    open_: dict[tuple, list[dict]] = {}
    out: list[list] = []
    for o in ops:
        key = (o["kernel"], o["device"], o["block"], o["thread"], o["warp"], o["allocation"],
               o.get("barrier_id"))
        if o["kind"] == "wait_start":
            pair = [o, None]
            out.append(pair)
            open_.setdefault(key, []).append(pair)
        elif o["kind"] == "wait_end" and open_.get(key):
            open_[key].pop(0)[1] = o
    return [(a, b) for a, b in out]


# -- naming

def block_text(block: tuple[int, ...] | None) -> str:
    """`(1)`, `(0, 1)`, `(no grid)` for the one block of a kernel without a grid,
    `kernel level` for None."""
    if block is None:
        return "kernel level"
    if block == ():
        return "(no grid)"
    return "(" + ", ".join(map(str, block)) + ")"


def kind_of(table: EventTable, rows: np.ndarray) -> list[str]:
    """The bar kind of each row: its memory space for a buffer, else its resource."""
    c = table.columns
    res = c["resource"][rows].tolist()
    space = c["memory_space"][rows].tolist()
    out = []
    for r, s in zip(res, space):
        if r == BUFFER:
            out.append(MEMORY_SPACES[s] if s >= 0 else "other")
        else:
            out.append("barrier" if r == RESOURCE_CODE["barrier"] else "cluster_barrier")
    return out


def allocation_name(table: EventTable, row: int) -> str:
    """`SMEM (8, 128) float32`, `barrier`, `cluster barrier`."""
    c = table.columns
    if int(c["resource"][row]) != BUFFER:
        return "barrier" if int(c["resource"][row]) == RESOURCE_CODE["barrier"] else \
            "cluster barrier"
    s = int(c["memory_space"][row])
    parts = [MEMORY_SPACES[s] if s >= 0 else "buffer"]
    shape, dtype = int(c["shape"][row]), int(c["dtype"][row])
    if shape >= 0:
        parts.append(str(table.shapes[shape]))
    if dtype >= 0:
        parts.append(one_line(table.dtypes[dtype]))
    return " ".join(parts)


def _thread_axis(trace, kernel: int) -> str:
    """The kernel's thread axis name, as one line (`inert.one_line`: from a trace file)."""
    if 0 <= kernel < len(trace.kernels):
        return one_line(trace.kernels[kernel].thread_axis or "thread")
    return "thread"


def _kernel_arg(trace, kernel: int | None) -> int | None:
    from .png import default_kernel

    if kernel is None:
        return default_kernel(trace)
    if not 0 <= kernel < len(trace.kernels):
        raise ValueError(f"kernel must be in 0..{len(trace.kernels) - 1}, not {kernel}")
    return kernel


# -- plots

def _budgets(trace, kernel: int, device: str | Device):
    from ..analysis.budget import block_budgets

    return block_budgets(trace.events, [trace.kernels[kernel]], device)


def _kib(x, _pos=None) -> str:
    return f"{x / 1024:g} KiB" if x else "0"


def _step_segments(steps: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The vertices of a step curve (each value held until the next step)."""
    x = np.repeat(steps, 2)[1:]
    y = np.repeat(values, 2)[:-1]
    return np.column_stack([x, y]).astype(float)


def _block_order(trace, kernel: int, budgets, keys: list[tuple[int, tuple]]) -> list:
    """Blocks by priority: the first error's, the worst SMEM and TMEM blocks, then grid
    order."""
    first: list = []
    for f in trace.findings:
        if f.kernel == kernel and f.severity == "error":
            first += [(d, tuple(b)) for d, b, _ in f.all_cells() if b is not None]
            break
    real = [b for b in budgets if b.block is not None]
    for space in ("SMEM", "TMEM"):
        if real:
            w = max(real, key=lambda b: b.space(space).peak)
            if w.space(space).peak > 0:
                first.append((w.device, w.block))
    have = set(keys)
    return list(dict.fromkeys([k for k in first if k in have] + keys))


def plot_timeline(trace, kernel: int | None = None, blocks=None, max_lanes: int = 64,
                  barrier_ops=None, device: str | Device = "h100"):
    """Allocation lifetimes of `kernel` (default: the first finding's) per (block, thread).

    One lane per (block, thread) (and warp, where requests name one): a bar per
    allocation the thread holds, from its request to its release (or the kernel's end,
    outlined, when it never releases it), coloured by memory space; barrier operations
    (`barrier_ops`, see `barrier_ops_of`) as ticks (arrive) and lines (waits); the
    events of findings as crosses. Above the lanes, each shown block's live SMEM (and
    TMEM, if the kernel uses any) against `device`'s limit.

    `blocks`: block tuples to show (default: the first error's blocks, the worst SMEM
    and TMEM blocks, then blocks in grid order), capped so that at most `max_lanes` lanes
    are drawn. Artists carry gids: `bars-<kind>` (kind: SMEM, TMEM, REGS, GMEM, barrier,
    cluster_barrier), `unreleased`, `barrier-arrive`, `barrier-wait`, `finding-events`,
    `smem-curves`, `smem-limit`, `tmem-curves`, `tmem-limit`. The figure's `lanes`
    attribute lists (device, block, thread, warp) per lane, top to bottom.
    """
    from matplotlib.collections import LineCollection, PolyCollection
    from matplotlib.patches import Patch

    from .png import TraceFigure

    trace.require_kernels("plot")
    kernel = _kernel_arg(trace, kernel)
    target = get_device(device)
    if max_lanes < 1:
        raise ValueError(f"max_lanes must be at least 1, not {max_lanes}")
    if kernel is None:
        return _message(trace, "no kernel ran: JAX rejected it while tracing")
    table = trace.events
    c = table.columns
    kmask = c["kernel"] == kernel
    inb = np.flatnonzero(kmask & (c["block"] >= 0))
    if not len(inb):
        return _message(trace, f"kernel {kernel}: no allocations inside blocks")
    info = trace.kernels[kernel]
    axis = _thread_axis(trace, kernel)

    # blocks present, their (thread, warp) lanes
    tw = _distinct(c["device"][inb], c["block"][inb], c["thread"][inb], c["warp"][inb])
    index_of = {(d, table.blocks[b]): b for d, b, _, _ in tw}
    keys = sorted(index_of, key=lambda k: (k[0], k[1]))
    n_blocks = len(keys)
    budgets = _budgets(trace, kernel, target)
    if blocks is not None:
        want = [tuple(b) if isinstance(b, (tuple, list)) else (int(b),) for b in blocks]
        unknown = [b for b in want if not any(k[1] == b for k in keys)]
        if unknown:
            raise ValueError(f"kernel {kernel} has no block {unknown[0]} (blocks: "
                             f"{', '.join(block_text(k[1]) for k in keys[:8])}"
                             f"{', ...' if len(keys) > 8 else ''})")
        order = [k for b in dict.fromkeys(want) for k in keys if k[1] == b]
    else:
        order = _block_order(trace, kernel, budgets, keys)

    lanes_of: dict[tuple, list[tuple[int, int]]] = {}
    for d, b, t, w in tw:
        lanes_of.setdefault((d, table.blocks[b]), []).append((t, w))
    finding_cells = {}
    for f in trace.findings:
        if f.kernel == kernel:
            for d, b, t in f.all_cells():
                if b is not None:
                    finding_cells.setdefault((d, tuple(b)), set()).add(t)
    chosen: list[tuple] = []
    n_lanes = 0
    for key in order:
        threads = set(range(info.threads_per_block)) | finding_cells.get(key, set())
        lane_set = set(lanes_of.get(key, [])) | {(t, -1) for t in threads}
        ls = sorted(lane_set)
        if n_lanes + len(ls) > max_lanes:
            if not chosen:  # one block alone is too tall: its first lanes
                chosen.append((key, ls[:max_lanes]))
                n_lanes = max_lanes
            break
        chosen.append((key, ls))
        n_lanes += len(ls)
    chosen.sort(key=lambda x: (x[0][0], x[0][1]))
    lanes = [(d, b, t, w) for (d, b), ls in chosen for t, w in ls]
    lane_y = {lane: i for i, lane in enumerate(lanes)}
    chosen_idx = {(kernel, d, index_of[(d, b)]) for (d, b), _ in chosen}

    # holds of the shown blocks
    code = c["device"].astype(np.int64) * (1 << 31) + c["block"]
    shown = np.isin(code, [d * (1 << 31) + b for _, d, b in chosen_idx]) & kmask
    h = thread_holds(table, shown)
    shown_rows = np.flatnonzero(shown)
    ops = [o for o in barrier_ops_of(trace, barrier_ops) if o["kernel"] == kernel]
    ops = [o for o in ops if _op_lane(lane_y, o) is not None]
    x_lo = int(shown_rows.min())
    # what is never released is drawn to the right edge: the shown blocks' last event
    x_hi = max([int(shown_rows.max()) + 1, *(o["step"] + 1 for o in ops)])
    begin, end = h["begin"], h["end"]
    open_ = end < 0
    end_x = np.where(open_, x_hi, end)
    lane_idx = np.array([lane_y.get((d, table.blocks[b], t, w), -1) for d, b, t, w in zip(
        c["device"][begin].tolist(), c["block"][begin].tolist(), c["thread"][begin].tolist(),
        c["warp"][begin].tolist())], dtype=np.int64)
    keep = lane_idx >= 0
    begin, end_x, open_, lane_idx = begin[keep], end_x[keep], open_[keep], lane_idx[keep]
    kinds = np.array(kind_of(table, begin), dtype=object)
    sub, n_sub = _pack_lanes(lane_idx, begin, end_x, len(lanes))
    height = 0.8 / n_sub[lane_idx]
    y0 = lane_idx - 0.4 + sub * height

    # figure layout (inches)
    curves = live_memory(table, [kernel], target, chosen_idx)
    has_tmem = any(len(v["TMEM"][1]) and v["TMEM"][1].max() > 0 for v in curves.values()) \
        or any(b.tmem.peak > 0 for b in budgets)
    lane_h = max(0.13, min(0.32, 7.0 / max(1, len(lanes))))
    fig_w = 10.0
    left, right, top, bottom = 1.6, 0.3, 0.85, 0.55
    mem_h, tmem_h, gap = 1.4, (1.0 if has_tmem else 0.0), 0.3
    lanes_h = lane_h * len(lanes)
    fig_h = top + mem_h + gap + (tmem_h + gap if has_tmem else 0) + lanes_h + bottom
    fig = TraceFigure(figsize=(fig_w, fig_h), dpi=100)
    fig.lanes = lanes
    ax_w = (fig_w - left - right) / fig_w
    ax_l = fig.add_axes((left / fig_w, bottom / fig_h, ax_w, lanes_h / fig_h))
    y = bottom + lanes_h + gap
    ax_t = None
    if has_tmem:
        ax_t = fig.add_axes((left / fig_w, y / fig_h, ax_w, tmem_h / fig_h), sharex=ax_l)
        y += tmem_h + gap
    ax_m = fig.add_axes((left / fig_w, y / fig_h, ax_w, mem_h / fig_h), sharex=ax_l)

    # bars
    handles = []
    for kind in KIND_COLORS:
        m = kinds == kind
        if not m.any():
            continue
        verts = _rects(begin[m], end_x[m], y0[m], height[m])
        coll = PolyCollection(verts, facecolors=KIND_COLORS[kind], edgecolors="white",
                              linewidths=0.3, gid=f"bars-{kind}", zorder=2)
        ax_l.add_collection(coll)
        handles.append(Patch(fc=KIND_COLORS[kind], label=kind.replace("_", " ")))
    if open_.any():
        verts = _rects(begin[open_], end_x[open_], y0[open_], height[open_])
        ax_l.add_collection(PolyCollection(
            verts, facecolors="none", edgecolors=FINDING_COLOR, linewidths=1.0,
            linestyles="--", gid="unreleased", zorder=3))
        handles.append(Patch(fc="none", ec=FINDING_COLOR, ls="--",
                             label="never released"))

    # barrier operations on the lanes
    arrive_xy, wait_segs, wait_open = [], [], []
    for o in ops:
        yy = _op_lane(lane_y, o)
        if yy is not None and o["kind"] == "arrive":
            arrive_xy.append((o["step"], yy))
    for start, stop in pair_waits(ops):
        yy = _op_lane(lane_y, start)
        if yy is None:
            continue
        seg = [(start["step"], yy), ((stop or {}).get("step", x_hi), yy)]
        (wait_segs if stop is not None else wait_open).append(seg)
    if arrive_xy:
        xa, ya = zip(*arrive_xy)
        ax_l.scatter(xa, ya, marker="|", s=90, c=OKABE_ITO["black"], linewidths=1.5,
                     gid="barrier-arrive", zorder=4)
        handles.append(_line_handle("|", "barrier arrive"))
    if wait_segs or wait_open:
        lc = LineCollection(wait_segs + wait_open, colors=OKABE_ITO["black"], linewidths=2.2,
                            linestyles=["-"] * len(wait_segs) + ["--"] * len(wait_open),
                            gid="barrier-wait", zorder=4)
        ax_l.add_collection(lc)
        handles.append(_line_handle(None, "barrier wait"))

    # findings' events on their lanes
    fx, fy = [], []
    for f in trace.findings:
        if f.kernel != kernel:
            continue
        for g in [f, *f.consequences]:
            for r in g.events:
                if 0 <= r < len(table):
                    d, bi, t, w = (int(c[k][r]) for k in ("device", "block", "thread", "warp"))
                    yy = lane_y.get((d, table.block(bi), t, w))
                    if yy is not None:
                        fx.append(r)
                        fy.append(yy)
    if fx:
        ax_l.scatter(fx, fy, marker="X", s=42, c=FINDING_COLOR, edgecolors="white",
                     linewidths=0.5, gid="finding-events", zorder=5)
        handles.append(_line_handle("X", "finding event", FINDING_COLOR))

    # lane axes
    multi = len({d for d, *_ in lanes}) > 1
    labels = []
    for d, b, t, w in lanes:
        s = (f"d{d} " if multi else "") + f"{block_text(b)} {axis} {t}"
        labels.append(s + (f" w{w}" if w >= 0 else ""))
    ax_l.set_yticks(range(len(lanes)), labels, fontsize=7 if len(lanes) > 24 else 8)
    red = {(d, tuple(b), t) for f in trace.findings if f.kernel == kernel
           for d, b, t in f.all_cells() if b is not None}
    for tick, (d, b, t, _w) in zip(ax_l.get_yticklabels(), lanes):
        if (d, b, t) in red:
            tick.set_color(FINDING_COLOR)
    ax_l.set_ylim(len(lanes) - 0.5, -0.5)
    pad = max(1.0, 0.01 * (x_hi - x_lo))
    ax_l.set_xlim(x_lo - pad, x_hi + pad)
    ax_l.set_xlabel("step (event row in recording order; no wall clock)", fontsize=8)
    ax_l.tick_params(labelsize=7, length=2)
    seps = [i - 0.5 for i in range(1, len(lanes)) if lanes[i][:2] != lanes[i - 1][:2]]
    if seps:
        ax_l.add_collection(LineCollection(
            [[(x_lo - pad, s), (x_hi + pad, s)] for s in seps], colors="#888",
            linewidths=0.6, gid="block-separators", zorder=1))
    ax_l.grid(axis="x", color="#eee", lw=0.5)
    ax_l.set_axisbelow(True)

    # memory curves
    def curves_on(ax, space: str, limit: int, unit: str):
        segs = [_step_segments(*v[space]) for v in curves.values()]
        ax.add_collection(LineCollection(segs, colors=OKABE_ITO["blue"], linewidths=1.2,
                                         gid=f"{space.lower()}-curves"))
        top_v = max([limit, *(float(s[:, 1].max()) for s in segs if len(s))], default=1)
        if limit > 0:
            ax.axhline(limit, color=LIMIT_COLOR, lw=1.0, ls="--",
                       gid=f"{space.lower()}-limit")
            ax.text(1.0, limit, f" limit {target.name}", transform=ax.get_yaxis_transform(),
                    fontsize=7, color=LIMIT_COLOR, va="bottom", ha="right")
        ax.set_ylim(0, max(1, top_v) * 1.1)
        ax.set_ylabel(f"live {space}\n({unit})", fontsize=8)
        ax.tick_params(labelsize=7, length=2, labelbottom=False)
        ax.grid(axis="y", color="#eee", lw=0.5)

    curves_on(ax_m, "SMEM", target.smem_per_block, "per block")
    _kib_axis(ax_m, ax_m.get_ylim()[1])
    if ax_t is not None:
        curves_on(ax_t, "TMEM", target.tmem_columns, "columns")
        if not target.has_tmem:
            ax_t.text(0.01, 0.85, f"{target.name} has no TMEM", transform=ax_t.transAxes,
                      fontsize=7, color=LIMIT_COLOR)

    # titles and legend
    name = f" {one_line(info.name)}" if info.name else ""
    fig.text(0.1 / fig_w, 1 - 0.1 / fig_h, f"kernel {kernel}{name}: allocation lifetimes",
             fontsize=10, weight="bold", va="top", parse_math=False)
    sub_t = (f"{len(chosen)} of {n_blocks} block{'s' if n_blocks != 1 else ''} shown, "
             f"{len(lanes)} lane{'s' if len(lanes) != 1 else ''} (kernel-level "
             "operands not drawn); bars: request to release")
    if len(chosen) < n_blocks:
        sub_t += (f"; max_lanes={max_lanes}: " + ("the blocks asked for" if blocks is not None
                  else "the first error's blocks, the worst, then grid order"))
    fig.text(0.1 / fig_w, 1 - 0.32 / fig_h, sub_t, fontsize=8, color="#444", va="top",
             parse_math=False)
    if handles:
        ax_m.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.0, 1.0),
                    ncols=min(len(handles), 8), fontsize=7, frameon=False, borderaxespad=0.2,
                    handlelength=1.2)
    return fig


def _distinct(*cols: np.ndarray) -> list[tuple[int, ...]]:
    """The distinct rows of the columns, sorted (a lexsort: `np.unique(axis=0)` is slow)."""
    if not len(cols[0]):
        return []
    order = np.lexsort(cols[::-1])
    sorted_cols = [k[order] for k in cols]
    starts = group_starts(*sorted_cols)
    return list(zip(*(k[starts].tolist() for k in sorted_cols)))


def _op_lane(lane_y: dict, o: dict) -> int | None:
    yy = lane_y.get((o["device"], o["block"], o["thread"], o["warp"]))
    if yy is None:
        yy = lane_y.get((o["device"], o["block"], o["thread"], -1))
    return yy


def _line_handle(marker, label, color=OKABE_ITO["black"]):
    from matplotlib.lines import Line2D

    if marker is None:
        return Line2D([], [], color=color, lw=2.2, label=label)
    return Line2D([], [], ls="", marker=marker, color=color, ms=7, label=label)


def _rects(x0, x1, y0, h) -> np.ndarray:
    x0 = np.asarray(x0, dtype=float)
    x1 = np.maximum(np.asarray(x1, dtype=float), x0 + 0.6)  # at least visible
    y1 = y0 + h * 0.92
    return np.stack([np.column_stack([x0, y0]), np.column_stack([x0, y1]),
                     np.column_stack([x1, y1]), np.column_stack([x1, y0])], axis=1)


def _pack_lanes(lane: np.ndarray, begin: np.ndarray, end: np.ndarray, n_lanes: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """Sub-row of each bar in its lane (overlapping bars stacked), and rows per lane."""
    sub = np.zeros(len(lane), dtype=np.int64)
    n_sub = np.ones(max(1, n_lanes), dtype=np.int64)
    order = np.lexsort((begin, lane))
    free: list[tuple[int, int]] = []  # heap of (end, row) of the current lane
    current, rows_used = -1, 0
    for i in order.tolist():
        ln = int(lane[i])
        if ln != current:
            if current >= 0:
                n_sub[current] = max(1, rows_used)
            current, free, rows_used = ln, [], 0
        b = int(begin[i])
        if free and free[0][0] <= b:
            _, row = heapq.heappop(free)
        else:
            row = rows_used
            rows_used += 1
        sub[i] = row
        heapq.heappush(free, (int(end[i]), row))
    if current >= 0:
        n_sub[current] = max(1, rows_used)
    return sub, n_sub


def _message(trace, head: str):
    from .png import TraceFigure

    fig = TraceFigure(figsize=(8, 0.8), dpi=100)
    fig.text(0.01, 0.8, head, fontsize=10, weight="bold", va="top", parse_math=False)
    return fig


def plot_memory(trace, kernel: int | None = None, device: str | Device = "h100",
                max_blocks: int = 64):
    """Live SMEM (and TMEM columns, if any) of `kernel`'s blocks over the steps.

    The limit of `device` is drawn as a line; the peak is `block_budgets`' (its worst
    block, its step, the line that reached it and the buffers live then), marked on the
    worst block's curve. At most `max_blocks` curves are drawn: the worst block's, then
    the first in grid order. Gids: `smem-curves` (the other blocks), `smem-worst`,
    `smem-limit`, `smem-peak` (a one-point scatter at (step, peak)), `smem-peak-label`,
    and the same with `tmem-`.
    """
    from matplotlib.collections import LineCollection

    from ..analysis.budget import describe_live, format_bytes, kernel_budgets
    from .png import TraceFigure, short_file

    trace.require_kernels("plot")
    kernel = _kernel_arg(trace, kernel)
    if kernel is None:
        return _message(trace, "no kernel ran: JAX rejected it while tracing")
    if max_blocks < 1:
        raise ValueError(f"max_blocks must be at least 1, not {max_blocks}")
    target = get_device(device)
    table = trace.events
    budgets = _budgets(trace, kernel, target)
    kbs = kernel_budgets(budgets)
    if not kbs:
        return _message(trace, f"kernel {kernel}: no SMEM, TMEM or registers allocated")
    kb = kbs[0]
    info = trace.kernels[kernel]
    spaces = ["SMEM", "TMEM"] if any(b.tmem.peak > 0 for b in budgets) else ["SMEM"]
    real = [b for b in budgets if b.block is not None]
    index_of = {b: i for i, b in enumerate(table.blocks)}

    fig_w, title_h, head_h, ax_h, gap, left = 9.0, 0.45, 0.62, 2.0, 0.35, 1.0
    fig_h = title_h + len(spaces) * (head_h + ax_h + gap) + 0.2
    fig = TraceFigure(figsize=(fig_w, fig_h), dpi=100)
    name = f" {one_line(info.name)}" if info.name else ""
    fig.text(0.1 / fig_w, 1 - 0.1 / fig_h, f"kernel {kernel}{name}: live memory per block "
             f"({target.name}{', ' + target.arch if target.arch else ''})", fontsize=10,
             weight="bold", va="top", parse_math=False)
    y = fig_h - title_h
    for space in spaces:
        low = space.lower()
        worst = kb.worst(space)
        sp = worst.space(space)
        drawn = ([worst] if worst.block is not None else []) + [b for b in real
                                                               if b is not worst]
        drawn = drawn[:max_blocks]
        keys = [(kernel, b.device, index_of[b.block]) for b in drawn]
        curves = live_memory(table, [kernel], target, keys) if keys else {}
        segs = [_step_segments(*curves[k][space]) for k in keys if k in curves]

        # header: what is drawn, then the peak (step, line, live buffers)
        n_total = len(real)
        if worst.block is None:
            note = "kernel-level allocations only: every block holds them all run long"
        else:
            note = f"{len(drawn)} of {n_total} block{'s' if n_total != 1 else ''}"
            if len(drawn) < n_total:
                note += " drawn (the worst in colour, then the first in grid order)"
            elif n_total > 1:
                note += " (the worst in colour)"
        fig.text(0.1 / fig_w, (y - 0.05) / fig_h, f"{space}: {note}", fontsize=8,
                 weight="bold", va="top", parse_math=False)
        if sp.step >= 0:
            amount = format_bytes(sp.peak) if space == "SMEM" else f"{sp.peak} columns"
            pct = f" ({100 * sp.peak / sp.limit:.0f} % of the limit)" if sp.limit > 0 else ""
            src = next((x.source for x in sorted(sp.live, key=lambda x: x.event != sp.step)
                        if x.source is not None), None)
            at = f", line {src.line} ({short_file(src)})" if src is not None else ""
            where = block_text(worst.block) if worst.block is not None else "every block"
            live = [_shorten_paths(x) for x in describe_live(sp.live)]
            more = f"; +{len(live) - 3} more" if len(live) > 3 else ""
            text = (f"peak {amount}{pct} in block {where} at step {sp.step}{at}\n"
                    + _clip("live then: " + "; ".join(live[:3]) + more, 150))
        elif sp.peak > 0:
            amount = format_bytes(sp.peak) if space == "SMEM" else f"{sp.peak} columns"
            what = ", the TMEM address slot" if sp.overhead == sp.peak else ""
            text = f"{amount} held all run long{what}"
        else:
            text = f"no {space} allocated"
        fig.text(0.1 / fig_w, (y - 0.25) / fig_h, text, fontsize=7, va="top", color="#333",
                 parse_math=False, gid=f"{low}-peak-label")
        y -= head_h
        ax = fig.add_axes((left / fig_w, (y - ax_h) / fig_h, (fig_w - left - 0.3) / fig_w,
                           ax_h / fig_h))
        y -= ax_h + gap
        if len(segs) > 1 or (segs and worst.block is None):
            ax.add_collection(LineCollection(segs[1:] if worst.block is not None else segs,
                                             colors="#a0a0a0", linewidths=0.8,
                                             gid=f"{low}-curves"))
        if segs and worst.block is not None:
            ax.add_collection(LineCollection(segs[:1], colors=OKABE_ITO["blue"],
                                             linewidths=1.6, gid=f"{low}-worst", zorder=3))
        limit = target.smem_per_block if space == "SMEM" else target.tmem_columns
        if limit > 0:
            ax.axhline(limit, color=LIMIT_COLOR, ls="--", lw=1.0, gid=f"{low}-limit")
            what = _kib(limit) if space == "SMEM" else f"{limit} columns"
            ax.text(0.995, limit, f"limit {what} ({target.name})",
                    transform=ax.get_yaxis_transform(), ha="right", va="bottom", fontsize=7,
                    color=LIMIT_COLOR)
        else:
            ax.text(0.995, 0.9, f"{target.name} has no TMEM", transform=ax.transAxes,
                    ha="right", va="top", fontsize=8, color=LIMIT_COLOR)
        xs = [s[:, 0] for s in segs if len(s)]
        x_lo = min([float(x.min()) for x in xs] + ([sp.step] if sp.step >= 0 else []),
                   default=0.0)
        x_hi = max([float(x.max()) for x in xs] + ([sp.step] if sp.step >= 0 else []),
                   default=1.0)
        if sp.step >= 0:
            ax.scatter([sp.step], [sp.peak], marker="o", s=40, c=FINDING_COLOR, zorder=5,
                       edgecolors="white", gid=f"{low}-peak")
        pad = max(1.0, 0.01 * (x_hi - x_lo))
        ax.set_xlim(x_lo - pad, x_hi + pad)
        ymax = max(limit, sp.peak, max((float(s[:, 1].max()) for s in segs if len(s)),
                                       default=0), 1)
        ax.set_ylim(0, ymax * 1.12)
        if space == "SMEM":
            _kib_axis(ax, ymax * 1.12)
        ax.set_ylabel(f"live {space}" + (" (columns)" if space == "TMEM" else ""),
                      fontsize=8)
        ax.tick_params(labelsize=7, length=2)
        ax.grid(color="#eee", lw=0.5)
        ax.set_xlabel("step (event row in recording order; no wall clock)", fontsize=7)
    return fig


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def _shorten_paths(text: str) -> str:
    """`/long/path/to/file.py:141:3` -> `file.py:141:3` in a live-buffer description."""
    import re

    return re.sub(r"(?<= at )\S*/([^/\s]+:\d+(?::\d+)?)", r"\1", text)


def _kib_axis(ax, ymax: float) -> None:
    """Ticks at a power-of-two number of KiB (bytes below 1 KiB), labelled in KiB."""
    from matplotlib.ticker import FuncFormatter, MultipleLocator

    if ymax < 1024:
        return
    step = 1024 * 2 ** max(0, math.ceil(math.log2(ymax / 1024 / 6)))
    ax.yaxis.set_major_locator(MultipleLocator(step))
    ax.yaxis.set_major_formatter(FuncFormatter(_kib))


__all__ = [
    "KIND_COLORS", "OKABE_ITO", "allocation_name", "barrier_ops_of", "block_text",
    "kernel_last_rows", "live_memory", "pair_waits", "plot_memory", "plot_timeline",
    "thread_holds",
]

