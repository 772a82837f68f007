"""The user's source lines behind JAX `SourceInfo`s, stacks and exceptions."""

from __future__ import annotations

import dataclasses
import functools
import linecache
import os
import re
import sys

from ..kernel_source import (
    enclosing_branch,
    helper_call,
    note_thread_axis,
    note_traced_axis,
    scoped_operands,
    traced_version,
)
from ..model import SourceLocation
from .version import _import_internals

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_EXAMPLES_DIR = os.path.join(_PKG_DIR, "examples")
_SCRIPT_DIRS = {os.path.join(p, "bin") for p in {sys.prefix, sys.exec_prefix}}


@functools.lru_cache(maxsize=4096)
def _is_user_file(filename: str) -> bool:
    """True for user code, the bundled examples and JAX's own ops kernels."""
    if filename.startswith(_EXAMPLES_DIR) or "/jax/experimental/pallas/ops/" in filename:
        return True
    if filename.startswith(_PKG_DIR):
        return False
    if os.path.dirname(filename) in _SCRIPT_DIRS:  # console-script shims such as pallas-viz
        return False
    for part in ("/jax/", "/jaxlib/", "/site-packages/IPython/", "/concurrent/futures/",
                 "/threading.py", "/contextlib.py", "/runpy.py", "<frozen "):
        if part in filename:
            return False
    return not filename.startswith(os.path.dirname(os.__file__))


_HARNESS = os.path.join(_EXAMPLES_DIR, "shapes.py")


def _is_harness(code) -> bool:
    """A function of pallas_viz's example harness (`examples.shapes.launch`) that calls the
    body it launches: not a call of the user's."""
    return (code.co_filename == _HARNESS
            and getattr(code, "co_qualname", "").startswith("launch.<locals>."))


def _location(file: str, line: int, column: int | None, function: str | None) -> SourceLocation:
    code = linecache.getline(file, line).rstrip("\n") or None
    return SourceLocation(file=file, line=int(line), column=column, function=function, code=code)


# id(SourceInfo) -> (the SourceInfo, its line's file, that file's lines, the branch
# search's file, its lines, the location, `traced_version()`): a jit-cached kernel hands
# every run the same SourceInfo objects, so each trace after the first reuses their
# locations while linecache still holds the same text of both files (what the lookup
# would read again) and no axis name was noted since (a branch's axes may read it).
_resolved: dict[int, tuple] = {}
_MAX_RESOLVED = 4096


def source_location(source_info) -> SourceLocation | None:
    """The user's line behind a JAX `SourceInfo`, with its enclosing branch (and, for a
    `pl.run_scoped` call, its operands' names), or None.

    JAX's traceback for an equation ends at the function it traced as a
    sub-computation (a `pl.when` body, a `lax.cond` branch, a loop body, a warp-level
    body, the kernel body): that outermost user frame's code object says where to look
    for the branch, and, when the line is in a helper it called, its line is the
    location's `via`. When that function is itself written in a helper (a `pl.when` body
    inside one), `via` is the call that led into the helper, read from the equations the
    interpreter traced it inside of (`note_enclosing`), or else from the source.
    """
    if source_info is None:
        return None
    hit = _resolved.get(id(source_info))
    if (hit is not None and hit[0] is source_info and linecache.getlines(hit[1]) is hit[2]
            and linecache.getlines(hit[3]) is hit[4] and hit[6] == traced_version()):
        return hit[5]
    if getattr(source_info, "traceback", None) is None:
        return None
    siu = _siu or _load_siu()
    user = _user_frames(source_info)
    if not user:
        return None
    f = siu.raw_frame_to_frame(*user[0])
    lines = linecache.getlines(f.file_name)
    loc = _location(f.file_name, f.start_line, f.start_column, f.function_name)
    scope = user[-1][0]
    scope_lines = linecache.getlines(scope.co_filename)
    branch = enclosing_branch(scope.co_filename, scope.co_name, scope.co_firstlineno)
    operands = scoped_operands(f.file_name, f.start_line) or None
    via = _helper_call(siu, user)
    if via is None and not _is_harness(scope):
        # the traced function itself may be written inside a helper (not the example
        # harness's core_map body: the body it launches is the kernel body)
        via = _enclosing_call(siu, source_info, scope)
    if branch is not None or operands is not None or via is not None:
        loc = dataclasses.replace(loc, branch=branch, operands=operands, via=via)
    if lines and scope_lines:  # (a file linecache cannot read is looked up again)
        if len(_resolved) >= _MAX_RESOLVED:
            _resolved.clear()
        _resolved[id(source_info)] = (source_info, f.file_name, lines, scope.co_filename,
                                      scope_lines, loc, traced_version())
    return loc


