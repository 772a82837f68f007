"""The interpreter's own failures, turned into findings with a cell and a line."""

from __future__ import annotations

import numpy as np

from .._jax import messages
from ..model import Failure, Finding, KernelInfo, SourceLocation
from ..store import EventTable
from .frame import CREATE, ERROR, FREE, cell

NONZERO_RUNTIME_HINT = (
    "Allocations for all threads (kernel operands and pallas_call scratch in GMEM) must be "
    "requested with thread_id 0 and block_id 0. Kernel code cannot set these ids: the "
    "interpreter mapped a device-level request to a thread. Check changes to "
    "`call_make_allocation_request_array` or report it against the JAX version in use.")
BARRIER_LEFT_HINT = (
    "A barrier was allocated where only some threads reach it (a thread-dependent branch) "
    "so its ref count never reached zero. Allocate barriers unconditionally, outside "
    "`pl.when(thread == ...)`.")
NOT_A_BUFFER_HINT = (
    "Threads disagree on which allocation a key names: a collective allocation made by only "
    "some threads shifted the others' ids, so one thread's buffer is another's barrier. "
    "Make every thread perform the same collective allocations in the same order.")
UNAWAITED_COPY_HINT = (
    "The copy reads its SMEM buffer asynchronously: wait for it before the kernel (or the "
    "buffer's scope) ends, with `plgpu.wait_smem_to_gmem(0)` after the last "
    "`plgpu.copy_smem_to_gmem` (`wait_read_only=True` is enough to reuse the buffer).")
CLUSTER_ON_THREADS_HINT = (
    "A `plgpu.ClusterBarrier`'s `collective_axes=` may name only cluster axes: the threads "
    "of a block share it through the `pl.run_scoped`'s own `collective_axes=` (the thread "
    "axis there). Remove the thread axis from the `ClusterBarrier`'s `collective_axes=`.")
DEVICES_END_HINT = (
    "On several devices, GPU interpret mode runs its end-of-kernel check when any device "
    "ends its kernel, over every device's memory: a barrier another device still uses fails "
    "the run. Run the kernel on one device to tell whether it leaks this barrier (there the "
    "check runs once the device's own threads are done); if it does not, the failure is "
    "JAX's, to report against the JAX version in use.")
UNOBSERVED_AT_FREE_HINT = (
    "A thread that waits on a barrier must observe every phase it completes before the "
    "barrier is freed (JAX 0.11), or before the thread allocates another barrier (0.12; a "
    "GPU lets the last phases go unobserved): wait once more after the loop (a pipeline's "
    "producer, for the \"empty\" barrier's last phase: `plgpu.barrier_wait(empty)` before the "
    "scope ends), or leave out the arrivals no thread waits for (the consumer's last "
    "`plgpu.barrier_arrive(empty)`).")
GENERIC_HINT = "See the interpreter's message; the cell and line show where it was serving."


def _allocation_rows(table: EventTable, kernel: int, key: dict) -> np.ndarray:
    c = table.columns
    m = (c["kernel"] == kernel) & (c["buffer_id"] == key.get("buffer_id", -10**9))
    if "device_id" in key:
        m &= c["device"] == key["device_id"]
    return np.flatnonzero(m)


def failure_from_record(rec: dict, kernels: list[KernelInfo], resolve) -> Failure:
    kernel = rec.get("kernel")
    src = resolve(rec.get("source_info")) if rec.get("source_info") is not None else None
    cell_ = None
    if rec.get("device") is not None and rec.get("thread") is not None:
        b = rec.get("block")
        cell_ = (int(rec["device"]), None if b is None else tuple(b), int(rec["thread"]))
    req = rec.get("request")
    if req is not None:
        req = {k: (list(v) if isinstance(v, tuple) else v) for k, v in req.items()}
    return Failure(type=rec["type"], message=rec["message"], kernel=kernel, cell=cell_,
                   warp=rec.get("warp"), request=req, source=src, phase="run")


