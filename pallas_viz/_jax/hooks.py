"""The runtime hooks: wrap `GPUSharedMemory` so every allocation request is recorded.

`hooked()` installs them for the duration of a block and always removes them and
resets the interpreter state, after an exception or KeyboardInterrupt too.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import os
import sys
import threading
import time
import types
import weakref

from ..errors import TraceActiveError
from . import messages, monitor, races
from .axis_names import AxisNames
from .rejections import Rejections
from .sources import caller_location, silent_failure_text
from .version import _HOOKED_METHODS, _import_internals


def _thread_ids(thread):
    """(device, warpgroup, warp) of an interpreter `Warpgroup`/`Warp`."""
    return thread.device_id, thread.warpgroup_id, getattr(thread, "warp_id", None)


def _thread_key(thread) -> tuple:
    return (thread.device_id, getattr(thread, "block_id", 0), thread.warpgroup_id)


def _block_of(mesh_location) -> tuple[int, ...] | None:
    """A request's block: grid coordinates then in-cluster coordinates.

    None when the request has no `MeshLocation`: the interpreter made it for a whole
    device (kernel operands, pallas_call scratch). A request from a block always has
    one, even when every coordinate is empty (the one block of a kernel without a
    grid has the block `()`).
    """
    if mesh_location is None:
        return None
    return tuple(mesh_location.cluster_coords) + tuple(mesh_location.block_coords)


def _as_list(block):
    return None if block is None else list(block)


# An allocation key as a tuple (memory_space_id, device_id, block_id, thread_id,
# initial_ref_count, buffer_id), read in C: it runs for every allocation request.
_key_tuple = operator.attrgetter("memory_space_id", "device_id", "block_id", "thread_id",
                                 "initial_ref_count", "buffer_id")


def _where(logging_info):
    """(device, block, thread, warp, source_info) of a request's `GPULoggingInfo`."""
    block = _block_of(getattr(logging_info, "mesh_location", None))
    thread = getattr(logging_info, "thread", None)
    if thread is None:
        return -1, block, -1, None, None
    return (thread.device_id, block, thread.warpgroup_id, getattr(thread, "warp_id", None),
            getattr(logging_info, "source_info", None))


def _decoder(spaces: dict, resource: str):
    """The function that makes a request row of `resource` (the allocation and free
    wrappers') into `Recorder.record`'s fields, after the run. Row: (decoder, kernel, op,
    key, ref count, shape, dtype, nbytes, logging info, the thread argument or None)."""
    is_buffer = resource == "buffer"

    def decode(row) -> tuple:
        _, kernel, op, key, rc, shape, dtype, nbytes, li, thread_arg = row
        device, block, wg, warp, src = _where(li)
        if wg < 0 and thread_arg is not None and hasattr(thread_arg, "device_id"):
            device, wg, warp = _thread_ids(thread_arg)
        return (kernel, op, resource,
                spaces.get(key.memory_space_id) if is_buffer else None, key.device_id,
                block, wg, warp, _key_tuple(key), int(rc),
                None if shape is None else tuple(shape), dtype, int(nbytes), src)

    return decode


@functools.cache
def _race_detection_state():
    """JAX's `race_detection_state` module (None without one), imported once: an import
    statement run at every trace's start costs more than the rest of that line."""
    try:
        from jax._src.pallas.mosaic_gpu.interpret import race_detection_state
    except ImportError:  # pragma: no cover - both supported versions have it
        return None
    return race_detection_state


