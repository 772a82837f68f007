"""Analyses on synthetic traces with known bugs: exactly the planted findings, no more."""

from __future__ import annotations

import collections

from benchmarks.synthetic import synthetic_table
from pallas_viz.analysis import analyse
from pallas_viz.analysis.sequence import _alignment
from pallas_viz.model import KernelInfo


def test_alignment_keeps_a_repeated_pattern_paired():
    s, b, p = "smem", "barrier", "scratch"
    thread0 = (s, b, p, s, b, s, b, s, b)
    thread1 = (s, b, s, b, s, b, s, b)
    ma, mb = _alignment(thread0, thread1)
    assert set(range(len(thread0))) - ma == {2}  # only the extra scratch is unpaired
    assert mb == frozenset(range(len(thread1)))
    # a displaced item in the middle: both extras stand out
    ma, mb = _alignment((s, p, b, s), (s, b, p, s))
    assert len(ma) == 3 and len(mb) == 3


def test_synthetic_trace_gets_exactly_the_planted_findings():
    table = synthetic_table(20_000)
    kernels = [KernelInfo(k, None, None, 1, t, 1) for k, t in enumerate((4, 2, 3))]
    findings = analyse(table, kernels)
    by_kind = collections.Counter((f.kind, f.kernel, f.source.line) for f in findings)
    # kernel 1: thread 0 alone makes the scratch allocation at line 41 in every block
    # (one root; its divergence and leak fold under it);
    # kernel 2: every thread makes the line-52 buffer but one never releases it
    assert by_kind == collections.Counter({
        ("partial_collective", 1, 41): 1,
        ("leak", 2, 52): 1,
    }), findings
    partial = next(f for f in findings if f.kind == "partial_collective")
    assert sorted((c.kind, c.source.line) for c in partial.consequences) == [
        ("leak", 41), ("sequence_divergence", 41)]
    blocks = {b for _, b, _ in partial.cells}
    assert {t for _, _, t in partial.cells} == {0, 1} and len(blocks) > 1
