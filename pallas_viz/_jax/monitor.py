"""Barrier operations, the deadlock checks and Ctrl-C while a kernel is interpreted.

`BarrierWaits` wraps `Barrier.arrive`/`Barrier.wait` (a `ClusterBarrier` arrives
and waits through the `Barrier` of each block) and records every arrival, wait
start and wait end as a `BarrierOp` (who, which barrier allocation and phase,
which line). It also keeps, per kernel, which threads have finished and which
wait, and stops a kernel the moment it deadlocks: when every thread of a device's
running cluster has either finished or waits for a barrier phase that has not
completed, nothing can arrive any more (the interpreter executes TMA copies and
tcgen05 commits eagerly, inside the issuing thread's callback), so the waits can
never end. The check only declares a deadlock when that is certain: a thread not
started yet, a thread between callbacks, or a warpgroup running its warps counts
as running.

A monitor thread stops a kernel that made no progress for `timeout_s` while some
thread waits on a barrier (the fallback for waits the check cannot see), and
aborts the kernel when SIGINT arrives (a Python signal handler alone cannot: the
main thread waits inside the interpreter's thread pool for threads that wait
forever). All go through the interpreter's own failure path,
`set_failed(..., top_level=False)`.
"""

from __future__ import annotations

import dis
import functools
import os
import select
import signal
import sys
import threading
import time
import types

from . import device_reset

# Seconds between watchdog checks (at most; shorter for short timeouts).
_TICK = 0.25

# The memory's buffer accesses: each records its thread's last line (`_wrap_access`).
_ACCESSES = ("get_buffer_content", "store_buffer_content", "swap_buffer_content")
# Who called `Barrier.arrive` (the caller's function name) -> how the arrival came.
_ARRIVE_VIA = {
    "_barrier_arrive": "thread",  # plgpu.barrier_arrive / try_cluster_cancel
    "arrive": "thread",  # ClusterBarrier.arrive, from _barrier_arrive
    "_named_barrier": "named",
    "post_write": "copy",  # a TMA copy GMEM -> SMEM completing
    "__call__": "mma",  # tcgen05_mma with a barrier
    "f": "commit",  # tcgen05_commit_arrive
}
_WAIT_VIA = {"_barrier_wait": "thread", "wait": "thread", "_named_barrier": "named"}
# The interpreter's barrier look-ups by key (a `KeyError` from one: `record_missing`),
# and the callbacks that call them -> the operation they are about to do.
_LOOKUPS = ("get_barrier_and_increment_clock", "get_barrier")
_LOOKUP_OP = {"_barrier_wait": "wait", "_barrier_arrive": "arrive", "__init__": "arrive",
              "tcgen05_mma": "arrive", "f": "arrive"}


class DeadlockError(TimeoutError):
    """The error a stopped kernel fails with (the interpreter's waiters re-raise it)."""


def _key_tuple(key) -> tuple:
    return (int(key.memory_space_id), int(key.device_id), int(key.block_id),
            int(key.thread_id), int(key.initial_ref_count), int(key.buffer_id))


def _owner_key(resource: str, key) -> tuple | None:
    """An allocation key as a tuple; a named barrier's (device, block, id) as is."""
    if key is None:
        return None
    return tuple(key) if resource == "named_barrier" else _key_tuple(key)


def _block_of(mesh_location):
    if mesh_location is None:
        return None
    return tuple(mesh_location.cluster_coords) + tuple(mesh_location.block_coords)


# How many frames above `GPUSharedMemory.kernel_thread_finished` `_exit_mesh` looks.
_EXIT_FRAMES = 4


def _exit_mesh(frame, thread):
    """The `MeshLocation` of the thread whose end `frame` (the caller of
    `GPUSharedMemory.kernel_thread_finished`) reports, or None (then the exit is
    recorded without a block, as before). JAX's callback
    `gpu_callbacks.kernel_thread_finished(*, token, mesh_location, thread)` deletes its
    `mesh_location`; the keyword arguments it was called with are still held by the
    frame that called it (`fail_on_exception`'s wrapper in 0.12; io_callback's where
    there is no such wrapper). Taken only if that call is about `thread` itself. Runs
    once per thread exit, and only when no barrier operation of its block named it."""
    for _ in range(_EXIT_FRAMES):
        if frame is None:
            return None
        loc = frame.f_locals
        kw = loc.get("kwargs")
        for d in (loc, kw if isinstance(kw, dict) else None):
            if d is None:
                continue
            mesh = d.get("mesh_location")
            if (mesh is not None and d.get("thread") is thread
                    and hasattr(mesh, "cluster_coords") and hasattr(mesh, "block_coords")):
                return mesh
        frame = frame.f_back
    return None


# How many warps `plgpu.WarpMesh` runs per warpgroup (JAX's `_NUM_WARPS_PER_WARPGROUP`).
_WARPS_PER_WARPGROUP = 4
# The name of a thread of a `ThreadPoolExecutor` (which JAX's `thread_map` makes per call,
# one per warpgroup's warp-level code): "ThreadPoolExecutor-<pool>_<worker>".
_POOL_PREFIX = "ThreadPoolExecutor-"


def _pool_of(thread) -> str | None:
    """The pool a `ThreadPoolExecutor` worker belongs to (None for another thread)."""
    name = thread.name
    if not name.startswith(_POOL_PREFIX):
        return None
    return name.rpartition("_")[0]


@functools.cache
def _thread_map_module():
    """JAX's `thread_map` (it runs warp-level code), or None."""
    try:
        from jax._src.pallas.mosaic.interpret import thread_map
    except ImportError:  # pragma: no cover - both supported versions have it
        return None
    return thread_map


def _wg_key(thread) -> tuple:
    """(device, flat block in the cluster, warpgroup) of a `Warpgroup` or `Warp`."""
    return (thread.device_id, thread.block_id, thread.warpgroup_id)


@functools.lru_cache(maxsize=8)
def _replaces_clocks(reset) -> bool:
    """Whether JAX's `reset_per_cluster_state` assigns `self.clocks` anew (0.11, 0.12): then
    a new `sm.clocks` object marks each new grid step. (Answered once per function: every
    trace's start asks, and taking its code apart costs a third of a millisecond.)"""
    code = getattr(reset, "__code__", None)
    if code is None or not device_reset.fits(reset):
        return False
    return any(i.opname == "STORE_ATTR" and i.argval == "clocks"
               for i in dis.get_instructions(code))


