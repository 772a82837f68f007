"""Collective (all-threads) allocations: who requested them, and whether they agree.

Finds `partial_collective`, `nonzero_thread_collective` (the event side) and
`collective_mismatch`.
"""

from __future__ import annotations

import numpy as np

from ..cells import block_label
from ..model import RESOURCES, UNNAMED_AXIS, Finding
from ..store import SMALL_TABLE
from .context import AnalysisContext, cell_key, line_call_key, where_count
from .frame import CREATE, JOIN, cell, group_starts, placed_mask, request_mask
from .grouping import FindingGroups

# {branch}: how the branch is written, `_branch_word`
_PARTIAL_TEMPLATE = (
    "Every thread of the block must reach a collective `pl.run_scoped` (or barrier "
    "allocation): hoist it out of the thread-dependent {branch} and branch inside its "
    "body instead.")
PARTIAL_HINT = _PARTIAL_TEMPLATE.format(branch="branch (`pl.when` on the thread index)")
PARTIAL_LOOP_HINT = (
    "Every thread of the block must make a collective `pl.run_scoped` (or barrier "
    "allocation) as many times as the others, and this one is in a loop whose trip count "
    "depends on the thread: give the loop the same trip count on every thread (branch "
    "on the thread inside its body), or hoist the allocation out of the loop.")
CLUSTER_HINT = (
    "A `plgpu.ClusterBarrier` is one allocation shared by every block of the cluster: each "
    "block (every thread of it) must reach its `pl.run_scoped`. Hoist it out of the "
    "block-dependent branch (`pl.when` on the cluster index) and branch inside its body "
    "instead.")
MISMATCH_HINT = (
    "Threads merged different allocations into one buffer, so they alias each other's "
    "memory. Make every thread perform the same collective allocations in the same order.")


MERGED_HINT = (
    "Collective requests are matched by their place in each thread's sequence of "
    "allocations, not by their line: every thread of the block must make the same "
    "collective `pl.run_scoped` (or barrier allocation) in the same order. Hoist it out "
    "of the thread-dependent {branch} and branch inside its body instead.")


def branch_call(branch, default: str = "`pl.when`") -> str:
    """The call a branch location's code makes: `lax.switch` or `lax.cond`, else
    `default`."""
    code = (branch.code or "") if branch is not None else ""
    return "`lax.switch`" if "switch" in code else "`lax.cond`" if "cond(" in code else default


def _branch_word(source) -> str:
    """How the fix names the branch the threads part at: `pl.when`, `lax.cond` or
    `lax.switch` on the thread index, as the branch's own code says; all three when the
    branch was not found (a switch on `jnp.minimum(thread, k)`: no branch is named)."""
    branch = source.branch if source is not None else None
    if branch is None:
        return "branch (a `pl.when`, `lax.cond` or `lax.switch` on the thread index)"
    return f"branch ({branch_call(branch)} on the thread index)"


def partial_hint(source, merged: bool = False) -> str:
    """The fix for a partial collective at `source`: for where its threads part (a loop's
    trip count, or a branch); `merged`: the threads that skip it make another collective
    request in its place, which the interpreter merges with it."""
    branch = source.branch if source is not None else None
    if branch is not None and branch.kind == "loop":
        return PARTIAL_LOOP_HINT
    if merged:
        return MERGED_HINT.format(branch=_branch_word(source))
    return _PARTIAL_TEMPLATE.format(branch=_branch_word(source))


