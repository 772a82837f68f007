"""Analyses: processors that turn a trace's events into findings."""

from __future__ import annotations

from ..model import FINDING_KINDS, Failure, Finding, KernelInfo
from ..store import EventTable
from .collective import analyse_collectives
from .deadlock import analyse_deadlocks
from .failures import analyse_failure
from .leaks import analyse_leaks
from .races import analyse_races
from .sequence import analyse_sequences

_KIND_ORDER = {k: i for i, k in enumerate(FINDING_KINDS)}


def analyse(table: EventTable, kernels: list[KernelInfo],
            failure: Failure | None = None, deadlocks: list[dict] = (),
            races: list[dict] = (), stopped: set[int] = frozenset()) -> list[Finding]:
    """Every finding for a trace, root causes first.

    `deadlocks` and `races` are the JSON-able records of `Trace.meta["deadlocks"]` /
    `["races"]`: a race the interpreter raised is reported as a `race` finding rather
    than an `interpreter_error`. `stopped` kernels (interrupted) did not end, so
    nothing of theirs is a leak.
    """
    raced = bool(races) and failure is not None and failure.message.startswith(
        "RACE DETECTED")
    findings = [] if raced else list(analyse_failure(failure, table, kernels))
    findings += analyse_deadlocks(table, list(deadlocks))
    findings += analyse_races(table, list(races))
    failed = {failure.kernel} if failure is not None and failure.kernel is not None else set()
    failed |= {d.get("kernel") for d in deadlocks} | set(stopped)
    # kernels whose threads were cut short (a thread failed mid-run, a deadlock, an
    # interrupt): a failure at kernel end (no failing thread) lets every thread finish
    unfinished = {d.get("kernel") for d in deadlocks} | set(stopped)
    if failure is not None and failure.kernel is not None and failure.cell is not None:
        unfinished.add(failure.kernel)
    seq_findings, divergent = analyse_sequences(table, kernels, unfinished=unfinished)
    findings += seq_findings
    findings += analyse_collectives(table, divergent, unfinished=unfinished)
    findings += analyse_leaks(table, failed)

    def order(f: Finding):
        first_event = min(f.events) if f.events else -1
        return (0 if f.severity == "error" else 1, _KIND_ORDER.get(f.kind, 99), first_event)

    return sorted(findings, key=order)


__all__ = ["analyse"]