def _observed_phase(bar, thread) -> int | None:
    """The phase `thread` waits for next on `bar` (as `Barrier._wait` computes it); call
    with `bar.cv` held. None if the wait will raise instead (it joined too late)."""
    seen = bar.last_observed_phase_by_thread
    p = seen.get(thread)
    if p is None and hasattr(thread, "warp_id"):
        p = seen.get(thread.warpgroup())
    if p is None:
        return None if bar.phase > 1 else 0
    return p


def _desc(st, resource: str, key, part, owner) -> tuple:
    """What a barrier operation's record keeps of its barrier: (resource, part, key tuple,
    (kernel, resource, key tuple) or None, the cluster's dims for a part). Made once per
    barrier object; no reference to the interpreter's objects (a record outlives them)."""
    kt = _owner_key(resource, key)
    named = resource == "named_barrier"
    dims = tuple(owner.axes_dims[:-1]) if part is not None else None
    return (resource, part, kt, None if kt is None or named else (st.kernel, resource, kt),
            dims)


def _freed(hit) -> bool:
    """Whether the allocation of a barrier `_owner` found is gone: JAX drops a barrier
    or cluster barrier from its memory exactly when its ref count reaches 0 (under the
    memory lock), and makes a new object for a new allocation under the same key; a
    named barrier lives as long as its kernel. (A read of one int: the key's hash and
    equality are Python code.)"""
    return hit[0] != "named_barrier" and hit[3].ref_count == 0


def _decode_waited(row, allocation_at) -> tuple:
    """A wait's end (`BarrierWaits._wrap_wait`: its step, this function, the wait's own
    row, freed) in `BarrierOp` field order: the wait's fields, with all its arrivals."""
    step, _, w, freed = row
    return _decode_op((step, None, w[2], "waited", *w[4:10], w[11], *w[11:14], freed, w[15]),
                      allocation_at)


def _decode_op(row, allocation_at) -> tuple:
    """A raw barrier-operation row (`BarrierWaits._op`) in `BarrierOp` field order
    (`allocation_at`: `Recorder.allocation_at`)."""
    (step, _, kernel, op, desc, device, block, wg, warp, phase, arrivals, n, completes, via,
     freed, src) = row
    resource, part, kt, live_key, dims = desc
    alloc = -1 if live_key is None else allocation_at(live_key, step, freed)
    target = None
    if part is not None and block is not None:
        coords, rest = [], part
        for d in reversed(dims):
            coords.append(rest % d)
            rest //= d
        # (the block's cluster coordinates, then the part's within the cluster)
        target = tuple(block[:len(block) - len(dims)]) + tuple(reversed(coords))
    named = resource == "named_barrier"
    return (step, kernel, op, resource, device, block, wg, warp, alloc, part, target, phase,
            arrivals, n, completes, via, freed, None if named else kt,
            kt[2] if named and kt is not None else None, src)


class _KernelState:
    """What the deadlock check knows of one running kernel (one `GPUSharedMemory`)."""

    def __init__(self):
        # (no reference to its memory, which holds it: a cycle would keep the interpreter's
        # whole memory alive until the garbage collector found it)
        self.finished: set[tuple] = set()  # _wg_key of warpgroups that finished this step
        # id(thread) -> (Barrier, phase waited for, owner info, logging_info, thread), while
        # it waits
        self.waits: dict = {}
        # id(Barrier) -> (resource, key, part, owner, desc): `BarrierWaits._owner`
        self.owners: dict[int, tuple] = {}
        # (device, flat block in the cluster) -> its `MeshLocation` (`_block_of`: its
        # coordinates), this grid step
        self.blocks: dict[tuple, tuple] = {}
        # (device, block id, warpgroup, warp or None) of a thread -> (step, logging_info) of
        # its last buffer access or barrier operation (a plain tuple, hashed in C: the
        # interpreter's thread objects hash and compare in Python, a few times slower).
        # One entry per thread, replaced at each access: the interpreter makes a logging
        # info (with its thread and mesh location) per call, and every one kept until
        # later would be objects the garbage collector counts and promotes (measured:
        # a list of them, folded in when read, cost more in collections than it saved)
        self.last: dict = {}
        self.stopped = False
        self.kernel = -1  # numbered by `BarrierWaits.begin`, before any thread runs
        # warpgroups in a device's cluster (`begin`): a deadlock needs as many to wait or
        # to have finished (`may_deadlock`)
        self.cells = 0
        # The per-step tables above (finished, blocks, last) belong to the grid step whose
        # vector clocks are `step`: JAX's per-cluster reset replaces `sm.clocks` at every
        # new step, so with one device no hook on the reset is needed (`sync`). `scoped`:
        # a reset hook clears them instead (several devices, or a JAX whose reset does not
        # replace the clocks).
        self.step = None
        self.scoped = False
        self._lock = threading.Lock()

    def may_deadlock(self) -> bool:
        """False if too few threads wait or finished for every one of a cluster to (a
        necessary condition for the check, read without a lock: the tables may count
        warps, other devices and the step before, only ever more)."""
        return len(self.waits) + len(self.finished) >= self.cells

    def sync(self, sm) -> None:
        """Start the per-step tables afresh if a new grid step began since they were
        written (its reset replaced the clocks). Every reader and writer calls it first;
        the threads of a step run only after the step before it has finished."""
        clocks = sm.__dict__.get("clocks")
        if clocks is self.step:
            return
        if self.scoped:  # a reset hook clears the tables; the check stays cheap
            self.step = clocks
            return
        with self._lock:
            if clocks is not self.step:
                self.new_step()
                self.step = clocks

    def new_step(self) -> None:
        """A new grid step: its threads start afresh (no one finished, no lines yet)."""
        self.finished.clear()
        self.blocks.clear()
        self.last.clear()

    def clear(self) -> None:
        """Drop what the state holds of the run (barriers, threads, their lines)."""
        for table in (self.finished, self.waits, self.owners, self.blocks, self.last):
            table.clear()
        self.step = None


