"""The recording hooks' own time inside a real kernel's run, hook by hook.

    .venv/bin/python -m benchmarks.hook_profile [--cpu] "hopper_matmul 256" [REPS]

Pinned to one core before JAX starts (as `benchmarks.pinned`, and blackwell_matmul is
refused for the same reason). Every interpreter method pallas_viz wraps gets two timers:
one around the original method (installed before the trace, so the hook calls it) and
one around the hook (installed inside the trace, once the hooks are in place). A hook's
self time is the outer timer's total less the inner one's: its own code, with the
interpreter's work, and any wait for a lock the original takes, left out; one timer
layer's own cost (two clock reads and a call, a fraction of a microsecond warm) is in
it. The clock is the wall clock; with `--cpu` the thread's own CPU clock, which leaves
out the time a hook waits for the memory lock it takes before the original (another
thread's work, which the original would have waited for instead) and costs more per
read (its own cost is in every figure). A control measures that cost in the same runs:
the interpreter's other methods, each behind a wrapper that only calls it, with the same
two timers. The run's first traced repetition (a warm-up) is not counted. Each
repetition is one `pv.trace()` block around the kernel, as `benchmarks.run` times it.
"""

from __future__ import annotations

import collections
import gc
import sys
import time
import types

from benchmarks.pinned import pinned_kernel


def _hooked_classes():
    """The interpreter classes whose methods the hooks replace (through the adapter)."""
    from pallas_viz._jax.version import _import_internals

    gsm = _import_internals()[3]
    return [c for c in (gsm.GPUSharedMemory, getattr(gsm, "Barrier", None),
                        getattr(gsm, "ClusterBarrier", None)) if c is not None]


def _timer(totals, calls, name, fn, clock):
    def timed(*args, **kwargs):
        t0 = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[name] += clock() - t0
            calls[name] += 1

    return timed


def _pass_through(fn):
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


def profile(kernel, reps: int, cpu: bool = False) -> dict:
    """Per hooked method: calls and self time per traced run of `kernel`
    (`benchmarks.kernels.Kernel`); `cpu`: time with the thread's CPU clock."""
    import pallas_viz as pv
    from benchmarks.kernels import interpret_context

    clock = time.thread_time_ns if cpu else time.perf_counter_ns
    classes = _hooked_classes()
    plain = {c: dict(vars(c)) for c in classes}
    with interpret_context(kernel):
        kernel()
        with pv.trace():  # which methods the hooks replace, read while they are in place
            hooked = [(c, n) for c in classes for n, v in vars(c).items()
                      if isinstance(v, types.FunctionType) and plain[c].get(n) is not v]
            kernel()
    inner: collections.Counter = collections.Counter()
    outer: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()
    unused: collections.Counter = collections.Counter()
    labels = {(c, n): n if c is classes[0] else f"{c.__name__}.{n}" for c, n in hooked}
    # the control: the interpreter's other methods, each behind a wrapper that only calls
    # it, timed the same way (its self time is the timers' and a wrapper call's own cost)
    control = [(c, n, v) for c in classes for n, v in plain[c].items()
               if isinstance(v, types.FunctionType) and not n.startswith("__")
               and (c, n) not in labels]
    walls = []
    try:
        for c, n in hooked:  # the hooks will wrap these timers as the originals
            orig = getattr(c, n)
            setattr(c, n, _timer(inner, unused, labels[c, n], orig, clock))
        with interpret_context(kernel):
            for rep in range(reps + 1):
                if rep == 1:
                    for counter in (inner, outer, calls):
                        counter.clear()
                    walls.clear()
                gc.collect()
                t0 = time.perf_counter()
                with pv.trace() as tr:
                    for c, n in hooked:
                        setattr(c, n, _timer(outer, calls, labels[c, n], getattr(c, n),
                                               clock))
                    for c, n, v in control:
                        setattr(c, n, _timer(outer, calls, " control", _pass_through(
                            _timer(inner, unused, " control", v, clock)), clock))
                    kernel()
                walls.append(time.perf_counter() - t0)
                for c, n, v in control:
                    setattr(c, n, v)
    finally:
        for c in classes:  # every method back as it was before the profile
            for n in list(vars(c)):
                if n not in plain[c]:
                    delattr(c, n)
            for n, v in plain[c].items():
                if vars(c).get(n) is not v:
                    setattr(c, n, v)
    hooks = {labels[k]: {"calls": calls[labels[k]] / reps,
                         "self_us_per_call": (outer[labels[k]] - inner[labels[k]])
                         / max(1, calls[labels[k]]) / 1e3,
                         "self_ms_per_run": (outer[labels[k]] - inner[labels[k]]) / reps / 1e6}
             for k in hooked if calls[labels[k]]}
    walls.sort()
    n_control = calls[" control"]
    hooks_total = sum(h["self_ms_per_run"] for h in hooks.values())
    return {"control_calls": n_control / reps,
            "control_us_per_call": (outer[" control"] - inner[" control"])
            / max(1, n_control) / 1e3, "kernel": kernel.name, "reps": reps,
            "clock": "cpu" if cpu else "wall",
            "traced_s": walls[len(walls) // 2], "events": len(tr.events),
            "hooks": hooks, "total_ms_per_run": hooks_total}


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    cpu = argv[0] == "--cpu"
    argv = argv[1:] if cpu else argv
    if not argv:
        print(__doc__.strip())
        return 2
    reps = int(argv[1]) if len(argv) > 1 else 12
    kernel = pinned_kernel(argv[0], "benchmarks.hook_profile")
    if kernel is None:
        return 2
    r = profile(kernel, reps, cpu)
    print(f"{r['kernel']} pinned to one core, {reps} traced runs (median "
          f"{r['traced_s'] * 1e3:.1f} ms, {r['events']} allocation events a run); the hooks' "
          f"self time, {r['clock']} clock:")
    print(f"{'hook':34s} {'calls/run':>10s} {'us/call':>8s} {'ms/run':>7s}")
    for n, h in sorted(r["hooks"].items(), key=lambda x: -x[1]["self_ms_per_run"]):
        print(f"{n:34s} {h['calls']:10.1f} {h['self_us_per_call']:8.2f} "
              f"{h['self_ms_per_run']:7.3f}")
    print(f"all hooks: {r['total_ms_per_run']:.3f} ms a run")
    print(f"control: a wrapper that only calls the method, on the interpreter's other "
          f"methods ({r['control_calls']:.1f} calls a run), timed the same way: "
          f"{r['control_us_per_call']:.2f} us a call (the timers' own cost and a wrapper "
          "call's, in every figure above)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