class _Hooks:
    """Wraps `GPUSharedMemory` methods so every allocation request is recorded."""

    def __init__(self, recorder, detect_races: bool):
        self.jax, self.siu, self.cb, self.gsm = _import_internals()
        self.recorder = recorder
        self.detect_races = detect_races
        self.originals: dict[str, tuple] = {}  # name -> (original, defined on the class)
        # memory_space_id -> "GMEM" / "SMEM" / "TMEM" / "REGS"
        self.spaces = {idx: space.name.upper()
                       for space, idx in self.gsm.IDX_BY_GPU_MEMORY_SPACE.items()}
        self.waits = monitor.BarrierWaits(self.gsm)
        self.axis_names = AxisNames()
        self.races = races.RaceHooks(self, _race_detection_state())
        # the first kernel JAX rejected while lowering it (the block may have caught it)
        self.rejections = Rejections(self.owns)

    # -- install / remove
    # Set by `hooked()`: the Python thread that entered the trace, the threads that were
    # already running then (their kernels are not this trace's), how many of their
    # kernels were kept out, and the thread whose kernel was still running on exit.
    monitor = None
    owner: threading.Thread | None = None
    preexisting: weakref.WeakSet = weakref.WeakSet()
    foreign_kernels = 0
    left_running: threading.Thread | None = None
    # `yields`: a trace entered in the same Python thread inside this one suspends it
    # (its hooks removed, its slot released) instead of failing, and it resumes when
    # that trace ends; `nested_traces`/`nested_kernels` count those traces and the
    # kernel runs they recorded (not this trace's). Set by `hooked()`.
    yields = False
    nested_traces = 0
    nested_kernels = 0
    # Set when its block ends (`_teardown`): a trace nested in it that outlives it (a
    # fixture's trace, opened in one pytest phase and closed in another) must not resume it.
    ended = False

    def install(self) -> None:
        """Wrap the methods. Each original is recorded (one statement) before its method is
        replaced, so `remove()` after an interruption anywhere in here restores exactly
        what was replaced."""
        cls = self.gsm.GPUSharedMemory
        wrappers = {
            "__init__": lambda f: self._owned_init(self._wrap_init(f), f),
            "allocate_buffer": self._wrap_alloc_buffer,
            "deallocate_buffer": lambda f: self._wrap_free(f, "buffer"),
            "allocate_barrier": lambda f: self._wrap_alloc_barrier(f, "barrier"),
            "deallocate_barrier": lambda f: self._wrap_free(f, "barrier"),
            "allocate_cluster_barrier": lambda f: self._wrap_alloc_barrier(f, "cluster_barrier"),
            "deallocate_cluster_barrier": lambda f: self._wrap_free(f, "cluster_barrier"),
            "set_failed": self._wrap_set_failed,
        }
        if self.detect_races and hasattr(cls, "execute_async_task"):
            # Only race detection keeps copies pending (and fails on un-awaited ones).
            wrappers["execute_async_task"] = self._wrap_async_task
        for name in (*_HOOKED_METHODS, *(n for n in wrappers if n not in _HOOKED_METHODS)):
            if name not in self.originals:
                self.originals[name] = (getattr(cls, name), name in cls.__dict__)
            setattr(cls, name, wrappers[name](self.originals[name][0]))
        self.waits.install()
        self.races.install()
        self.axis_names.install()
        self.rejections.install()

    def remove(self) -> None:
        """Restore every method, each on its own: one that fails to restore does not keep
        the others hooked (the first error is raised after all were tried). Idempotent."""
        errors: list[BaseException] = []
        for step in (self.rejections.remove, self.axis_names.remove, self.races.remove,
                     self.waits.remove, self._restore):
            try:
                step()
            except BaseException as e:  # noqa: BLE001 - raised below, after every step
                errors.append(e)
        if errors:
            raise errors[0]

    def dispose(self) -> None:
        """Once the trace is built from what was recorded: break the references between
        the hooks, the monitor and the kernels' states (cycles that would keep the run's
        records and the interpreter's memory alive until the garbage collector runs)."""
        self.waits.dispose()
        if self.monitor is not None:
            self.monitor.hooks = None
        self.monitor = None
        self.races.hooks = None
        self.recorder = None
        self.rejections.dispose()

    def _restore(self) -> None:
        cls = self.gsm.GPUSharedMemory
        errors: list[BaseException] = []
        for name, (fn, own) in list(self.originals.items()):
            try:
                if own:
                    setattr(cls, name, fn)
                elif name in cls.__dict__:
                    delattr(cls, name)
                self.originals.pop(name, None)
            except BaseException as e:  # noqa: BLE001 - raised below
                errors.append(e)
        if errors:
            raise errors[0]

    def _plain_methods(self, cls) -> dict:
        """name -> the original of every method of `cls` that is hooked now (ours and the
        barrier hooks'), `__init__` aside: what each installer recorded before it replaced
        a method (not a copy of the class's namespace taken at install: the first touch of
        it, out of the caches after a kernel, costs a twentieth of a millisecond per trace;
        this runs only for a kernel of a thread that is not this trace's)."""
        out = {name: fn for name, (fn, _) in self.originals.items() if name != "__init__"}
        out.update(self.waits.originals_for(cls))
        return {name: fn for name, fn in out.items() if isinstance(fn, types.FunctionType)}

    def owns(self, thread: threading.Thread) -> bool:
        """Whether the kernels `thread` runs are this trace's: it entered the trace or was
        started since. XLA's own runtime threads (not started by Python: a `_DummyThread`
        here) run the computations of several devices and live across traces; they carry
        no owner, so their kernels are recorded. Only a Python thread that was already
        running when the trace began is someone else's."""
        return (thread is self.owner or thread not in self.preexisting
                or isinstance(thread, threading._DummyThread))

    def _owned_init(self, hooked_init, orig):
        """`GPUSharedMemory.__init__`: a kernel launched by the thread that entered the trace,
        or by a thread started since, is recorded; one launched by a thread that was already
        running is kept apart: its memory calls the original methods, nothing is recorded."""
        hooks = self

        def __init__(sm, *args, **kwargs):
            me = threading.current_thread()
            if hooks.owns(me):
                hooked_init(sm, *args, **kwargs)
            else:
                orig(sm, *args, **kwargs)
                # re-entrant, as the barrier hooks expect of every memory's lock
                object.__setattr__(sm, "lock", threading.RLock())
                for name, fn in hooks._plain_methods(type(sm)).items():
                    object.__setattr__(sm, name, types.MethodType(fn, sm))
                hooks.foreign_kernels += 1
            object.__setattr__(sm, "_pallas_viz_thread", me)

        return __init__

    # -- wrappers
    def _wrap_init(self, orig):
        hooks = self

        def __init__(sm, *args, **kwargs):
            if hooks.detect_races:
                kwargs["detect_races"] = True
            orig(sm, *args, **kwargs)
            # A reentrant lock lets a hook hold the memory lock across the original
            # call, so create/join/free and ref counts are read atomically.
            object.__setattr__(sm, "lock", threading.RLock())
            num_devices = int(kwargs.get("num_devices", 1))
            index = hooks.recorder.begin_kernel(
                launch=caller_location(sys._getframe(1)),
                num_devices=num_devices,
                threads_per_block=int(sm.num_pallas_threads_per_block),
                blocks_per_cluster=int(sm.num_blocks_per_cluster),
            )
            object.__setattr__(sm, "_pallas_viz_kernel", index)
            object.__setattr__(sm, "_pallas_viz_failed", False)
            hooks.waits.begin(sm, index, num_devices)

        return __init__

    def running_memory(self):
        """The `GPUSharedMemory` of the kernel being interpreted now, if we hooked it."""
        sm = getattr(self.cb, "_shared_memory", None)
        return sm if sm is not None and hasattr(sm, "_pallas_viz_kernel") else None

    def snapshot_waiters(self, sm) -> list[dict]:
        """Who waits on which barrier, from which line (for a deadlock report)."""
        kernel = getattr(sm, "_pallas_viz_kernel", -1)
        out = []
        with sm.lock:
            by_obj = {id(v): k for k, v in sm.mem.items()}
            for bar, li, thread in list(self.waits.waiting.values()):
                key = by_obj.get(id(bar))
                resource = ("cluster_barrier" if type(bar).__name__ == "ClusterBarrier"
                            else "barrier") if key is not None else "named_barrier"
                kt = _key_tuple(key) if key is not None else None
                device, wg, warp = _thread_ids(thread)
                out.append({
                    "device": device,
                    "block": _as_list(_block_of(getattr(li, "mesh_location", None))),
                    "thread": wg, "warp": warp, "resource": resource,
                    "key": None if kt is None else list(kt),
                    "allocation": -1 if kt is None else self.recorder.live_allocation(
                        kernel, resource, kt),
                    "source_info": getattr(li, "source_info", None),
                    "num_arrivals": getattr(bar, "num_arrivals", None),
                    "arrivals": getattr(bar, "arrivals_count", None),
                    "phase": getattr(bar, "phase", None),
                })
        out.sort(key=lambda w: (w["device"], w["block"] or [], w["thread"], w["warp"] or -1))
        return out

    # The wrappers below run once per allocation request, with the interpreter's memory
    # lock held, between the interpreter's own steps (their code and data out of the
    # processor's caches): they read what can change (existence, ref counts, a freed
    # buffer's shape) and keep the rest as it is, the request's key and logging info;
    # its fields (block, thread, line, the key as a tuple) are made in one warm loop
    # (`Recorder.rows`, with `_decoder`'s function, which takes its own lock), every 64
    # rows (`BATCH_MASK`, once the memory lock is released: the other threads wait for
    # it) and after the run.
    def _wrap_alloc_buffer(self, orig):
        rec = self.recorder
        records, rows, batch = rec.records, rec.rows, rec.BATCH_MASK
        decode = _decoder(self.spaces, "buffer")

        def allocate_buffer(sm, key, ref_count, value, logical_shape=None, logging_info=None):
            with sm.lock:
                mem = sm.mem
                size = len(mem)
                orig(sm, key, ref_count, value, logical_shape, logging_info)
                # Under the lock only this call changes `mem`: a new entry is its create,
                # made with `ref_count` (0.11, 0.12), and a join changes nothing. (One
                # look-up at most: the key hashes and compares in Python.)
                if len(mem) > size:
                    op, rc = "create", ref_count
                else:
                    op, rc = "join", getattr(mem.get(key), "ref_count", ref_count)
                records.append((decode, getattr(sm, "_pallas_viz_kernel", -1), op, key, rc,
                                value.shape, value.dtype, value.nbytes, logging_info, None))
                n = len(records)
            if not n & batch:  # a batch: decode it (`Recorder.rows`), the lock released
                rows()

        return allocate_buffer

    def _wrap_alloc_barrier(self, orig, resource):
        rec = self.recorder
        records, rows, batch = rec.records, rec.rows, rec.BATCH_MASK
        decode = _decoder(self.spaces, resource)

        # 0.12: allocate_barrier(key, thread, ref_count, ...); 0.11: (key, ref_count, ...).
        def allocate(sm, key, *args, **kwargs):
            with sm.lock:
                mem = sm.mem
                size = len(mem)
                orig(sm, key, *args, **kwargs)
                op = "create" if len(mem) > size else "join"
                rc = getattr(mem.get(key), "ref_count", kwargs.get("ref_count", 1))
                records.append((decode, getattr(sm, "_pallas_viz_kernel", -1), op, key, rc,
                                None, None, 0, kwargs.get("logging_info"),
                                args[0] if args else None))
                n = len(records)
            if not n & batch:  # a batch: decode it (`Recorder.rows`), the lock released
                rows()

        return allocate

    def _wrap_free(self, orig, resource):
        rec = self.recorder
        records, rows, batch = rec.records, rec.rows, rec.BATCH_MASK
        decode = _decoder(self.spaces, resource)
        is_buffer = resource == "buffer"

        def deallocate(sm, key, *args, **kwargs):
            with sm.lock:
                mem = sm.mem
                obj = mem.get(key)
                size = len(mem)
                orig(sm, key, *args, **kwargs)
                op = "free" if len(mem) < size else "release"
                li = kwargs.get("logging_info")
                if li is None and args and not hasattr(args[-1], "device_id"):
                    li = args[-1]
                if is_buffer and obj is not None:
                    # (its array's own attributes, read in C: `Buffer.shape`, `.dtype` and
                    # `.size` are properties over them, the size its `nbytes`)
                    c = obj.content
                    shape, dtype, nbytes = c.shape, c.dtype, c.nbytes
                else:
                    shape = dtype = None
                    nbytes = 0
                records.append((decode, getattr(sm, "_pallas_viz_kernel", -1), op, key,
                                getattr(obj, "ref_count", 0), shape, dtype, nbytes, li,
                                args[0] if args else None))
                n = len(records)
            if not n & batch:  # a batch: decode it (`Recorder.rows`), the lock released
                rows()

        return deallocate

    # (device, block id in cluster, warpgroup) -> [(MeshLocation, source_info)] of the
    # thread's SMEM -> GMEM copies still pending: what an un-awaited copy at kernel end
    # is pinned to.
    pending_copies: dict

    def _wrap_async_task(self, orig):
        pending = self.pending_copies = {}

        def execute_async_task(sm, task):
            out = orig(sm, task)
            if type(task).__name__ == "AsyncCopySmemToGmemTask":
                th = task.thread
                n = len(sm.pending_smem_to_gmem_read_clocks.get(th, ()))
                mine = pending.setdefault(_thread_key(th), [])
                mine.append((task.mesh_location, task.source_info))
                del mine[:max(0, len(mine) - n)]
            return out

        return execute_async_task

    def unawaited_copy(self, sm, thread):
        """(MeshLocation, source_info) of the oldest copy `thread` never awaited, or None."""
        mine = getattr(self, "pending_copies", {}).get(_thread_key(thread))
        if not mine:
            return None
        n = len(sm.pending_smem_to_gmem_read_clocks.get(thread, ())) if sm is not None else 1
        return mine[-n] if 0 < n <= len(mine) else mine[0]

    def _wrap_set_failed(self, orig):
        hooks = self

        def set_failed(sm, exception, failed_thread=None, top_level=True):
            try:
                hooks.waits.record_missing(sm, exception)
            except Exception:  # noqa: BLE001 - never mask the interpreter's error
                pass
            with sm.lock:
                if not getattr(sm, "_pallas_viz_failed", True) and sm._failure is None:
                    object.__setattr__(sm, "_pallas_viz_failed", True)
                    hooks._record_failure(sm, exception, failed_thread)
            try:
                return orig(sm, exception, failed_thread, top_level)
            finally:
                hooks.waits.abort_waits(sm)

        return set_failed

    def _record_failure(self, sm, exception, failed_thread) -> None:
        info = failure_details(exception, failed_thread, self, sm)
        kernel = getattr(sm, "_pallas_viz_kernel", -1)
        self.recorder.fail(kernel, info)
        if info.get("device") is not None and info.get("thread") is not None:
            req = info.get("request") or {}
            key = (req.get("memory_space_id", -1), info["device"], req.get("block_id", -1),
                   req.get("thread_id", -1), req.get("initial_ref_count", 0),
                   req.get("buffer_id", -1))
            ms = self.spaces.get(req.get("memory_space_id", -1))
            self.recorder.record(kernel, "error", req.get("resource", "buffer"), ms,
                                 info["device"], info.get("block"), info["thread"],
                                 info.get("warp"), key, 0, req.get("shape"), req.get("dtype"),
                                 0, info.get("source_info"))


