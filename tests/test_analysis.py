"""Analyses on synthetic traces with known bugs: exactly the planted findings, no more."""

from __future__ import annotations

import collections

import numpy as np
import pytest

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


def _same_sequences(a: dict, b: dict) -> bool:
    if list(a) != list(b):
        return False
    return all(list(a[k]) == list(b[k]) and all(np.array_equal(a[k][t], b[k][t]) for t in a[k])
               for k in a)


@pytest.mark.parametrize("body", ["collective_in_branch", "mismatched_shapes",
                                  "collective_in_cond", "hoisted_collective"])
@pytest.mark.parametrize("shape", ["no_grid", "grid3", "cluster2"])
def test_small_table_paths_match_the_numpy_paths(body, shape, monkeypatch):
    # the sequence and collective analyses read a small table in Python passes: the same
    # thread sequences, request ids, suspect lifetimes and findings as the numpy paths
    # larger tables take
    from pallas_viz.analysis import collective, sequence
    from pallas_viz.analysis.frame import group_starts
    from pallas_viz.examples import shapes

    fn, args = shapes.launch(shapes.BUGGY.get(body) or shapes.CLEAN[body], shape)
    tr, _ = shapes.run_traced(fn, args)
    table = tr.events
    c = table.columns
    assert 0 < len(table) <= sequence.SMALL_TABLE
    order = np.argsort(c["allocation"], kind="stable")
    starts = group_starts(c["allocation"][order])

    def both():
        return (sequence.thread_sequences(table), sequence._signatures(table),
                analyse(table, tr.kernels, tr.failure))

    small = both()
    monkeypatch.setattr(sequence, "SMALL_TABLE", -1)
    monkeypatch.setattr(collective, "SMALL_TABLE", -1)
    large = both()
    assert small[0] and _same_sequences(small[0], large[0])
    assert np.array_equal(small[1], large[1])
    assert [(f.kind, f.message, f.cells) for f in small[2]] == [
        (f.kind, f.message, f.cells) for f in large[2]]
    assert np.array_equal(collective._small_suspect_groups(c, order, starts),
                          collective._suspect_groups(c, order, starts))
    if body in shapes.BUGGY:
        assert any(f.severity == "error" for f in small[2])
