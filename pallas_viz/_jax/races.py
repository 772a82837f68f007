"""JAX's race reports (`RACE DETECTED`) turned into structured records.

JAX checks every read and write in `GPURaceDetectionState.check_read` /
`check_write`. 0.12 (with `on_race="raise"`, the default) raises
`RuntimeError("RACE DETECTED ...")`; the wrapper lets that error go on unchanged
and records both accesses: the current one from the call's arguments (and the
callback frame's `mesh_location`), the earlier one from the checking frame's
locals (`write_thread`/`read_thread`/`other_thread`, its range and the summarised
`file:line:col (function)` frame), each with its block and grid point (`grid`: the
cluster's coordinates, which tell blocks of one cluster from blocks of different grid
points). 0.11 only prints the report and sets
`races_found`, and the kernel runs on; there the first race of a kernel is
recorded, the earlier access found by the same check JAX made.
"""

from __future__ import annotations

import re
import sys

_FRAME_RE = re.compile(r"^(?P<file>.*?):(?P<line>\d+)(?::(?P<col>\d+))? \((?P<fn>[^)]*)\)$")
_KIND_RE = re.compile(r"^\s+(read|write) of", re.M)


def parse_frame(text) -> dict | None:
    """`file:line[:col] (function)` (JAX's `source_info_util.summarize`) as a dict."""
    if not isinstance(text, str):
        return None
    m = _FRAME_RE.match(text.strip().splitlines()[-1] if text.strip() else "")
    if not m:
        return None
    return {"file": m["file"], "line": int(m["line"]),
            "column": None if m["col"] is None else int(m["col"]), "function": m["fn"]}


class RaceHooks:
    """Wraps `check_read`/`check_write` of JAX's GPU race-detection state."""

    def __init__(self, hooks, race_module):
        self.hooks = hooks
        self.cls = getattr(race_module, "GPURaceDetectionState", None)
        self._originals: list = []
        # id(clock of an access) -> block: JAX keeps every access's clock in its lists,
        # so the id is stable; grid points run one after another with the same
        # flat block ids, so only this tells which grid point the earlier access ran in.
        self.block_by_clock: dict[int, tuple] = {}
        # id(clock) -> grid point (the cluster's coordinates, `MeshLocation.cluster_coords`):
        # two blocks of one grid point are blocks of one cluster, which a cluster barrier
        # can order; blocks of different grid points nothing orders.
        self.grid_by_clock: dict[int, tuple] = {}
        # id(clock) -> the access's `SourceInfo`: JAX keeps only a one-frame summary of an
        # earlier access, which loses the call that led to a helper's line (its `via`).
        self.source_by_clock: dict[int, object] = {}

    def install(self) -> None:
        if self.cls is None:
            return
        for name, kind in (("check_read", "read"), ("check_write", "write")):
            orig = getattr(self.cls, name)
            self._originals.append((name, orig, name in self.cls.__dict__))
            setattr(self.cls, name, self._wrap(orig, kind))

    def remove(self) -> None:
        for name, orig, own in reversed(self._originals):
            if own:
                setattr(self.cls, name, orig)
            elif name in self.cls.__dict__:
                delattr(self.cls, name)
        self._originals.clear()
        self.block_by_clock.clear()
        self.grid_by_clock.clear()
        self.source_by_clock.clear()

    def _wrap(self, orig, kind):
        races = self

        from .hooks import _block_of

        blocks = self.block_by_clock
        grids = self.grid_by_clock
        sources = self.source_by_clock

        def check(state, thread, clock, buffer_key, rnge, source_info=None):
            mesh = mesh_near(sys._getframe(1))
            blocks[id(clock)] = _block_of(mesh)
            grids[id(clock)] = _grid_of(mesh)
            sources[id(clock)] = source_info
            before = state.races_found
            try:
                out = orig(state, thread, clock, buffer_key, rnge, source_info)
                if state.races_found and not before:  # JAX 0.11: printed, not raised
                    try:
                        races._record(None, kind, thread, buffer_key, rnge, source_info,
                                      sys._getframe(1), state=state, clock=clock)
                    except Exception:  # noqa: BLE001 - never break the kernel
                        pass
                return out
            except RuntimeError as e:
                if str(e).startswith("RACE DETECTED"):
                    try:
                        races._record(e, kind, thread, buffer_key, rnge, source_info,
                                      sys._getframe(1))
                    except Exception:  # noqa: BLE001 - never mask JAX's own report
                        pass
                raise

        return check

    def _record(self, exc, kind, thread, key, rnge, source_info, caller, state=None,
                clock=None) -> None:
        hooks = self.hooks
        mesh = mesh_near(caller)
        from .hooks import _as_list, _block_of, _key_tuple, _thread_ids
        from .sources import _location

        block = _block_of(mesh)
        other_thread = other_range = other_frame = other_clock = None
        tb = exc.__traceback__ if exc is not None else None
        while tb is not None:
            loc = tb.tb_frame.f_locals
            if tb.tb_frame.f_code.co_filename.endswith("race_detection_state.py"):
                for prefix in ("write", "read", "other"):
                    if f"{prefix}_thread" in loc:
                        other_thread = loc[f"{prefix}_thread"]
                        other_range = loc.get(f"{prefix}_range")
                        other_frame = loc.get(f"{prefix}_frame")
                        other_clock = loc.get(f"{prefix}_clock")
            tb = tb.tb_next
        kinds = _KIND_RE.findall(str(exc)) if exc is not None else []
        other_kind = kinds[1] if len(kinds) > 1 else None
        if exc is None and state is not None:
            found = _earlier_conflict(state, kind, clock, key, rnge)
            if found is not None:
                other_kind, (other_thread, other_clock, other_range, other_frame) = found
        sm = hooks.running_memory()
        kernel = getattr(sm, "_pallas_viz_kernel", -1) if sm is not None else -1
        kt = _key_tuple(key)
        device, wg, warp = _thread_ids(thread)
        access = {"kind": kind, "device": device, "block": _as_list(block), "thread": wg,
                  "warp": warp, "range": repr(rnge), "source_info": source_info}
        grid = _grid_of(mesh)
        if grid is not None:
            access["grid"] = list(grid)
        where = parse_frame(other_frame)
        other = {"kind": other_kind, "range": repr(other_range),
                 "source": None if where is None else _location(
                     where["file"], where["line"], where["column"], where["function"])}
        info = self.source_by_clock.get(id(other_clock))
        if info is not None and where is not None:
            # its whole location (the call that led to a helper's line too), resolved
            # after the run as the access's is; the summary's line is the fallback
            other["source_info"] = info
        if other_thread is not None and hasattr(other_thread, "warpgroup_id"):
            od, owg, owarp = _thread_ids(other_thread)
            oblock = self.block_by_clock.get(id(other_clock))
            ogrid = self.grid_by_clock.get(id(other_clock))
            other.update(device=od, thread=owg, warp=owarp)
            if oblock is not None:
                other["block"] = list(oblock)
            if ogrid is not None:
                other["grid"] = list(ogrid)
        resource = "buffer"
        alloc = hooks.recorder.live_allocation(kernel, resource, kt)
        hooks.recorder.race(kernel, {
            "memory_space": hooks.spaces.get(kt[0]), "key": list(kt), "allocation": alloc,
            "access": access, "other": other,
            "message": "RACE DETECTED" if exc is None else str(exc).strip().splitlines()[0],
        })


