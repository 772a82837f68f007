"""The trace file format, checked: a trace file is untrusted input.

`pv.load` reads a file through `parse_json` (a size cap, a nesting-depth cap, finite numbers
only) and `Trace.from_dict` checks every field it keeps against this schema: types, ranges,
index bounds between the tables, and the caps below, which bound what a view allocates for a
file (a `threads_per_block` of 10**8 in a 2 KB file would make every view allocate 10**8
cells per block). A file either loads into a trace every view can render, or raises one
`TraceFileError` naming the field:

    corrupt trace: events.columns.block[17]: -5 is out of range (-1..3)

The format (version 2):

    {"format": "pallas_viz.trace", "version": 1 | 2,
     "kernels": [{"index": i (== its position), "name": str|null, "launch": Source|null,
                  "num_devices", "threads_per_block", "blocks_per_cluster": int >= 1,
                  "thread_axis": str|null}],
     "events": {"columns": {name: [int, ...] for every column of `store.COLUMNS`},
                "blocks": [[coord, ...]], "shapes": [[dim, ...]], "dtypes": [str],
                "sources": [Source]},
     "failure": null | {"type", "message": str, "kernel": int|null, "cell": Cell|null,
                        "warp": int|null, "request": {..}|null, "source": Source|null,
                        "phase": "run" | "trace", "caught": bool (optional: a "trace"
                        failure whose error the code in the traced block caught),
                        "in_body": bool (optional: a "trace" failure the kernel's own
                        code raised while JAX traced it)},
     "meta": {str: JSON value}  ("deadlocks", "races", "stopped_kernels", "device" checked),
     "snippets": [{"file", "line", "start", "lines"}],
     "findings": [...]}  (ignored: the analyses recompute them from the events)

    Source = {"file": str, "line": int, "column": int|null, "function": str|null,
              "code": str|null, "branch": Source|null, "kind": "branch"|"loop"|null,
              "operands": [str] (optional: a `pl.run_scoped` call's operand names),
              "starts": [Source] (optional: where a `lax.cond`'s branches open a scope),
              "axes": [str] (optional: the mesh axes a branch's condition reads)}
    Cell = [device, block (list of coordinates) | null, thread]

Event columns hold indices: `kernel` into "kernels", `block` into "blocks" (-1: a kernel-level
request, made for a whole device), `shape`/`dtype`/`source` into their tables (-1: none),
`allocation` a lifetime id (-1: unknown; ids count create events, so below the number of
events). `thread_seq` is recomputed on load.
"""

from __future__ import annotations

import json
import math
import re
from typing import NoReturn

import numpy as np

from .errors import TraceFileError

FORMAT = "pallas_viz.trace"
# 2: kernel-level requests have block -1 (1 wrote `()`, also the block of a kernel
# without a grid); findings are a tree of root causes; sources carry their branch.
VERSION = 2

# -- caps (each is named in the error of a file that exceeds it)
MAX_FILE_BYTES = 2 * 1024**3  # a trace file
MAX_DEPTH = 64  # JSON nesting
MAX_EVENTS = 50_000_000
MAX_KERNELS = 100_000
MAX_DEVICES = 1024  # num_devices; a device index is below it
MAX_THREADS_PER_BLOCK = 1024  # the CUDA limit; thread ids are 0..1023 (-1: none)
MAX_WARP = 31  # 1024 threads are 32 warps (-1: none)
MAX_BLOCKS_PER_CLUSTER = 64
# a collective's initial ref count: the threads that share it (of a cluster, for a
# cluster barrier); the threads a partial one misses are drawn as cells
MAX_REF_COUNT = MAX_THREADS_PER_BLOCK * MAX_BLOCKS_PER_CLUSTER
MAX_BLOCKS = 1_000_000  # distinct block coordinates of a trace
# (kernel, device, block) rows x their threads: the cells the grid views draw, each with a
# cost; at most MAX_CELLS or CELLS_PER_EVENT per event (a big trace has big grids, a small
# file cannot claim one), and never more than MAX_CELLS_TOTAL
MAX_CELLS = 2**16
CELLS_PER_EVENT = 8
MAX_CELLS_TOTAL = 2**24
MAX_RANK = 8  # dimensions of a block coordinate or a shape
MAX_COORD = 2**31 - 1
MAX_DIM = 2**31
MAX_SHAPES = 1_000_000
MAX_DTYPES = 10_000
MAX_DTYPE_CHARS = 64
MAX_SOURCES = 4096  # distinct source locations (each is looked up by the views)
MAX_FILE_NAME = 4096
MAX_CODE_LINE = 2000
MAX_NAME = 1000  # function, kernel, thread axis, operand names
MAX_OPERANDS = 4096  # a `pl.run_scoped` call's operand names
MAX_LINE = 10**8 - 1
MAX_COLUMN = 10_000  # a source column (the caret under a code line is this wide)
SOURCE_KINDS = ("branch", "loop")  # what a source's `kind` can name
MAX_BRANCH_DEPTH = 32  # a source's chain of enclosing branches, starts and call sites
MAX_BRANCHES = 1024  # the branches of a `lax.switch` whose starts a source names
MAX_MESSAGE = 100_000  # failure message, type names and other free text
MAX_NBYTES = 2**40
MAX_RECORDS = 100_000  # deadlock / race records, waiters, stopped kernels
MAX_META_NODES = 10_000_000  # JSON values in "meta" (and a failure's "request")
MAX_META_CHARS = 256 * 1024**2  # characters of strings in "meta"
MAX_KEY_CHARS = 256

_DEADLOCK_RESOURCES = ("barrier", "cluster_barrier", "named_barrier")
# what a `TraceFileError` says when the analyses could not read a checked file (a gap in
# this schema: the tests treat it as a failure)
ANALYSES_FAILED = "the analyses cannot read this trace"


def fail(path: str, what: str) -> NoReturn:
    raise TraceFileError(f"corrupt trace: {path}: {what}")


