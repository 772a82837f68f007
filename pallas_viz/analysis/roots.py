"""Root causes: fold every symptom of one mistake under the finding that explains it.

One collective allocation in a thread-dependent branch shows up as a partial
collective, a sequence divergence, a leak, an interpreter error, a race, and (since
the interpreter's buffer ids carry on from block to block) as partial collectives at
correct, unconditional lines of later blocks. The user must fix one line.

The rules, per kernel:
- A *root candidate* is a partial collective that the missing threads really skipped:
  they made no request at that line in that block. (A thread that did reach the line
  but joined another buffer was shifted by an earlier divergence: a consequence.)
- Candidates merged into one buffer (a `collective_mismatch` naming both lines) are
  one bug; so are candidates under the same branch line. Requests at one line that
  disagree on shape (the thread's branch picks it) are one bug, whose root is that
  mismatch: the partial collectives it shows depend on which threads the run recorded.
- The root of a bug is its earliest candidate, by block in grid order, then by its
  place in its thread's own sequence (program order), then source line: never by
  thread interleaving (nor by whether a later symptom was recorded before a failure
  stopped the kernel).
- Every other finding of the kernel (divergence, leak, interpreter error, deadlock,
  aliasing race, partial or mismatch at an unconditional line) is a consequence of
  the bug that shares one of its lines, else of the kernel's first bug.
- An allocation made inside warp-level code (`warp_allocation`) is a root of its own,
  and every other finding of its kernel is its consequence: interpret mode mis-shares
  such an allocation between warps, so what the kernel then does is its symptom.
- A kernel without a root candidate keeps its findings as roots, except that a
  sequence divergence, partial collective and mismatch of one kernel fold into one
  root (with the failures and leaks that follow from it), and leaks fold under an
  error root of the same line.
- A thread that arrives at a barrier again before waiting for its previous arrival's
  phase (`barriers.is_rearrival`) owns the other misuses of that barrier (the same
  allocation) and JAX's missed-phase errors: which of them a run shows depends on the
  interleaving.
- A deadlock on a slot of a barrier array (`full.at[1]`) whose other slot's phases
  completed before they were observed (`barriers.sibling_slots`: arrivals sent to one
  fixed slot) is a consequence of that misuse.
- Phases of a barrier completing too early because its arriving threads were let go by
  another barrier's waits, itself running ahead (a pipeline's "empty" barrier after its
  "full" one: `barriers.released_by`), are a consequence of that barrier's misuse.
- In a kernel cut short, the cells of a root about the threads' requests are not only
  those the run recorded (`cut_short_cells.settled`): the blocks that run at once (a
  cluster's, and the same block on every device) and a block's threads that the failure
  may have stopped before they got to the line are lit as well, as which of them got
  there first varies from run to run.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .._jax import messages
from ..model import FINDING_KINDS, Finding, SourceLocation
from .barriers import (
    is_every_holder,
    is_freed_part,
    is_never_awaited,
    is_over_arrival,
    is_rearrival,
    is_unobserved,
    released_by,
    same_barrier,
    sibling_slots,
    waited_on_by,
    waits_on_too,
)
from .collective import branch_call, is_shape_mismatch, partial_hint
from .context import AnalysisContext, and_list, cell_key, line_key
from .cut_short_cells import settled
from .frame import CREATE, JOIN

_KIND_ORDER = {k: i for i, k in enumerate(FINDING_KINDS)}
_DIVERGENCE = ("collective_mismatch", "partial_collective", "sequence_divergence")
_SYMPTOMS = ("interpreter_error", "race", "deadlock", "leak")
# Findings about threads whose requests part: their root names the branch they part at.
_PARTING = (*_DIVERGENCE, "warp_allocation")
# Findings that are never another bug's symptom: each is a root of its own.
_INDEPENDENT = ("smem_over_budget", "tmem_over_budget", "trace_error")


def _line(loc: SourceLocation | None) -> tuple:
    return ("", 0) if loc is None else (loc.file, loc.line)


def _lines(f: Finding) -> set[tuple]:
    return {_line(x) for x in [f.source, *f.related] if x is not None}


def _race_key(f: Finding) -> tuple:
    """A race's place among races on one buffer: its line, then all its lines."""
    return (_line(f.source), sorted(_lines(f)))


def _place_key(f: Finding) -> tuple:
    """Where a finding first shows, in grid order (deterministic, unlike event order)."""
    places = [(b if b is not None else (), d) for d, b, _ in f.cells]
    return (min(places) if places else ((), 0), _line(f.source))


