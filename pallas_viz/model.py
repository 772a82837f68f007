"""Plain records of a trace: source locations, events, findings, failures.

These are the public value types of pallas_viz. They hold no JAX objects, so a
trace can be saved, loaded and rendered without JAX.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from .file_names import cell_label, describe_location

OPS = ("create", "join", "release", "free", "error")
RESOURCES = ("buffer", "barrier", "cluster_barrier")
MEMORY_SPACES = ("GMEM", "SMEM", "TMEM", "REGS")
# Every finding kind, root causes first (the order findings are reported in).
FINDING_KINDS = (
    "trace_error", "warp_allocation", "interpreter_error", "deadlock", "interrupted", "race",
    "nonzero_thread_collective", "partial_collective", "sequence_divergence",
    "collective_mismatch", "smem_over_budget", "tmem_over_budget", "barrier_misuse", "leak",
)

# In a branch location's `axes`: an `axis_index` whose axis name the source does not give
# (a parameter, an attribute, an expression) and JAX was not seen tracing (the kernel was
# compiled before the trace): the branch reads some axis's index, which one is not known.
UNNAMED_AXIS = "?"

Block = tuple[int, ...]
# (device, block, thread); block is None for a kernel-level request (operands and
# scratch the interpreter allocates for a whole device), () for the one block of a
# kernel without a grid.
Cell = tuple[int, Block | None, int]


@dataclasses.dataclass(frozen=True)
class SourceLocation:
    """A line of the user's code: file, line, column, function and its text."""

    file: str
    line: int
    column: int | None = None
    function: str | None = None
    code: str | None = None
    # Where threads or blocks part around this line in the user's source, when known: a
    # branch (`pl.when`, `lax.cond`, `lax.switch`) or a loop whose trip count depends on
    # the thread (`lax.fori_loop`, `lax.while_loop`, `pl.loop`).
    branch: SourceLocation | None = None
    # For such a location: "branch" or "loop" (None: not known, or not one).
    kind: str | None = None
    # For a `pl.run_scoped` call: its operands' names in the order they are allocated
    # (`kernel_source.scoped_operands`; None: not one, or not known). Not compared: the
    # same line is the same location with or without them.
    operands: tuple[str, ...] | None = dataclasses.field(default=None, compare=False)
    # For a `lax.cond` / `lax.switch` branch location: where each of its branch functions
    # opens its first scope, read from the source when recorded (None: not known, or not
    # one). What a thread taking a branch asks for first, even one that never got there.
    starts: tuple[SourceLocation, ...] | None = dataclasses.field(default=None, compare=False)
    # For a branch location: the mesh axes whose index its condition reads, read from the
    # source when recorded (`kernel_source.enclosing_branch`; None: not known, or not one);
    # `UNNAMED_AXIS` for an index of an axis that could not be named.
    axes: tuple[str, ...] | None = dataclasses.field(default=None, compare=False)
    # When this line is in a helper function: the line that called it, in the function
    # JAX traced the code as (the kernel body, a `pl.when` or `lax.cond` branch, a loop
    # body, a warp-level `core_map` body). None: the line is in that function itself, or
    # not known. An event's line has its own event's call (`EventTable.source_of`); the
    # table's shared lines have none. Not compared.
    via: SourceLocation | None = dataclasses.field(default=None, compare=False)

    def short(self, file: str | None = None) -> str:
        """`file:line` (with `:col` when known, counted from 1, as editors and compilers
        count it; `column` itself counts from 0, as Python's and JAX's do). `file`: the
        name to show for the file (a path made relative), if not its own. A notebook
        cell's line is `In [7], line 3`, as the notebook numbers it."""
        cell = cell_label(self.file)
        if cell is not None:
            return f"{cell}, line {self.line}"
        col = f":{self.column + 1}" if self.column is not None else ""
        return f"{self.file if file is None else file}:{self.line}{col}"

    def label(self, primary: SourceLocation | None = None) -> str:
        """"line 60" in `primary`'s file, "helpers.py:12" in another one (or with none),
        "In [7], line 3" in a notebook cell."""
        if primary is not None and self.file == primary.file:
            return f"line {self.line}"
        return describe_location(self.file, self.line)

    def label_with_call(self, primary: SourceLocation | None = None,
                        call: bool = False, column: bool = False) -> str:
        """`label`, with the call that led to a helper's line when `primary` was not led
        there by the same call, or always with `call`: "line 8 (called from line 18)";
        `column`: with the call's column too, for calls that share a line ("called from
        line 18, column 40", counted from 1)."""
        text = self.label(primary)
        via = self.via
        if via is not None and (call or primary is None or primary.via is None or (
                (via.file, via.line) != (primary.via.file, primary.via.line))):
            col = (f", column {via.column + 1}" if column and via.column is not None
                   else "")
            text += f" (called from {via.label(primary)}{col})"
        return text

    def to_dict(self, starts: bool = True) -> dict:
        """A JSON record. `starts`: with the branch starts (what the analyses read, kept
        in the events' source table; a finding's locations leave them out, so that a
        file's one list is not written again per finding)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["branch"] = None if self.branch is None else self.branch.to_dict(starts)
        if self.operands is None:
            del d["operands"]  # (most lines allocate nothing: kept out of the files)
        else:
            d["operands"] = list(self.operands)
        if self.axes is None:
            del d["axes"]
        else:
            d["axes"] = list(self.axes)
        if self.starts is None or not starts:
            del d["starts"]
        else:
            d["starts"] = [s.to_dict() for s in self.starts]
        if self.via is None:
            del d["via"]  # (most lines are in the traced function itself)
        else:
            d["via"] = self.via.to_dict(starts)
        return d

    @classmethod
    def from_dict(cls, d: dict | None, path: str = "source") -> SourceLocation | None:
        """The location a JSON record describes, or None for null; raises
        `TraceFileError` naming the field (`path`) of a malformed record."""
        from .schema import source

        return _location(source(d, path))

    def without_branch(self) -> SourceLocation:
        """The same line, without its enclosing-branch link."""
        return dataclasses.replace(self, branch=None) if self.branch is not None else self

    def without_call(self) -> SourceLocation:
        """The same line, without the call that led to it (`via`)."""
        return dataclasses.replace(self, via=None) if self.via is not None else self


@dataclasses.dataclass(frozen=True)
class Event:
    """One allocation request (or its outcome) seen by the interpreter."""

    seq: int
    thread_seq: int
    kernel: int
    op: Literal["create", "join", "release", "free", "error"]
    resource: Literal["buffer", "barrier", "cluster_barrier"]
    memory_space: str | None
    device: int
    block: Block | None  # None: a kernel-level request, not made by a block
    thread: int
    warp: int | None
    buffer_id: int
    key_thread: int
    key_block: int
    ref_count: int
    shape: tuple[int, ...] | None
    dtype: str | None
    nbytes: int
    collective: bool
    source: SourceLocation | None
    initial_ref_count: int = 1
    allocation: int = -1  # which buffer lifetime this event belongs to

    @property
    def cell(self) -> Cell:
        return (self.device, self.block, self.thread)


@dataclasses.dataclass(frozen=True)
class Finding:
    """A diagnosis pinned to (device, block, thread) cells and a source line."""

    kind: str
    severity: Literal["error", "warning"]
    message: str
    cells: list[Cell]
    events: list[int]
    source: SourceLocation | None = None
    related: list[SourceLocation] = dataclasses.field(default_factory=list)
    suggestion: str = ""
    kernel: int | None = None
    # The thread- or block-dependent branch whose condition made the threads part.
    branch: SourceLocation | None = None
    # Symptoms this root cause explains (same bug, seen elsewhere or later).
    consequences: list[Finding] = dataclasses.field(default_factory=list)
    # Cells of threads that never made the request, each with the event of that thread
    # it belongs before (None: after its last one): what they skipped, and where.
    missing: list[tuple[Cell, int | None]] = dataclasses.field(default_factory=list)
    # False when the analysis does not know that the threads part at `branch`: it is the
    # branch around the line, whose condition may or may not read the thread index (its
    # axis could not be named: `analysis.collective.analyse_thread_branches`).
    parts_at_branch: bool = True

    def all_cells(self) -> list[Cell]:
        """The root's cells, then its consequences' (without repeats)."""
        seen = dict.fromkeys(self.cells)
        for c in self.consequences:
            seen.update(dict.fromkeys(c.cells))
        return list(seen)

    @property
    def branch_label(self) -> str:
        """What views call `branch`: where the threads part, or, when the analysis does not
        know that they do (`parts_at_branch`), the branch around the line."""
        return "threads part here" if self.parts_at_branch else "branch here (its axis not known)"

    def one_line(self) -> str:
        """`severity[kind] file:line: message` on one line."""
        where = self.source.short() if self.source is not None else "?"
        return f"{self.severity}[{self.kind}] {where}: {self.message}"

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "message": self.message,
            "cells": [[d, None if b is None else list(b), t] for d, b, t in self.cells],
            "events": list(self.events),
            "source": None if self.source is None else self.source.to_dict(starts=False),
            "related": [r.to_dict(starts=False) for r in self.related],
            "suggestion": self.suggestion,
            "kernel": self.kernel,
            "branch": None if self.branch is None else self.branch.to_dict(starts=False),
            "consequences": [c.to_dict() for c in self.consequences],
            "missing": [[[d, None if b is None else list(b), t], seq]
                        for (d, b, t), seq in self.missing],
        }


@dataclasses.dataclass(frozen=True)
class Failure:
    """The interpreter's first (root-cause) failure during a traced run."""

    type: str
    message: str
    kernel: int | None
    cell: Cell | None
    warp: int | None = None
    request: dict | None = None  # the allocation request being served
    source: SourceLocation | None = None
    phase: Literal["run", "trace"] = "run"
    # a kernel JAX rejected while tracing it, whose error the code in the traced block
    # caught (and maybe raised one of its own)
    caught: bool = False
    # a "trace" failure raised by the kernel's own code while JAX traced its body (a shape
    # or name error at the user's line), not by one of Pallas's checks
    in_body: bool = False

    def to_dict(self) -> dict:
        d = {
            "type": self.type,
            "message": self.message,
            "kernel": self.kernel,
            "cell": None if self.cell is None else [
                self.cell[0], None if self.cell[1] is None else list(self.cell[1]), self.cell[2]],
            "warp": self.warp,
            "request": self.request,
            "source": None if self.source is None else self.source.to_dict(),
            "phase": self.phase,
        }
        if self.caught:
            d["caught"] = True
        if self.in_body:
            d["in_body"] = True
        return d

    @classmethod
    def from_dict(cls, d: dict | None, path: str = "failure",
                  num_kernels: int | None = None) -> Failure | None:
        """The failure a JSON record describes, or None for null; raises `TraceFileError`
        naming the field of a malformed record (a `kernel` must be below `num_kernels`)."""
        from .schema import MAX_KERNELS, failure_record

        r = failure_record(d, path, MAX_KERNELS if num_kernels is None else num_kernels)
        if r is None:
            return None
        return cls(type=r["type"], message=r["message"], kernel=r["kernel"], cell=r["cell"],
                   warp=r["warp"], request=r["request"], source=_location(r["source"]),
                   phase=r["phase"], caught=r["caught"], in_body=r["in_body"])