def show(v) -> str:
    """A short, inert description of a JSON value for an error message."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        s = str(v) if abs(v) < 10**30 else f"an integer of {len(str(abs(v)))} digits"
        return s
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return repr(v[:40]) + ("..." if len(v) > 40 else "")
    if isinstance(v, list):
        return f"a list of {len(v)}"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def _got(v) -> str:
    """"a string 'x'", "an integer 3", "null": the kind of a JSON value and the value."""
    kind, value = _kind(v), show(v)
    return kind if value == kind else f"{kind} {value}"


def _kind(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def key_path(path: str, key) -> str:
    """`path.key`, the key quoted when it is not a plain name (it comes from the file)."""
    k = str(key)
    if _PLAIN_NAME.fullmatch(k):
        return f"{path}.{k}" if path else k
    return f"{path}[{show(k)}]"


# -- scalars and containers

def obj(v, path: str) -> dict:
    if not isinstance(v, dict):
        fail(path, f"expected an object, got {_kind(v)}")
    return v


def field(d: dict, key: str, path: str, default=...):
    """`d[key]`; a missing key is an error unless a `default` is given."""
    if key in d:
        return d[key]
    if default is ...:
        raise TraceFileError(f"corrupt trace: {key_path(path, key)} is missing")
    return default


def lst(v, path: str, cap: int) -> list:
    if not isinstance(v, list):
        fail(path, f"expected a list, got {_kind(v)}")
    if len(v) > cap:
        fail(path, f"{len(v)} items is more than the {cap} allowed")
    return v


def integer(v, path: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        fail(path, f"expected an integer, got {_got(v)}")
    if not lo <= v <= hi:
        fail(path, f"{show(v)} is out of range ({lo}..{hi})")
    return v


def opt_integer(v, path: str, lo: int, hi: int) -> int | None:
    return None if v is None else integer(v, path, lo, hi)


def number(v, path: str, lo: float, hi: float) -> float | int:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        fail(path, f"expected a number, got {_kind(v)}")
    if isinstance(v, float) and not math.isfinite(v):
        fail(path, f"{show(v)} is not a finite number")
    if not lo <= v <= hi:
        fail(path, f"{show(v)} is out of range ({lo}..{hi})")
    return v


def opt_number(v, path: str, lo: float, hi: float):
    return None if v is None else number(v, path, lo, hi)


def string(v, path: str, cap: int) -> str:
    if not isinstance(v, str):
        fail(path, f"expected a string, got {_got(v)}")
    if len(v) > cap:
        fail(path, f"a string of {len(v)} characters is longer than the {cap} allowed")
    return v


def opt_string(v, path: str, cap: int) -> str | None:
    return None if v is None else string(v, path, cap)


def choice(v, path: str, choices: tuple[str, ...]):
    if v not in choices:
        fail(path, f"{show(v)} is not one of {', '.join(choices)}")
    return v


def opt_choice(v, path: str, choices: tuple[str, ...]) -> str | None:
    return None if v is None else choice(v, path, choices)


def boolean(v, path: str) -> bool:
    if not isinstance(v, bool):
        fail(path, f"expected true or false, got {_got(v)}")
    return v


def int_tuple(v, path: str, rank: int, lo: int, hi: int) -> tuple[int, ...]:
    """A list of at most `rank` integers in lo..hi, as a tuple."""
    items = lst(v, path, rank)
    return tuple(integer(x, f"{path}[{i}]", lo, hi) for i, x in enumerate(items))


def block(v, path: str) -> tuple[int, ...] | None:
    """A block coordinate (None: kernel level)."""
    return None if v is None else int_tuple(v, path, MAX_RANK, 0, MAX_COORD)


def cell(v, path: str) -> tuple[int, tuple[int, ...] | None, int]:
    items = lst(v, path, 3)
    if len(items) != 3:
        fail(path, f"expected [device, block, thread], got a list of {len(items)}")
    return (integer(items[0], f"{path}[0]", 0, MAX_DEVICES - 1), block(items[1], f"{path}[1]"),
            integer(items[2], f"{path}[2]", -1, MAX_THREADS_PER_BLOCK - 1))


class _Budget:
    """Counts the JSON values and string characters of free-form data."""

    def __init__(self, what: str, nodes: int = MAX_META_NODES, chars: int = MAX_META_CHARS):
        self.what, self.nodes, self.chars = what, nodes, chars
        self.max_nodes, self.max_chars = nodes, chars

    def take(self, nodes: int = 1, chars: int = 0) -> None:
        self.nodes -= nodes
        self.chars -= chars
        if self.nodes < 0:
            fail(self.what, f"holds more than the {self.max_nodes} values allowed")
        if self.chars < 0:
            fail(self.what, f"holds more than the {self.max_chars} characters of text "
                            "allowed")


def _child_path(path: str, key) -> str:
    """The path of a list's item (`key` its index) or an object's field (`key` its name)."""
    return f"{path}[{key}]" if isinstance(key, int) else key_path(path, key)


def json_value(v, path: str, depth: int = 0, budget: _Budget | None = None):
    """A JSON value (null, boolean, integer, finite number, string, list, object with
    string keys) nested at most `MAX_DEPTH` deep; returned as is. Walked depth first with
    one iterator per open list or object, so the walk's memory grows with the nesting,
    not with the size, and a value's path is spelled out only when it fails."""
    budget = budget or _Budget(path)
    walks = [iter(((None, v),))]  # (key, value) of each open container, the root's first
    keys: list = []  # the key of each open container but the root's

    def where(key) -> str:
        p = path
        for k in (*keys, key):
            if k is not None:
                p = _child_path(p, k)
        return p

    while walks:
        item = next(walks[-1], None)
        if item is None:
            walks.pop()
            if keys:
                keys.pop()
            continue
        k, x = item
        if depth + len(walks) - 1 > MAX_DEPTH:
            fail(where(k), f"nested deeper than the {MAX_DEPTH} levels allowed")
        if x is None or isinstance(x, (bool, int)):
            budget.take()
        elif isinstance(x, float):
            if not math.isfinite(x):
                fail(where(k), f"{show(x)} is not a finite number")
            budget.take()
        elif isinstance(x, str):
            budget.take(chars=len(x))
        elif isinstance(x, list):
            budget.take()
            walks.append(enumerate(x))
            keys.append(k)
        elif isinstance(x, dict):
            budget.take()
            for key in x:
                if not isinstance(key, str):
                    fail(where(k), f"a key is {_kind(key)}, not a string")
                if len(key) > MAX_KEY_CHARS:
                    fail(where(k), f"a key of {len(key)} characters is longer than the "
                                   f"{MAX_KEY_CHARS} allowed")
            walks.append(iter(x.items()))
            keys.append(k)
        else:
            fail(where(k), f"{_kind(x)} is not a JSON value")
    return v


