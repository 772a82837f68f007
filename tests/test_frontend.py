"""The Python <-> JS protocol, end to end: the widget state `payload.front_end_state` builds is
decoded by the front end's own code under Node (js/tests/contract.mjs), and every field the
views read is checked against the trace: per-event columns, cells, detail columns, event rows
(in `protocol.event_row` order), kernel operands and source snippets."""

from __future__ import annotations

import base64
import json
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

from pallas_viz.render import payload
from pallas_viz.render.widget import TraceWidget

JS = pathlib.Path(__file__).resolve().parent.parent / "js"
pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")


def _decode_in_node(state: dict, locations=()) -> dict:
    b64 = {part: {k: base64.b64encode(bytes(v)).decode() for k, v in state[part].items()}
           for part in ("columns", "cells", "details") if part in state}
    doc = {"meta": state["meta"], **b64, "tables": state.get("tables"),
           "snippets": state.get("snippets"), "locations": list(locations)}
    r = subprocess.run(["node", "tests/contract.mjs"], cwd=JS, input=json.dumps(doc),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


@pytest.mark.parametrize("name", ["collective_in_branch", "barrier_in_branch",
                                  "mismatched_collective_shapes", "clean_collective"])
def test_payload_through_the_js_decoder(example_traces, name):
    tr = example_traces[name]
    state = payload.front_end_state(tr)
    meta = state["meta"]
    p = meta["protocol"]
    locs = [(f.source.file, f.source.line) for f in tr.findings if f.source is not None]
    got = _decode_in_node(state, locs)
    c = tr.events.columns
    n = len(tr.events)
    # the protocol: op codes and flags as Python defines them
    assert got["OP"] == {op: i for i, op in enumerate(p["ops"])} == got["opCodes"]
    assert got["flags"] == {"collective": payload.COLLECTIVE, "warning": payload.WARNING,
                            "error": payload.ERROR, "failed": payload.FAILED}
    assert got["rowFields"] == {k: i for i, k in enumerate(payload.EVENT_ROW)}
    # every per-event column, in the narrowed types JS read from meta.protocol
    index = payload.CellIndex(tr)
    want = {"op": c["op"], "resource": c["resource"], "space": c["memory_space"],
            "warp": np.clip(c["warp"], -1, 127), "cell": index.event_cell,
            "alloc": c["allocation"], "nbytes": c["nbytes"]}
    assert set(got["ev"]) == set(want) == set(p["column_types"])
    for k, v in want.items():
        assert got["ev"][k] == np.asarray(v).tolist(), k
        assert len(got["ev"][k]) == n
    assert got["cells"]["row"] == index.cell_row.tolist()
    assert got["cells"]["thread"] == index.cell_thread.tolist()
    flags = np.frombuffer(state["cells"]["flags"], np.uint8).tolist()
    assert got["cells"]["flags"] == flags
    # per-cell counts the grid draws
    counts = np.bincount(index.event_cell[index.event_cell >= 0], minlength=index.num_cells)
    assert got["counts"] == counts.tolist()
    # the detail columns and the event rows the browser builds from them equal the rows the
    # kernel would send (payload.event_rows), field by field
    assert set(got["det"]) == set(p["detail_types"])
    for cell, reply in enumerate(got["replies"]):
        seqs = index.seqs(cell)
        assert reply["total"] == len(seqs)
        py = payload.event_rows(tr, seqs)
        assert reply["rows"] == py["rows"], cell
        assert reply["sources"] == py["sources"], cell
    for k, reply in zip(meta["kernels"], got["operands"]):
        seqs = np.flatnonzero((index.event_cell < 0) & (c["kernel"] == k["index"]))
        assert reply["total"] == len(seqs)
        assert reply["rows"] == payload.event_rows(tr, seqs)["rows"]
    # stored lines, never read from disk by the front end
    for (file, line), reply in zip(locs, got["sources"]):
        w = TraceWidget(tr)._handle_custom_msg({"type": "source", "id": 1, "file": file,
                                                 "line": line})
        assert reply["lines"] == w["lines"] and reply["start"] == w["start"]


def test_protocol_limits_and_layout_are_sent(example_traces):
    meta = payload.front_end_state(example_traces["collective_in_branch"])["meta"]
    p = meta["protocol"]
    assert p["version"] == payload.PROTOCOL_VERSION
    assert p["event_row"] == list(payload.EVENT_ROW)
    assert p["cell_types"] == payload.CELL_TYPES
    assert p["limits"]["rows_per_reply"] == payload.MAX_ROWS_PER_REPLY
    assert p["limits"]["request_timeout_ms"] > 0
    assert meta["inline_details"] is True
    # each root carries the divergence view of its blocks
    root = meta["findings"][0]
    assert root["alignments"] and all(a["row"] in root["rows"] for a in root["alignments"])
    assert root["missing"]


def test_js_reads_no_protocol_constant_of_its_own():
    """Op codes, column types and flags live in the payload: no JS module redefines them."""
    for path in JS.glob("*.js"):
        text = path.read_text()
        for needle in ("create: 0", '"<i4", thread', "collective: 1, warning: 2"):
            assert needle not in text, (path.name, needle)
