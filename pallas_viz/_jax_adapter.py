"""The one module that touches JAX's private interpret-mode internals.

Everything pallas_viz needs from ``jax._src`` goes through here: the version
check, installing and removing the runtime hooks, resetting interpreter state,
resolving source locations and reading the interpreter's failures. Supported:
JAX/jaxlib 0.11.x and 0.12.x (Python >= 3.12).
"""

from __future__ import annotations

import contextlib
import linecache
import os
import sys
import threading

from .errors import UnsupportedJaxError
from .model import MEMORY_SPACES, SourceLocation

SUPPORTED = "JAX/jaxlib 0.11.x and 0.12.x on Python >= 3.12"
_SUPPORTED_MINORS = ((0, 11), (0, 12))

_HOOKED_METHODS = (
    "__init__", "allocate_buffer", "deallocate_buffer", "allocate_barrier",
    "deallocate_barrier", "allocate_cluster_barrier", "deallocate_cluster_barrier",
    "set_failed",
)


def check_version(version: str) -> None:
    """Raise `UnsupportedJaxError` unless `version` (e.g. "0.12.0.1") is a supported JAX."""
    parts = tuple(int(p) for p in str(version).split(".")[:2] if p.isdigit())
    if parts not in _SUPPORTED_MINORS:
        raise UnsupportedJaxError(
            f"pallas_viz supports {SUPPORTED}; this is JAX {version}. "
            "Install a supported version, e.g. pip install 'jax[cpu]==0.12.*'."
        )


def _import_internals():
    """Import the private modules, or raise `UnsupportedJaxError`."""
    try:
        import jax
    except ImportError as e:  # pragma: no cover - jax is a dependency
        raise UnsupportedJaxError(f"JAX is not installed; pallas_viz supports {SUPPORTED}.") from e
    version = getattr(jax, "__version__", "unknown")
    check_version(version)
    try:
        from jax._src import source_info_util
        from jax._src.pallas.mosaic_gpu.interpret import gpu_callbacks
        from jax._src.pallas.mosaic_gpu.interpret import shared_memory as gsm
    except ImportError as e:
        raise UnsupportedJaxError(
            f"JAX {version} has no Mosaic GPU interpret mode that pallas_viz can hook "
            f"({e}); pallas_viz supports {SUPPORTED}."
        ) from e
    missing = [m for m in _HOOKED_METHODS if not hasattr(gsm.GPUSharedMemory, m)]
    missing += [n for n in ("reset_gpu_interpret_mode_state", "call_make_allocation_request_array")
                if not hasattr(gpu_callbacks, n)]
    if missing:
        raise UnsupportedJaxError(
            f"JAX {version}'s GPU interpret mode lacks {', '.join(missing)}; "
            f"pallas_viz supports {SUPPORTED}."
        )
    return jax, source_info_util, gpu_callbacks, gsm


def check_supported() -> str:
    """Return the JAX version if the adapter fits it, else raise `UnsupportedJaxError`."""
    jax, *_ = _import_internals()
    return jax.__version__


def reset_interpreter_state() -> None:
    """Reset JAX's global GPU interpret-mode state so the next kernel can run."""
    _, _, gpu_callbacks, _ = _import_internals()
    gpu_callbacks.reset_gpu_interpret_mode_state()


# --------------------------------------------------------------------------- source lines

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_EXAMPLES_DIR = os.path.join(_PKG_DIR, "examples")


def _is_user_file(filename: str) -> bool:
    """True for user code, the bundled examples and JAX's own ops kernels."""
    if filename.startswith(_EXAMPLES_DIR) or "/jax/experimental/pallas/ops/" in filename:
        return True
    if filename.startswith(_PKG_DIR):
        return False
    for part in ("/jax/", "/jaxlib/", "/site-packages/IPython/", "/concurrent/futures/",
                 "/threading.py", "/contextlib.py", "/runpy.py", "<frozen "):
        if part in filename:
            return False
    return not filename.startswith(os.path.dirname(os.__file__))


