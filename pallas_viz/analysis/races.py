"""Data races reported by JAX's race detection (`pv.trace(detect_races=True)`).

A race between two threads on a collective buffer that they did not mean to
share is really aliasing: a collective allocation made by only some threads (in
a thread-dependent branch) shifted the others' buffer ids, so later requests from
different lines were merged into one buffer. That case points at the divergent
allocation.

A race between two blocks is not one a barrier of the block can order
(`plgpu.barrier_arrive` / `plgpu.barrier_wait` order the threads of one block): blocks
of one cluster (one grid point in GPU interpret mode) are ordered by a cluster barrier
only, blocks of different grid points by nothing, so the advice is to give each block
its own part of the buffer. SMEM (and TMEM) is per block on a GPU, so a race between
grid points on it is GPU interpret mode's own: it keeps one copy of a `pallas_call`'s
SMEM operands and scratch for all the blocks of the grid (run one after another), and
the finding says so.
"""

from __future__ import annotations

import numpy as np

from ..model import Finding, SourceLocation
from ..store import EventTable
from .context import AnalysisContext, block_label
from .frame import CREATE, placed_mask, request_mask
from .grouping import FindingGroups

RACE_HINT = (
    "Two threads access the same buffer without ordering: put a barrier between the write "
    "and the other thread's access (`plgpu.barrier_arrive` / `plgpu.barrier_wait`), or "
    "give each thread its own part of the buffer.")
# The earlier access of a race within one thread is an asynchronous operation: what
# waits for it, by the call on its line.
ASYNC_HINTS = (
    ("tcgen05_mma", "The MMA writes its accumulator asynchronously: arrive on a barrier "
     "when it is done (`plgpu.tcgen05_commit_arrive(barrier)`) and `plgpu.barrier_wait` "
     "on it before this access."),
    ("copy_gmem_to_smem", "The copy writes SMEM asynchronously: `plgpu.barrier_wait` on the "
     "copy's barrier before this access."),
    ("copy_smem_to_gmem", "The copy is asynchronous: `plgpu.wait_smem_to_gmem(0)` before "
     "this access."),
    ("async_copy_smem_to_tmem", "The copy to TMEM is asynchronous: commit it and wait on "
     "its barrier before this access."),
    ("async_store_tmem", "The TMEM store is asynchronous: `plgpu.commit_tmem()` before this "
     "access."),
    ("async_load_tmem", "The TMEM load is asynchronous: `plgpu.wait_load_tmem()` before this "
     "access."),
)
ASYNC_HINT = ("The earlier access is asynchronous: wait for it to complete (its barrier, "
              "or the matching wait/commit call) before this access.")
# Calls whose memory accesses are asynchronous (the async proxy): an ordinary load or store
# of the same memory is not ordered with them until a fence (`commit_smem` / `commit_tmem`).
ASYNC_CALLS = tuple(call for call, _ in ASYNC_HINTS) + ("wgmma",)
FENCE_SAME_THREAD_HINT = (
    "A TMA copy or an MMA accesses shared memory through the async proxy, which is not "
    "ordered with the thread's ordinary loads and stores, even earlier ones: call "
    "`plgpu.commit_smem()` after the {okind} at line {oline} and before the `{call}` at "
    "line {line}.")
FENCE_SMEM_HINT = (
    "The barrier orders the two threads, but the `{call}` at line {qline} reads shared "
    "memory through the async proxy, which does not see {p}'s ordinary stores until they "
    "are fenced: call `plgpu.commit_smem()` after the {pkind} at line {pline}, before {p} "
    "arrives at `{name}` (line {arrive}).")
FENCE_TMEM_HINT = (
    "The barrier orders the two threads, but the `{call}` at line {pline} is asynchronous: "
    "call `plgpu.commit_tmem()` after it, before {p} arrives at `{name}` (line {arrive}), so "
    "that the store has landed in TMEM when {q}'s {qkind} at line {qline} runs.")
# A barrier is written between the two threads, on the wrong side of an access.
WAIT_AFTER_HINT = (
    "The barrier is there, but on the wrong side of the access: {q} waits on `{name}` at "
    "line {wait}, after its {qkind} at line {qline}, so nothing orders that {qkind} after "
    "{p}'s {pkind} at line {pline} (which {p} signals by arriving at `{name}` at line "
    "{arrive}). Move the `plgpu.barrier_wait({name})` before the {qkind}.")