def failure_details(exception: BaseException, failed_thread, hooks: _Hooks,
                    sm=None) -> dict:
    """What was being served when the interpreter failed, read from the traceback.

    A thread that ends the kernel with an SMEM -> GMEM copy never awaited is pinned to
    that copy (its block and line), not to the kernel's end."""
    # (a bare `assert` of the interpreter has no message: its line of JAX is the message)
    info: dict = {"type": type(exception).__name__,
                  "message": str(exception) or silent_failure_text(exception)}
    frame_locals = None
    tb = exception.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith(
                os.path.join("mosaic_gpu", "interpret", "gpu_callbacks.py")):
            frame_locals = tb.tb_frame.f_locals
        tb = tb.tb_next
    thread = failed_thread
    mesh = source_info = None
    request: dict = {}
    if frame_locals is not None:
        for name in ("thread", "warpgroup", "compute_unit", "device"):
            if frame_locals.get(name) is not None:
                thread = frame_locals[name]
                break
        mesh = frame_locals.get("mesh_location")
        source_info = frame_locals.get("source_info")
        req = frame_locals.get("allocation_request") or frame_locals.get("allocation_key")
        if req is not None and hasattr(req, "memory_space_id"):
            request = {f: int(getattr(req, f)) for f in (
                "memory_space_id", "device_id", "block_id", "thread_id", "initial_ref_count")
                if hasattr(req, f)}
            if hasattr(req, "buffer_id"):
                request["buffer_id"] = int(req.buffer_id)
            request["memory_space"] = hooks.spaces.get(request["memory_space_id"])
        value = frame_locals.get("value")
        if value is not None and hasattr(value, "shape"):
            request["shape"] = tuple(int(s) for s in value.shape)
            request["dtype"] = str(value.dtype)
        request["callback"] = _callback_name(exception)
    if (mesh is None and thread is not None and request.get("callback") ==
            "kernel_thread_finished" and messages.is_unawaited_copy(str(exception))):
        copy = hooks.unawaited_copy(sm, thread)
        if copy is not None:
            mesh, source_info = copy
    if thread is not None and hasattr(thread, "device_id"):
        info["device"] = int(thread.device_id)
        if hasattr(thread, "warpgroup_id"):
            info["thread"] = int(thread.warpgroup_id)
            info["warp"] = getattr(thread, "warp_id", None)
        elif request.get("thread_id") is not None:
            # A device-level request: the thread it names is the one in the request.
            info["thread"] = int(request["thread_id"])
            info["device_level"] = True
    info["block"] = _block_of(mesh)
    info["request"] = request or None
    info["source_info"] = source_info
    return info