class BarrierWaits:
    """Records barrier operations and finds deadlocks (see the module docstring).

    Wraps `Barrier.arrive`/`wait` (and, when bound to a recorder, the memory's
    `kernel_thread_finished`, buffer accesses and barrier look-ups, and the per-cluster
    reset of a kernel on several devices: with one device, the vector clocks that reset
    replaces tell one grid step from the next, `_KernelState.sync`). An
    arrival holds the interpreter's memory lock (re-entrant, see `hooks`) and the
    barrier's across the original call, so its phase and count are read with it as one
    step; a wait reads its phase under the barrier's lock only, and a thread's exit and a
    new grid step take no lock: their bookkeeping is single dict/set/list operations,
    atomic under the GIL. The deadlock check alone runs under the memory lock, reading
    copies of what those change. Per operation it costs a frame look-up and a tuple
    append.
    `waiting` (id(thread) -> (barrier or cluster barrier, logging_info, thread), while it
    waits) and `arrivals` are what the watchdog reads.
    """

    def __init__(self, gsm, recorder=None):
        self.gsm = gsm
        self.classes = [c for c in (getattr(gsm, "Barrier", None),
                                    getattr(gsm, "ClusterBarrier", None)) if c is not None]
        self.waiting: dict = {}  # id(thread) -> (barrier object, logging_info, thread)
        self.arrivals = 0
        self.recorder = recorder
        self.monitor = None
        self.detect = True  # the wait-for deadlock check (on unless set False)
        self._originals: list = []
        self._states: list[_KernelState] = []  # every kernel's, for `dispose`
        self._reset = None  # JAX's reset, when the clocks it replaces mark the grid steps
        # Warp-level code: JAX runs a warpgroup's warps as the tasks of a thread pool of
        # its own (`thread_map`), and reports no warp's end. The pool's tasks, by pool:
        # (started, ended) lists (appends are atomic); the pool of each waiting warp.
        self.warp_tasks: dict[str, tuple[list, list]] = {}
        self.warp_pool: dict[int, str] = {}  # id(warp) -> its pool, while it waits
        self._thread_map = None  # (module, its original `_run_jaxpr`) while hooked

    def bind(self, recorder, monitor=None) -> None:
        """Record into `recorder`; report deadlocks found by the check through `monitor`."""
        self.recorder = recorder
        self.monitor = monitor

    def install(self) -> None:
        bar = getattr(self.gsm, "Barrier", None)
        targets = []
        if bar is not None:
            targets += [(bar, "wait", self._wrap_wait), (bar, "arrive", self._wrap_arrive)]
        sm_cls = getattr(self.gsm, "GPUSharedMemory", None)
        if sm_cls is not None and self.recorder is not None:
            reset = getattr(sm_cls, "reset_per_cluster_state", None)
            # one device: the replaced clocks mark each new grid step (no hook per step);
            # several devices get the hook on their memory (`begin`)
            self._reset = reset if reset is not None and _replaces_clocks(reset) else None
            targets += [(sm_cls, "kernel_thread_finished", self._wrap_finished),
                        (sm_cls, "update_clocks_for_device_barrier",
                         self._wrap_device_barrier)]
            targets += [(sm_cls, name, self._wrap_access) for name in _ACCESSES]
            if self._reset is None:
                targets.append((sm_cls, "reset_per_cluster_state", self._wrap_reset))
        for cls, name, wrap in targets:
            if not hasattr(cls, name):
                continue
            orig = getattr(cls, name)
            self._originals.append((cls, name, orig, name in cls.__dict__))
            setattr(cls, name, wrap(orig))
        if self.recorder is not None:
            tm = _thread_map_module()
            run = getattr(tm, "_run_jaxpr", None) if tm is not None else None
            if run is not None:
                self._thread_map = (tm, run)  # recorded before it is replaced
                tm._run_jaxpr = self._wrap_task(run)

    def originals_for(self, cls) -> dict:
        """name -> the original of each method of `cls` (or a base of it) hooked now."""
        return {name: orig for c, name, orig, _ in self._originals if issubclass(cls, c)}

    def remove(self) -> None:
        if self._thread_map is not None:
            tm, run = self._thread_map
            tm._run_jaxpr = run
            self._thread_map = None
        for cls, name, orig, own in reversed(self._originals):
            if own:
                setattr(cls, name, orig)
            elif name in cls.__dict__:
                delattr(cls, name)
        self._originals.clear()
        self.waiting.clear()
        self.warp_tasks.clear()
        self.warp_pool.clear()

    def begin(self, sm, kernel: int, num_devices: int) -> None:
        """A kernel's memory was made (its `__init__` hook, before any thread runs): its
        state, and with several devices the hook on its per-cluster reset."""
        st = self._state(sm)
        st.kernel = kernel
        st.cells = int(getattr(sm, "num_pallas_threads_per_block", 0)) * int(
            getattr(sm, "num_blocks_per_cluster", 0))
        # One device, one warpgroup per cluster: when that thread ends, no other thread
        # of its cluster can wait (the deadlock check at a thread's exit finds nothing),
        # and no analysis reads its exit (a wait of a kernel cut short never ends only
        # in the thread that waits, which did not finish). JAX (0.11, 0.12) reports the
        # end of the kernel body for warpgroups only, never for a warp, so such a
        # kernel's exits are not recorded at all: its memory calls JAX's own
        # `kernel_thread_finished` (a kernel with a grid calls it once per grid step).
        # Nor is its last line read (`_where_is` is asked only about the other threads
        # of a cluster): its buffer accesses call JAX's methods too.
        solo = num_devices == 1 and st.cells == 1
        if solo:
            for name, orig in self.originals_for(type(sm)).items():
                if name in _ACCESSES or name == "kernel_thread_finished":
                    object.__setattr__(sm, name, types.MethodType(orig, sm))
        if self._reset is not None and num_devices > 1:
            st.scoped = True
            object.__setattr__(sm, "reset_per_cluster_state",
                               types.MethodType(self._wrap_reset(self._reset), sm))

    def dispose(self) -> None:
        """After the trace: let go of the kernels' states and of the monitor, so that
        nothing of the run is kept in reference cycles (the garbage collector would have
        to find them: time taken from whatever runs next)."""
        for st in self._states:
            st.clear()
        self._states.clear()
        # (a wrapper can outlive the trace, bound in an interpreter object the run left
        # in a cycle of its own: without a recorder it calls the original, as before bind)
        self.monitor = self.recorder = None

    def abort_waits(self, sm) -> None:
        """After `sm`'s kernel failed: abort every barrier one of its threads still waits
        on. JAX's failure aborts only the barriers still allocated; a wait on one that was
        freed meanwhile (warps that free a barrier their warpgroup shares) would never
        end, and the kernel would hang instead of raising its failure."""
        for bar, _, _ in list(self.waiting.values()):
            parts = getattr(bar, "barriers", None) or [bar]
            if getattr(parts[0], "shared_memory", None) is sm:
                bar.abort()

    # -- per-kernel state, called with the memory lock held
    def _state(self, sm) -> _KernelState:
        st = getattr(sm, "_pallas_viz_barriers", None)
        if st is None:
            st = _KernelState()
            st.scoped = self._reset is None  # the class-level reset hook clears it
            object.__setattr__(sm, "_pallas_viz_barriers", st)
            self._states.append(st)
        return st

    def _owner(self, sm, st: _KernelState, bar) -> tuple[tuple, bool]:
        """((resource, key, part, owner, desc), freed) of a `Barrier` object not seen
        before (`_op` reads the ones seen from `st.owners`, by id: the owner kept there
        keeps the object alive, so its id stays its own); `desc` (`_desc`) is what its
        records keep of it."""
        mem = sm.mem
        hit = None
        # (copies: other threads may allocate meanwhile)
        for nkey, b in list(getattr(sm, "named_barriers", {}).items()):
            if b is bar:  # nkey: (device, flat block, barrier id)
                hit = ("named_barrier", tuple(nkey), None, bar)
                break
        else:
            for key, v in list(mem.items()):
                if v is bar:
                    hit = ("barrier", key, None, v)
                    break
                parts = getattr(v, "barriers", None)
                if parts is not None and type(v).__name__ == "ClusterBarrier":
                    for i, b in enumerate(parts):
                        if b is bar:
                            hit = ("cluster_barrier", key, i, v)
                            break
                    if hit is not None:
                        break
        if hit is None:
            return ("barrier", None, None, bar, _desc(st, "barrier", None, None, None)), True
        hit = (*hit, _desc(st, *hit))
        st.owners[id(bar)] = hit
        return hit, False

    def _op(self, sm, st, op, bar, thread, li, phase, arrivals, completes, via) -> tuple:
        """Record one barrier operation; returns the owner info (`_owner`) and the row.

        It runs for every arrival and wait, between the interpreter's own steps (its code
        and data out of the processor's caches): it keeps what changes (whether the
        barrier is still allocated, the phase, the counts) and the objects as they are;
        `_decode_op` makes the `BarrierOp` after the run (its allocation: the one live
        under its key at its step). A wait's end is recorded apart (`_decode_waited`)."""
        hit = st.owners.get(id(bar))
        if hit is not None:
            owner, freed = hit, _freed(hit)
        else:
            owner, freed = self._owner(sm, st, bar)
        records = self.recorder.records
        mesh = getattr(li, "mesh_location", None)
        # (its block's coordinates, not the `MeshLocation`: the interpreter makes one per
        # call, and each one a row kept is objects the garbage collector counts)
        block = _block_of(mesh)
        if thread is not None:
            d = thread.__dict__
            device, wg, warp = d["device_id"], d["warpgroup_id"], d.get("warp_id")
            if sm.__dict__.get("clocks") is not st.step:  # a new grid step?
                st.sync(sm)
            if mesh is not None:
                st.blocks[(device, d["block_id"])] = mesh
            if li is not None:  # its last line (`_KernelState.last`)
                st.last[(device, d["block_id"], wg, warp)] = (len(records), li)
        else:
            device, wg, warp = -1, -1, None
        row = (len(records), _decode_op, st.kernel, op, owner[4], device, block, wg, warp, phase,
               arrivals, bar.num_arrivals, completes, via, freed,
               getattr(li, "source_info", None))
        self.recorder.barrier_op_rows.append(row)
        return owner, row

    # -- wrappers
    def _wrap_arrive(self, orig):
        waits = self

        # (JAX's signature, 0.11 and 0.12: its arguments are named without a dict)
        def arrive(bar, thread=None, clock=None, logging_info=None, *args, **kwargs):
            waits.arrivals += 1
            sm = getattr(bar, "shared_memory", None)
            if waits.recorder is None or sm is None:
                return orig(bar, thread, clock, logging_info, *args, **kwargs)
            via = _ARRIVE_VIA.get(sys._getframe(1).f_code.co_name, "thread")
            # The memory lock across the arrival and its record: every arrival comes
            # through here and takes it, and nothing else changes a barrier's phase or
            # count, so they are read with the arrival as one step (without the barrier's
            # own lock: the original takes it).
            with sm.lock:
                phase, count = bar.phase, bar.arrivals_count
                try:
                    return orig(bar, thread, clock, logging_info, *args, **kwargs)
                finally:
                    waits._op(sm, sm.__dict__.get("_pallas_viz_barriers") or waits._state(sm),
                              "arrive", bar, thread, logging_info, phase, count + 1,
                              bar.phase != phase, via)

        return arrive

    def _wrap_wait(self, orig):
        waits = self

        def wait(bar, thread, logging_info=None, *args, **kwargs):
            li = logging_info
            sm = getattr(bar, "shared_memory", None)
            tid = id(thread)  # (its hash and equality are Python code; it is alive here)
            if waits.recorder is None or sm is None:
                waits.waiting[tid] = (bar, li, thread)
                try:
                    return orig(bar, thread, li, *args, **kwargs)
                finally:
                    waits.waiting.pop(tid, None)
            via = _WAIT_VIA.get(sys._getframe(1).f_code.co_name, "thread")
            # The phase is read under the barrier's lock; the bookkeeping needs no lock
            # (each step is atomic under the GIL, and the thread is marked waiting before
            # its check reads who waits: of two threads that start to wait at once, the
            # later one's check sees both). Only the deadlock check takes the memory lock,
            # never while the barrier's lock is held (the interpreter's lock order).
            st = getattr(sm, "_pallas_viz_barriers", None) or waits._state(sm)
            cv = bar.cv
            cv.acquire()  # (the condition's lock's own method: `with` is Python code)
            try:
                p = _observed_phase(bar, thread)
                count, now = bar.arrivals_count, bar.phase
            finally:
                cv.release()
            blocked = p is not None and p == now
            # (a thread joining after phases it never observed raises in JAX's wait: its
            # first wait is for phase 0 in program order, not for the barrier's phase now)
            owner, row = waits._op(sm, st, "wait", bar, thread, li,
                                   0 if p is None else p, count, blocked, via)
            if thread.__dict__.get("warp_id") is not None:  # a warp: its pool's name
                waits.warp_pool[tid] = _pool_of(threading.current_thread())
            waits.waiting[tid] = (owner[3], li, thread)
            st.waits[tid] = (bar, p, owner, li, thread)
            if blocked and st.may_deadlock():
                with sm.lock:
                    waits._check_deadlock(sm, st, thread.device_id)
            ok = False
            try:
                out = orig(bar, thread, li, *args, **kwargs)
                ok = True
                return out
            finally:
                waits.waiting.pop(tid, None)
                st.waits.pop(tid, None)
                waits.warp_pool.pop(tid, None)
                if ok:  # its end: the wait's row, its step and whether the barrier is freed
                    # (its block and last line are the wait's: it recorded nothing since)
                    waits.recorder.barrier_op_rows.append((
                        len(waits.recorder.records), _decode_waited, row,
                        _freed(owner) if st.owners.get(id(bar)) is owner else True))

        return wait

    def _wrap_task(self, orig):
        """`thread_map._run_jaxpr`: one task of a pool (a warp of warp-level code, or a
        thread the interpreter starts): counted per pool; at its end, the wait-for check
        runs if a thread waits (the warp that ended may have been the last one running)."""
        waits = self

        def _run_jaxpr(*args, **kwargs):
            pool = _pool_of(threading.current_thread())
            if pool is None:
                return orig(*args, **kwargs)
            tasks = waits.warp_tasks.get(pool)
            if tasks is None:
                tasks = waits.warp_tasks.setdefault(pool, ([], []))
            tasks[0].append(None)
            try:
                return orig(*args, **kwargs)
            finally:
                tasks[1].append(None)
                if waits.warp_pool:  # a warp waits: is it stuck for good now?
                    waits._check_warps()
                if len(tasks[1]) == len(tasks[0]) == _WARPS_PER_WARPGROUP:
                    waits.warp_tasks.pop(pool, None)  # every warp of it ended: done

        return _run_jaxpr

    def _check_warps(self) -> None:
        for bar, _li, thread in list(self.waiting.values()):
            sm = getattr(bar, "shared_memory", None)
            st = getattr(sm, "_pallas_viz_barriers", None) if sm is not None else None
            if st is None or not st.may_deadlock():
                continue
            with sm.lock:
                self._check_deadlock(sm, st, thread.device_id)
            return

    def _wrap_finished(self, orig):
        waits = self
        # appends to `Recorder.thread_exits` (its layout is described there): this runs
        # once per thread and grid step
        exits, records = self.recorder.thread_exits, self.recorder.records
        # thread class -> (a warpgroup: it counts as finished; it has a warp id)
        kinds: dict[type, tuple[bool, bool]] = {}

        def kernel_thread_finished(sm, thread, *args, **kwargs):
            # The original takes the memory lock itself; the bookkeeping below does not
            # need it (each step is one atomic operation under the GIL): the thread is
            # marked finished before `waits` is read, and a thread that starts to wait
            # marks itself waiting before its own check reads `finished`, so one of the
            # two checks sees both. Only the check itself takes the lock.
            out = orig(sm, thread, *args, **kwargs)
            kind = kinds.get(type(thread))
            if kind is None:
                has_warp = hasattr(thread, "warp_id")
                kind = kinds[type(thread)] = (
                    hasattr(thread, "warpgroup_id") and not has_warp, has_warp)
            st = getattr(sm, "_pallas_viz_barriers", None) or waits._state(sm)
            device, block_id, wg = thread.device_id, thread.block_id, thread.warpgroup_id
            if sm.__dict__.get("clocks") is not st.step:  # a new grid step?
                st.sync(sm)
            if kind[0]:
                st.finished.add((device, block_id, wg))
            # its block: known from its block's barrier operations this grid step, else
            # from the `MeshLocation` the interpreter passed to the callback reporting
            # the exit (a thread can finish before its block's first barrier operation)
            where = (device, block_id)
            mesh = st.blocks.get(where)
            if mesh is None:
                mesh = _exit_mesh(sys._getframe(1), thread)
                if mesh is not None:
                    st.blocks[where] = mesh
            kernel = st.kernel
            exits.extend((len(records), kernel, device, _block_of(mesh), wg,
                          thread.warp_id if kind[1] else None))
            if st.waits and st.may_deadlock():  # else the check finds nothing
                with sm.lock:
                    waits._check_deadlock(sm, st, device)
            return out

        return kernel_thread_finished

    def _wrap_reset(self, orig):
        waits = self
        scoped = device_reset.fits(orig)

        def reset_per_cluster_state(sm, *args, **kwargs):
            st = getattr(sm, "_pallas_viz_barriers", None) or waits._state(sm)
            # JAX calls this from `__init__` and when a device's cluster has finished; with
            # several devices the others may still run: reset only the finished one's
            # state (see `device_reset`), ours too.
            device = None
            if scoped and not args and not kwargs and device_reset.num_devices(sm) > 1:
                device = device_reset.calling_device(sm, st.finished)
            if device is None:
                out = orig(sm, *args, **kwargs)
                st.new_step()
                return out
            device_reset.reset_device(sm, device)
            st.finished.difference_update([k for k in list(st.finished) if k[0] == device])
            for table in (st.blocks, st.last):
                for k in [k for k in list(table) if k[0] == device]:
                    table.pop(k, None)
            return None

        return reset_per_cluster_state

    def _wrap_device_barrier(self, orig):
        def update_clocks_for_device_barrier(sm, device, *args, **kwargs):
            device_reset.note_device_thread(sm, device)
            return orig(sm, device, *args, **kwargs)

        return update_clocks_for_device_barrier

    def _wrap_access(self, orig):
        records = self.recorder.records

        def access(sm, *args, **kwargs):
            # a thread's last line (for a deadlock report), no lock: each thread writes
            # its own entry of `_KernelState.last`
            li = kwargs.get("logging_info")
            d = sm.__dict__
            st = d.get("_pallas_viz_barriers")
            if li is not None and st is not None:
                if d.get("clocks") is not st.step:  # a new grid step?
                    st.sync(sm)
                thread = li.thread
                if thread is not None:
                    t = thread.__dict__
                    st.last[(t["device_id"], t["block_id"], t["warpgroup_id"],
                             t.get("warp_id"))] = (len(records), li)
            return orig(sm, *args, **kwargs)

        return access

    def record_missing(self, sm, exception) -> None:
        """If the interpreter failed because a barrier callback named a key that is not
        allocated (any more), record that operation (a look-up's `KeyError`; read from
        its traceback: the look-up's frame and its caller's, as they were when it raised,
        so no look-up needs a wrapper)."""
        if self.recorder is None or not isinstance(exception, KeyError):
            return
        tb, caller = exception.__traceback__, None
        while tb is not None:
            frame = tb.tb_frame
            if frame.f_code.co_name in _LOOKUPS and caller is not None:
                key = frame.f_locals.get("key")
                if key is not None:
                    self._record_missing(sm, key, caller)
                return
            caller, tb = frame, tb.tb_next

    def _record_missing(self, sm, key, frame) -> None:
        op = _LOOKUP_OP.get(frame.f_code.co_name, "arrive")
        loc = frame.f_locals
        thread = loc.get("thread")
        mesh = loc.get("mesh_location")
        src = loc.get("source_info")
        if src is None and hasattr(loc.get("self"), "source_info"):
            src = loc["self"].source_info
        kt = _key_tuple(key)
        with sm.lock:
            st = self._state(sm)
            rec = self.recorder
            resource, alloc = "barrier", rec.freed_allocation(st.kernel, "barrier", kt)
            if alloc < 0:
                c = rec.freed_allocation(st.kernel, "cluster_barrier", kt)
                if c >= 0:
                    resource, alloc = "cluster_barrier", c
            device, wg, warp = (-1, -1, None) if thread is None else (
                thread.device_id, thread.warpgroup_id, getattr(thread, "warp_id", None))
            rec.barrier_op(st.kernel, op, resource, device, _block_of(mesh), wg, warp, alloc,
                           None, None, -1, 0, 0, False,
                           "copy" if frame.f_code.co_name == "__init__" else "thread", True,
                           kt, None, src)

    # -- the wait-for check, with the memory lock held
    def _check_deadlock(self, sm, st: _KernelState, device: int) -> None:
        if not self.detect or st.stopped or sm._failure is not None:
            return
        st.sync(sm)
        if getattr(sm, "dma_execution_mode", "eager") != "eager":
            return  # copies may arrive later: nothing is certain
        blocks = int(getattr(sm, "num_blocks_per_cluster", 1))
        threads = int(sm.num_pallas_threads_per_block)
        by_wg = {}
        by_warps: dict[tuple, list] = {}  # a warpgroup running its warps -> their waits
        for tid, w in list(st.waits.items()):
            thread = w[4]
            if not hasattr(thread, "warp_id"):
                by_wg[_wg_key(thread)] = (thread, w)
            else:
                by_warps.setdefault(_wg_key(thread), []).append(
                    (thread, w, self.warp_pool.get(tid)))
        blocked = []
        for b in range(blocks):
            for t in range(threads):
                k = (device, b, t)
                if k in st.finished:
                    continue
                hit = by_wg.get(k)
                hits = [hit] if hit is not None else self._stuck_warps(by_warps.get(k))
                if not hits:
                    return  # running, between callbacks, not started, or runs its warps
                for _thread, (bar, p, _owner, _li, _) in hits:
                    with bar.cv:
                        if p is None or bar.aborted or bar.phase != p:
                            return  # its phase completed: it goes on
                blocked.extend(hits)
        if not blocked:
            return
        st.stopped = True
        self._stop(sm, st, device, blocked)

    def _stuck_warps(self, warps: list | None) -> list:
        """The waits of a warpgroup's warps if every warp of it has either ended or waits
        (all its pool's tasks started, each one not ended waiting), else []."""
        if not warps:
            return []
        pools = {pool for _, _, pool in warps}
        if len(pools) != 1 or None in pools:
            return []
        started, ended = self.warp_tasks.get(pools.pop(), ((), ()))
        if len(started) != _WARPS_PER_WARPGROUP or len(started) - len(ended) != len(warps):
            return []
        return [(thread, w) for thread, w, _ in warps]

    def snapshot(self, sm) -> list[dict] | None:
        """Every waiting thread with its barrier and who should arrive (for the watchdog's
        report); None if this kernel has no recorded state."""
        with sm.lock:
            st = getattr(sm, "_pallas_viz_barriers", None)
            if st is None or self.recorder is None:
                return None
            st.sync(sm)
            out = [self._waiter(sm, st, w[4], w, certain=False)
                   for w in list(st.waits.values())]
        out.sort(key=lambda w: (w["device"], w["block"] or [], w["thread"],
                                -1 if w["warp"] is None else w["warp"]))
        return out

    def _stop(self, sm, st: _KernelState, device: int, blocked: list) -> None:
        waiters = [self._waiter(sm, st, thread, w, certain=True) for thread, w in blocked]
        waiters.sort(key=lambda w: (w["device"], w["block"] or [], w["thread"],
                                    -1 if w["warp"] is None else w["warp"]))
        self.recorder.deadlock(st.kernel, {"detected_by": "wait_for", "waiters": waiters})
        mon = self.monitor
        if mon is not None:
            mon.deadlocked = True
        who = ", ".join(f"block {w['block']} thread {w['thread']}" for w in waiters)
        exc = DeadlockError(
            "pallas_viz: deadlock: every thread has finished or waits on a barrier that no "
            f"running thread can complete; waiting: {who}")
        object.__setattr__(sm, "_pallas_viz_failed", True)
        sm.set_failed(exc, None, top_level=False)

    def _waiter(self, sm, st: _KernelState, thread, w, certain: bool) -> dict:
        """One waiting thread, its barrier and the threads that should have arrived."""
        bar, p, owner, li, _ = w
        resource, _key, part, _obj, desc = owner
        kt, live_key = desc[2], desc[3]
        alloc = -1 if live_key is None else self.recorder.live_allocation(*live_key)
        with bar.cv:
            arrivals, n = bar.arrivals_count, bar.num_arrivals
        named = resource == "named_barrier"
        out = {
            "device": thread.device_id, "block": _as_list(_block_of(
                getattr(li, "mesh_location", None))),
            "thread": thread.warpgroup_id, "warp": getattr(thread, "warp_id", None),
            "resource": resource, "key": None if kt is None or named else list(kt),
            "barrier_id": kt[2] if named else None,
            "allocation": alloc, "part": part, "source_info": getattr(li, "source_info", None),
            "num_arrivals": n, "arrivals": arrivals, "phase": p,
        }
        out["expects"], out["arrived"] = self._expected(
            sm, st, thread, bar, p, (resource, kt, alloc, part),
            _block_of(getattr(li, "mesh_location", None)), certain)
        return out

    def _expected(self, sm, st, waiter, bar, phase, which, block,
                  certain) -> tuple[list, list]:
        """The threads that should arrive at `bar`'s `phase`, and where each one is; and
        the arrivals the phase got.

        Expected: the threads that arrived at it before, hold its allocation, or should
        have requested it (a collective allocation some threads skipped), less those that
        arrived in this phase and the waiters that never arrived at it.
        """
        rec = self.recorder
        kernel = st.kernel
        device = waiter.device_id
        resource, kt, alloc, part = which
        if alloc >= 0:
            same = [o for o in rec.barrier_ops if o.kernel == kernel and o.device == device
                    and o.allocation == alloc and o.part == part]
        elif resource == "named_barrier":
            same = [o for o in rec.barrier_ops if o.kernel == kernel and o.device == device
                    and o.resource == resource and o.barrier_id == kt[2] and o.block == block]
        else:
            same = []
        arrived_before = {(o.block, o.thread) for o in same
                          if o.op == "arrive" and o.phase < phase}
        arrived_now = {(o.block, o.thread) for o in same
                       if o.op == "arrive" and o.phase == phase}
        ever_arrived = {(o.block, o.thread) for o in same if o.op == "arrive"}
        holders, init_rc, holder_blocks = set(), 0, set()
        if alloc >= 0:
            for r in rec.rows():  # (kernel, op, ..., block 5, thread 6, ..., alloc 17)
                if r[17] == alloc and r[1] in ("create", "join") and r[0] == kernel:
                    holders.add((r[5], r[6]))
                    holder_blocks.add(r[5])
                    init_rc = max(init_rc, r[11])
        missing = set()
        threads = int(sm.num_pallas_threads_per_block)
        if init_rc >= threads:  # a collective allocation: every thread should request it
            for b in holder_blocks:
                missing |= {(b, t) for t in range(threads)} - holders
        waiting_here = {(_block_of(getattr(w[3], "mesh_location", None)), w[4].warpgroup_id)
                        for w in list(st.waits.values()) if w[0] is bar}
        expected = (arrived_before | holders | missing) - arrived_now
        expected -= {x for x in waiting_here if x not in ever_arrived}
        out = []
        for block, t in sorted(expected, key=lambda x: (x[0] or (), x[1])):
            out.append(self._where_is(st, device, block, t, certain))
        arrived = [{"device": o.device, "block": _as_list(o.block), "thread": o.thread,
                    "warp": o.warp, "via": o.via, "source_info": o.source}
                   for o in same if o.op == "arrive" and o.phase == phase]
        return out, arrived

    def _where_is(self, st, device, block, t, certain: bool) -> dict:
        """Where thread `t` of `block` is: "waiting" (on what), "finished" or "running"
        (`certain`: every thread is known to wait or to have finished), and its last line."""
        rec = self.recorder
        for w in list(st.waits.values()):
            thread = w[4]
            if (thread.device_id == device and thread.warpgroup_id == t and
                    _block_of(getattr(w[3], "mesh_location", None)) == block):
                res, _key, part, _obj, desc = w[2]
                on = {"resource": res, "allocation": -1 if desc[3] is None
                      else rec.live_allocation(*desc[3]), "part": part, "phase": w[1]}
                return {"device": device, "block": _as_list(block), "thread": t,
                        "state": "waiting", "waits_on": on,
                        "source_info": getattr(w[3], "source_info", None)}
        flat = next((f for (d, f), m in list(st.blocks.items())
                     if d == device and _block_of(m) == block), None)
        finished = certain or (flat is not None and (device, flat, t) in st.finished)
        # its last line: its last buffer access or barrier operation, or a later
        # allocation request
        last_step, src = 0, None
        for (dev, _, wg, _), (step, li) in list(st.last.items()):
            if (dev == device and wg == t and step >= last_step
                    and _block_of(getattr(li, "mesh_location", None)) == block
                    and getattr(li, "source_info", None) is not None):
                last_step, src = step, li.source_info
        records = rec.rows()
        for i in range(len(records) - 1, last_step - 1, -1):
            r = records[i]
            if (r[0] == st.kernel and r[4] == device and r[5] == block and r[6] == t
                    and r[16] is not None):
                src = r[16]
                break
        return {"device": device, "block": _as_list(block), "thread": t,
                "state": "finished" if finished else "running", "waits_on": None,
                "source_info": src}