ARRIVE_BEFORE_HINT = (
    "The barrier is there, but on the wrong side of the access: {p} arrives at `{name}` "
    "at line {arrive}, before its {pkind} at line {pline}, so {q}'s wait on `{name}` (line "
    "{wait}) lets its {qkind} at line {qline} run before that {pkind}. Move the "
    "`plgpu.barrier_arrive({name})` after the {pkind}.")
# Races between blocks: a block's barriers do not order other blocks.
GRID_RACE_HINT = (
    "Different blocks of the grid run concurrently on a GPU, in any order, and no barrier "
    "orders them (`plgpu.barrier_arrive` / `plgpu.barrier_wait` order the threads of one "
    "block, a `plgpu.ClusterBarrier` the blocks of one cluster): give each block its own "
    "part of the buffer, e.g. the output rows of its grid index "
    "(`jax.lax.axis_index` of the grid axis), or let a single block write it.")
CLUSTER_RACE_HINT = (
    "The blocks of a cluster run concurrently, and a block's own barriers "
    "(`plgpu.Barrier`) do not order another block: give each block its own part of the "
    "buffer (indexed by `jax.lax.axis_index` of the cluster axis), or order the two "
    "accesses with a cluster barrier (`plgpu.ClusterBarrier(collective_axes=...)`: "
    "`plgpu.barrier_arrive` on it after the write, `plgpu.barrier_wait` before the other "
    "block's access).")
BLOCK_RACE_HINT = (
    "Different blocks run concurrently on a GPU, and a block's own barriers do not order "
    "another block: give each block its own part of the buffer (indexed by its grid or "
    "cluster index). Blocks of one cluster can also be ordered by a cluster barrier "
    "(`plgpu.ClusterBarrier`), blocks of different clusters by no barrier.")
DEVICE_RACE_HINT = (
    "Different devices run concurrently and no barrier orders them: give each device its "
    "own part of the buffer.")
SHARED_SMEM_HINT = (
    "Not a race in the kernel's code: on a GPU every block has its own SMEM. GPU interpret "
    "mode keeps one copy of a `pallas_call`'s SMEM operands and scratch for all the blocks "
    "of the grid, runs the blocks one after another and resets their clocks between them, "
    "so JAX's race detection reports their accesses to that copy. "
    "To check the kernel's own accesses for races, run it with a grid of one block or as a "
    "`plgpu.kernel` (whose blocks get their own SMEM). Note that every block of a "
    "`pallas_call` with whole-array blocks (the only BlockSpec GPU interpret mode "
    "supports) also writes the whole output.")
# Memory that is per block on a GPU: blocks of different grid points never share it.
PER_BLOCK_SPACES = ("SMEM", "TMEM")
ALIAS_HINT = (
    "The threads do not share this buffer on purpose: their requests from different lines "
    "were merged into one collective buffer because a collective allocation was made by "
    "only some threads. Hoist that allocation out of the thread-dependent branch "
    "(`pl.when` on the thread index) so every thread makes the same collective "
    "allocations in the same order.")


def _cell(a: dict):
    b = a.get("block")
    return (int(a.get("device", 0)), None if b is None else tuple(int(x) for x in b),
            int(a.get("thread", -1)))


def _grid(a: dict) -> tuple | None:
    """The grid point an access ran in (recorded since it is told apart; a trace file's
    value is untrusted: anything but a list of integers is unknown)."""
    g = a.get("grid")
    if isinstance(g, (list, tuple)) and all(
            isinstance(x, int) and not isinstance(x, bool) for x in g):
        return tuple(g)
    return None


def _relation(ctx: AnalysisContext, r: dict, acc: dict, other: dict) -> str:
    """How the two threads of a race relate: "thread" (one block, or not known), "device"
    (different devices), "cluster" (different blocks of one cluster), "grid" (blocks of
    different grid points) or "block" (different blocks, not known which)."""
    if "thread" not in other:
        return "thread"
    if int(acc.get("device", 0)) != int(other.get("device", 0)):
        return "device"
    if acc.get("block") is None or other.get("block") is None or (
            list(acc["block"]) == list(other["block"])):
        return "thread"
    grids = [_grid(acc), _grid(other)]
    if None not in grids:
        return "cluster" if grids[0] == grids[1] else "grid"
    kernel = r.get("kernel")
    if kernel is not None and 0 <= kernel < len(ctx.kernels) and (
            ctx.kernels[kernel].blocks_per_cluster <= 1):
        return "grid"  # a block per cluster: different blocks, different grid points
    return "block"


def _barrier_calls(a: dict) -> list[tuple[str, str, int]]:
    """The barrier calls written around an access's line (`capture`'s `barriers`)."""
    return [(str(op), str(name), int(line)) for op, name, line in a.get("barriers") or ()]


