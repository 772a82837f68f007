"""Per-block comparison of the threads' allocation sequences.

Threads of one block must make the same collective allocations in the same
order: the interpreter pairs their requests by a per-thread counter. This finds
`sequence_divergence` (the first position where two threads part) and, by
aligning the sequences, the collective requests that only some threads make
(`partial_collective`, and `nonzero_thread_collective` when thread 0 is absent).
"""

from __future__ import annotations

import bisect
import difflib
import functools

import numpy as np

from ..model import Finding
from ..store import SMALL_TABLE, EventTable
from .collective import branch_call, partial_hint, partial_message
from .context import AnalysisContext, where_count
from .frame import REGS, placed_mask, request_mask
from .grouping import FindingGroups

DIVERGENCE_HINT = (
    "Threads of a block must make the same allocations in the same order. Move the "
    "allocation out of the thread-dependent control flow, or allocate it unconditionally "
    "and use it conditionally.")


def thread_sequences(table: EventTable) -> dict[tuple, dict[int, np.ndarray]]:
    """(kernel, device, block index) -> {thread: row indices of its requests, in order}."""
    c = table.columns
    # requests placed in a (device, block, thread); REGS ids restart every grid step
    mask = request_mask(table) & placed_mask(table) & (c["memory_space"] != REGS)
    idx = np.flatnonzero(mask)
    if len(idx) == 0:
        return {}
    if len(idx) <= SMALL_TABLE:
        return _small_thread_sequences(c, idx)
    order = idx[np.lexsort((idx, c["thread"][idx], c["block"][idx], c["device"][idx],
                            c["kernel"][idx]))]
    key = np.stack([c["kernel"][order], c["device"][order], c["block"][order],
                    c["thread"][order]], axis=1)
    change = np.r_[True, np.any(key[1:] != key[:-1], axis=1)]
    starts = np.flatnonzero(change)
    ends = np.r_[starts[1:], len(order)]
    out: dict[tuple, dict[int, np.ndarray]] = {}
    for s, e in zip(starts.tolist(), ends.tolist()):
        k, d, b, t = key[s].tolist()
        out.setdefault((k, d, b), {})[t] = order[s:e]
    return out


def _small_thread_sequences(c, idx: np.ndarray) -> dict[tuple, dict[int, np.ndarray]]:
    """`thread_sequences` of a small table in one Python pass (the same dicts in the same
    order: the numpy path's fixed costs, a sort above all, dominate up to `SMALL_TABLE`
    rows, the more so right after a kernel ran, with the processor's caches cold)."""
    groups: dict[tuple, dict[int, list[int]]] = {}
    for i, k, d, b, t in zip(idx.tolist(), c["kernel"][idx].tolist(),
                             c["device"][idx].tolist(), c["block"][idx].tolist(),
                             c["thread"][idx].tolist()):
        groups.setdefault((k, d, b), {}).setdefault(t, []).append(i)
    return {key: {t: np.array(rows, dtype=np.int64) for t, rows in sorted(by.items())}
            for key, by in sorted(groups.items())}


def _signatures(table: EventTable) -> np.ndarray:
    """One id per row for what a request is (line, resource, memory space, shape, dtype,
    collective or not): rows with equal ids are the same request; ids rank the distinct
    requests in lexicographic order."""
    c = table.columns
    if len(c["source"]) <= SMALL_TABLE:
        rows = list(zip(c["source"].tolist(), c["resource"].tolist(),
                        c["memory_space"].tolist(), c["shape"].tolist(),
                        c["dtype"].tolist(), (c["initial_ref_count"] > 1).tolist()))
        rank = {r: i for i, r in enumerate(sorted(set(rows)))}
        return np.array([rank[r] for r in rows], dtype=np.int64)
    stacked = np.stack([c["source"], c["resource"].astype(np.int32),
                        c["memory_space"].astype(np.int32), c["shape"],
                        c["dtype"].astype(np.int32),
                        (c["initial_ref_count"] > 1).astype(np.int32)], axis=1)
    if len(stacked) == 0:
        return np.zeros(0, dtype=np.int64)
    # One mixed-radix integer per row orders rows exactly as `np.unique(axis=0)` does
    # (lexicographically), so the ids are the same, but a 1-D unique is much faster.
    lo = stacked.min(axis=0).astype(np.int64)
    span = stacked.max(axis=0).astype(np.int64) - lo + 1
    if float(np.prod(span.astype(np.float64))) < 2.0 ** 62:
        key = np.zeros(len(stacked), dtype=np.int64)
        for j in range(stacked.shape[1]):
            key = key * span[j] + (stacked[:, j].astype(np.int64) - lo[j])
        _, inverse = np.unique(key, return_inverse=True)
    else:
        _, inverse = np.unique(stacked, axis=0, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64)