def analyse_failure(ctx) -> list[Finding]:
    """One finding for the root-cause failure of a run, pinned to a cell and a line.

    A race the interpreter raised is reported by the race analysis instead.
    """
    failure, table, kernels = ctx.failure, ctx.table, ctx.kernels
    if failure is None:
        return []
    if ctx.races and messages.is_race_report(failure.message):
        return []
    if failure.phase == "trace":
        return [_trace_finding(failure)]
    k = failure.kernel
    launch = kernels[k].launch if k is not None and 0 <= k < len(kernels) else None
    msg = failure.message.strip().splitlines()[0] if failure.message.strip() else failure.type
    cells = [failure.cell] if failure.cell is not None else []
    events = []
    c = table.columns
    err_rows = np.flatnonzero((c["op"] == ERROR) & (c["kernel"] == (k if k is not None else -2)))
    events.extend(err_rows.tolist())
    related: list[SourceLocation] = []
    source = failure.source
    which = messages.is_all_threads_id_error(failure.message)
    if which is not None:
        req = failure.request or {}
        space = req.get("memory_space") or "GMEM"
        shape = req.get("shape")
        what = f"{space} buffer" + (f" {tuple(shape)} {req.get('dtype')}" if shape else "")
        got = req.get(which)
        message = (f"an allocation for all threads ({what}, a kernel operand) was requested "
                   f"with {which}={got}: {failure.type}: {msg}")
        return [Finding(kind="nonzero_thread_collective", severity="error", message=message,
                        cells=cells, events=events, source=source or launch,
                        related=[launch] if source and launch else [],
                        suggestion=NONZERO_RUNTIME_HINT, kernel=k)]
    hint = GENERIC_HINT
    after = ""  # said after where the interpreter was serving
    key = messages.allocation_key(failure.message)
    if key is not None and k is not None:
        rows = _allocation_rows(table, k, key)
        creates = [r for r in rows.tolist() if c["op"][r] == CREATE]
        frees = {int(c["allocation"][r]) for r in rows.tolist() if c["op"][r] == FREE}
        live = [r for r in creates if int(c["allocation"][r]) not in frees] or creates
        if live:
            r0 = live[-1]
            alloc = int(c["allocation"][r0])
            members = [r for r in rows.tolist() if int(c["allocation"][r]) == alloc]
            src0 = table.source_of(r0)
            if messages.is_barrier_left_allocated(failure.message):
                hint = BARRIER_LEFT_HINT
                cells = sorted({cell(table, r) for r in members})
                source = src0
                if _held_past_another_devices_end(ctx, k, alloc in frees, members):
                    hint = DEVICES_END_HINT
                    after = (f": with several devices the check runs when any device "
                             f"ends, and device {key.get('device_id')} had not finished with "
                             "this barrier then")
            else:
                if src0 is not None:
                    related.append(src0)
                if messages.is_wrong_allocation_kind(failure.message):
                    hint = NOT_A_BUFFER_HINT
            events.extend(members)
    if messages.is_unawaited_copy(failure.message) and source is not None:
        # The thread, not its block: in a cluster, whichever block ends first raises
        # (the cell says which); the message must not vary with that.
        who = f" by {ctx.thread_word(k)} {failure.cell[2]}" if failure.cell else ""
        return [Finding(
            kind="interpreter_error", severity="error",
            message=(f"the SMEM -> GMEM copy at line {source.line}{who} was never awaited: "
                     f"the kernel ended while it still read its SMEM buffer (the "
                     f"interpreter raised {failure.type}: "
                     f"{messages.without_thread(msg)})"),
            cells=cells, events=sorted(set(events)), source=source,
            related=[launch] if launch is not None else [], suggestion=UNAWAITED_COPY_HINT,
            kernel=k)]
    if source is None:
        source = launch
    where = f" (while serving {failure.request.get('callback')})" if (
        failure.request and failure.request.get("callback")) else ""
    if messages.is_unobserved_at_free(failure.message):
        hint = UNOBSERVED_AT_FREE_HINT
        who = messages.unobserving_thread(failure.message)
        if who is not None and failure.cell is not None and who[0] == failure.cell[0]:
            # the thread that missed the phases, in the block of the one that freed it last
            cells = [(who[0], failure.cell[1], who[1])]
    if messages.is_cluster_barrier_on_threads(failure.message):
        hint = CLUSTER_ON_THREADS_HINT
        where += (": a `plgpu.ClusterBarrier` is collective over the thread axis, which the "
                  "interpreter does not allow")
    msg = messages.stable_text(msg)
    return [Finding(kind="interpreter_error", severity="error",
                    message=f"the interpreter raised {failure.type}: {msg}{where}{after}",
                    cells=cells, events=sorted(set(events)), source=source,
                    related=[r for r in related if r != source], suggestion=hint, kernel=k)]


def _held_past_another_devices_end(ctx, kernel: int, freed: bool, members: list[int]) -> bool:
    """Whether the barrier a multi-device kernel's end-of-kernel check found still
    allocated may have been in use, not left (JAX checks every device's memory when any
    device ends): its device freed it later, or the failure cut its block short."""
    info = ctx.kernels[kernel] if 0 <= kernel < len(ctx.kernels) else None
    if info is None or info.num_devices < 2:
        return False
    c = ctx.table.columns
    return freed or any(ctx.cut_short(kernel, int(c["device"][r]), int(c["block"][r]))
                        for r in members)


def trace_failure(exc: BaseException, source: SourceLocation | None,
                  silent: str | None = None, caught: bool = False,
                  in_body: bool = False) -> Failure:
    """The failure of a kernel JAX rejected while tracing it; `silent`: for an exception
    without a message, what it was about (`adapter.silent_failure_text`); `caught`: the
    code in the traced block caught the error; `in_body`: the kernel's own code raised
    it while JAX traced it."""
    message = str(exc) or (f"(no message) raised at {silent}" if silent else "")
    return Failure(type=type(exc).__name__, message=message, kernel=None, cell=None,
                   source=source, phase="trace", caught=caught, in_body=in_body)


def is_known_trace_error(exc: BaseException) -> bool:
    return messages.trace_error_hint(str(exc)) is not None


BODY_ERROR_HINT = (
    "JAX traces a kernel's body before anything runs, and the body's own code raised this "
    "error at the line shown (a shape, dtype, name or argument that does not fit): no block "
    "ran, so there is no grid to show. Fix that line and run the kernel again.")


def _trace_finding(failure: Failure) -> Finding:
    hint = (messages.trace_error_hint(failure.message)
            or (BODY_ERROR_HINT if failure.in_body
                else "JAX rejected the kernel while tracing it; see the message."))
    msg = failure.message.strip().splitlines()[0] if failure.message.strip() else ""
    caught = " (the code in the traced block caught this error)" if failure.caught else ""
    what = ("the kernel's code raised an error while JAX traced it" if failure.in_body
            else "JAX rejected the kernel while tracing it")
    return Finding(kind="trace_error", severity="error",
                   message=f"{what}: {failure.type}: {msg}{caught}",
                   cells=[], events=[], source=failure.source, suggestion=hint, kernel=None)