def partial_message(ctx: AnalysisContext, kernel: int):
    """The text of a `partial_collective` finding; details: (have, missing, what, n,
    times, merged). `times`: for a request in a loop, how many times each thread made it
    ((count, threads), ...: most first), or (). `merged`: ((threads, what they request
    in its place, where), ...) for the missing threads whose own collective request at
    this place the interpreter merged with it, or ()."""
    def message(details, cells) -> str:
        have, missing, what, n, times, merged, *rest = details[0]
        # (a block cut short: who made it varies from run to run, so it is not said)
        cut = bool(rest and rest[0])
        # what makes the counts differ: "loop" (its trip count), or the branch in a loop
        # that skips the request in some iterations ("the `pl.when` at line 12")
        how = rest[1] if len(rest) > 1 else "loop"
        instead = {t for ts, *_ in merged for t in ts}
        absent_ts = [t for t in missing if t not in instead]
        parts = []
        for ts, other, where in merged:
            parts.append(f"{ctx.threads(kernel, ts)} {'makes' if len(ts) == 1 else 'make'} "
                         f"{other} at {where} in its place")
        if absent_ts:
            parts.append(f"{ctx.threads(kernel, absent_ts)} never "
                         f"{'requests' if len(absent_ts) == 1 else 'request'} it")
        elif not missing:
            parts.append("the other threads sharing it never request it")
        zero = ("" if 0 not in absent_ts else
                " (thread 0 of the block, which owns allocations for all threads, is "
                "among them)" if len(absent_ts) > 1 else
                " (it is thread 0 of the block, which owns allocations for all threads)")
        # No count of blocks here: a failure can stop a kernel before every block got
        # there, so it varies from run to run (the cells say where).
        loop = ""
        if times and len(times) > 1:  # (one count for every thread: nothing to say)
            counts = " and ".join(
                f"{count} time{'s' if count != 1 else ''} in {ctx.threads(kernel, ts)}"
                for count, ts in times)
            if how == "loop":
                loop = "; the loop makes this request " + counts
            elif max(count for count, _ in times) > 1:  # (a branch in a loop)
                loop = f"; under {how} it is made " + counts
            # (a branch: only threads that made it at all make it "fewer times")
            listed = {t for count, ts in times for t in ts if count or how == "loop"}
            if absent_ts and not merged and set(absent_ts) <= listed:
                # every thread makes it, some fewer times: say so, never that a thread
                # "never requests it"
                fewest = min(count for count, _ in times)
                why = ("the loop around it runs a different number of times" if how == "loop"
                       else f"{how} skips it in some iterations of its loop")
                return (f"collective {what} is requested {counts} ({why}): each request "
                        f"after the "
                        f"{_ordinal(fewest)} is made only by {ctx.threads(kernel, have)} of "
                        f"{n}, so its ref count can never reach zero and later collective "
                        "allocations of those threads alias the wrong buffers")
        head = f"collective {what} is requested only by {ctx.threads(kernel, have)} of {n}; "
        # Said of the threads without it: in a kernel the merge makes fail, which other
        # threads got to it first varies from run to run (review K)
        if len(merged) == 1 and not absent_ts:
            ts, other, where = merged[0]
            head = (f"collective {what} is not requested by {ctx.threads(kernel, ts)}, "
                    f"which {'makes' if len(ts) == 1 else 'make'} {other} at {where} in its "
                    "place")
            parts = []
        elif cut and not merged:
            return (f"collective {what} is never requested by "
                    f"{ctx.threads(kernel, absent_ts)}{zero}, so its ref count can never reach "
                    "zero and later collective allocations of those threads alias the wrong "
                    f"buffers{loop}")
        elif cut:
            head = f"collective {what} is not requested by {ctx.threads(kernel, missing)}: "
        if absent_ts:
            return (head + "; ".join(parts) + f"{zero}, so its ref count can never reach zero "
                    "and later collective allocations of those threads alias the wrong "
                    f"buffers{loop}")
        return (head + "; ".join(parts) + ": the interpreter matches collective requests by "
                "their place in each thread's sequence, so it merges these into one buffer "
                f"and the threads alias each other's memory{loop}")
    return message


_CLUSTER_BARRIER = RESOURCES.index("cluster_barrier")


