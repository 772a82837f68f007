"""Trace -> the widget's state: small JSON metadata plus columnar binary buffers.

The grid and the replay only need a few numbers per event, so they travel as
typed little-endian arrays (at most 16 bytes per event: each integer column gets the
narrowest type its values fit). The front end also gets what it needs to list a cell's
events and show a line without asking Python (`front_end_state`: detail columns, string
tables, source snippets), so a restarted or dead kernel changes nothing; past
`INLINE_DETAILS_MAX_EVENTS` events the details stay in Python and are fetched on demand.

The protocol is defined here once: `meta["protocol"]` names the op codes, the column
types, the cell flags, the layout of an event row and the limits; js/protocol.js reads it
(tests/test_frontend.py runs this payload through the JS decoder).
"""

from __future__ import annotations

import numpy as np

from ..cells import cluster_dims
from ..model import MEMORY_SPACES, OPS, RESOURCES, SourceLocation
from ..store import OP_CODE, EventTable
from .source_names import describe_location, file_label

PROTOCOL_VERSION = 2
# Cell flags (bit mask), sent in meta["protocol"]["flags"].
COLLECTIVE, WARNING, ERROR, FAILED = 1, 2, 4, 8
MAX_FINDING_EVENTS = 10_000
MAX_RELATED = 16  # related lines sent per finding (the text summary shows 4)
MAX_ROWS_PER_REPLY = 2000
# Up to this many events the widget's state carries the detail columns, string tables and
# snippets (answered in the browser); beyond it, details come from Python on demand.
INLINE_DETAILS_MAX_EVENTS = 2_000_000
REQUEST_TIMEOUT_MS = 8000
# Divergence views sent per root cause (blocks of its cells) and rows per view; past
# ALIGN_MAX_EVENTS events the front end aligns a block itself from the detail columns
# (`block_alignment` scans the whole table per block).
MAX_ALIGNED_BLOCKS = 4
MAX_ALIGNED_ROWS = 400
ALIGN_MAX_EVENTS = 200_000
# Fold runs of at least this many alike blocks into one row.
FOLD_MIN_RUN = 3
# The fields of one event row (a reply to an "events" request), in order.
EVENT_ROW = ("seq", "thread_seq", "op", "resource", "space", "warp", "shape", "dtype",
             "nbytes", "buffer_id", "ref_count", "initial_ref_count", "alloc", "source")
CELL_TYPES = {"row": "<i4", "thread": "<i4", "flags": "<u1"}

# Per-event columns sent up front: name -> widest dtype (the default in js/data.js).
EVENT_COLUMNS = {
    "op": "<u1",
    "resource": "<u1",
    "space": "<i1",
    "warp": "<i1",
    "cell": "<i4",  # index into cells, -1 for kernel-level requests (operands)
    "alloc": "<i4",
    "nbytes": "<u4",
}
# Extra per-event columns the standalone HTML embeds to answer detail requests itself.
DETAIL_COLUMNS = {
    "thread_seq": "<i4",
    "shape": "<i4",
    "dtype": "<i2",
    "buffer_id": "<i4",
    "ref_count": "<i4",
    "initial_ref_count": "<i4",
    "source": "<i4",
}
# Narrower types tried first, per column (the last one is the column's widest type).
_NARROWER = {"<i4": ("<i1", "<i2", "<i4"), "<i2": ("<i1", "<i2"), "<u4": ("<u1", "<u2", "<u4")}
_NARROWED = {"cell", "alloc", "nbytes"}


def _buf(a: np.ndarray, dtype: str) -> memoryview:
    return memoryview(np.ascontiguousarray(a, dtype=dtype)).cast("B")


def narrowest(a: np.ndarray, widest: str) -> str:
    """The narrowest little-endian integer type (up to `widest`) holding every value of `a`."""
    choices = _NARROWER.get(widest, (widest,))
    if len(a) == 0:
        return choices[0]
    lo, hi = int(a.min()), int(a.max())
    for dt in choices:
        info = np.iinfo(np.dtype(dt))
        if info.min <= lo and hi <= info.max:
            return dt
    return widest


def _loc(loc: SourceLocation | None) -> dict | None:
    if loc is None:
        return None
    d = {"file": loc.file, "line": loc.line, "column": loc.column,
         "function": loc.function, "code": loc.code,
         "name": file_label(loc.file), "label": describe_location(loc.file, loc.line)}
    if loc.via is not None:  # (the call in the traced function that led to a helper's line)
        d["via"] = _loc(loc.via)
    return d


