"""Analyses: processors that turn a trace's events into findings.

Each processor takes an `AnalysisContext` and returns findings; they run in the
order of `PROCESSORS` (the sequence analysis records the divergent blocks the
collective analysis skips); collective requests under a branch on the thread index are
judged last, in the kernels the others found nothing of the kind in. `fold_root_causes`
then folds every symptom under the root cause that explains it.
"""

from __future__ import annotations

from ..model import Failure, Finding, KernelInfo
from ..store import EventTable
from .barriers import analyse_barriers
from .budget import budget_findings, fits_for_sure
from .collective import analyse_collectives, analyse_thread_branches
from .context import AnalysisContext
from .deadlock import analyse_deadlocks, analyse_interrupts
from .failures import analyse_failure
from .leaks import analyse_leaks
from .races import analyse_races
from .roots import fold_root_causes
from .sequence import analyse_sequences
from .warps import analyse_warp_allocations


def analyse_budget(ctx: AnalysisContext) -> list[Finding]:
    """`smem_over_budget` / `tmem_over_budget`: a block's peak against the device's limit
    (skipped when even the sum of a block's allocations stays below the warning line)."""
    if fits_for_sure(ctx.table, ctx.kernels, ctx.target):
        return []
    return budget_findings(ctx.budgets, ctx.target)


PROCESSORS = (analyse_failure, analyse_warp_allocations, analyse_deadlocks, analyse_interrupts,
              analyse_races, analyse_sequences, analyse_collectives, analyse_leaks,
              analyse_budget, analyse_barriers)


def analyse(table: EventTable, kernels: list[KernelInfo], failure: Failure | None = None,
            deadlocks: list[dict] = (), races: list[dict] = (),
            stopped: set[int] = frozenset(), device: str = "auto") -> list[Finding]:
    """The root causes of a trace, each with its consequences, errors first.

    `deadlocks` and `races` are the JSON-able records of `Trace.meta["deadlocks"]` /
    `["races"]`. `stopped` kernels (interrupted) did not end, so nothing of theirs is a
    leak. `device` names the GPU whose limits the memory budget checks ("auto": b200 for
    a trace that uses tensor memory, else h100).
    """
    ctx = AnalysisContext(table=table, kernels=list(kernels), failure=failure,
                          deadlocks=list(deadlocks), races=list(races), stopped=set(stopped),
                          device=device)
    return run(ctx)


def run(ctx: AnalysisContext) -> list[Finding]:
    """Run every processor over `ctx`, then fold the findings into root causes."""
    findings: list[Finding] = []
    for process in PROCESSORS:
        findings += process(ctx)
    # (what the source says of kernels the run shows nothing wrong with)
    findings += analyse_thread_branches(ctx, findings)
    return fold_root_causes(ctx, findings)


__all__ = ["PROCESSORS", "AnalysisContext", "analyse", "run"]
