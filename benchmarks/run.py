"""Run every pallas_viz benchmark and write results.json, RESULTS.md and scaling.png.

    .venv/bin/python -m benchmarks.run            # full run (several minutes)
    .venv/bin/python -m benchmarks.run --quick    # fewer repetitions, smaller sizes
    .venv/bin/python -m benchmarks.run --tiny     # seconds; what tests/test_benchmarks.py runs

Options: `--out DIR` (default: this directory), `--skip-kernels`, `--skip-plugin`,
`--skip-browser`.

Ratios are measured side by side in one process: the modes of a kernel run
interleaved (the order rotates every repetition) and the reported ratio is the median
of the per-repetition ratios. Absolute times are reported too, but this machine is
noisy: rely on the ratios.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
import tracemalloc

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

PROFILES = {
    # reps: the fewest repetitions of each kernel's group of modes; kernel_budget_s: more
    # repetitions for short kernels, until the group's runs take about that many seconds
    # (at most max_reps); sizes: synthetic analysis sizes
    # processors: synthetic events the per-processor analysis times use; breakdown_reps:
    # instrumented runs per real kernel (post-run share of the overhead), breakdown_small:
    # how many small re-traced kernels of the plugin suite get the same (with
    # breakdown_small_reps runs); plugin_calls:
    # tests per small kernel of the plugin suite (31 kernels), plugin_rounds: interleaved
    # plain / --pallas-viz runs of it (plugin_cases: a subset, for the tiny run)
    "full": dict(kernels="all", reps=11, kernel_budget_s=60, max_reps=151,
                 ingest=300_000, ingest_reps=5,
                 sizes=[10_000, 100_000, 1_000_000], analysis_reps=3, payload=1_000_000,
                 processors=1_000_000, processors_reps=5, breakdown_reps=9, breakdown_small=3,
                 breakdown_small_reps=31,
                 plugin_calls=4, plugin_rounds=7, many_kernels=[500, 4000], many_kernels_reps=3,
                 gc_runs=15, browser=1_000_000, browser_reps=5),
    "quick": dict(kernels="all", reps=3, kernel_budget_s=10, max_reps=31,
                  ingest=100_000, ingest_reps=3,
                  sizes=[10_000, 100_000, 1_000_000], analysis_reps=2, payload=1_000_000,
                  processors=1_000_000, processors_reps=2, breakdown_reps=3, breakdown_small=3,
                  breakdown_small_reps=9,
                  plugin_calls=4, plugin_rounds=3, many_kernels=[250, 1000],
                  many_kernels_reps=2, gc_runs=5,
                  browser=1_000_000, browser_reps=3),
    "tiny": dict(kernels="smallest", reps=2, kernel_budget_s=0, max_reps=2,
                 ingest=5_000, ingest_reps=2,
                 sizes=[1_000, 10_000], analysis_reps=1, payload=10_000,
                 processors=10_000, processors_reps=1, breakdown_reps=1, breakdown_small=1,
                 breakdown_small_reps=1,
                 plugin_calls=1, plugin_rounds=1, many_kernels=[10, 40], many_kernels_reps=1,
                 gc_runs=1,
                 plugin_cases=([("hoisted_collective", (1,))], [("plain_copy", "pallas_call")]),
                 browser=None, browser_reps=1),
}

TARGETS = {
    "overhead_ratio": 1.02,
    "plugin_per_test_ratio": 1.02,
    "ingest_events_per_s": 1_000_000,
    "bytes_per_event": 64,
    "analysis_1m_s": 2.0,
    "payload_bytes_per_event": 40,
    "payload_build_s": 1.0,
    "first_paint_ms": 200,
    "click_to_source_ms": 50,
    "replay_step_ms": 16,
    "timeline_first_paint_ms": 200,
}


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def median(xs):
    return float(statistics.median(xs)) if xs else float("nan")


def median_ci(xs, conf: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval of the median: two order statistics.

    The narrowest [x_(j), x_(n+1-j)] whose coverage, from the Binomial(n, 1/2) count of
    samples below the median, is at least `conf`; (min, max) when n is too small.
    """
    xs = sorted(xs)
    n = len(xs)
    if n == 0:
        return float("nan"), float("nan")
    cdf, j = 0.0, 0  # cdf = P(B <= j - 1); coverage of [x_(j+1), x_(n-j)] is 1 - 2 cdf
    while j < n // 2:
        nxt = cdf + math.comb(n, j) / 2 ** n
        if 1 - 2 * nxt < conf:
            break
        cdf, j = nxt, j + 1
    return float(xs[max(j - 1, 0)]), float(xs[min(n - j, n - 1)])


# ----------------------------------------------------------------------- 1+2. real kernels

class _LogSink:
    """Keeps JAX's SHARED_MEMORY log lines, as a user reading that log would."""

    def __init__(self):
        import logging

        from pallas_viz._jax import SHARED_MEMORY_LOGGER

        self.logger = logging.getLogger(SHARED_MEMORY_LOGGER)
        self.lines = 0
        sink = self

        class _H(logging.Handler):
            def emit(self, record):
                record.getMessage()
                sink.lines += 1

        self.handler = _H(logging.INFO)

    def __enter__(self):
        import logging

        self.old = self.logger.level, self.logger.propagate
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False
        self.logger.addHandler(self.handler)
        return self

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.old[0])
        self.logger.propagate = self.old[1]


def _run_mode(kernel, mode: str) -> tuple[float, dict]:
    """One run of `kernel` in `mode` ("untraced", "pallas_viz", "jax_logging"): seconds."""
    import pallas_viz as pv
    from benchmarks.kernels import interpret_context

    info: dict = {}
    t0 = time.perf_counter()
    if mode == "untraced":
        with interpret_context(kernel):
            kernel()
    elif mode == "pallas_viz":
        with interpret_context(kernel), pv.trace() as tr:
            kernel()
        info = {"events": len(tr.events), "findings": len(tr.findings),
                "barrier_ops": len(tr.meta.get("barrier_ops") or [])}
    elif mode == "jax_logging":
        with interpret_context(kernel, logging=True), _LogSink() as sink:
            kernel()
        info = {"log_lines": sink.lines}
    else:
        raise ValueError(mode)
    return time.perf_counter() - t0, info


def empty_trace_cost(reps: int = 21) -> dict:
    """Seconds of a `pv.trace()` block around nothing: the fixed cost of every trace."""
    import pallas_viz as pv

    with pv.trace():
        pass
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        with pv.trace():
            pass
        times.append(time.perf_counter() - t0)
    log(f"empty pv.trace() block: {median(times) * 1e3:.2f} ms")
    return {"seconds": median(times), "times": times}


# --wait-quiet: groups of runs during which other processes used more CPU cores than this
# are discarded (and run again), until a part's time allowance is used up
QUIET = {"cores": None}


class QuietGate:
    """Keeps a group of runs unless other processes were busy while it ran (`QUIET`);
    after `allowance_s` it keeps everything."""

    def __init__(self, allowance_s: float):
        self.deadline = time.perf_counter() + allowance_s
        self.discarded = 0

    def keep(self, others: float | None) -> bool:
        limit = QUIET["cores"]
        if (limit is None or others is None or others <= limit
                or time.perf_counter() > self.deadline):
            return True
        self.discarded += 1
        return False