def _only_unfinished(tsig: dict[int, tuple], finished) -> bool:
    """True if the threads (thread -> its sequence) merely stopped early: every sequence is
    a prefix of the longest, and no thread whose sequence is shorter finished the kernel
    body (`finished(thread)`: what a thread that finished did not request, it never will)."""
    longest = max(tsig.values(), key=len)
    return all(longest[:len(s)] == s and (len(s) == len(longest) or not finished(t))
               for t, s in tsig.items())


def analyse_sequences(ctx: AnalysisContext) -> list[Finding]:
    """Divergences and partial collectives; records the divergent blocks in `ctx`.

    In a block cut short (its kernel failed, deadlocked or was interrupted before its
    threads all finished) a thread that stopped before reaching an allocation is not
    divergent: only real partings count. One that finished the kernel body without it
    did part (it never makes it).
    """
    table, kernels = ctx.table, ctx.kernels
    if all(k.threads_per_block < 2 for k in kernels) and not (
            table.columns["thread"] > 0).any():
        return []  # one thread per block everywhere: no two sequences to compare
    seqs = thread_sequences(table)
    if not seqs:
        return []
    sig = _signatures(table)
    c = table.columns
    threads_per_block = {k.index: k.threads_per_block for k in kernels}
    groups = FindingGroups()
    divergent = ctx.divergent
    empty = np.zeros(0, dtype=np.int64)
    for (k, d, b), by_thread in seqs.items():
        n = max(threads_per_block.get(k, 1), max(by_thread) + 1)
        if n < 2:
            continue
        tsig = {t: tuple(sig[by_thread.get(t, empty)].tolist()) for t in range(n)}
        if len(set(tsig.values())) == 1:
            continue
        if ctx.cut_short(k, d, b) and _only_unfinished(
                tsig, lambda t, k=k, d=d, b=b: ctx.exits.done(k, d, table.blocks[b], t)):
            continue
        divergent.add((k, d, b))
        block = table.blocks[b]
        # the reference: the most common sequence (ties: lowest thread)
        counts: dict[tuple, list[int]] = {}
        for t in range(n):
            counts.setdefault(tsig[t], []).append(t)
        ref_seq, ref_threads = max(counts.items(), key=lambda kv: (len(kv[1]), -kv[1][0]))
        ref_t = ref_threads[0]
        ref_rows = by_thread.get(ref_t, empty)
        for seq, threads in counts.items():
            if seq == ref_seq:
                continue
            rows = by_thread.get(threads[0], empty)
            pos = next((i for i, (a, b2) in enumerate(zip(seq, ref_seq)) if a != b2),
                       min(len(seq), len(ref_seq)))
            here = int(rows[pos]) if pos < len(rows) else None
            there = int(ref_rows[pos]) if pos < len(ref_rows) else None
            src_here = table.source_of(here) if here is not None else None
            src_there = table.source_of(there) if there is not None else None
            # The side whose item reappears later on the other side made an extra
            # allocation: that extra line, not the one it displaced, is the culprit.
            if pos < len(seq) and seq[pos] in ref_seq[pos + 1:]:
                primary, secondary = src_there, src_here
            else:
                primary, secondary = src_here, src_there
            if primary is None:
                primary, secondary = secondary, None
            cells = [(d, block, t) for t in threads] + [(d, block, t) for t in ref_threads]
            evs = [r for r in (here, there) if r is not None]
            desc_here = (f"{ctx.what(here)} at {_line_in(src_here, primary)}"
                         if here is not None else "no further allocation")
            desc_there = (f"{ctx.what(there)} at {_line_in(src_there, primary)}"
                          if there is not None else "no further allocation")
            detail = (tuple(threads), tuple(ref_threads), pos, desc_here, desc_there)

            def msg(details, cells, k=k):
                th, rt, pos, dh, dt = details[0]
                def make(ts):
                    return "makes" if len(ts) == 1 else "make"

                return (f"allocation sequences part at position {pos}: {ctx.threads(k, th)} "
                        f"{make(th)} {dh}, {ctx.threads(k, rt)} {make(rt)} {dt} "
                        f"({where_count(cells)})")

            groups.add("sequence_divergence", "error", k,
                       (primary, secondary, tuple(threads), tuple(ref_threads)), primary,
                       cells, evs, msg, DIVERGENCE_HINT, related=[secondary],
                       detail=detail)
        _partial_from_alignment(ctx, groups, k, d, b, n, tsig, by_thread, c)
    _fold_cut_partials(groups)
    return groups.findings()


