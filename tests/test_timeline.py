"""Lifetimes on a timeline (`pallas_viz.render.timeline`): holds, live memory, the plots.

The data helpers are checked against plain-Python recomputations from the event columns;
the figures by their artists' gids (bars per lane, limit lines, the budget's peak).
"""

from __future__ import annotations

import collections
import math

import numpy as np
import pytest
from conftest import first_barrier_allocation
from matplotlib.colors import to_hex

import pallas_viz as pv
from benchmarks.synthetic import synthetic_table
from pallas_viz.analysis.budget import block_budgets
from pallas_viz.examples import budget as bex
from pallas_viz.examples import kernels as ex
from pallas_viz.model import KernelInfo, SourceLocation
from pallas_viz.render import timeline as tl
from pallas_viz.render.png import figure_png
from pallas_viz.store import COLUMNS, OP_CODE, RESOURCE_CODE, SPACE_CODE, EventTable
from pallas_viz.trace import Trace

H100_SMEM = 227 * 1024

# -- hand-made traces


def make_table(rows: list[dict]) -> EventTable:
    """An `EventTable` from dicts: op, alloc (required); resource="buffer", space="SMEM",
    kernel=0, device=0, block=(0,) (None: kernel level), thread=0, warp=None,
    nbytes=4096, shape=(8, 128), dtype="float32", rc=1, init_rc=1, source=None."""
    blocks: list = []
    shapes: list = []
    dtypes: list = []
    sources: list = []

    def intern(table, x):
        if x is None:
            return -1
        if x not in table:
            table.append(x)
        return table.index(x)

    cols = {k: [] for k in COLUMNS}
    for i, r in enumerate(rows):
        cols["thread_seq"].append(i)
        cols["kernel"].append(r.get("kernel", 0))
        cols["op"].append(OP_CODE[r["op"]])
        res = r.get("resource", "buffer")
        cols["resource"].append(RESOURCE_CODE[res])
        space = r.get("space", "SMEM" if res == "buffer" else None)
        cols["memory_space"].append(SPACE_CODE[space] if space else -1)
        cols["device"].append(r.get("device", 0))
        cols["block"].append(intern(blocks, r.get("block", (0,))))
        cols["thread"].append(r.get("thread", 0))
        cols["warp"].append(-1 if r.get("warp") is None else r["warp"])
        cols["buffer_id"].append(r["alloc"])
        cols["key_thread"].append(0)
        cols["key_block"].append(0)
        cols["initial_ref_count"].append(r.get("init_rc", 1))
        cols["ref_count"].append(r.get("rc", 1))
        cols["shape"].append(intern(shapes, r.get("shape", (8, 128) if res == "buffer"
                                                  else None)))
        cols["dtype"].append(intern(dtypes, r.get("dtype", "float32" if res == "buffer"
                                                  else None)))
        cols["nbytes"].append(r.get("nbytes", 4096 if res == "buffer" else 0))
        cols["source"].append(intern(sources, r.get("source")))
        cols["allocation"].append(r["alloc"])
    return EventTable({k: np.asarray(v) for k, v in cols.items()}, blocks, shapes, dtypes,
                      sources)


def make_trace(rows, threads=2, name="k", axis="t", findings=(), meta=None, kernels=1):
    ks = [KernelInfo(i, name, None, 1, threads, 1, thread_axis=axis) for i in range(kernels)]
    return Trace(make_table(rows), ks, list(findings), meta=meta)


LINE = SourceLocation("kern.py", 12, 3, "body", "pl.run_scoped(f, plgpu.SMEM(...))")


