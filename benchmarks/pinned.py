"""The recording overhead of one real kernel with the scheduling noise taken out.

    .venv/bin/python -m benchmarks.pinned "hopper_matmul 256" [REPS]

On a machine with several cores the interpreter's threads (and XLA's) move between cores
and hand the GIL across them: the same untraced kernel varies by 4-13 % from run to run on
this VM (15-19 % on an earlier one), more than the 2 % target, so `benchmarks.run`'s
intervals straddle it. Here the process is pinned to one core before JAX starts (its
thread pools sized for one core): the run-to-run variation drops to about 2-4 %, and the
traced ÷ untraced ratio (median of the per-repetition ratios, interleaved, with its 95 %
interval) shows what a trace costs in work. It is not how kernels run for their authors
(they get more cores), so it is kept apart from `benchmarks.run`'s figures. The kernel is
named by the start of its name in `benchmarks.kernels.all_kernels()`. blackwell_matmul
does not finish pinned from the start (untraced too, its threads idle: the cause, in JAX
or XLA, was not looked into), so it is refused.
"""

from __future__ import annotations

import gc
import os
import statistics
import sys

HANGS_PINNED = ("blackwell_matmul",)


def pinned_kernel(name: str, tool: str):
    """Pin this process to one core (before JAX starts) and return the kernel of
    `benchmarks.kernels.all_kernels()` whose name starts with `name`; None, with the reason
    on stderr, if JAX is loaded already, no kernel is so named, or it does not finish
    pinned."""
    if "jax" in sys.modules:  # pragma: no cover - run as a module, JAX not loaded yet
        print(f"{tool} must pin the process before JAX starts", file=sys.stderr)
        return None
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    from benchmarks.kernels import all_kernels

    kernel = next((k for k in all_kernels() if k.name.startswith(name)), None)
    if kernel is None:
        print(f"{name!r} names no kernel of benchmarks.kernels", file=sys.stderr)
    elif kernel.name.startswith(HANGS_PINNED):
        print(f"{kernel.name}: does not finish pinned to one core (see benchmarks.pinned)",
              file=sys.stderr)
        kernel = None
    return kernel


def measure(kernel, reps: int) -> dict:
    """Untraced and traced runs of `kernel` (`benchmarks.kernels.Kernel`), interleaved, in
    this process; each run timed as `benchmarks.run` times it (`_run_mode`)."""
    from benchmarks.run import _ratios, _run_mode, median, median_ci

    modes = ("untraced", "pallas_viz")
    times: dict[str, list[float]] = {m: [] for m in modes}
    for m in modes:  # warm (jit, the hooks)
        _run_mode(kernel, m)
        _run_mode(kernel, m)
    for i in range(reps):
        gc.collect()
        for m in (modes if i % 2 else modes[::-1]):
            times[m].append(_run_mode(kernel, m)[0])
    u, t = times["untraced"], times["pallas_viz"]
    r = _ratios(t, u)
    added = [a - b for a, b in zip(t, u)]
    return {"kernel": kernel.name, "reps": reps, "untraced_s": median(u),
            "untraced_sd_over_mean": statistics.stdev(u) / statistics.mean(u) if reps > 1
            else 0.0, "ratio": r["ratio"], "ratio_ci": r["ci"], "added_s": median(added),
            "added_ci": list(median_ci(added))}


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    reps = int(argv[1]) if len(argv) > 1 else 40
    kernel = pinned_kernel(argv[0], "benchmarks.pinned")
    if kernel is None:
        return 2
    r = measure(kernel, reps)
    lo, hi = r["ratio_ci"]
    alo, ahi = r["added_ci"]
    print(f"{r['kernel']} pinned to one core, {reps} interleaved repetitions: untraced "
          f"{r['untraced_s'] * 1e3:.1f} ms (sd/mean {r['untraced_sd_over_mean']:.3f}); "
          f"traced / untraced {r['ratio']:.4f} [{lo:.4f}, {hi:.4f}]; added "
          f"{r['added_s'] * 1e3:.2f} ms [{alo * 1e3:.2f}, {ahi * 1e3:.2f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