def _fold_cut_partials(groups: FindingGroups) -> None:
    """A line's partial collective in blocks cut short joins the one of the blocks that
    finished, when there is one and it already names the threads without it: one bug,
    one finding, whose cells and message do not depend on which blocks a failure cut
    short (on two devices one device may stop the other, in some runs only)."""
    kind = "partial_collective"
    for kernel, key in groups.keys(kind):
        src, what = key
        if what != "cut short":
            continue
        absent = {m for d in groups.details(kind, kernel, key) for m in d[1]}
        whole = [k2 for k1, k2 in groups.keys(kind)
                 if k1 == kernel and k2[0] == src and k2[1] != "cut short"
                 and all(absent <= set(d[1]) for d in groups.details(kind, kernel, k2))]
        if len(whole) == 1:
            groups.merge(kind, kernel, key, whole[0])


def _line_in(src, primary) -> str:
    return "an unknown line" if src is None else src.label_with_call(primary)


_LCS_CELLS = 250_000  # above this, fall back to difflib's (greedy) matching


@functools.lru_cache(maxsize=4096)
def _alignment(a: tuple, b: tuple) -> tuple[frozenset, frozenset]:
    """Indices of `a` and of `b` that a longest common subsequence pairs up.

    A greedy matcher (difflib) pairs the longest run first and can strand shared items
    of a repeated pattern; an exact LCS after trimming the common prefix and suffix
    does not. Identical blocks share the cached result.
    """
    lo = 0
    while lo < len(a) and lo < len(b) and a[lo] == b[lo]:
        lo += 1
    hi_a, hi_b = len(a), len(b)
    while hi_a > lo and hi_b > lo and a[hi_a - 1] == b[hi_b - 1]:
        hi_a -= 1
        hi_b -= 1
    ma = set(range(lo)) | set(range(hi_a, len(a)))
    mb = set(range(lo)) | set(range(hi_b, len(b)))
    mid_a, mid_b = a[lo:hi_a], b[lo:hi_b]
    if mid_a and mid_b:
        if len(mid_a) * len(mid_b) <= _LCS_CELLS:
            pairs = _lcs_pairs(mid_a, mid_b)
        else:
            sm = difflib.SequenceMatcher(a=mid_a, b=mid_b, autojunk=False)
            pairs = [(blk.a + k, blk.b + k) for blk in sm.get_matching_blocks()
                     for k in range(blk.size)]
        ma.update(lo + i for i, _ in pairs)
        mb.update(lo + j for _, j in pairs)
    return frozenset(ma), frozenset(mb)


def _lcs_pairs(a: tuple, b: tuple) -> list[tuple[int, int]]:
    """Index pairs of one longest common subsequence of `a` and `b` (dynamic programming)."""
    n, m = len(a), len(b)
    table = np.zeros((n + 1, m + 1), dtype=np.int32)
    for i in range(n - 1, -1, -1):
        ai = a[i]
        row, below = table[i], table[i + 1]
        for j in range(m - 1, -1, -1):
            row[j] = below[j + 1] + 1 if ai == b[j] else max(below[j], row[j + 1])
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        if a[i] == b[j]:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif table[i + 1][j] >= table[i][j + 1]:
            i += 1
        else:
            j += 1
    return pairs


def _pairs(a: tuple, b: tuple) -> tuple[list[int], list[int]]:
    """The aligned index pairs of `a` and `b`, as two sorted lists (pair k = (a[k], b[k]))."""
    ma, mb = _alignment(a, b)
    return sorted(ma), sorted(mb)


def _position(pairs: tuple[list[int], list[int]], i: int) -> int:
    """Where item `i` of the first sequence would go in the second: just after the second's
    item paired with the first's last paired item before `i`."""
    pa, pb = pairs
    k = bisect.bisect_left(pa, i)
    return pb[k - 1] + 1 if k else 0


