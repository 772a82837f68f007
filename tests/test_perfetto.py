"""The Perfetto / Chrome trace-event export (`pallas_viz.render.perfetto`).

Every file is checked against the Trace Event Format (JSON Object Format): the phases
used and their required fields, durations, pid/tid consistency, names for every process
and thread, slices that nest on each track (what trace viewers need); then against the
trace: one slice per hold (recomputed from the columns), counters equal to a plain
recount of live SMEM/TMEM, instants for findings and barrier operations.

No test opens the file in a browser: Debian's Chromium has no trace viewer (Debian
builds it without chrome://tracing, whose minified catapult sources it strips;
the page answers net::ERR_FAILED), and ui.perfetto.dev is not reachable offline.
"""

from __future__ import annotations

import collections
import json

import numpy as np
import pytest
from conftest import first_barrier_allocation
from test_timeline import (
    LINE,
    fifo_rows,
    make_trace,
    reference_holds,
    reference_live,
)

import pallas_viz as pv
from benchmarks.synthetic import synthetic_table
from pallas_viz.errors import OutputError
from pallas_viz.examples import budget as bex
from pallas_viz.model import Finding, KernelInfo
from pallas_viz.render.perfetto import perfetto_dict, perfetto_json, write_perfetto
from pallas_viz.trace import Trace

PHASES = {"X", "C", "i", "M"}
METADATA = {"process_name", "process_sort_index", "process_labels", "thread_name",
            "thread_sort_index"}


def check_format(d: dict) -> dict:
    """Validate `d` as trace-event JSON; returns the names of processes and threads."""
    assert set(d) == {"traceEvents", "displayTimeUnit", "otherData"}
    assert d["displayTimeUnit"] == "ns"
    assert "no wall clock" in d["otherData"]["time"]
    # the text is plain JSON: no NaN, ASCII only, and reads back the same
    text = json.dumps(d, allow_nan=False)
    assert json.loads(text) == d
    procs: dict[int, str] = {}
    threads: dict[int, tuple[int, str]] = {}
    used_pids, used_tids = set(), set()
    slices = collections.defaultdict(list)
    for e in d["traceEvents"]:
        assert e["ph"] in PHASES, e
        assert isinstance(e["name"], str) and e["name"]
        assert isinstance(e["pid"], int) and e["pid"] > 0
        if e["ph"] == "M":
            assert e["name"] in METADATA
            if e["name"] == "process_name":
                assert e["pid"] not in procs
                procs[e["pid"]] = e["args"]["name"]
            elif e["name"] == "thread_name":
                assert e["tid"] not in threads and e["tid"] != e["pid"]
                threads[e["tid"]] = (e["pid"], e["args"]["name"])
            elif e["name"].endswith("sort_index"):
                assert isinstance(e["args"]["sort_index"], int)
            continue
        assert isinstance(e["ts"], int) and e["ts"] >= 0
        assert isinstance(e.get("args", {}), dict)
        used_pids.add(e["pid"])
        if e["ph"] == "X":
            assert isinstance(e["dur"], int) and e["dur"] >= 0  # begin <= end
            slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
        if e["ph"] == "i":
            assert e["s"] in ("t", "p", "g")
        if e["ph"] == "C":
            assert e["args"] and all(isinstance(v, int) for v in e["args"].values())
            continue
        assert isinstance(e["tid"], int)
        used_tids.add((e["pid"], e["tid"]))
    # every process and thread used has a name; a tid belongs to one process
    assert used_pids <= set(procs)
    for pid, tid in used_tids:
        assert threads[tid][0] == pid
    # the slices of each track nest (or follow each other)
    for key, spans in slices.items():
        stack: list[int] = []
        for b, e in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= b:
                stack.pop()
            assert not stack or e <= stack[-1], (key, b, e, stack)
            stack.append(e)
    return {"processes": procs, "threads": threads}


def events_of(d, ph, name=None):
    return [e for e in d["traceEvents"] if e["ph"] == ph and (name is None or
                                                              e["name"] == name)]


def process_of(d, names, pid) -> str:
    return names["processes"][pid]