def note_axis_index(source_info, axis_name) -> None:
    """Note the axis name(s) an `axis_index` equation JAX is tracing names, at its user
    line (`kernel_source.note_traced_axis`): resolved, whatever expression gave them."""
    names = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    names = [n for n in names if isinstance(n, str)]
    if not names or getattr(source_info, "traceback", None) is None:
        return
    where = _user_line(source_info)
    if where is not None:
        for n in names:
            note_traced_axis(*where, n)


def note_scope_thread_axis(source_info, axis_name) -> None:
    """Note the thread axis of the kernel a scope (`run_scoped`) JAX is tracing belongs
    to, at the scope's user line (`kernel_source.note_thread_axis`): the line its
    allocations are recorded at."""
    if not isinstance(axis_name, str) or getattr(source_info, "traceback", None) is None:
        return
    where = _user_line(source_info)
    if where is not None:
        note_thread_axis(*where, axis_name)


def _user_line(source_info) -> tuple[str, int] | None:
    """(file, line) of the innermost user frame of a `SourceInfo` with a traceback: the
    line its equation is recorded at (`source_location`'s), or None."""
    user = _user_frames(source_info)
    if not user:
        return None
    f = (_siu or _load_siu()).raw_frame_to_frame(*user[0])
    return f.file_name, f.start_line


def _user_frames(source_info) -> list[tuple]:
    """(code, lasti) of the user's frames in a `SourceInfo`'s traceback (one that has one),
    innermost first."""
    code, lasti = source_info.traceback.raw_frames()
    return [(c, i) for c, i in zip(code, lasti) if _is_user_file(c.co_filename)]


def _helper_call(siu, frames) -> SourceLocation | None:
    """The call in the traced function (the outermost of `frames`, a traceback's user
    frames) that led to a helper's line, or None when the line is in that function."""
    while len(frames) > 1 and _is_harness(frames[-1][0]):
        frames = frames[:-1]  # a body the example harness launches is the kernel body
    if len(frames) <= 1:
        return None
    c = siu.raw_frame_to_frame(*frames[-1])
    return _location(c.file_name, c.start_line, c.start_column, c.function_name)


# id(SourceInfo) -> (the SourceInfo, the SourceInfos of the equations the interpreter was
# inside of when it traced it, innermost first): noted while `pv.trace()` is active (its
# axis-names hook), kept across traces, as a jit-cached kernel hands every run the same
# SourceInfo objects.
_enclosing: dict[int, tuple] = {}
_MAX_ENCLOSING = 16384


def note_enclosing(source_info, interpreter_file: str) -> None:
    """Note the equations around the one whose `source_info` the GPU interpreter is
    tracing now (a `pl.when` body's `cond`, a loop, a `run_scoped` or warp-level body),
    read from the interpreter's own frames (`interpreter_file`'s `interpret`) on the
    stack. JAX roots each traced function's tracebacks at that function, so a `pl.when`
    body inside a helper does not show the kernel body's call of the helper; the
    equation that traced the body does."""
    if source_info is None:
        return
    outer, seen = [], {id(source_info)}
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_filename == interpreter_file and f.f_code.co_name == "interpret":
            si = getattr(f.f_locals.get("eqn"), "source_info", None)
            if si is not None and id(si) not in seen:
                seen.add(id(si))
                outer.append(si)
        f = f.f_back
    if len(_enclosing) >= _MAX_ENCLOSING:
        _enclosing.clear()
    _enclosing[id(source_info)] = (source_info, tuple(outer))