# -- records

def source(v, path: str, depth: int = 0) -> dict | None:
    """A `SourceLocation` record, checked: the keyword arguments of `SourceLocation`
    (its `branch` checked the same way, still a dict) or None."""
    if v is None:
        return None
    if depth > MAX_BRANCH_DEPTH:
        fail(path, f"a chain of more than {MAX_BRANCH_DEPTH} nested locations (enclosing "
                   "branches, branch starts, call sites)")
    d = obj(v, path)
    return {
        "file": string(field(d, "file", path), key_path(path, "file"), MAX_FILE_NAME),
        "line": integer(field(d, "line", path), key_path(path, "line"), 0, MAX_LINE),
        "column": opt_integer(d.get("column"), key_path(path, "column"), -1, MAX_COLUMN),
        "function": opt_string(d.get("function"), key_path(path, "function"), MAX_NAME),
        "code": opt_string(d.get("code"), key_path(path, "code"), MAX_CODE_LINE),
        "branch": source(d.get("branch"), key_path(path, "branch"), depth + 1),
        "kind": opt_choice(d.get("kind"), key_path(path, "kind"), SOURCE_KINDS),
        "operands": _operand_names(d.get("operands"), key_path(path, "operands")),
        "starts": _starts(d.get("starts"), key_path(path, "starts"), depth),
        "axes": _operand_names(d.get("axes"), key_path(path, "axes")),
        "via": source(d.get("via"), key_path(path, "via"), depth + 1),
    }


def _starts(v, path: str, depth: int) -> list[dict] | None:
    if v is None:
        return None
    return [source(obj(x, f"{path}[{i}]"), f"{path}[{i}]", depth + 1)
            for i, x in enumerate(lst(v, path, MAX_BRANCHES))]


def _operand_names(v, path: str) -> list[str] | None:
    if v is None:
        return None
    return [string(x, f"{path}[{i}]", MAX_NAME)
            for i, x in enumerate(lst(v, path, MAX_OPERANDS))]


def kernel_record(v, path: str, position: int) -> dict:
    """A `KernelInfo` record, checked: its keyword arguments (`launch` still a dict)."""
    d = obj(v, path)
    kp = lambda k: key_path(path, k)  # noqa: E731
    index = integer(field(d, "index", path), kp("index"), 0, MAX_KERNELS - 1)
    if index != position:
        fail(kp("index"), f"{index} is not the kernel's position in \"kernels\" ({position})")
    return {
        "index": index,
        "name": opt_string(d.get("name"), kp("name"), MAX_NAME),
        "launch": source(d.get("launch"), kp("launch")),
        "num_devices": integer(field(d, "num_devices", path), kp("num_devices"), 1,
                               MAX_DEVICES),
        "threads_per_block": integer(field(d, "threads_per_block", path),
                                     kp("threads_per_block"), 1, MAX_THREADS_PER_BLOCK),
        "blocks_per_cluster": integer(field(d, "blocks_per_cluster", path),
                                      kp("blocks_per_cluster"), 1, MAX_BLOCKS_PER_CLUSTER),
        "thread_axis": opt_string(d.get("thread_axis"), kp("thread_axis"), MAX_NAME),
    }


_REQUEST_INTS = ("memory_space_id", "device_id", "block_id", "thread_id", "initial_ref_count",
                 "buffer_id")


def request(v, path: str) -> dict | None:
    """A failure's allocation request: JSON, its known fields typed."""
    if v is None:
        return None
    d = obj(v, path)
    json_value(d, path, budget=_Budget(path, nodes=10_000, chars=MAX_MESSAGE))
    for k in _REQUEST_INTS:
        opt_integer(d.get(k), key_path(path, k), -2**63, 2**63 - 1)
    for k in ("memory_space", "dtype", "callback"):
        opt_string(d.get(k), key_path(path, k), MAX_NAME)
    if d.get("shape") is not None:
        int_tuple(d["shape"], key_path(path, "shape"), MAX_RANK, 0, MAX_DIM)
    return d


def failure_record(v, path: str, num_kernels: int, cells: list | None = None) -> dict | None:
    """A `Failure` record, checked: its keyword arguments (`source` still a dict). Its cell
    is added to `cells` as (kernel, device, block, thread): it is drawn."""
    if v is None:
        return None
    d = obj(v, path)
    kp = lambda k: key_path(path, k)  # noqa: E731
    phase = d.get("phase", "run")
    if phase not in ("run", "trace"):
        fail(kp("phase"), f"{show(phase)} is not \"run\" or \"trace\"")
    out = {
        "type": string(field(d, "type", path), kp("type"), MAX_NAME),
        "message": string(field(d, "message", path), kp("message"), MAX_MESSAGE),
        "kernel": kernel_ref(d.get("kernel"), kp("kernel"), num_kernels, allow_unknown=True),
        "cell": None if d.get("cell") is None else cell(d["cell"], kp("cell")),
        "warp": opt_integer(d.get("warp"), kp("warp"), -1, MAX_WARP),
        "request": request(d.get("request"), kp("request")),
        "source": source(d.get("source"), kp("source")),
        "phase": phase,
        "caught": boolean(d.get("caught", False), kp("caught")),
        "in_body": boolean(d.get("in_body", False), kp("in_body")),
    }
    if out["caught"] and phase != "trace":
        fail(kp("caught"), "only a failure of phase \"trace\" can be caught")
    if out["in_body"] and phase != "trace":
        fail(kp("in_body"), "only a failure of phase \"trace\" is raised in the kernel's body")
    if cells is not None and out["cell"] is not None:
        cells.append((out["kernel"], *out["cell"]))
    return out