def check_slices_are_the_holds(tr, d, names):
    """One slice per hold, recomputed from the columns: same request and release steps,
    on the requesting thread's track, in its block's process."""
    pairs, _ = reference_holds(tr.events)
    c = tr.events.columns
    last = {}
    for i, k in enumerate(c["kernel"].tolist()):
        last[k] = i
    want = collections.Counter()
    for b, e in pairs:
        k = int(c["kernel"][b])
        info = tr.kernels[k]
        blk = tr.events.block(int(c["block"][b]))
        where = "kernel level" if blk is None else "block " + (
            "(no grid)" if blk == () else "(" + ", ".join(map(str, blk)) + ")")
        axis = info.thread_axis or "thread"
        w = int(c["warp"][b])
        thread = f"{axis} {int(c['thread'][b])}" + (f" · warp {w}" if w >= 0 else "")
        end = e if e >= 0 else last[k] + 1
        want[(f"kernel {k} {info.name} · {where}", thread, b, end)] += 1
    got = collections.Counter()
    for s in events_of(d, "X"):
        thread = names["threads"][s["tid"]][1].split(" (")[0]  # extra tracks: "t 0 (2)"
        got[(process_of(d, names, s["pid"]), thread, s["ts"], s["ts"] + s["dur"])] += 1
        assert s["args"]["request_step"] == s["ts"]
        assert s["args"]["release_step"] in (None, s["ts"] + s["dur"])
    assert got == want


def counter_series(d, names, space):
    """process name -> sorted [(ts, value)] of its `live <space>` counter."""
    out = collections.defaultdict(list)
    for e in events_of(d, "C", f"live {space}"):
        (v,) = e["args"].values()
        out[process_of(d, names, e["pid"])].append((e["ts"], v))
    return {k: sorted(v) for k, v in out.items()}


def check_counters(tr, d, names, tmem=False):
    """The counters equal a plain recount of each block's live SMEM (and TMEM)."""
    smem = counter_series(d, names, "SMEM")
    tmem_series = counter_series(d, names, "TMEM")
    assert bool(tmem_series) == tmem
    n_blocks = 0
    for k, info in enumerate(tr.kernels):
        ref = reference_live(tr.events, k)
        n_blocks += len(ref)
        for (_dev, blk), rows in ref.items():
            where = "(no grid)" if blk == () else "(" + ", ".join(map(str, blk)) + ")"
            key = f"kernel {k} {info.name} · block {where}"
            for series, col in ((smem[key], 1), (tmem_series.get(key), 2)):
                if series is None:
                    continue
                ts = [t for t, _ in series]
                assert ts == sorted(set(ts))  # one value per step
                for row in rows:
                    j = np.searchsorted(ts, row[0], side="right") - 1
                    assert j >= 0 and series[j][1] == row[col], (key, row)
    assert len(smem) == n_blocks


# -- the example kernels


@pytest.mark.parametrize("name", ["clean_collective", "collective_in_branch",
                                  "barrier_in_branch", "hoisted_collective"])
def test_example_kernels(example_traces, name, tmp_path):
    tr = example_traces[name]
    path = tmp_path / "t.json"
    assert write_perfetto(tr, path) == str(path)
    d = json.loads(path.read_text(encoding="ascii"))  # ASCII: non-ASCII is escaped
    names = check_format(d)
    check_slices_are_the_holds(tr, d, names)
    check_counters(tr, d, names)
    grid = sorted({b for b in tr.events.blocks})
    assert grid in ([(0,)], [(0,), (1,)])
    assert sorted(names["processes"].values()) == sorted(
        [f"kernel 0 {name} · block ({b[0]})" for b in grid]
        + [f"kernel 0 {name} · kernel level"])
    # block threads are "t N" (the kernel's thread axis); kernel level has warps too
    tnames = {n for _, n in names["threads"].values()}
    assert {"t 0", "t 1", "t 0 · warp 3"} <= tnames


