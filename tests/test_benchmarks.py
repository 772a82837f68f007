"""A tiny run of the benchmark script keeps it working (no timing assertions)."""

from __future__ import annotations

import json
import math

import numpy as np

from benchmarks import run
from benchmarks.synthetic import synthetic_barrier_ops, synthetic_table
from pallas_viz.analysis import PROCESSORS
from pallas_viz.recorder import BarrierOp, Recorder


def _positive_finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def _module(*argv: str, timeout: float = 600):
    """`python -m benchmarks.<argv>` from the repository's root: the finished process."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run([sys.executable, "-m", *argv], cwd=root,
                          env={**os.environ, "PYTHONPATH": root}, capture_output=True,
                          text=True, timeout=timeout)


def test_tiny_run_writes_well_formed_results(tmp_path):
    run.main(["--tiny", "--out", str(tmp_path)])
    res = json.loads((tmp_path / "results.json").read_text())
    assert (tmp_path / "RESULTS.md").read_text().startswith("# pallas_viz benchmarks")
    assert (tmp_path / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert res["profile"] == "tiny"
    g = res["ingest"]
    for key in ("record_events_per_s", "from_records_events_per_s", "ingest_events_per_s",
                "bytes_per_event", "column_bytes_per_event", "barrier_op_per_s",
                "barrier_ops_json_per_s"):
        assert _positive_finite(g[key]), key
    assert len(res["analysis"]) >= 2
    for row in res["analysis"]:
        assert row["events"] > 0 and _positive_finite(row["seconds"])
        assert _positive_finite(row["peak_bytes"])
        assert {"partial_collective", "leak"} <= set(row["findings"])
    assert res["kernels"], "the tiny run measures the smallest real kernel"
    for k in res["kernels"]:
        for key in ("untraced_s", "pallas_viz_s", "jax_logging_s", "pallas_viz_ratio",
                    "jax_logging_ratio"):
            assert _positive_finite(k[key]), key
        assert k["events"] > 0 and k["jax_log_lines"] > 0
        # the smallest kernel waits on barriers: they count as events
        assert k["barrier_ops"] > 0 and k["requests"] == k["events"] + k["barrier_ops"]
        assert _positive_finite(k["interpreter_us_per_request"])
        assert math.isfinite(k["us_per_event"]) and math.isfinite(k["us_per_event_paired"])
    pr = res["processors"]
    assert list(pr["seconds"]) == [p.__name__ for p in PROCESSORS] + ["fold_root_causes"]
    assert all(math.isfinite(v) and v >= 0 for v in pr["seconds"].values())
    real, small = res["breakdown"]  # the smallest real kernel, one small re-traced one
    assert real["finish_s"] > 0 and real["events"] > 0 and real["barrier_ops"] > 0
    assert small["kernel"].startswith("small") and small["events"] > 0
    pl = res["plugin"]
    assert pl["measured"] and pl["clean"], pl.get("problems")
    assert pl["tests"] == pl["timed_tests"] >= 2 and pl["findings"] == 0
    assert _positive_finite(pl["protocol"]["ratio"]) and _positive_finite(pl["call"]["ratio"])
    p = res["payload"]
    if p["measured"]:
        assert _positive_finite(p["bytes_per_event"]) and _positive_finite(p["build_s"])
    assert res["browser"]["measured"] is False
    mk = res["many_kernels"]
    assert [r["kernels"] for r in mk["rows"]] == [10, 40] and mk["size_growth"] == 4
    assert all(_positive_finite(mk["growth"][v]) for v in ("load", "html", "perfetto", "diff"))
    assert "## 8. Views of a trace of many kernel runs" in (tmp_path / "RESULTS.md").read_text()
    (gcr,) = res["gc"]  # the smallest real kernel, one run a block
    assert gcr["runs"] == 1 and set(gcr["modes"]) == {"untraced", "traced"}
    for m in gcr["modes"].values():
        assert len(m["collections"]) == len(m["ms"]) == 3
        assert all(c >= 0 and t >= 0 for c, t in zip(m["collections"], m["ms"]))
    assert f"| {gcr['kernel']} | 2 |" in (tmp_path / "RESULTS.md").read_text()


def test_synthetic_table_is_consistent():
    t = synthetic_table(5_000)
    c = t.columns
    assert 4_000 <= len(t) <= 6_000
    # every event's thread_seq is its position in its (kernel, device, block, thread, warp)
    seen: dict = {}
    for i in range(len(t)):
        key = (int(c["kernel"][i]), int(c["device"][i]), int(c["block"][i]),
               int(c["thread"][i]), int(c["warp"][i]))
        assert c["thread_seq"][i] == seen.get(key, 0)
        seen[key] = seen.get(key, 0) + 1
    # each lifetime is created exactly once
    creates = c["allocation"][c["op"] == 0]
    assert len(np.unique(creates)) == len(creates) == len(np.unique(c["allocation"]))


def test_synthetic_barrier_ops_feed_the_recorder():
    ops = synthetic_barrier_ops(1_000)
    assert len(ops) == 1_000 and all(len(a) == len(BarrierOp._fields) - 1 for a in ops)
    r = Recorder()
    for a in ops:
        r.barrier_op(*a)
    out = r.barrier_ops_json(lambda s: None)
    assert [d["op"] for d in out[:3]] == ["arrive", "wait", "waited"]
    assert {d["phase"] for d in out} == set(range(8))


def test_pinned_harness_measures_a_kernel_on_one_core():
    """`python -m benchmarks.pinned` pins itself before JAX starts and reports the ratio;
    it refuses the kernel that does not finish pinned."""
    import re

    out = _module("benchmarks.pinned", "ragged_dot", "2")
    assert out.returncode == 0, out.stderr
    m = re.search(r"ragged_dot .* pinned to one core, 2 interleaved repetitions: untraced "
                  r"([\d.]+) ms .* traced / untraced ([\d.]+) \[([\d.]+), ([\d.]+)\]", out.stdout)
    assert m, out.stdout
    untraced, ratio, lo, hi = map(float, m.groups())
    assert untraced > 0 and lo <= ratio <= hi and ratio > 0.5
    refused = _module("benchmarks.pinned", "blackwell_matmul", timeout=60)
    assert refused.returncode == 2 and "does not finish pinned" in refused.stderr


def test_hook_profile_times_every_hook_of_a_real_run():
    """`python -m benchmarks.hook_profile` times each hook inside a real kernel's run: the
    allocation and free hooks are called once per allocation event the trace records, each
    hook's self time is positive (its timer encloses the original's), a pass-through control
    on the interpreter's other methods is timed the same way, and it refuses the
    kernel that does not finish pinned and a name that is no kernel."""
    import re

    out = _module("benchmarks.hook_profile", "--cpu", "ragged_dot", "1")
    assert out.returncode == 0, out.stderr
    head = re.search(r"ragged_dot .* pinned to one core, 1 traced runs \(median [\d.]+ ms, "
                     r"(\d+) allocation events a run\); the hooks' self time, cpu clock:",
                     out.stdout)
    assert head, out.stdout
    rows = {m[1]: (float(m[2]), float(m[3]), float(m[4])) for m in re.finditer(
        r"^(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", out.stdout, re.M)}
    requests = ("allocate_buffer", "deallocate_buffer", "allocate_barrier", "deallocate_barrier")
    assert sum(rows[n][0] for n in requests) == int(head[1]) > 0
    assert "Barrier.arrive" in rows and "Barrier.wait" in rows
    assert all(us > 0 and ms > 0 for _, us, ms in rows.values())
    total = float(re.search(r"all hooks: ([\d.]+) ms a run", out.stdout)[1])
    assert abs(total - sum(ms for _, _, ms in rows.values())) < 0.01 * len(rows)
    control = re.search(r"control: .* \(([\d.]+) calls a run\), timed the same way: ([\d.]+) us a "
                        r"call", out.stdout)
    assert control and float(control[1]) > 0 and float(control[2]) > 0, out.stdout
    for argv, why in ((["blackwell_matmul"], "does not finish pinned"),
                      (["no_such_kernel"], "names no kernel")):
        refused = _module("benchmarks.hook_profile", *argv, timeout=120)
        assert refused.returncode == 2 and why in refused.stderr


def test_instruction_totals_are_read_from_a_real_callgrind_file(tmp_path):
    """`benchmarks.instructions` reads callgrind's own total (a real run of a tiny program),
    and refuses a file without one."""
    import shutil
    import subprocess

    import pytest

    from benchmarks import instructions

    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed")
    out = tmp_path / "callgrind.out"
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "/bin/true"],
                   check=True, capture_output=True)
    total = instructions._total(str(out))
    assert isinstance(total, int) and 10_000 < total < 100_000_000, total
    bad = tmp_path / "empty.out"
    bad.write_text("events: Ir\n")
    with pytest.raises(RuntimeError, match="no totals"):
        instructions._total(str(bad))
    # its modes are the ablation's, each a part of the cost over the one before it
    from benchmarks import ablation

    assert set(instructions.MODES) == set(ablation.MODES)
    assert list(instructions.PARTS) == list(instructions.MODES[1:])
    refused = _module("benchmarks.instructions", "no_such_kernel", timeout=120)
    assert refused.returncode == 2 and "no kernel named 'no_such_kernel'" in refused.stderr


def test_gc_cost_counts_the_collections_of_untraced_and_traced_runs():
    """`python -m benchmarks.gc_cost` runs a real kernel untraced and traced, two blocks of
    runs each without a `gc.collect()` between runs, and reports the collections of each
    generation per run with their time; it refuses a name that is no kernel."""
    import re

    out = _module("benchmarks.gc_cost", "ragged_dot", "2")
    assert out.returncode == 0, out.stderr
    assert re.search(r"ragged_dot .*: 4 runs of each mode \(two blocks of 2\)", out.stdout)
    rows = {}
    for m in re.finditer(r"^(untraced|traced)\s+((?:[\d.]+\s+[\d.]+ms\s+){3})([\d.]+)$",
                         out.stdout, re.M):
        cells = re.findall(r"([\d.]+)\s+([\d.]+)ms", m[2])
        rows[m[1]] = ([float(c) for c, _ in cells], [float(t) for _, t in cells], float(m[3]))
    assert set(rows) == {"untraced", "traced"}, out.stdout
    for counts, ms, total in rows.values():
        assert all(c >= 0 for c in counts) and all(t >= 0 for t in ms)
        assert all(t > 0 for c, t in zip(counts, ms) if c > 0)  # a collection takes time
        assert abs(sum(ms) - total) < 0.02
    added = float(re.search(r"traced - untraced: (-?[\d.]+) ms a run", out.stdout)[1])
    assert abs(added - (rows["traced"][2] - rows["untraced"][2])) < 0.02
    refused = _module("benchmarks.gc_cost", "no_such_kernel", timeout=60)
    assert refused.returncode == 2 and "no kernel named" in refused.stderr


def test_ablation_switches_parts_off_and_restores_them():
    """`benchmarks.ablation` runs a real kernel traced with parts switched off: the modes
    with wrappers record the requests, those without record none; every part is back in
    place afterwards (a trace after it records and builds as usual); its command line
    prints the table and refuses a name that is no kernel."""
    import re

    import pallas_viz as pv
    from benchmarks import ablation, kernels
    from pallas_viz import capture
    from pallas_viz._jax import hooks, monitor

    before = {(c, n): c.__dict__[n] for c in (hooks._Hooks, monitor.BarrierWaits,
                                             capture.trace) for n in vars(c)
              if n.startswith("_wrap_") or n in ("install", "_finish")}
    k = kernels.smallest_kernel()
    r = ablation.ablate(k, 2)
    assert set(r["modes"]) == set(ablation.MODES) - {"untraced"}
    for m, v in r["modes"].items():
        assert v["ci"][0] <= v["added_ms"] <= v["ci"][1], (m, v)
        assert v["ratio"] > 0
    recorded = {m: v["recorded"] for m, v in r["modes"].items()}
    assert recorded["traced"] > 0 and recorded["no_build"] == recorded["traced"], recorded
    assert recorded["pass_through"] == 0 and recorded["no_hooks"] == 0, recorded
    after = {(c, n): c.__dict__[n] for (c, n) in before}
    assert after == before
    with kernels.interpret_context(k), pv.trace() as tr:
        k()
    assert len(tr.events) == recorded["traced"] and tr.findings == []

    out = _module("benchmarks.ablation", "ragged_dot", "2")
    assert out.returncode == 0, out.stderr
    assert re.search(r"ragged_dot .*: 2 repetitions, untraced median [\d.]+ ms", out.stdout)
    rows = dict(re.findall(r"^(traced|no_build|pass_through|no_hooks)\s+(-?[\d.]+)\s+\[",
                           out.stdout, re.M))
    assert set(rows) == set(ablation.MODES) - {"untraced"}, out.stdout
    refused = _module("benchmarks.ablation", "no_such_kernel", timeout=60)
    assert refused.returncode == 2 and "no kernel named" in refused.stderr