def fifo_rows():
    """Thread 0 requests A then B and releases A then B (holds overlap without nesting);
    thread 1 joins A and never releases it; a release by thread 1 of B without request."""
    return [
        dict(op="create", alloc=0, rc=2, init_rc=2, source=LINE),            # 0
        dict(op="create", alloc=1, nbytes=100, source=LINE),                 # 1
        dict(op="join", alloc=0, thread=1, rc=2, init_rc=2, source=LINE),    # 2
        dict(op="release", alloc=0, rc=1, init_rc=2, source=LINE),           # 3
        dict(op="free", alloc=1, rc=0, nbytes=100, source=LINE),             # 4
        dict(op="release", alloc=1, thread=1, rc=0, nbytes=100),             # 5: orphan
        dict(op="create", alloc=2, resource="barrier", thread=1),            # 6
        dict(op="free", alloc=2, resource="barrier", thread=1, rc=0),        # 7
    ]


# -- an independent pairing, in plain Python


def reference_holds(table: EventTable):
    """(begin, end or -1) per request, and the orphan releases: a FIFO queue per
    (allocation, device, block, thread, warp), walking the rows in order."""
    c = {k: v.tolist() for k, v in table.columns.items()}
    queues: dict[tuple, collections.deque] = collections.defaultdict(collections.deque)
    pairs, orphans = {}, []
    for i in range(len(table)):
        if c["allocation"][i] < 0:
            continue
        key = tuple(c[k][i] for k in ("allocation", "device", "block", "thread", "warp"))
        op = c["op"][i]
        if op in (OP_CODE["create"], OP_CODE["join"]):
            queues[key].append(i)
            pairs[i] = -1
        elif op in (OP_CODE["release"], OP_CODE["free"]):
            if queues[key]:
                pairs[queues[key].popleft()] = i
            else:
                orphans.append(i)
    return sorted(pairs.items()), orphans


def test_thread_holds_pairs_each_requester_first_in_first_out():
    h = tl.thread_holds(make_table(fifo_rows()))
    assert list(zip(h["begin"].tolist(), h["end"].tolist())) == [
        (0, 3), (1, 4), (2, -1), (6, 7)]
    assert h["orphans"].tolist() == [5]


def test_thread_holds_agree_with_a_queue_per_requester():
    t = synthetic_table(20_000)
    # shuffle some releases of a block to make orphans and out-of-order releases
    cols = {k: v.copy() for k, v in t.columns.items()}
    cols["thread"][100:140] = cols["thread"][100:140][::-1]
    t2 = EventTable(cols, t.blocks, t.shapes, t.dtypes, t.sources)
    for table in (t, t2, make_table(fifo_rows())):
        h = tl.thread_holds(table)
        pairs, orphans = reference_holds(table)
        assert list(zip(h["begin"].tolist(), h["end"].tolist())) == pairs
        assert h["orphans"].tolist() == orphans
    mask = t.columns["kernel"] == 1
    h = tl.thread_holds(t, mask)
    assert set(t.columns["kernel"][h["begin"]].tolist()) == {1}


# -- live memory: the budget's counting, step by step


def reference_live(table: EventTable, kernel: int, device="h100"):
    """(device, block) -> [(row, live SMEM bytes, live TMEM columns)] after each event of
    the block, counted by hand: SMEM buffers rounded up to 1 KiB, 8 B per barrier, TMEM
    columns of 512 B rounded up to 8, kernel-level SMEM/TMEM for every block, a 4-byte
    slot when the kernel has TMEM; a lifetime ends at its first release or free."""
    c = {k: v.tolist() for k, v in table.columns.items()}
    n = len(table)
    smem, tmem = SPACE_CODE["SMEM"], SPACE_CODE["TMEM"]

    def charge(i):
        if c["resource"][i] != RESOURCE_CODE["buffer"]:
            return "SMEM", 8
        if c["memory_space"][i] == smem:
            return "SMEM", math.ceil(c["nbytes"][i] / 1024) * 1024
        if c["memory_space"][i] == tmem:
            return "TMEM", math.ceil(math.ceil(c["nbytes"][i] / 512) / 8) * 8
        return None, 0

    base = {"SMEM": 0, "TMEM": 0}
    has_tmem = False
    for i in range(n):
        if c["kernel"][i] != kernel or c["allocation"][i] < 0:
            continue
        space, ch = charge(i)
        has_tmem |= space == "TMEM"
        if c["block"][i] < 0 and c["op"][i] == OP_CODE["create"] and space:
            base[space] += ch
    base["SMEM"] += 4 if has_tmem else 0
    live: dict = {}
    owner: dict = {}
    out: dict = collections.defaultdict(list)
    for i in range(n):
        if c["kernel"][i] != kernel or c["block"][i] < 0:
            continue
        key = (c["device"][i], table.blocks[c["block"][i]])
        cur = live.setdefault(key, dict(base))
        a = c["allocation"][i]
        if a >= 0 and c["op"][i] == OP_CODE["create"]:
            space, ch = charge(i)
            if space:
                cur[space] += ch
                owner[a] = (key, space, ch)
        elif a in owner and c["op"][i] in (OP_CODE["release"], OP_CODE["free"]):
            okey, space, ch = owner.pop(a)
            live[okey][space] -= ch
        out[key].append((i, cur["SMEM"], cur["TMEM"]))
    return out