def test_every_example_trace_exports(example_traces):
    for name, tr in example_traces.items():
        names = check_format(perfetto_dict(tr))
        if not tr.kernels:  # rejected while tracing: nothing ran
            assert names["processes"] == {}, name


def test_slice_names_and_args(example_traces):
    tr = example_traces["clean_collective"]
    d = perfetto_dict(tr)
    smem = events_of(d, "X", "SMEM (8, 128) float32")
    assert len(smem) == 4  # 2 blocks x 2 threads
    s = next(x for x in smem if x["args"]["request"] == "create")
    assert s["cat"] == "SMEM"
    src = tr.events.source_of(s["ts"])
    assert src.file.endswith("examples/kernels.py")
    assert (s["args"]["line"], s["args"]["code"]) == (src.short(), src.code.strip())
    assert s["args"]["code"].startswith("pl.run_scoped(scoped, plgpu.SMEM(SHAPE")
    assert s["args"]["initial_ref_count"] == 2 and s["args"]["nbytes"] == 4096
    assert {x["args"]["release"] for x in smem} == {"release", "free"}
    barriers = events_of(d, "X", "barrier")
    assert len(barriers) == 4 and {b["cat"] for b in barriers} == {"barrier"}
    assert not any("leaked" in x["args"] for x in events_of(d, "X"))


def test_a_leaked_buffer_is_marked(example_traces):
    # thread 0 alone requests the collective buffer: its hold ends at its release, but the
    # interpreter never frees the buffer (the leak finding)
    tr = example_traces["collective_in_branch"]
    smem = events_of(perfetto_dict(tr), "X", "SMEM (8, 128) float32")
    assert smem and all(x["args"]["release"] == "release" for x in smem)
    assert all(x["args"]["leaked"].startswith("never freed") for x in smem)


def test_findings_are_instants_on_their_cells(example_traces):
    tr = example_traces["collective_in_branch"]
    d = perfetto_dict(tr)
    names = check_format(d)
    root = tr.findings[0]
    assert root.kind == "partial_collective"
    inst = events_of(d, "i", "error[partial_collective] line 60")
    cells = {(process_of(d, names, e["pid"]), names["threads"][e["tid"]][1]) for e in inst}
    assert cells == {(f"kernel 0 collective_in_branch · block ({b})", f"t {t}")
                     for b in (0, 1) for t in (0, 1)}
    assert all(e["s"] == "t" and e["cat"] == "finding" for e in inst)
    assert {e["ts"] for e in inst} == {20, 22}  # at the finding's event in each block
    assert inst[0]["args"]["suggestion"] and "t 1 never requests" in inst[0]["args"]["message"]
    leak = events_of(d, "i", "warning[leak] line 60")
    assert len(leak) == 2
    assert all(e["args"]["root_cause"] == "error[partial_collective] line 60" for e in leak)


