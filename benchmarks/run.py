"""Run every pallas_viz benchmark and write results.json, RESULTS.md and scaling.png.

    .venv/bin/python -m benchmarks.run            # full run (several minutes)
    .venv/bin/python -m benchmarks.run --quick    # fewer repetitions, smaller sizes
    .venv/bin/python -m benchmarks.run --tiny     # seconds; what tests/test_benchmarks.py runs

Options: `--out DIR` (default: this directory), `--skip-kernels`, `--skip-browser`.

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
    "full": dict(kernels="all", reps=11, kernel_budget_s=60, max_reps=151,
                 ingest=300_000, ingest_reps=5,
                 sizes=[10_000, 100_000, 1_000_000], analysis_reps=3, payload=1_000_000,
                 browser=1_000_000, browser_reps=5),
    "quick": dict(kernels="all", reps=3, kernel_budget_s=10, max_reps=31,
                  ingest=100_000, ingest_reps=3,
                  sizes=[10_000, 100_000, 1_000_000], analysis_reps=2, payload=1_000_000,
                  browser=1_000_000, browser_reps=3),
    "tiny": dict(kernels="smallest", reps=2, kernel_budget_s=0, max_reps=2,
                 ingest=5_000, ingest_reps=2,
                 sizes=[1_000, 10_000], analysis_reps=1, payload=10_000,
                 browser=None, browser_reps=1),
}

TARGETS = {
    "overhead_ratio": 1.03,
    "ingest_events_per_s": 1_000_000,
    "bytes_per_event": 64,
    "analysis_1m_s": 2.0,
    "payload_bytes_per_event": 40,
    "payload_build_s": 1.0,
    "first_paint_ms": 200,
    "click_to_source_ms": 50,
    "replay_step_ms": 16,
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
        info = {"events": len(tr.events), "findings": len(tr.findings)}
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
    from benchmarks import kernels as kmod

    ks = kmod.all_kernels() if profile["kernels"] == "all" else [kmod.smallest_kernel()]
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
        for rep in range(reps):
            order = modes[rep % len(modes):] + modes[:rep % len(modes)]  # rotate the order
            gc.collect()  # once per group (a full collection takes ~0.1 s with JAX loaded)
            for m in order:
                dt, info = _run_mode(k, m)
                times[m].append(dt)
                infos.setdefault(m, []).append(info)
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
            "jax_log_lines": infos["jax_logging"][0].get("log_lines", 0),
        }
        row["meets_target"] = row["pallas_viz_ratio"] <= TARGETS["overhead_ratio"]
        row["meets_target_ci"] = pv["ci"][1] <= TARGETS["overhead_ratio"]
        row["below_jax_logging"] = row["pallas_viz_vs_jax_logging"] < 1
        row["below_jax_logging_ci"] = vs["ci"][1] < 1
        log(f"  {reps} reps: untraced {row['untraced_s']:.3f}s  pallas_viz "
            f"x{pv['ratio']:.3f} [{pv['ci'][0]:.3f}, {pv['ci'][1]:.3f}]  jax_logging "
            f"x{jl['ratio']:.3f} [{jl['ci'][0]:.3f}, {jl['ci'][1]:.3f}]  pallas_viz/jax "
            f"x{vs['ratio']:.3f}  ({row['events']} events)")
        out.append(row)
    return out


# ----------------------------------------------------------------------- 3. ingest

def bench_ingest(profile: dict) -> dict:
    from benchmarks.synthetic import synthetic_records, synthetic_table
    from pallas_viz.recorder import Recorder
    from pallas_viz.store import EventTable

    n = profile["ingest"]
    recs = synthetic_records(n)
    n = len(recs)
    rec_rates, build_rates, total_rates = [], [], []
    table = None
    for _ in range(profile["ingest_reps"]):
        r = Recorder()
        record = r.record
        gc.collect()
        t0 = time.perf_counter()
        for a in recs:
            record(*a)
        t1 = time.perf_counter()
        table = EventTable.from_records(r.records, lambda s: None)
        t2 = time.perf_counter()
        rec_rates.append(n / (t1 - t0))
        build_rates.append(n / (t2 - t1))
        total_rates.append(n / (t2 - t0))
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
        "column_bytes_per_event": col_bytes / n,
        "bytes_per_event": (big_cols + tables) / len(big),
        "bytes_per_event_events": len(big),
    }
    out["meets_rate_target"] = out["record_events_per_s"] >= TARGETS["ingest_events_per_s"]
    out["meets_bytes_target"] = out["bytes_per_event"] <= TARGETS["bytes_per_event"]
    log(f"ingest: record {out['record_events_per_s']:,.0f}/s, from_records "
        f"{out['from_records_events_per_s']:,.0f}/s, both {out['ingest_events_per_s']:,.0f}/s, "
        f"{out['bytes_per_event']:.1f} B/event")
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
         f"{res['machine']['cpus']} CPUs, {res['started']}. Wall time {res['wall_s']:.0f} s.",
         "", "Ratios are medians of per-repetition ratios, modes interleaved in one process "
         "(order rotated each repetition). Absolute times are noisy; rely on the ratios.", ""]
    lines += ["## 1-2. Recording overhead on real kernels (interpret mode, jit-cached)", ""]
    if res["kernels"]:
        lines += ["| kernel | events | reps | untraced s | pallas_viz ÷ untraced | JAX "
                  "SHARED_MEMORY logging ÷ untraced | pallas_viz ÷ JAX logging | ≤ 1.03 | "
                  "below JAX |", "|---|---|---|---|---|---|---|---|---|"]
        for r in res["kernels"]:
            target = _verdict(r["pallas_viz_ratio"], r["pallas_viz_ratio_ci"],
                              TARGETS["overhead_ratio"], True)
            below = _verdict(r["pallas_viz_vs_jax_logging"], r["pallas_viz_vs_jax_logging_ci"],
                             1.0, False)
            lines.append(
                f"| {r['kernel']} | {r['events']} | {r['reps']} | {_fmt(r['untraced_s'])} | "
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
    else:
        lines.append("not measured in this profile")
    g = res["ingest"]
    lines += ["", "## 3. Recorder ingest (synthetic events, no JAX)", "",
          "| figure | value | target | met |", "|---|---|---|---|",
          f"| `Recorder.record` events/s | {g['record_events_per_s']:,.0f} | ≥ 1,000,000 | "
          f"{_ok(g['meets_rate_target'])} |",
          f"| `EventTable.from_records` events/s | {g['from_records_events_per_s']:,.0f} | | |",
          f"| record + from_records events/s | {g['ingest_events_per_s']:,.0f} | | |",
          f"| stored bytes/event ({g['bytes_per_event_events']:,} events) | "
          f"{g['bytes_per_event']:.1f} | ≤ 64 | {_ok(g['meets_bytes_target'])} |"]
    lines += ["", "## 4. Analysis time and peak memory (synthetic)", "",
          "| events | blocks | analyse() s | µs/event | peak MiB (tracemalloc) | "
          "table MiB | findings |", "|---|---|---|---|---|---|---|"]
    for r in res["analysis"]:
        lines.append(f"| {r['events']:,} | {r['blocks']:,} | {r['seconds']:.3f} | "
                 f"{1e6 * r['seconds'] / r['events']:.2f} | {r['peak_bytes'] / 2**20:.1f} | "
                 f"{r['table_bytes'] / 2**20:.1f} | {', '.join(r['findings'])} |")
    a = res["analysis_summary"]
    lines += ["", f"Largest size {a['largest_events']:,} events in {a['largest_s']:.3f} s "
          f"(target ≤ 2 s at 1M: {_ok(a['meets_target'])}); time growth from the smallest to "
          f"the largest size per event-count growth: {a['time_growth_per_size_growth']:.2f} "
          "(1.0 = linear); memory: "
          f"{a['memory_growth_per_size_growth']:.2f}. Plot: `scaling.png`."]
    p = res["payload"]
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
                           ("replay_step_ms", "replay step")):
            lines.append(f"| {label} | {_fmt(b[key], '.1f')} | ≤ {TARGETS[key]} | "
                     f"{_ok(b[key] <= TARGETS[key])} |")
        lines += ["", b.get("notes", "")]
    else:
        lines.append(f"not measured: {b.get('reason')}")
    return "\n".join(lines) + "\n"


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


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true")
    g.add_argument("--tiny", action="store_true")
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--skip-kernels", action="store_true")
    ap.add_argument("--skip-browser", action="store_true")
    args = ap.parse_args(argv)
    name = "tiny" if args.tiny else "quick" if args.quick else "full"
    profile = dict(PROFILES[name])
    if args.skip_browser:
        profile["browser"] = None
    os.makedirs(args.out, exist_ok=True)
    import jax

    t0 = time.perf_counter()
    res: dict = {
        "profile": name,
        "command": "python -m benchmarks.run" + {"full": "", "quick": " --quick",
                                                 "tiny": " --tiny"}[name],
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "jax": jax.__version__, "numpy": np.__version__,
                    "cpus": os.cpu_count()},
        "targets": TARGETS,
    }
    res["ingest"] = bench_ingest(profile)
    res["analysis"] = bench_analysis(profile)
    res["analysis_summary"] = summarise_analysis(res["analysis"])
    res["payload"] = bench_payload(profile)
    res["empty_trace"] = empty_trace_cost()
    res["kernels"] = [] if args.skip_kernels else bench_kernels(profile)
    res["kernel_budget_s"], res["min_reps"] = profile["kernel_budget_s"], profile["reps"]
    res["browser"] = bench_browser_part(profile, args.out)
    res["wall_s"] = time.perf_counter() - t0
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1, default=float)
    with open(os.path.join(args.out, "RESULTS.md"), "w") as f:
        f.write(markdown(res))
    plot_scaling(res["analysis"], os.path.join(args.out, "scaling.png"))
    log(f"wrote results.json, RESULTS.md, scaling.png to {args.out} in {res['wall_s']:.0f}s")
    return res


if __name__ == "__main__":
    main()