def _cluster_partial(ctx: AnalysisContext, groups: FindingGroups, rows: np.ndarray,
                     block_cells: list, src) -> None:
    """A cluster barrier fewer (block, thread)s requested than share it: its ref count is
    the threads of every block of the cluster its `collective_axes=` name. Which blocks
    those are is not recorded (the cluster's shape, which axes are collective), so the
    blocks that never request it are counted, not named, and only the cells that did are
    lit; none is claimed of a block that may have been cut short. A block that requests it
    with only some of its threads is the thread-level partial collective.

    In a grid of clusters a barrier left allocated outlives its cluster: a later
    cluster's block whose request has its key (its buffer ids lag behind its cluster's, by
    the request its own block skipped) joins it. Those blocks are not its cluster's: the
    partial is judged on its own cluster's, and the later cluster's barrier, short of the
    block handed the old one, is that mistake's consequence (`_handed_message`)."""
    table = ctx.table
    c = table.columns
    first = int(rows[0])
    kernel, device = int(c["kernel"][first]), int(c["device"][first])
    info = ctx.kernels[kernel]
    threads = info.threads_per_block
    expected = int(c["initial_ref_count"][first])
    if threads < 1 or expected % threads:
        return
    sharing = expected // threads  # blocks that share it
    creator = next((int(r) for r in rows if c["op"][r] == CREATE), first)
    home = ctx.cluster_of(kernel, table.block(int(c["block"][creator])))
    mine = [ctx.cluster_of(kernel, b) == home for _, b, _ in block_cells]
    handed = sorted({b for (_, b, _), m in zip(block_cells, mine) if not m})
    rows = rows[np.array(mine, dtype=bool)]
    block_cells = [x for x, m in zip(block_cells, mine) if m]
    blocks = sorted({b for _, b, _ in block_cells})
    have = {(b, t) for _, b, t in block_cells}
    short = sorted({t for b in blocks for t in range(threads) if (b, t) not in have})
    absent = sharing - len(blocks)
    if absent <= 0 and not short:
        return
    # this line's requests in the kernel (on this device)
    here = np.flatnonzero((c["kernel"] == kernel) & (c["device"] == device)
                          & (c["source"] == c["source"][first]))
    if absent > 0:
        old = _handed_blocks(ctx, kernel, home, blocks, here)
        if len(old) >= absent:  # they asked for it, and got an earlier cluster's
            cells = block_cells + [cell(table, r) for r in here.tolist()
                                   if table.block(int(c["block"][r])) in old]
            groups.add("partial_collective", "error", kernel, (src, "cluster handed"), src,
                       cells, rows.tolist(), _handed_message(ctx), CLUSTER_HINT,
                       detail=(ctx.what(first), sharing, tuple(old.items())))
            return
    if kernel in ctx.unfinished:
        # (a thread cut short may simply not have got there: only blocks of its cluster
        # that finished the kernel body without requesting it at this line are certain
        # to lack it)
        if absent <= 0:
            if any(not ctx.exits.block_done(kernel, device, b) for b in blocks):
                return
        else:
            asked = {table.block(int(b)) for b in set(c["block"][here].tolist())}
            done = {b for k, d, b, _ in ctx.exits.exact if k == kernel and d == device
                    and b not in asked and ctx.cluster_of(kernel, b) == home
                    and ctx.exits.block_done(kernel, device, b)}
            if len(done) < absent:
                return
    what = ctx.what(first)
    # details: (what, blocks sharing it, blocks that never request it, or the threads of
    # each block that never do; the later clusters' blocks handed it)
    detail = ((what, sharing, absent, tuple(handed)) if absent > 0
              else (what, sharing, tuple(short), ()))

    def message(details, cells) -> str:
        what_, n, missing, later = details[0]
        head = f"collective {what_} is shared by {n} blocks of a cluster"
        if isinstance(missing, int):
            text = (f"{head}, but {missing} of them never "
                    f"request{'s' if missing == 1 else ''} it (it is requested in "
                    f"{where_count(cells)}), so its ref count can never reach zero and no "
                    "thread of those blocks arrives at it")
            if later:
                text += (f"; left allocated, it is then handed to block "
                         f"{', '.join(block_label(b) for b in later)} of a later cluster, "
                         "whose own request at this line joins it (its key carries on from "
                         "cluster to cluster)")
            return text
        return (f"{head} and every thread of each, but {ctx.threads(kernel, missing)} never "
                f"request{'s' if len(missing) == 1 else ''} it, so its ref count can never "
                "reach zero and it stays allocated past the kernel's end")

    if absent > 0:
        cells, key, hint = block_cells, (src, "cluster", sharing, absent), CLUSTER_HINT
    else:
        cells = block_cells + [(device, b, t) for b in blocks for t in short]
        key, hint = (src, "cluster threads", short), partial_hint(src)
    groups.add("partial_collective", "error", kernel, key, src, cells, rows.tolist(), message,
               hint, detail=detail)


def _handed_blocks(ctx: AnalysisContext, kernel: int, home: tuple, blocks: list,
                   here: np.ndarray) -> dict:
    """The blocks of cluster `home`, other than `blocks`, whose request at this line (the
    rows `here`) joined a barrier an earlier cluster created and left allocated: block ->
    the blocks that created it."""
    table = ctx.table
    c = table.columns
    out: dict = {}
    for r in here.tolist():
        b = table.block(int(c["block"][r]))
        alloc = int(c["allocation"][r])
        if (b in blocks or alloc < 0 or int(c["op"][r]) != JOIN
                or ctx.cluster_of(kernel, b) != home):
            continue
        made = np.flatnonzero((c["allocation"] == alloc) & (c["op"] == CREATE))
        makers = {table.block(int(x)) for x in c["block"][made].tolist()}
        if makers and all(ctx.cluster_of(kernel, m) != home for m in makers):
            out.setdefault(b, set()).update(makers)
    return {b: tuple(sorted(m)) for b, m in sorted(out.items())}


