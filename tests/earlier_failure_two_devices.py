"""A failed kernel on two devices, then the next run, traced; prints JSON.

    python tests/earlier_failure_two_devices.py traced|untraced

The failing kernel runs in a `pv.trace()` ("traced") or outside any ("untraced"); the
clean kernel's traced call then fails with the earlier error JAX kept, before its kernel
starts, and the trace says so.
One JSON line: [first run's finding kinds, second run's summary, whether an error left the
second block, the second trace's meta "earlier_failure"]. Run in a fresh process (the 2 CPU
devices are requested before JAX initialises).
"""

from __future__ import annotations

import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"


def main(mode: str) -> None:
    import jax

    import pallas_viz as pv
    from pallas_viz.examples import shapes as sh

    bad, bad_args = sh.launch(sh.barrier_in_branch, "two_devices")
    good, good_args = sh.launch(sh.hoisted_collective, "two_devices")
    first = []
    if mode == "traced":
        with pv.trace(raise_errors=False) as tr:
            jax.block_until_ready(bad(*bad_args))
        first = [f.kind for f in tr.findings]
    else:
        try:
            jax.block_until_ready(bad(*bad_args))
        except jax.errors.JaxRuntimeError:
            pass
    left = False
    try:
        with pv.trace(raise_errors=False) as tr2:
            jax.block_until_ready(good(*good_args))
    except jax.errors.JaxRuntimeError:
        left = True
    print(json.dumps([first, tr2.summary(), left, tr2.meta.get("earlier_failure")]),
          flush=True)
    sh.drain_effects()


if __name__ == "__main__":
    main(sys.argv[1])