def _callback_name(exception: BaseException) -> str | None:
    """The callback being served: the first `gpu_callbacks` frame under the failure
    wrapper (not an inner helper such as a task's `f`)."""
    tb = exception.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename.endswith("gpu_callbacks.py") and code.co_name != "wrapper":
            return code.co_name
        tb = tb.tb_next
    return None


# The trace recording now: {"hooks": its _Hooks}. Claimed and released by single dict
# operations (atomic under the GIL), not under a lock: an interrupt between taking a lock
# and releasing it would leave it taken for good.
_slot: dict[str, _Hooks] = {}
# How long leaving a trace waits for a kernel another Python thread is still running.
EXIT_WAIT_S = 30.0


def active() -> _Hooks | None:
    """The hooks of the trace recording now, if any."""
    return _slot.get("hooks")


def _claim(hooks: _Hooks) -> None:
    holder = _slot.setdefault("hooks", hooks)
    if holder is not hooks:
        same = holder.owner is threading.current_thread()
        raise TraceActiveError(
            "pallas_viz.trace() is already recording " + (
                "in this Python thread (traces do not nest)" if same else
                "(in another Python thread, or nested)") + "; finish that trace first.",
            same_thread=same)


def _release(hooks: _Hooks) -> None:
    if _slot.get("hooks") is hooks:  # only the holder releases: no other thread can
        _slot.pop("hooks", None)     # change the slot between these two lines