def _location(file: str, line: int, column: int | None, function: str | None) -> SourceLocation:
    code = linecache.getline(file, line).rstrip("\n") or None
    return SourceLocation(file=file, line=int(line), column=column, function=function, code=code)


def source_location(source_info) -> SourceLocation | None:
    """The user's line behind a JAX `SourceInfo`, or None."""
    if source_info is None or getattr(source_info, "traceback", None) is None:
        return None
    _, siu, _, _ = _import_internals()
    code, lasti = source_info.traceback.raw_frames()
    for c, i in zip(code, lasti):
        if _is_user_file(c.co_filename):
            f = siu.raw_frame_to_frame(c, i)
            return _location(f.file_name, f.start_line, f.start_column, f.function_name)
    return None


def caller_location(frame=None) -> SourceLocation | None:
    """The innermost user frame of the current Python stack (a kernel's launch site)."""
    f = frame or sys._getframe(1)
    while f is not None:
        if _is_user_file(f.f_code.co_filename):
            return _location(f.f_code.co_filename, f.f_lineno, None, f.f_code.co_name)
        f = f.f_back
    return None


def traceback_user_location(exc: BaseException) -> SourceLocation | None:
    """The user's line behind an exception raised while JAX traced or interpreted a kernel.

    Prefers the source info of the equation being interpreted, then the stack that
    JAX attaches before its transformations, then the innermost user frame.
    """
    tb = exc.__traceback__
    eqn_loc = None
    while tb is not None:
        eqn = tb.tb_frame.f_locals.get("eqn")
        if eqn is not None and getattr(eqn, "source_info", None) is not None:
            eqn_loc = source_location(eqn.source_info) or eqn_loc
        tb = tb.tb_next
    if eqn_loc is not None:
        return eqn_loc
    chain, seen = [], set()
    x = exc
    while x is not None and id(x) not in seen:
        seen.add(id(x))
        chain.append(x)
        x = x.__cause__ or x.__context__
    chain.sort(key=lambda e: type(e).__name__ != "JaxStackTraceBeforeTransformation")
    for e in chain:
        best = None
        tb = e.__traceback__
        while tb is not None:
            fn = tb.tb_frame.f_code.co_filename
            if _is_user_file(fn):
                best = _location(fn, tb.tb_lineno, None, tb.tb_frame.f_code.co_name)
            tb = tb.tb_next
        if best is not None:
            return best
    return None


# --------------------------------------------------------------------------- hooks

def _thread_ids(thread):
    """(device, warpgroup, warp) of an interpreter `Warpgroup`/`Warp`."""
    return thread.device_id, thread.warpgroup_id, getattr(thread, "warp_id", None)


def _block_of(mesh_location) -> tuple[int, ...]:
    if mesh_location is None:
        return ()
    return tuple(mesh_location.cluster_coords) + tuple(mesh_location.block_coords)


def _key_tuple(key) -> tuple:
    return (key.memory_space_id, key.device_id, key.block_id, key.thread_id,
            key.initial_ref_count, key.buffer_id)


def _where(logging_info):
    """(device, block, thread, warp, source_info) of a request's `GPULoggingInfo`."""
    block = _block_of(getattr(logging_info, "mesh_location", None))
    thread = getattr(logging_info, "thread", None)
    if thread is None:
        return -1, block, -1, None, None
    return (thread.device_id, block, thread.warpgroup_id, getattr(thread, "warp_id", None),
            getattr(logging_info, "source_info", None))