def kernel_ref(v, path: str, num_kernels: int, allow_unknown: bool = False) -> int | None:
    """None, or a kernel index (with `allow_unknown`, -1: a record made outside any kernel)."""
    if v is None:
        return None
    lo = -1 if allow_unknown else 0
    if isinstance(v, int) and not isinstance(v, bool) and num_kernels == 0 and v != -1:
        fail(path, f"{show(v)} names a kernel, but the trace has none")
    if num_kernels == 0 and not allow_unknown:
        fail(path, f"{show(v)} names a kernel, but the trace has none")
    return integer(v, path, lo, num_kernels - 1 if num_kernels else lo)


def _deadlock(v, path: str, num_kernels: int, num_events: int, cells: list) -> None:
    d = obj(v, path)
    kp = lambda k: key_path(path, k)  # noqa: E731
    kernel = kernel_ref(d.get("kernel"), kp("kernel"), num_kernels, allow_unknown=True)
    opt_number(d.get("timeout_s"), kp("timeout_s"), 0, 1e9)
    opt_number(d.get("idle_s"), kp("idle_s"), 0, 1e9)
    waiters = d.get("waiters")
    mine: list = []
    for i, w in enumerate(lst(waiters if waiters is not None else [], kp("waiters"),
                              MAX_RECORDS)):
        wp = f"{kp('waiters')}[{i}]"
        w = obj(w, wp)
        wk = lambda k, wp=wp: key_path(wp, k)  # noqa: E731
        device = integer(field(w, "device", wp), wk("device"), 0, MAX_DEVICES - 1)
        blk = block(w.get("block"), wk("block"))
        thread = integer(field(w, "thread", wp), wk("thread"), -1, MAX_THREADS_PER_BLOCK - 1)
        opt_integer(w.get("warp"), wk("warp"), -1, MAX_WARP)
        choice(w.get("resource", "barrier"), wk("resource"), _DEADLOCK_RESOURCES)
        if w.get("key") is not None:
            int_tuple(w["key"], wk("key"), 6, -2**63, 2**63 - 1)
        integer(w.get("allocation", -1), wk("allocation"), -1, max(num_events - 1, -1))
        source(w.get("source"), wk("source"))
        for k in ("num_arrivals", "arrivals", "phase"):
            opt_integer(w.get(k), wk(k), -2**31, 2**31 - 1)
        expects = w.get("expects")
        for j, e in enumerate(lst(expects if expects is not None else [], wk("expects"),
                                  MAX_RECORDS)):
            ep = f"{wk('expects')}[{j}]"
            e = obj(e, ep)
            integer(field(e, "thread", ep), key_path(ep, "thread"), -1,
                    MAX_THREADS_PER_BLOCK - 1)
            if "device" in e:
                integer(e["device"], key_path(ep, "device"), 0, MAX_DEVICES - 1)
            block(e.get("block"), key_path(ep, "block"))
            opt_string(e.get("state"), key_path(ep, "state"), MAX_NAME)
            source(e.get("source"), key_path(ep, "source"))
        arrived = w.get("arrived")
        for j, a in enumerate(lst(arrived if arrived is not None else [], wk("arrived"),
                                  MAX_RECORDS)):
            ap = f"{wk('arrived')}[{j}]"
            a = obj(a, ap)
            integer(field(a, "thread", ap), key_path(ap, "thread"), -1,
                    MAX_THREADS_PER_BLOCK - 1)
        cells.append((kernel, device, blk, thread))
        mine.append((wp, blk))
    _same_kind_of_block(mine, "waiters")
    opt_string(d.get("detected_by"), kp("detected_by"), MAX_NAME)


def _same_kind_of_block(named: list, what: str) -> None:
    """The cells of one record become one finding's cells: all kernel-level (block null) or
    all in blocks (the analyses order them)."""
    kinds = {b is None for _, b in named}
    if len(kinds) > 1:
        p_none = next(p for p, b in named if b is None)
        p_block = next(p for p, b in named if b is not None)
        fail(p_none, f"its block is null but {p_block}'s is not: the {what} of one record are "
                     "all kernel-level or all in blocks")


def _access(v, path: str, other: bool):
    """A race access; (device, block, thread) if it names a thread, else None."""
    d = obj(v, path)
    kp = lambda k: key_path(path, k)  # noqa: E731
    opt_string(d.get("kind"), kp("kind"), MAX_NAME)
    opt_string(d.get("range"), kp("range"), MAX_MESSAGE)
    blk = block(d["block"], kp("block")) if "block" in d else None
    opt_integer(d.get("warp"), kp("warp"), -1, MAX_WARP)
    source(d.get("source"), kp("source"))
    if d.get("barriers") is not None:
        for i, call in enumerate(lst(d["barriers"], kp("barriers"), MAX_OPERANDS)):
            p = f"{kp('barriers')}[{i}]"
            c = lst(call, p, 3)
            if len(c) != 3:
                fail(p, "not [op, barrier, line]")
            choice(c[0], f"{p}[0]", ("wait", "arrive"))
            string(c[1], f"{p}[1]", MAX_NAME)
            integer(c[2], f"{p}[2]", 0, MAX_LINE)
    if other and "thread" not in d:
        if "device" in d:
            integer(d["device"], kp("device"), 0, MAX_DEVICES - 1)
        return None
    device = integer(d.get("device", 0), kp("device"), 0, MAX_DEVICES - 1)
    thread = integer(d.get("thread", -1), kp("thread"), -1, MAX_THREADS_PER_BLOCK - 1)
    return device, blk, thread


