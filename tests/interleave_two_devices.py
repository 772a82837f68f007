"""Run the awaited-copy kernel on two devices with one interleaving forced: device 1's
copying thread pauses right after its SMEM write until device 0 has finished its grid
(its closing device barrier), so device 0's per-cluster reset lands between device 1's
write and its copy of that buffer. Prints one JSON line.

    python tests/interleave_two_devices.py traced|plain

"plain" runs JAX alone (`detect_races=True`), "traced" under `pv.trace`. Run in a fresh
process: the 2 CPU devices are requested here, before JAX initialises.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import threading

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import jax  # noqa: E402
from jax._src.pallas.mosaic_gpu.interpret import shared_memory as smm  # noqa: E402
from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: E402

from pallas_viz.examples import shapes as sh  # noqa: E402

HOLD_S = 30.0
SMEM = smm.IDX_BY_GPU_MEMORY_SPACE[plgpu.SMEM]
cls = smm.GPUSharedMemory
closed = {0: 0, 1: 0}
device0_done = threading.Event()
held: list[bool] = []  # whether the pause ended because device 0 was done


def _device_barrier(orig):
    def update_clocks_for_device_barrier(sm, device, *args, **kwargs):
        out = orig(sm, device, *args, **kwargs)
        d = int(device.device_id)
        closed[d] += 1
        if d == 0 and closed[d] == 2:  # opening barrier, then the closing one
            device0_done.set()
        return out

    return update_clocks_for_device_barrier


def _swap(orig):
    def swap_buffer_content(sm, key, *args, **kwargs):
        out = orig(sm, key, *args, **kwargs)
        # device 1's first write to SMEM (`buf[...] = ...`, a swap): the write the copy reads
        if int(key.device_id) == 1 and int(key.memory_space_id) == SMEM and not held:
            held.append(device0_done.wait(HOLD_S))
        return out

    return swap_buffer_content


def main(mode: str) -> None:
    cls.update_clocks_for_device_barrier = _device_barrier(
        cls.update_clocks_for_device_barrier)
    cls.swap_buffer_content = _swap(cls.swap_buffer_content)
    result = {"held": None, "race": False, "findings": [], "error": None}
    if mode == "plain":
        fn, args = sh.launch(sh.awaited_copy, "two_devices",
                             params=plgpu.InterpretGPUParams(detect_races=True))
        printed = io.StringIO()  # JAX 0.11 prints its race report and runs on
        try:
            with contextlib.redirect_stdout(printed):
                jax.block_until_ready(fn(*args))
        except Exception as e:  # noqa: BLE001 - 0.12 raises its race report
            result["error"] = str(e)
        result["race"] = "RACE DETECTED" in (result["error"] or "") + printed.getvalue()
        result["error"] = result["error"] and result["error"][:600]
    else:
        fn, args = sh.launch(sh.awaited_copy, "two_devices")
        tr, _ = sh.run_traced(fn, args, timeout_s=HOLD_S + 10, detect_races=True)
        result["findings"] = [[f.kind, f.source.line if f.source else None, f.message]
                              for f in tr.findings]
        result["race"] = any(f.kind == "race" for f in tr.findings)
    result["held"] = held[0] if held else None
    print(json.dumps(result), flush=True)
    os._exit(0)  # a failed plain run leaves JAX's atexit effects barrier to raise again


if __name__ == "__main__":
    main(sys.argv[1])