def _barrier_pairs(p: dict, q: dict):
    """(barrier, `p`'s arrival lines, `q`'s wait lines) for each barrier written as
    arrived at around `p`'s access and waited on around `q`'s, by name."""
    pcalls, qcalls = _barrier_calls(p), _barrier_calls(q)
    for name in sorted({n for op, n, _ in pcalls if op == "arrive"}
                       & {n for op, n, _ in qcalls if op == "wait"}):
        yield (name, [x for op, n, x in pcalls if op == "arrive" and n == name],
               [x for op, n, x in qcalls if op == "wait" and n == name])


def _misplaced_barrier(who, acc: dict, other: dict, src, osrc) -> tuple[str, str] | None:
    """(message tail, advice) for a race between two threads of a block whose code has a
    barrier between them, one thread arriving at it and the other waiting on it, but
    with the wait after the waiting thread's access or the arrival before the arriving
    thread's access (in the source of the functions holding the two accesses); else
    None. `who(access)` names an access's thread."""
    for p, q, ps, qs in ((acc, other, src, osrc), (other, acc, osrc, src)):
        if ps is None or qs is None:
            continue
        for name, arrives, waits in _barrier_pairs(p, q):
            words = dict(p=who(p), q=who(q), name=name, pkind=p.get("kind") or "access",
                         qkind=q.get("kind") or "access", pline=ps.line, qline=qs.line)
            if any(x > ps.line for x in arrives) and all(x > qs.line for x in waits):
                words.update(arrive=min(x for x in arrives if x > ps.line), wait=waits[0])
                return (f": {words['q']} waits on `{name}` only after its {words['qkind']} "
                        f"(at line {words['wait']})", WAIT_AFTER_HINT.format(**words))
            if all(x < ps.line for x in arrives) and any(x < qs.line for x in waits):
                words.update(arrive=arrives[-1], wait=max(x for x in waits if x < qs.line))
                return (f": {words['p']} arrives at `{name}` before its {words['pkind']} "
                        f"(at line {words['arrive']})", ARRIVE_BEFORE_HINT.format(**words))
    return None


def _async_call(s) -> str | None:
    """The asynchronous call written on line `s` (`ASYNC_CALLS`), if any."""
    code = s.code if s is not None and s.code else ""
    return next((c for c in ASYNC_CALLS if c in code), None)


def _barrier_in_place(p: dict, q: dict, ps, qs) -> tuple[str, int, int] | None:
    """(barrier, p's arrival line, q's wait line) when the source orders `p`'s access
    before `q`'s with a barrier: `p` arrives at it after its access, `q` waits on it
    before its own (`capture`'s `barriers`); else None."""
    for name, arrives, waits in _barrier_pairs(p, q):
        after = [x for x in arrives if x > ps.line]
        before = [x for x in waits if x < qs.line]
        if after and before:
            return name, min(after), max(before)
    return None


def _missing_fence(who, space, acc: dict, other: dict, src, osrc) -> tuple[str, str] | None:
    """(message tail, advice) for a race between two threads of a block that a barrier in
    the source does order, where one side is asynchronous and nothing fences the other's
    store for it: an ordinary SMEM store read by another thread's TMA copy or MMA (no
    `plgpu.commit_smem()`), or an asynchronous TMEM store another thread loads (no
    `plgpu.commit_tmem()`). None otherwise."""
    for p, q, ps, qs in ((acc, other, src, osrc), (other, acc, osrc, src)):
        if ps is None or qs is None or (p.get("kind") or "") != "write":
            continue
        placed = _barrier_in_place(p, q, ps, qs)
        if placed is None:
            continue
        name, arrive, wait = placed
        words = dict(p=who(p), q=who(q), name=name, pkind=p.get("kind"),
                     qkind=q.get("kind") or "access", pline=ps.line, qline=qs.line,
                     arrive=arrive)
        ordered = (f": the barrier `{name}` orders them ({words['p']} arrives at line "
                   f"{arrive}, {words['q']} waits at line {wait}), but ")
        pcall, qcall = _async_call(ps), _async_call(qs)
        if space == "SMEM" and pcall is None and qcall is not None:
            return (ordered + f"the `{qcall}` reads through the async proxy and nothing "
                    f"fences the {words['pkind']} for it",
                    FENCE_SMEM_HINT.format(call=qcall, **words))
        if space == "TMEM" and pcall == "async_store_tmem":
            return (ordered + "the asynchronous TMEM store is not committed before the "
                    "arrival", FENCE_TMEM_HINT.format(call=pcall, **words))
    return None