def _skipped(ctx: AnalysisContext, f: Finding) -> bool:
    """True if the threads missing from a partial collective never reached its line."""
    if not f.events or f.source is None:
        return False
    c = ctx.table.columns
    rows = np.asarray(f.events, dtype=np.int64)
    src = c["source"][rows]
    src = src[src >= 0]
    if len(src) == 0:
        return False
    line_src = np.unique(src)
    # the (device, block index) pairs the finding covers
    places = {(int(c["device"][r]), int(c["block"][r])) for r in rows.tolist()}
    kr = ctx.table.kernel_rows(int(c["kernel"][rows[0]]))
    op = c["op"][kr]
    kr = kr[np.isin(c["source"][kr], line_src) & ((op == CREATE) | (op == JOIN))]
    device, block_index, thread = c["device"][kr], c["block"][kr], c["thread"][kr]
    for d, b in places:
        requesters = set(thread[(device == d) & (block_index == b)].tolist())
        block = ctx.table.block(b)
        cell_threads = {t for dd, bb, t in f.cells if dd == d and bb == block}
        if cell_threads - requesters:
            return True
    return False


def _root_key(ctx: AnalysisContext, f: Finding) -> tuple:
    """Which of a bug's candidates is its root: the first block in grid order, then the
    earliest place in a thread's own sequence of requests (program order: what every
    thread made there was recorded before any later request could fail), then the line."""
    place = _place_key(f)
    c = ctx.table.columns
    first = place[0]
    pos = [int(c["thread_seq"][r]) for r in f.events
           if (ctx.table.block(int(c["block"][r])) or (), int(c["device"][r])) == first]
    return (first, min(pos) if pos else 0, place[1])


class _Bugs:
    """Union-find over root candidates."""

    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, i: int, j: int) -> None:
        a, b = self.find(i), self.find(j)
        if a != b:
            self.parent[max(a, b)] = min(a, b)


def _as_root(f: Finding, consequences: list[Finding], branches: bool = True) -> Finding:
    """`f` with its consequences; `branches`: the other branches its partial collectives
    part at are named with it (its related lines)."""
    # the branch the threads part at: of a finding about threads that made different
    # requests; the branch around a wait, an arrival or an access is not one
    branch = (f.source.branch if f.source is not None and f.kind in _PARTING else
              f.branch if f.kind == "deadlock" else None)  # (a skipped arrival's branch)
    related = list(f.related)
    for c in consequences if branches else ():
        b = c.source.branch if c.source is not None else None
        if b is not None and b != branch and b not in related and c.kind == "partial_collective":
            related.append(b)
    return dataclasses.replace(f, branch=branch, related=related,
                               consequences=sorted(consequences, key=_order))


def _order(f: Finding):
    return (0 if f.severity == "error" else 1, _KIND_ORDER.get(f.kind, 99), _place_key(f))


def _fold_kernel(ctx: AnalysisContext, fs: list[Finding]) -> list[Finding]:
    warp = next((f for f in fs if f.kind == "warp_allocation"), None)  # one per kernel
    if warp is not None:
        # (which symptoms a mis-shared allocation shows varies from run to run: their
        # branches are not named with it)
        return [_as_root(warp, [f for f in fs if f is not warp], branches=False)]
    partials = [f for f in fs if f.kind == "partial_collective"]
    candidates = [f for f in partials if _skipped(ctx, f)]
    if not candidates:
        return _fold_without_candidates(ctx, fs)
    bugs = _Bugs(len(candidates))
    by_line = {}
    for i, f in enumerate(candidates):
        for key in [_line(f.source)] + ([("branch",) + _line(f.source.branch)]
                                        if f.source is not None and f.source.branch else []):
            if key in by_line:
                bugs.union(i, by_line[key])
            by_line.setdefault(key, i)
    for m in (f for f in fs if f.kind == "collective_mismatch"):
        hit = [by_line[x] for x in _lines(m) if x in by_line]
        for j in hit[1:]:
            bugs.union(hit[0], j)
    groups: dict[int, list[Finding]] = {}
    for i, f in enumerate(candidates):
        groups.setdefault(bugs.find(i), []).append(f)
    # The earliest skipped allocation is the root: whether a later one (or the mismatch
    # it causes) was recorded before a failure stopped the kernel depends on timing.
    roots = {g: min(members, key=lambda f: _root_key(ctx, f)) for g, members in groups.items()}
    # Requests at one line whose shape the thread's branch picks: the line to change is
    # that one, and which threads' requests the run recorded (the partial collectives it
    # shows) varies
    for m in fs:
        if is_shape_mismatch(m):
            g = next((by_line[x] for x in sorted(_lines(m)) if x in by_line), None)
            if g is not None:
                roots[bugs.find(g)] = m
    first_bug = min(groups, key=lambda g: _root_key(ctx, roots[g]))
    line_owner = {}
    for g, members in groups.items():
        for f in members:
            for x in _lines(f):
                line_owner.setdefault(x, g)
    consequences: dict[int, list[Finding]] = {g: [] for g in groups}
    chosen = {id(r) for r in roots.values()}
    for f in fs:
        if id(f) in chosen:
            continue
        owner = next((line_owner[x] for x in sorted(_lines(f)) if x in line_owner), first_bug)
        consequences[owner].append(f)
    for g in groups:
        opens = _branches_open(ctx, roots[g])
        if opens is not None:
            consequences[g].append(roots[g])
            roots[g] = opens
    return [_as_root(roots[g], consequences[g]) for g in groups]


