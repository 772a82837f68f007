"""Analyses: processors that turn a trace's events into findings.

Each processor takes an `AnalysisContext` and returns findings; they run in the
order of `PROCESSORS` (the sequence analysis records the divergent blocks the
collective analysis skips). `fold_root_causes` then folds every symptom under the
root cause that explains it.
"""

from __future__ import annotations

from ..model import Failure, Finding, KernelInfo
from ..store import EventTable
from .collective import analyse_collectives
from .context import AnalysisContext
from .deadlock import analyse_deadlocks
from .failures import analyse_failure
from .leaks import analyse_leaks
from .races import analyse_races
from .roots import fold_root_causes
from .sequence import analyse_sequences

PROCESSORS = (analyse_failure, analyse_deadlocks, analyse_races, analyse_sequences,
              analyse_collectives, analyse_leaks)


def analyse(table: EventTable, kernels: list[KernelInfo], failure: Failure | None = None,
            deadlocks: list[dict] = (), races: list[dict] = (),
            stopped: set[int] = frozenset()) -> list[Finding]:
    """The root causes of a trace, each with its consequences, errors first.

    `deadlocks` and `races` are the JSON-able records of `Trace.meta["deadlocks"]` /
    `["races"]`. `stopped` kernels (interrupted) did not end, so nothing of theirs is a
    leak.
    """
    ctx = AnalysisContext(table=table, kernels=list(kernels), failure=failure,
                          deadlocks=list(deadlocks), races=list(races), stopped=set(stopped))
    findings: list[Finding] = []
    for process in PROCESSORS:
        findings += process(ctx)
    return fold_root_causes(ctx, findings)


__all__ = ["PROCESSORS", "AnalysisContext", "analyse"]