class _Hooks:
    """Wraps `GPUSharedMemory` methods so every allocation request is recorded."""

    def __init__(self, recorder, detect_races: bool):
        self.jax, self.siu, self.cb, self.gsm = _import_internals()
        self.recorder = recorder
        self.detect_races = detect_races
        self.originals: dict[str, object] = {}
        self.own: dict[str, bool] = {}
        self.spaces = {}
        for space, idx in self.gsm.IDX_BY_GPU_MEMORY_SPACE.items():
            name = space.name.upper()
            self.spaces[idx] = name if name in MEMORY_SPACES else name
        from ._jax import monitor, races

        self.waits = monitor.BarrierWaits(self.gsm)
        try:
            from jax._src.pallas.mosaic_gpu.interpret import race_detection_state
        except ImportError:  # pragma: no cover - both supported versions have it
            race_detection_state = None
        self.races = races.RaceHooks(self, race_detection_state)

    # -- install / remove
    def install(self) -> None:
        cls = self.gsm.GPUSharedMemory
        for name in _HOOKED_METHODS:
            self.originals[name] = getattr(cls, name)
            self.own[name] = name in cls.__dict__
        cls.__init__ = self._wrap_init(self.originals["__init__"])
        cls.allocate_buffer = self._wrap_alloc_buffer(self.originals["allocate_buffer"])
        cls.deallocate_buffer = self._wrap_free(self.originals["deallocate_buffer"], "buffer")
        cls.allocate_barrier = self._wrap_alloc_barrier(
            self.originals["allocate_barrier"], "barrier")
        cls.deallocate_barrier = self._wrap_free(self.originals["deallocate_barrier"], "barrier")
        cls.allocate_cluster_barrier = self._wrap_alloc_barrier(
            self.originals["allocate_cluster_barrier"], "cluster_barrier")
        cls.deallocate_cluster_barrier = self._wrap_free(
            self.originals["deallocate_cluster_barrier"], "cluster_barrier")
        cls.set_failed = self._wrap_set_failed(self.originals["set_failed"])
        self.waits.install()
        self.races.install()

    def remove(self) -> None:
        self.races.remove()
        self.waits.remove()
        cls = self.gsm.GPUSharedMemory
        for name, fn in self.originals.items():
            if self.own[name]:
                setattr(cls, name, fn)
            elif name in cls.__dict__:
                delattr(cls, name)
        self.originals.clear()

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
            index = hooks.recorder.begin_kernel(
                launch=caller_location(sys._getframe(1)),
                num_devices=int(kwargs.get("num_devices", 1)),
                threads_per_block=int(sm.num_pallas_threads_per_block),
                blocks_per_cluster=int(sm.num_blocks_per_cluster),
            )
            object.__setattr__(sm, "_pallas_viz_kernel", index)
            object.__setattr__(sm, "_pallas_viz_failed", False)

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
            for thread, (bar, li) in list(self.waits.waiting.items()):
                key = by_obj.get(id(bar))
                resource = ("cluster_barrier" if type(bar).__name__ == "ClusterBarrier"
                            else "barrier") if key is not None else "named_barrier"
                kt = _key_tuple(key) if key is not None else None
                device, wg, warp = _thread_ids(thread)
                out.append({
                    "device": device, "block": list(_block_of(getattr(li, "mesh_location", None))),
                    "thread": wg, "warp": warp, "resource": resource,
                    "key": None if kt is None else list(kt),
                    "allocation": -1 if kt is None else self.recorder.live_allocation(
                        kernel, resource, kt),
                    "source_info": getattr(li, "source_info", None),
                    "num_arrivals": getattr(bar, "num_arrivals", None),
                    "arrivals": getattr(bar, "arrivals_count", None),
                    "phase": getattr(bar, "phase", None),
                })
        out.sort(key=lambda w: (w["device"], w["block"], w["thread"], w["warp"] or -1))
        return out

    # The wrappers below run once per allocation request, with the interpreter's
    # memory lock held: they read what can change (existence, ref counts) and keep
    # the rest as is. Formatting (e.g. a dtype's name) waits until after the run
    # (`EventTable.from_records`).
    def _wrap_alloc_buffer(self, orig):
        record = self.recorder.record
        spaces = self.spaces

        def allocate_buffer(sm, key, ref_count, value, logical_shape=None, logging_info=None):
            with sm.lock:
                mem = sm.mem
                existed = key in mem
                orig(sm, key, ref_count, value, logical_shape, logging_info)
                device, block, thread, warp, src = _where(logging_info)
                record(
                    getattr(sm, "_pallas_viz_kernel", -1), "join" if existed else "create",
                    "buffer", spaces.get(key.memory_space_id), key.device_id, block,
                    thread, warp, _key_tuple(key),
                    getattr(mem.get(key), "ref_count", ref_count),
                    tuple(value.shape), value.dtype, int(value.nbytes), src,
                )

        return allocate_buffer

    def _wrap_alloc_barrier(self, orig, resource):
        record = self.recorder.record

        # 0.12: allocate_barrier(key, thread, ref_count, ...); 0.11: (key, ref_count, ...).
        def allocate(sm, key, *args, **kwargs):
            with sm.lock:
                mem = sm.mem
                existed = key in mem
                orig(sm, key, *args, **kwargs)
                device, block, wg, warp, src = _where(kwargs.get("logging_info"))
                if wg < 0 and args and hasattr(args[0], "device_id"):
                    device, wg, warp = _thread_ids(args[0])
                record(
                    getattr(sm, "_pallas_viz_kernel", -1), "join" if existed else "create",
                    resource, None, key.device_id, block, wg, warp, _key_tuple(key),
                    getattr(mem.get(key), "ref_count", kwargs.get("ref_count", 1)), None,
                    None, 0, src,
                )

        return allocate

    def _wrap_free(self, orig, resource):
        record = self.recorder.record
        spaces = self.spaces
        is_buffer = resource == "buffer"

        def deallocate(sm, key, *args, **kwargs):
            with sm.lock:
                mem = sm.mem
                obj = mem.get(key)
                orig(sm, key, *args, **kwargs)
                freed = mem.get(key) is not obj
                li = kwargs.get("logging_info")
                if li is None and args and not hasattr(args[-1], "device_id"):
                    li = args[-1]
                device, block, wg, warp, src = _where(li)
                if wg < 0 and args and hasattr(args[0], "device_id"):
                    device, wg, warp = _thread_ids(args[0])
                if is_buffer and obj is not None:
                    shape, dtype, nbytes = tuple(obj.shape), obj.dtype, int(obj.size)
                else:
                    shape = dtype = None
                    nbytes = 0
                record(
                    getattr(sm, "_pallas_viz_kernel", -1), "free" if freed else "release",
                    resource, spaces.get(key.memory_space_id) if is_buffer else None,
                    key.device_id, block, wg, warp, _key_tuple(key),
                    int(getattr(obj, "ref_count", 0)), shape, dtype, nbytes, src,
                )

        return deallocate

    def _wrap_set_failed(self, orig):
        hooks = self

        def set_failed(sm, exception, failed_thread=None, top_level=True):
            with sm.lock:
                if not getattr(sm, "_pallas_viz_failed", True) and sm._failure is None:
                    object.__setattr__(sm, "_pallas_viz_failed", True)
                    hooks._record_failure(sm, exception, failed_thread)
            return orig(sm, exception, failed_thread, top_level)

        return set_failed

    def _record_failure(self, sm, exception, failed_thread) -> None:
        info = failure_details(exception, failed_thread, self)
        kernel = getattr(sm, "_pallas_viz_kernel", -1)
        self.recorder.fail(kernel, info)
        if info.get("device") is not None and info.get("thread") is not None:
            req = info.get("request") or {}
            key = (req.get("memory_space_id", -1), info["device"], req.get("block_id", -1),
                   req.get("thread_id", -1), req.get("initial_ref_count", 0),
                   req.get("buffer_id", -1))
            ms = self.spaces.get(req.get("memory_space_id", -1))
            self.recorder.record(kernel, "error", req.get("resource", "buffer"), ms,
                                 info["device"], info.get("block", ()), info["thread"],
                                 info.get("warp"), key, 0, req.get("shape"), req.get("dtype"),
                                 0, info.get("source_info"))


