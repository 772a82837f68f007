"""The interpreter's per-cluster reset, scoped to the device whose cluster finished.

JAX's GPU interpreter calls `GPUSharedMemory.reset_per_cluster_state` (through
`gpu_callbacks.cluster_finished`) when a device's cluster has finished a grid step, on the
premise that no kernel code runs then. With two or more devices that is false: each
device runs its grid on its own host thread, and the reset replaces the vector clocks,
pending copies, named barriers and register ids of *every* device's threads, the ones
still running included. A running thread then races with itself (JAX reports a read
"not ordered" with that thread's own earlier write, nondeterministically), or finds its
named barrier replaced mid-step.

Under `pv.trace` the reset of a kernel with several devices is scoped: the host thread
that calls it is the one that ran its device's opening device barrier
(`update_clocks_for_device_barrier`, `note_device_thread`), and that device's warpgroups
must all have finished this grid step; then only that device's state is reset, exactly
as JAX resets it. When either check fails, or the installed JAX resets state this module
does not know (`fits`), JAX's own reset runs unchanged. With one device it always does.
"""

from __future__ import annotations

import collections
import threading

# Every name JAX 0.11's or 0.12's `reset_per_cluster_state` reads or assigns: with another,
# the installed JAX resets state `reset_device` would leave alone, and JAX's reset runs.
_KNOWN_NAMES = frozenset({
    "lock", "collections", "defaultdict", "deque", "VectorClock", "vector_clock_size",
    "all_concurrent_threads", "next_tma_thread_id", "next_regs_id", "named_barriers",
    "clocks", "pending_smem_to_gmem_read_clocks", "pending_smem_to_gmem_write_clocks",
    "pipelineable_async_tasks", "next_pipelineable_task_id", "tcgen05_completion_clocks",
    "pending_tmem_stores", "pending_tmem_loads", "reallocation_checker",
    "BarrierReallocationChecker", "set",
})
# Per-thread state kept in dicts keyed by the interpreter's thread objects.
_BY_THREAD = ("next_regs_id", "pipelineable_async_tasks", "tcgen05_completion_clocks",
              "pending_tmem_stores", "pending_tmem_loads")


def fits(reset) -> bool:
    """Whether `reset` (JAX's `reset_per_cluster_state`) resets only what is known here."""
    code = getattr(reset, "__code__", None)
    return code is not None and set(code.co_names) <= _KNOWN_NAMES


def note_device_thread(sm, device) -> None:
    """Record that the calling host thread runs `device`'s part of `sm`'s kernel."""
    owners = sm.__dict__.get("_pallas_viz_device_threads")
    if owners is None:
        owners = {}
        object.__setattr__(sm, "_pallas_viz_device_threads", owners)
    owners[threading.get_ident()] = int(device.device_id)


def num_devices(sm) -> int:
    """How many devices run `sm`'s kernel (counted once per kernel: called every grid step)."""
    n = sm.__dict__.get("_pallas_viz_num_devices")
    if n is None:
        n = len({t.device_id for t in sm.all_concurrent_threads})
        object.__setattr__(sm, "_pallas_viz_num_devices", n)
    return n


def calling_device(sm, finished) -> int | None:
    """The device whose cluster just finished, if it is certain: the calling host thread
    ran that device's opening barrier and all its warpgroups are in `finished`
    ((device, block id, warpgroup) of the warpgroups that finished this step)."""
    owners = sm.__dict__.get("_pallas_viz_device_threads")
    device = owners.get(threading.get_ident()) if owners else None
    if device is None:
        return None
    expected = int(sm.num_blocks_per_cluster) * int(sm.num_pallas_threads_per_block)
    done = sum(1 for k in list(finished) if k[0] == device)
    return device if done == expected else None


def reset_device(sm, device: int) -> None:
    """JAX's per-cluster reset, for the threads of `device` only."""
    with sm.lock:
        mine = [t for t in sm.all_concurrent_threads if t.device_id == device]
        for t in mine:
            sm.clocks[t] = sm.VectorClock(sm.vector_clock_size)
            sm.pending_smem_to_gmem_read_clocks[t] = collections.deque()
            sm.pending_smem_to_gmem_write_clocks[t] = collections.deque()
        for name in _BY_THREAD:
            table = getattr(sm, name)
            for k in [k for k in table if getattr(k, "device_id", None) == device]:
                del table[k]
        # keyed (device, block, barrier id)
        for k in [k for k in sm.named_barriers if k[0] == device]:
            del sm.named_barriers[k]
        checker = getattr(sm, "reallocation_checker", None)  # JAX 0.12 on
        if checker is not None:
            for wg in [w for w in checker.deallocated if w.device_id == device]:
                del checker.deallocated[wg]
            for bid, wgs in list(checker.reallocated.items()):
                wgs.difference_update([w for w in wgs if w.device_id == device])
                if not wgs:
                    del checker.reallocated[bid]
        # The TMA thread and pipelined task counters go on: they only hand out ids.


def earlier_kernel_failure(exc: BaseException) -> str | None:
    """If `exc` is the error JAX raised for a Pallas interpret-mode kernel's failed
    callback (its text holds the interpreter's own traceback), raised where no kernel ran
    (an earlier run's failure JAX kept in its runtime tokens): its innermost
    `SomeError: ...` line, the interpreter's own error. None otherwise."""
    text = str(exc)
    if "CpuCallback error" not in text or "/jax/_src/pallas/" not in text.replace("\\", "/"):
        return None
    lines = [ln.strip() for ln in text.splitlines()]
    found = [ln for ln in lines if ":" in ln and ln.split(":", 1)[0].rsplit(".", 1)[-1]
             .endswith(("Error", "Exception"))]
    return (found[-1] if found else lines[0])[:500]
