"""Analyses: processors that turn a trace's events into findings."""

from __future__ import annotations

from ..model import Failure, Finding, KernelInfo
from ..store import EventTable
from .collective import analyse_collectives
from .failures import analyse_failure
from .leaks import analyse_leaks
from .sequence import analyse_sequences

_KIND_ORDER = {k: i for i, k in enumerate((
    "trace_error", "interpreter_error", "nonzero_thread_collective", "partial_collective",
    "sequence_divergence", "collective_mismatch", "leak", "race", "deadlock"))}


def analyse(table: EventTable, kernels: list[KernelInfo],
            failure: Failure | None = None) -> list[Finding]:
    """Every finding for a trace, root causes first."""
    findings = list(analyse_failure(failure, table, kernels))
    seq_findings, divergent = analyse_sequences(table, kernels)
    findings += seq_findings
    findings += analyse_collectives(table, divergent)
    failed = {failure.kernel} if failure is not None and failure.kernel is not None else set()
    findings += analyse_leaks(table, failed)

    def order(f: Finding):
        first_event = min(f.events) if f.events else -1
        return (0 if f.severity == "error" else 1, _KIND_ORDER.get(f.kind, 99), first_event)

    return sorted(findings, key=order)


__all__ = ["analyse"]
