"""A trace as Chrome / Perfetto trace-event JSON (ui.perfetto.dev, chrome://tracing).

The file is the JSON Object Format of the Trace Event Format: `{"traceEvents": [...],
"displayTimeUnit": "ns", "otherData": {...}}`. What is in it:

- one process per (kernel, device, block), named `kernel 0 collective_in_branch ·
  block (1)` (`(no grid)` for the one block of a kernel without a grid), and one per
  (kernel, device) named `... · kernel level` for the requests the interpreter makes for
  a whole device (operands; column `block` == -1);
- one track per thread of a block (per (thread, warp) where requests name a warp), named
  with the kernel's thread axis: `t 0`, `wg 2`. A track's slices must nest; a thread
  releases its collective buffers in the order it requested them, so holds that overlap
  without nesting go to extra tracks of the same thread, `t 0 (2)`, `t 0 (3)`, ...;
- a complete slice ("X") per allocation a thread holds, from its request (`create` or
  `join`) to its `release` (or the `free` of the last thread), or to the end of its
  kernel when it never releases it; named `SMEM (8, 128) float32`, `barrier`, ...; args:
  the allocation id, the request and release ops and steps, the ref counts after each,
  bytes, the kernel line, and `leaked` on a hold of an allocation never freed;
- counters ("C") per block: `live SMEM` (bytes) and, for kernels that use TMEM,
  `live TMEM` (columns), counted as `pallas_viz.analysis.budget.block_budgets` counts
  (see `pallas_viz.render.timeline.live_memory`);
- instant events ("i", thread scope): barrier operations (arrive, wait start, wait end),
  findings on their cells (`error[partial_collective] line 60`, consequences too, each
  naming its root), interpreter errors (`request failed`) and releases without a request.

Time: the trace has no wall clock. `ts` is the step, the event's row in recording
order, one step = 1 µs; durations count allocation events, not time (`otherData` says so).
"""

from __future__ import annotations

import json
import os

import numpy as np

from ..devices import Device, get_device
from ..model import OPS, Finding
from ..store import OP_CODE
from .timeline import (
    STEP_NOTE,
    allocation_name,
    barrier_ops_of,
    block_text,
    kernel_last_rows,
    kind_of,
    live_memory,
    pair_waits,
    thread_holds,
)

_PID0 = 1  # pids 1, 2, ...
_TID0 = 1_000_001  # tids never equal a pid (a tid equal to its pid is a main thread)
_ERROR = OP_CODE["error"]
_OP_NAMES = {"arrive": "barrier arrive", "wait_start": "barrier wait start",
             "wait_end": "barrier wait end"}


class _Ids:
    """pids per (kernel, device, block), tids per (pid, thread, warp, sub-track)."""

    def __init__(self):
        self.pids: dict[tuple, int] = {}
        self.tids: dict[tuple, int] = {}

    def pid(self, kernel: int, device: int, block) -> int:
        key = (kernel, device, block)
        if key not in self.pids:
            self.pids[key] = _PID0 + len(self.pids)
        return self.pids[key]

    def tid(self, pid: int, thread: int, warp: int, sub: int = 0) -> int:
        key = (pid, thread, warp, sub)
        if key not in self.tids:
            self.tids[key] = _TID0 + len(self.tids)
        return self.tids[key]


def _source_args(loc, function: bool = True) -> dict:
    if loc is None:
        return {}
    out = {"line": loc.short()}
    if function and loc.function:
        out["function"] = loc.function
    if loc.code:
        out["code"] = loc.code.strip()
    return out


def _finding_name(f: Finding) -> str:
    line = f" line {f.source.line}" if f.source is not None else ""
    return f"{f.severity}[{f.kind}]{line}"