def _enclosing_call(siu, source_info, scope) -> SourceLocation | None:
    """For a line in a traced function (a `pl.when` body, ...) written inside a helper:
    the call that led into the helper, from the innermost equation around it whose
    traceback leaves its own traced function (`note_enclosing`), or None. For a kernel
    JAX traced while no trace was recording (or an equation with none noted around it),
    the helper's one call in its file (`kernel_source.helper_call`)."""
    hit = _enclosing.get(id(source_info))
    if hit is None or hit[0] is not source_info or not hit[1]:
        return helper_call(scope.co_filename, scope.co_name, scope.co_firstlineno)
    for si in hit[1]:
        if getattr(si, "traceback", None) is None:
            continue
        via = _helper_call(siu, _user_frames(si))
        if via is not None:
            return via
    return None


_siu = None  # JAX's source_info_util, once imported (and its version checked)


def _load_siu():
    global _siu
    _, _siu, _, _ = _import_internals()
    return _siu


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
                best = _location(fn, tb.tb_lineno, _tb_column(tb), tb.tb_frame.f_code.co_name)
            tb = tb.tb_next
        if best is not None:
            return best
    return None


def _tb_column(tb) -> int | None:
    """The column of the call a traceback entry was in (the kernel's call, not its line's
    first token: `print(kernel(x))`), when Python knows it and it is on that line."""
    try:
        pos = list(tb.tb_frame.f_code.co_positions())[tb.tb_lasti // 2]
    except (IndexError, ValueError):
        return None
    return pos[2] if pos[0] == tb.tb_lineno and pos[2] is not None else None


_ESCAPED_SCOPE = re.compile(r"scoped at (?P<file>\S.*?):(?P<line>\d+) traced for pallas "
                            r"run_scoped")


def escaped_scope_location(exc: BaseException) -> SourceLocation | None:
    """The `pl.run_scoped` line whose ref escaped its scope, if `exc` is JAX's
    `UnexpectedTracerError` for one (a kernel keeps a scoped ref and uses it after the
    scope: JAX raises it when the kernel is called, before it runs); else None."""
    if type(exc).__name__ != "UnexpectedTracerError":
        return None
    m = _ESCAPED_SCOPE.search(str(exc))
    if m is None:
        return None
    file, line = m["file"], int(m["line"])
    code = linecache.getline(file, line).strip() or None
    return SourceLocation(file=file, line=line, code=code)


def raised_in_pallas(exc: BaseException) -> bool:
    """True if the exception was raised inside JAX's Pallas code (e.g. while tracing)."""
    tb = exc.__traceback__
    inside = False
    while tb is not None:
        if "/jax/_src/pallas/" in tb.tb_frame.f_code.co_filename:
            inside = True
        tb = tb.tb_next
    return inside


def silent_failure_text(exc: BaseException) -> str:
    """What an exception JAX raised without a message (a bare `assert`) was about: the line
    of JAX that raised it; for GPU interpret mode's whole-array-blocks assertion, the
    operands whose `BlockSpec` tiles them. "" if there is nothing to read."""
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last, tb = tb, tb.tb_next
    if last is None:
        return ""
    frame, lineno = last.tb_frame, last.tb_lineno
    filename = frame.f_code.co_filename
    code = linecache.getline(filename, lineno).strip()
    if not code:
        return ""
    text = f"{os.path.basename(filename)}:{lineno}: {code}"
    grid_mapping = frame.f_locals.get("grid_mapping")
    if "has_trivial_window" in code and grid_mapping is not None:
        tiled = []
        for bm in getattr(grid_mapping, "block_mappings", ()):
            try:
                if bm.has_trivial_window():
                    continue
                block = tuple(getattr(d, "block_size", d) for d in bm.block_shape)
                whole = tuple(bm.array_aval.shape)
            except Exception:  # noqa: BLE001 - a description only: never fail on it
                continue
            tiled.append(f"{bm.origin}: block {block} of {whole}")
        if tiled:
            text += " (blocks that tile their operand: " + "; ".join(tiled) + ")"
    return text