def profile_kernels(profile: dict) -> list:
    """The real kernels a profile measures: all of them, or the smallest (the tiny run)."""
    from benchmarks import kernels as kmod

    return kmod.all_kernels() if profile["kernels"] == "all" else [kmod.smallest_kernel()]


def kernel_reps(profile: dict, seconds_per_group: float) -> int:
    """Repetitions for a kernel whose group of modes takes `seconds_per_group`."""
    budget = profile.get("kernel_budget_s", 0)
    n = round(budget / seconds_per_group) if seconds_per_group > 0 else 0
    n = max(profile["reps"], min(profile.get("max_reps", profile["reps"]), n))
    return n | 1  # odd: the median is one repetition's ratio


def _ratios(num, den) -> dict:
    r = [a / b for a, b in zip(num, den)]
    lo, hi = median_ci(r)
    return {"ratio": median(r), "ci": [lo, hi], "ratios": r}


def bench_kernels(profile: dict) -> list[dict]:

    ks = profile_kernels(profile)
    modes = ("untraced", "pallas_viz", "jax_logging")
    out = []
    for k in ks:
        log(f"kernel {k.name}: warm-up (compiles each mode)")
        for m in modes:  # compile and warm every mode first
            _run_mode(k, m)
        t0 = time.perf_counter()  # one warm group, to size the run
        gc.collect()
        for m in modes:
            _run_mode(k, m)
        reps = kernel_reps(profile, time.perf_counter() - t0)
        times = {m: [] for m in modes}
        infos: dict = {}
        others = []  # CPU cores other processes used during each kept group
        gate = QuietGate(max(3 * reps * (time.perf_counter() - t0), 60))
        attempt = 0
        while len(others) < reps:
            rot = attempt % len(modes)
            order = modes[rot:] + modes[:rot]  # rotate the order
            attempt += 1
            gc.collect()  # once per group (a full collection takes ~0.1 s with JAX loaded)
            watch = CpuWatch().start()
            group = [(m, *_run_mode(k, m)) for m in order]
            o = watch.others()
            if not gate.keep(o):
                continue
            for m, dt, info in group:
                times[m].append(dt)
                infos.setdefault(m, []).append(info)
            others.append(o)
        base = times["untraced"]
        pv, jl = _ratios(times["pallas_viz"], base), _ratios(times["jax_logging"], base)
        vs = _ratios(times["pallas_viz"], times["jax_logging"])
        row = {
            "kernel": k.name,
            "reps": reps,
            "untraced_s": median(base),
            "pallas_viz_s": median(times["pallas_viz"]),
            "jax_logging_s": median(times["jax_logging"]),
            "pallas_viz_ratio": pv["ratio"],
            "pallas_viz_ratio_ci": pv["ci"],
            "jax_logging_ratio": jl["ratio"],
            "jax_logging_ratio_ci": jl["ci"],
            "pallas_viz_vs_jax_logging": vs["ratio"],
            "pallas_viz_vs_jax_logging_ci": vs["ci"],
            "pallas_viz_ratios": pv["ratios"],
            "jax_logging_ratios": jl["ratios"],
            "times": times,
            "events": infos["pallas_viz"][0].get("events", 0),
            "findings_per_rep": [i.get("findings", 0) for i in infos["pallas_viz"]],
            "other_cpu_cores_per_rep": others,
            "discarded_busy_groups": gate.discarded,
            "jax_log_lines": infos["jax_logging"][0].get("log_lines", 0),
        }
        # per event: what tracing adds, and what the interpreter itself spends, per
        # request it serves (allocation events + barrier operations recorded)
        bops = [i.get("barrier_ops", 0) for i in infos["pallas_viz"]]
        row["barrier_ops"] = bops[0]
        row["barrier_ops_per_rep"] = sorted(set(bops))
        requests = max(row["events"] + row["barrier_ops"], 1)
        row["requests"] = requests
        row["added_s"] = row["pallas_viz_s"] - row["untraced_s"]
        row["us_per_event"] = 1e6 * row["added_s"] / requests
        row["interpreter_us_per_request"] = 1e6 * row["untraced_s"] / requests
        diffs = [a - b for a, b in zip(times["pallas_viz"], base)]
        lo, hi = median_ci(diffs)
        row["us_per_event_paired"] = 1e6 * median(diffs) / requests
        row["us_per_event_paired_ci"] = [1e6 * lo / requests, 1e6 * hi / requests]
        row["meets_target"] = row["pallas_viz_ratio"] <= TARGETS["overhead_ratio"]
        row["meets_target_ci"] = pv["ci"][1] <= TARGETS["overhead_ratio"]
        row["below_jax_logging"] = row["pallas_viz_vs_jax_logging"] < 1
        row["below_jax_logging_ci"] = vs["ci"][1] < 1
        log(f"  {reps} reps: untraced {row['untraced_s']:.3f}s  pallas_viz "
            f"x{pv['ratio']:.3f} [{pv['ci'][0]:.3f}, {pv['ci'][1]:.3f}]  jax_logging "
            f"x{jl['ratio']:.3f} [{jl['ci'][0]:.3f}, {jl['ci'][1]:.3f}]  pallas_viz/jax "
            f"x{vs['ratio']:.3f}  ({row['events']} events, {row['barrier_ops']} barrier "
            f"ops: +{row['us_per_event']:.1f} us/event, interpreter "
            f"{row['interpreter_us_per_request']:.1f} us/request)")
        out.append(row)
    return out


# ----------------------------------------------------------------------- 3. ingest

