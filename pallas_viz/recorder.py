"""The recorder: the only object the runtime hooks write into.

A hook appends one row per allocation request and does nothing else: the row keeps
the interpreter's values as they are (its key, its logging info) with the function
that makes them into fields (`decode(row)`); `rows()` decodes them, numbers the
allocations (in record order) and puts each final row in its raw one's place, in
batches of 64 during the run and for the rest after it, so that the work runs in
one warm loop instead of between the interpreter's steps, and no more than a batch
of the interpreter's objects is kept alive. The columnar `EventTable` is built from
`rows()` after the run. Barrier operations (arrive, wait start, wait end) are rows in
`barrier_op_rows` the same way (`decode(row, allocation_at)`, after the run; `barrier_ops`
views them as `BarrierOp`s), and the threads that finished the kernel body are in
`thread_exits`; both are made JSON-able after the run (`barrier_ops_json`,
`thread_exits_json`). `record` and `barrier_op` append rows of fields as they are
(plain values: tuples the garbage collector stops tracking).
"""

from __future__ import annotations

import bisect
import itertools
import threading
from typing import Any, NamedTuple


class BarrierOp(NamedTuple):
    """One barrier operation, as the hooks saw it (raw: `source` is JAX's `SourceInfo`).

    `step` is the number of allocation events recorded before it, so barrier
    operations and allocation events share one time axis.
    """

    step: int
    kernel: int
    # "arrive" | "wait" (a wait starts) | "waited" (it ended: the phase completed)
    op: str
    # "barrier" | "cluster_barrier" | "named_barrier"
    resource: str
    device: int
    block: tuple | None  # the operating thread's block
    thread: int
    warp: int | None
    allocation: int  # the barrier's allocation id (-1: named barrier, or not live)
    # cluster barriers: the index of the block part operated on (within the cluster)
    part: int | None
    target_block: tuple | None  # cluster barriers: the block whose part it is
    phase: int  # arrive: the phase it counts towards; wait: the phase waited for
    arrivals: int  # arrive: arrivals in `phase` with this one; wait: arrivals so far
    num_arrivals: int
    completes: bool  # arrive: this arrival completed `phase`; wait: it had to block
    # who arrived: "thread" (barrier_arrive), "copy" (a TMA copy completing),
    # "mma"/"commit" (tcgen05), "named" (bar.arrive/bar.sync); waits: "thread"/"named"
    via: str
    freed: bool  # arrive/wait on a barrier that was no longer allocated
    key: tuple | None  # the allocation key (memory_space_id, device, block, thread,
    #                     initial ref count, buffer id); None for a named barrier
    barrier_id: int | None  # a named barrier's id (within its block)
    source: Any


