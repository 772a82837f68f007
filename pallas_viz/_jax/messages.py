"""What JAX's GPU interpret mode says, read: every pattern of its messages lives here.

Pure regular expressions (importing this needs no JAX), so loaded traces can be
analysed anywhere; when a JAX version words a message differently, this is the one
file to change.
"""

from __future__ import annotations

import re

_KEY = re.compile(r"HostAllocationKey\(([^)]*)\)")

# Errors JAX raises while tracing a kernel, in the order they are tried, each with the fix.
TRACE_ERRORS: tuple[tuple[re.Pattern, str], ...] = tuple((re.compile(p), h) for p, h in (
    (r"must have the thread axis in its collective axes",
     "Pass the thread axis: `pl.run_scoped(..., collective_axes=\"<thread_name>\")`, and "
     "make sure every thread reaches the allocation. If the allocation is inside "
     "warp-level code (a `pl.core_map` over `plgpu.WarpMesh`), move it out instead: a "
     "warp cannot allocate (interpret mode makes its request as its whole warpgroup's), "
     "and every warp can use a buffer its warpgroup allocated."),
    (r"Collective allocations along cluster axes are not supported",
     "Allocate collectively over the thread axis only; share data across the cluster "
     "through cluster barriers or GMEM instead."),
    (r"Collective axis `(?P<name>[^`]*)` not found among axes `\[<object",
     "`{name}` is not an axis an allocation can be collective over, and the kernel has no "
     "named thread axis. If `{name}` is the warp axis of a `plgpu.WarpMesh`: warps cannot "
     "allocate collectively; allocate outside the warp-level code (its warps use their "
     "warpgroup's allocations) and index by warp inside it. Otherwise pass "
     "`thread_name=...` (and `num_threads`) to `plgpu.kernel` and name that axis."),
    (r"Collective axis `(?P<name>[^`]*)` not found among axes `\[(?P<axes>[^\]]*)\]`",
     "`collective_axes` names the kernel's thread axis ({axes} here), and `{name}` is not "
     "it: a grid or cluster axis, or the warp axis of a `plgpu.WarpMesh`, cannot be a "
     "collective axis (warps use their warpgroup's allocations: allocate outside the "
     "warp-level code). Check the spelling too."),
    (r"has_trivial_window\(\)",
     "GPU interpret mode runs a `pallas_call` only with whole-array blocks: a `BlockSpec` "
     "whose block shape and index map tile an operand is not supported. Pass the whole "
     "operands (every block then sees all of them), or write the kernel with "
     "`plgpu.kernel` and a grid, picking each block's tile with `jax.lax.axis_index` of "
     "its grid axis."),
    (r"Only interpret mode is supported on CPU backend",
     "There is no GPU here: JAX runs a Pallas Mosaic GPU kernel on the CPU only in GPU "
     "interpret mode. Pass `interpret=plgpu.InterpretGPUParams()` to `plgpu.kernel` (or "
     "`pl.pallas_call`, `pl.core_map`); pallas_viz records the kernels that run so."),
    (r"run_scoped interpret rule does not support collective axes",
     "The kernel is in JAX's generic interpret mode (`interpret=True`), which cannot run "
     "collective allocations of Mosaic GPU threads: pass "
     "`interpret=plgpu.InterpretGPUParams()` to `plgpu.kernel` (or `pl.pallas_call`, "
     "`pl.core_map`) instead, or run it under `plgpu.force_gpu_interpret_mode()`; "
     "pallas_viz records the kernels that run so."),
    (r"traced for pallas run_scoped",
     "A ref that `pl.run_scoped` allocated was used after its scoped function returned "
     "(kept in a list, a closure or a global, then read or written outside it): the "
     "buffer exists only while that function runs. Move every use of the ref into the "
     "scoped function, or open the scope around the code that uses it."),
    (r"REGS cannot be collective",
     "Accumulators (`plgpu.ACC`, REGS) are per thread: allocate them without "
     "`collective_axes`, in a separate `pl.run_scoped`."),
    (r"cannot be mixed",
     "Split the scope: allocate REGS accumulators in their own `pl.run_scoped`, separate "
     "from the collective SMEM/TMEM allocations."),
))


def allocation_key(text: str) -> dict | None:
    """The integer fields of the first `HostAllocationKey(...)` a message names."""
    m = _KEY.search(text)
    if not m:
        return None
    out = {}
    for part in m.group(1).split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            try:
                out[k.strip()] = int(v.strip())
            except ValueError:
                pass
    return out


