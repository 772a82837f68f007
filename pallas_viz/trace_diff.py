"""Compare two traces: which root causes a change fixed, kept or introduced, and how the
allocation sequences of every block and thread moved.

    d = diff(before, after)          # pv.Trace each (pv.load() them from JSON if needed)
    print(d.summary())               # "kernel collective_in_branch -> hoisted_collective:
                                     #  1 root cause fixed, 0 still there, 0 new" + details
    d.new_errors                     # error root causes that only `after` has
    d.to_dict()                      # JSON-able
    d.cells()                        # per kernel and side: each block x thread cell's
                                     #  status ("fixed", "still", "new" or "clean")

Kernels are paired by name (the i-th run of a name before with the i-th run after), then
the rest by index. A root cause is identified by its kind, source file, line and function
(not its message nor its cells); one that moved to another line of the same function with
the same code text (an edit above it) still counts as "still there", and so does one at the
same code text in a renamed function (a kernel renamed). Allocation sequences
(the create/join requests of each (device, block, thread, warp), in order) are aligned with
`difflib.SequenceMatcher` on (file, line, the call that led to a line in a helper,
resource, memory space, shape, dtype); the identical changes of many cells are reported
once, with their cells.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
from collections import defaultdict

import numpy as np

from .cells import block_label
from .file_names import cell_label
from .model import MEMORY_SPACES, RESOURCES, Finding, SourceLocation

# (device, block, thread, warp): one allocation sequence. block is None for a
# kernel-level request, warp None for a warpgroup-level thread.
SeqKey = tuple[int, tuple[int, ...] | None, int, int | None]

# The status of a cell in a compare grid, lowest priority first: a cell covered by root
# causes of several statuses gets the last of them (a new error outweighs one still there,
# which outweighs one fixed).
CELL_STATUSES = ("clean", "fixed", "still", "new")

_MAX_DETAIL_ROWS = 12  # allocation changes shown per kernel in `summary()`

_COLORS = {"fixed": "\033[1;32m", "new": "\033[1;31m", "still": "\033[1;33m",
           "bold": "\033[1m", "dim": "\033[2m", "reset": "\033[0m"}


# --------------------------------------------------------------------------- records


@dataclasses.dataclass(frozen=True)
class Allocation:
    """What one create/join request asked for (the part that is compared)."""

    resource: str
    memory_space: str | None
    shape: tuple[int, ...] | None
    dtype: str | None
    source: SourceLocation | None

    def describe(self) -> str:
        if self.resource == "buffer":
            what = self.memory_space or "buffer"
        else:
            what = self.resource.replace("_", " ")
            if self.memory_space:
                what = f"{self.memory_space} {what}"
        parts = [p for p in (what, _shape(self.shape), self.dtype) if p]
        return " ".join(parts) or self.resource

    def where(self) -> str:
        return _short(self.source) if self.source is not None else "?"

    def call(self) -> str:
        """Where the helper holding the line was called ("k.py:40"), or "" (none)."""
        via = None if self.source is None else self.source.via
        return _short(via) if via is not None else ""

    def at(self) -> str:
        """" at k.py:54", " at h.py:12 (called from k.py:40)" for a line in a helper, or
        nothing for a request without a line (a kernel operand)."""
        if self.source is None:
            return ""
        call = self.call()
        return f" at {self.where()}" + (f" (called from {call})" if call else "")

    def to_dict(self) -> dict:
        return {"resource": self.resource, "memory_space": self.memory_space,
                "shape": None if self.shape is None else list(self.shape),
                "dtype": self.dtype,
                "source": None if self.source is None else self.source.to_dict()}


@dataclasses.dataclass
class AllocationChange:
    """One aligned difference of allocation sequences, shared by `cells`.

    `change` is "added" (only after), "removed" (only before) or "changed" (same
    position in the alignment, different request: `fields` names what differs among
    "line", "call" (the same line of a helper, called from elsewhere), "resource",
    "memory_space", "shape", "dtype").
    """

    change: str
    before: Allocation | None
    after: Allocation | None
    position_before: int | None
    position_after: int | None
    fields: tuple[str, ...]
    cells: list[SeqKey]

    def describe(self, thread_word: str = "thread", count: int = 1) -> str:
        """`count`: this and the next `count - 1` changes alike (`_runs`), as one line."""
        return f"{_describe_keys(self.cells, thread_word)}: {self.body(count)}"

    def body(self, count: int = 1) -> str:
        """What changed, without where: "+ SMEM (128,) float32 at k.py:54 (request #0)";
        with `count`, "+ 4 x barrier at k.py:60 (requests #2..#5)"."""
        many = f"{count} x " if count > 1 else ""
        if self.change == "added":
            body = f"+ {many}{self.after.describe()}{self.after.at()}"
        elif self.change == "removed":
            body = f"- {many}{self.before.describe()}{self.before.at()}"
        elif self.fields == ("line",):
            body = (f"~ {self.before.describe()} moved from {self.before.where()} to "
                    f"{self.after.where()}")
        elif self.fields == ("call",):
            was = self.before.call() or "the traced function itself"
            now = self.after.call() or "the traced function itself"
            body = (f"~ {self.before.describe()} at {self.before.where()}: its helper is "
                    f"called from {now} (was {was})")
        else:
            body = (f"~ {self.before.describe()}{self.before.at()} -> "
                    f"{self.after.describe()}{self.after.at()} "
                    f"({', '.join(self.fields)} changed)")
        if count > 1 and body.startswith("~ "):
            body = f"~ {many}{body[2:]}"
        pos = self._position()
        # a kernel-level sequence is the kernel's operands, in their order
        word = "operand" if all(b is None for _, b, _, _ in self.cells) else "request"
        if count > 1:
            return f"{body} ({word}s #{pos}..#{pos + count - 1})"
        return f"{body} ({word} #{pos})"

    def _alike(self) -> tuple:
        return (self.change, self.before, self.after, self.fields, tuple(self.cells))

    def _position(self) -> int:
        return self.position_after if self.position_before is None else self.position_before

    def to_dict(self) -> dict:
        return {
            "change": self.change,
            "before": None if self.before is None else self.before.to_dict(),
            "after": None if self.after is None else self.after.to_dict(),
            "position_before": self.position_before,
            "position_after": self.position_after,
            "fields": list(self.fields),
            "cells": [[d, None if b is None else list(b), t, w] for d, b, t, w in self.cells],
        }


@dataclasses.dataclass
class GridStatus:
    """One side of a kernel diff as the compare view draws it: blocks (rows, grid order)
    x threads, each cell's status and the root causes there.

    The before side marks the cells of its root causes "fixed" or "still"; the after side
    marks those of its own "still" or "new", and a cell a fixed root covered before and
    no root covers now "fixed" (was an error cell, clean now). Every other cell is
    "clean". A cell under root causes of several statuses gets the highest of
    `CELL_STATUSES` (new > still > fixed). `roots[row][thread]` indexes
    `KernelDiff.roots()`.
    """

    side: str
    kernel: int
    name: str | None
    thread_axis: str | None
    rows: list[tuple[int, tuple[int, ...]]]  # (device, block)
    threads: int
    status: list[list[str]]
    roots: list[list[list[int]]]

    def count(self, status: str) -> int:
        return sum(row.count(status) for row in self.status)

    def counts(self) -> dict[str, int]:
        return {s: self.count(s) for s in CELL_STATUSES}

    def cells_with(self, status: str) -> list[tuple[int, tuple[int, ...], int]]:
        """The (device, block, thread) cells of one status, in grid order."""
        return [(d, b, t) for (d, b), row in zip(self.rows, self.status)
                for t, s in enumerate(row) if s == status]

    def status_of(self, device: int, block: tuple[int, ...], thread: int) -> str | None:
        try:
            return self.status[self.rows.index((device, tuple(block)))][thread]
        except (ValueError, IndexError):
            return None


@dataclasses.dataclass
class KernelDiff:
    """One kernel run before and after (either side may be missing).

    `index_before`/`index_after` are `None` for a kernel that runs on one side only, and
    both are `None` for the pseudo-kernel holding findings outside any kernel run (JAX
    rejecting a kernel at trace time). `still` pairs (before, after) findings. The root
    causes of a kernel that runs only before count as fixed, those of one that runs only
    after as new; allocations are compared only for kernels that run on both sides.
    """

    index_before: int | None
    index_after: int | None
    name_before: str | None
    name_after: str | None
    fixed: list[Finding] = dataclasses.field(default_factory=list)
    still: list[tuple[Finding, Finding]] = dataclasses.field(default_factory=list)
    new: list[Finding] = dataclasses.field(default_factory=list)
    allocations: list[AllocationChange] = dataclasses.field(default_factory=list)
    # HOOK: peak memory per block before vs after. Filled by `peak_memory_hook` once
    # pallas_viz.analysis.budget exists; None means "not computed", not "unchanged".
    peak_memory: dict | None = None
    # "before" / "after" -> that side's grid of cell statuses (`GridStatus`); a side the
    # kernel does not run on (and the pseudo-kernel "outside") has none.
    cell_status: dict[str, GridStatus] = dataclasses.field(default_factory=dict)
    # "before" / "after" -> the (device, block)s that side's run never reached (it stopped
    # first) but the other side ran: their allocations are not compared
    not_run: dict[str, list] = dataclasses.field(default_factory=dict)
    # the kernel's own name for its thread axis ("wg"), as the summary names threads
    thread_axis: str | None = None
    # a kernel of one side only that comes after the other side's last kernel, which
    # failed (the script stopped there): (the side that never got to it, that kernel's
    # index); its root causes are `unreached_roots`, neither fixed nor new
    unreached: tuple[str, int] | None = None
    unreached_roots: list[Finding] = dataclasses.field(default_factory=list)

    def changes_at(self, device: int, block: tuple[int, ...] | None, thread: int
                   ) -> list[int]:
        """Indices into `allocations` of the changes of the (device, block, thread) cell's
        sequences (any of its warps), in order."""
        at = self.__dict__.get("_changes_at")
        if at is None:
            at = {}
            for i, ch in enumerate(self.allocations):
                for d, b, t, _ in ch.cells:
                    ids = at.setdefault((d, b, t), [])
                    if not ids or ids[-1] != i:
                        ids.append(i)
            self.__dict__["_changes_at"] = at
        return list(at.get((device, None if block is None else tuple(block), thread), []))

    def roots(self) -> list[tuple[str, Finding]]:
        """(status, root cause) in the order `GridStatus.roots` indexes: the fixed ones (as
        before), those still there (as after), then the new ones."""
        return ([("fixed", f) for f in self.fixed] + [("still", b) for _, b in self.still]
                + [("new", f) for f in self.new])

    @property
    def status(self) -> str:
        """"both", "removed" (runs before only), "added" (after only) or "outside"."""
        if self.index_before is None and self.index_after is None:
            return "outside"
        if self.index_after is None:
            return "removed"
        if self.index_before is None:
            return "added"
        return "both"

    @property
    def label(self) -> str:
        if self.status == "outside":
            return "outside any kernel run"
        a = self.name_before or (None if self.index_before is None else f"#{self.index_before}")
        b = self.name_after or (None if self.index_after is None else f"#{self.index_after}")
        if self.unreached is not None:
            side, last = self.unreached
            return (f"kernel {a if self.status == 'removed' else b} (not compared: the "
                    f"{side} run stopped at kernel #{last}, which failed, before it)")
        if self.status == "removed":
            return f"kernel {a} (runs only before)"
        if self.status == "added":
            return f"kernel {b} (runs only after)"
        if a == b:
            return f"kernel {a}"
        # (paired by their place in the runs: say so, the two may be different kernels)
        return f"kernel {a} -> {b} (paired by order: the names differ)"

    @property
    def changed(self) -> bool:
        return bool(self.fixed or self.new or self.allocations
                    or self.status in ("removed", "added")
                    or any(_moved(a, b) or a.severity != b.severity for a, b in self.still))

    def to_dict(self) -> dict:
        return {
            "before": {"index": self.index_before, "name": self.name_before},
            "after": {"index": self.index_after, "name": self.name_after},
            "status": self.status,
            "fixed": [f.to_dict() for f in self.fixed],
            "still": [{"before": a.to_dict(), "after": b.to_dict()} for a, b in self.still],
            "new": [f.to_dict() for f in self.new],
            "allocations": [c.to_dict() for c in self.allocations],
            "not_run": {side: [{"device": d, "block": list(b)} for d, b in blocks]
                        for side, blocks in self.not_run.items()},
            "unreached": None if self.unreached is None else {
                "side": self.unreached[0], "stopped_at": self.unreached[1],
                "roots": [f.to_dict() for f in self.unreached_roots]},
            "peak_memory": self.peak_memory,
        }


@dataclasses.dataclass
class TraceDiff:
    """The differences between two traces, kernel by kernel (`diff(before, after)`)."""

    kernels: list[KernelDiff]

    @property
    def fixed(self) -> list[Finding]:
        return [f for k in self.kernels for f in k.fixed]

    @property
    def still(self) -> list[tuple[Finding, Finding]]:
        return [p for k in self.kernels for p in k.still]

    @property
    def new(self) -> list[Finding]:
        return [f for k in self.kernels for f in k.new]

    @property
    def new_errors(self) -> list[Finding]:
        """Root causes of severity "error" that only the `after` trace has, and those
        still there that were warnings before (an SMEM peak near the limit, over it now)."""
        return [f for f in self.new if f.severity == "error"] + [
            b for a, b in self.still if _escalated(a, b)]

    @property
    def allocations(self) -> list[AllocationChange]:
        return [c for k in self.kernels for c in k.allocations]

    @property
    def empty(self) -> bool:
        """True when nothing differs: same root causes, same allocations, same kernels."""
        return not any(k.changed for k in self.kernels)

    def __bool__(self) -> bool:
        return not self.empty

    def cells(self) -> list[GridStatus]:
        """Every grid of cell statuses: per kernel, its before side then its after side."""
        return [g for k in self.kernels for side in ("before", "after")
                if (g := k.cell_status.get(side)) is not None]

    def _ipython_display_(self) -> None:
        """In a Jupyter kernel: the static compare view, then the compare widget."""
        from .render.display import show_diff

        show_diff(self)

    def _repr_mimebundle_(self, include=None, exclude=None, **kwargs):
        """In a notebook: the compare widget (two grids, before | after), with this
        summary as text/plain and a static HTML rendering for other viewers."""
        from .render.compare_widget import mimebundle

        return mimebundle(self)

    def to_html(self, path) -> str:
        """Write the compare view as one self-contained HTML file (no network); returns
        the path."""
        from .render.compare_widget import write_html

        return write_html(self, path)

    def summary(self, color: bool = False) -> str:
        """Per kernel: "kernel NAME: N root cause(s) fixed, M still there, K new", then
        the root causes and allocation changes; a total line last."""
        out: list[str] = []
        for k in self.kernels:
            out += _kernel_summary(k, color)
        nf, ns, nn = len(self.fixed), len(self.still), len(self.new)
        if not self.kernels:
            out.append("pallas_viz diff: no Pallas kernel ran in either trace")
        elif self.empty:
            out.append(f"pallas_viz diff: no change ({_roots(ns)} still there, same "
                       "allocations)")
        else:
            ne = len(self.new_errors)
            verdict = f"{ne} new error(s)" if ne else "no new error"
            gone = sum(len(k.fixed) for k in self.kernels if k.status == "removed")
            # (a kernel that no longer runs: its root causes are gone, not shown fixed)
            fixed = (f"{_roots(nf)} fixed ({gone} of them in kernel(s) that run only before)"
                     if gone else f"{_roots(nf)} fixed")
            out.append(f"pallas_viz diff: {fixed}, {ns} still there, {nn} new "
                       f"({_c(verdict, 'new' if ne else 'fixed', color)}); "
                       f"{len(self.allocations)} allocation change(s)")
        return "\n".join(out)

    def to_dict(self) -> dict:
        return {
            "kernels": [k.to_dict() for k in self.kernels],
            "counts": {"fixed": len(self.fixed), "still": len(self.still),
                       "new": len(self.new), "new_errors": len(self.new_errors),
                       "allocation_changes": len(self.allocations)},
            "empty": self.empty,
        }


# --------------------------------------------------------------------------- diff


def diff(before, after) -> TraceDiff:
    """Compare two `pv.Trace`s (or the paths of two saved traces, loaded with `pv.load`):
    root causes fixed / still there / new, and allocation sequence changes, per kernel."""
    before, after = _as_trace(before, "before"), _as_trace(after, "after")
    pairs = _pair_kernels(before.kernels, after.kernels)
    by_kernel_a = _roots_by_kernel(before)
    by_kernel_b = _roots_by_kernel(after)
    sigs = _Signatures()
    seqs_a = _sequences(before, sigs)
    seqs_b = _sequences(after, sigs)
    stopped_a, stopped_b = before.failed_kernels(), after.failed_kernels()
    # a side whose last kernel failed may have stopped there (a raised error ends the
    # script): the other side's kernels after it were never run on this side
    last_a = len(before.kernels) - 1 if (len(before.kernels) - 1) in stopped_a else None
    last_b = len(after.kernels) - 1 if (len(after.kernels) - 1) in stopped_b else None
    all_a = [f for fs in by_kernel_a.values() for f in fs]
    all_b = [f for fs in by_kernel_b.values() for f in fs]
    out = []
    for ia, ib in pairs:
        ka = before.kernels[ia] if ia is not None else None
        kb = after.kernels[ib] if ib is not None else None
        kd = KernelDiff(ia, ib, ka.name if ka else None, kb.name if kb else None)
        kd.thread_axis = (kb.thread_axis if kb else None) or (ka.thread_axis if ka else None)
        # (key None of by_kernel_* holds the findings outside any kernel run)
        ra = by_kernel_a.get(ia, []) if ia is not None else []
        rb = by_kernel_b.get(ib, []) if ib is not None else []
        unreached = None
        if ib is None and last_b is not None and _after_last(pairs, ia, last_b):
            unreached = ("after", last_b)
        elif ia is None and last_a is not None and _after_last(pairs, ib, last_a, side=0):
            unreached = ("before", last_a)
        if unreached is not None:
            kd.unreached, kd.unreached_roots = unreached, ra or rb
            kd.cell_status = _cell_status(kd, before, after)
            out.append(kd)
            continue
        if ia is None or ib is None:
            # another run of a kernel the other side also ran: a root cause it shares
            # with the other side's runs is still there, not fixed nor new
            kd.fixed, kd.still, kd.new = _match_roots(ra, rb, all_a if ia is None else all_b,
                                                      ia is None)
        else:
            kd.fixed, kd.still, kd.new = _match_roots(ra, rb)
        if ia is not None and ib is not None:  # one-sided: the kernel itself is the change
            qa, qb = seqs_a.get(ia, {}), seqs_b.get(ib, {})
            # a run that stopped (a failure, a deadlock, an interrupt) never reached the
            # blocks after the one that stopped: those are not compared, and are named
            qa, qb, kd.not_run = _blocks_that_ran(qa, qb, ia in stopped_a,
                                                  ib in stopped_b)
            kd.allocations = _diff_sequences(qa, qb, sigs)
        kd.peak_memory = peak_memory_hook(before, ia, after, ib)
        kd.cell_status = _cell_status(kd, before, after)
        out.append(kd)
    outside_a, outside_b = by_kernel_a.get(None, []), by_kernel_b.get(None, [])
    if outside_a or outside_b:
        kd = KernelDiff(None, None, None, None)
        kd.fixed, kd.still, kd.new = _match_roots(outside_a, outside_b)
        out.append(kd)
    return TraceDiff(out)


def peak_memory_hook(before, kernel_before: int | None, after,
                     kernel_after: int | None) -> dict | None:
    """HOOK POINT, NOT IMPLEMENTED: peak memory per block, before vs after.

    To be wired to `pallas_viz.analysis.budget` (being written): return e.g.
    ``{"GMEM"/"SMEM"/...: {"before": {block: bytes}, "after": {block: bytes}}}`` and
    render it in `_kernel_summary`. Until then every `KernelDiff.peak_memory` is None
    (meaning "not computed").
    """
    return None


# --------------------------------------------------------------------------- kernels


def _pair_kernels(ka, kb) -> list[tuple[int | None, int | None]]:
    """(index before, index after) pairs: by name (i-th run with i-th run), then by
    index; unpaired kernels get None on the other side. Ordered by index before."""
    pairs: dict[int, int] = {}
    by_name_b: dict[str, list[int]] = defaultdict(list)
    for i, k in enumerate(kb):
        if k.name:
            by_name_b[k.name].append(i)
    for i, k in enumerate(ka):
        if k.name and by_name_b.get(k.name):
            pairs[i] = by_name_b[k.name].pop(0)
    used_b = set(pairs.values())
    for i in range(len(ka)):
        if i not in pairs and i < len(kb) and i not in used_b:
            pairs[i] = i
            used_b.add(i)
    out: list[tuple[int | None, int | None]] = [(i, pairs.get(i)) for i in range(len(ka))]
    # kernels only after, placed after their predecessor run
    for j in sorted(set(range(len(kb))) - used_b):
        pos = next((n + 1 for n in range(len(out) - 1, -1, -1)
                    if out[n][1] is not None and out[n][1] < j), 0)
        out.insert(pos, (None, j))
    return out


def _as_trace(value, name: str):
    """A `Trace` as given, or loaded from a path; anything else is a `TypeError`."""
    from .trace import Trace

    if isinstance(value, Trace):
        return value
    if isinstance(value, (str, os.PathLike)):
        from .trace import load

        return load(value)
    raise TypeError(f"pv.diff({name}=...) takes a pv.Trace or the path of a saved trace, "
                    f"not {type(value).__name__}")


def _roots_by_kernel(trace) -> dict[int | None, list[Finding]]:
    out: dict[int | None, list[Finding]] = defaultdict(list)
    n = len(trace.kernels)
    for f in trace.findings:
        k = f.kernel if f.kernel is not None and 0 <= f.kernel < n else None
        out[k].append(f)
    return out


def _identity(f: Finding) -> tuple:
    s = f.source
    if s is None:
        return (f.kind, None, None, None)
    return (f.kind, os.path.normpath(s.file), s.line, s.function)


def _code_identity(f: Finding, function: bool = True, line: bool = False) -> tuple | None:
    """A root's identity by its code text (None without one): its kind, file and code, with
    its function and its line when asked (the default: the same code text moved within
    its function)."""
    s = f.source
    if s is None or not s.code or not s.code.strip():
        return None
    return (f.kind, os.path.normpath(s.file), s.function if function else None,
            s.line if line else None, s.code.strip())


# How a root before is matched with one after, in turn: its exact identity; the same code
# text moved within its function; at the same line of a renamed function (the kernel
# renamed); at another line of a renamed function.
_MATCHES = (_identity, _code_identity,
            functools.partial(_code_identity, function=False, line=True),
            functools.partial(_code_identity, function=False))


def _moved(a: Finding, b: Finding) -> bool:
    """Whether a root still there is at another line (its function renamed alone is not
    a move: the kernel pair says the name changed)."""
    sa, sb = a.source, b.source
    if sa is None or sb is None:
        return (sa is None) != (sb is None)
    return (os.path.normpath(sa.file), sa.line) != (os.path.normpath(sb.file), sb.line)


def _escalated(a: Finding, b: Finding) -> bool:
    """A root cause still there that was no error before and is one now."""
    return a.severity != "error" and b.severity == "error"


def _after_last(pairs, index: int, last: int, side: int = 1) -> bool:
    """Whether the pair holding `index` (of the side that has it) comes after the pair
    holding the other side's kernel `last` in `pairs` (`side`: which element of a pair
    `last` is, 1 for after)."""
    own = 1 - side
    pos = next((n for n, p in enumerate(pairs) if p[own] == index), None)
    at = next((n for n, p in enumerate(pairs) if p[side] == last), None)
    return pos is not None and at is not None and pos > at


def _match_roots(ra: list[Finding], rb: list[Finding], others: list[Finding] | None = None,
                 added: bool = False):
    """(fixed, still as (before, after) pairs, new), matched in the order of `_MATCHES`:
    exact identity first, then the same code text. A kernel of one side only
    (`others`: the other side's root causes, `added`: it runs only after) keeps as still
    there a root the other side has in another run."""
    if others is not None:
        pairs, rest = [], []
        for f in (rb if added else ra):
            key, moved = _identity(f), _code_identity(f)
            twin = next((o for o in others if _identity(o) == key or (
                moved is not None and _code_identity(o) == moved)), None)
            if twin is None:
                rest.append(f)
            else:
                pairs.append((twin, f) if added else (f, twin))
        return ([], pairs, rest) if added else (rest, pairs, [])
    still = []
    left = list(rb)
    unmatched_a = list(ra)
    for ident in _MATCHES:
        rest = []
        for f in unmatched_a:
            key = ident(f)
            j = None if key is None else next(
                (j for j, g in enumerate(left) if ident(g) == key), None)
            if j is None:
                rest.append(f)
            else:
                still.append((f, left.pop(j)))
        unmatched_a = rest
    fixed = unmatched_a
    return fixed, still, left


# --------------------------------------------------------------------------- cells


def _grid(trace, kernel: int, roots: list[Finding]) -> tuple[list, int]:
    """The (device, block) rows, in grid order, and the thread columns of one kernel run:
    the blocks its events ran in (kernel-level requests have none) and those its root
    causes name."""
    c = trace.events.columns
    rows: set = set()
    seen_threads = 0
    m = trace.events.kernel_rows(kernel)
    m = m[c["block"][m] >= 0]
    if len(m):
        pairs = np.unique(np.stack([c["device"][m], c["block"][m]], axis=1), axis=0)
        rows = {(int(d), tuple(trace.events.blocks[b])) for d, b in pairs.tolist()}
        seen_threads = int(c["thread"][m].max()) + 1
    for f in roots:
        for d, b, t in f.all_cells():
            if b is not None:
                rows.add((d, tuple(b)))
                seen_threads = max(seen_threads, t + 1)
    info = trace.kernel_info(kernel)
    threads = max(seen_threads, info.threads_per_block if info is not None else 1, 1)
    return sorted(rows), threads


def _side_status(kd: KernelDiff, trace, side: str) -> GridStatus | None:
    kernel = kd.index_before if side == "before" else kd.index_after
    if kernel is None:
        return None
    nf, ns = len(kd.fixed), len(kd.still)
    if side == "before":  # (root id, status, the finding as this side has it)
        here = ([(i, "fixed", f) for i, f in enumerate(kd.fixed)]
                + [(nf + j, "still", a) for j, (a, _) in enumerate(kd.still)])
        gone = []
    else:
        here = ([(nf + j, "still", b) for j, (_, b) in enumerate(kd.still)]
                + [(nf + ns + j, "new", f) for j, f in enumerate(kd.new)])
        gone = list(enumerate(kd.fixed))
    rows, threads = _grid(trace, kernel, [f for _, _, f in here])
    where = {r: n for n, r in enumerate(rows)}
    status = [["clean"] * threads for _ in rows]
    ids: list[list[list[int]]] = [[[] for _ in range(threads)] for _ in rows]
    rank = {s: n for n, s in enumerate(CELL_STATUSES)}
    for i, st, f in here:
        for r, t in _places(f, where, threads):
            if i not in ids[r][t]:
                ids[r][t].append(i)
            if rank[st] > rank[status[r][t]]:
                status[r][t] = st
    # after: the cells of a fixed root that no root covers any more (clean now)
    for i, f in gone:
        for r, t in _places(f, where, threads):
            if status[r][t] in ("clean", "fixed"):
                status[r][t] = "fixed"
                if i not in ids[r][t]:
                    ids[r][t].append(i)
    info = trace.kernel_info(kernel)
    return GridStatus(side, kernel, None if info is None else info.name,
                      None if info is None else info.thread_axis, rows, threads, status, ids)


def _places(f: Finding, where: dict, threads: int):
    """(row, thread) of each of a root's cells (its consequences' too) in a grid."""
    for d, b, t in f.all_cells():
        r = None if b is None else where.get((d, tuple(b)))
        if r is not None and 0 <= t < threads:
            yield r, t


def _cell_status(kd: KernelDiff, before, after) -> dict[str, GridStatus]:
    out = {}
    for side, trace in (("before", before), ("after", after)):
        g = _side_status(kd, trace, side)
        if g is not None:
            out[side] = g
    return out


# --------------------------------------------------------------------------- allocations


class _Signatures:
    """Allocation signatures shared by both traces: id <-> `Allocation`."""

    def __init__(self):
        self.ids: dict[tuple, int] = {}
        self.allocs: list[Allocation] = []

    def id_of(self, alloc: Allocation) -> int:
        key = (alloc.resource, alloc.memory_space, alloc.shape, alloc.dtype,
               _place(alloc.source), _place(_via(alloc.source)))
        i = self.ids.get(key)
        if i is None:
            i = self.ids[key] = len(self.allocs)
            self.allocs.append(alloc)
        return i


def _sequences(trace, sigs: _Signatures) -> dict[int, dict[SeqKey, tuple[int, ...]]]:
    """kernel -> (device, block, thread, warp) -> signature ids of its create/join
    requests, in recording order."""
    table = trace.events
    c = table.columns
    if len(table) == 0:
        return {}
    ops = [i for i, name in enumerate(_ops()) if name in ("create", "join")]
    rows = np.flatnonzero(np.isin(c["op"], ops))
    if len(rows) == 0:
        return {}
    # each event's line with the call that led to it, when in a helper (`EventTable.vias`)
    line_index, lines = table.lines_with_calls()
    # one int64 per row: the (resource, space, shape, dtype, line) indices in mixed radix
    # (np.unique on 1-D keys is much faster than on rows of a 2-D array)
    radices = [len(RESOURCES), len(MEMORY_SPACES) + 1, len(table.shapes) + 1,
               len(table.dtypes) + 1, len(lines) + 1]
    sig = np.zeros(len(rows), dtype=np.int64)
    for col, radix, offset in zip(
            (c["resource"], c["memory_space"], c["shape"], c["dtype"], line_index), radices,
            (0, 1, 1, 1, 1)):  # -1 (none) -> 0
        sig = sig * radix + (col[rows].astype(np.int64) + offset)
    uniq, inv = np.unique(sig, return_inverse=True)
    ids = np.array([sigs.id_of(_allocation(table, lines, *_unmix(int(u), radices)))
                    for u in uniq], dtype=np.int64)
    row_sig = ids[np.asarray(inv).reshape(-1)]
    key_cols = [c[k][rows].astype(np.int64)
                for k in ("kernel", "device", "block", "thread", "warp")]
    order = np.lexsort(key_cols[::-1])  # stable: recording order within a sequence
    keys = np.stack(key_cols, axis=1)[order]
    row_sig = row_sig[order]
    new = np.ones(len(rows), dtype=bool)
    new[1:] = np.any(keys[1:] != keys[:-1], axis=1)
    starts = np.flatnonzero(new)
    ends = np.r_[starts[1:], len(rows)]
    out: dict[int, dict[SeqKey, tuple[int, ...]]] = defaultdict(dict)
    for s, e in zip(starts.tolist(), ends.tolist()):
        kernel, device, block, thread, warp = keys[s].tolist()
        block_t = table.blocks[block] if 0 <= block < len(table.blocks) else None
        key = (device, block_t, thread, None if warp < 0 else warp)
        out[kernel][key] = tuple(row_sig[s:e].tolist())
    return out


def _unmix(value: int, radices: list[int]) -> list[int]:
    """The column indices packed by `_sequences` (none back to -1)."""
    out = []
    for radix in reversed(radices):
        value, digit = divmod(value, radix)
        out.append(digit)
    resource, space, shape, dtype, source = reversed(out)
    return [resource, space - 1, shape - 1, dtype - 1, source - 1]


def _ops():
    from .model import OPS

    return OPS


def _allocation(table, lines: list[SourceLocation], resource: int, space: int, shape: int,
                dtype: int, source: int) -> Allocation:
    loc = lines[source] if 0 <= source < len(lines) else None
    if loc is not None and getattr(loc, "branch", None) is not None:
        loc = loc.without_branch()
    return Allocation(
        resource=RESOURCES[resource],
        memory_space=MEMORY_SPACES[space] if 0 <= space < len(MEMORY_SPACES) else None,
        shape=table.shapes[shape] if 0 <= shape < len(table.shapes) else None,
        dtype=table.dtypes[dtype] if 0 <= dtype < len(table.dtypes) else None,
        source=loc,
    )


def _place(loc: SourceLocation | None) -> tuple[str, int] | None:
    return None if loc is None else (os.path.normpath(loc.file), loc.line)


def _via(loc: SourceLocation | None) -> SourceLocation | None:
    return None if loc is None else loc.via


def _changed_fields(a: Allocation, b: Allocation) -> tuple[str, ...]:
    out = []
    if _place(a.source) != _place(b.source):
        out.append("line")
    elif _place(_via(a.source)) != _place(_via(b.source)):
        out.append("call")
    for name in ("resource", "memory_space", "shape", "dtype"):
        if getattr(a, name) != getattr(b, name):
            out.append(name)
    return tuple(out)


def _align(sa: tuple[int, ...], sb: tuple[int, ...]) -> list[tuple]:
    """(change, sig before, sig after, position before, position after) of one cell."""
    out = []
    sm = difflib.SequenceMatcher(a=sa, b=sb, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            continue
        n = min(i2 - i1, j2 - j1) if tag == "replace" else 0
        for k in range(n):
            out.append(("changed", sa[i1 + k], sb[j1 + k], i1 + k, j1 + k))
        for i in range(i1 + n, i2):
            out.append(("removed", sa[i], None, i, None))
        for j in range(j1 + n, j2):
            out.append(("added", None, sb[j], None, j))
    return out


def _blocks_that_ran(qa: dict, qb: dict, stopped_a: bool, stopped_b: bool):
    """The sequences of the blocks both runs reached: (qa, qb, {"before": [(device,
    block), ...], "after": [...]}), the blocks one side's stopped run never reached."""
    blocks_a = {(d, b) for d, b, _, _ in qa if b is not None}
    blocks_b = {(d, b) for d, b, _, _ in qb if b is not None}
    missing = {"before": sorted(blocks_b - blocks_a) if stopped_a else [],
               "after": sorted(blocks_a - blocks_b) if stopped_b else []}
    skip = set(missing["before"]) | set(missing["after"])
    if not skip:
        return qa, qb, {}
    qa = {k: v for k, v in qa.items() if (k[0], k[1]) not in skip}
    qb = {k: v for k, v in qb.items() if (k[0], k[1]) not in skip}
    return qa, qb, {side: bl for side, bl in missing.items() if bl}