def failure_details(exception: BaseException, failed_thread, hooks: _Hooks) -> dict:
    """What was being served when the interpreter failed, read from the traceback."""
    info: dict = {"type": type(exception).__name__, "message": str(exception)}
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
    name = None
    tb = exception.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith("gpu_callbacks.py"):
            name = tb.tb_frame.f_code.co_name
        tb = tb.tb_next
    return name


_active_lock = threading.Lock()
_active: _Hooks | None = None


@contextlib.contextmanager
def hooked(recorder, detect_races: bool = False, timeout_s: float | None = None):
    """Install the recording hooks for the duration of the block, then remove them.

    The hooks are removed and the interpreter state is reset on every exit:
    normal, exception or KeyboardInterrupt. A monitor thread stops a kernel that
    waits on barriers without progress for `timeout_s` seconds, and aborts the
    running kernel on Ctrl-C (`hooks.monitor.interrupted`, `.deadlocked`).
    """
    from ._jax.monitor import Monitor
    from .errors import TraceActiveError

    global _active
    hooks = _Hooks(recorder, detect_races)
    with _active_lock:
        if _active is not None:
            raise TraceActiveError(
                "pallas_viz.trace() is already recording (nested, or in another Python "
                "thread); finish that trace first.")
        _active = hooks
    hooks.monitor = Monitor(hooks, timeout_s)
    try:
        reset_interpreter_state()
        hooks.install()
        hooks.monitor.start()
        yield hooks
    finally:
        try:
            hooks.monitor.stop()
        finally:
            try:
                hooks.remove()
                reset_interpreter_state()
            finally:
                with _active_lock:
                    _active = None


