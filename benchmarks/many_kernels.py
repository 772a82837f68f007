"""Loading and rendering a trace of many kernel runs: does each view stay linear?

A trace of N runs is one real recorded run (`examples.kernels.collective_in_branch`: a
root cause with consequences, a leak, two blocks of two threads) repeated N times in a
saved file, each copy its own kernel run. Each view is timed at every size (median of the
repetitions); the growth is the time's growth per growth of N from the smallest size to the
largest (1.0 = linear; a view that is quadratic in the number of kernels shows about N).
"""

from __future__ import annotations

import copy
import json
import os
import statistics
import tempfile
import time

VIEWS = ("load", "summary", "html", "perfetto", "diff")


def recorded_run() -> dict:
    """One traced run of `collective_in_branch`, as its saved JSON document."""
    import pallas_viz as pv
    from pallas_viz.examples import kernels as ex

    fn, args = ex.collective_in_branch()
    with pv.trace() as tr:
        fn(*args)
    return json.loads(json.dumps(tr.to_dict()))


def repeated(doc: dict, n: int) -> dict:
    """`doc` (one kernel run) repeated as `n` kernel runs."""
    d = copy.deepcopy(doc)
    (k0,) = d["kernels"]
    cols = d["events"]["columns"]
    m = len(cols["kernel"])
    d["kernels"] = [dict(copy.deepcopy(k0), index=i) for i in range(n)]
    out: dict[str, list] = {c: [] for c in cols}
    for i in range(n):
        for c, v in cols.items():
            if c == "kernel":
                out[c] += [i] * m
            elif c == "allocation":
                out[c] += [a + i * m if a >= 0 else a for a in v]
            else:
                out[c] += v
    d["events"]["columns"] = out
    d["failure"] = None
    return d


def _time_views(path: str, tmp: str) -> dict[str, float]:
    import pallas_viz as pv

    out = {}
    t0 = time.perf_counter()
    tr = pv.load(path)
    out["load"] = time.perf_counter() - t0
    for name, run in (("summary", tr.summary),
                      ("html", lambda: tr.to_html(os.path.join(tmp, "t.html"))),
                      ("perfetto", lambda: tr.to_perfetto(os.path.join(tmp, "t.pftrace"))),
                      ("diff", lambda: pv.diff(tr, tr).summary())):
        t0 = time.perf_counter()
        run()
        out[name] = time.perf_counter() - t0
    return out


def bench_many_kernels(sizes: list[int], reps: int, log=print) -> dict:
    """Per size: each view's median seconds and µs per kernel run; per view: the growth."""
    doc = recorded_run()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        warm = os.path.join(tmp, "warm.json")
        with open(warm, "w") as f:
            json.dump(repeated(doc, 2), f)
        _time_views(warm, tmp)  # (imports and first-call costs out of the first size)
        for n in sizes:
            path = os.path.join(tmp, f"many{n}.json")
            with open(path, "w") as f:
                json.dump(repeated(doc, n), f)
            times = [_time_views(path, tmp) for _ in range(reps)]
            med = {v: statistics.median(t[v] for t in times) for v in VIEWS}
            rows.append({"kernels": n, "events": n * len(doc["events"]["columns"]["kernel"]),
                         "seconds": med, "us_per_kernel": {v: med[v] / n * 1e6 for v in VIEWS}})
            log(f"many kernels {n:>6}: " + ", ".join(f"{v} {med[v]:.2f}s" for v in VIEWS))
    small, large = rows[0], rows[-1]
    size_growth = large["kernels"] / small["kernels"]
    growth = {v: (large["seconds"][v] / small["seconds"][v]) / size_growth
              if small["seconds"][v] > 0 else float("nan") for v in VIEWS}
    return {"measured": True, "reps": reps, "rows": rows, "growth": growth,
            "size_growth": size_growth}


def markdown(res: dict | None) -> list[str]:
    lines = ["", "## 8. Views of a trace of many kernel runs", ""]
    if not res or not res.get("measured"):
        return lines + [f"not measured: {(res or {}).get('reason', 'not run')}"]
    head = " | ".join(f"{v} s (µs/run)" for v in VIEWS)
    lines += [f"| kernel runs | events | {head} |", "|---|---|" + "---|" * len(VIEWS)]
    for r in res["rows"]:
        cells = " | ".join(f"{r['seconds'][v]:.2f} ({r['us_per_kernel'][v]:.0f})" for v in VIEWS)
        lines.append(f"| {r['kernels']:,} | {r['events']:,} | {cells} |")
    g = ", ".join(f"{v} {res['growth'][v]:.2f}" for v in VIEWS)
    lines += ["", f"Growth from the smallest to the largest size ({res['size_growth']:.0f}x the "
              f"runs), per growth of the runs (1.0 = linear): {g}. Medians of {res['reps']} "
              "repetitions. The trace: one recorded run of `collective_in_branch` (a root "
              "cause, its consequences, a leak) repeated as that many kernel runs in one "
              "file (`benchmarks/many_kernels.py`); `load` includes validating the file and "
              "running the analyses, `diff` compares the trace with itself."]
    return lines