def _race(v, path: str, num_kernels: int, num_events: int, cells: list) -> None:
    from .model import MEMORY_SPACES

    d = obj(v, path)
    kp = lambda k: key_path(path, k)  # noqa: E731
    kernel = kernel_ref(d.get("kernel"), kp("kernel"), num_kernels, allow_unknown=True)
    opt_choice(d.get("memory_space"), kp("memory_space"), MEMORY_SPACES)
    if d.get("key") is not None:
        int_tuple(d["key"], kp("key"), 6, -2**63, 2**63 - 1)
    integer(d.get("allocation", -1), kp("allocation"), -1, max(num_events - 1, -1))
    mine = []
    for name, other in (("access", False), ("other", True)):
        c = _access(d.get(name) if d.get(name) is not None else {}, kp(name), other)
        if c is not None:
            cells.append((kernel, *c))
            mine.append((key_path(kp(name), "block"), c[1]))
    _same_kind_of_block(mine, "accesses")
    opt_string(d.get("message"), kp("message"), MAX_MESSAGE)


_BARRIER_OPS = ("arrive", "wait", "waited")
_I32 = 2**31 - 1


def _barrier_op(v, path: str, num_kernels: int, num_events: int, cells: list) -> None:
    """One `Recorder.barrier_ops_json` record (an arrival, a wait start or end): every
    field of `recorder.BarrierOp`, typed."""
    d = obj(v, path)
    kp = lambda k: key_path(path, k)  # noqa: E731
    f = lambda k: field(d, k, path)  # noqa: E731 - every field is required
    integer(f("step"), kp("step"), 0, num_events)
    kernel = kernel_ref(f("kernel"), kp("kernel"), num_kernels, allow_unknown=True)
    choice(f("op"), kp("op"), _BARRIER_OPS)
    choice(f("resource"), kp("resource"), _DEADLOCK_RESOURCES)
    device = integer(f("device"), kp("device"), -1, MAX_DEVICES - 1)
    blk = block(f("block"), kp("block"))
    thread = integer(f("thread"), kp("thread"), -1, MAX_THREADS_PER_BLOCK - 1)
    opt_integer(f("warp"), kp("warp"), -1, MAX_WARP)
    integer(f("allocation"), kp("allocation"), -1, max(num_events - 1, -1))
    opt_integer(f("part"), kp("part"), 0, MAX_BLOCKS_PER_CLUSTER - 1)
    block(f("target_block"), kp("target_block"))
    integer(f("phase"), kp("phase"), -_I32 - 1, _I32)
    integer(f("arrivals"), kp("arrivals"), -_I32 - 1, _I32)
    integer(f("num_arrivals"), kp("num_arrivals"), 0, _I32)
    boolean(f("completes"), kp("completes"))
    boolean(f("freed"), kp("freed"))
    string(f("via"), kp("via"), MAX_NAME)
    if f("key") is not None:
        int_tuple(d["key"], kp("key"), 6, -2**63, 2**63 - 1)
    opt_integer(f("barrier_id"), kp("barrier_id"), -2**63, 2**63 - 1)
    source(f("source"), kp("source"))
    if device >= 0:
        cells.append((kernel, device, blk, thread))


def _thread_exit(v, path: str, num_kernels: int, num_events: int, cells: list) -> None:
    """One `Recorder.thread_exits_json` record (a thread finished the kernel body)."""
    d = obj(v, path)
    kp = lambda k: key_path(path, k)  # noqa: E731
    f = lambda k: field(d, k, path)  # noqa: E731 - every field is required
    integer(f("step"), kp("step"), 0, num_events)
    kernel = kernel_ref(f("kernel"), kp("kernel"), num_kernels, allow_unknown=True)
    device = integer(f("device"), kp("device"), 0, MAX_DEVICES - 1)
    blk = block(f("block"), kp("block"))
    thread = integer(f("thread"), kp("thread"), -1, MAX_THREADS_PER_BLOCK - 1)
    opt_integer(f("warp"), kp("warp"), -1, MAX_WARP)
    cells.append((kernel, device, blk, thread))


# Field names the records the analyses read ("deadlocks", "races", "barrier_ops",
# "thread_exits") use, wherever they appear in them (a field added later is checked too).
_RECORD_LISTS = ("waiters", "expects", "arrived")
_RECORD_TEXT = ("via", "state", "kind", "resource", "op", "message", "range", "detected_by")


def _records_by_name(v, path: str, num_kernels: int, num_events: int) -> None:
    """Every field of the analyses' records, by its name, wherever it is nested. Walked
    depth first with one iterator per open list or object (as `json_value`), a path
    spelled out only for an object whose fields are checked: memory grows with the
    nesting, not with the size."""
    walks = [(iter(((None, v),)), path)]  # (the (key, value) items of a container, its path)
    while walks:
        items, p = walks[-1]
        item = next(items, None)
        if item is None:
            walks.pop()
            continue
        k, x = item
        if not isinstance(x, (dict, list)):
            continue
        here = p if k is None else _child_path(p, k)
        if isinstance(x, list):
            walks.append((enumerate(x), here))
            continue
        inner = []
        for key, y in x.items():
            kp = key_path(here, key)
            if key in ("source", "launch"):
                source(y, kp)
                continue
            if key in ("block", "target_block", "grid"):  # (grid: a race access's grid point)
                block(y, kp)
            elif key == "thread":
                integer(y, kp, -1, MAX_THREADS_PER_BLOCK - 1)
            elif key == "device":
                integer(y, kp, -1, MAX_DEVICES - 1)
            elif key == "warp":
                opt_integer(y, kp, -1, MAX_WARP)
            elif key == "kernel":
                kernel_ref(y, kp, num_kernels, allow_unknown=True)
            elif key in ("allocation", "step"):
                integer(y, kp, -1, num_events)
            elif key in _RECORD_TEXT:
                opt_string(y, kp, MAX_MESSAGE)
            elif key in _RECORD_LISTS:
                for i, item in enumerate(lst(y if y is not None else [], kp, MAX_RECORDS)):
                    obj(item, f"{kp}[{i}]")
            if isinstance(y, (dict, list)):
                inner.append((key, y))
        if inner:
            walks.append((iter(inner), here))