def hooks_installed() -> bool:
    """True if any pallas_viz hook is currently installed on `GPUSharedMemory`."""
    _, _, _, gsm = _import_internals()
    ours = (__name__, "pallas_viz._jax.monitor", "pallas_viz._jax.races")
    methods = [getattr(gsm.GPUSharedMemory, m) for m in _HOOKED_METHODS]
    methods += [getattr(c, m) for c in (gsm.Barrier, getattr(gsm, "ClusterBarrier", gsm.Barrier))
                for m in ("wait", "arrive")]
    try:
        from jax._src.pallas.mosaic_gpu.interpret import race_detection_state as rds
        methods += [rds.GPURaceDetectionState.check_read, rds.GPURaceDetectionState.check_write]
    except ImportError:  # pragma: no cover
        pass
    return any(getattr(m, "__module__", None) in ours for m in methods)


def raised_in_pallas(exc: BaseException) -> bool:
    """True if the exception was raised inside JAX's Pallas code (e.g. while tracing)."""
    tb = exc.__traceback__
    inside = False
    while tb is not None:
        if "/jax/_src/pallas/" in tb.tb_frame.f_code.co_filename:
            inside = True
        tb = tb.tb_next
    return inside


@contextlib.contextmanager
def quiet_callback_log():
    """Silence JAX's "jax.io_callback failed" stderr dump; pallas_viz reports it instead."""
    import logging

    logger = logging.getLogger("jax._src.callback")
    old = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = old


@contextlib.contextmanager
def simulated_device_request_bug():
    """SIMULATION of an interpreter bug: device-level requests get a non-zero thread id.

    While active, every allocation request made for a whole device (kernel operands
    and pallas_call scratch) with a ref count above one carries
    ``thread_id = ref count`` (the number of threads), as an interpreter that maps
    threads wrongly would. The interpreter then raises ``ValueError: `thread_id` must
    be zero when allocating a buffer for all threads``. JAX's caches are cleared on
    entry and exit so that kernels are re-traced with and without the change.
    """
    jax, _, cb, gsm = _import_internals()
    orig = cb._make_allocation_request_array

    def make_request(*, token, compute_unit, memory_space_id, initial_ref_count=1):
        token, arr = orig(token=token, compute_unit=compute_unit,
                          memory_space_id=memory_space_id, initial_ref_count=initial_ref_count)
        if isinstance(compute_unit, gsm.Device) and int(initial_ref_count) > 1:
            req = gsm.HostAllocationRequest.from_array(arr)
            arr = gsm.HostAllocationRequest(
                memory_space_id=req.memory_space_id, device_id=req.device_id,
                block_id=req.block_id, thread_id=int(initial_ref_count),
                initial_ref_count=req.initial_ref_count).as_np_array
        return token, arr

    cb._make_allocation_request_array = make_request
    jax.clear_caches()
    try:
        yield
    finally:
        cb._make_allocation_request_array = orig
        jax.clear_caches()