@dataclasses.dataclass(frozen=True)
class KernelInfo:
    """One interpreted kernel run: its launch site and the shape of its mesh."""

    index: int
    name: str | None
    launch: SourceLocation | None
    num_devices: int
    threads_per_block: int
    blocks_per_cluster: int
    # The kernel's own thread axis name (e.g. "w"), when its source names it.
    thread_axis: str | None = None

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["launch"] = None if self.launch is None else self.launch.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict, path: str = "kernel", position: int | None = None) -> KernelInfo:
        """The kernel a JSON record describes; raises `TraceFileError` naming the field of a
        malformed record (its `index` must be `position`, when given)."""
        from .schema import kernel_record

        if position is None and isinstance(d, dict):
            position = d.get("index")
        r = kernel_record(d, path, position)
        return cls(**dict(r, launch=_location(r["launch"])))


def _location(r: dict | None) -> SourceLocation | None:
    """A `SourceLocation` from a record `schema.source` checked."""
    if r is None:
        return None
    return SourceLocation(file=r["file"], line=r["line"], column=r["column"],
                          function=r["function"], code=r["code"],
                          branch=_location(r["branch"]), kind=r["kind"],
                          operands=None if r["operands"] is None else tuple(r["operands"]),
                          starts=None if r["starts"] is None else tuple(
                              map(_location, r["starts"])),
                          axes=None if r["axes"] is None else tuple(r["axes"]),
                          via=_location(r["via"]))