def meta_record(v, path: str, num_kernels: int, num_events: int,
                cells: list | None = None) -> dict:
    """The trace's `meta`: JSON values, size-capped; the records the analyses read
    ("deadlocks", "races", "barrier_ops", "thread_exits", "stopped_kernels", "device",
    "interrupted") checked strictly.
    The cells the records name are added to `cells`."""
    if v is None:
        return {}
    cells = [] if cells is None else cells
    d = obj(v, path)
    json_value(d, path, budget=_Budget(path))
    if d.get("deadlocks") is not None:
        for i, x in enumerate(lst(d["deadlocks"], f"{path}.deadlocks", MAX_RECORDS)):
            _deadlock(x, f"{path}.deadlocks[{i}]", num_kernels, num_events, cells)
    if d.get("races") is not None:
        for i, x in enumerate(lst(d["races"], f"{path}.races", MAX_RECORDS)):
            _race(x, f"{path}.races[{i}]", num_kernels, num_events, cells)
    for name in ("deadlocks", "races", "barrier_ops", "thread_exits"):
        _records_by_name(d.get(name), f"{path}.{name}", num_kernels, num_events)
    for name, check in (("barrier_ops", _barrier_op), ("thread_exits", _thread_exit)):
        if d.get(name) is not None:
            for i, x in enumerate(lst(d[name], f"{path}.{name}", MAX_EVENTS)):
                check(x, f"{path}.{name}[{i}]", num_kernels, num_events, cells)
    if d.get("stopped_kernels") is not None:
        for i, x in enumerate(lst(d["stopped_kernels"], f"{path}.stopped_kernels",
                                  MAX_RECORDS)):
            kernel_ref(x, f"{path}.stopped_kernels[{i}]", num_kernels)
    if d.get("device") is not None:
        from .devices import DEVICES

        dev = string(d["device"], f"{path}.device", MAX_NAME)
        if dev.strip().lower() not in DEVICES and dev != "auto":
            fail(f"{path}.device", f"{show(dev)} is not a known device "
                                   f"({', '.join(DEVICES)})")
    if "interrupted" in d:
        boolean(d["interrupted"], f"{path}.interrupted")
    return dict(d)


# -- event columns

def int_column(values, path: str, lo: int, hi: int) -> np.ndarray:
    """A list of integers in lo..hi as an int64 array; the first bad item is named."""
    lst(values, path, MAX_EVENTS)
    if not values:
        return np.zeros(0, dtype=np.int64)
    try:
        a = np.array(values)
    except (ValueError, TypeError, OverflowError):
        a = None
    if a is None or a.ndim != 1 or a.dtype.kind not in "iu" or (
            a.dtype.kind == "u" and int(a.max()) > 2**63 - 1) or (
            bool in set(map(type, values))):  # (numpy reads true and false among ints as 1, 0)
        for i, x in enumerate(values):  # name the first item that is not a plain integer
            if isinstance(x, bool) or not isinstance(x, int):
                fail(f"{path}[{i}]", f"expected an integer, got {_got(x)}")
            if not lo <= x <= hi:
                fail(f"{path}[{i}]", f"{show(x)} is out of range ({lo}..{hi})")
        fail(path, "not a list of integers")  # pragma: no cover - caught above
    a = a.astype(np.int64, copy=False)
    bad = np.flatnonzero((a < lo) | (a > hi))
    if len(bad):
        i = int(bad[0])
        rng = f"({lo}..{hi})" if lo <= hi else "(the table it indexes is empty)"
        fail(f"{path}[{i}]", f"{int(a[i])} is out of range {rng}")
    return a


def check_allocations(columns: dict[str, np.ndarray], path: str = "events.columns") -> None:
    """The events of one allocation (lifetime) are of one kernel and one resource, and its
    requests all kernel-level or all in a block: the recorder numbers lifetimes per
    (kernel, resource, key), and the analyses group an allocation's cells. (A failure's
    `error` event names the cell that failed, also on a kernel-level allocation: a block
    writing a kernel operand.) Its first event is its create, and it has no other: a
    stream that releases or frees what it never created is refused, not called clean."""
    from .model import OPS

    alloc = columns["allocation"].astype(np.int64)
    rows = np.flatnonzero(alloc >= 0)
    if not len(rows):
        return
    a = alloc[rows]
    first = np.full(int(a.max()) + 1, -1, dtype=np.int64)
    first[a[::-1]] = rows[::-1]  # the first row of each allocation
    ref = first[a]
    request = columns["op"] != OPS.index("error")
    for name, col in (("kernel", columns["kernel"]), ("resource", columns["resource"]),
                      ("block", columns["block"] >= 0)):
        differs = col[rows] != col[ref]
        if name == "block":
            differs &= request[rows] & request[ref]
        bad = np.flatnonzero(differs)
        if len(bad):
            i, j = int(rows[bad[0]]), int(ref[bad[0]])
            what = ("is kernel-level in one event and in a block in the other" if name == "block"
                    else f"has two {name}s")
            fail(f"{path}.allocation[{i}]", f"allocation {int(alloc[i])} {what} (rows {j} "
                                            f"and {i})")
    # an allocation is numbered at its create: its first event is that create, its only one
    ops = columns["op"]
    create = OPS.index("create")
    starts = np.flatnonzero(first >= 0)
    bad = starts[ops[first[starts]] != create]
    if len(bad):
        i = int(first[bad[0]])
        fail(f"{path}.op[{i}]", f"allocation {int(bad[0])} starts with a {OPS[int(ops[i])]} "
                                "(an allocation's first event is its create)")
    creates = np.bincount(a[ops[rows] == create], minlength=len(first))
    if int(creates.max()) > 1:
        k = int(np.argmax(creates > 1))
        made = rows[(a == k) & (ops[rows] == create)]
        fail(f"{path}.op[{int(made[1])}]", f"allocation {k} is created twice (rows "
                                           f"{int(made[0])} and {int(made[1])})")