def _in_jax(thread: threading.Thread) -> bool:
    """True if `thread` is inside JAX now (running a computation: a kernel)."""
    f = sys._current_frames().get(thread.ident)
    while f is not None:
        if "/jax/" in f.f_code.co_filename or "/jaxlib/" in f.f_code.co_filename:
            return True
        f = f.f_back
    return False


def kernel_running_elsewhere(cb=None) -> threading.Thread | None:
    """The Python thread, other than this one, that is inside an interpret-mode kernel now
    (the interpreter's state is in use: resetting it would break that kernel), or None.
    `cb`: JAX's `gpu_callbacks` module (imported when not given)."""
    if cb is None:
        _, _, cb, _ = _import_internals()
    sm = getattr(cb, "_shared_memory", None)
    if sm is None:
        return None
    me = threading.current_thread()
    launcher = getattr(sm, "_pallas_viz_thread", None)
    if launcher is not None:
        return launcher if (launcher is not me and launcher.is_alive()
                            and _in_jax(launcher)) else None
    # memory made before any hooks: whoever is inside the interpreter
    for t in threading.enumerate():
        if t is not me and _in_jax(t):
            return t
    return None


def _wait_for_other_threads(hooks: _Hooks) -> None:
    """Wait (at most EXIT_WAIT_S) for a kernel another thread is still running; if it is
    still running then, `hooks.left_running` names that thread."""
    deadline = time.monotonic() + EXIT_WAIT_S
    while True:
        t = kernel_running_elsewhere(hooks.cb)
        if t is None or time.monotonic() >= deadline:
            hooks.left_running = t
            return
        time.sleep(0.01)


