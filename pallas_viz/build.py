"""Build a `Trace` from what was recorded, or rebuild one from a saved file.

`build_trace` is the one place a trace's findings are made: `pv.trace()` calls it
when recording ends, `pv.load` calls it again on the saved events, so a loaded
trace always carries the current analyses' verdicts, never the file's.
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from .analysis import AnalysisContext, run
from .kernel_source import collective_axes_at, thread_axis_at, wrapped_calls_at
from .model import Failure, KernelInfo
from .store import EventTable
from .trace import Trace


def build_trace(events: EventTable, kernels: list[KernelInfo], failure: Failure | None,
                meta: dict) -> Trace:
    """A `Trace` with its findings computed from `events` and the run's records in
    `meta` (`deadlocks`, `races`, `stopped_kernels`)."""
    ctx = AnalysisContext(table=events, kernels=list(kernels), failure=failure,
                          deadlocks=list(meta.get("deadlocks") or []),
                          races=list(meta.get("races") or []),
                          barrier_ops=list(meta.get("barrier_ops") or []),
                          thread_exits=list(meta.get("thread_exits") or []),
                          stopped=set(meta.get("stopped_kernels") or []),
                          device=meta.get("device") or "auto")
    trace = Trace(events=events, kernels=kernels, findings=run(ctx), failure=failure,
                  meta=meta)
    if "budgets" in vars(ctx):  # what the analysis computed, for the views
        trace.keep_budgets(ctx.target, ctx.budgets)
    return trace


def named_kernels(kernels: list[KernelInfo], table: EventTable) -> list[KernelInfo]:
    """Name each kernel after the function most of its events come from, and, unless
    the mesh named it while JAX traced the kernel (`thread_axis` already set), its
    thread axis after the `collective_axes=` its allocations name (read from the
    user's source while it is at hand: at record time), else after the mesh that named
    their lines' kernel when JAX traced it in an earlier trace (`thread_axis_at`; for a
    kernel of several threads).

    An event whose line is in a helper counts for the function that called the helper
    (its `via`: the kernel body, or a branch of it), so two kernels that allocate
    through one helper are not both named after it. A call that reads as a decorator's
    (`_forwards`), or a function that calls the bodies of kernels with different names,
    names none of them: those are named after their bodies' own lines."""
    c = table.columns
    vias = table.vias
    out = []
    # per kernel: (its events' lines, its name by its lines, its name by their calls)
    names: list[tuple[list[int], str | None, str | None] | None] = []
    for k in kernels:
        rows = np.flatnonzero((c["kernel"] == k.index) & (c["source"] >= 0))
        if len(rows) == 0:
            names.append(None)
            continue
        by_line: dict = {}  # function -> events (`max` keeps the first of a tie)
        by_call: dict = {}
        srcs = c["source"][rows].tolist()
        calls = vias[rows].tolist() if vias is not None else [-1] * len(rows)
        # each distinct (line, call) once, with its events, in order of first appearance
        # (so each function enters `by_line`/`by_call` at its first event, as one event
        # at a time would)
        for (s, v), n in collections.Counter(zip(srcs, calls)).items():
            f = table.sources[s].function
            by_line[f] = by_line.get(f, 0) + n
            g = table.calls[v].function if v >= 0 and not _forwards(table.calls[v]) else f
            by_call[g] = by_call.get(g, 0) + n
        names.append((srcs, _top(max(by_line, key=by_line.__getitem__)),
                      _top(max(by_call, key=by_call.__getitem__))))
    # a caller's name shared by kernels whose own lines name them differently: a wrapper
    line_names: dict[str | None, set] = {}
    for n in names:
        if n is not None:
            line_names.setdefault(n[2], set()).add(n[1])
    for k, n in zip(kernels, names):
        if n is None:
            out.append(k)
            continue
        srcs, line_name, call_name = n
        name = call_name if len(line_names.get(call_name, ())) <= 1 else line_name
        axis = k.thread_axis
        if not axis:
            axes: dict[str, int] = {}
            for i in sorted(set(srcs)):
                s = table.sources[i]
                found = collective_axes_at(s.file, s.line)
                # else the mesh's, noted when JAX traced the kernel in an earlier trace (of
                # a kernel with threads: one line can serve kernels of one thread too)
                named = found[-1] if found else (
                    thread_axis_at(s.file, s.line) if k.threads_per_block > 1 else None)
                if named:
                    axes[named] = axes.get(named, 0) + 1
            axis = max(axes, key=axes.__getitem__) if axes else None
        out.append(KernelInfo(k.index, name or k.name, k.launch, k.num_devices,
                              k.threads_per_block, k.blocks_per_cluster, thread_axis=axis))
    return out


def _forwards(call) -> bool:
    """Whether `call` (in the traced function) reads as a wrapper calling the body it
    wraps rather than a body calling a helper: it hands its arguments on wholesale
    (`f(*refs)`, `func(*args, **kwargs)`), or hands every parameter of its function on
    to a function an enclosing function received (`kernel_source.wrapped_calls_at`: a
    decorator's closure `wrapped(x_ref, o_ref)` calling `body(x_ref, o_ref)`)."""
    code = (call.code or "").replace(" ", "")
    return "(*" in code or bool(call.file and wrapped_calls_at(call.file, call.line))


def named_by_barrier_ops(kernels: list[KernelInfo], ops: list[dict]) -> list[KernelInfo]:
    """Kernels `named_kernels` left unnamed (their requests all the kernel's own: its
    operands and scratch, no line of the user's), named after the function most of their
    barrier operations come from (`Trace.meta["barrier_ops"]`), as `named_kernels` names
    a kernel after its requests' lines."""
    if not ops or all(k.name for k in kernels):
        return kernels
    counts: dict[int, dict[str, int]] = {}
    for o in ops:
        f = _top((o.get("source") or {}).get("function"))
        if f:
            by = counts.setdefault(o.get("kernel"), {})
            by[f] = by.get(f, 0) + 1  # (`max` keeps the first of a tie)
    return [k if k.name or k.index not in counts else dataclasses.replace(
        k, name=max(counts[k.index], key=counts[k.index].__getitem__)) for k in kernels]


def _top(function: str | None) -> str | None:
    """The module-level function a (qualified) function name is defined in."""
    return function.split(".<locals>")[0] if function else function