def _handed_message(ctx: AnalysisContext):
    """The text of a cluster barrier short of the blocks handed an earlier cluster's at
    its line; details: (what, blocks sharing it, ((block, its creator blocks), ...))."""
    def message(details, cells) -> str:
        what, n, old = details[0]
        who = ", ".join(block_label(b) for b, _ in old)
        makers = sorted({m for _, ms in old for m in ms})
        one = len(old) == 1
        return (f"collective {what} is shared by {n} blocks of a cluster, but block {who} "
                f"{'is' if one else 'are'} handed another: {'its' if one else 'their'} "
                f"request at this line joins the {what} block "
                f"{', '.join(block_label(m) for m in makers)} of an earlier cluster left "
                "allocated (its key carries on from cluster to cluster), so no thread of "
                f"{'that block' if one else 'those blocks'} arrives at this one")
    return message


def _stale_joins(ctx: AnalysisContext, row: int, missing: list[int]):
    """If every thread of `missing` made the same request at `row`'s line in its block but
    joined another allocation, one an earlier block left allocated (the interpreter's
    keys carry on from block to block): the blocks that created those, else None."""
    if not missing:
        return None
    c = ctx.table.columns
    same = np.flatnonzero(
        (c["kernel"] == c["kernel"][row]) & (c["device"] == c["device"][row])
        & (c["block"] == c["block"][row]) & (c["source"] == c["source"][row])
        & np.isin(c["thread"], missing) & (c["allocation"] >= 0)
        & (c["allocation"] != c["allocation"][row]))
    if set(c["thread"][same].tolist()) != set(missing):
        return None
    others = set(c["allocation"][same].tolist())
    creators = np.flatnonzero(np.isin(c["allocation"], list(others)) & (c["op"] == CREATE))
    blocks = {ctx.table.block(int(b)) for b in c["block"][creators].tolist()}
    if not blocks or ctx.table.block(int(c["block"][row])) in blocks:
        return None
    return tuple(sorted(blocks))


def _stale_message(ctx: AnalysisContext, kernel: int):
    """The text of a partial collective whose missing threads joined a buffer an earlier
    block left allocated; details: (have, missing, what, n, creator blocks)."""
    def message(details, cells) -> str:
        have, missing, what, n, blocks = details[0]
        who = ctx.threads(kernel, missing)
        return (f"collective {what} is requested only by {ctx.threads(kernel, have)} of {n}; "
                f"{who} {'requests' if len(missing) == 1 else 'request'} it at this line "
                f"too, but the interpreter hands {'it' if len(missing) == 1 else 'them'} the "
                f"buffer block {', '.join(block_label(b) for b in blocks)} left allocated "
                "(its key carries on from block to block), so the threads of this block do "
                "not share one buffer")
    return message