def _teardown(hooks: _Hooks, end: bool = True) -> None:
    """Stop the monitor, remove the hooks, reset the interpreter (unless another thread's
    kernel still uses it), release the active slot: each step runs even if one before it
    raised. Idempotent: `hooked()` runs it twice, so an interruption in the first run is
    made good by the second. `end`: the trace's block ended (it is never resumed); False
    to suspend it for a trace nested in it (`_resume` puts it back)."""
    if end:
        hooks.ended = True
    try:
        if hooks.monitor is not None:
            hooks.monitor.stop()
    finally:
        try:
            hooks.remove()
        finally:
            try:
                if _slot.get("hooks") is hooks:
                    running = kernel_running_elsewhere(hooks.cb)
                    if running is None:
                        hooks.cb.reset_gpu_interpret_mode_state()
                    else:  # never reset under a running kernel
                        hooks.left_running = running
            finally:
                _release(hooks)


def _yielding_outer() -> _Hooks | None:
    """The active trace's hooks, if that trace yields to one nested in it in this thread."""
    outer = _slot.get("hooks")
    if outer is not None and outer.yields and outer.owner is threading.current_thread():
        return outer
    return None


def _resume(outer: _Hooks, inner: _Hooks) -> None:
    """Put `outer`'s hooks back once the trace nested in it ended, and count what that
    trace recorded. If `outer`'s own block ended first (the nested trace outlived it), or
    the slot was taken meanwhile (a trace of another thread), `outer` stays out: it records
    nothing more, and its own exit cleans up (or cleaned up) as usual."""
    outer.nested_traces += 1
    outer.nested_kernels += len(inner.recorder.kernels) if inner.recorder is not None else 0
    if outer.ended or _slot.setdefault("hooks", outer) is not outer:
        return
    outer.cb.reset_gpu_interpret_mode_state()
    outer.install()
    if outer.monitor is not None:
        outer.monitor.start()