class CellIndex:
    """Rows (kernel, device, block) x thread columns, and each event's cell."""

    def __init__(self, trace):
        t: EventTable = trace.events
        c = t.columns
        n = len(t)
        # kernel-level requests (block -1) have no cell; a kernel without a grid has one
        # block, `()`, and one row like any other
        inb = c["block"] >= 0
        kernel = c["kernel"].astype(np.int64)
        device = c["device"].astype(np.int64)
        block = c["block"].astype(np.int64)
        nb = max(len(t.blocks), 1)
        nd = int(device.max()) + 1 if n else 1
        key = (kernel * nd + device) * nb + block
        ukeys, inverse = np.unique(key[inb], return_inverse=True)
        # Rows sorted by kernel, device, then block coordinates (not interning order).
        rows = [(int(k // (nb * nd)), int(k // nb % nd), int(k % nb)) for k in ukeys.tolist()]
        order = sorted(range(len(rows)), key=lambda i: (rows[i][0], rows[i][1],
                                                        t.blocks[rows[i][2]]))
        rank = np.empty(len(rows), np.int64)
        rank[order] = np.arange(len(rows))
        self.rows = [rows[i] for i in order]  # (kernel, device, block index)
        kinfo = {k.index: k for k in trace.kernels}
        thread = c["thread"].astype(np.int64)
        self.threads = {}  # kernel -> thread columns
        for k in {r[0] for r in self.rows}:
            kr = t.kernel_rows(k)
            kt = thread[kr][inb[kr]]
            seen = int(kt.max()) + 1 if len(kt) else 1
            tpb = kinfo[k].threads_per_block if k in kinfo else 1
            self.threads[k] = max(seen, tpb, 1)
        widths = np.array([self.threads[r[0]] for r in self.rows], np.int64)
        self.row_start = np.concatenate([[0], np.cumsum(widths)]).astype(np.int64)
        self.num_cells = int(self.row_start[-1])
        self.cell_row = np.repeat(np.arange(len(self.rows)), widths).astype(np.int32)
        self.cell_thread = (np.arange(self.num_cells) - self.row_start[self.cell_row]).astype(
            np.int32)
        self.event_cell = np.full(n, -1, np.int64)
        if inb.any():
            row_of = rank[inverse]
            self.event_cell[inb] = self.row_start[row_of] + thread[inb]
        self._lookup = {}
        for r, (k, d, b) in enumerate(self.rows):
            for th in range(self.threads[k]):
                self._lookup[(k, d, t.blocks[b], th)] = int(self.row_start[r]) + th

    def cell_of(self, kernel: int | None, device: int, block: tuple | None,
                thread: int) -> list[int]:
        """Cell indices of (device, block, thread), in one kernel or (None) in all."""
        if block is None:
            return []  # a kernel-level request has no cell
        kernels = self.threads if kernel is None else [kernel]
        out = []
        for k in kernels:
            i = self._lookup.get((k, device, tuple(block), thread))
            if i is not None:
                out.append(i)
        return out

    def seqs(self, cell: int) -> np.ndarray:
        """The events of one cell, in recording order."""
        return np.flatnonzero(self.event_cell == cell)


def _row_meta(trace, index: CellIndex) -> tuple[list[dict], list[dict]]:
    from ..analysis.blocks import block_fingerprints

    t = trace.events
    fps = block_fingerprints(t)
    kinfo = {k.index: k for k in trace.kernels}
    blocks_of: dict[int, list] = {}
    for kk, _, b in index.rows:
        blocks_of.setdefault(kk, []).append(t.blocks[b])
    kernels = []
    for k in sorted(index.threads):
        info = kinfo.get(k)
        blocks = blocks_of.get(k, [])
        kernels.append({
            "index": k,
            "name": info.name if info else None,
            "launch": _loc(info.launch) if info else None,
            "threads": index.threads[k],
            "num_devices": info.num_devices if info else 1,
            "blocks_per_cluster": info.blocks_per_cluster if info else 1,
            "cluster_dims": cluster_dims(blocks, info.blocks_per_cluster if info else 1),
            "thread_axis": (info.thread_axis if info else None) or "thread",
        })
    c = t.columns
    for kd in kernels:
        rows = t.kernel_rows(kd["index"])
        seqs = rows[index.event_cell[rows] < 0]  # kernel-level: operands
        m = seqs[c["op"][seqs] == OP_CODE["create"]]
        kd["operands"] = {"buffers": len(m), "bytes": int(c["nbytes"][m].sum()),
                          "events": len(seqs), "seqs": seqs[:MAX_ROWS_PER_REPLY].tolist()}
    cdims = {k["index"]: k["cluster_dims"] for k in kernels}
    multi_dev = {k["index"]: k["num_devices"] > 1 for k in kernels}
    rows = []
    for r, (k, d, b) in enumerate(index.rows):
        block = list(t.blocks[b])
        nc = cdims[k]
        grid, cl = block[:len(block) - nc], block[len(block) - nc:]
        label = "(" + ", ".join(map(str, grid)) + ")" if grid else "(no grid)"
        if nc:
            label += " c(" + ", ".join(map(str, cl)) + ")"
        if multi_dev[k]:
            label = f"d{d} " + label
        rows.append({"kernel": k, "device": d, "block": block, "grid": grid, "cluster": cl,
                     "label": label, "start": int(index.row_start[r]),
                     "fp": fps.get((k, d, b), -1)})
    return kernels, rows


def _cell_flags(trace, index: CellIndex) -> np.ndarray:
    c = trace.events.columns
    flags = np.zeros(index.num_cells, np.uint8)
    ev = index.event_cell
    request = (c["op"] == OP_CODE["create"]) | (c["op"] == OP_CODE["join"])
    coll = ev[(ev >= 0) & request & (c["initial_ref_count"] > 1)]
    flags[coll] |= COLLECTIVE
    failed = ev[(ev >= 0) & (c["op"] == OP_CODE["error"])]
    flags[failed] |= FAILED
    for root in trace.findings:
        for f in [root, *root.consequences]:
            bit = ERROR if f.severity == "error" else WARNING
            for d, b, th in f.cells:
                for i in index.cell_of(f.kernel, d, b, th):
                    flags[i] |= bit
    fl = trace.failure
    if fl is not None and fl.cell is not None:
        for i in index.cell_of(fl.kernel, *fl.cell):
            flags[i] |= FAILED
    return flags


def _finding(f, index: CellIndex) -> dict:
    cells = sorted({i for d, b, th in f.cells for i in index.cell_of(f.kernel, d, b, th)})
    rows = sorted({int(index.cell_row[i]) for i in cells})
    return {"rows": rows,
        "kind": f.kind, "severity": f.severity, "message": f.message,
        "suggestion": f.suggestion, "kernel": f.kernel, "cells": cells,
        "events": sorted(f.events)[:MAX_FINDING_EVENTS], "num_events": len(f.events),
        "source": _loc(f.source), "related": [_loc(r) for r in f.related[:MAX_RELATED]],
        # (with what to call it: `Finding.branch_label`)
        "branch": None if f.branch is None else {**_loc(f.branch), "role": f.branch_label},
        # threads that never made the request: their cell, and the event it belongs before
        "missing": [{"cell": i, "before": seq} for (d, b, th), seq in f.missing
                    for i in index.cell_of(f.kernel, d, b, th)],
    }


def _alignments(trace, index: CellIndex, rows: list[int], cache: dict) -> list[dict]:
    """The divergence view of the blocks of a root cause: per block row, each thread's
    request sequence aligned like a diff (`analysis.sequence.block_alignment`, sharing
    `cache` across the trace's findings)."""
    from ..analysis.sequence import block_alignment

    out = []
    if len(trace.events) > ALIGN_MAX_EVENTS:
        return out
    for r in rows[:MAX_ALIGNED_BLOCKS]:
        k, d, b = index.rows[r]
        info = trace.kernel_info(k)
        al = block_alignment(trace.events, k, d, b, cache,
                             threads=info.threads_per_block if info else 0)
        out.append({"row": r, "threads": al["threads"],
                    "rows": al["rows"][:MAX_ALIGNED_ROWS],
                    "truncated": len(al["rows"]) > MAX_ALIGNED_ROWS})
    return out


def _jsonable(v, depth: int = 0):
    """A JSON-safe copy of a small dict from the interpreter (the failing request)."""
    if depth > 4:
        return str(v)
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, dict):
        return {str(k): _jsonable(x, depth + 1) for k, x in list(v.items())[:50]}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x, depth + 1) for x in list(v)[:50]]
    return str(v)