def _diff_sequences(qa: dict[SeqKey, tuple[int, ...]], qb: dict[SeqKey, tuple[int, ...]],
                    sigs: _Signatures) -> list[AllocationChange]:
    cache: dict[tuple, list[tuple]] = {}
    groups: dict[tuple, list[SeqKey]] = {}
    for key in sorted(set(qa) | set(qb), key=_key_order):
        sa, sb = qa.get(key, ()), qb.get(key, ())
        if sa == sb:
            continue
        ops = cache.get((sa, sb))
        if ops is None:
            ops = cache[(sa, sb)] = _align(sa, sb)
        for op in ops:
            groups.setdefault(op, []).append(key)
    out = []
    for (change, ia, ib, pa, pb), cells in groups.items():
        a = None if ia is None else sigs.allocs[ia]
        b = None if ib is None else sigs.allocs[ib]
        fields = _changed_fields(a, b) if change == "changed" else ()
        out.append(AllocationChange(change, a, b, pa, pb, fields, cells))
    out.sort(key=lambda ch: (_key_order(ch.cells[0]),
                             ch.position_before if ch.position_before is not None
                             else ch.position_after))
    return out


def _key_order(key: SeqKey):
    d, b, t, w = key
    return (d, b is not None, b or (), t, -1 if w is None else w)


