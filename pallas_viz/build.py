"""Build a `Trace` from what was recorded, or rebuild one from a saved file.

`build_trace` is the one place a trace's findings are made: `pv.trace()` calls it
when recording ends, `pv.load` calls it again on the saved events, so a loaded
trace always carries the current analyses' verdicts, never the file's.
"""

from __future__ import annotations

from .analysis import AnalysisContext, run
from .kernel_source import collective_axes_at
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
    user's source while it is at hand: at record time)."""
    c = table.columns
    out = []
    for k in kernels:
        srcs = c["source"][(c["kernel"] == k.index) & (c["source"] >= 0)]
        if len(srcs) == 0:
            out.append(k)
            continue
        per_source: dict[int, int] = {}
        for i in srcs.tolist():
            per_source[i] = per_source.get(i, 0) + 1
        counts: dict = {}  # function -> events (`max` keeps the first of a tie)
        for i, n in per_source.items():
            f = table.sources[i].function
            counts[f] = counts.get(f, 0) + n
        name = max(counts, key=counts.__getitem__)
        if name:
            name = name.split(".<locals>")[0]
        axis = k.thread_axis
        if not axis:
            axes: dict[str, int] = {}
            for i in sorted(per_source):
                s = table.sources[i]
                names = collective_axes_at(s.file, s.line)
                if names:
                    axes[names[-1]] = axes.get(names[-1], 0) + 1
            axis = max(axes, key=axes.__getitem__) if axes else None
        out.append(KernelInfo(k.index, name or k.name, k.launch, k.num_devices,
                              k.threads_per_block, k.blocks_per_cluster, thread_axis=axis))
    return out