def _canonical_order(acc: dict, other: dict) -> bool:
    """Whether to swap a race's two accesses: both are threads' accesses with a line,
    and `other`'s thread comes first in (device, block, thread) order."""
    if "thread" not in other or not acc.get("source") or not other.get("source"):
        return False

    def key(a):
        d, b, t = _cell(a)
        return d, b or (), t

    return key(other) < key(acc)


def _what(r: dict, table: EventTable, row: int | None) -> str:
    space = r.get("memory_space") or "buffer"
    if row is None:
        return f"{space} buffer"
    e = table.event(row)
    return f"{space} buffer {e.shape} {e.dtype}"


def _divergent_allocation(table: EventTable, rows: np.ndarray) -> int | None:
    """The first request of the collective allocation site that only some threads reach.

    Among the collective allocation sites of the block of `rows` (one allocation's
    requests) first reached up to its last request, the site requested by the
    fewest threads of the block (fewer than share the buffer; ties: the earliest
    line) is the thread-divergent allocation.
    """
    c = table.columns
    last = int(rows.max())
    first = int(rows.min())
    same = ((c["kernel"] == c["kernel"][first]) & (c["device"] == c["device"][first])
            & (c["block"] == c["block"][first]) & request_mask(table) & placed_mask(table)
            & (c["initial_ref_count"] > 1) & (c["source"] >= 0))
    cand = np.flatnonzero(same)
    expected = int(c["initial_ref_count"][first])
    by_site: dict[int, tuple[set, int]] = {}
    for r in cand.tolist():  # threads per site over the whole block
        threads, row = by_site.setdefault(int(c["source"][r]), (set(), r))
        threads.add(int(c["thread"][r]))
    # Ties (e.g. the run failed before the other threads reached their sites) go to
    # the site earliest in the source: a divergent allocation shifts the ids of the
    # allocations after it in program order.
    partial = []
    for threads, row in by_site.values():
        if len(threads) < expected and row <= last:
            src = table.source_of(row)
            partial.append((len(threads), src.file, src.line, row))
    return min(partial)[3] if partial else None