# the widest item numpy has (complex128): the bound on a dtype this machine cannot name
_MAX_ITEMSIZE = 16


def itemsize(name: str) -> int | None:
    """The bytes of one item of the dtype `name` (numpy's, or ml_dtypes' such as bfloat16
    and float8_e4m3fn); None for a name neither knows."""
    try:
        return int(np.dtype(name).itemsize)
    except (TypeError, ValueError, OverflowError, SyntaxError):
        pass
    if not name.isidentifier() or name.startswith("_"):
        return None
    try:
        import ml_dtypes
    except ImportError:  # pragma: no cover - a dependency of JAX
        return None
    t = getattr(ml_dtypes, name, None)
    if not isinstance(t, type):
        return None
    try:
        return int(np.dtype(t).itemsize)
    except (TypeError, ValueError):
        return None


def check_sizes(columns: dict[str, np.ndarray], shapes: list[tuple[int, ...]],
                dtypes: list[str], path: str = "events.columns") -> None:
    """A buffer request's byte count is its shape's element count times its dtype's item
    size, as the interpreter's arrays have it: the memory budget reads the bytes and the
    views show the shape, and a file may not make them disagree. A dtype this machine
    cannot name bounds the bytes by the widest item (16)."""
    from .model import OPS

    rows = np.flatnonzero((columns["shape"] >= 0) & (columns["dtype"] >= 0)
                          & (columns["op"] != OPS.index("error")))
    if not len(rows):
        return
    width = max(1, len(dtypes))  # a (shape, dtype) pair as one number
    pair = columns["shape"][rows].astype(np.int64) * width + columns["dtype"][rows]
    pairs, at = np.unique(pair, return_inverse=True)
    exact = np.empty(len(pairs), dtype=bool)
    want = np.empty(len(pairs), dtype=np.int64)
    for j, p in enumerate(pairs.tolist()):
        shape, dtype = divmod(p, width)
        size = math.prod(shapes[shape])
        item = itemsize(dtypes[dtype])
        exact[j] = item is not None
        # (above the byte cap a file cannot match it: capped to stay an int64)
        want[j] = min(size * (item if item is not None else _MAX_ITEMSIZE), MAX_NBYTES + 1)
    nbytes = columns["nbytes"][rows].astype(np.int64)
    bad = np.flatnonzero(np.where(exact[at], nbytes != want[at], nbytes > want[at]))
    if len(bad):
        i, j = int(rows[bad[0]]), int(at[bad[0]])
        shape, dtype = divmod(int(pairs[j]), width)
        dims = ", ".join(map(str, shapes[shape])) + ("," if len(shapes[shape]) == 1 else "")
        what = (f"is {int(want[j])} bytes" if exact[j]
                else f"is at most {int(want[j])} bytes ({_MAX_ITEMSIZE} an item)")
        fail(f"{path}.nbytes[{i}]", f"{int(columns['nbytes'][i])} bytes, but shape ({dims}) "
                                    f"of {show(dtypes[dtype])} {what}")


def cell_cap(num_events: int) -> int:
    """How many cells a trace of `num_events` events may draw."""
    return min(max(MAX_CELLS, CELLS_PER_EVENT * num_events), MAX_CELLS_TOTAL)


def check_cells(columns: dict[str, np.ndarray], blocks: list[tuple[int, ...]],
                threads_per_block: list[int], extra: list = (),
                path: str = "events") -> None:
    """The grid views draw, per kernel, its (device, block) rows x threads cells: at most
    `cell_cap(events)`. A block's request names one of its kernel's threads_per_block
    threads. A kernel's width is its threads_per_block, or more: the threads a collective
    is shared by (its initial ref count), the cells the failure and the deadlock / race
    records of `extra` (kernel, device, block, thread) name."""
    nk = len(threads_per_block)
    cap = cell_cap(len(columns["block"]))
    width = np.asarray(threads_per_block, dtype=np.int64).copy()
    rows: list[set] = [set() for _ in range(nk)]
    inb = columns["block"] >= 0
    if inb.any():
        k = columns["kernel"][inb].astype(np.int64)
        threads = columns["thread"][inb].astype(np.int64)
        over = threads >= width[k]  # a block's request names a thread it does not have
        if over.any():
            i = int(np.flatnonzero(inb)[np.argmax(over)])
            kk = int(columns["kernel"][i])
            fail(f"{path}.thread[{i}]",
                 f"thread {int(columns['thread'][i])} of a block of kernel {kk}, which has "
                 f"{threads_per_block[kk]} thread(s) per block (kernels[{kk}]."
                 f"threads_per_block)")
        np.maximum.at(width, k, threads + 1)
        np.maximum.at(width, k, columns["initial_ref_count"][inb].astype(np.int64))
        key = (k * MAX_DEVICES + columns["device"][inb].astype(np.int64)) * (MAX_BLOCKS + 1) \
            + columns["block"][inb].astype(np.int64)
        uniq = np.unique(key)
        row_kernel = uniq // (MAX_DEVICES * (MAX_BLOCKS + 1))
        counts = np.bincount(row_kernel, minlength=nk)
        if int((counts * width).sum()) > cap:  # (before the records' cells)
            _too_many_cells(path, len(uniq), int((counts * width).sum()), cap)
        for u in uniq.tolist():
            kk, rest = divmod(u, MAX_DEVICES * (MAX_BLOCKS + 1))
            dev, b = divmod(rest, MAX_BLOCKS + 1)
            rows[kk].add((dev, blocks[b]))
    for kernel, device, blk, thread in extra:
        if kernel is None or not 0 <= kernel < nk or blk is None:
            continue
        width[kernel] = max(width[kernel], thread + 1)
        rows[kernel].add((device, tuple(blk)))
    total = sum(len(r) * int(w) for r, w in zip(rows, width))
    if total > cap:
        _too_many_cells(path, sum(len(r) for r in rows), total, cap)