@contextlib.contextmanager
def hooked(recorder, detect_races: bool = False, timeout_s: float | None = None,
           yields: bool = False):
    """Install the recording hooks for the duration of the block, then remove them.

    The hooks are removed and the interpreter state is reset on every exit:
    normal, exception or KeyboardInterrupt, including one that lands in the middle of
    setting up or tearing down (every step is in a `finally`, and the tear-down, which is
    idempotent, runs twice). A monitor thread stops a kernel that waits on barriers
    without progress for `timeout_s` seconds, and aborts the running kernel on Ctrl-C
    (`hooks.monitor.interrupted`, `.deadlocked`).

    Kernels launched by the thread that entered, or by threads started inside the block,
    are recorded; those of threads that were already running are not (counted in
    `hooks.foreign_kernels`). On exit a kernel another thread is still running is waited
    for (at most `EXIT_WAIT_S`); if it still runs, the interpreter is not reset and
    `hooks.left_running` names the thread.

    `yields`: a `hooked()` block entered inside this one by the same Python thread
    suspends this one for its duration (see `_Hooks.yields`); without it that block
    raises `TraceActiveError`.
    """
    hooks = _Hooks(recorder, detect_races)
    hooks.yields = yields
    outer = _yielding_outer()
    if outer is not None:
        _teardown(outer, end=False)
    try:
        with _hooked(hooks, timeout_s):
            yield hooks
    finally:
        if outer is not None:
            _resume(outer, hooks)