def _partial_from_alignment(ctx, groups, k, d, b, n, tsig, by_thread, c) -> None:
    """Collective requests that some threads make and others do not.

    For each thread that never made the request, the place it belongs in that thread's
    sequence (the event it should precede) is recorded as the finding's `missing`.
    """
    table = ctx.table
    block = table.blocks[b]
    empty = np.zeros(0, dtype=np.int64)
    cut = ctx.cut_short(k, d, b)  # (some threads may have stopped before they got there)
    # occurrence (row of the first thread that has it) -> threads that have it
    present: dict[tuple, set[int]] = {}
    witness: dict[tuple, tuple[int, int]] = {}  # key -> (thread, index in its sequence)
    base_t = 0
    base = tsig[base_t]
    base_rows = by_thread.get(base_t, empty)
    pairs = {t: _pairs(base, tsig[t]) for t in range(n) if t != base_t}

    def before(t: int, pos: int) -> int | None:
        rows = by_thread.get(t, empty)
        return int(rows[pos]) if pos < len(rows) else None

    # Align every thread against thread 0; items unmatched on either side are partial.
    unmatched_base: dict[int, set[int]] = {}
    for t in range(n):
        if t == base_t:
            continue
        rows = by_thread.get(t, empty)
        matched_a, matched_b = set(pairs[t][0]), set(pairs[t][1])
        for i in range(len(base)):
            if i not in matched_a:
                unmatched_base.setdefault(i, set()).add(t)
        for j in range(len(tsig[t])):
            if j not in matched_b:
                r = int(rows[j])
                key = (int(c["source"][r]), tsig[t][j])
                present.setdefault(key, set()).add(t)
                witness.setdefault(key, (t, j))
    for i, missing in unmatched_base.items():
        r = int(base_rows[i])
        if c["initial_ref_count"][r] <= 1:
            continue
        have = sorted(set(range(n)) - missing)
        where = [(m, before(m, _position(pairs[m], i))) for m in sorted(missing)]
        _add_partial(ctx, groups, k, d, block, r, have, where, n, by_thread, cut)
    for key, have in present.items():
        t, j = witness[key]
        r = int(by_thread[t][j])
        if c["initial_ref_count"][r] <= 1:
            continue
        # where it would go in thread 0's sequence, then in each other missing thread's
        flipped = (pairs[t][1], pairs[t][0])
        in_base = _position(flipped, j)
        where = []
        for m in sorted(set(range(n)) - have):
            pos = in_base if m == base_t else _position(pairs[m], in_base)
            where.append((m, before(m, pos)))
        _add_partial(ctx, groups, k, d, block, r, sorted(have), where, n, by_thread, cut)


def _add_partial(ctx, groups, k, d, block, row, have, where, n, by_thread,
                 cut: bool = False) -> None:
    """`where`: (missing thread, the event it should precede or None for "at the end").

    `cut`: the block was cut short (its kernel failed before all its threads finished).
    Which threads got to the request then varies from run to run: a thread whose
    sequence ends before the request's place and that did not finish may simply have
    stopped first, so it is not said to skip it, nor the others to be the only ones
    that make it; the finding names what is certain (the threads that made another
    request in its place, or made later requests), with the block's threads as cells."""
    src = ctx.table.source_of(row)
    if cut:
        where = [(m, at) for m, at in where
                 if at is not None or ctx.exits.done(k, d, block, m)]
    missing = [m for m, _ in where]
    cells = ([(d, block, t) for t in range(n)] if cut else
             [(d, block, t) for t in have] + [(d, block, t) for t in missing])
    # how many times each thread made it: a loop's trip count, or a branch in a loop
    # that skips it in some iterations for some threads (then every thread may make it,
    # some fewer times: none "never requests it")
    times = (_times_made(ctx.table, row, by_thread, n)
             if src is not None and src.branch is not None else ())
    merged = _merged_in_place(ctx, row, missing, by_thread, src)
    if cut and not missing:
        return  # nothing certain: every thread without it may have stopped first
    branch = src.branch if src is not None else None
    how = ("loop" if branch is None or branch.kind == "loop"
           else f"the {branch_call(branch)} at {branch.label(src)}")
    detail = (have, missing, ctx.what(row), n, times, merged, cut, how)
    groups.add("partial_collective", "error", k,
               (src, "cut short") if cut else (src, tuple(have)), src, cells, [row],
               partial_message(ctx, k), partial_hint(src, merged=bool(merged)),
               detail=detail, missing=[((d, block, m), seq) for m, seq in where])