def _branches_open(ctx: AnalysisContext, f: Finding) -> Finding | None:
    """The root of threads that take different branches of a `lax.cond` / `lax.switch`
    whose branches each open a collective scope of their own first (the branch's `starts`,
    read from the source): told from the source, where the branches open them, lit in
    every thread of its blocks. What a run shows of it (which thread's request in whose
    place) depends on which threads the failure the merge causes let make their request
    first; None for any other root."""
    src = f.source
    branch = src.branch if src is not None else None
    if (f.kind != "partial_collective" or branch is None or branch.kind != "branch"
            or not branch.starts):
        return None
    starts = sorted(branch.starts, key=line_key)
    lines = sorted({s.line for s in starts if s.file == src.file})
    if len(lines) < 2 or src.line not in lines:
        return None
    message = (f"each branch of the {branch_call(branch, 'branch')} at line {branch.line} "
               f"opens a collective scope of its own first, at lines {and_list(lines)}: the "
               "interpreter matches collective requests by their place in each thread's "
               "sequence, so the threads that take different branches share one buffer and "
               "alias each other's memory")
    threads = (ctx.kernels[f.kernel].threads_per_block
               if f.kernel is not None and 0 <= f.kernel < len(ctx.kernels) else 0)
    cells = sorted({(d, b, t) for d, b, _ in f.cells for t in range(threads)} | set(f.cells),
                   key=cell_key)
    first = dataclasses.replace(starts[0], branch=branch)
    return dataclasses.replace(
        f, source=first, message=message, cells=cells, missing=[],
        related=[s for s in starts[1:] if (s.file, s.line) != (first.file, first.line)],
        suggestion=partial_hint(first, merged=True))


