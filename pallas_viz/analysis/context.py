"""What every analysis reads: the events, the kernels, the run's records, and names.

Each analysis is a processor `analyse_x(ctx) -> list[Finding]`; `analyse()` runs
them in order over one `AnalysisContext`. Helpers more than one analysis needs
(how to name a buffer, a block, a set of threads) live here, once.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ..cells import block_label, cluster_dims, ranges
from ..model import Failure, KernelInfo
from ..store import EventTable


@dataclasses.dataclass
class AnalysisContext:
    """The inputs of the analyses, plus what earlier analyses found for later ones."""

    table: EventTable
    kernels: list[KernelInfo]
    failure: Failure | None = None
    deadlocks: list[dict] = dataclasses.field(default_factory=list)
    races: list[dict] = dataclasses.field(default_factory=list)
    # barrier operations (arrive / wait / waited) and thread exits, as JSON-able records
    barrier_ops: list[dict] = dataclasses.field(default_factory=list)
    thread_exits: list[dict] = dataclasses.field(default_factory=list)
    # kernels interrupted (Ctrl-C) before they ended
    stopped: set[int] = dataclasses.field(default_factory=set)
    # (kernel, device, block index) whose threads' allocation sequences part; set by
    # the sequence analysis, read by the collective one
    divergent: set[tuple] = dataclasses.field(default_factory=set)
    # the GPU whose limits the memory budget checks: a `pallas_viz.devices` preset name,
    # or "auto" (b200 for a trace that uses tensor memory, else h100)
    device: str = "auto"

    @functools.cached_property
    def target(self) -> str:
        """The device preset the budget checks against ("auto" resolved)."""
        return resolve_device(self.device, self.table)

    @functools.cached_property
    def budgets(self):
        """Per-block peak live SMEM/TMEM/REGS (`analysis.budget.block_budgets`)."""
        from .budget import block_budgets

        return block_budgets(self.table, self.kernels, self.target)

    @functools.cached_property
    def failed(self) -> set[int]:
        """Kernels that did not end normally: nothing they still hold is a leak."""
        return failed_kernels(self.deadlocks, self.stopped, self.failure)

    @functools.cached_property
    def unfinished(self) -> set[int]:
        """Kernels whose threads were cut short (`unfinished_kernels`)."""
        return unfinished_kernels(self.deadlocks, self.stopped, self.failure, self.kernels)

    @functools.cached_property
    def exits(self):
        """The threads that finished the kernel body (`exits.ThreadExits`)."""
        from .exits import ThreadExits

        return ThreadExits(self, self.barrier_ops)

    def cut_short(self, kernel: int, device: int, block: int) -> bool:
        """Whether the threads of a block (its `block` column value) may have been cut
        short: its kernel is unfinished and not all of the block's threads finished the
        body. Grid steps run one after another, so a kernel that fails in a later block
        still ran its earlier blocks to their end: what those did not do, they never do."""
        if kernel not in self.unfinished:
            return False
        return block < 0 or not self.exits.block_done(kernel, device, self.table.block(block))

    def cluster_of(self, kernel: int, block: tuple | None) -> tuple:
        """Which cluster `block` of `kernel` is in: its grid coordinates (the block tuple
        less its within-cluster coordinates, `cells.cluster_dims` of the kernel's blocks);
        () for every block when the kernel has one cluster or its blocks do not tell."""
        dims = self.__dict__.setdefault("_cluster_dims", {})
        if kernel not in dims:
            info = self.kernels[kernel] if 0 <= kernel < len(self.kernels) else None
            c = self.table.columns
            blocks = {self.table.block(int(b)) for b in
                      np.unique(c["block"][self.table.kernel_rows(kernel)]).tolist()}
            dims[kernel] = cluster_dims([b for b in blocks if b is not None],
                                        info.blocks_per_cluster if info else 1)
        n = dims[kernel]
        return () if not n or block is None else tuple(block[:len(block) - n])

    def operand(self, row: int) -> str:
        """" (`empty`, operand 3 of 3 of its `pl.run_scoped`)" for a request whose line
        allocates several of its kind (barriers, say) at once (each thread requests a
        scope's operands one after another, so the run of the requesting thread's requests
        from that line says which), else "". The name is the scoped function's (`name_of`)."""
        c = self.table.columns
        if row < 0 or row >= len(self.table) or c["source"][row] < 0:
            return ""
        hit = self.operand_run(row)
        if hit is None:
            return ""
        index, run = hit
        res = c["resource"]
        if sum(1 for r in run if res[r] == res[row]) < 2:
            return ""
        name = self.operand_name(row)
        if is_array_slot(name):
            return f" (`{name}` of its `pl.run_scoped`)"
        named = f"`{name}`, " if name else ""
        return f" ({named}operand {index + 1} of {len(run)} of its `pl.run_scoped`)"

    def operand_name(self, row: int) -> str | None:
        """The name the scoped function gives request `row`'s operand (`full`, `bars[1]`),
        when its line's `pl.run_scoped` names as many operands as the requesting thread
        made there (`operand_run`); else None."""
        hit = self.operand_run(row)
        src = self.table.source_of(row)
        if hit is None or src is None or not src.operands:
            return None
        index, run = hit
        return src.operands[index] if len(src.operands) == len(run) else None

    def operand_run(self, row: int) -> tuple[int, tuple] | None:
        """(the index of request `row` in, the rows of) the run of its thread's consecutive
        requests from its line: the operands of one `pl.run_scoped`; None for no request.
        When another thread's request of the same allocation has a longer run, that one (a
        run that failed while a thread was requesting a scope's operands cut its run
        short: which thread that was varies by run)."""
        runs = self._operand_runs()
        hit = runs.get(row)
        if hit is None:
            return None
        alloc = int(self.table.columns["allocation"][row])
        if alloc < 0:
            return hit
        for r in np.flatnonzero(self.table.columns["allocation"] == alloc).tolist():
            other = runs.get(r)
            if other is not None and len(other[1]) > len(hit[1]):
                hit = other
        return hit

    def _operand_runs(self) -> dict[int, tuple[int, tuple]]:
        """row -> `operand_run(row)`, for every request with a line (computed once)."""
        cached = self.__dict__.get("_runs")
        if cached is not None:
            return cached
        from .frame import request_mask

        c = self.table.columns
        rows = np.flatnonzero(request_mask(self.table) & (c["source"] >= 0))
        by_seq: dict[tuple, list[int]] = {}
        keys = zip(c["kernel"][rows].tolist(), c["device"][rows].tolist(),
                   c["block"][rows].tolist(), c["thread"][rows].tolist(),
                   c["warp"][rows].tolist())
        for r, key in zip(rows.tolist(), keys):
            by_seq.setdefault(key, []).append(r)
        out: dict[int, tuple[int, tuple]] = {}
        src, seq = c["source"], c["thread_seq"]
        for rs in by_seq.values():
            i = 0
            while i < len(rs):
                j = i + 1
                while (j < len(rs) and src[rs[j]] == src[rs[i]]
                       and seq[rs[j]] == seq[rs[j - 1]] + 1):
                    j += 1
                run = tuple(rs[i:j])
                for k in range(i, j):
                    out[rs[k]] = (k - i, run)
                i = j
        self.__dict__["_runs"] = out
        return out

    def thread_word(self, kernel: int | None) -> str:
        """The kernel's own name for its thread axis ("w"), or "thread"."""
        if kernel is not None and 0 <= kernel < len(self.kernels):
            return self.kernels[kernel].thread_axis or "thread"
        return "thread"

    def threads(self, kernel: int | None, threads) -> str:
        """E.g. "w 0, 2..3" or "thread(s) 1"."""
        word = self.thread_word(kernel)
        if word == "thread":
            return f"thread(s) {ranges(threads)}"
        return f"{word} {ranges(threads)}"

    def what(self, row: int) -> str:
        """A buffer or barrier in words: "SMEM buffer (8, 128) float32", "barrier"."""
        return what(self.table, row)


def cell_key(cell) -> tuple:
    """A sort key for (device, block, thread) cells: kernel-level (block None) first."""
    d, b, t = cell
    return (d, (0,) if b is None else (1, *b), t)


def line_key(loc) -> tuple:
    """A sort key for source locations (file, line, column); None first."""
    return ("", 0, 0) if loc is None else (loc.file, loc.line, loc.column or 0)


def line_call_key(loc) -> tuple:
    """`line_key` and, for a line in a helper, its call's: a line reached through two
    calls is two places."""
    via = None if loc is None else loc.via
    return (line_key(loc), line_key(via) if via is not None else ())


def and_list(items) -> str:
    """"10, 12 and 14" (two or more items)."""
    items = [str(x) for x in items]
    return ", ".join(items[:-1]) + f" and {items[-1]}"


def is_array_slot(name: str | None) -> bool:
    """Whether an operand name is a slot of a barrier array (`full.at[1]`,
    `kernel_source.scoped_operands`): not an operand of its own."""
    return bool(name) and ".at[" in name


def sorted_cells(cells) -> list:
    """Distinct cells in a stable order, kernel-level (block None) and block cells mixed."""
    return sorted(set(cells), key=cell_key)


def failed_kernels(deadlocks, stopped, failure: Failure | None) -> set[int]:
    """Kernels that did not end normally (a failure, a deadlock, an interrupt): their run
    stopped there, so blocks after the one that stopped never ran."""
    out = {d.get("kernel") for d in deadlocks} | set(stopped)
    if failure is not None and failure.kernel is not None:
        out.add(failure.kernel)
    return out


def unfinished_kernels(deadlocks, stopped, failure: Failure | None,
                       kernels: list[KernelInfo] = ()) -> set[int]:
    """Kernels whose threads were cut short (a thread failed mid-run, a deadlock, an
    interrupt): `deadlocks` records, `stopped` (interrupted) kernels, the failure. A
    failure at kernel end (no failing thread) let every thread finish, unless the kernel
    runs on several devices (`kernels`): one device's end can fail the others mid-run."""
    out = {d.get("kernel") for d in deadlocks} | set(stopped)
    k = None if failure is None else failure.kernel
    if k is not None and (failure.cell is not None or (
            0 <= k < len(kernels) and kernels[k].num_devices > 1)):
        out.add(k)
    return out


def resolve_device(device: str | None, table: EventTable) -> str:
    """A preset name for `device`; "auto"/None: "b200" if the trace allocates tensor memory
    (only sm_100 has it), else "h100"."""
    if device not in (None, "auto"):
        return device
    from ..store import SPACE_CODE

    return "b200" if bool((table.columns["memory_space"] == SPACE_CODE["TMEM"]).any()) else "h100"


def what(table: EventTable, row: int) -> str:
    """A buffer or barrier in words: "SMEM buffer (8, 128) float32", "barrier"."""
    e = table.event(row)
    if e.resource != "buffer":
        return e.resource.replace("_", " ")
    return f"{e.memory_space} buffer {e.shape} {e.dtype}"


def where_count(cells) -> str:
    """"3 block(s)" or, across devices, "3 (device, block) pair(s)"."""
    places = {(d, b) for d, b, _ in cells}
    if len({d for d, _ in places}) > 1:
        return f"{len(places)} (device, block) pair(s)"
    return f"{len(places)} block(s)"


__all__ = ["AnalysisContext", "block_label", "what", "where_count"]