def value_at(steps, values, row):
    """The step function's value at `row` (the last change at or before it)."""
    j = np.searchsorted(steps, row, side="right") - 1
    return int(values[j])


def check_live(table, kernels, kernel):
    ref = reference_live(table, kernel)
    got = tl.live_memory(table, [kernel])
    assert {(d, table.blocks[b]) for _, d, b in got} == set(ref)
    for (_, d, b), spaces in got.items():
        for row, smem, tmem in ref[(d, table.blocks[b])]:
            assert value_at(*spaces["SMEM"], row) == smem, (d, b, row)
            assert value_at(*spaces["TMEM"], row) == tmem, (d, b, row)
    # the budget's peak is the curve's maximum, reached at the budget's step
    for bb in block_budgets(table, kernels):
        if bb.block is None or bb.kernel != kernel:
            continue
        key = (kernel, bb.device, table.blocks.index(bb.block))
        for space in ("SMEM", "TMEM"):
            steps, values = got[key][space]
            sp = bb.space(space)
            assert int(values.max()) == sp.peak
            if sp.step >= 0:
                assert value_at(steps, values, sp.step) == sp.peak


def test_live_memory_recounts_synthetic_kernels():
    t = synthetic_table(20_000)
    kernels = [KernelInfo(i, f"k{i}", None, 1, n, 1) for i, n in enumerate((4, 2, 3))]
    for k in range(3):
        check_live(t, kernels, k)


def test_live_memory_recounts_example_kernels(example_traces):
    for name in ("clean_collective", "collective_in_branch", "barrier_in_branch"):
        tr = example_traces[name]
        check_live(tr.events, tr.kernels, 0)


@pytest.fixture(scope="module")
def sequential():
    fn, args = bex.sequential_scopes()
    with pv.trace() as tr:
        fn(*args)
    return tr


@pytest.fixture(scope="module")
def tmem_trace():
    fn, args = bex.tmem_columns(128, 60)
    with pv.trace() as tr:
        fn(*args)
    return tr


def test_live_memory_recounts_nested_scopes_and_tmem(sequential, tmem_trace):
    check_live(sequential.events, sequential.kernels, 0)
    check_live(tmem_trace.events, tmem_trace.kernels, 0)
    curves = tl.live_memory(tmem_trace.events, [0], "b200")
    assert max(int(v["TMEM"][1].max()) for v in curves.values()) == 128 + 64


# -- barrier operations