# --------------------------------------------------------------------------- text


def _c(text: str, style: str, color: bool) -> str:
    return f"{_COLORS[style]}{text}{_COLORS['reset']}" if color else text


def _article(severity: str) -> str:
    """"an error", "a warning", "a note"."""
    return f"{'an' if severity[:1] in 'aeiou' else 'a'} {severity}"


def _roots(n: int) -> str:
    return f"{n} root cause{'' if n == 1 else 's'}"


def _shape(shape) -> str:
    if shape is None:
        return ""
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _short(loc: SourceLocation) -> str:
    cell = cell_label(loc.file)
    if cell is not None:  # a notebook cell: `In [7], line 3`
        return f"{cell}, line {loc.line}"
    path = loc.file
    try:
        rel = os.path.relpath(path)
        if not rel.startswith(".."):
            path = rel
    except ValueError:
        pass
    return f"{path}:{loc.line}"


def _runs(changes: list[AllocationChange]) -> list[tuple[AllocationChange, int]]:
    """Consecutive changes that are alike (the same request, the same cells, positions one
    after the other: a `plgpu.Barrier(num_barriers=4)`'s barriers), as (first, count)."""
    out: list[tuple[AllocationChange, int]] = []
    for ch in changes:
        if out:
            first, n = out[-1]
            if ch._alike() == first._alike() and ch._position() == first._position() + n:
                out[-1] = (first, n + 1)
                continue
        out.append((ch, 1))
    return out