def _ordinal(n: int) -> str:
    """1 -> "1st", 2 -> "2nd", 3 -> "3rd", 11 -> "11th"."""
    if 10 <= n % 100 <= 20:
        return f"{n}th"
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def analyse_collectives(ctx: AnalysisContext) -> list[Finding]:
    """Collective buffers whose requests disagree, or whose requesters fall short.

    Blocks in `ctx.divergent` (their threads' sequences part) are skipped for
    partial collectives: `analyse_sequences` already pins those to the right line.
    """
    table, divergent = ctx.table, ctx.divergent
    c = table.columns
    mask = request_mask(table) & placed_mask(table) & (c["initial_ref_count"] > 1) & (
        c["allocation"] >= 0)
    idx = np.flatnonzero(mask)
    if len(idx) == 0:
        return []
    small = len(idx) <= SMALL_TABLE
    if small:  # (a stable sort in Python: numpy's costs ~0.2 ms cold)
        alloc = c["allocation"][idx].tolist()
        order = idx[sorted(range(len(alloc)), key=alloc.__getitem__)]
    else:
        order = idx[np.argsort(c["allocation"][idx], kind="stable")]
    allocs = c["allocation"][order]
    starts = group_starts(allocs)
    ends = np.append(starts[1:], len(order))
    keep = (_small_suspect_groups if small else _suspect_groups)(c, order, starts)
    starts, ends = starts[keep], ends[keep]
    groups = FindingGroups()
    for s, e in zip(starts.tolist(), ends.tolist()):
        rows = order[s:e]
        expected = int(c["initial_ref_count"][rows[0]])
        # a cluster barrier is shared by the threads of several blocks
        requesters = sorted(set(zip(c["block"][rows].tolist(), c["thread"][rows].tolist())))
        first = int(rows[0])
        kernel = int(c["kernel"][first])
        src = table.source_of(first)
        block_cells = [cell(table, int(r)) for r in rows]
        # -- partial: fewer threads requested it than share it (a ref-count mismatch)
        where = (kernel, int(c["device"][first]), int(c["block"][first]))
        # (in a block cut short the other threads may simply not have got there)
        partial = len(requesters) < expected and where not in divergent
        if int(c["resource"][first]) == _CLUSTER_BARRIER and (
                0 <= kernel < len(ctx.kernels) and ctx.kernels[kernel].blocks_per_cluster > 1):
            # (it judges blocks cut short itself: the requesting blocks may be, waiting
            # on the barrier the others never allocated, while those finished; and which
            # requesters are the barrier's own cluster's: a later one's may join it)
            if where not in divergent:
                _cluster_partial(ctx, groups, rows, block_cells, src)
        elif partial and not ctx.cut_short(*where):
            req_threads = sorted({t for _, t in requesters})
            missing = sorted(set(range(expected)) - set(req_threads)) if len(
                {b for b, _ in requesters}) == 1 else []
            what = ctx.what(first)
            miss_cells = [(block_cells[0][0], block_cells[0][1], t) for t in missing]
            detail = (req_threads, missing, what, expected, (), ())
            stale = _stale_joins(ctx, first, missing)
            message = partial_message(ctx, kernel)
            if stale is not None:  # they did request it: another block's buffer was theirs
                detail = (req_threads, missing, what, expected, stale)
                message = _stale_message(ctx, kernel)

            groups.add("partial_collective", "error", kernel, (src, tuple(req_threads)), src,
                       block_cells + miss_cells, rows.tolist(), message,
                       partial_hint(src), detail=detail)
        # -- mismatch: merged requests disagree on line, kind, shape or dtype
        sig = set(zip(c["source"][rows].tolist(), c["resource"][rows].tolist(),
                      c["shape"][rows].tolist(), c["dtype"][rows].tolist()))
        if len(sig) > 1:
            # Described per distinct request, by thread, in source order: never in the
            # order the threads happened to reach the buffer (that varies run to run).
            by_req: dict[tuple, set[int]] = {}
            locs = {}
            for r in rows.tolist():
                ev = table.event(r)
                key_r = (*line_call_key(ev.source), ctx.what(r))
                by_req.setdefault(key_r, set()).add(ev.thread)
                locs[key_r] = ev.source
            order_ = sorted(by_req)
            if len({k[:2] for k in order_}) == 1:  # one line: its shape varies by thread
                _one_line_mismatch(ctx, groups, rows, block_cells, locs[order_[0]])
                continue
            lines = [locs[k] for k in order_]
            # requests of one helper's line that differ by their call: each names its call
            calls = len({(x.file, x.line) for x in lines if x is not None}) == 1
            where = [x.label_with_call(lines[0], call=calls) if x else "an unknown line"
                     for x in lines]
            if len(set(where)) < len(where):  # calls that share a line: told by column
                where = [x.label_with_call(lines[0], call=calls, column=True) if x
                         else "an unknown line" for x in lines]
            parts = [f"{ctx.threads(kernel, by_req[k])}: {k[2]} at {w}"
                     for k, w in zip(order_, where)]

            def msgm(details, cells):
                return ("requests merged into one collective buffer disagree: "
                        + "; ".join(details[0]))

            key = tuple(sorted(sig))
            groups.add("collective_mismatch", "error", kernel, key, lines[0], block_cells,
                       rows.tolist(), msgm, MISMATCH_HINT, related=lines[1:], detail=parts)
    return groups.findings()


SHAPES_HINT = (
    "Every thread must request a collective buffer with the same shape and dtype: allocate "
    "it once, before the thread-dependent branch, with the largest shape any thread needs, "
    "and use a slice of it in each branch.")