def test_barrier_ops_are_normalised_from_a_list_a_dict_or_the_meta():
    tr = make_trace(fifo_rows())
    ops_ = [dict(step=7, device=0, block=(0,), thread=1, kind="wait_end", allocation=2),
            dict(step=6, device=0, block=0, thread=1, kind="wait_start", allocation=2)]
    got = tl.barrier_ops_of(tr, ops_)
    assert [o["step"] for o in got] == [6, 7]
    assert all(o["block"] == (0,) and o["kernel"] == 0 and o["warp"] == -1 for o in got)
    columnar = {k: [o[k] for o in ops_] for k in ops_[0]}
    assert tl.barrier_ops_of(tr, columnar) == got
    assert tl.pair_waits(got) == [(got[0], got[1])]
    with_meta = make_trace(fifo_rows(), meta={"barrier_ops": ops_})
    assert tl.barrier_ops_of(with_meta) == got
    assert tl.barrier_ops_of(make_trace(fifo_rows(), meta={"barrier_ops": "junk"})) == []
    # the recorder's records: "op" (wait / waited), blocks as lists, more fields
    rec = [dict(step=6, kernel=0, op="wait", resource="barrier", device=0, block=[0],
                thread=1, warp=None, allocation=2, phase=0, arrivals=0, num_arrivals=1,
                completes=True, via="thread", freed=False, part=None, target_block=None,
                key=[1, 0, 0, 0, 2, 2], barrier_id=None, source=LINE.to_dict()),
           dict(step=7, kernel=0, op="waited", resource="barrier", device=0, block=[0],
                thread=1, warp=None, allocation=2, phase=0, arrivals=1, num_arrivals=1,
                completes=False, via="thread", freed=False, part=None, target_block=None,
                key=[1, 0, 0, 0, 2, 2], barrier_id=None, source=None)]
    got2 = tl.barrier_ops_of(tr, rec)
    assert [(o["kind"], o["block"], o["step"]) for o in got2] == [
        ("wait_start", (0,), 6), ("wait_end", (0,), 7)]
    assert got2[0]["extra"] == dict(phase=0, arrivals=0, num_arrivals=1, completes=True,
                                    via="thread", freed=False)
    assert got2[0]["source"]["line"] == 12 and got2[1]["source"] is None
    assert tl.pair_waits(got2) == [(got2[0], got2[1])]
    with pytest.raises(ValueError, match="unknown barrier operation kind 'signal'"):
        tl.barrier_ops_of(tr, [dict(step=1, thread=0, kind="signal")])
    with pytest.raises(ValueError, match="bad barrier_ops"):
        tl.barrier_ops_of(tr, [dict(step=1, kind="arrive")])  # no thread


# -- plot_timeline


def _artists(fig, gid):
    return [a for ax in fig.axes for a in ax.get_children() if a.get_gid() == gid]


def bars_per_lane(fig) -> collections.Counter:
    """How many bars each lane holds (any kind), read from the bar collections."""
    out: collections.Counter = collections.Counter()
    for kind in tl.KIND_COLORS:
        for coll in _artists(fig, f"bars-{kind}"):
            for path in coll.get_paths():
                y = path.vertices[:, 1]
                out[int(round((y.min() + y.max()) / 2))] += 1
    return out


def holds_per_lane(tr, kernel, lanes, begins=None) -> collections.Counter:
    """Holds per lane, from `reference_holds` (or the request rows `begins`)."""
    if begins is None:
        begins = [b for b, _ in reference_holds(tr.events)[0]]
    c = tr.events.columns
    index = {lane: i for i, lane in enumerate(lanes)}
    out: collections.Counter = collections.Counter()
    for b in begins:
        if c["kernel"][b] != kernel or c["block"][b] < 0:
            continue
        lane = (int(c["device"][b]), tr.events.blocks[c["block"][b]], int(c["thread"][b]),
                int(c["warp"][b]))
        if lane in index:
            out[index[lane]] += 1
    return out


def test_timeline_draws_one_bar_per_hold_in_each_lane(example_traces):
    tr = example_traces["collective_in_branch"]
    fig = tl.plot_timeline(tr)
    assert fig.lanes == [(0, (0,), 0, -1), (0, (0,), 1, -1), (0, (1,), 0, -1),
                         (0, (1,), 1, -1)]
    assert bars_per_lane(fig) == holds_per_lane(tr, 0, fig.lanes) == {0: 1, 2: 1}
    (limit,) = _artists(fig, "smem-limit")
    assert list(limit.get_ydata()) == [H100_SMEM, H100_SMEM]
    (bars,) = _artists(fig, "bars-SMEM")
    assert to_hex(bars.get_facecolor()[0]) == tl.OKABE_ITO["blue"].lower()
    # the findings' events are crossed on their lanes; t 1's lanes are labelled in red
    (marks,) = _artists(fig, "finding-events")
    assert {tuple(map(int, xy)) for xy in marks.get_offsets()} == {
        (20, 0), (21, 0), (22, 2), (23, 2)}
    labels = fig.axes[0].get_yticklabels()
    assert [lb.get_text() for lb in labels] == ["(0) t 0", "(0) t 1", "(1) t 0", "(1) t 1"]
    assert {to_hex(lb.get_color()) for lb in labels} == {tl.FINDING_COLOR.lower()}
    figure_png(fig)