def bench_ingest(profile: dict) -> dict:
    from benchmarks.synthetic import (
        SOURCES,
        synthetic_barrier_ops,
        synthetic_records,
        synthetic_table,
    )
    from pallas_viz.recorder import Recorder
    from pallas_viz.store import EventTable

    n = profile["ingest"]
    recs = synthetic_records(n)
    n = len(recs)
    bops = synthetic_barrier_ops(n)
    nb = len(bops)
    rec_rates, build_rates, total_rates = [], [], []
    bop_rates, bop_json_rates = [], []
    table = None
    where = SOURCES[0]
    for rep in range(profile["ingest_reps"]):
        for part in (("alloc", "barrier") if rep % 2 == 0 else ("barrier", "alloc")):
            r = Recorder()
            gc.collect()
            if part == "alloc":
                record = r.record
                t0 = time.perf_counter()
                for a in recs:
                    record(*a)
                t1 = time.perf_counter()
                table = EventTable.from_records(r.rows(), lambda s: None)
                t2 = time.perf_counter()
                rec_rates.append(n / (t1 - t0))
                build_rates.append(n / (t2 - t1))
                total_rates.append(n / (t2 - t0))
            else:
                barrier_op = r.barrier_op
                t0 = time.perf_counter()
                for a in bops:
                    barrier_op(*a)
                t1 = time.perf_counter()
                # made JSON-able after the run (each source resolved: one location)
                r.barrier_ops_json(lambda s: where)
                t2 = time.perf_counter()
                bop_rates.append(nb / (t1 - t0))
                bop_json_rates.append(nb / (t2 - t1))
            del r
    col_bytes = sum(v.nbytes for v in table.columns.values())
    # the stored size per event of a large realistic table (columns + interned tables)
    big = synthetic_table(max(n, 100_000))
    big_cols = sum(v.nbytes for v in big.columns.values())
    tables = len(json.dumps([big.blocks, big.shapes, big.dtypes,
                             [s.to_dict() for s in big.sources]]))
    out = {
        "events": n,
        "reps": profile["ingest_reps"],
        "record_events_per_s": median(rec_rates),
        "from_records_events_per_s": median(build_rates),
        "ingest_events_per_s": median(total_rates),
        "record_rates": rec_rates,
        "barrier_ops": nb,
        "barrier_op_per_s": median(bop_rates),
        "barrier_op_rates": bop_rates,
        "barrier_ops_json_per_s": median(bop_json_rates),
        "column_bytes_per_event": col_bytes / n,
        "bytes_per_event": (big_cols + tables) / len(big),
        "bytes_per_event_events": len(big),
    }
    out["meets_rate_target"] = out["record_events_per_s"] >= TARGETS["ingest_events_per_s"]
    out["barrier_meets_rate_target"] = out["barrier_op_per_s"] >= TARGETS["ingest_events_per_s"]
    out["meets_bytes_target"] = out["bytes_per_event"] <= TARGETS["bytes_per_event"]
    log(f"ingest: record {out['record_events_per_s']:,.0f}/s, from_records "
        f"{out['from_records_events_per_s']:,.0f}/s, both {out['ingest_events_per_s']:,.0f}/s, "
        f"{out['bytes_per_event']:.1f} B/event; barrier_op {out['barrier_op_per_s']:,.0f}/s, "
        f"barrier_ops_json {out['barrier_ops_json_per_s']:,.0f}/s")
    return out


# ----------------------------------------------------------------------- 4. analysis scaling

def synthetic_kernels():
    from benchmarks.synthetic import KERNELS
    from pallas_viz.model import KernelInfo

    return [KernelInfo(i, f"synthetic{i}", None, 1, t, 2 if i == 0 else 1)
            for i, (t, *_rest) in enumerate(KERNELS)]


def bench_analysis(profile: dict) -> list[dict]:
    from benchmarks.synthetic import synthetic_table
    from pallas_viz.analysis import analyse

    kernels = synthetic_kernels()
    out = []
    for n in profile["sizes"]:
        table = synthetic_table(n)
        analyse(table, kernels)  # warm
        times = []
        for _ in range(profile["analysis_reps"]):
            gc.collect()
            t0 = time.perf_counter()
            findings = analyse(table, kernels)
            times.append(time.perf_counter() - t0)
        gc.collect()
        tracemalloc.start()
        analyse(table, kernels)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        row = {
            "events": len(table),
            "blocks": len(table.blocks),
            "seconds": median(times),
            "times": times,
            "peak_bytes": peak,
            "table_bytes": sum(v.nbytes for v in table.columns.values()),
            "findings": sorted({f.kind for f in findings}),
            "num_findings": len(findings),
        }
        log(f"analysis {len(table):>9,} events: {row['seconds']:.3f}s, peak "
            f"{peak / 2**20:.1f} MiB, findings {row['findings']}")
        out.append(row)
        del table
    return out


def bench_processors(profile: dict) -> dict:
    from benchmarks.costs import bench_processors as bench

    out = bench(profile["processors"], profile["processors_reps"])
    out["meets_target"] = out["total_s"] <= TARGETS["analysis_1m_s"] or out["events"] < 1e6
    log(f"processors at {out['events']:,} events: " + ", ".join(
        f"{k} {v * 1e3:.0f} ms" for k, v in out["seconds"].items()))
    return out


# ----------------------------------------------------------------------- where it goes

def bench_breakdown(profile: dict) -> list[dict]:
    from benchmarks.costs import bench_breakdown as bench
    from benchmarks.plugin import retraced_kernels

    ks = profile_kernels(profile)
    small = retraced_kernels(profile.get("breakdown_small", 0))
    out = []
    for k in ks + small:
        reps = profile["breakdown_small_reps"] if k in small else profile["breakdown_reps"]
        row = dict(bench(k, reps), kernel=k.name)
        log(f"breakdown {k.name}: +{row['added_s'] * 1e3:.1f} ms, of which after the run "
            f"{row['finish_s'] * 1e3:.1f} ms (analyses {row['analyses_s'] * 1e3:.1f} ms), "
            f"while it runs {row['in_run_s'] * 1e3:.1f} ms")
        out.append(row)
    return out


# ----------------------------------------------------------------------- pytest plugin

def bench_plugin_part(profile: dict) -> dict:
    from benchmarks.plugin import bench_plugin

    examples, shaped = profile.get("plugin_cases") or (None, None)
    out = bench_plugin(profile["plugin_calls"], profile["plugin_rounds"], examples, shaped,
                       log=log)
    out["measured"] = "protocol" in out
    if out["measured"]:
        p = out["protocol"]
        out["meets_target"] = p["ratio"] <= TARGETS["plugin_per_test_ratio"]
    return out


# ----------------------------------------------------------------------- 5. widget payload

def synthetic_trace(n: int):
    from benchmarks.synthetic import synthetic_table
    from pallas_viz.analysis import analyse
    from pallas_viz.trace import Trace

    table = synthetic_table(n)
    kernels = synthetic_kernels()
    return Trace(table, kernels, analyse(table, kernels))


def bench_payload(profile: dict, trace=None) -> dict:
    try:
        from pallas_viz.render import payload
    except ImportError as e:
        return {"measured": False, "reason": f"pallas_viz.render.payload missing ({e})"}
    trace = trace or synthetic_trace(profile["payload"])
    n = len(trace.events)
    times, state = [], None
    for _ in range(3):
        gc.collect()
        t0 = time.perf_counter()
        state = payload.build_state(trace)
        times.append(time.perf_counter() - t0)
    binary = payload.payload_nbytes(state)
    meta = len(json.dumps(state["meta"], separators=(",", ":")))
    out = {
        "measured": True,
        "events": n,
        "build_s": median(times),
        "times": times,
        "binary_bytes": binary,
        "meta_json_bytes": meta,
        "bytes_per_event": (binary + meta) / n,
    }
    out["meets_bytes_target"] = out["bytes_per_event"] <= TARGETS["payload_bytes_per_event"]
    out["meets_time_target"] = out["build_s"] <= TARGETS["payload_build_s"]
    log(f"payload {n:,} events: {out['bytes_per_event']:.1f} B/event, build {out['build_s']:.3f}s")
    return out


# ----------------------------------------------------------------------- 6. browser

def bench_browser_part(profile: dict, out_dir: str) -> dict:
    if profile.get("skip_browser"):
        return {"measured": False, "reason": "skipped (--skip-browser)"}
    if profile["browser"] is None:
        return {"measured": False, "reason": "skipped in this profile"}
    try:
        from benchmarks.browser import bench_browser
    except ImportError as e:
        return {"measured": False, "reason": f"benchmarks.browser unavailable ({e})"}
    return bench_browser(profile["browser"], profile["browser_reps"], out_dir)