def perfetto_dict(trace, kernel: int | None = None, barrier_ops=None,
                  device: str | Device = "h100") -> dict:
    """The trace as a Chrome / Perfetto trace-event JSON object (see the module doc).

    `kernel`: one kernel (default: all). `barrier_ops`: barrier operations as
    `pallas_viz.render.timeline.barrier_ops_of` reads them (default:
    `trace.meta["barrier_ops"]`, if any). `device`: the GPU whose counting the live
    memory counters follow (SMEM alignment).
    """
    trace.require_kernels("export a Perfetto trace of")
    if kernel is not None and not 0 <= kernel < len(trace.kernels):
        raise ValueError(f"kernel must be in 0..{len(trace.kernels) - 1}, not {kernel}")
    target = get_device(device)
    table = trace.events
    c = table.columns
    kernels = [kernel] if kernel is not None else [k.index for k in trace.kernels]
    if not kernels:  # events with no kernel info (hand-made traces)
        kernels = sorted(set(c["kernel"].tolist()))
    kset = set(kernels)
    kmask = np.isin(c["kernel"], np.array(kernels, dtype=np.int64))
    last = kernel_last_rows(table)
    ops = [o for o in barrier_ops_of(trace, barrier_ops) if o["kernel"] in kset]
    ids = _Ids()

    def info(k):
        return trace.kernels[k] if 0 <= k < len(trace.kernels) else None

    ends = {k: last.get(k, -1) + 1 for k in kernels}
    for o in ops:
        ends[o["kernel"]] = max(ends.get(o["kernel"], 0), o["step"] + 1)

    def end_of(k: int) -> int:
        """The end of kernel `k`: one step past its last event (or barrier operation)."""
        return ends.get(k, 0)

    events: list[dict] = []

    # -- slices: every hold of every thread
    h = thread_holds(table, kmask)
    begin, end = h["begin"], h["end"]
    cols = {k: c[k][begin].tolist() for k in (
        "kernel", "device", "block", "thread", "warp", "allocation", "op", "ref_count",
        "initial_ref_count", "nbytes")}
    end_op = [OPS[o] if e >= 0 else None for o, e in zip(
        c["op"][np.maximum(end, 0)].tolist(), end.tolist())]
    end_rc = c["ref_count"][np.maximum(end, 0)].tolist()
    # allocations the interpreter freed: a block's hold of one it never freed is marked
    freed = set(c["allocation"][kmask & (c["op"] == OP_CODE["free"])].tolist())
    kinds = kind_of(table, begin)
    names: dict[tuple, str] = {}  # (source, kind, shape, dtype) -> slice name
    src_args: dict[int, dict] = {}
    holds = []
    for i, (b, e) in enumerate(zip(begin.tolist(), end.tolist())):
        k = cols["kernel"][i]
        bi = cols["block"][i]
        pid = ids.pid(k, cols["device"][i], table.block(bi))
        stop = e if e >= 0 else end_of(k)
        holds.append((pid, cols["thread"][i], cols["warp"][i], b, stop, i))
    # tracks: a thread's slices nest on each of its tracks
    holds.sort(key=lambda x: (x[0], x[1], x[2], x[3], -x[4]))
    stacks: dict[tuple, list[list[int]]] = {}
    for pid, t, w, b, stop, i in holds:
        sub = _nesting_track(stacks.setdefault((pid, t, w), []), b, stop)
        r = int(begin[i])
        key = int(c["source"][r]), kinds[i], int(c["shape"][r]), int(c["dtype"][r])
        name = names.get(key)
        if name is None:
            name = names[key] = allocation_name(table, r)
        e = int(end[i])
        args = {
            "allocation": cols["allocation"][i], "request": OPS[cols["op"][i]],
            "request_step": b, "release": end_op[i] or "never (held at the kernel's end)",
            "release_step": e if e >= 0 else None,
            "ref_count_after_request": cols["ref_count"][i],
            "ref_count_after_release": end_rc[i] if e >= 0 else None,
            "initial_ref_count": cols["initial_ref_count"][i],
            "nbytes": cols["nbytes"][i],
        }
        if (cols["block"][i] >= 0 and cols["allocation"][i] >= 0
                and cols["allocation"][i] not in freed):
            # (a block's: the kernel's operands are the interpreter's to keep)
            args["leaked"] = (
                "never freed: the interpreter still held it when the kernel ended (live "
                "memory stops counting it when its scope ends, as a GPU frees a scope's "
                "memory then)")
        si = int(c["source"][r])
        if si >= 0:
            src = src_args.get(si)
            if src is None:
                src = src_args[si] = _source_args(table.sources[si], function=False)
            args.update(src)
        events.append({"ph": "X", "name": name, "cat": kinds[i], "pid": pid,
                       "tid": ids.tid(pid, t, w, sub), "ts": b, "dur": stop - b,
                       "args": args})

    # -- instants on threads: failed requests, releases without a request
    err_rows = np.flatnonzero(kmask & (c["op"] == _ERROR)).tolist()
    for label, rows in (("request failed", err_rows), ("release without request",
                                                       h["orphans"].tolist())):
        for r in rows:
            ev = table.event(r)
            pid = ids.pid(ev.kernel, ev.device, ev.block)
            args = {"allocation": ev.allocation, "op": ev.op, "step": r}
            args.update(_source_args(ev.source))
            events.append({"ph": "i", "s": "t", "name": label, "cat": "event", "pid": pid,
                           "tid": ids.tid(pid, ev.thread, -1 if ev.warp is None else ev.warp),
                           "ts": r, "args": args})

    # -- barrier operations
    waits = {id(a): b for a, b in pair_waits(ops)}
    create_row: dict[int, int] = {}
    allocs = sorted({o["allocation"] for o in ops if o["allocation"] >= 0})
    if allocs:
        rows = np.flatnonzero(np.isin(c["allocation"], allocs) & kmask)
        for r in rows[np.unique(c["allocation"][rows], return_index=True)[1]].tolist():
            create_row[int(c["allocation"][r])] = r
    ended = {id(b) for b in waits.values() if b is not None}
    starts_of = {id(b): a for a, b in pair_waits(ops) if b is not None}
    for o in ops:
        pid = ids.pid(o["kernel"], o["device"], o["block"])
        args = {"allocation": o["allocation"], "step": o["step"]}
        r = create_row.get(o["allocation"])
        if r is not None:
            args["barrier"] = allocation_name(table, r)
            args.update(_source_args(table.source_of(r)))
        args.update(o["extra"])
        if o["source"] and o["source"].get("file"):
            args["op_line"] = f"{o['source']['file']}:{o['source'].get('line')}"
        name = _OP_NAMES[o["kind"]]
        if o["resource"] != "barrier":  # "cluster barrier arrive", "named barrier wait ..."
            name = o["resource"].replace("_", " ") + name[len("barrier"):]
        if o["kind"] == "wait_start" and waits.get(id(o)) is None:
            name += " (never ended)"
            args["never_ended"] = True
        if o["kind"] == "wait_end" and id(o) in ended:
            args["waited_steps"] = o["step"] - starts_of[id(o)]["step"]
        events.append({"ph": "i", "s": "t", "name": name, "cat": "barrier", "pid": pid,
                       "tid": ids.tid(pid, o["thread"], o["warp"]), "ts": o["step"],
                       "args": args})

    # -- findings on their cells
    for root in trace.findings:
        for f in [root, *root.consequences]:
            k = f.kernel if f.kernel is not None else root.kernel
            if k is None or k not in kset:
                continue
            rows = [r for r in f.events if 0 <= r < len(table)]
            for d, b, t in f.cells:
                blk = None if b is None else tuple(b)
                ts = _finding_step(table, rows, d, blk, t, end_of(k) - 1)
                pid = ids.pid(k, d, blk)
                args = {"message": f.message, "kind": f.kind, "severity": f.severity}
                args.update(_source_args(f.source))
                if f is not root:
                    args["root_cause"] = _finding_name(root)
                elif f.suggestion:
                    args["suggestion"] = f.suggestion
                events.append({"ph": "i", "s": "t", "name": _finding_name(f),
                               "cat": "finding", "pid": pid, "tid": ids.tid(pid, t, -1),
                               "ts": ts, "args": args})

    # -- live memory counters per block
    budgets = _budget_labels(trace, kernels, target)
    curves = live_memory(table, kernels, target)
    tmem_kernels = {kk for (kk, _, _), v in curves.items() if v["TMEM"][1].max() > 0}
    tmem_kernels &= set(kernels)
    tmem_kernels |= {k for (k, _, _), (_, tmem) in budgets.items() if tmem}
    for (k, d, bi), spaces in curves.items():
        pid = ids.pid(k, d, table.block(bi))
        for space, unit in (("SMEM", "bytes"), ("TMEM", "columns")):
            if space == "TMEM" and k not in tmem_kernels:
                continue
            steps, values = spaces[space]
            # one value per step: the last one
            keep = np.r_[steps[1:] != steps[:-1], True]
            for s, v in zip(steps[keep].tolist(), values[keep].tolist()):
                events.append({"ph": "C", "name": f"live {space}", "cat": "memory",
                               "pid": pid, "ts": s, "args": {unit: v}})

    # -- names (metadata) of every process and thread used
    meta: list[dict] = []
    for (k, d, blk), pid in sorted(ids.pids.items(), key=lambda x: x[1]):
        ki = info(k)
        kname = f"kernel {k}" + (f" {ki.name}" if ki is not None and ki.name else "")
        multi = (ki is not None and ki.num_devices > 1) or d != 0
        where = (f" · device {d}" if multi else "") + (
            " · kernel level" if blk is None else f" · block {block_text(blk)}")
        meta.append({"ph": "M", "name": "process_name", "pid": pid,
                     "args": {"name": kname + where}})
        meta.append({"ph": "M", "name": "process_sort_index", "pid": pid,
                     "args": {"sort_index": pid}})
        label = budgets.get((k, d, blk))
        if label is not None and label[0]:
            meta.append({"ph": "M", "name": "process_labels", "pid": pid,
                         "args": {"labels": label[0]}})
    by_pid = {pid: key for key, pid in ids.pids.items()}
    for order, ((pid, t, w, sub), tid) in enumerate(sorted(ids.tids.items())):
        axis = (info(by_pid[pid][0]).thread_axis if info(by_pid[pid][0]) else None) or \
            "thread"
        name = f"{axis} {t}" + (f" · warp {w}" if w >= 0 else "") + (
            f" ({sub + 1})" if sub else "")
        meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                     "args": {"name": name}})
        meta.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                     "args": {"sort_index": order}})
    # by time; a slice before the slices it encloses (same start: the longer first)
    events.sort(key=lambda e: (e["ts"], e["pid"], -e.get("dur", 0)))

    from .. import __version__

    other = {
        "generator": f"pallas_viz {__version__}",
        "time": f"ts: 1 µs = 1 step; {STEP_NOTE}",
        "slices": "one per allocation a thread holds, request to release (or the kernel's "
                  "end); a thread's holds that overlap without nesting are on its extra "
                  "tracks, 't N (2)', ...",
        "counters": f"live SMEM (bytes) and TMEM (columns) per block, counted for "
                    f"{target.name} as pallas_viz.analysis.budget.block_budgets counts "
                    "(aligned buffers, 8 B per barrier, first release ends a lifetime)",
        "device": target.name,
        "kernels": [f"kernel {k}" + (f" {info(k).name}" if info(k) and info(k).name else "")
                    for k in kernels],
        "barrier_ops": len(ops),
    }
    return {"traceEvents": meta + events, "displayTimeUnit": "ns", "otherData": other}