def _as_list(block):
    return None if block is None else list(block)


class _Watcher:
    """The daemon thread, one per process, that serves the running trace's `Monitor`.

    Started by the first trace that needs it and kept: a trace only registers its
    monitor (and points the signal wake-up fd at the watcher's pipe), so starting and
    joining a thread is not part of every `trace()`. It sleeps in `select` on the pipe,
    with the monitor's tick while a watchdog timeout is set, else until a signal.
    `lock` is held while it serves a monitor, so once `Monitor.stop` has taken it and
    unregistered, the thread no longer touches that trace.
    """

    def __init__(self):
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        self.rfd, self.wfd = r, w
        self.lock = threading.Lock()
        self.active: Monitor | None = None
        self.pid = os.getpid()
        self.thread = threading.Thread(target=self._run, name="pallas_viz-monitor",
                                       daemon=True)
        self.thread.start()

    def wake(self) -> None:
        try:
            os.write(self.wfd, b"\0")  # no signal is numbered 0
        except OSError:  # pragma: no cover - pipe full: the thread wakes anyway
            pass

    def _run(self) -> None:
        while True:
            m = self.active
            tick = None if m is None else m.tick
            try:
                ready, _, _ = select.select([self.rfd], [], [], tick)
                data = os.read(self.rfd, 512) if ready else b""
            except BlockingIOError:
                data = b""
            except (OSError, ValueError):  # pragma: no cover - the pipe is gone
                return
            with self.lock:
                m = self.active
                if m is None:  # between traces: nothing to serve (as a stopped monitor)
                    continue
                try:
                    signals = data.replace(b"\0", b"")
                    if signals:
                        m._on_signals(signals)
                    if m.timeout_s is not None:
                        m._check_progress()
                except Exception:  # noqa: BLE001 - never let the watcher die
                    pass


