"""Source snippets: the code around every line a trace names, kept inside the trace.

They are taken once, while the trace is recorded, from the text Python's `linecache`
holds for each file or notebook cell: the text each location's code line was read from,
so no file is opened or even looked at again after a run (a file linecache does not
hold is read through `fileio.read_source_lines`: regular files of bounded size only).
They are saved with the trace. Every view (widget, HTML export) shows these stored
lines and never opens a path a trace names: a trace file may come from anyone.
"""

from __future__ import annotations

import linecache

from .fileio import read_source_lines

CONTEXT = 5  # lines either side
MAX_LINE_CHARS = 2_000
MAX_SNIPPETS = 20_000

Snippets = dict[tuple[str, int], tuple[int, list[str]]]  # (file, line) -> (start, lines)


def locations(trace):
    """Every `SourceLocation` a trace holds (events, findings and their consequences, the
    failure, kernel launches) and the branches they name."""
    todo = [s for s in trace.events.sources if s is not None]
    stack = list(trace.findings)
    while stack:
        f = stack.pop()
        todo += [x for x in [f.source, f.branch, *f.related] if x is not None]
        stack += list(f.consequences)
    if trace.failure is not None and trace.failure.source is not None:
        todo.append(trace.failure.source)
    todo += [k.launch for k in trace.kernels if k.launch is not None]
    seen = set()
    while todo:
        loc = todo.pop()
        if id(loc) in seen:
            continue
        seen.add(id(loc))
        yield loc
        if loc.branch is not None:
            todo.append(loc.branch)


# Notebook cells whose lines, as the user typed them, read otherwise than the code Python
# ran (registered by `magic.py`): a `%%pallas_trace` cell runs its body under a blank line
# 1 where the user sees `%%pallas_trace ...`, and a `%pallas_trace` statement runs alone
# where the user sees it in its cell. file -> (the list of lines linecache held for it when
# registered, the lines to show instead, numbered as the code's): the code's own text
# still reads as Python for everything that parses it (`kernel_source`).
_typed: dict[str, tuple[list[str], list[str]]] = {}
MAX_TYPED = 512


def register_typed(file: str, lines: list[str]) -> None:
    """Show `lines` (numbered from 1, as the cell shows them) for the cached cell `file`,
    while linecache holds the code it holds now."""
    entry = linecache.cache.get(file)
    if entry is None or len(entry) != 4:
        return
    _typed.pop(file, None)
    if len(_typed) >= MAX_TYPED:
        _typed.pop(next(iter(_typed)))
    _typed[file] = (entry[2], [ln.rstrip("\r\n") for ln in lines])


def _read_lines(file: str) -> list[str] | None:
    """The lines (no line endings) linecache holds for `file` (a notebook cell, or a file
    it read when a location's code line was looked up), else the file itself if it is a
    regular file of bounded size (never a FIFO, a device or /proc). A cell registered by
    `register_typed` gives its lines as typed."""
    entry = linecache.cache.get(file)
    if entry is not None and len(entry) == 4:  # (size, mtime or None for a cell, lines, name)
        raw = entry[2]
        typed = _typed.get(file)
        if typed is not None and typed[0] is raw:
            return typed[1]
        hit = _held.get(file)
        if hit is not None and hit[0] is raw:
            return hit[1]
        lines = [ln.rstrip("\r\n") for ln in raw]
        if len(_held) >= 64:
            _held.clear()
        _held[file] = (raw, lines)  # (keeps `raw` alive: its identity stays its own)
        return lines
    if file.startswith("<") and file.endswith(">"):
        return None
    return read_source_lines(file)


# file -> (the list of lines linecache held, those lines without line endings): every
# trace of a kernel names the same files, and linecache keeps the same list until the
# file is read again.
_held: dict[str, tuple[list[str], list[str]]] = {}


def collect(trace) -> Snippets:
    """Read the code around every line `trace` names (call while recording)."""
    out: Snippets = {}
    files: dict[str, list[str] | None] = {}
    for loc in locations(trace):
        key = (loc.file, loc.line)
        if key in out or len(out) >= MAX_SNIPPETS:
            continue
        if loc.file not in files:
            files[loc.file] = _read_lines(loc.file)
        lines = files[loc.file]
        if not lines or not 1 <= loc.line <= len(lines):
            if loc.code is not None:
                out[key] = (loc.line, [loc.code[:MAX_LINE_CHARS]])
            continue
        start = max(1, loc.line - CONTEXT)
        end = min(len(lines), loc.line + CONTEXT)
        out[key] = (start, [ln[:MAX_LINE_CHARS] for ln in lines[start - 1:end]])
    return out


def lookup(trace, file: str, line: int) -> tuple[int, list[str]]:
    """The stored code around `line` of `file`: `(first line number, lines)`, or the
    stored code line alone, or `(line, [])` when the trace has none. Indexed once per
    trace and set of snippets (`_Index`): a view looks up every line a trace names."""
    found = trace.snippets.get((file, line))
    if found is not None:
        return found
    index = trace.__dict__.get("_snippet_index")
    if index is None or index.snippets is not trace.snippets or index.size != len(
            trace.snippets):
        index = trace.__dict__["_snippet_index"] = _Index(trace)
    return index.around(file, line)


class _Index:
    """A trace's snippets by file, and the code lines its locations store."""

    def __init__(self, trace):
        self.snippets, self.size = trace.snippets, len(trace.snippets)
        self.by_file: dict[str, list[tuple[int, list[str]]]] = {}
        for (f, _line), (start, lines) in trace.snippets.items():
            self.by_file.setdefault(f, []).append((start, lines))
        self.codes: dict[tuple[str, int], str] = {}
        for loc in locations(trace):
            if loc.code is not None:
                self.codes.setdefault((loc.file, loc.line), loc.code)

    def around(self, file: str, line: int) -> tuple[int, list[str]]:
        for start, lines in self.by_file.get(file, ()):
            if start <= line < start + len(lines):
                return start, lines
        code = self.codes.get((file, line))  # no snippet: the location's own code line
        return (line, [code]) if code is not None else (line, [])


def to_json(snippets: Snippets) -> list[dict]:
    return [{"file": f, "line": ln, "start": s, "lines": list(lines)}
            for (f, ln), (s, lines) in snippets.items()]


def from_json(items) -> Snippets:
    """Stored snippets from a trace file; raises ValueError/TypeError on a malformed one."""
    out: Snippets = {}
    if items is None:
        return out
    if not isinstance(items, list) or len(items) > MAX_SNIPPETS:
        raise ValueError(f"\"snippets\" must be a list of at most {MAX_SNIPPETS} items")
    for it in items:
        if not isinstance(it, dict):
            raise TypeError("a snippet must be an object")
        f, ln, s, lines = it.get("file"), it.get("line"), it.get("start"), it.get("lines")
        if not (isinstance(f, str) and _int(ln) and _int(s) and isinstance(lines, list)
                and len(lines) <= 2 * CONTEXT + 1
                and all(isinstance(x, str) and len(x) <= MAX_LINE_CHARS for x in lines)):
            raise ValueError(f"malformed snippet for {str(f)[:80]!r}")
        out[(f, ln)] = (s, list(lines))
    return out


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 < v < 10**8
