"""TraceWidget: binary state, the on-demand detail round trip, source naming, fallback."""

from __future__ import annotations

import base64
import subprocess
import sys

import numpy as np
import pytest

from pallas_viz.model import KernelInfo
from pallas_viz.render import payload
from pallas_viz.render.source_names import cell_label, describe_location
from pallas_viz.render.widget import TraceWidget
from pallas_viz.store import OP_CODE
from pallas_viz.trace import Trace


def _in_block(tr):
    return [e for e in tr.events if e.block is not None]


def test_import_does_not_load_anywidget():
    code = ("import sys, pallas_viz; assert 'anywidget' not in sys.modules; "
            "assert pallas_viz.TraceWidget.__name__ == 'TraceWidget'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_state_is_columnar_binary(example_traces):
    tr = example_traces["collective_in_branch"]
    w = TraceWidget(tr)
    state = w.data
    n = len(tr.events)
    types = state["meta"]["column_types"]
    assert set(types) == set(payload.EVENT_COLUMNS)
    for name, widest in payload.EVENT_COLUMNS.items():
        buf = state["columns"][name]
        assert isinstance(buf, memoryview)
        assert np.dtype(types[name]).itemsize <= np.dtype(widest).itemsize
        assert len(buf) == n * np.dtype(types[name]).itemsize
    meta = state["meta"]
    assert meta["num_events"] == n
    # rows are grid blocks only (kernel operands are not rows), two blocks x 2 threads
    assert [r["block"] for r in meta["rows"]] == [[0], [1]]
    assert meta["num_cells"] == 4
    cells = np.frombuffer(state["columns"]["cell"], types["cell"])
    operand = np.array([e.block is None for e in tr.events])  # kernel-level requests
    assert (cells[operand] == -1).all() and (cells[~operand] >= 0).all()
    assert meta["kernels"][0]["operands"]["buffers"] == 2
    assert payload.payload_nbytes(state) <= 40 * n + 64


def test_cell_flags_follow_findings(example_traces):
    tr = example_traces["collective_in_branch"]
    state = payload.build_state(tr)
    flags = np.frombuffer(state["cells"]["flags"], np.uint8)
    error_cells = {c for f in tr.findings if f.severity == "error" for c in f.cells}
    index = payload.CellIndex(tr)
    for d, b, t in error_cells:
        (i,) = index.cell_of(0, d, b, t)
        assert flags[i] & payload.ERROR
    clean_trace = example_traces["clean_collective"]
    clean = payload.build_state(clean_trace)
    cflags = np.frombuffer(clean["cells"]["flags"], np.uint8)
    assert not (cflags & (payload.ERROR | payload.WARNING | payload.FAILED)).any()
    assert (cflags & payload.COLLECTIVE).all()  # every thread joined the shared buffer
    assert not clean_trace.findings


def test_failed_cells_are_flagged(example_traces):
    tr = example_traces["mismatched_collective_shapes"]
    assert tr.failure is not None
    state = payload.build_state(tr)
    flags = np.frombuffer(state["cells"]["flags"], np.uint8)
    assert state["meta"]["failure"]["cells"]
    for i in state["meta"]["failure"]["cells"]:
        assert flags[i] & payload.FAILED


@pytest.mark.parametrize("name", ["collective_in_branch", "mismatched_collective_shapes",
                                  "barrier_in_branch"])
def test_event_detail_round_trip(example_traces, name):
    tr = example_traces[name]
    w = TraceWidget(tr)
    seen = []
    for cell in range(w.data["meta"]["num_cells"]):
        reply = w._handle_custom_msg({"type": "events", "id": cell + 10, "cell": cell})
        assert reply["type"] == "events" and reply["id"] == cell + 10
        assert reply["total"] == len(reply["rows"])
        cells = set()
        for row in reply["rows"]:
            (seq, tseq, op, res, space, warp, shape, dtype, nbytes, bid, rc, irc, alloc,
             src) = row
            e = tr.events[seq]
            cells.add(e.cell)
            assert (tseq, op, res, space, warp, dtype, nbytes, bid, rc, irc, alloc) == (
                e.thread_seq, e.op, e.resource, e.memory_space, e.warp, e.dtype, e.nbytes,
                e.buffer_id, e.ref_count, e.initial_ref_count, e.allocation)
            assert shape == (None if e.shape is None else str(tuple(e.shape)))
            if e.source is not None:
                loc = reply["sources"][str(src)]
                assert (loc["file"], loc["line"]) == (e.source.file, e.source.line)
            seen.append(seq)
        assert len(cells) <= 1  # one cell's events only
        seqs = [r[0] for r in reply["rows"]]
        assert seqs == sorted(seqs)
    assert sorted(seen) == [e.seq for e in _in_block(tr)]


def test_event_paging_and_bad_requests(example_traces):
    w = TraceWidget(example_traces["collective_in_branch"])
    full = w._handle_custom_msg({"type": "events", "cell": 0, "id": 1})
    page = w._handle_custom_msg({"type": "events", "cell": 0, "id": 2, "offset": 1, "limit": 1})
    assert page["rows"] == full["rows"][1:2] and page["total"] == full["total"]
    assert w._handle_custom_msg({"type": "events", "cell": 999, "id": 3})["rows"] == []
    # malformed requests never raise (their error replies are tested in test_hardening)
    for bad in ({"type": "nope"}, "junk"):
        reply = w._handle_custom_msg(bad)
        assert reply is None or reply["type"] == "error"


def test_source_request_reads_lines_around(example_traces):
    tr = example_traces["collective_in_branch"]
    w = TraceWidget(tr)
    loc = tr.findings[0].source
    reply = w._handle_custom_msg({"type": "source", "id": 5, "file": loc.file, "line": loc.line})
    assert reply["id"] == 5 and reply["start"] == loc.line - 5
    assert len(reply["lines"]) == 11
    assert reply["lines"][5].strip() == loc.code.strip()
    assert reply["label"] == f"kernels.py:{loc.line}"
    # files that are not part of the trace are not read
    other = w._handle_custom_msg({"type": "source", "id": 6, "file": "/etc/passwd", "line": 1})
    assert other["lines"] == []


def test_mimebundle_has_static_fallback(example_traces):
    tr = example_traces["collective_in_branch"]
    data, _meta = TraceWidget(tr)._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    assert data["text/plain"] == tr.summary()
    # matplotlib is a dependency: the PNG is always there, for front ends without widgets
    assert isinstance(data["image/png"], str)
    assert base64.b64decode(data["image/png"]).startswith(b"\x89PNG\r\n\x1a\n")


def test_notebook_cell_names(monkeypatch):
    assert cell_label("<ipython-input-7-3f2a9c1b0e>") == "In [7]"
    assert describe_location("<ipython-input-12-abc>", 3) == "In [12], line 3"
    assert describe_location("/work/pkg/kernels.py", 110) == "kernels.py:110"
    # ipykernel's cell files: the execution count comes from the shell's compiler
    from conftest import ipython_shell
    from ipykernel.compiler import XCachingCompiler

    ip = ipython_shell()
    comp = XCachingCompiler()
    code = "x = 1\ny = 2\nz = x + y\n"
    name = comp.cache(code, number=7)
    assert "ipykernel_" in name
    monkeypatch.setattr(ip, "compile", comp)
    assert cell_label(name) == "In [7]"
    assert describe_location(name, 3) == "In [7], line 3"
    # a cell's code comes from IPython's in-memory cache (there is no file to read)
    from pallas_viz.snippets import _read_lines

    assert _read_lines(name) == ["x = 1", "y = 2", "z = x + y"]
    monkeypatch.setattr(ip, "compile", XCachingCompiler())  # a cell this shell never ran
    assert cell_label(name) == "notebook cell"


def _synthetic(n):
    from benchmarks.synthetic import synthetic_table

    table = synthetic_table(n)
    kernels = [KernelInfo(i, f"k{i}", None, 1, t, 1) for i, t in enumerate((4, 2, 3))]
    return Trace(events=table, kernels=kernels)


def test_payload_size_bound_100k_events():
    tr = _synthetic(100_000)
    n = len(tr.events)
    state = payload.build_state(tr)
    per_event = sum(len(v) for v in state["columns"].values()) / n
    assert per_event <= 40
    assert payload.payload_nbytes(state) <= 40 * n
    types = state["meta"]["column_types"]
    num_cells = state["meta"]["num_cells"]
    assert num_cells < 2**15 and types["cell"] in ("<i1", "<i2")  # narrowed from <i4
    cells = np.frombuffer(state["columns"]["cell"], types["cell"])
    np.testing.assert_array_equal(
        np.frombuffer(state["columns"]["nbytes"], types["nbytes"]),
        tr.events.columns["nbytes"])
    # every in-block event lands in a cell whose thread is the event's thread
    thread_of_cell = np.frombuffer(state["cells"]["thread"], "<i4")
    inb = cells >= 0
    np.testing.assert_array_equal(thread_of_cell[cells[inb]], tr.events.columns["thread"][inb])
    ops = np.frombuffer(state["columns"]["op"], np.uint8)
    np.testing.assert_array_equal(ops, tr.events.columns["op"])
    assert (ops == OP_CODE["create"]).any()


def test_narrowest_type_holds_every_value():
    assert payload.narrowest(np.array([-1, 127]), "<i4") == "<i1"
    assert payload.narrowest(np.array([-1, 128]), "<i4") == "<i2"
    assert payload.narrowest(np.array([-32769, 0]), "<i4") == "<i4"
    assert payload.narrowest(np.array([0, 255]), "<u4") == "<u1"
    assert payload.narrowest(np.array([0, 2**16]), "<u4") == "<u4"
    assert payload.narrowest(np.array([], np.int64), "<i2") == "<i1"
    assert payload.narrowest(np.array([5]), "<u1") == "<u1"


def test_widget_state_needs_no_kernel(example_traces):
    """The synced state carries the detail columns, string tables and snippets: the front end
    lists a cell's events and shows every line the trace names without asking Python."""
    tr = example_traces["collective_in_branch"]
    state = TraceWidget(tr).data
    meta = state["meta"]
    assert meta["inline_details"] is True
    assert set(state["details"]) == set(meta["protocol"]["detail_types"])
    assert state["tables"]["sources"]
    loc = tr.findings[0].source
    assert state["snippets"][f"{loc.file}:{loc.line}"]["lines"]
    assert tr.findings[0].branch is not None
    assert meta["findings"][0]["alignments"]  # the divergence view of its blocks
    assert payload.payload_nbytes(state) <= 40 * len(tr.events) + 64


def test_anywidget_commands_answer_with_the_request_id(example_traces):
    w = TraceWidget(example_traces["collective_in_branch"])
    sent = []
    w.send = lambda msg, buffers=None: sent.append(msg)
    w._handle_custom_msg({"kind": "anywidget-command", "id": "u-1", "name": "events",
                          "msg": {"cell": 0, "id": 3}}, [])
    w._handle_custom_msg({"kind": "anywidget-command", "id": "u-2", "name": "events",
                          "msg": {"operands": True, "kernel": 0}}, [])
    assert [m["id"] for m in sent] == ["u-1", "u-2"]
    assert sent[0]["kind"] == "anywidget-command-response"
    assert sent[0]["response"]["total"] == len(sent[0]["response"]["rows"]) > 0
    assert sent[1]["response"]["total"] == w.data["meta"]["kernels"][0]["operands"]["events"] > 0
    bad = w._safe_answer({"type": "events", "cell": "x"})
    assert "error" in bad


def test_mimebundle_text_html_is_a_static_first_screen(example_traces):
    tr = example_traces["collective_in_branch"]
    data, _ = TraceWidget(tr)._repr_mimebundle_()
    html = data["text/html"]
    assert "<script" not in html.lower()
    assert "partial collective" in html and "never did:" in html
    assert "never did:</span> <code>blocks (0..1), t 1</code>" in html  # (every cell, compactly)
    assert "data:image/png;base64," in html