def _grid_of(mesh_location) -> tuple[int, ...] | None:
    """The grid point (cluster coordinates) an access ran in; None without a location."""
    try:
        return tuple(int(x) for x in mesh_location.cluster_coords)
    except Exception:  # noqa: BLE001 - no location (or an odd one): not known
        return None


def mesh_near(frame, depth: int = 6):
    """The `MeshLocation` of the access being checked: the caller's `mesh_location`, or
    that of its `logging_info` or task (`self`): TMEM loads and async copies check from a
    closure or a task object. Looked for in up to `depth` frames."""
    while frame is not None and depth > 0:
        loc = frame.f_locals
        mesh = loc.get("mesh_location")
        if mesh is None:
            for holder in ("logging_info", "self", "task"):
                mesh = getattr(loc.get(holder), "mesh_location", None)
                if mesh is not None:
                    break
        if mesh is not None:
            return mesh
        frame, depth = frame.f_back, depth - 1
    return None


def _earlier_conflict(state, kind, clock, key, rnge):
    """(kind, (thread, clock, range, frame)) of the access JAX found racing with this one."""
    base = sys.modules.get(type(state).__mro__[1].__module__)
    overlap = getattr(base, "_ranges_overlap", None)
    rng = getattr(rnge, "range", rnge)
    lists = [("write", state.writes.get(key, []))]
    if kind == "write":
        lists.append(("read", state.reads.get(key, [])))
    for other_kind, accesses in lists:
        for acc in list(accesses):
            if acc[1] is clock:
                continue
            if acc[1].ordered(clock):
                continue
            if overlap is not None and not overlap(rng, acc[2]):
                continue
            return other_kind, acc
    return None
