"""Where a traced run's added time goes: the same kernel traced with parts switched off.

    .venv/bin/python -m benchmarks.ablation "blackwell_matmul" [REPS]

A real kernel runs, in one process, modes interleaved (order rotated each repetition,
`gc.collect()` every tenth), unpinned as `benchmarks.run` runs it:

    untraced      the kernel alone
    traced        in `pv.trace()`, as a user runs it
    no_build      `pv.trace()` without its post-run build (table, barrier records,
                  analyses, snippets): what the recording costs during the run
    pass_through  also without it, and every recording wrapper only calls the
                  interpreter's method (installed and removed as usual; the memory's
                  `__init__` hook kept): the cost of having wrappers at all
    no_hooks      `pv.trace()` entered and left with nothing installed

Each mode's added time is the median of its per-repetition differences from the untraced
run, with a distribution-free 95 % interval; in-situ costs, cold caches included (the
post-run build measures about half as much warm, in a loop). The interval is as wide as
the effects on a shared 2-core VM: use hundreds of repetitions.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import time

MODES = ("untraced", "traced", "no_build", "pass_through", "no_hooks")


def _pass_through(self, orig, *args):
    def wrapper(*a, **kw):
        return orig(*a, **kw)

    return wrapper


@contextlib.contextmanager
def _mode(mode: str):
    """Switch parts of `pv.trace()` off for `mode` (pallas_viz's own classes only)."""
    from pallas_viz import capture
    from pallas_viz._jax import hooks, monitor

    saved = []

    def patch(obj, name, value):
        saved.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    try:
        if mode in ("no_build", "pass_through", "no_hooks"):
            patch(capture.trace, "_finish", lambda self, exc: None)
        if mode == "pass_through":
            for name in ("_wrap_alloc_buffer", "_wrap_alloc_barrier", "_wrap_free",
                         "_wrap_set_failed", "_wrap_async_task"):
                patch(hooks._Hooks, name, _pass_through)
            for name in ("_wrap_arrive", "_wrap_wait", "_wrap_task", "_wrap_finished",
                         "_wrap_reset", "_wrap_device_barrier", "_wrap_access"):
                patch(monitor.BarrierWaits, name, _pass_through)
        if mode == "no_hooks":
            patch(hooks._Hooks, "install", lambda self: None)
        yield
    finally:
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)


def _run(kernel, mode: str) -> tuple[float, int]:
    """One run of `kernel` in `mode`: (seconds, requests the recorder kept)."""
    import pallas_viz as pv

    if mode == "untraced":
        t0 = time.perf_counter()
        kernel()
        return time.perf_counter() - t0, 0
    with _mode(mode):
        cm = pv.trace()
        t0 = time.perf_counter()
        with cm:
            kernel()
        dt = time.perf_counter() - t0
    return dt, len(cm._recorder.records)


def ablate(kernel, reps: int, modes=MODES) -> dict:
    """Per mode of `modes` (with "untraced" first): the median added ms over "untraced"
    and its 95 % interval, the median ratio, and the requests recorded in its last run."""
    from benchmarks.kernels import interpret_context
    from benchmarks.run import median_ci

    modes = ("untraced", *(m for m in modes if m != "untraced"))
    times: dict = {m: [] for m in modes}
    recorded: dict = {}
    with interpret_context(kernel):
        for m in modes:  # warm-up: compile, and each mode's first run
            _run(kernel, m)
            _run(kernel, m)
        for i in range(reps):
            if i % 10 == 0:
                gc.collect()
            rot = i % len(modes)
            for m in modes[rot:] + modes[:rot]:
                dt, recorded[m] = _run(kernel, m)
                times[m].append(dt)
    base = times["untraced"]
    out = {"kernel": kernel.name, "reps": reps,
           "untraced_ms": 1e3 * sorted(base)[len(base) // 2], "modes": {}}
    for m in modes[1:]:
        diffs = sorted(1e3 * (a - b) for a, b in zip(times[m], base))
        ratios = sorted(a / b for a, b in zip(times[m], base))
        lo, hi = median_ci(diffs)
        out["modes"][m] = {"added_ms": diffs[len(diffs) // 2], "ci": [lo, hi],
                           "ratio": ratios[len(ratios) // 2], "recorded": recorded[m]}
    return out


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    reps = int(argv[1]) if len(argv) > 1 else 101
    from benchmarks.kernels import kernel_named

    kernel = kernel_named(argv[0])
    if kernel is None:
        return 2
    r = ablate(kernel, reps)
    print(f"{r['kernel']}: {reps} repetitions, untraced median {r['untraced_ms']:.1f} ms; "
          "added over untraced (median of paired differences, 95 % interval):")
    print(f"{'mode':14s} {'added ms':>9s} {'95 % interval':>20s} {'ratio':>7s} {'recorded':>9s}")
    for m, v in r["modes"].items():
        ci = f"[{v['ci'][0]:.2f}, {v['ci'][1]:.2f}]"
        print(f"{m:14s} {v['added_ms']:9.2f} {ci:>20s} {v['ratio']:7.4f} {v['recorded']:9d}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