def analyse_races(ctx: AnalysisContext) -> list[Finding]:
    """One `race` finding per JAX race report."""
    table = ctx.table
    c = table.columns
    groups = FindingGroups()
    for r in ctx.races:
        acc, other = r.get("access") or {}, r.get("other") or {}
        if _canonical_order(acc, other):
            # two threads: which access JAX checked second depends on the interleaving;
            # the message and line must not (the first thread in grid order leads)
            acc, other = other, acc
        cells = [_cell(acc)] + ([_cell(other)] if "thread" in other else [])
        src = SourceLocation.from_dict(acc.get("source"))
        osrc = SourceLocation.from_dict(other.get("source"))
        alloc = int(r.get("allocation", -1))
        rows = np.flatnonzero((c["allocation"] == alloc) & request_mask(table)) if (
            alloc >= 0) else np.zeros(0, dtype=np.int64)
        create = next((int(x) for x in rows if c["op"][x] == CREATE), None)
        events = rows.tolist()
        related = [x for x in (osrc,) if x is not None]
        what = _what(r, table, create)

        relation = _relation(ctx, r, acc, other)
        # both accesses in one block: which block JAX caught them in varies by run (the
        # blocks of a cluster run at once), so the message leaves it to the cells
        one_block = ("block" in acc and "block" in other and acc["block"] == other["block"]
                     and acc.get("device") == other.get("device"))

        def side(a, s):
            where = f" at {s.label(src)}" if s is not None else ""
            blk = f"block {block_label(a['block'])} " if "block" in a and not one_block else ""
            if relation == "device":
                blk = f"device {int(a.get('device', 0))} {blk}"
            word = ctx.thread_word(r.get("kernel"))
            who = f"{blk}{word} {a['thread']}" if "thread" in a else "another thread"
            return f"{a.get('kind') or 'access'} by {who}{where}"

        interpreters = False  # the race is GPU interpret mode's own, not the kernel's
        same_thread = "thread" in other and _cell(acc) == _cell(other)
        call = _async_call(src)
        if (same_thread and r.get("memory_space") == "SMEM" and call is not None
                and osrc is not None and _async_call(osrc) is None):
            # the later access is the asynchronous one: the thread's own earlier load or
            # store was not fenced for it
            okind = other.get("kind") or "access"
            message = (f"data race on {what}: {side(acc, src)} (`{call}`, asynchronous) is "
                       f"not ordered with the thread's own {okind} at {osrc.label(src)} "
                       "before it: no `plgpu.commit_smem()` between them")
            hint = FENCE_SAME_THREAD_HINT.format(okind=okind, oline=osrc.line, call=call,
                                                 line=src.line)
        elif same_thread:
            # one thread against its own asynchronous operation
            code = osrc.code if osrc is not None and osrc.code else ""
            hint = next((h for call, h in ASYNC_HINTS if call in code), ASYNC_HINT)
            oline = f" at {osrc.label(src)}" if osrc is not None else ""
            message = (f"data race on {what}: {side(acc, src)} is not ordered with the "
                       f"asynchronous {other.get('kind') or 'access'} it started{oline}")
        else:
            message = (f"data race on {what}: {side(acc, src)} is not ordered with the "
                       f"{side(other, osrc)}")
            hint = RACE_HINT
            if relation == "thread":
                word = ctx.thread_word(r.get("kernel"))
                misplaced = _misplaced_barrier(lambda a: f"{word} {a['thread']}",
                                               acc, other, src, osrc)
                if misplaced is None:
                    misplaced = _missing_fence(lambda a: f"{word} {a['thread']}",
                                               r.get("memory_space"), acc, other, src, osrc)
                if misplaced is not None:
                    message += misplaced[0]
                    hint = misplaced[1]
            space = r.get("memory_space")
            pair = sorted(tuple(a["block"]) for a in (acc, other) if a.get("block") is not None)
            blocks = "blocks " + " and ".join(block_label(b) for b in pair)
            kernel_level = create is None or table.event(create).block is None
            if relation == "grid" and space in PER_BLOCK_SPACES and kernel_level:
                message += (f". On a GPU each block has its own {space}: these accesses "
                            f"are to the one copy of a kernel-level {space} buffer that "
                            f"GPU interpret mode shares among the blocks of the grid")
                hint = SHARED_SMEM_HINT
                interpreters = True
            elif relation == "grid":
                message += (f": {blocks} are different blocks of the grid, which run "
                            f"concurrently and which no barrier orders")
                hint = GRID_RACE_HINT
            elif relation == "cluster":
                message += (f": {blocks} are blocks of one cluster, which a block's own "
                            f"barrier does not order")
                hint = CLUSTER_RACE_HINT
            elif relation == "block":
                message += f": {blocks} run concurrently and a block's barrier does not order them"
                hint = BLOCK_RACE_HINT
            elif relation == "device":
                message += ": different devices run concurrently and no barrier orders them"
                hint = DEVICE_RACE_HINT
        if create is not None:
            alloc_src = table.source_of(create)
            if alloc_src is not None:
                related.append(alloc_src)
            req_lines = {int(s) for s in c["source"][rows].tolist()}
            if len(req_lines) > 1:
                per_thread = sorted({(int(c["thread"][x]), table.source_of(int(x)))
                                     for x in rows}, key=lambda p: p[0])
                word = ctx.thread_word(r.get("kernel"))
                merged = "; ".join(
                    f"{word} {t} requested it at line {s.line if s else '?'}"
                    for t, s in per_thread)
                message += (f". The threads alias one buffer by accident ({merged})")
                hint = ALIAS_HINT
                div = _divergent_allocation(table, rows)
                if div is not None:
                    dsrc = table.source_of(div)
                    dthreads = sorted(set(c["thread"][
                        (c["source"] == c["source"][div]) & (c["block"] == c["block"][div])
                        & (c["kernel"] == c["kernel"][div]) & request_mask(table)].tolist()))
                    message += (f": the collective allocation at line "
                                f"{dsrc.line if dsrc else '?'} was made by "
                                f"{ctx.threads(r.get('kernel'), dthreads)} only (a "
                                f"thread-divergent branch) and shifted the other threads' "
                                f"buffer ids")
                    events.append(div)
                    if dsrc is not None:
                        related.insert(0, dsrc)
        seen = []
        for x in related:
            if x is not None and x != src and x not in seen:
                seen.append(x)
        if interpreters:
            fl = ctx.failure
            if fl is not None and fl.kernel == r.get("kernel"):
                message += (": JAX's race detection stopped the run there, so the blocks "
                            "after it did not run and were not checked")
        # a race that reads the same (message, line, advice) in several blocks is one
        # finding with their cells (JAX 0.11 runs on after a race: each block of a
        # cluster reports its own)
        severity = "warning" if interpreters else "error"
        where = None if src is None else (src.file, src.line, src.column)
        groups.add("race", severity, r.get("kernel"), (severity, message, hint, where), src,
                   cells, events, lambda details, cells_, m=message: m, hint, related=seen)
    return groups.findings()