def _merged(copies: list[dict]) -> dict:
    """One root cause seen in several runs of a kernel (`analysis.repeats.root_groups`):
    the first run's finding, with every run's cells, missing threads and events (lit
    whichever run the grid shows) and `runs`, the kernel runs that had it."""
    d = dict(copies[0])
    if len(copies) > 1:
        d["cells"] = sorted({i for c in copies for i in c["cells"]})
        d["rows"] = sorted({r for c in copies for r in c["rows"]})
        d["missing"] = [m for c in copies for m in c["missing"]]
        d["events"] = sorted({e for c in copies for e in c["events"]})[:MAX_FINDING_EVENTS]
        d["num_events"] = sum(c["num_events"] for c in copies)
    d["runs"] = [c["kernel"] for c in copies if c["kernel"] is not None]
    return d


def _findings(trace, index: CellIndex) -> list[dict]:
    """The root causes, each once however many runs of a kernel had it; each carries its
    consequences (cells lit in a secondary style)."""
    from ..analysis.repeats import root_groups

    out = []
    cache: dict = {}  # the table's sequences, computed once for every finding's blocks
    for group in root_groups(trace.findings, trace.kernels):
        fs = [trace.findings[i] for i in group]
        d = _merged([_finding(f, index) for f in fs])
        d["consequences"] = [_merged([_finding(f.consequences[j], index) for f in fs])
                             for j in range(len(fs[0].consequences))]
        own = set(d["cells"])
        d["consequence_cells"] = sorted(
            {i for c in d["consequences"] for i in c["cells"]} - own)
        d["alignments"] = _alignments(trace, index, d["rows"], cache)
        out.append(d)
    return out