def _one_line_mismatch(ctx: AnalysisContext, groups: FindingGroups, rows: np.ndarray,
                       block_cells: list, src) -> None:
    """Merged requests made at one line (and call) that disagree on shape or dtype: the
    line opens the scope with a shape its thread's branch picks. Which threads made their
    request before a failure stopped the others varies from run to run, so the text names
    no thread and no shape (the consequences do), and every thread sharing it is lit."""
    c = ctx.table.columns
    first = int(rows[0])
    kernel = int(c["kernel"][first])
    space = ctx.table.event(first).memory_space or ""
    threads = ctx.kernels[kernel].threads_per_block if 0 <= kernel < len(ctx.kernels) else 1
    blocks = sorted({(d, b) for d, b, _ in block_cells}, key=lambda x: cell_key((*x, 0)))
    n = min(int(c["initial_ref_count"][first]), threads)
    cells = block_cells + ([(*blocks[0], t) for t in range(n)] if len(blocks) == 1 else [])
    branch = src.branch if src is not None else None
    picks = (f", as the {_branch_word(src)} at line {branch.line} picks it"
             if branch is not None and branch.kind == "branch" else "")

    def message(details, cells_) -> str:
        return (f"collective {space} buffer requests at this line disagree on their shape or "
                f"dtype from thread to thread{picks}: the interpreter merges them into one "
                "buffer, so the threads alias each other's memory, and a thread whose shape "
                "is larger than the buffer's reads and writes past its end")

    groups.add("collective_mismatch", "error", kernel, ("one line", line_call_key(src)), src,
               cells, rows.tolist(), message, SHAPES_HINT)


_ON_THE_THREAD = ("collective_mismatch", "partial_collective", "sequence_divergence",
                  "warp_allocation")


def analyse_thread_branches(ctx: AnalysisContext, findings: list[Finding]) -> list[Finding]:
    """Collective requests made inside a branch on the thread index, in a kernel the run
    shows nothing wrong with (`findings`: the other analyses'): the threads made the same
    requests, as often, in the same order, but each under its own condition (another loop
    iteration, another branch), and the interpreter matches requests by their place in a
    thread's sequence, so it merges requests made at different times into one buffer. What
    decides it is the source, as recorded: the branch's condition reads the kernel's
    thread axis (`SourceLocation.axes`)."""
    flagged = {f.kernel for f in findings if f.kind in _ON_THE_THREAD}
    table = ctx.table
    c = table.columns
    rows = np.flatnonzero(request_mask(table) & placed_mask(table) & (
        c["initial_ref_count"] > 1) & (c["source"] >= 0) & (c["warp"] < 0))
    if len(rows) == 0:
        return []
    groups = FindingGroups()
    by_line: dict[tuple, list[int]] = {}
    for r in rows.tolist():
        by_line.setdefault((int(c["kernel"][r]), int(c["source"][r])), []).append(r)
    for (kernel, _), rs in by_line.items():
        info = ctx.kernels[kernel] if 0 <= kernel < len(ctx.kernels) else None
        if kernel in flagged or info is None or info.threads_per_block < 2:
            continue
        src = table.source_of(rs[0])
        branch = src.branch if src is not None else None
        axes = (branch.axes or ()) if branch is not None else ()
        if branch is None or branch.kind != "branch" or not axes or not _balanced(c, rs):
            continue
        cells = [cell(table, r) for r in rs]
        if info.thread_axis and info.thread_axis in axes:
            groups.add("partial_collective", "error", kernel, ("thread branch", src), src,
                       cells, rs, _thread_branch_message, partial_hint(src),
                       detail=(ctx.what(rs[0]), _branch_word(src), branch.line))
        elif UNNAMED_AXIS in axes or not info.thread_axis:
            # which axis the condition reads, or which one is the threads', is not known:
            # the run looks the same as the error above, so it is not called clean
            named = () if info.thread_axis else tuple(a for a in axes if a != UNNAMED_AXIS)
            groups.add("partial_collective", "warning", kernel, ("unnamed axis", src), src,
                       cells, rs, _unnamed_axis_message, UNNAMED_AXIS_HINT,
                       detail=(ctx.what(rs[0]), branch_call(branch), branch.line, named),
                       parts_at_branch=False)
    return groups.findings()