def test_barrier_operations_are_instants(example_traces):
    tr = example_traces["clean_collective"]
    bar = first_barrier_allocation(tr)
    ops_ = [dict(step=25, device=0, block=(0,), thread=0, kind="arrive", allocation=bar),
            dict(step=24, device=0, block=(0,), thread=1, kind="wait_start", allocation=bar),
            dict(step=27, device=0, block=(0,), thread=1, kind="wait_end", allocation=bar),
            dict(step=40, device=0, block=(1,), thread=1, kind="wait_start", allocation=bar)]
    d = perfetto_dict(tr, barrier_ops=ops_)
    names = check_format(d)
    (arrive,) = events_of(d, "i", "barrier arrive")
    assert (arrive["ts"], names["threads"][arrive["tid"]][1]) == (25, "t 0")
    assert arrive["args"]["barrier"] == "barrier" and arrive["args"]["allocation"] == bar
    (end,) = events_of(d, "i", "barrier wait end")
    assert end["args"]["waited_steps"] == 3
    (never,) = events_of(d, "i", "barrier wait start (never ended)")
    assert never["ts"] == 40 and never["args"]["never_ended"]
    assert process_of(d, names, never["pid"]).endswith("block (1)")
    # an op past the last event stretches what is never released to it
    assert max(s["ts"] + s["dur"] for s in events_of(d, "X")) == 41
    assert d["otherData"]["barrier_ops"] == 4
    # the recorder's records: their fields go into the args; other barrier kinds named
    rec = [dict(step=25, kernel=0, op="arrive", resource="cluster_barrier", device=0,
                block=[0], thread=0, warp=None, allocation=bar, phase=3, arrivals=1,
                num_arrivals=2, completes=False, via="copy", freed=False, part=1,
                target_block=[1], key=None, barrier_id=None,
                source={"file": "k.py", "line": 7}),
           dict(step=26, kernel=0, op="wait", resource="named_barrier", device=0,
                block=[0], thread=1, warp=None, allocation=-1, phase=0, arrivals=0,
                num_arrivals=2, completes=True, via="named", freed=False, part=None,
                target_block=None, key=None, barrier_id=5, source=None)]
    d2 = perfetto_dict(tr, barrier_ops=rec)
    check_format(d2)
    (a,) = events_of(d2, "i", "cluster barrier arrive")
    assert {k: a["args"][k] for k in ("phase", "via", "part", "target_block", "op_line")} == {
        "phase": 3, "via": "copy", "part": 1, "target_block": [1], "op_line": "k.py:7"}
    (w,) = events_of(d2, "i", "named barrier wait start (never ended)")
    assert w["args"]["barrier_id"] == 5 and "barrier" not in w["args"]
    # from the trace's meta
    tr2 = Trace(tr.events, tr.kernels, tr.findings, meta={"barrier_ops": ops_})
    assert perfetto_dict(tr2) == d
    with pytest.raises(ValueError, match="unknown barrier operation kind"):
        perfetto_dict(tr, barrier_ops=[dict(step=1, thread=0, kind="signal")])


# -- hand-made traces: nesting tracks, orphans, errors, names


def test_overlapping_holds_get_extra_tracks_and_open_ones_end_with_the_kernel():
    rows = fifo_rows() + [dict(op="error", alloc=-1, thread=1, source=LINE)]
    tr = make_trace(rows, name="fifo")
    d = perfetto_dict(tr)
    names = check_format(d)
    tnames = sorted(n for _, n in names["threads"].values())
    assert tnames == ["t 0", "t 0 (2)", "t 1"]  # A and B overlap without nesting
    check_slices_are_the_holds(tr, d, names)
    open_ = [s for s in events_of(d, "X") if s["args"]["release_step"] is None]
    assert [(s["ts"], s["ts"] + s["dur"]) for s in open_] == [(2, 9)]  # 8 events + 1
    (orphan,) = events_of(d, "i", "release without request")
    assert orphan["ts"] == 5
    (err,) = events_of(d, "i", "request failed")
    assert err["ts"] == 8 and err["args"]["line"] == "kern.py:12:4"


def test_names_are_escaped():
    name = 'we"ird\\ name\n</script> µs ✓'
    rows = [dict(op="create", alloc=0, source=LINE), dict(op="free", alloc=0, rc=0)]
    tr = make_trace(rows, name=name, axis="th\"r")
    text = perfetto_json(tr)
    assert text.isascii() and "\n" not in text and "</script>" in text
    d = json.loads(text)
    names = check_format(d)
    assert names["processes"][1] == f"kernel 0 {name} · block (0)"
    assert {n for _, n in names["threads"].values()} == {'th"r 0'}


def test_devices_warps_kernels_and_no_grid():
    rows = [
        dict(op="create", alloc=0, block=None, warp=2, space="GMEM", kernel=0),
        dict(op="create", alloc=1, block=(), device=1, thread=1, kernel=0),
        dict(op="free", alloc=1, block=(), device=1, thread=1, rc=0, kernel=0),
        dict(op="create", alloc=2, block=(0, 1), kernel=1),
        dict(op="free", alloc=2, block=(0, 1), rc=0, kernel=1),
    ]
    tr = make_trace(rows, kernels=2, axis=None)
    d = perfetto_dict(tr)
    names = check_format(d)
    assert sorted(names["processes"].values()) == [
        "kernel 0 k · device 1 · block (no grid)", "kernel 0 k · kernel level",
        "kernel 1 k · block (0, 1)"]
    assert sorted(n for _, n in names["threads"].values()) == [
        "thread 0", "thread 0 · warp 2", "thread 1"]
    one = perfetto_dict(tr, kernel=1)
    assert list(check_format(one)["processes"].values()) == ["kernel 1 k · block (0, 1)"]
    assert one["otherData"]["kernels"] == ["kernel 1 k"]
    with pytest.raises(ValueError, match="kernel must be in 0..1"):
        perfetto_dict(tr, kernel=2)
    with pytest.raises(pv.EmptyTraceError):
        perfetto_dict(Trace())