def protocol(column_types: dict, detail_types: dict | None = None) -> dict:
    """What the front end must not hard-code: codes, types, row layout, limits."""
    return {
        "version": PROTOCOL_VERSION,
        "ops": list(OPS), "resources": list(RESOURCES), "spaces": list(MEMORY_SPACES),
        "flags": {"collective": COLLECTIVE, "warning": WARNING, "error": ERROR,
                  "failed": FAILED},
        "column_types": dict(column_types),
        "cell_types": dict(CELL_TYPES),
        "detail_types": dict(detail_types) if detail_types else {},
        "event_row": list(EVENT_ROW),
        "limits": {"rows_per_reply": MAX_ROWS_PER_REPLY,
                   "finding_events": MAX_FINDING_EVENTS,
                   "inline_details_max_events": INLINE_DETAILS_MAX_EVENTS,
                   "request_timeout_ms": REQUEST_TIMEOUT_MS,
                   "aligned_blocks": MAX_ALIGNED_BLOCKS, "aligned_rows": MAX_ALIGNED_ROWS,
                   "fold_min_run": FOLD_MIN_RUN},
    }


def build_state(trace, index: CellIndex | None = None) -> dict:
    """The widget's synced state: `{"meta": <json>, "columns": {...}, "cells": {...}}`.

    Buffers are `memoryview`s (binary widget buffers; `DataView` in JS).
    """
    index = index or CellIndex(trace)
    t = trace.events
    c = t.columns
    kernels, rows = _row_meta(trace, index)
    fl = trace.failure
    stats = []
    for s in trace.stats():
        stats.append({"kernel": s.kernel, "events": s.events, "blocks": s.blocks,
                      "threads": s.threads, "buffers": s.buffers, "bytes": s.bytes,
                      "barriers": s.barriers, "cluster_barriers": s.cluster_barriers,
                      "cut_short": s.cut_short})
    meta = {
        "version": 1,
        "num_events": len(t),
        "unplaced_events": trace.unplaced_events(),
        "num_cells": index.num_cells,
        "ops": list(OPS), "resources": list(RESOURCES), "spaces": list(MEMORY_SPACES),
        "kernels": kernels,
        "rows": rows,
        "stats": stats,
        "findings": _findings(trace, index),
        "failure": None if fl is None else {
            "type": fl.type, "message": fl.message, "kernel": fl.kernel,
            "cells": [] if fl.cell is None else index.cell_of(fl.kernel, *fl.cell),
            "source": _loc(fl.source), "phase": fl.phase, "in_body": fl.in_body,
            "warp": fl.warp,
            "request": _jsonable(fl.request)},
        "flags": {"collective": COLLECTIVE, "warning": WARNING, "error": ERROR,
                  "failed": FAILED},
    }
    values = {
        "op": c["op"],
        "resource": c["resource"],
        "space": c["memory_space"],
        "warp": np.clip(c["warp"], -1, 127),
        "cell": index.event_cell,
        "alloc": np.clip(c["allocation"], -1, 2**31 - 1),
        "nbytes": np.clip(c["nbytes"], 0, 2**32 - 1),
    }
    meta["timeline"] = timeline_state(trace, index)
    types = {k: narrowest(values[k], t) if k in _NARROWED else t
             for k, t in EVENT_COLUMNS.items()}
    meta["column_types"] = types
    meta["protocol"] = protocol(types)
    columns = {k: _buf(values[k], types[k]) for k in EVENT_COLUMNS}
    cells = {
        "row": _buf(index.cell_row, CELL_TYPES["row"]),
        "thread": _buf(index.cell_thread, CELL_TYPES["thread"]),
        "flags": _buf(_cell_flags(trace, index), CELL_TYPES["flags"]),
    }
    return {"meta": meta, "columns": columns, "cells": cells}