def _nesting_track(stacks: list[list[int]], begin: int, end: int) -> int:
    """The first of a thread's tracks `[begin, end)` nests on (slices come by begin, the
    longer first); each track is the stack of the ends of its open slices."""
    for i, stack in enumerate(stacks):
        while stack and stack[-1] <= begin:
            stack.pop()
        if not stack or stack[-1] >= end:
            stack.append(end)
            return i
    stacks.append([end])
    return len(stacks) - 1


def _finding_step(table, rows: list[int], device: int, block, thread: int,
                  fallback: int) -> int:
    """Where a finding's instant goes on a cell: its first event in that cell, else its
    first in that block, else its first, else `fallback` (the kernel's last step)."""
    c = table.columns
    in_block = []
    for r in rows:
        if int(c["device"][r]) == device and table.block(int(c["block"][r])) == block:
            if int(c["thread"][r]) == thread:
                return r
            in_block.append(r)
    if in_block:
        return min(in_block)
    return min(rows) if rows else max(fallback, 0)


def _budget_labels(trace, kernels: list[int], target: Device) -> dict[tuple, tuple]:
    """(kernel, device, block) -> (label, has TMEM) from `block_budgets`."""
    from ..analysis.budget import block_budgets, format_bytes

    infos = [trace.kernels[k] for k in kernels if 0 <= k < len(trace.kernels)]
    out = {}
    for b in block_budgets(trace.events, infos, target):
        parts = []
        if b.smem.peak > 0:
            s = b.smem
            parts.append(f"SMEM peak {format_bytes(s.peak)} of {format_bytes(s.limit)} "
                         f"({target.name}) at step {s.step}")
        if b.tmem.peak > 0:
            parts.append(f"TMEM peak {b.tmem.peak} of {b.tmem.limit} columns at step "
                         f"{b.tmem.step}")
        out[(b.kernel, b.device, b.block)] = ("; ".join(parts), b.tmem.peak > 0)
    return out


def perfetto_json(trace, **kw) -> str:
    """`perfetto_dict(trace, **kw)` as JSON text (ASCII: every other character escaped)."""
    return json.dumps(perfetto_dict(trace, **kw), separators=(",", ":"), allow_nan=False)


def write_perfetto(trace, path: str | os.PathLike, **kw) -> str:
    """Write `perfetto_dict(trace, **kw)` to `path` atomically; returns the path.

    Open it in https://ui.perfetto.dev (or chrome://tracing where the browser has it).
    Raises `OutputError` when the file cannot be written (the old file is kept).
    """
    from ..fileio import atomic_write_text

    return atomic_write_text(path, perfetto_json(trace, **kw))


__all__ = ["perfetto_dict", "perfetto_json", "write_perfetto"]