def test_finding_on_a_thread_without_events_gets_its_track():
    rows = [dict(op="create", alloc=0, rc=2, init_rc=2, source=LINE),
            dict(op="release", alloc=0, rc=1, init_rc=2, source=LINE)]
    f = Finding("partial_collective", "error", "only t 0", [(0, (0,), 0), (0, (0,), 1)],
                [0], source=LINE, kernel=0)
    d = perfetto_dict(make_trace(rows, findings=[f]))
    names = check_format(d)
    inst = events_of(d, "i", "error[partial_collective] line 12")
    assert sorted((names["threads"][e["tid"]][1], e["ts"]) for e in inst) == [
        ("t 0", 0), ("t 1", 0)]


def test_write_is_atomic(example_traces, tmp_path):
    tr = example_traces["clean_collective"]
    path = tmp_path / "t.json"
    path.write_text("old")
    with pytest.raises(OutputError):
        write_perfetto(tr, tmp_path / "missing" / "t.json")
    assert not (tmp_path / "missing").exists()
    write_perfetto(tr, path, kernel=0, device="b200")
    d = json.loads(path.read_text())
    assert d["otherData"]["device"] == "b200"
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


# -- memory counters


def test_counters_of_nested_scopes_and_tmem():
    fn, args = bex.sequential_scopes()
    with pv.trace() as tr:
        fn(*args)
    d = perfetto_dict(tr)
    names = check_format(d)
    check_counters(tr, d, names)
    series = counter_series(d, names, "SMEM")
    assert {max(v for _, v in s) for s in series.values()} == {192 * 1024}
    labels = [e["args"]["labels"] for e in events_of(d, "M", "process_labels")]
    assert labels and all(lb.startswith("SMEM peak 192.0 KiB of 227.0 KiB (h100) at step")
                          for lb in labels)
    fn, args = bex.tmem_columns(128, 60)
    with pv.trace() as tr:
        fn(*args)
    d = perfetto_dict(tr, device="b200")
    names = check_format(d)
    check_counters(tr, d, names, tmem=True)
    assert {max(v for _, v in s) for s in counter_series(d, names, "TMEM").values()} == {
        192}
    assert all(e["args"] == {"columns": e["args"]["columns"]}
               for e in events_of(d, "C", "live TMEM"))


def test_synthetic_trace_is_well_formed():
    table = synthetic_table(20_000)
    kernels = [KernelInfo(i, f"k{i}", None, 1, n, 2 if i == 0 else 1, thread_axis="wg")
               for i, n in enumerate((4, 2, 3))]
    tr = Trace(table, kernels)
    d = perfetto_dict(tr)
    names = check_format(d)
    check_slices_are_the_holds(tr, d, names)
    check_counters(tr, d, names)


# -- the real warp-specialised Hopper matmul


@pytest.mark.slow
def test_hopper_matmul(hopper):
    tr = hopper
    d = perfetto_dict(tr)
    names = check_format(d)
    check_slices_are_the_holds(tr, d, names)
    check_counters(tr, d, names)
    tnames = {n for _, n in names["threads"].values()}
    # the pipeline releases its buffers in the order it requested them: extra tracks
    assert {"wg 0", "wg 1", "wg 2", "wg 0 (2)"} <= tnames
    series = counter_series(d, names, "SMEM")
    assert len(series) == 8
    assert {max(v for _, v in s) for s in series.values()} == {131104}