BARRIER_OP_KINDS = ("arrive", "wait_start", "wait_end")


def _packed(a, dtype: str = "<i4") -> list:
    """`[dtype, base64]` of a little-endian integer array (in the JSON metadata, so that the
    HTML export, which embeds `meta`, carries it too)."""
    import base64

    arr = np.ascontiguousarray(np.asarray(a), dtype=dtype)
    return [dtype, base64.b64encode(arr.tobytes()).decode("ascii")]


def timeline_state(trace, index: CellIndex) -> dict:
    """What the widget's timeline pane draws, computed by the timeline plot's own helpers
    (`render.timeline`): each thread's holds (`thread_holds`: request row, release row or -1),
    every block row's live SMEM / TMEM curve (`live_memory`, counted as `block_budgets`
    counts) with its peak, the barrier operations (`barrier_ops_of`, waits paired by
    `pair_waits`) placed in their cells, and the device whose limits the curves are drawn
    against (`analysis.context.resolve_device`). Arrays travel as `[dtype, base64]`."""
    from ..analysis.context import resolve_device
    from ..devices import get_device
    from .timeline import barrier_ops_of, live_memory, pair_waits, thread_holds

    t = trace.events
    c = t.columns
    meta = getattr(trace, "meta", None) or {}
    name = resolve_device(meta.get("device"), t)
    try:
        dev = get_device(name)
    except (KeyError, ValueError):
        name = "h100"
        dev = get_device(name)
    holds = thread_holds(t, c["block"] >= 0)
    live = live_memory(t, device=dev) if len(t) else {}
    nrows = len(index.rows)
    offs = {"SMEM": [0], "TMEM": [0]}
    parts = {"SMEM": ([], []), "TMEM": ([], [])}
    peaks = np.full((nrows, 4), -1, np.int64)  # SMEM peak, its step, TMEM peak, its step
    for r, key in enumerate(index.rows):
        spaces = live.get(key)
        for j, sp in enumerate(("SMEM", "TMEM")):
            steps, values = spaces[sp] if spaces else (np.zeros(0, np.int64),) * 2
            parts[sp][0].append(steps)
            parts[sp][1].append(values)
            offs[sp].append(offs[sp][-1] + len(steps))
            if len(values):
                i = int(np.argmax(values))
                peaks[r, 2 * j], peaks[r, 2 * j + 1] = int(values[i]), int(steps[i])
    curves = {}
    for sp in ("SMEM", "TMEM"):
        st = np.concatenate(parts[sp][0]) if parts[sp][0] else np.zeros(0, np.int64)
        va = np.concatenate(parts[sp][1]) if parts[sp][1] else np.zeros(0, np.int64)
        curves[sp] = {"offsets": _packed(offs[sp]), "steps": _packed(st),
                      "values": _packed(np.clip(va, 0, 2**31 - 1))}
    ops = barrier_ops_of(trace)
    pos = {id(o): i for i, o in enumerate(ops)}
    wait_end = np.full(len(ops), -1, np.int64)
    for start, stop in pair_waits(ops):
        if stop is not None:
            wait_end[pos[id(start)]] = stop["step"]
    op_cell = np.full(len(ops), -1, np.int64)
    for i, o in enumerate(ops):
        cells = index.cell_of(o["kernel"], o["device"], o["block"], o["thread"])
        if cells:
            op_cell[i] = cells[0]
    return {
        "peak": peak_state(trace, index, name),
        "device": {"name": dev.name, "preset": name, "smem_per_block": int(dev.smem_per_block),
                   "tmem_columns": int(dev.tmem_columns), "has_tmem": bool(dev.has_tmem)},
        "holds": {"count": len(holds["begin"]), "begin": _packed(holds["begin"]),
                  "end": _packed(holds["end"])},
        "live": {"SMEM": curves["SMEM"], "TMEM": curves["TMEM"],
                 "peaks": _packed(np.clip(peaks, -1, 2**31 - 1).ravel())},
        "barriers": {"count": len(ops), "kinds": list(BARRIER_OP_KINDS),
                     "step": _packed([o["step"] for o in ops]),
                     "kind": _packed([BARRIER_OP_KINDS.index(o["kind"]) for o in ops], "<i1"),
                     "cell": _packed(op_cell), "warp": _packed([o["warp"] for o in ops]),
                     "end": _packed(wait_end)},
    }