_watcher_lock = threading.Lock()
_watcher: _Watcher | None = None


def _get_watcher() -> _Watcher:
    w = _watcher
    if w is None or w.pid != os.getpid() or not w.thread.is_alive():
        # One line: a KeyboardInterrupt can land before the lock is taken or inside the
        # call, never between the call and the release (`with` on several lines has a
        # line of its own on the way out, where an interrupt skips the release).
        with _watcher_lock: w = _new_watcher()  # noqa: E701
    return w


def _new_watcher() -> _Watcher:
    global _watcher
    w = _watcher
    if w is None or w.pid != os.getpid() or not w.thread.is_alive():
        w = _watcher = _Watcher()
    return w


class Monitor:
    """The watchdog / interrupt handling of one `trace()` (served by the `_Watcher`)."""

    def __init__(self, hooks, timeout_s: float | None):
        self.hooks = hooks
        self.timeout_s = timeout_s
        self.tick = None if timeout_s is None else max(0.01, min(_TICK, timeout_s / 10))
        self.interrupted = False
        self.deadlocked = False
        self._watcher: _Watcher | None = None
        # the signal wake-up fd before `start` pointed it at the watcher (None: not set)
        self._old_wakeup_fd: int | None = None
        self._last = 0
        self._last_t = 0.0
        waits = getattr(hooks, "waits", None)
        if isinstance(waits, BarrierWaits):
            waits.bind(hooks.recorder, self)

    # -- life cycle
    def start(self) -> None:
        """Point the signal wake-up fd at the watcher (main thread) and register with it.

        Every step leaves what `stop` needs to undo it: the watcher is kept before it is
        used, the old wake-up fd in the same statement that replaces it."""
        main = threading.current_thread() is threading.main_thread()
        if not main and self.timeout_s is None:
            return  # no signals reach this thread and there is no watchdog: nothing to do
        w = self._watcher = _get_watcher()
        if main:
            try:
                self._old_wakeup_fd = signal.set_wakeup_fd(w.wfd, warn_on_full_buffer=False)
            except (ValueError, OSError):  # pragma: no cover - no signals here
                pass
        if self._old_wakeup_fd is None and self.timeout_s is None:
            return
        self._last, self._last_t = self._progress(), time.monotonic()
        with w.lock: w.active = self  # noqa: E701 - one line (see `_get_watcher`)
        if self.timeout_s is not None:
            w.wake()  # start ticking

    def stop(self) -> None:
        """Restore the signal wake-up fd and unregister; idempotent, and each part runs
        even if the other raised (a KeyboardInterrupt in the middle)."""
        try:
            if self._old_wakeup_fd is not None:
                try:
                    signal.set_wakeup_fd(self._old_wakeup_fd)
                except (ValueError, OSError):  # pragma: no cover - not the main thread
                    pass
                self._old_wakeup_fd = None
        finally:
            w = self._watcher
            if w is not None:
                # waits for the watcher to finish serving this monitor; one line (see
                # `_get_watcher`)
                with w.lock: w.active = None if w.active is self else w.active  # noqa: E701
                self._watcher = None

    @property
    def _catch_sigint(self) -> bool:
        """True while the signal wake-up fd points at the watcher."""
        return self._old_wakeup_fd is not None

    # -- served by the watcher thread, with its lock held
    def _progress(self) -> int:
        return len(self.hooks.recorder.records) + self.hooks.waits.arrivals

    def _check_progress(self) -> None:
        now = time.monotonic()
        p = self._progress()
        sm = self.hooks.running_memory()
        if p != self._last or sm is None or not self.hooks.waits.waiting or (
                sm._failure is not None):
            self._last, self._last_t = p, now
            return
        if now - self._last_t >= self.timeout_s:
            self._stop_deadlock(sm, now - self._last_t)
            self._last_t = now

    def _on_signals(self, data: bytes) -> None:
        old = self._old_wakeup_fd
        if old is not None and old >= 0:
            try:  # whoever listened before us (an event loop) still hears the signal
                os.write(old, data)
            except OSError:
                pass
        if signal.SIGINT in data:
            self.interrupted = True
            sm = self.hooks.running_memory()
            if sm is not None:
                # who waits where when the user gave up on the kernel (most often a hang
                # the wait-for check cannot prove: a thread spinning on memory)
                try:
                    self._record_waiters(sm, {"detected_by": "interrupt"})
                finally:
                    self._abort(sm, RuntimeError(
                        "pallas_viz: the kernel was interrupted (KeyboardInterrupt)"))

    def _abort(self, sm, exception: Exception) -> None:
        with sm.lock:
            if sm._failure is not None:
                return
            # The failure is reported by pallas_viz (deadlock / interrupt), not as an
            # interpreter error: keep the set_failed hook from recording it.
            object.__setattr__(sm, "_pallas_viz_failed", True)
        sm.set_failed(exception, None, top_level=False)

    def _record_waiters(self, sm, record: dict) -> list[dict]:
        """Record `record` with the threads of `sm`'s kernel waiting on barriers now (as a
        stopped kernel's `deadlock` record); nothing if none waits. Returns the waiters."""
        waits = self.hooks.waits
        waiters = waits.snapshot(sm) if isinstance(waits, BarrierWaits) else None
        if waiters is None:
            waiters = self.hooks.snapshot_waiters(sm)
        if not waiters:
            return []
        st = getattr(sm, "_pallas_viz_barriers", None)
        if st is not None:
            st.stopped = True
        self.hooks.recorder.deadlock(getattr(sm, "_pallas_viz_kernel", -1),
                                     {**record, "waiters": waiters})
        return waiters

    def _stop_deadlock(self, sm, idle_s: float) -> None:
        waiters = self._record_waiters(sm, {
            "detected_by": "timeout", "timeout_s": self.timeout_s,
            "idle_s": round(idle_s, 3)})
        if not waiters:
            return
        self.deadlocked = True
        who = ", ".join(f"block {w['block']} thread {w['thread']}" for w in waiters)
        self._abort(sm, TimeoutError(
            f"pallas_viz: no progress for {idle_s:.1f} s (timeout_s={self.timeout_s}); "
            f"waiting on barriers: {who}"))