def _merged_in_place(ctx, row: int, missing: list[int], by_thread: dict, src) -> tuple:
    """The missing threads that made another collective request in this one's place, which
    the interpreter merged with it (the same allocation): ((threads, what, where), ...),
    grouped by what they requested and where. (Whether they make `row`'s request too,
    later, is not said: a failure can stop them before they get there, by chance.)"""
    c = ctx.table.columns
    alloc = int(c["allocation"][row])
    if alloc < 0:
        return ()
    empty = np.zeros(0, dtype=np.int64)
    by_req: dict[tuple, list[int]] = {}
    for m in missing:
        rows = by_thread.get(m, empty)
        same = rows[c["allocation"][rows] == alloc] if len(rows) else rows
        if not len(same):
            continue
        r = int(same[0])
        other = ctx.table.source_of(r)
        where = "an unknown line" if other is None else other.label_with_call(src)
        by_req.setdefault((ctx.what(r), where), []).append(m)
    return tuple((tuple(ts), what, where)
                 for (what, where), ts in sorted(by_req.items(), key=lambda kv: kv[1][0]))


def _times_made(table: EventTable, row: int, by_thread: dict, n: int) -> tuple:
    """How many requests each of a block's `n` threads made at `row`'s line, grouped:
    ((count, (threads...)), ...), most first (a loop's trip count, as the threads ran it)."""
    source = table.columns["source"]
    line = source[row]
    empty = np.zeros(0, dtype=np.int64)
    by_count: dict[int, list[int]] = {}
    for t in range(n):
        count = int((source[by_thread.get(t, empty)] == line).sum())
        by_count.setdefault(count, []).append(t)
    return tuple((count, tuple(ts)) for count, ts in sorted(by_count.items(), reverse=True))


def block_alignment(table: EventTable, kernel: int, device: int, block: int,
                    cache: dict | None = None, threads: int = 0) -> dict:
    """The threads' allocation requests of one block, aligned like a diff.

    Returns `{"threads": [t, ...], "rows": [[seq or None per thread], ...]}`: each row is
    one request position; a thread with None there never made that request (a gap). The
    alignment is the one the sequence analysis uses (each thread against thread 0).
    `threads`: the kernel's threads per block, every one a column (a thread that made no
    request at all is one the table cannot tell of).
    A caller aligning many blocks of one table passes one `cache` dict to every call: the
    table's sequences and request ids are then computed once, not once per block.
    """
    cache = {} if cache is None else cache
    if "seqs" not in cache:
        cache["seqs"] = thread_sequences(table)
    seqs = cache["seqs"].get((kernel, device, block), {})
    if not seqs:
        return {"threads": [], "rows": []}
    if "sig" not in cache:
        cache["sig"] = _signatures(table)
    sig = cache["sig"]
    n = max(max(seqs) + 1, threads)
    empty = np.zeros(0, dtype=np.int64)
    rows_of = {t: seqs.get(t, empty) for t in range(n)}
    tsig = {t: tuple(sig[rows_of[t]].tolist()) for t in range(n)}
    base = tsig[0]
    # for each base position: the other threads' matched items; unmatched ones go before
    # the next base position they precede
    matched: dict[int, dict[int, int]] = {i: {0: int(rows_of[0][i])} for i in range(len(base))}
    extra: dict[int, list[tuple[int, int]]] = {}  # base position -> [(thread, seq)]
    for t in range(1, n):
        pa, pb = _pairs(base, tsig[t])
        pair_of = dict(zip(pb, pa))
        for j in range(len(tsig[t])):
            seq = int(rows_of[t][j])
            if j in pair_of:
                matched[pair_of[j]][t] = seq
            else:
                extra.setdefault(_position((pb, pa), j), []).append((t, seq))
    out = []
    for i in range(len(base) + 1):
        for t, seq in extra.get(i, []):
            row = [None] * n
            row[t] = seq
            out.append(row)
        if i < len(base):
            out.append([matched[i].get(t) for t in range(n)])
    return {"threads": list(range(n)), "rows": out}
