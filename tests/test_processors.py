"""Each analysis processor on its own, on the small real traces in tests/fixtures/.

The fixtures are interpret-mode runs of the bundled examples (`tests/fixtures/
make_fixtures.py` records them again); every processor is called directly on an
`AnalysisContext`, so a change in one shows here before it is folded into roots.
"""

from __future__ import annotations

import functools
import pathlib

import pytest

import pallas_viz as pv
from pallas_viz.analysis import PROCESSORS, AnalysisContext, analyse_budget, run
from pallas_viz.analysis.collective import analyse_collectives
from pallas_viz.analysis.deadlock import analyse_deadlocks
from pallas_viz.analysis.failures import analyse_failure
from pallas_viz.analysis.leaks import analyse_leaks
from pallas_viz.analysis.races import analyse_races
from pallas_viz.analysis.roots import fold_root_causes
from pallas_viz.analysis.sequence import analyse_sequences, block_alignment

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


def code(f) -> str:
    """The code line a finding points at, as the fixture stored it (line numbers in the
    fixtures are those of the example files when the fixtures were recorded)."""
    return f.source.code.strip()


@functools.cache
def _trace(name: str) -> pv.Trace:
    return pv.load(FIXTURES / f"{name}.json")


def ctx(name: str, device: str = "h100") -> AnalysisContext:
    tr = _trace(name)
    return AnalysisContext(table=tr.events, kernels=tr.kernels, failure=tr.failure,
                           deadlocks=list(tr.meta.get("deadlocks") or []),
                           races=list(tr.meta.get("races") or []),
                           stopped=set(tr.meta.get("stopped_kernels") or []), device=device)


def kinds(findings) -> list[tuple[str, str | None]]:
    return sorted((f.kind, code(f) if f.source else None) for f in findings)


IN_BRANCH = 'pl.run_scoped(scoped, plgpu.SMEM(SHAPE, jnp.float32), collective_axes="t")'


@pytest.mark.parametrize("name", ["clean_collective", "collective_in_branch",
                                  "mismatched_shapes", "barrier_in_branch",
                                  "aliased_after_branch", "missing_collective_axes",
                                  "unsynchronized_handoff", "deadlock"])
def test_every_processor_takes_a_context_and_returns_findings(name):
    c = ctx(name)
    for process in PROCESSORS:
        out = process(c)
        assert isinstance(out, list)
        for f in out:
            assert isinstance(f, pv.Finding) and f.kind in pv.model.FINDING_KINDS
            assert all(0 <= e < len(c.table) for e in f.events)


def test_clean_kernel_gives_nothing_anywhere():
    c = ctx("clean_collective")
    assert all(process(c) == [] for process in PROCESSORS)


def test_sequences_find_the_divergence_and_the_partial_collective():
    c = ctx("collective_in_branch")
    out = analyse_sequences(c)
    assert kinds(out) == [("partial_collective", IN_BRANCH), ("sequence_divergence", IN_BRANCH)]
    partial = next(f for f in out if f.kind == "partial_collective")
    # thread 1 skipped it in both blocks; where it belongs: after its (empty) sequence
    assert sorted(m[0] for m in partial.missing) == [(0, (0,), 1), (0, (1,), 1)]
    assert all(seq is None for _, seq in partial.missing)
    assert len(c.divergent) == 2  # both blocks recorded for the collective analysis


def test_collectives_skip_divergent_blocks_but_see_mismatches():
    c = ctx("collective_in_branch")
    analyse_sequences(c)
    assert analyse_collectives(c) == []  # the sequence analysis already pinned it
    c = ctx("mismatched_shapes")
    analyse_sequences(c)
    (mm,) = analyse_collectives(c)
    assert mm.kind == "collective_mismatch"
    assert [x.code.strip() for x in [mm.source, *mm.related]] == [  # in source order
        'pl.run_scoped(scoped, plgpu.SMEM(SHAPE, jnp.float32), collective_axes="t")',
        'pl.run_scoped(scoped, plgpu.SMEM((4, 128), jnp.float32), collective_axes="t")']
    assert "(8, 128)" in mm.message and "(4, 128)" in mm.message


def test_leaks_are_pinned_to_the_allocation_and_skip_failed_kernels():
    (leak,) = analyse_leaks(ctx("collective_in_branch"))
    assert leak.kind == "leak" and code(leak) == IN_BRANCH
    assert "stuck at 1 (of 2)" in leak.message
    assert analyse_leaks(ctx("barrier_in_branch")) == []  # the kernel failed at its end


def test_failure_is_pinned_to_its_cell_and_line():
    (f,) = analyse_failure(ctx("barrier_in_branch"))
    assert f.kind == "interpreter_error" and "Barrier remains allocated" in f.message
    assert "plgpu.Barrier(num_arrivals=1)" in code(f)
    (t,) = analyse_failure(ctx("missing_collective_axes"))
    assert t.kind == "trace_error" and "collective_axes" in t.suggestion
    assert analyse_failure(ctx("collective_in_branch")) == []