def test_timeline_lanes_nest_overlapping_holds_and_outline_unreleased():
    tr = make_trace(fifo_rows(), findings=[])
    fig = tl.plot_timeline(tr)
    assert fig.lanes == [(0, (0,), 0, -1), (0, (0,), 1, -1)]
    assert bars_per_lane(fig) == {0: 2, 1: 2}
    # thread 0's overlapping holds are stacked in two rows of its lane, not on top of
    # each other
    (smem,) = _artists(fig, "bars-SMEM")
    ys = sorted((float(p.vertices[:, 1].min()), float(p.vertices[:, 1].max()))
                for p in smem.get_paths())
    assert ys[0][1] <= ys[1][0]  # lane 0: two disjoint rows
    (open_,) = _artists(fig, "unreleased")
    assert len(open_.get_paths()) == 1  # thread 1's join of A
    (barrier,) = _artists(fig, "bars-barrier")
    assert len(barrier.get_paths()) == 1


def test_timeline_barrier_ticks(example_traces):
    tr = example_traces["clean_collective"]
    bar = first_barrier_allocation(tr)
    ops_ = [dict(step=25, device=0, block=(0,), thread=0, kind="arrive", allocation=bar),
            dict(step=24, device=0, block=(0,), thread=1, kind="wait_start", allocation=bar),
            dict(step=26, device=0, block=(0,), thread=1, kind="wait_end", allocation=bar),
            dict(step=30, device=0, block=(1,), thread=1, kind="wait_start", allocation=bar)]
    fig = tl.plot_timeline(tr, barrier_ops=ops_)
    (arrive,) = _artists(fig, "barrier-arrive")
    assert [tuple(map(float, xy)) for xy in arrive.get_offsets()] == [(25.0, 0.0)]
    (waits,) = _artists(fig, "barrier-wait")
    segs = [s.tolist() for s in waits.get_segments()]
    assert segs[0] == [[24.0, 1.0], [26.0, 1.0]]
    assert segs[1][0] == [30.0, 3.0]  # never ended: drawn to the right edge
    assert segs[1][1][0] >= 30 and waits.get_linestyles()[1] != waits.get_linestyles()[0]


def test_every_example_trace_plots(example_traces):
    for tr in example_traces.values():
        for fig in (tl.plot_timeline(tr), tl.plot_memory(tr)):
            figure_png(fig)
    (rejected,) = [tr for tr in example_traces.values() if not tr.kernels]
    assert "JAX rejected it" in tl.plot_timeline(rejected).texts[0].get_text()


def test_timeline_blocks_and_lane_cap(example_traces):
    tr = example_traces["collective_in_branch"]
    assert {b for _, b, _, _ in tl.plot_timeline(tr, blocks=[(1,)]).lanes} == {(1,)}
    assert {b for _, b, _, _ in tl.plot_timeline(tr, blocks=[1]).lanes} == {(1,)}
    assert len(tl.plot_timeline(tr, max_lanes=3).lanes) == 2  # whole blocks only
    assert len(tl.plot_timeline(tr, max_lanes=1).lanes) == 1  # but at least one lane
    with pytest.raises(ValueError, match=r"kernel 0 has no block \(5,\)"):
        tl.plot_timeline(tr, blocks=[(5,)])
    with pytest.raises(ValueError, match="kernel must be in 0..0"):
        tl.plot_timeline(tr, kernel=3)
    with pytest.raises(pv.EmptyTraceError):
        tl.plot_timeline(Trace())