class Recorder:
    """Collects raw allocation records, kernel starts and interpreter failures."""

    # A hook that appends a raw row calls `rows()` when `not len(records) & BATCH_MASK`:
    # a batch of 64 is decoded during the run (each raw row keeps the interpreter's
    # logging info, thread and key objects alive: a smaller batch, fewer of them for the
    # garbage collector to count and promote).
    BATCH_MASK = 63

    def __init__(self):
        self.records: list[tuple] = []
        self.kernels: list[dict] = []
        self.failures: list[dict] = []
        self.deadlocks: list[dict] = []  # one per kernel stopped by the watchdog
        self.races: list[dict] = []  # JAX race reports, structured
        # (step, decode, ...) from the barrier hooks, `decode(row, allocation_at)` -> the
        # `BarrierOp` fields; or the fields themselves (`barrier_op`). (A named tuple per
        # operation costs more than the rest of recording it; `barrier_ops` views them
        # as `BarrierOp`s.)
        self.barrier_op_rows: list[tuple] = []
        # A thread finished the kernel body: its step, kernel, device, block, thread and
        # warp, six items one after another (flat: a tuple kept per exit would be an object
        # the garbage collector counts, one per thread and grid step)
        self.thread_exits: list = []
        # what `rows()` made of `records` so far: how many leading rows are final, the
        # allocation live and last freed under each (kernel, resource, key), and each
        # barrier key's allocations [index of the create, of the free or None, id] and
        # the indices of their creates, in order (`allocation_at`)
        self._done = 0
        self._live: dict[tuple, int] = {}
        self._freed: dict[tuple, int] = {}
        self._history: dict[tuple, list] = {}
        self._creates: dict[tuple, list] = {}
        self._alloc_ids = itertools.count()
        self._lock = threading.Lock()
        self._rows_lock = threading.Lock()

    def begin_kernel(self, **info) -> int:
        with self._lock:
            index = len(self.kernels)
            self.kernels.append(dict(info, index=index))
            return index

    def record(self, kernel, op, resource, memory_space, device, block, thread, warp,
               key, ref_count, shape, dtype, nbytes, source):
        """Append one request, its fields as they are (`key`: the allocation key as a
        tuple (memory_space_id, device_id, block_id, thread_id, initial_ref_count,
        buffer_id); `dtype` a numpy dtype, named after the run, or its name)."""
        self.records.append((kernel, op, resource, memory_space, device, block, thread,
                             warp, key, ref_count, shape, dtype, nbytes, source))

    def rows(self) -> list[tuple]:
        """Every request so far, decoded and numbered: (kernel, op, resource,
        memory_space, device, block, thread, warp, buffer_id, key thread, key block,
        initial ref count, ref_count, shape, dtype, nbytes, source, allocation id).
        Allocation ids count creates in record order; a join, release or free gets the
        id live under its key. After the run (or under the interpreter's memory lock,
        which every hook holds) the list is `records` itself: do not change it."""
        with self._rows_lock:
            records = self.records
            n = len(records)
            live, freed, history, ids = self._live, self._freed, self._history, self._alloc_ids
            creates = self._creates
            for i in range(self._done, n):
                r = records[i]
                if callable(r[0]):  # a hook's raw row
                    r = r[0](r)
                (kernel, op, resource, space, device, block, thread, warp, key, rc, shape,
                 dtype, nbytes, source) = r
                live_key = (kernel, resource, key)
                if op == "create":
                    alloc = live[live_key] = next(ids)
                    if resource != "buffer":  # (only barriers' operations look them up)
                        history.setdefault(live_key, []).append([i, None, alloc])
                        creates.setdefault(live_key, []).append(i)
                elif op == "free":
                    alloc = freed[live_key] = live.pop(live_key, -1)
                    if alloc >= 0 and resource != "buffer":
                        history[live_key][-1][1] = i
                else:
                    alloc = live.get(live_key, -1)
                records[i] = (kernel, op, resource, space, device, block, thread, warp,
                              key[5], key[3], key[2], key[4], rc, shape, dtype, nbytes,
                              source, alloc)
            self._done = n
            return records if len(records) == n else records[:n]

    def fail(self, kernel: int | None, info: dict) -> None:
        with self._lock:
            self.failures.append(dict(info, kernel=kernel))

    def live_allocation(self, kernel: int, resource: str, key: tuple) -> int:
        """The allocation id live under `key` after the requests so far (-1 if none)."""
        self.rows()
        return self._live.get((kernel, resource, key), -1)

    def freed_allocation(self, kernel: int, resource: str, key: tuple) -> int:
        """The allocation id last freed under `key` so far (-1 if none)."""
        self.rows()
        return self._freed.get((kernel, resource, key), -1)

    def allocation_at(self, live_key: tuple, step: int, freed: bool) -> int:
        """The allocation id live under (kernel, resource, key) of a barrier or cluster
        barrier when `step` requests had been recorded (`freed`: the one last freed by
        then); -1 if none."""
        self.rows()
        return self._allocation_at(live_key, step, freed)

    def _allocation_at(self, live_key: tuple, step: int, freed: bool) -> int:
        """`allocation_at` for steps `rows()` has numbered. A key's allocations do not
        overlap (it is created again only once freed), so the last one created before
        `step` is the one live then, if any, and the one before it was freed by then."""
        creates = self._creates.get(live_key)
        i = -1 if not creates else bisect.bisect_left(creates, step) - 1
        if i < 0:
            return -1
        history = self._history[live_key]
        _, gone, alloc = history[i]
        if gone is None or gone >= step:  # still live at `step`
            if not freed:
                return alloc
            if i == 0 or history[i - 1][1] is None:
                return -1
            return history[i - 1][2]
        return alloc if freed else -1

    def barrier_op(self, *fields) -> None:
        """Append one barrier operation (all `BarrierOp` fields but `step`, in order).
        Called with the memory lock held."""
        self.barrier_op_rows.append((len(self.records), *fields))

    def barrier_op_fields(self) -> list[tuple]:
        """Every barrier operation recorded so far, in `BarrierOp` field order."""
        self.rows()  # every request before them numbered
        at = self._allocation_at
        return [row[1](row, at) if callable(row[1]) else row for row in self.barrier_op_rows]

    @property
    def barrier_ops(self) -> list[BarrierOp]:
        """The barrier operations recorded so far, as `BarrierOp`s (made on each access)."""
        return list(map(BarrierOp._make, self.barrier_op_fields()))

    def thread_exits_json(self, kernels=None) -> list[dict]:
        """`thread_exits` (of `kernels` only, if given) as JSON-able dicts (`block`: from
        its block's barrier operations or the interpreter's exit callback; None only if
        neither named it. Trace files recorded before the callback was read can hold
        exits without a block: `analysis.barriers._Exits` counts those only in a kernel
        that ran one block)."""
        x = self.thread_exits
        return [{"step": s, "kernel": k, "device": d,
                 "block": None if b is None else [int(v) for v in b], "thread": t, "warp": w}
                for s, k, d, b, t, w in zip(x[0::6], x[1::6], x[2::6], x[3::6], x[4::6],
                                            x[5::6])
                if kernels is None or k in kernels]

    def barrier_ops_json(self, resolve_source) -> list[dict]:
        """`barrier_ops` as JSON-able dicts (`BarrierOp` field order);
        `resolve_source(SourceInfo)` -> SourceLocation. Records with equal blocks, keys or
        sources share one list or dict for them (read them, do not change them): a trace
        keeps thousands of these records, and each object of theirs is one the garbage
        collector counts and promotes while the trace is alive."""
        out = []
        locs: dict[int, tuple] = {}  # id(SourceInfo) -> (SourceInfo, its location dict)
        ints: dict[tuple, list] = {}  # a block/key tuple -> the same as a list of ints

        def as_ints(v):
            c = ints.get(v)
            if c is None:
                c = ints[v] = [int(x) for x in v]
            return c

        for (step, kernel, op, resource, device, block, thread, warp, alloc, part, target,
             phase, arrivals, n, completes, via, freed, key, barrier_id,
             src) in self.barrier_op_fields():
            hit = locs.get(id(src))
            if hit is None:
                loc = resolve_source(src)
                hit = locs[id(src)] = (src, None if loc is None else location_dict(loc))
            out.append({
                "step": step, "kernel": kernel, "op": op, "resource": resource,
                "device": device, "block": None if block is None else as_ints(block),
                "thread": thread, "warp": warp, "allocation": alloc, "part": part,
                "target_block": None if target is None else as_ints(target),
                "phase": phase, "arrivals": arrivals, "num_arrivals": n,
                "completes": completes, "via": via, "freed": freed,
                "key": None if key is None else as_ints(key), "barrier_id": barrier_id,
                "source": hit[1]})
        return out

    def deadlock(self, kernel: int, info: dict) -> None:
        with self._lock:
            self.deadlocks.append(dict(info, kernel=kernel))

    def race(self, kernel: int, info: dict) -> None:
        with self._lock:
            self.races.append(dict(info, kernel=kernel))


def location_dict(loc) -> dict:
    """`SourceLocation.to_dict()` (`dataclasses.asdict`: the same keys, in order), written
    out: `asdict` deep-copies field by field and costs more than the rest of a record."""
    b = loc.branch
    return {"file": loc.file, "line": loc.line, "column": loc.column,
            "function": loc.function, "code": loc.code,
            "branch": None if b is None else location_dict(b)}