MAX_PEAK_ROWS = 200  # buffers listed per block and space (largest first)


def peak_state(trace, index: CellIndex, device: str) -> dict:
    """The buffers live at each block row's SMEM, TMEM and REGS peak (`analysis.budget`'s
    `SpacePeak.live`, largest first) and the peak against the device's limit in words
    (`budget.peak_text`). Buffers alike in all but their event share a `kinds` entry
    (space, resource, shape, dtype, bytes, what it counts for, line, kernel-level);
    per space, packed by row: `text` (index into `texts`, -1: nothing live), `overhead`
    (counted but no buffer: the TMEM address slot), `offsets` into `event` (each live
    buffer's create row) and `kind`. The listed buffers plus the overhead add up to the
    peak (past `MAX_PEAK_ROWS` per row, `more` counts the rest)."""
    from ..analysis.budget import block_budgets, peak_line, peak_text

    t = trace.events
    if hasattr(trace, "budget"):
        budgets = trace.budget(device)
    else:
        budgets = block_budgets(t, trace.kernels, device)
    by_key = {(b.kernel, b.device, b.block): b for b in budgets}
    row_budgets = [by_key.get((k, d, t.blocks[b])) for k, d, b in index.rows]
    texts: list[str] = []
    text_ix: dict[tuple, int] = {}
    kinds: list[dict] = []
    kind_ix: dict[tuple, int] = {}
    out = {}
    for space in ("SMEM", "TMEM", "REGS"):
        attr = space.lower()
        n = len(row_budgets)
        text, overhead, more = [-1] * n, [0] * n, [0] * n
        offsets, events, kind = [0] * (n + 1), [], []
        for r, bb in enumerate(row_budgets):
            sp = getattr(bb, attr) if bb is not None else None
            if sp is not None and sp.peak > 0:
                # peak_text depends on these only: blocks alike share one text
                tkey = (sp.peak, sp.limit, peak_line(sp), bb.target)
                ti = text_ix.get(tkey)
                if ti is None:
                    ti = text_ix[tkey] = len(texts)
                    texts.append(peak_text(sp, bb.target))
                text[r] = ti
                overhead[r] = sp.overhead
                more[r] = max(0, len(sp.live) - MAX_PEAK_ROWS)
                for x in sp.live[:MAX_PEAK_ROWS]:
                    # the table's SourceLocation objects are shared: their identity will do
                    key = (x.memory_space, x.resource, x.shape, x.dtype, x.nbytes, x.charge,
                           id(x.source), x.kernel_level)
                    ki = kind_ix.get(key)
                    if ki is None:
                        ki = kind_ix[key] = len(kinds)
                        kinds.append({
                            "space": x.memory_space, "resource": x.resource,
                            "shape": None if x.shape is None else "(" + ", ".join(
                                map(str, x.shape)) + ("," if len(x.shape) == 1 else "") + ")",
                            "dtype": x.dtype, "nbytes": int(x.nbytes),
                            "charge": int(x.charge), "size": x.size_text(),
                            "narrow": x.narrow, "source": _loc(x.source),
                            "kernel_level": x.kernel_level})
                    events.append(x.event)
                    kind.append(ki)
            offsets[r + 1] = len(events)
        arrays = {"text": text, "overhead": overhead, "more": more, "offsets": offsets,
                  "event": events, "kind": kind}
        out[space] = {k: _packed(v, narrowest(np.asarray(v, np.int64), "<i4"))
                      for k, v in arrays.items()}
    return {"texts": texts, "kinds": kinds, "max_rows": MAX_PEAK_ROWS, **out}


