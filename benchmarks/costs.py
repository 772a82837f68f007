"""Where the time of a trace goes: analysis time per processor, and the post-run share of
the recording overhead on real kernels.

`bench_processors(n, reps)` runs each processor of `pallas_viz.analysis.PROCESSORS` (in
their order, as `analysis.run` does, then `fold_root_causes`) on a fresh
`AnalysisContext` of `synthetic_table(n)` and times each call.

`bench_breakdown(kernel, reps)` runs a real kernel untraced and traced, interleaved, with
the post-run steps of `pv.trace()` (`trace._finish`: table build, barrier-operation
records, analyses, source snippets; inside them, resolving JAX source infos to lines and
the search for their enclosing branch) timed by wrappers installed for this pass only; the
rest of the traced run's extra time is spent while the kernel runs (the hooks, the
recorder, the barrier monitor, their effect on the interpreter's threads) and in entering
and leaving the block.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import time


def _median(xs):
    from benchmarks.run import median

    return median(xs)


# ----------------------------------------------------------------------- analysis processors

def bench_processors(n: int, reps: int) -> dict:
    from benchmarks.run import synthetic_kernels
    from benchmarks.synthetic import synthetic_table
    from pallas_viz.analysis import PROCESSORS, AnalysisContext
    from pallas_viz.analysis.roots import fold_root_causes

    table = synthetic_table(n)
    kernels = synthetic_kernels()
    names = [p.__name__ for p in PROCESSORS] + ["fold_root_causes"]

    def one() -> tuple[dict, int]:
        ctx = AnalysisContext(table=table, kernels=list(kernels))
        times: dict[str, float] = {}
        findings: list = []
        for process in PROCESSORS:
            t0 = time.perf_counter()
            findings += process(ctx)
            times[process.__name__] = time.perf_counter() - t0
        t0 = time.perf_counter()
        roots = fold_root_causes(ctx, findings)
        times["fold_root_causes"] = time.perf_counter() - t0
        return times, len(roots)

    one()  # warm
    runs = []
    roots = 0
    for _ in range(reps):
        gc.collect()
        times, roots = one()
        runs.append(times)
    per = {name: _median([r[name] for r in runs]) for name in names}
    total = [sum(r.values()) for r in runs]
    return {"events": len(table), "reps": reps, "seconds": per,
            "times": {name: [r[name] for r in runs] for name in names},
            "total_s": _median(total), "roots": roots,
            "barrier_ops": 0}


# ----------------------------------------------------------------------- post-run breakdown

class _Timers:
    def __init__(self):
        self.t: dict[str, float] = {}

    def wrap(self, name, fn):
        t = self.t

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                t[name] = t.get(name, 0.0) + time.perf_counter() - t0

        return timed


# what `trace._finish` calls, by the name the report uses
STEPS = ("from_records", "barrier_ops_json", "thread_exits_json", "named_kernels",
         "analyses", "build_trace", "collect_snippets", "finish",
         # inside from_records / barrier_ops_json: resolving JAX source infos to lines,
         # and within that, searching the kernel's source for the enclosing branch
         "source_location", "enclosing_branch")


@contextlib.contextmanager
def _instrumented(timers: _Timers):
    """Time `trace._finish` and the steps it calls (restored on exit)."""
    from pallas_viz import _jax as adapter
    from pallas_viz import build, capture
    from pallas_viz._jax import sources
    from pallas_viz.recorder import Recorder
    from pallas_viz.store import EventTable

    saved = []

    def patch(owner, attr, name, wrapper=None):
        orig = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
        saved.append((owner, attr, orig))
        if isinstance(orig, classmethod):
            setattr(owner, attr, classmethod(timers.wrap(name, orig.__func__)))
        else:
            setattr(owner, attr, timers.wrap(name, orig))

    try:
        patch(EventTable, "from_records", "from_records")
        patch(Recorder, "barrier_ops_json", "barrier_ops_json")
        patch(Recorder, "thread_exits_json", "thread_exits_json")
        patch(capture, "named_kernels", "named_kernels")
        patch(capture, "build_trace", "build_trace")
        patch(capture, "collect_snippets", "collect_snippets")
        patch(build, "run", "analyses")
        patch(capture.trace, "_finish", "finish")
        patch(adapter, "source_location", "source_location")
        patch(sources, "enclosing_branch", "enclosing_branch")
        yield
    finally:
        for owner, attr, orig in reversed(saved):
            setattr(owner, attr, orig)


def bench_breakdown(kernel, reps: int) -> dict:
    """Untraced and instrumented traced runs of `kernel`, interleaved: medians (seconds)."""
    import pallas_viz as pv
    from benchmarks.kernels import interpret_context
    from benchmarks.run import CpuWatch, QuietGate

    def untraced():
        with interpret_context(kernel):
            kernel()

    timers = _Timers()
    rows = []
    with _instrumented(timers):
        t0 = time.perf_counter()
        for _ in range(2):  # warm (the wrappers too)
            untraced()
            with interpret_context(kernel), pv.trace():
                kernel()
        gate = QuietGate(max(3 * reps * (time.perf_counter() - t0) / 2, 60))
        attempt = 0
        while len(rows) < reps:
            gc.collect()
            row = {}
            watch = CpuWatch().start()
            attempt += 1
            for mode in (("untraced", "traced") if attempt % 2 else ("traced", "untraced")):
                timers.t.clear()
                t0 = time.perf_counter()
                if mode == "untraced":
                    untraced()
                else:
                    with interpret_context(kernel), pv.trace() as tr:
                        kernel()
                row[mode] = time.perf_counter() - t0
                if mode == "traced":
                    row.update(timers.t)
                    row["events"] = len(tr.events)
                    row["barrier_ops"] = len(tr.meta.get("barrier_ops") or [])
            if gate.keep(watch.others()):
                rows.append(row)
    out = {"reps": reps, "discarded_busy_groups": gate.discarded,
           "untraced_s": _median([r["untraced"] for r in rows]),
           "traced_s": _median([r["traced"] for r in rows]),
           "events": rows[-1]["events"], "barrier_ops": rows[-1]["barrier_ops"]}
    for step in STEPS:
        out[step + "_s"] = _median([r.get(step, 0.0) for r in rows])
    # per repetition: extra time outside `_finish` (hooks while the kernel runs, entering
    # and leaving the block)
    out["in_run_s"] = _median([r["traced"] - r["untraced"] - r.get("finish", 0.0)
                               for r in rows])
    from benchmarks.run import median_ci

    diffs = [r["traced"] - r["untraced"] for r in rows]
    out["added_s"] = _median(diffs)
    out["added_ci"] = list(median_ci(diffs))
    return out
