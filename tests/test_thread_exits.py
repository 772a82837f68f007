"""Thread exits carry their block, so a kernel cut short is diagnosed the same on every run.

A thread can finish before its block makes its first barrier operation. Its exit used to
be recorded without a block, and the analysis then either did not count it (the wait of
`forgotten_arrive` was "certain to hang" in some runs only) or counted it for any block of
the grid (`late_tail_arrival`: an earlier block's exit stood for a thread of the last
block still running, and the wait was called one that "can never end"). The exit now
takes its block from the `MeshLocation` the interpreter passes to its callback; the
analysis counts an exit without a block (a trace file recorded before) only in a kernel
that ran one block. Every kernel here really runs in GPU interpret mode (no mocks).
"""

from __future__ import annotations

import inspect
import json
import re

import pytest

import pallas_viz as pv
from pallas_viz.analysis.context import block_label
from pallas_viz.examples import deadlock as dl
from pallas_viz.examples import shapes as sh

RUNS = 3
NEVER_ENDS = "can never end"


def _line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


FORGOTTEN_WAIT = _line_of(dl.forgotten_arrive, "plgpu.barrier_wait(bar)")
FORGOTTEN_ALLOC = _line_of(dl.forgotten_arrive, "pl.run_scoped(scoped")
TAIL_WAIT = _line_of(dl.late_tail_arrival, "plgpu.barrier_wait(bar)")

# shape -> the blocks of the kernel as exits name them
BLOCKS = {"no_grid": [()], "core_map": [()], "grid3": [(0,), (1,), (2,)],
          "core_map_grid": [(0,), (1,)], "cluster2": [(0,), (1,)]}


def _signature(tr) -> list[tuple]:
    """Each root's (kind, line, message) and its consequences' (kind, line, message);
    the watchdog's measured idle time left out of the message."""
    def one(f):
        return (f.kind, f.source.line if f.source else None,
                re.sub(r"no progress for [\d.]+ s", "no progress for N s", f.message))

    return [(one(r), [one(c) for c in r.consequences]) for r in tr.findings]


def _exits(tr) -> list[tuple]:
    return sorted(((None if e["block"] is None else tuple(e["block"]), e["thread"])
                   for e in tr.meta.get("thread_exits") or []), key=repr)


def _run(body, shape, timeout_s):
    fn, args = sh.launch(body, shape)
    tr, _ = sh.run_traced(fn, args, timeout_s=timeout_s)
    return tr


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "cluster2", "core_map",
                                   "core_map_grid"])
def test_forgotten_arrive_is_certain_on_every_run(shape):
    """Thread 1 finishes (usually before its block's first barrier operation) without
    arriving; thread 0 waits. Every run: the `deadlock` root, with the wait that can never
    end folded under it (it came and went with the thread interleaving before)."""
    seen = set()
    for _ in range(RUNS):
        tr = _run(dl.forgotten_arrive, shape, timeout_s=10)
        (d,) = tr.meta["deadlocks"]
        assert d["detected_by"] == "wait_for", tr.summary()
        (root,) = tr.findings
        assert root.kind == "deadlock" and root.source.line == FORGOTTEN_WAIT, tr.summary()
        (cons,) = root.consequences
        assert cons.kind == "barrier_misuse" and NEVER_ENDS in cons.message, tr.summary()
        assert "every thread that arrives at it or holds it has finished" in cons.message
        assert f"allocated at line {FORGOTTEN_ALLOC}" in cons.message
        # thread 1 of every block that ran finished, its exit in its own block
        ran = BLOCKS[shape][:2] if shape == "cluster2" else BLOCKS[shape][:1]
        assert _exits(tr) == [(b, 1) for b in ran], tr.meta.get("thread_exits")
        seen.add(repr(_signature(tr)))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("shape", ["grid3", "cluster2", "core_map_grid", "no_grid"])
def test_late_tail_arrival_is_not_called_certain(shape):
    """The last block's thread 1 still computes when the watchdog stops the kernel; the
    other blocks' threads finished without a barrier operation. Their exits are theirs:
    the wait is a `deadlock` root (thread 1 running), never a wait that "can never end"."""
    blocks = BLOCKS[shape]
    seen = set()
    for _ in range(RUNS):
        tr = _run(dl.late_tail_arrival, shape, timeout_s=1.0)
        (d,) = tr.meta["deadlocks"]
        assert d["detected_by"] == "timeout", tr.summary()
        (root,) = tr.findings
        assert root.kind == "deadlock" and root.source.line == TAIL_WAIT, tr.summary()
        assert root.consequences == [], tr.summary()
        assert "needs w 1 (running" in root.message, root.message
        assert f"block {block_label(blocks[-1])} w 0 waits" in root.message, root.message
        # both threads of every earlier block finished, each exit in its own block; the
        # last block's threads did not
        assert _exits(tr) == [(b, t) for b in blocks[:-1] for t in (0, 1)], (
            tr.meta.get("thread_exits"))
        seen.add(repr(_signature(tr)))
    assert len(seen) == 1, seen


def _blockless(tr, tmp_path, name: str):
    """`tr` saved as a trace recorded before exits carried their block, and loaded."""
    path = tmp_path / f"{name}.json"
    tr.save(path)
    doc = json.loads(path.read_text())
    exits = doc["meta"]["thread_exits"]
    assert exits and all(e["block"] is not None for e in exits)
    for e in exits:
        e["block"] = None
    path.write_text(json.dumps(doc))
    return pv.load(path)


def test_older_files_with_blockless_exits_load_and_stay_uncertain_in_a_grid(tmp_path):
    """An exit without a block (a file recorded before) could be any block's: in a grid
    it does not stand for the last block's thread that was still running."""
    tr = _run(dl.late_tail_arrival, "grid3", timeout_s=1.0)
    old = _blockless(tr, tmp_path, "tail")
    assert _signature(old) == _signature(tr)
    assert not any(NEVER_ENDS in f.message for r in old.findings
                   for f in [r, *r.consequences]), old.summary()


def test_older_files_with_blockless_exits_count_in_one_block(tmp_path):
    """In a kernel that ran one block, an exit without a block can only be that block's."""
    tr = _run(dl.forgotten_arrive, "no_grid", timeout_s=10)
    old = _blockless(tr, tmp_path, "forgotten")
    assert _signature(old) == _signature(tr)
    (root,) = old.findings
    assert [c.kind for c in root.consequences] == ["barrier_misuse"], old.summary()