def _too_many_cells(path: str, rows: int, cells: int, cap: int) -> NoReturn:
    fail(path, f"{rows} (kernel, device, block) rows x their threads make {cells} cells, more "
               f"than the {cap} this trace may draw (the larger of {MAX_CELLS} and "
               f"{CELLS_PER_EVENT} per event, at most {MAX_CELLS_TOTAL})")


# -- the JSON text

class _BadNumberError(ValueError):
    pass


def _finite_float(s: str) -> float:
    x = float(s)
    if not math.isfinite(x):
        raise _BadNumberError(s[:40])
    return x


def _no_constant(s: str):
    raise _BadNumberError(s)


_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = np.zeros(256, dtype=np.int8)
_DEPTH_STEP[[ord("["), ord("{")]] = 1
_DEPTH_STEP[[ord("]"), ord("}")]] = -1


def json_depth(text: str) -> int:
    """The deepest bracket nesting of a JSON text (brackets inside strings not counted)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return 0
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    steps = _DEPTH_STEP[np.frombuffer(brackets.encode("ascii"), dtype=np.uint8)]
    return int(np.cumsum(steps, dtype=np.int64).max()) if len(steps) else 0


def parse_json(text: str, name: str):
    """`json.loads(text)` for a trace file `name`: nesting at most MAX_DEPTH deep, finite
    numbers only; every problem a `TraceFileError`."""
    depth = json_depth(text)
    if depth > MAX_DEPTH:
        raise TraceFileError(f"{name} nests JSON {depth} levels deep, more than the "
                             f"{MAX_DEPTH} a trace file may")
    try:
        value = json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise TraceFileError(
            f"{name} is not valid JSON (truncated or corrupt): "
            f"{e.msg.removesuffix(' at')} at line {e.lineno}, column {e.colno}") from None
    except _BadNumberError as e:
        raise TraceFileError(f"{name} holds the number {e}, which is not a finite "
                             "double") from None
    except RecursionError:
        raise TraceFileError(f"{name} nests JSON deeper than the {MAX_DEPTH} levels a trace "
                             "file may") from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise TraceFileError(f"{name} holds a number pallas_viz cannot read: {e}") from None
    if _SURROGATE_ESCAPE.search(text) is not None:  # (only a `\\u` escape makes one)
        where = _lone_surrogate(value)
        if where is not None:
            raise TraceFileError(
                f"{name}: {where} holds a lone UTF-16 surrogate (a \\uD800-\\uDFFF escape "
                "not in a pair), which is not text")
    return value


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _lone_surrogate(value) -> str | None:
    """The path of the first string (or key) of a parsed JSON value that holds a lone
    surrogate, or None; iterative (the value may nest MAX_DEPTH deep)."""
    stack = [(value, "trace")]
    while stack:
        v, path = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return path
        elif isinstance(v, dict):
            for k, x in v.items():
                try:
                    k.encode("utf-8")
                except UnicodeEncodeError:
                    return f"a key of {path}"
                stack.append((x, f"{path}.{k}"))
        elif isinstance(v, list):
            stack.extend((x, f"{path}[{i}]") for i, x in enumerate(v))
    return None


# -- writing

def _clip_source(d: dict) -> None:
    """Fit a source record within the caps (a trace saved by pallas_viz always loads)."""
    if isinstance(d.get("code"), str) and len(d["code"]) > MAX_CODE_LINE:
        d["code"] = d["code"][:MAX_CODE_LINE]
    if isinstance(d.get("function"), str) and len(d["function"]) > MAX_NAME:
        d["function"] = d["function"][:MAX_NAME]
    if isinstance(d.get("file"), str) and len(d["file"]) > MAX_FILE_NAME:
        d["file"] = d["file"][:MAX_FILE_NAME]
    col = d.get("column")
    if isinstance(col, int) and not -1 <= col <= MAX_COLUMN:
        d["column"] = None


def savable(d: dict) -> dict:
    """`Trace.to_dict()` made writable and loadable: in `meta`, non-finite numbers become
    null and other non-JSON values their (cut) repr; over-long code lines, function and file
    names are cut to their caps, out-of-range source columns dropped."""
    out = dict(d)
    out["meta"] = _jsonable(d.get("meta") or {}, 0)
    stack = [out["meta"], out.get("kernels"), out.get("failure"), out.get("findings"),
             (out.get("events") or {}).get("sources")]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            if "file" in x and "line" in x:
                _clip_source(x)
            stack.extend(v for v in x.values() if isinstance(v, (dict, list)))
        elif isinstance(x, list):
            stack.extend(v for v in x if isinstance(v, (dict, list)))
    return out


def _jsonable(v, depth: int):
    if depth > MAX_DEPTH - 2:
        return str(v)[:MAX_NAME]
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): _jsonable(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x, depth + 1) for x in v]
    if hasattr(v, "to_dict"):
        try:
            return _jsonable(v.to_dict(), depth + 1)
        except Exception:  # noqa: BLE001 - a foreign object's to_dict
            pass
    return repr(v)[:MAX_MESSAGE]