def trace_error_hint(text: str) -> str | None:
    """The fix for a known trace-time error, or None if the message is not one (a hint's
    `{name}` fields are filled from the message: the axis it names, the axes there are)."""
    for p, h in TRACE_ERRORS:
        m = p.search(text)
        if m:
            fields = m.groupdict()
            if "axes" in fields:
                fields["axes"] = ", ".join(
                    f"`{a.strip().strip(chr(39)).strip(chr(34))}`"
                    for a in fields["axes"].split(",") if a.strip()) or "none"
            return h.format(**fields) if fields else h
    return None


def is_race_report(text: str) -> bool:
    """JAX's race detection raised (`RACE DETECTED ...`)."""
    return text.startswith("RACE DETECTED")


def is_all_threads_id_error(text: str) -> str | None:
    """"thread_id" / "block_id" if the message is the all-threads allocation guard."""
    if "must be zero when allocating a buffer for all threads" not in text:
        return None
    return "thread_id" if "`thread_id`" in text else "block_id"


def is_barrier_left_allocated(text: str) -> bool:
    """The kernel-end check found a barrier still allocated."""
    return "remains allocated" in text


def is_missed_phase(text: str) -> bool:
    """A barrier's phases and who observed them disagree: a phase completed before a
    thread observed the one before it ("no threads observed phase 0", "missed observing
    phase", "but barrier is already at phase", raised at the arrival that completed it
    or at the late waiter's wait; "had only observed that barrier up to phase", when it
    is freed), or a warpgroup's warps observed different phases."""
    return "arrier" in text and ("observed" in text or "already at phase" in text)


def is_unobserved_at_free(text: str) -> bool:
    """A thread that waits on a barrier had not observed its last completed phases when it
    was freed (JAX 0.11: "When barrier ... was deallocated, thread ... had only observed
    barrier up to phase") or when the thread allocated another barrier after freeing it
    (0.12: "allocated a barrier after deallocating barrier")."""
    return ("was deallocated" in text or "after deallocating barrier" in text) and (
        "had only observed" in text)


def is_cluster_barrier_on_threads(text: str) -> bool:
    """A `plgpu.ClusterBarrier` collective over the thread axis: the interpreter's bare
    `assert not is_axis_collective[-1]` (its line is the message, `silent_failure_text`)."""
    return "assert not is_axis_collective[-1]" in text


def is_wrong_allocation_kind(text: str) -> bool:
    """A key named a buffer where a barrier was expected, or the reverse."""
    return bool(re.search(r"is not a `?(Buffer|Barrier)", text))


def is_unawaited_copy(text: str) -> bool:
    """A thread ended the kernel with an SMEM -> GMEM copy still reading (race detection)."""
    return "copy_smem_to_gmem read-side operations completed" in text


_ON_THREAD = re.compile(r"\s+on thread (Warpgroup|Warp|Thread)\([^)]*\)")


def without_thread(text: str) -> str:
    """The message without the interpreter's `on thread Warpgroup(...)` (which block and
    thread came first varies from run to run; the finding's cell says it)."""
    return _ON_THREAD.sub("", text)


_OBJECT_ID = re.compile(r"\b(barrier) \d{6,}")
# a thread's repr in the interpreter's messages: groups (device, warpgroup)
_WARPGROUP_REPR = (r"Warpgroup\(device_id=(\d+), cluster_id=\d+, block_id=\d+, "
                   r"warpgroup_id=(\d+)\)")
_WARPGROUP = re.compile(_WARPGROUP_REPR)


def stable_text(text: str) -> str:
    """The message without what differs from run to run: the Python object ids it names
    barriers by ("barrier 140623338716720"; the finding's line says which) and the
    device and block of a thread ("Warpgroup(device_id=0, cluster_id=0, block_id=1,
    warpgroup_id=0)" becomes "warpgroup 0": which block of a cluster, or which device,
    failed first varies; the finding's cell says it)."""
    return _WARPGROUP.sub(r"warpgroup \2", _OBJECT_ID.sub(r"\1", text))


_UNOBSERVING = re.compile(rf"thread {_WARPGROUP_REPR} had only observed")


def unobserving_thread(text: str) -> tuple[int, int] | None:
    """(device, warpgroup) of the thread an `is_unobserved_at_free` message says had not
    observed every phase (not the thread that freed the barrier, which varies)."""
    m = _UNOBSERVING.search(text)
    return (int(m.group(1)), int(m.group(2))) if m else None