@contextlib.contextmanager
def _hooked(hooks: _Hooks, timeout_s: float | None):
    """`hooked()`'s block for `hooks`, with no trace suspended around it."""
    try:
        try:
            _claim(hooks)
            hooks.owner = threading.current_thread()
            hooks.preexisting = weakref.WeakSet(
                t for t in threading.enumerate() if t is not hooks.owner)
            running = kernel_running_elsewhere(hooks.cb)
            if running is not None:
                raise TraceActiveError(
                    f"a Pallas kernel is running in Python thread {running.name!r}; "
                    "pallas_viz.trace() resets the interpreter's state when it starts, so "
                    "it cannot start until that kernel ends")
            hooks.monitor = monitor.Monitor(hooks, timeout_s)  # binds the barrier hooks: first
            hooks.cb.reset_gpu_interpret_mode_state()
            hooks.install()
            hooks.monitor.start()
            try:
                yield hooks
            finally:
                _wait_for_other_threads(hooks)
        finally:
            _teardown(hooks)
    finally:
        _teardown(hooks)


def hooks_installed() -> bool:
    """True if any pallas_viz hook is currently installed on `GPUSharedMemory`."""
    _, _, _, gsm = _import_internals()
    ours = (__name__, "pallas_viz._jax.monitor", "pallas_viz._jax.races",
            "pallas_viz._jax.axis_names", "pallas_viz._jax.rejections")
    methods = [getattr(gsm.GPUSharedMemory, m) for m in _HOOKED_METHODS]
    methods += [getattr(c, m) for c in (gsm.Barrier, getattr(gsm, "ClusterBarrier", gsm.Barrier))
                for m in ("wait", "arrive")]
    rds = _race_detection_state()
    if rds is not None:
        methods += [rds.GPURaceDetectionState.check_read, rds.GPURaceDetectionState.check_write]
    try:
        from jax._src.pallas.mosaic_gpu.interpret import jaxpr_interpret as jxi
        methods += [jxi.JaxprInterpreter._interpret_run_scoped_p,
                    jxi.JaxprInterpreter._interpret_axis_index_p]
        from jax._src.pallas.mosaic_gpu.interpret import interpret_pallas_call as ipc
        methods.append(ipc.interpret_pallas_call)
    except (ImportError, AttributeError):  # pragma: no cover
        pass
    return any(getattr(m, "__module__", None) in ours for m in methods)


@contextlib.contextmanager
def quiet_callback_log():
    """Silence JAX's "jax.io_callback failed" stderr dump; pallas_viz reports it instead."""
    import logging

    logger = logging.getLogger("jax._src.callback")
    old = logger.disabled
    try:
        logger.disabled = True
        yield
    finally:
        try:
            logger.disabled = old
        finally:
            logger.disabled = old  # again, if an interrupt landed on the line above