def _fold_without_candidates(ctx: AnalysisContext, fs: list[Finding]) -> list[Finding]:
    div = [f for f in fs if f.kind in _DIVERGENCE]
    rest = [f for f in fs if f.kind not in _DIVERGENCE]
    out: list[tuple[Finding, list[Finding]]] = []
    if div:
        root = min(div, key=lambda f: (_DIVERGENCE.index(f.kind), _place_key(f)))
        # what the interpreter raised after threads merged mismatched requests is a
        # symptom of that divergence, as are the leaks it left
        folded = [f for f in rest if f.kind in _SYMPTOMS]
        out.append((root, [f for f in div if f is not root] + folded))
        rest = [f for f in rest if f.kind not in _SYMPTOMS]
    for f in rest:
        out.append((f, []))
    # a leak at the line of an error root is that root's consequence; so is a barrier
    # misuse at a deadlock's line, and an interpreter error at a misuse's line
    # (an owner's related lines count: a misuse names the arrival that completed the
    # unobserved phase, where the interpreter raised)
    by_kind_line: dict[tuple, int] = {}
    for i, (r, _) in enumerate(out):
        for x in sorted(_lines(r)):
            by_kind_line.setdefault((r.kind, x), i)
    errors = {_line(r.source): i for i, (r, _) in enumerate(out) if r.severity == "error"}
    owner_kind = {"leak": None, "barrier_misuse": "deadlock",
                  "interpreter_error": "barrier_misuse"}
    owners: list[int | None] = []
    for i, (r, _) in enumerate(out):
        owner = None
        if r.kind in owner_kind:
            want = owner_kind[r.kind]
            owner = (errors.get(_line(r.source)) if want is None
                     else by_kind_line.get((want, _line(r.source))))
            if owner == i:
                owner = None  # never a consequence of itself
        if owner is None and r.kind == "barrier_misuse" and not is_rearrival(r):
            # a phase completed early because a thread arrived again without waiting:
            # whether the run showed that (and at which phase) depends on the interleaving
            owner = next((j for j, (m, _) in enumerate(out)
                          if is_rearrival(m) and same_barrier(ctx, m, r)), None)
        if owner is None and is_unobserved(r) and not is_over_arrival(r):
            # phases of a barrier that complete too early because the waits on another
            # barrier released its arriving threads too early (a pipeline's "empty"
            # barrier after its "full" one): whether the run got that far varies. (Not
            # a barrier that more threads arrive at than it counts: that is its own
            # mistake, however its arriving threads were let go.)
            owner = next((j for j, (m, _) in enumerate(out)
                          if j != i and is_unobserved(m) and released_by(ctx, m, r)
                          and not released_by(ctx, r, m)), None)
            if owner is None:
                # ... or because a barrier its arriving threads wait on completes a phase
                # at every arrival (two consumers releasing an "empty" barrier counting
                # one): the producer's next arrival comes early
                owner = next((j for j, (m, _) in enumerate(out)
                              if j != i and is_over_arrival(m) and waits_on_too(ctx, m, r)),
                             None)
        if owner is None and r.kind == "deadlock":
            # a wait on one slot of a barrier array whose arrivals completed another
            # slot's phases too early (a fixed `full.at[0]` in a ring): whether the run
            # stopped at the overrun or got as far as the wait varies
            owner = next((j for j, (m, _) in enumerate(out)
                          if is_unobserved(m) and sibling_slots(ctx, m, r)), None)
        if owner is None and r.kind == "race":
            # a racing thread waited on a barrier whose phase completed before every
            # thread holding it arrived: the wait let it read (or write) too early
            owner = next((j for j, (m, _) in enumerate(out)
                          if is_every_holder(m) and waited_on_by(ctx, m, r.cells)), None)
        if owner is None and r.kind == "race":
            # a race at the line whose arrivals completed a barrier's phases before they
            # were observed (a copy started again before its data was consumed): whether
            # the run went on after the race to show the misuse varies by JAX version
            owner = next((j for j, (m, _) in enumerate(out)
                          if is_unobserved(m) and _line(m.source) in _lines(r)), None)
        if owner is None and r.kind == "race" and r.severity == "error":
            # two races on one buffer sharing an access line (a copy started again before
            # its destination was consumed races both the earlier copy and the reader;
            # which of them a run reports, one or both, varies): one mistake, one root,
            # the first by its lines
            same = [j for j, (m, _) in enumerate(out)
                    if j != i and m.kind == "race" and m.severity == "error"
                    and set(m.events) & set(r.events) and _lines(m) & _lines(r)]
            # (ties, the same race between other threads: the first in the list)
            first = min(same + [i], key=lambda j: (_race_key(out[j][0]), j))
            owner = None if first == i else first
        if owner is None and is_never_awaited(r):
            # the race JAX found where the copy's destination was read (0.11 runs on)
            owner = next((j for j, (m, _) in enumerate(out)
                          if m.kind == "race" and _lines(m) & _lines(r)), None)
        if owner is None and is_freed_part(r):
            # a block left a cluster barrier's scope early because its phases completed
            # with too few of the arrivals meant for them: the over-arrival's symptom
            owner = next((j for j, (m, _) in enumerate(out)
                          if is_over_arrival(m) and _line(m.source) in _lines(r)), None)
        if owner is None and r.kind == "interpreter_error" and messages.is_missed_phase(
                r.message):
            # raised at a waiter's line when arrivals ran ahead of it: the misuse names
            # the arrival (which waits a run recorded before the failure varies)
            misuse = ([j for j, (m, _) in enumerate(out) if is_rearrival(m)]
                      or [j for j, (m, _) in enumerate(out) if m.kind == "barrier_misuse"])
            if misuse:
                owner = min(misuse, key=lambda j: _place_key(out[j][0]))
        owners.append(owner)

    def final(i: int) -> int:
        seen = set()
        while owners[i] is not None and i not in seen:
            seen.add(i)
            i = owners[i]
        return i

    merged: dict[int, tuple[Finding, list[Finding]]] = {}
    for i, (r, cons) in enumerate(out):
        top = final(i)
        if top == i:
            merged.setdefault(i, (r, []))[1].extend(cons)
        else:
            merged.setdefault(top, (out[top][0], []))[1].extend([r, *cons])
    merged = [merged[i] for i in sorted(merged)]
    return [_as_root(r, cons) for r, cons in merged]


def fold_root_causes(ctx: AnalysisContext, findings: list[Finding]) -> list[Finding]:
    """The root causes, each with the findings it explains as `consequences`."""
    by_kernel: dict = {}
    for f in findings:
        by_kernel.setdefault(f.kernel, []).append(f)
    roots: list[Finding] = []
    for k, fs in by_kernel.items():
        roots += [_as_root(f, []) for f in fs if k is None or f.kind in _INDEPENDENT]
        rest = [f for f in fs if k is not None and f.kind not in _INDEPENDENT]
        if rest:
            roots += [settled(ctx, r) if r.kind in _PARTING else r
                      for r in _fold_kernel(ctx, rest)]
    return sorted(roots, key=_order)