def test_timeline_of_a_kernel_without_grid():
    fn, args = ex.clean_collective(grid=())
    with pv.trace() as tr:
        fn(*args)
    fig = tl.plot_timeline(tr)
    assert {b for _, b, _, _ in fig.lanes} == {()}
    assert [lb.get_text() for lb in fig.axes[0].get_yticklabels()] == [
        "(no grid) t 0", "(no grid) t 1"]
    assert bars_per_lane(fig) == holds_per_lane(tr, 0, fig.lanes) == {0: 2, 1: 2}


def test_timeline_tmem_panel(tmem_trace):
    fig = tl.plot_timeline(tmem_trace, device="b200")
    (limit,) = _artists(fig, "tmem-limit")
    assert list(limit.get_ydata()) == [512, 512]
    assert _artists(fig, "bars-TMEM")
    # h100 has no TMEM: no limit line, the curve still drawn
    fig = tl.plot_timeline(tmem_trace)
    assert _artists(fig, "tmem-curves") and not _artists(fig, "tmem-limit")


@pytest.fixture(scope="module")
def big_trace():
    table = synthetic_table(1_000_000)
    kernels = [KernelInfo(i, f"k{i}", None, 1, n, 2 if i == 0 else 1, thread_axis="wg")
               for i, n in enumerate((4, 2, 3))]
    return Trace(table, kernels)


def test_timeline_of_a_million_events_draws_capped_lanes(big_trace):
    n_blocks = len(set(big_trace.events.columns["block"][
        big_trace.events.columns["kernel"] == 0].tolist()) - {-1})
    assert n_blocks > 4096
    fig = tl.plot_timeline(big_trace, kernel=0)
    assert len(fig.lanes) == 64  # 16 blocks of 4 threads
    assert len({b for _, b, _, _ in fig.lanes}) == 16
    shown = np.isin(big_trace.events.columns["block"],
                    [big_trace.events.blocks.index(b) for _, b, _, _ in fig.lanes])
    begins = tl.thread_holds(big_trace.events, shown)["begin"].tolist()
    assert bars_per_lane(fig) == holds_per_lane(big_trace, 0, fig.lanes, begins)
    assert "16 of 8333 blocks shown" in "\n".join(t.get_text() for t in fig.texts)
    figure_png(fig)


# -- plot_memory


def test_memory_marks_the_budget_peak(sequential):
    (bb, *_rest) = [b for b in block_budgets(sequential.events, sequential.kernels)
                    if b.block is not None]
    fig = tl.plot_memory(sequential)
    (peak,) = _artists(fig, "smem-peak")
    assert [tuple(map(int, xy)) for xy in peak.get_offsets()] == [(bb.smem.step,
                                                                   bb.smem.peak)]
    assert bb.smem.peak == 192 * 1024  # two nested scopes, never the consecutive ones
    (limit,) = _artists(fig, "smem-limit")
    assert list(limit.get_ydata()) == [H100_SMEM, H100_SMEM]
    (worst,) = _artists(fig, "smem-worst")
    ys = np.concatenate([s[:, 1] for s in worst.get_segments()])
    assert ys.max() == bb.smem.peak
    (others,) = _artists(fig, "smem-curves")
    assert len(others.get_segments()) == 1  # the other block
    (label,) = [t for t in fig.texts if t.get_gid() == "smem-peak-label"]
    line = {x.source.line for x in bb.smem.live}
    assert f"at step {bb.smem.step}, line {min(line)}" in label.get_text()
    assert "192.0 KiB (85 % of the limit)" in label.get_text()
    assert not _artists(fig, "tmem-limit")
    figure_png(fig)