UNNAMED_AXIS_HINT = (
    "pallas_viz reads axis names from the source (string literals, names bound to them, a "
    "helper's arguments) or sees them while JAX traces the kernel inside `pv.trace()`; "
    "JAX compiled this kernel before the trace, and its source does not spell the names "
    "out. Run `jax.clear_caches()` before the trace (or trace the kernel's first call) to "
    "have the branch checked, or name the axes with string literals. If the condition "
    "reads the thread index, hoist the collective out of the branch and branch inside its "
    "body instead.")


def _unnamed_axis_message(details, cells) -> str:
    what, call, line, named = details[0]
    reads = (f"reads the index of axis {', '.join(map(repr, named))}, and which axis is the "
             "kernel's thread axis is not known" if named else
             "reads an axis index whose axis pallas_viz could not name")
    return (f"collective {what} is requested inside a branch ({call}) at line {line} whose "
            f"condition {reads}: every thread requested it as often as the others, which "
            "is also what threads taking turns at it look like (each under its own "
            "condition, requests made at different times sharing one buffer). If the "
            "condition reads the thread index, that is an error")


def _balanced(c, rows: list[int]) -> bool:
    """Whether, in each (device, block) of `rows` (one line's collective requests), every
    thread sharing them (their initial ref count) made as many of them as the others."""
    counts: dict[tuple, dict[int, int]] = {}
    for r in rows:
        per = counts.setdefault((int(c["device"][r]), int(c["block"][r])), {})
        t = int(c["thread"][r])
        per[t] = per.get(t, 0) + 1
    n = int(c["initial_ref_count"][rows[0]])
    return all(set(per) == set(range(n)) and len(set(per.values())) == 1
               for per in counts.values())


def _thread_branch_message(details, cells) -> str:
    what, word, line = details[0]
    return (f"collective {what} is requested inside a {word} at line {line}: in this run "
            "every thread requested it as often as the others, but each under its own "
            "condition, and the interpreter matches collective requests by their place in "
            "each thread's sequence, so requests made at different times (another iteration, "
            "another branch) share one buffer and the threads alias each other's memory")


def is_shape_mismatch(f: Finding) -> bool:
    """A `collective_mismatch` of requests made at one line (`_one_line_mismatch`)."""
    return f.kind == "collective_mismatch" and f.suggestion == SHAPES_HINT


def _small_suspect_groups(c, order: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """`_suspect_groups` of a small table's requests (up to `SMALL_TABLE`), in one Python
    pass: numpy's fixed costs dominate so few, the more so right after a kernel ran."""
    blk, thr, rc = (c[k][order].tolist() for k in ("block", "thread", "initial_ref_count"))
    what = list(zip(*(c[k][order].tolist() for k in ("source", "resource", "shape", "dtype"))))
    bounds = [*starts.tolist(), len(order)]
    keep = []
    for s, e in zip(bounds, bounds[1:]):
        first = what[s]
        keep.append(len(set(zip(blk[s:e], thr[s:e]))) < rc[s] or first[1] == _CLUSTER_BARRIER
                    or what[s:e].count(first) != e - s)
    return np.array(keep, dtype=bool)


def _suspect_groups(c, order: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Mask of the lifetimes (runs of `order` from `starts`) that may yield a finding.

    A lifetime needs a closer look only if fewer distinct (block, thread) pairs request
    it than its initial ref count, or if its requests disagree on line, kind, shape or
    dtype, or if it is a cluster barrier (few, and its requesters may include another
    cluster's block); all the others are clean, and skipping them here keeps the loop
    short.
    """
    n = len(order)
    group = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, n]))
    # distinct (block, thread) pairs per lifetime
    blk, thr = c["block"][order], c["thread"][order]
    by = np.lexsort((thr, blk, group))
    g2, b2, t2 = group[by], blk[by], thr[by]
    new_pair = np.r_[True, (g2[1:] != g2[:-1]) | (b2[1:] != b2[:-1]) | (t2[1:] != t2[:-1])]
    distinct = np.bincount(g2[new_pair], minlength=len(starts))
    expected = c["initial_ref_count"][order[starts]]
    # requests that differ from the lifetime's first request
    first = order[starts][group]
    differs = np.zeros(n, dtype=bool)
    for name in ("source", "resource", "shape", "dtype"):
        col = c[name]
        differs |= col[order] != col[first]
    mismatch = np.bincount(group[differs], minlength=len(starts)) > 0
    # (a cluster barrier's requesters may include a later cluster's block: judged apart)
    cluster = c["resource"][order[starts]] == _CLUSTER_BARRIER
    return (distinct < expected) | mismatch | cluster
