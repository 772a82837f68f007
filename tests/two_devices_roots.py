"""Run a test module's body on two devices, traced, several times; print its roots as JSON.

    python tests/two_devices_roots.py MODULE BODY NUM_THREADS RUNS [warp_mesh]

MODULE is a test module of this directory (`test_over_arrival`), BODY a body of it for
`pallas_viz.examples.shapes.launch`, run as each thread's code on two devices, or with
`warp_mesh` as each warp's (`launch(..., "warp_mesh", warps_in="two_devices")`). One
JSON line: for each run, the error roots' [kind, line, message, devices, whether the
interpreter failed]. Run in a fresh process:
the 2 CPU devices are requested here, before JAX initialises.
"""

from __future__ import annotations

import importlib
import json
import os
import sys

TWO_DEVICES = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}


def main(module: str, body: str, num_threads: int, runs: int, shape: str = "two_devices"
         ) -> None:
    from pallas_viz.examples import shapes as sh

    fn_body = getattr(importlib.import_module(module), body)
    kw = {"warps_in": "two_devices"} if shape == "warp_mesh" else {}
    out = []
    for _ in range(runs):
        fn, args = sh.launch(fn_body, shape, num_threads=num_threads, **kw)
        tr, _ = sh.run_traced(fn, args)
        out.append([[f.kind, f.source.line if f.source else None, f.message,
                     sorted({d for d, _, _ in f.cells}), tr.failure is not None]
                    for f in tr.findings if f.severity == "error"])
    sh.drain_effects()  # (a failed run's error would be raised again at exit)
    print(json.dumps(out), flush=True)


def run(module: str, body: str, num_threads: int, runs: int, shape: str = "two_devices"
        ) -> list:
    """`main` in a fresh Python process: its printed list. On JAX 0.11 each run gets a
    process of its own: there a failed two-device kernel's error stays in the process's
    ordered-effect token, raised again by every later call (an effects barrier does not
    clear it)."""
    import jax

    if jax.__version__.startswith("0.11.") and runs > 1:
        return [r for _ in range(runs) for r in run(module, body, num_threads, 1, shape)]
    from script_json import printed_json

    return printed_json([sys.executable, os.path.abspath(__file__), module, body,
                         str(num_threads), str(runs), shape], env=TWO_DEVICES)


def one_root(module: str, body: str, num_threads: int, runs: int,
             shape: str = "two_devices") -> tuple:
    """`run`, checked: every run has exactly one error root, its kind, line and message
    the same on every run, pinned to device 0, 1 or both (a device the other's failure
    stopped before its threads part has no cell). Returns (kind, line, message)."""
    out = run(module, body, num_threads, runs, shape)
    for roots in out:
        assert len(roots) == 1, out
        assert roots[0][3] in ([0], [1], [0, 1]), roots
    assert len({json.dumps(roots[0][:3]) for roots in out}) == 1, out
    return tuple(out[0][0][:3])


if __name__ == "__main__":
    # (here only: importing this module from a test must not change its process's devices)
    os.environ.update(TWO_DEVICES)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), *sys.argv[5:6])
