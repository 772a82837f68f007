"""What the garbage collector costs a traced run, beside an untraced one.

    .venv/bin/python -m benchmarks.gc_cost "hopper_matmul 512" [RUNS]

A kernel author's loop does not call `gc.collect()` between runs (`benchmarks.run` does,
once per group of runs, so that no full collection falls inside a timed run). Here a real
kernel runs RUNS times untraced in a row, then RUNS times each in its own `pv.trace()`
block (the trace of the run before kept until the next, as a loop that keeps its last
trace would), then both again; `gc.callbacks` count the collections of each generation
and time them with the wall clock. Objects a run keeps alive (the recorder's rows, the
interpreter's logging infos it holds, the trace's records) make the young generation
fill sooner, and those that outlive two collections count towards the next full
collection, which walks every object JAX keeps (about 0.06 s on this VM). Each figure is
per run, over both blocks of each mode; the ms are the collections' own time.
"""

from __future__ import annotations

import collections
import gc
import sys
import time


def measure(kernel, runs: int) -> dict:
    """Collections per run and their ms per run, by generation, for `kernel` untraced and
    traced (`benchmarks.kernels.Kernel`), each over two blocks of `runs` runs."""
    import pallas_viz as pv
    from benchmarks.kernels import interpret_context

    mode = ["warm-up"]
    counts: dict = collections.defaultdict(collections.Counter)
    started = [0]

    def on_gc(phase, info):
        if phase == "start":
            started[0] = time.perf_counter_ns()
            return
        c = counts[mode[0]]
        c[info["generation"]] += 1
        c[f"ns{info['generation']}"] += time.perf_counter_ns() - started[0]

    gc.callbacks.append(on_gc)
    try:
        with interpret_context(kernel):
            kernel()
            with pv.trace():
                kernel()
            for m in ("untraced", "traced", "untraced", "traced"):
                gc.collect()  # each block starts with nothing pending
                mode[0] = m
                kept = None
                for _ in range(runs):
                    if m == "untraced":
                        kernel()
                        continue
                    with pv.trace() as tr:
                        kernel()
                    kept = tr  # (the loop's last trace, alive until the next one)
                del kept
                mode[0] = "between"
    finally:
        gc.callbacks.remove(on_gc)
    n = 2 * runs
    return {"kernel": kernel.name, "runs": runs, "modes": {
        m: {"collections": [counts[m][g] / n for g in range(3)],
            "ms": [counts[m][f"ns{g}"] / n / 1e6 for g in range(3)]}
        for m in ("untraced", "traced")}}


def markdown(rows: list[dict] | None) -> list[str]:
    """The RESULTS.md section of `benchmarks.run`'s "gc" part (`measure` per kernel)."""
    lines = ["", "## 9. Garbage collection in a loop of traced runs (`gc_cost.py`)", ""]
    if not rows:
        return lines + ["not measured in this run"]
    lines += [
        "Each kernel runs in two blocks of untraced runs and two of traced runs, with no "
        "`gc.collect()` between runs (a kernel author's loop; section 1 collects before each "
        "group). Collections per run of each generation, and their own time (ms per run, "
        "wall clock):", "",
        "| kernel | runs of each mode | untraced gen 0 / 1 / 2 | traced gen 0 / 1 / 2 | "
        "untraced ms | traced ms | traced − untraced ms |",
        "|---|---|---|---|---|---|---|"]
    for r in rows:
        u, t = r["modes"]["untraced"], r["modes"]["traced"]
        lines.append(
            f"| {r['kernel']} | {2 * r['runs']} | "
            + " / ".join(f"{c:.2f}" for c in u["collections"]) + " | "
            + " / ".join(f"{c:.2f}" for c in t["collections"])
            + f" | {sum(u['ms']):.2f} | {sum(t['ms']):.2f} | "
            f"{sum(t['ms']) - sum(u['ms']):.2f} |")
    lines += ["", "A full (generation 2) collection walks every object the process keeps "
              "(JAX's included); objects a traced run keeps alive past two young collections "
              "bring the next one nearer."]
    return lines


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    runs = int(argv[1]) if len(argv) > 1 else 20
    from benchmarks.kernels import kernel_named

    kernel = kernel_named(argv[0])
    if kernel is None:
        return 2
    r = measure(kernel, runs)
    print(f"{r['kernel']}: {2 * runs} runs of each mode (two blocks of {runs}); garbage "
          "collections per run and their ms per run, by generation:")
    print(f"{'mode':10s} {'gen 0':>12s} {'gen 1':>12s} {'gen 2':>12s} {'all ms':>8s}")
    for m, v in r["modes"].items():
        cells = [f"{c:5.2f} {t:5.2f}ms" for c, t in zip(v["collections"], v["ms"])]
        print(f"{m:10s} " + " ".join(f"{x:>12s}" for x in cells) + f" {sum(v['ms']):8.2f}")
    added = sum(r["modes"]["traced"]["ms"]) - sum(r["modes"]["untraced"]["ms"])
    print(f"traced - untraced: {added:.2f} ms a run in collections")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