def _describe_keys(keys: list[SeqKey], thread_word: str = "thread") -> str:
    from .cells import describe_cells

    kernel_level = [k for k in keys if k[1] is None]
    block_level = [k for k in keys if k[1] is not None]
    # (every warp joins the kernel's operands: only a block's warps are told apart)
    warps = {w for _, _, _, w in block_level} or {None}
    parts = []
    if block_level:
        parts.append(describe_cells([(d, b, t) for d, b, t, _ in block_level], thread_word))
    if kernel_level:
        devices = sorted({d for d, _, _, _ in kernel_level})
        parts.append("kernel operands" + (f" (device {', '.join(map(str, devices))})"
                                       if devices != [0] else ""))
    text = "; ".join(parts)
    if warps != {None}:
        from .cells import ranges

        text += f" (warp {ranges(w for w in warps if w is not None)})"
    return text


def _kernel_summary(k: KernelDiff, color: bool) -> list[str]:
    """The kernel's lines of `TraceDiff.summary`. Text from the traces (names, messages,
    shapes, lines) is escaped (`one_line`): a trace file's escape sequences, colour
    codes included, never reach the terminal; only this summary's own colours do."""
    from .render.inert import one_line as safe

    fixed = _roots(len(k.fixed)) + " fixed"
    new = f"{len(k.new)} new"
    out = [f"{_c(safe(k.label), 'bold', color)}: "
           f"{_c(fixed, 'fixed', color) if k.fixed else fixed}, {len(k.still)} still there, "
           f"{_c(new, 'new', color) if k.new else new}"]
    for f in k.fixed:
        out.append(f"  {_c('fixed', 'fixed', color)}: {safe(f.one_line())}")
    for a, b in k.still:
        moved = ""
        if _moved(a, b) and a.source is not None and b.source is not None:
            moved = f" (moved from line {a.source.line} to {b.source.line})"
        if a.severity != b.severity:
            moved += f" (now {_article(b.severity)}: it was {_article(a.severity)})"
        label = _c("still", "new" if _escalated(a, b) else "still", color)
        out.append(f"  {label}: {safe(b.one_line())}{moved}")
    for f in k.new:
        out.append(f"  {_c('new', 'new', color)}: {safe(f.one_line())}")
    for f in k.unreached_roots:
        out.append(f"  not compared: {safe(f.one_line())}")
    if k.status == "both":
        if k.allocations:
            out.append(f"  allocations: {len(k.allocations)} change(s)")
            runs = _runs(k.allocations)
            word = safe(k.thread_axis or "thread")
            for ch, n in runs[:_MAX_DETAIL_ROWS]:
                out.append(f"    {safe(ch.describe(word, n))}")
            if len(runs) > _MAX_DETAIL_ROWS:
                out.append(f"    ... and {len(runs) - _MAX_DETAIL_ROWS} more "
                           "(TraceDiff.to_dict() has them all)")
        else:
            out.append("  allocations: same sequences in every block and thread")
        for side, blocks in k.not_run.items():
            names = ", ".join(block_label(b) for _, b in blocks)
            out.append(f"  not compared: block(s) {names}, which the {side} run did not run "
                       "(it stopped early, or has no such block)")
    return out
