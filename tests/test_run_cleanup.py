"""What a finished `pv.trace()` leaves behind: nothing in reference cycles, and only the
records its analyses read."""

from __future__ import annotations

import gc
import weakref

import pytest

import pallas_viz as pv
from pallas_viz.examples import deadlock as ex_deadlock
from pallas_viz.examples import kernels as ex
from pallas_viz.examples import shapes


def _traced(fn, args, **kw):
    """Run `fn` traced; weak references to the run's recorder and hooks, and the trace."""
    t = pv.trace(raise_errors=False, **kw)
    with t as tr:
        refs = [weakref.ref(t._recorder), weakref.ref(t._hooks)]
        fn(*args)
    del t
    return refs, tr


@pytest.mark.parametrize("build", [
    lambda: ex.hoisted_collective(grid=(2,)),
    lambda: ex.collective_in_branch(grid=()),
    lambda: ex_deadlock.arrive_without_wait(),  # the interpreter fails
    lambda: shapes.launch(shapes.hoisted_barrier, "grid3"),
], ids=["grid", "no_grid_buggy", "failing_barriers", "barriers"])
def test_the_run_is_freed_without_the_garbage_collector(build):
    fn, args = build()
    _traced(fn, args)  # compiled
    gc.collect()
    gc.disable()
    try:
        refs, tr = _traced(fn, args)
        # the hooks, the monitor and the kernels' states pointed at each other: only a
        # collection freed them (with every record and the interpreter's memory)
        assert [r() is None for r in refs] == [True, True]
    finally:
        gc.enable()
    assert tr.events and tr.kernels


def test_thread_exits_are_kept_for_kernels_cut_short_only():
    fn, args = shapes.launch(shapes.hoisted_barrier, "grid3")
    _, clean = _traced(fn, args)
    assert not clean.findings, clean.summary()
    assert clean.meta.get("barrier_ops") and "thread_exits" not in clean.meta
    fn, args = ex_deadlock.barrier_handshake_in_branch()
    _, stuck = _traced(fn, args, timeout_s=5)
    assert stuck.meta.get("deadlocks"), stuck.summary()
    exits = stuck.meta["thread_exits"]
    assert exits and {e["kernel"] for e in exits} == {0}


def test_source_lines_follow_the_text_linecache_holds(monkeypatch):
    """Locations are reused across traces of a jit-cached kernel only while linecache
    holds the same text of the file: an edited file (a re-read) gives the new line. The
    snippet around it is taken from that same text, without a look at the file."""
    import linecache

    from pallas_viz import snippets

    def no_file(path):
        raise AssertionError(f"a snippet looked at {path} after the run")

    fn, args = ex.collective_in_branch(grid=(1,))
    _, first = _traced(fn, args)
    loc = first.findings[0].source
    assert loc.code and "run_scoped" in loc.code
    assert loc.code in snippets.lookup(first, loc.file, loc.line)[1]
    size, mtime, lines, full = linecache.cache[loc.file]
    edited = list(lines)
    edited[loc.line - 1] = "    pass  # edited\n"
    monkeypatch.setattr(snippets, "read_source_lines", no_file)
    try:
        linecache.cache[loc.file] = (size, mtime, edited, full)
        _, again = _traced(fn, args)
        assert again.findings[0].source.code == "    pass  # edited"
        start, shown = snippets.lookup(again, loc.file, loc.line)
        assert shown[loc.line - start] == "    pass  # edited"
        linecache.cache[loc.file] = (size, mtime, lines, full)
        _, back = _traced(fn, args)
        assert back.findings[0].source.code == loc.code
        start, shown = snippets.lookup(back, loc.file, loc.line)
        assert shown[loc.line - start] == loc.code
    finally:
        linecache.checkcache(loc.file)