def front_end_state(trace, index: CellIndex | None = None) -> dict:
    """The widget's whole state: `build_state` plus, up to `INLINE_DETAILS_MAX_EVENTS`
    events, the detail columns, string tables and snippets that let the browser list a
    cell's events and show any line the trace names without the kernel."""
    from ..snippets import locations
    from .source_names import snippet

    state = build_state(trace, index)
    meta = state["meta"]
    if len(trace.events) <= INLINE_DETAILS_MAX_EVENTS:
        details, types = detail_columns(trace)
        state["details"] = details
        meta["protocol"]["detail_types"] = types
        state["tables"] = string_tables(trace)
        snips = {}
        for loc in locations(trace):
            key = f"{loc.file}:{loc.line}"
            if key not in snips:
                snips[key] = snippet(trace, loc.file, loc.line)
        state["snippets"] = snips
        meta["inline_details"] = True
    else:
        meta["inline_details"] = False
    return state


def detail_columns(trace) -> tuple[dict[str, memoryview], dict[str, str]]:
    """Per-event columns for answering detail requests without Python (HTML export):
    `(buffers, types)`, each column in the narrowest integer type that holds it."""
    c = trace.events.columns
    src = {
        "thread_seq": c["thread_seq"], "shape": c["shape"], "dtype": c["dtype"],
        "buffer_id": np.clip(c["buffer_id"], -2**31, 2**31 - 1), "ref_count": c["ref_count"],
        "initial_ref_count": c["initial_ref_count"], "source": trace.events.lines_with_calls()[0],
    }
    types = {k: narrowest(np.asarray(v), DETAIL_COLUMNS[k]) for k, v in src.items()}
    return {k: _buf(v, types[k]) for k, v in src.items()}, types


def string_tables(trace) -> dict:
    """Shapes, dtypes and source locations (indexed by the detail columns)."""
    t = trace.events
    return {
        "shapes": ["(" + ", ".join(map(str, s)) + ("," if len(s) == 1 else "") + ")"
                   for s in t.shapes],
        "dtypes": list(t.dtypes),
        "sources": [_loc(s) for s in t.lines_with_calls()[1]],
    }


def event_rows(trace, seqs) -> dict:
    """Detail rows for events `seqs` (the reply to a widget's "events" request).

    Each row: seq, thread_seq, op, resource, space, warp, shape, dtype, nbytes,
    buffer_id, ref_count, initial_ref_count, allocation, source index. `sources`
    maps the source indices used to their locations.
    """
    t = trace.events
    c = t.columns
    tables = None
    shown_index, shown = t.lines_with_calls()  # (each event's line with its call)
    rows, sources = [], {}
    for i in np.asarray(seqs, dtype=np.int64).tolist():
        sh, dt, so = int(c["shape"][i]), int(c["dtype"][i]), int(shown_index[i])
        sp = int(c["memory_space"][i])
        w = int(c["warp"][i])
        if sh >= 0 and tables is None:
            tables = string_tables(trace)["shapes"]
        rows.append([
            i, int(c["thread_seq"][i]), OPS[c["op"][i]], RESOURCES[c["resource"][i]],
            MEMORY_SPACES[sp] if sp >= 0 else None, None if w < 0 else w,
            tables[sh] if sh >= 0 else None, t.dtypes[dt] if dt >= 0 else None,
            int(c["nbytes"][i]), int(c["buffer_id"][i]), int(c["ref_count"][i]),
            int(c["initial_ref_count"][i]), int(c["allocation"][i]), so,
        ])
        if so >= 0 and so not in sources:
            sources[so] = _loc(shown[so])
    return {"rows": rows, "sources": {str(k): v for k, v in sources.items()}}


def payload_nbytes(state: dict) -> int:
    """Total size of the binary buffers in a state dict (details included when present)."""
    return sum(len(v) for part in ("columns", "cells", "details")
               for v in state.get(part, {}).values())