def test_races_and_deadlocks_come_from_their_records():
    (r,) = analyse_races(ctx("unsynchronized_handoff"))
    assert r.kind == "race" and "alias" not in r.message
    assert code(r) in ("buf[...] = x_ref[...] * 2.0", "o_ref[...] = buf[...]")
    (d,) = analyse_deadlocks(ctx("deadlock"))
    assert d.kind == "deadlock"
    assert code(d).startswith("plgpu.barrier_wait(bar)")
    assert analyse_races(ctx("deadlock")) == [] and analyse_deadlocks(ctx("clean_collective")) == []


def test_budget_against_two_devices():
    assert analyse_budget(ctx("collective_in_branch")) == []
    # the same trace is within every preset's SMEM: 4 KiB of 99..227 KiB
    assert analyse_budget(ctx("collective_in_branch", device="sm120")) == []
    assert ctx("collective_in_branch").budgets  # one budget per block


def test_roots_fold_each_bug_into_one():
    for name, root_kind in [("collective_in_branch", "partial_collective"),
                            ("mismatched_shapes", "partial_collective"),
                            ("barrier_in_branch", "partial_collective"),
                            ("aliased_after_branch", "partial_collective"),
                            ("unsynchronized_handoff", "race"),
                            ("deadlock", "deadlock"),
                            ("missing_collective_axes", "trace_error")]:
        c = ctx(name)
        raw = [f for process in PROCESSORS for f in process(c)]
        roots = fold_root_causes(c, raw)
        assert [r.kind for r in roots] == [root_kind], name
        assert len(raw) == 1 + len(roots[0].consequences), name  # nothing lost
        assert run(ctx(name)) == roots


def test_block_alignment_shows_the_gap():
    tr = _trace("aliased_after_branch")
    (b,) = {e.block for e in tr.events if e.block is not None}
    al = block_alignment(tr.events, 0, 0, tr.events.blocks.index(b))
    assert al["threads"] == [0, 1]
    first = al["rows"][0]
    assert first[0] is not None and first[1] is None  # thread 1 never made the scratch
    assert all(None not in row for row in al["rows"][1:])


def test_block_alignment_has_a_column_for_a_thread_without_requests():
    # (review N: in the quickstart's bug thread 1 makes no request at all, and the
    # "threads side by side" view showed thread 0 alone, saying the threads agree)
    from pallas_viz.render.payload import build_state

    tr = _trace("collective_in_branch")
    blocks = {e.block for e in tr.events if e.block is not None}
    assert {e.thread for e in tr.events if e.block is not None} == {0}
    for b in blocks:
        al = block_alignment(tr.events, 0, 0, tr.events.blocks.index(b), threads=2)
        assert al["threads"] == [0, 1]
        assert al["rows"] and all(row[0] is not None and row[1] is None for row in al["rows"])
    (root,) = build_state(tr)["meta"]["findings"]
    assert root["alignments"] and all(a["threads"] == [0, 1] for a in root["alignments"])


def test_events_without_a_thread_are_counted_never_called_clean(tmp_path):
    """A trace whose block events carry no thread (thread -1) is 'not verified', not clean,
    and every view still renders it (a fuzz case once crashed the divergence view)."""
    import json

    from pallas_viz.render.html import html_document
    from pallas_viz.render.payload import build_state

    d = json.loads((FIXTURES / "collective_in_branch.json").read_text())
    cols = d["events"]["columns"]
    cols["thread"] = [-1 if b >= 0 else t for b, t in zip(cols["block"], cols["thread"])]
    path = tmp_path / "unplaced.json"
    path.write_text(json.dumps(d))
    tr = pv.load(path)
    assert tr.findings == [] and tr.unplaced_events() == 4
    text = tr.summary()
    assert "not verified: 4 block-level event(s) could not be placed" in text
    assert "clean" not in text
    build_state(tr)
    html_document(tr)
    tr.plot().clf()


@pytest.mark.parametrize("name", ["clean_collective", "mismatched_shapes", "barrier_in_branch",
                                  "collective_in_branch"])
def test_small_table_paths_agree_with_the_sorted_ones(name, monkeypatch):
    """`_thread_seq` counts small tables in Python and large ones with sorts: both give
    the same positions (on real traces, and on a synthetic table of many blocks)."""
    from benchmarks.synthetic import synthetic_table
    from pallas_viz import store

    tables = [_trace(name).events, synthetic_table(3000)]
    for t in tables:
        small = store._thread_seq(t.columns)
        monkeypatch.setattr(store, "SMALL_TABLE", 0)
        big = store._thread_seq(t.columns)
        monkeypatch.undo()
        assert small.tolist() == big.tolist()
        assert small.tolist() == t.columns["thread_seq"].tolist()