# ----------------------------------------------------------------------- 7. outputs

def plot_scaling(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ev = [r["events"] for r in rows]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    a1.loglog(ev, [r["seconds"] for r in rows], "o-", label="analyse()")
    lo = rows[0]["seconds"] / rows[0]["events"]
    a1.loglog(ev, [lo * e for e in ev], "--", color="gray", label="linear from smallest")
    a1.axhline(TARGETS["analysis_1m_s"], color="red", lw=0.8, label="2 s target")
    a1.set_xlabel("events")
    a1.set_ylabel("seconds")
    a1.set_title("analysis time")
    a1.legend()
    a2.loglog(ev, [r["peak_bytes"] / 2**20 for r in rows], "o-", label="analysis peak")
    a2.loglog(ev, [r["table_bytes"] / 2**20 for r in rows], "s-", label="EventTable columns")
    a2.set_xlabel("events")
    a2.set_ylabel("MiB")
    a2.set_title("memory (tracemalloc)")
    a2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _fmt(x, spec=".3f"):
    if isinstance(x, float) and not math.isfinite(x):
        return "n/a"
    return format(x, spec)


def _ci(x, ci) -> str:
    return f"{_fmt(x)} [{_fmt(ci[0])}, {_fmt(ci[1])}]"


def _verdict(x, ci, bound: float, inclusive: bool) -> str:
    """Whether the median is below `bound`; "sure" when the whole interval agrees."""
    def below(v):
        return v <= bound if inclusive else v < bound

    meets = below(x)
    sure = below(ci[1]) if meets else not below(ci[0])
    return f"{_ok(meets)} ({'sure' if sure else 'within noise'})"


def _ok(flag) -> str:
    return "yes" if flag else "**no**"


def markdown(res: dict) -> str:
    lines = [f"# pallas_viz benchmarks ({res['profile']} run)", "",
         f"`{res['command']}` on {res['machine']['platform']}, Python "
         f"{res['machine']['python']}, JAX {res['machine']['jax']}, "
         f"{res['machine']['cpus']} CPUs, {res['started']}. Wall time {res['wall_s']:.0f} s."
         + _source_note(res.get("source")),
         f"Load average (1, 5, 15 min) at the start "
         f"{', '.join(f'{x:.2f}' for x in res.get('loadavg_start', []))}, at the end "
         f"{', '.join(f'{x:.2f}' for x in res.get('loadavg_end', []))}.",
         ] + _parts_note(res) + [
         "", "Ratios are medians of per-repetition ratios, modes interleaved in one process "
         "(order rotated each repetition). Absolute times are noisy; rely on the ratios.", ""]
    lines += ["## 1-2. Recording overhead on real kernels (interpret mode, jit-cached)", ""]
    if res["kernels"]:
        bound = TARGETS["overhead_ratio"]
        lines += ["| kernel | events | barrier ops | reps | untraced s | pallas_viz ÷ untraced | "
                  "JAX SHARED_MEMORY logging ÷ untraced | pallas_viz ÷ JAX logging | "
                  f"≤ {bound:g} | below JAX |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in res["kernels"]:
            target = _verdict(r["pallas_viz_ratio"], r["pallas_viz_ratio_ci"],
                              TARGETS["overhead_ratio"], True)
            below = _verdict(r["pallas_viz_vs_jax_logging"], r["pallas_viz_vs_jax_logging_ci"],
                             1.0, False)
            lines.append(
                f"| {r['kernel']} | {r['events']} | {r.get('barrier_ops', 'n/a')} | "
                f"{r['reps']} | {_fmt(r['untraced_s'])} | "
                f"{_ci(r['pallas_viz_ratio'], r['pallas_viz_ratio_ci'])} | "
                f"{_ci(r['jax_logging_ratio'], r['jax_logging_ratio_ci'])} | "
                f"{_ci(r['pallas_viz_vs_jax_logging'], r['pallas_viz_vs_jax_logging_ci'])} | "
                f"{target} | {below} |")
        lines += ["", "Each cell: the median of the per-repetition ratios and its 95% confidence "
              "interval (distribution-free, from order statistics; below 6 repetitions no "
              "interval reaches 95%, the range is shown). Short kernels get more "
              "repetitions (about "
              f"{res.get('kernel_budget_s', 0)} s of runs per kernel, at least "
              f"{res.get('min_reps', '?')}). The verdicts judge the median; \"sure\" when the "
              "whole interval agrees, \"within noise\" when it straddles the bound. "
              "pallas_viz includes the whole `pv.trace()` block (hooks, table build, "
              "analyses); JAX's logging includes formatting the log lines into a handler. "
              "A `pv.trace()` block around nothing costs "
              f"{res['empty_trace']['seconds'] * 1e3:.2f} ms (median of "
              f"{len(res['empty_trace']['times'])}): that fixed cost is in every pallas_viz "
              "ratio."]
        met = [r["kernel"] for r in res["kernels"] if r["meets_target"]]
        sure = [r["kernel"] for r in res["kernels"] if r["meets_target_ci"]]
        lines += ["", f"Target ≤ {bound:g} (median): met by {len(met)} of "
                  f"{len(res['kernels'])} kernels ({', '.join(met) or 'none'}); with the whole "
                  f"95% interval below it: {', '.join(sure) or 'none'}."]
        busy = []
        for r in res["kernels"]:
            o = [x for x in r.get("other_cpu_cores_per_rep") or [] if x is not None]
            if o:
                again = r.get("discarded_busy_groups", 0)
                busy.append(f"{r['kernel']} {median(o):.2f} ({sum(x > 0.3 for x in o)} of "
                            f"{len(o)} kept groups above 0.3"
                            + (f"; {again} groups run again" if again else "") + ")")
        if busy:
            lines += ["", "CPU cores other processes used during each repetition's group of "
                      "runs, median: " + "; ".join(busy) + ". With `--wait-quiet` a group "
                      "during which they used more than 0.3 cores is discarded and run again "
                      "(until three times the planned time is used up)."]
        lines += per_event_markdown(res)
    else:
        lines.append("not measured in this profile")
    g = res.get("ingest")
    lines += ["", "## 3. Recorder ingest (synthetic events, no JAX)", ""]
    if not g:
        g = None
        lines.append("not measured in this run")
    lines += [] if g is None else [
          "| figure | value | target | met |", "|---|---|---|---|",
          f"| `Recorder.record` events/s | {g['record_events_per_s']:,.0f} | ≥ 1,000,000 | "
          f"{_ok(g['meets_rate_target'])} |",
          f"| `Recorder.rows` + `EventTable.from_records` events/s | "
          f"{g['from_records_events_per_s']:,.0f} | | |",
          f"| record + rows + from_records events/s | {g['ingest_events_per_s']:,.0f} | | |",
          f"| stored bytes/event ({g['bytes_per_event_events']:,} events) | "
          f"{g['bytes_per_event']:.1f} | ≤ 64 | {_ok(g['meets_bytes_target'])} |"]
    if g is not None and "barrier_op_per_s" in g:
        lines += [f"| `Recorder.barrier_op` operations/s ({g['barrier_ops']:,} operations) | "
                  f"{g['barrier_op_per_s']:,.0f} | ≥ 1,000,000 | "
                  f"{_ok(g['barrier_meets_rate_target'])} |",
                  f"| `Recorder.barrier_ops_json` operations/s (after the run) | "
                  f"{g['barrier_ops_json_per_s']:,.0f} | | |",
                  "", f"{g['reps']} repetitions of each, the two interleaved (median). In µs "
                  f"per call: `record` {1e6 / g['record_events_per_s']:.2f}, `barrier_op` "
                  f"{1e6 / g['barrier_op_per_s']:.2f}; after the run, `rows` (numbering the "
                  "allocations) + `from_records` "
                  f"{1e6 / g['from_records_events_per_s']:.2f} per event and "
                  f"`barrier_ops_json` {1e6 / g['barrier_ops_json_per_s']:.2f} per operation. "
                  "Barrier operations are `synthetic.synthetic_barrier_ops` (a copy arrives, "
                  "two threads wait and see the wait end)."]
    lines += ["", "## 4. Analysis time and peak memory (synthetic)", "",
          "| events | blocks | analyse() s | µs/event | peak MiB (tracemalloc) | "
          "table MiB | findings |", "|---|---|---|---|---|---|---|"]
    for r in res.get("analysis") or []:
        lines.append(f"| {r['events']:,} | {r['blocks']:,} | {r['seconds']:.3f} | "
                 f"{1e6 * r['seconds'] / r['events']:.2f} | {r['peak_bytes'] / 2**20:.1f} | "
                 f"{r['table_bytes'] / 2**20:.1f} | {', '.join(r['findings'])} |")
    a = res.get("analysis_summary")
    lines += [] if not a else [
        "", f"Largest size {a['largest_events']:,} events in {a['largest_s']:.3f} s "
          f"(target ≤ 2 s at 1M: {_ok(a['meets_target'])}); time growth from the smallest to "
          f"the largest size per event-count growth: {a['time_growth_per_size_growth']:.2f} "
          "(1.0 = linear); memory: "
          f"{a['memory_growth_per_size_growth']:.2f}. Plot: `scaling.png`."]
    pr = res.get("processors")
    if pr:
        lines += ["", f"### Analysis time by processor ({pr['events']:,} synthetic events)", "",
                  "| processor | ms (median of " f"{pr['reps']}) | share |", "|---|---|---|"]
        for name, sec in pr["seconds"].items():
            lines.append(f"| `{name}` | {sec * 1e3:.1f} | "
                         f"{100 * sec / max(pr['total_s'], 1e-12):.0f} % |")
        lines.append(f"| total | {pr['total_s'] * 1e3:.1f} | |")
        lines += ["", "Each processor of `pallas_viz.analysis.PROCESSORS` in order (then "
                  "`fold_root_causes`) on a fresh `AnalysisContext` of "
                  f"`synthetic_table({pr['events']:,})` per repetition, as `analysis.run` "
                  "calls them: `analyse_budget` includes computing the per-block peaks "
                  "(`ctx.budgets`, cached after its first use). The synthetic table has no "
                  "barrier operations, so `analyse_barriers` only reads the allocation events "
                  f"({pr['roots']} root causes in the end)."]
    p = res.get("payload") or {"reason": "not run"}
    lines += ["", "## 5. Widget payload", ""]
    if p.get("measured"):
        lines += ["| figure | value | target | met |", "|---|---|---|---|",
              f"| bytes sent per event ({p['events']:,} events) | {p['bytes_per_event']:.1f} | "
              f"≤ 40 | {_ok(p['meets_bytes_target'])} |",
              f"| `build_state` seconds | {p['build_s']:.3f} | ≤ 1 | "
              f"{_ok(p['meets_time_target'])} |"]
    else:
        lines.append(f"not measured: {p.get('reason')}")
    b = res["browser"]
    lines += ["", "## 6. Front end in Chromium", ""]
    if b.get("measured"):
        lines += ["| figure | median ms | target | met |", "|---|---|---|---|"]
        for key, label in (("first_paint_ms", "first paint"),
                           ("click_to_source_ms", "click to source panel"),
                           ("replay_step_ms", "replay step"),
                           ("timeline_first_paint_ms", "timeline first paint"),
                           ("timeline_first_paint_one_block_ms",
                            "timeline first paint, all events in one block")):
            if key not in b:  # results from before it was measured
                continue
            target = TARGETS.get(key, TARGETS["timeline_first_paint_ms"])
            lines.append(f"| {label} | {_fmt(b[key], '.1f')} | ≤ {target} | "
                     f"{_ok(b[key] <= target)} |")
        lines += ["", b.get("notes", "")]
    else:
        lines.append(f"not measured: {b.get('reason')}")
    lines += plugin_markdown(res.get("plugin"))
    lines += many_kernels_markdown(res.get("many_kernels"))
    from benchmarks.gc_cost import markdown as gc_markdown

    lines += gc_markdown(res.get("gc"))
    return "\n".join(lines) + "\n"


def _parts_note(res: dict) -> list[str]:
    """When each part ran, and the CPU other processes used meanwhile."""
    parts = res.get("parts") or {}
    if not parts:
        return []
    out = []
    for name, m in parts.items():
        part = res.get(name)
        if m.get("not_run") or (isinstance(part, dict) and part.get("measured") is False):
            continue
        other = m.get("other_cpu_cores")
        busy = "" if other is None else f", others with its own Chromium {other:.2f} cores" if (
            m.get("others_include_own_chromium")) else (
            f", **other processes used {other:.2f} cores meanwhile**" if other > 0.3 else
            f", others {other:.2f} cores")
        reused = (f" (kept from the run of {m['reused_from']}"
                  + (f" at commit {m['commit']}" if m.get("commit") else "") + ")"
                  if m.get("reused_from") else "")
        out.append(f"{name} {m.get('started', '?')[11:16]}{busy}{reused}")
    head = ("Parts, measured in separate runs of this script (`--only` / `--reuse`) and "
            "assembled here" if any(m.get("reused_from") for m in parts.values())
            else "Parts")
    return ["", head + " (start time, CPU cores other processes used while each ran): "
            + "; ".join(out) + "."]


def _source_note(src: dict | None) -> str:
    if not src or not src.get("commit"):
        return ""
    note = f" Commit {src['commit']}"
    changed = src.get("pallas_viz_changed") or []
    if changed:
        note += (" with uncommitted changes to " + ", ".join(f"`{c}`" for c in changed)
                 + " (work in progress in the tree, measured as it stood)")
    return note + "."


def per_event_markdown(res: dict) -> list[str]:
    rows = [r for r in res["kernels"] if "us_per_event" in r]
    if not rows:
        return []
    lines = ["", "### Per-event cost beside the interpreter's own cost per request", "",
             "| kernel | allocation events | barrier ops | untraced ms | traced − untraced ms | "
             "added µs per event | interpreter µs per request | paired median µs per event "
             "[95% CI] |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['kernel']} | {r['events']} | {r['barrier_ops']} | "
            f"{r['untraced_s'] * 1e3:.1f} | {r['added_s'] * 1e3:.1f} | "
            f"{r['us_per_event']:.1f} | {r['interpreter_us_per_request']:.0f} | "
            f"{r['us_per_event_paired']:.1f} [{r['us_per_event_paired_ci'][0]:.1f}, "
            f"{r['us_per_event_paired_ci'][1]:.1f}] |")
    lines += ["", "Events: what one traced run records, allocation events (`len(tr.events)`) "
              "plus barrier operations (`len(tr.meta[\"barrier_ops\"])`: arrive, wait, "
              "waited). Added µs per event = (median traced − median untraced wall time) ÷ "
              "events; interpreter µs per request = median untraced wall time ÷ the same "
              "count (the interpreter does far more than serve these requests: loads, "
              "stores, copies, the XLA callbacks; it is the scale the recording is set "
              "against). The paired column is the median of the per-repetition differences "
              "traced − untraced, ÷ events, with its 95% interval. Both include the fixed cost "
              "of a `pv.trace()` block (entering, leaving, the analyses)."]
    bd = res.get("breakdown") or []
    if bd:
        by_kernel = {r["kernel"]: r for r in rows}
        lines += ["", "Where the added time goes. After the run: `pv.trace()`'s post-run steps, "
                  "timed by wrappers in a separate pass (untraced and traced runs "
                  "interleaved; medians; ms). During the run: the added time less the "
                  "after-the-run part, the added time being the paired median above (its "
                  "95% interval) for the real kernels, and that pass's own for the small "
                  "ones:", "",
                  "| kernel | added ms [95% CI] | after the run ms | table build | barrier "
                  "records | source lines (branch search) | analyses | snippets | during the "
                  "run (+ enter/exit) ms | µs per event during the run | µs per event after "
                  "it |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for b in bd:
            n = max(b["events"] + b["barrier_ops"], 1)
            k = by_kernel.get(b["kernel"])
            if k is not None:
                added = k["us_per_event_paired"] * k["requests"] / 1e3
                ci = [x * k["requests"] / 1e3 for x in k["us_per_event_paired_ci"]]
            else:
                added = b["added_s"] * 1e3
                ci = [x * 1e3 for x in b.get("added_ci", [math.nan, math.nan])]
            during = added - b["finish_s"] * 1e3
            lines.append(
                f"| {b['kernel']} | {added:.1f} [{ci[0]:.1f}, {ci[1]:.1f}] | "
                f"{b['finish_s'] * 1e3:.1f} | {b['from_records_s'] * 1e3:.2f} | "
                f"{(b['barrier_ops_json_s'] + b['thread_exits_json_s']) * 1e3:.2f} | "
                f"{b['source_location_s'] * 1e3:.2f} ({b['enclosing_branch_s'] * 1e3:.2f}) | "
                f"{b['analyses_s'] * 1e3:.2f} | {b['collect_snippets_s'] * 1e3:.2f} | "
                f"{during:.1f} | {1e3 * during / n:.1f} | "
                f"{1e6 * b['finish_s'] / n:.1f} |")
        reps = sorted({b["reps"] for b in bd})
        lines += ["", "After the run: `trace._finish` (table build `EventTable.from_records`, "
                  "barrier records `Recorder.barrier_ops_json` + `thread_exits_json`, the "
                  "analyses `analysis.run`, source snippets, the rest of `build_trace`; the "
                  "hooks' rows decoded and their allocations numbered, `Recorder.rows`, are "
                  "in the rest of `_finish`, and for each full batch of 64 requests in the "
                  "run instead). "
                  "Source lines: the time the table build and the barrier records spend "
                  "turning JAX `SourceInfo`s into lines (`_jax.source_location`, once per "
                  "distinct object per trace), in parentheses its search of the kernel's source "
                  "for the enclosing branch (`kernel_source.enclosing_branch`). During the "
                  "run: the hooks and the barrier monitor while the kernel runs (recorder "
                  "appends, locks, frame look-ups, the wait-for check) and entering/leaving "
                  "the block; on the real kernels it is within the noise of the wall times "
                  "(see the intervals). Repetitions of the timing pass: "
                  f"{', '.join(map(str, reps))}."]
        if any(b["kernel"].startswith("small") for b in bd):
            lines += ["", "Rows \"small, re-traced\": kernels of the plugin suite (section 7), "
                      "built afresh for every call as each test does, so JAX traces them again "
                      "every time (and pallas_viz's trace-time hook runs during the run); "
                      "their added time is what `pv.trace()` adds to one such test."]
        for b in bd:
            if b["finish_s"] > 0 and b["enclosing_branch_s"] > 0.5 * b["finish_s"]:
                lines += ["", f"{b['kernel']}: {b['enclosing_branch_s'] * 1e3:.1f} of its "
                          f"{b['finish_s'] * 1e3:.1f} ms after the run go to the branch search "
                          "behind the source lines (`kernel_source.enclosing_branch`, which "
                          "walks the enclosing kernel function's syntax tree again for each "
                          "distinct `SourceInfo` of every trace): a cost per trace and per "
                          "distinct line, not per event."]
    lines += gap_markdown(res)
    if res.get("breakdown_note"):
        lines += ["", res["breakdown_note"]]
    return lines


def gap_markdown(res: dict) -> list[str]:
    """For each real kernel over the overhead target: by how much, and where the excess
    is (the breakdown's after-the-run part, the rest during the run)."""
    bound = TARGETS["overhead_ratio"]
    bd = {b["kernel"]: b for b in res.get("breakdown") or []}
    out = []
    for r in res.get("kernels") or []:
        if r.get("meets_target") or "us_per_event_paired" not in r:
            continue
        added = r["us_per_event_paired"] * r["requests"] / 1e3
        allowed = (bound - 1) * r["untraced_s"] * 1e3
        text = (f"{r['kernel']}: ×{r['pallas_viz_ratio']:.3f}, over the target by "
                f"{r['pallas_viz_ratio'] - bound:.3f}: +{added:.1f} ms (paired median) where "
                f"{(bound - 1) * 100:.0f} % of its {r['untraced_s'] * 1e3:.0f} ms allows "
                f"{allowed:.1f} ms")
        b = bd.get(r["kernel"])
        if b is not None:
            fin = b["finish_s"] * 1e3
            text += (f"; after the run {fin:.1f} ms (analyses {b['analyses_s'] * 1e3:.1f}, "
                     f"table build {b['from_records_s'] * 1e3:.1f}, barrier records "
                     f"{(b['barrier_ops_json_s'] + b['thread_exits_json_s']) * 1e3:.1f}, "
                     f"snippets {b['collect_snippets_s'] * 1e3:.1f}), during the run about "
                     f"{added - fin:.1f} ms for {r['requests']} events and barrier operations; "
                     f"at this fixed cost a run of at least {fin / (bound - 1):.0f} ms would "
                     "meet the target with nothing added during the run")
        out.append(text + ".")
    if not out:
        return []
    return ["", f"Over the target ≤ {bound:g}:", ""] + [f"* {t}" for t in out]


def _summary_problems(p: dict) -> list[str]:
    return [x for x in p.get("problems", []) if x.startswith(("summary", "no pallas_viz"))]


def plugin_markdown(p: dict | None) -> list[str]:
    lines = ["", "## 7. pytest plugin: `pytest --pallas-viz` ÷ plain `pytest`, per test", ""]
    if not p or not p.get("measured"):
        reason = (p or {}).get("reason") or "not measured"
        if p and p.get("problems"):
            reason += ": " + "; ".join(p["problems"][:5])
        return lines + [reason]
    pt, call = p["protocol"], p["call"]
    bound = TARGETS["plugin_per_test_ratio"]
    lines += ["| figure | value | target | met |", "|---|---|---|---|",
              f"| per-test wall time ratio, median over {p['timed_tests']} tests [95% CI] | "
              f"{_ci(pt['ratio'], pt['ci'])} | ≤ {bound:g} | "
              f"{_verdict(pt['ratio'], pt['ci'], bound, True)} |",
              f"| per-test call phase ratio [95% CI] | {_ci(call['ratio'], call['ci'])} | | |",
              f"| added per test, ms [95% CI] (plain: {pt['plain_ms']:.1f} ms median) | "
              f"{pt['added_ms']:.2f} [{pt['added_ms_ci'][0]:.2f}, {pt['added_ms_ci'][1]:.2f}] "
              "| | |",
              f"| suite total per round, ratio [{p['rounds']} rounds] | "
              f"{_ci(p['round_total_ratio'], p['round_total_ratio_ci'])} | | |",
              f"| whole `pytest` process wall time ratio | "
              f"{_ci(p['session_wall_ratio'], p['session_wall_ratio_ci'])} | | |",
              f"| findings reported on the clean suite | {p['findings']} | 0 | "
              f"{_ok(p['findings'] == 0 and not _summary_problems(p))} |",
              f"| every test passed and was traced, in every run | "
              f"{'yes' if not p['problems'] else 'no'} | yes | {_ok(not p['problems'])} |"]
    o = [r.get("other_cpu_cores") for r in p.get("runs", [])]
    if o and all(x is not None for x in o):
        again = p.get("discarded_busy_rounds", 0)
        lines += ["", "CPU cores other processes used during each `pytest` run kept: "
                  + ", ".join(f"{x:.2f}" for x in o) + "." + (
                      f" {again} round(s) during which they used more than 0.3 cores were "
                      "run again (`--wait-quiet`)." if again else "")]
    lines += ["", f"A generated suite of {p['tests']} tests (`benchmarks/plugin.py`): the "
              "clean kernels of `pallas_viz.examples.kernels` (`clean_collective`, "
              "`hoisted_collective` over grids (1,), (2,), (4,)) and `shapes.launch("
              "shapes.CLEAN[body], shape)` for every clean body and launch shape it runs in "
              f"(two devices aside), {p['calls_per_kernel']} test(s) per kernel, each building "
              "its kernel and calling it once on fresh inputs. Plain `pytest -p "
              "no:cacheprovider` and the same with `--pallas-viz`, subprocesses of the same "
              f"interpreter, interleaved ({p['rounds']} rounds, the order alternating). "
              "Per test: the wall time of its whole protocol (setup, call, teardown, reports; "
              "a `conftest.py` wrapper around `pytest_runtest_protocol`), median over the "
              "rounds in each mode; the ratio of the two medians per test; the table gives "
              "the median over the tests with its 95% interval (order statistics, across "
              "tests). The call phase is pytest's own duration of the test's call (the "
              "plugin's `pv.trace()` of the call is inside it; the plugin traces the setup "
              "and teardown phases too, each in a `pv.trace()` of its own, which the whole "
              "protocol's time includes). The plugin run must pass every test, "
              "trace a kernel in each and report nothing (checked from each report's "
              "`user_properties` and the terminal summary)" +
              (f"; problems: {'; '.join(p['problems'][:5])}" if p["problems"] else "") + "."]
    if pt["ratio"] > bound:
        allowed = (bound - 1) * pt["plain_ms"]
        lines += ["", f"Over the target ≤ {bound:g} by {pt['ratio'] - bound:.3f}: "
                  f"+{pt['added_ms']:.2f} ms per test where {(bound - 1) * 100:.0f} % of the "
                  f"median plain test ({pt['plain_ms']:.1f} ms) allows {allowed:.2f} ms. What "
                  "`pv.trace()` adds to one such test is in the rows 'small, re-traced' of "
                  "section 1-2's breakdown (after the run and during it)."]
    return lines


def summarise_analysis(rows: list[dict]) -> dict:
    a, z = rows[0], rows[-1]
    size = z["events"] / a["events"]
    out = {
        "largest_events": z["events"],
        "largest_s": z["seconds"],
        "time_growth_per_size_growth": (z["seconds"] / a["seconds"]) / size,
        "memory_growth_per_size_growth": (z["peak_bytes"] / max(a["peak_bytes"], 1)) / size,
    }
    one_m = [r for r in rows if r["events"] >= 1_000_000]
    out["meets_target"] = bool(one_m) and all(
        r["seconds"] <= TARGETS["analysis_1m_s"] for r in one_m)
    return out


def source_state() -> dict:
    """The commit measured, and the files of `pallas_viz/` that differed from it."""
    import subprocess

    root = os.path.dirname(HERE)

    def git(*a):
        try:
            return subprocess.run(["git", *a], cwd=root, capture_output=True, text=True,
                                  timeout=30).stdout.rstrip()
        except (OSError, subprocess.SubprocessError):
            return ""

    changed = [ln[3:] for ln in git("status", "--porcelain", "--", "pallas_viz").splitlines()]
    return {"commit": git("rev-parse", "--short", "HEAD").strip(),
            "pallas_viz_changed": changed}


# (part, the keys of results.json it writes)
PARTS = {
    "ingest": ("ingest",),
    "analysis": ("analysis", "analysis_summary"),
    "payload": ("payload",),
    "processors": ("processors",),
    "kernels": ("empty_trace", "kernels", "kernel_budget_s", "min_reps"),
    "breakdown": ("breakdown",),
    "plugin": ("plugin",),
    "browser": ("browser",),
    "many_kernels": ("many_kernels",),
    "gc": ("gc",),
}


class CpuWatch:
    """CPU cores other processes used while a part ran: all busy time (`/proc/stat`) less
    this process's and its waited-for children's (`os.times`), per second of wall time.
    None where `/proc/stat` is missing. Approximate: a child not yet reaped counts as other."""

    def __init__(self):
        self.hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    @staticmethod
    def _busy() -> float | None:
        try:
            with open("/proc/stat") as f:
                v = [int(x) for x in f.readline().split()[1:9]]
        except (OSError, ValueError):
            return None
        return sum(v) - v[3] - v[4]  # all but idle and iowait (jiffies)

    @staticmethod
    def _own() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def start(self):
        self.t0, self.b0, self.o0 = time.perf_counter(), self._busy(), self._own()
        return self

    def others(self) -> float | None:
        b1 = self._busy()
        if b1 is None or self.b0 is None:
            return None
        wall = max(time.perf_counter() - self.t0, 1e-9)
        return max(((b1 - self.b0) / self.hz - (self._own() - self.o0)) / wall, 0.0)


def wait_quiet(threshold: float = 0.3, window_s: float = 5.0, max_s: float = 1800) -> dict:
    """Wait until other processes use less than `threshold` cores over `window_s`."""
    t0 = time.perf_counter()
    last = None
    while True:
        w = CpuWatch().start()
        time.sleep(window_s)
        last = w.others()
        waited = time.perf_counter() - t0
        if last is None or last < threshold:
            return {"waited_s": waited, "others_before": last}
        if waited > max_s:
            log(f"still busy after {waited:.0f}s ({last:.2f} cores): measuring anyway")
            return {"waited_s": waited, "others_before": last, "gave_up": True}
        if int(waited) % 60 < window_s:
            log(f"waiting for a quiet machine: other processes use {last:.2f} cores")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true")
    g.add_argument("--tiny", action="store_true")
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--skip-kernels", action="store_true",
                    help="leave out the real kernels (and their breakdown)")
    ap.add_argument("--skip-plugin", action="store_true")
    ap.add_argument("--skip-browser", action="store_true")
    ap.add_argument("--only", metavar="PART,...",
                    help=f"run only these parts ({', '.join(PARTS)}); with --reuse the others "
                    "are copied from an earlier results.json")
    ap.add_argument("--reuse", metavar="RESULTS_JSON",
                    help="take the parts not run from this earlier results.json")
    ap.add_argument("--wait-quiet", action="store_true",
                    help="before each part, wait until other processes use < 0.3 CPU cores, "
                    "and run again the groups of kernel runs / the plugin rounds during which "
                    "they used more (within a time allowance)")
    args = ap.parse_args(argv)
    name = "tiny" if args.tiny else "quick" if args.quick else "full"
    profile = dict(PROFILES[name])
    parts = list(PARTS)
    if args.only:
        wanted = [p.strip() for p in args.only.split(",") if p.strip()]
        unknown = [p for p in wanted if p not in PARTS]
        if unknown:
            ap.error(f"unknown part(s) {', '.join(unknown)}; known: {', '.join(PARTS)}")
        parts = [p for p in PARTS if p in wanted]
    for skip, dropped in (("kernels", ("kernels", "breakdown")), ("plugin", ("plugin",)),
                          ("browser", ("browser",))):
        if getattr(args, f"skip_{skip}"):
            parts = [p for p in parts if p not in dropped]
    os.makedirs(args.out, exist_ok=True)
    import jax

    t0 = time.perf_counter()
    res: dict = {
        "profile": name,
        "command": "python -m benchmarks.run" + {"full": "", "quick": " --quick",
                                                 "tiny": " --tiny"}[name] + "".join(
            f" --skip-{part}" for part in ("kernels", "plugin", "browser")
            if getattr(args, f"skip_{part}")) + (f" --only {','.join(parts)}" if args.only
                                                 else "")
        + (" --wait-quiet" if args.wait_quiet else "")
        + (" --reuse RESULTS_JSON" if args.reuse else ""),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "jax": jax.__version__, "numpy": np.__version__,
                    "cpus": os.cpu_count()},
        "targets": TARGETS,
        "source": source_state(),
        "loadavg_start": list(os.getloadavg()),
        "parts": {},
    }
    if args.reuse:
        with open(args.reuse) as f:
            old = json.load(f)
        for part, keys in PARTS.items():
            if part not in parts and all(k in old for k in keys):
                for k in keys:
                    res[k] = old[k]
                m = dict(old.get("parts", {}).get(part) or {})
                if not m.get("reused_from"):  # first reuse: the run it was measured in
                    m["reused_from"] = old.get("started")
                    m.setdefault("commit", (old.get("source") or {}).get("commit"))
                res["parts"][part] = m
    runners = {
        "ingest": lambda: {"ingest": bench_ingest(profile)},
        "analysis": lambda: _analysis_part(profile),
        "payload": lambda: {"payload": bench_payload(profile)},
        "processors": lambda: {"processors": bench_processors(profile)},
        "kernels": lambda: {"empty_trace": empty_trace_cost(),
                            "kernels": bench_kernels(profile),
                            "kernel_budget_s": profile["kernel_budget_s"],
                            "min_reps": profile["reps"]},
        "breakdown": lambda: {"breakdown": bench_breakdown(profile)},
        "plugin": lambda: {"plugin": bench_plugin_part(profile)},
        "browser": lambda: {"browser": bench_browser_part(profile, args.out)},
        "many_kernels": lambda: {"many_kernels": bench_many_kernels_part(profile)},
        "gc": lambda: {"gc": bench_gc_part(profile)},
    }
    QUIET["cores"] = 0.3 if args.wait_quiet else None
    for part in parts:
        meta: dict = {"profile": name}
        if args.wait_quiet:
            meta.update(wait_quiet())
        meta["started"] = time.strftime("%Y-%m-%d %H:%M:%S")
        meta["commit"] = res["source"]["commit"]
        meta["loadavg_start"] = list(os.getloadavg())
        watch = CpuWatch().start()
        p0 = time.perf_counter()
        res.update(runners[part]())
        meta["wall_s"] = time.perf_counter() - p0
        meta["other_cpu_cores"] = watch.others()
        if part == "browser":  # the Chromium it drives is not a child this process reaps
            meta["others_include_own_chromium"] = True
        res["parts"][part] = meta
        if (meta["other_cpu_cores"] is not None and meta["other_cpu_cores"] > 0.3
                and part != "browser"):
            log(f"{part}: other processes used {meta['other_cpu_cores']:.2f} CPU cores "
                "meanwhile")
    for part in PARTS:  # parts neither run nor reused
        if part not in res["parts"]:
            res.setdefault("parts", {})[part] = {"not_run": True}
    res.setdefault("kernels", [])
    res.setdefault("breakdown", [])
    res.setdefault("plugin", {"measured": False, "reason": "not run"})
    res.setdefault("browser", {"measured": False, "reason": "not run"})
    res["wall_s"] = time.perf_counter() - t0
    res["loadavg_end"] = list(os.getloadavg())
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1, default=float)
    with open(os.path.join(args.out, "RESULTS.md"), "w") as f:
        f.write(markdown(res))
    if res.get("analysis"):
        plot_scaling(res["analysis"], os.path.join(args.out, "scaling.png"))
    log(f"wrote results.json, RESULTS.md, scaling.png to {args.out} in {res['wall_s']:.0f}s")
    return res


def bench_many_kernels_part(profile: dict) -> dict:
    from benchmarks.many_kernels import bench_many_kernels

    return bench_many_kernels(profile["many_kernels"], profile["many_kernels_reps"], log=log)


def bench_gc_part(profile: dict) -> list[dict]:
    """`benchmarks.gc_cost.measure` on each real kernel (the smallest in the tiny run)."""
    from benchmarks.gc_cost import measure

    ks = profile_kernels(profile)
    out = []
    for k in ks:
        log(f"gc: {k.name}, {profile['gc_runs']} runs a block")
        out.append(measure(k, profile["gc_runs"]))
    return out


def many_kernels_markdown(res: dict | None) -> list[str]:
    from benchmarks.many_kernels import markdown as md

    return md(res)


def _analysis_part(profile: dict) -> dict:
    rows = bench_analysis(profile)
    return {"analysis": rows, "analysis_summary": summarise_analysis(rows)}


if __name__ == "__main__":
    main()