def test_memory_over_budget_and_other_devices():
    fn, args = bex.smem_over_budget()
    with pv.trace() as tr:
        fn(*args)
    fig = tl.plot_memory(tr)
    (label,) = [t for t in fig.texts if t.get_gid() == "smem-peak-label"]
    assert "228.0 KiB (100 % of the limit)" in label.get_text()
    (peak,) = _artists(fig, "smem-peak")
    assert peak.get_offsets()[0][1] == 228 * 1024 > H100_SMEM
    fig = tl.plot_memory(tr, device="sm120")
    (limit,) = _artists(fig, "smem-limit")
    assert list(limit.get_ydata()) == [99 * 1024] * 2


def test_memory_tmem_panel(tmem_trace):
    (bb, *_r) = [b for b in block_budgets(tmem_trace.events, tmem_trace.kernels, "b200")
                 if b.block is not None]
    fig = tl.plot_memory(tmem_trace, device="b200")
    (peak,) = _artists(fig, "tmem-peak")
    assert [tuple(map(int, xy)) for xy in peak.get_offsets()] == [(bb.tmem.step, 192)]
    (limit,) = _artists(fig, "tmem-limit")
    assert list(limit.get_ydata()) == [512, 512]
    # SMEM: only the 4-byte TMEM address slot, held all run long: no peak to mark
    assert bb.smem.peak == 4 and bb.smem.step == -1 and not _artists(fig, "smem-peak")
    labels = [t.get_text() for t in fig.texts if t.get_gid() == "smem-peak-label"]
    assert labels == ["4 B held all run long, the TMEM address slot"]
    assert "h100 has no TMEM" in "\n".join(
        t.get_text() for ax in tl.plot_memory(tmem_trace).axes for t in ax.texts)


def test_memory_of_kernel_level_scratch_only():
    from pallas_viz.examples.budget import pallas_call_scratch

    f, args = pallas_call_scratch()
    with pv.trace() as tr:
        f(*args)
    fig = tl.plot_memory(tr)
    (peak,) = _artists(fig, "smem-peak")
    assert peak.get_offsets()[0][1] == 3 * 4096
    assert any("kernel-level allocations only" in t.get_text() for t in fig.texts)
    figure_png(fig)


def test_memory_of_a_million_events_draws_capped_blocks(big_trace):
    fig = tl.plot_memory(big_trace, kernel=0, max_blocks=64)
    (others,) = _artists(fig, "smem-curves")
    assert len(others.get_segments()) == 63
    (bb, *_r) = block_budgets(big_trace.events, big_trace.kernels[:1])
    (peak,) = _artists(fig, "smem-peak")
    assert [tuple(map(int, xy)) for xy in peak.get_offsets()] == [(bb.smem.step,
                                                                   bb.smem.peak)]
    figure_png(fig)


# -- the real warp-specialised Hopper matmul


@pytest.mark.slow
def test_hopper_matmul_timeline_and_memory(hopper):
    fig = tl.plot_timeline(hopper)
    assert len(fig.lanes) == 24  # 8 blocks x 3 warpgroups
    assert bars_per_lane(fig) == holds_per_lane(hopper, 0, fig.lanes)
    # a compute warpgroup of block (0, 0) holds the 3 buffers, 4 + 2 barriers, its
    # accumulator
    kinds = collections.Counter()
    for kind in tl.KIND_COLORS:
        for coll in _artists(fig, f"bars-{kind}"):
            kinds[kind] += len(coll.get_paths())
    assert kinds["REGS"] == 2 * 2 and kinds["SMEM"] == 8 * 3 * 3
    assert fig.axes[0].get_yticklabels()[0].get_text() == "(0, 0) wg 0"
    figure_png(fig)
    bbs = [b for b in block_budgets(hopper.events, hopper.kernels) if b.block]
    worst = max(bbs, key=lambda b: b.smem.peak)
    fig = tl.plot_memory(hopper)
    (peak,) = _artists(fig, "smem-peak")
    assert [tuple(map(int, xy)) for xy in peak.get_offsets()] == [(worst.smem.step,
                                                                   131104)]
    (label,) = [t for t in fig.texts if t.get_gid() == "smem-peak-label"]
    assert "line 141 (" in label.get_text() and "hopper_matmul_mgpu.py" in label.get_text()
    figure_png(fig)
