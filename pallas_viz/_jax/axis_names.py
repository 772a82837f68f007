"""The kernel's own axis names, seen while JAX traces a kernel under `pv.trace()`.

The interpreter turns each `run_scoped` of a kernel into allocation callbacks at trace
time, with the equation's `source_info` bound into them; its `JaxprInterpreter` holds
the kernel's mesh (thread, grid and cluster names) right there. Wrapping that one
method maps each such `source_info` object to the mesh's names, so the recorded
requests of a kernel traced inside `pv.trace()` carry its names. Its `axis_index`
equations are noted too, by their user line, with the axis name they resolved to
(`sources.note_axis_index`): a branch on `axis_index(wg_axis)`, the name a parameter or
an attribute, reads the thread axis; and each scope's line with its kernel's thread axis
(`sources.note_scope_thread_axis`). Those notes last for the process: a kernel JAX
compiled before a later trace is not traced again, and `kernel_source` reads the names
from the source, else from them.
"""

from __future__ import annotations

from .sources import note_axis_index, note_enclosing, note_scope_thread_axis


class AxisNames:
    """`source_info` object -> (thread axis, grid axes, cluster axes), for this trace."""

    def __init__(self):
        self.by_source: dict[int, tuple] = {}
        self._keep: list = []  # the source infos named, kept alive so their ids stay theirs
        self._cls = None
        self._originals: dict = {}  # method name -> the interpreter's own

    def install(self) -> None:
        try:
            from jax._src.pallas.mosaic_gpu.interpret import jaxpr_interpret as jxi
        except ImportError:  # pragma: no cover - both supported versions have it
            return
        cls = getattr(jxi, "JaxprInterpreter", None)
        orig = getattr(cls, "_interpret_run_scoped_p", None) if cls is not None else None
        if orig is None:  # pragma: no cover - both supported versions have it
            return
        names = self
        interpreter_file = orig.__code__.co_filename

        def _interpret_run_scoped_p(interp, eqn, *args, **kwargs):
            try:
                names.note(eqn.source_info, getattr(interp, "mesh", None))
                note_enclosing(eqn.source_info, interpreter_file)  # (a helper's call)
            except Exception:  # noqa: BLE001 - naming must never break a kernel's tracing
                pass
            return orig(interp, eqn, *args, **kwargs)

        self._cls = cls  # (each original recorded before its method is replaced)
        self._originals["_interpret_run_scoped_p"] = orig
        cls._interpret_run_scoped_p = _interpret_run_scoped_p
        orig_index = getattr(cls, "_interpret_axis_index_p", None)
        if orig_index is None:  # pragma: no cover - both supported versions have it
            return

        def _interpret_axis_index_p(interp, eqn, *args, **kwargs):
            try:  # (the name as the interpreter sees it: a parameter's, an attribute's)
                note_axis_index(eqn.source_info, eqn.params.get("axis_name"))
            except Exception:  # noqa: BLE001 - naming must never break a kernel's tracing
                pass
            return orig_index(interp, eqn, *args, **kwargs)

        self._originals["_interpret_axis_index_p"] = orig_index
        cls._interpret_axis_index_p = _interpret_axis_index_p

    def remove(self) -> None:
        """Restore the interpreter's methods (idempotent)."""
        for name, orig in self._originals.items():
            setattr(self._cls, name, orig)
        self._originals.clear()
        self._cls = None

    def note(self, source_info, mesh) -> None:
        if source_info is None or mesh is None:
            return
        thread = getattr(mesh, "thread_name", None)
        note_scope_thread_axis(source_info, thread)  # (for later traces of it, jit-cached)
        grid = tuple(n for n in (getattr(mesh, "grid_names", None) or ()) if isinstance(n, str))
        cluster = tuple(n for n in (getattr(mesh, "cluster_names", None) or ())
                        if isinstance(n, str))
        if id(source_info) not in self.by_source:
            self._keep.append(source_info)
            self.by_source[id(source_info)] = (thread if isinstance(thread, str) else None,
                                               grid, cluster)

    def thread_axes(self, records) -> dict[int, str]:
        """kernel index -> its thread axis name, from recorded (kernel, ..., source) rows."""
        out: dict[int, str] = {}
        if not self.by_source:
            return out
        for kernel, source in records:
            if kernel in out or source is None:
                continue
            hit = self.by_source.get(id(source))
            if hit is not None and hit[0]:
                out[kernel] = hit[0]
        return out
