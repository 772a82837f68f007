"""A columnar table of events: numpy columns plus small lookup tables.

One row per event, in recording order (row index == `Event.seq`). Strings and
tuples (blocks, shapes, dtypes, source locations) are interned in tables and the
columns hold their indices, so a million events take a few tens of MB.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Sequence

import numpy as np

from .model import MEMORY_SPACES, OPS, RESOURCES, Event, SourceLocation

# name -> dtype of every column.
COLUMNS: dict[str, str] = {
    "thread_seq": "int32",
    "kernel": "int32",
    "op": "uint8",
    "resource": "uint8",
    "memory_space": "int8",  # index into MEMORY_SPACES, -1 for none
    "device": "int16",
    "block": "int32",  # index into `blocks`; -1: a kernel-level request (no block)
    "thread": "int32",
    "warp": "int16",  # -1 for none
    "buffer_id": "int32",  # the interpreter's per-thread counters
    "key_thread": "int16",
    "key_block": "int16",
    "initial_ref_count": "int32",
    "ref_count": "int32",
    "shape": "int32",  # index into `shapes`, -1 for none
    "dtype": "int16",  # index into `dtypes`, -1 for none
    "nbytes": "int64",
    "source": "int32",  # index into `sources`, -1 for none
    "allocation": "int32",  # which buffer lifetime, -1 if unknown
}

_DTYPES = {k: np.dtype(v) for k, v in COLUMNS.items()}
_EMPTY_COLUMNS = {k: np.zeros(0, v) for k, v in _DTYPES.items()}
for _column in _EMPTY_COLUMNS.values():
    _column.flags.writeable = False
OP_CODE = {name: i for i, name in enumerate(OPS)}
RESOURCE_CODE = {name: i for i, name in enumerate(RESOURCES)}
SPACE_CODE = {name: i for i, name in enumerate(MEMORY_SPACES)}


class _Interner:
    def __init__(self):
        self.items: list = []
        self.index: dict = {}

    def __call__(self, item) -> int:
        if item is None:
            return -1
        i = self.index.get(item)
        if i is None:
            i = self.index[item] = len(self.items)
            self.items.append(item)
        return i


_NO_ROWS = np.zeros(0, dtype=np.int64)
_NO_ROWS.flags.writeable = False


class EventTable(Sequence[Event]):
    """The events of a trace, stored by column; indexing yields `Event` objects."""

    def __init__(self, columns: dict[str, np.ndarray], blocks: list[tuple[int, ...]],
                 shapes: list[tuple[int, ...]], dtypes: list[str],
                 sources: list[SourceLocation], calls: list[SourceLocation] | None = None,
                 vias: np.ndarray | None = None):
        n = {len(c) for c in columns.values()}
        if len(n) > 1:
            raise ValueError(f"columns have different lengths: {sorted(n)}")
        missing = set(COLUMNS) - set(columns)
        if missing:
            raise ValueError(f"missing columns: {sorted(missing)}")
        self.columns = {k: np.asarray(columns[k], dtype=_DTYPES[k]) for k in COLUMNS}
        self.blocks = [tuple(b) for b in blocks]
        self.shapes = [tuple(s) for s in shapes]
        self.dtypes = list(dtypes)
        self.sources = list(sources)
        # Each event's call (`SourceLocation.via` of its line, per event: one line can be
        # reached through several calls), an index into `calls` (-1: none); None when no
        # event has one. `source_of` gives an event's line with its call.
        self.calls = list(calls or ())
        if vias is not None:
            vias = np.asarray(vias, dtype=np.int32)
            if len(vias) != len(self.columns["kernel"]):
                raise ValueError(f"{len(vias)} vias for {len(self.columns['kernel'])} events")
        self.vias = vias
        self._with_call: dict[tuple[int, int], SourceLocation] = {}
        self._lines_with_calls: tuple | None = None
        self._kernel_rows: dict[int, np.ndarray] | None = None

    def kernel_rows(self, kernel: int) -> np.ndarray:
        """The row indices of `kernel`'s events, in order (grouped once per table: the
        per-kernel analyses and views stay linear in the number of kernels)."""
        if self._kernel_rows is None:
            k = self.columns["kernel"]
            order = np.argsort(k, kind="stable")
            ks = k[order]
            starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]]) if len(ks) else []
            ends = np.r_[starts[1:], len(ks)] if len(ks) else []
            self._kernel_rows = {int(ks[a]): order[a:b] for a, b in zip(starts, ends)}
        return self._kernel_rows.get(int(kernel), _NO_ROWS)

    # -- construction
    @classmethod
    def empty(cls) -> EventTable:
        """A table of no events (its columns are shared, read-only, empty arrays: every
        trace starts with one, and nothing can be written into a length-0 array)."""
        return cls(_EMPTY_COLUMNS, [], [], [], [])

    @classmethod
    def from_records(cls, records: list[tuple], resolve_source) -> EventTable:
        """Build the table from `Recorder.rows()`; `resolve_source(obj)` -> location."""
        n = len(records)
        if not n:
            return cls.empty()
        sources = _Interner()
        (kernel, op, resource, space, device, block, thread, warp, buffer_id, key_thread,
         key_block, init_rc, rc, shape, dtype, nbytes, source, alloc) = zip(*records)
        block, blocks = _interned(block, n)
        shape, shapes = _interned(shape, n)
        dtype, dtypes = _interned_names(dtype, n)
        # Resolve each distinct source object once, in order of first appearance.
        by_id = dict(zip(map(id, source), source))
        code, call = {}, {}  # id -> the line's index in `sources`, its call's in `calls`
        calls = _Interner()
        for i, s in by_id.items():
            loc = None if s is None else resolve_source(s)
            via = None if loc is None else loc.via
            code[i] = sources(None if loc is None else loc.without_call())
            call[i] = calls(via)
        values = {
            "kernel": kernel, "op": _mapped(op, OP_CODE.__getitem__, n),
            "resource": _mapped(resource, RESOURCE_CODE.__getitem__, n),
            "memory_space": _mapped(space, lambda s: SPACE_CODE.get(s, -1) if s else -1, n),
            "device": device, "block": block, "thread": thread,
            "warp": _mapped(warp, lambda w: -1 if w is None else w, n),
            "buffer_id": buffer_id, "key_thread": key_thread, "key_block": key_block,
            "initial_ref_count": init_rc, "ref_count": rc, "shape": shape, "dtype": dtype,
            "nbytes": nbytes,
            "source": np.fromiter(map(code.__getitem__, map(id, source)), dtype=np.int64,
                                  count=n),
            "allocation": alloc,
        }
        # one conversion per column, each already of its type (no copy in `__init__`)
        cols = {k: np.array(values[k], dtype=_DTYPES[k]) for k in COLUMNS if k in values}
        cols["thread_seq"] = _thread_seq(cols).astype(_DTYPES["thread_seq"])
        vias = None
        if calls.items:
            vias = np.fromiter(map(call.__getitem__, map(id, source)), dtype=np.int32,
                               count=n)
        return cls(cols, blocks, shapes, dtypes, sources.items, calls.items, vias)

    # -- Sequence protocol
    def __len__(self) -> int:
        return len(self.columns["kernel"])

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.event(j) for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.event(i)

    def __iter__(self) -> Iterator[Event]:
        for i in range(len(self)):
            yield self.event(i)

    def event(self, i: int) -> Event:
        c = self.columns
        space = int(c["memory_space"][i])
        shape = int(c["shape"][i])
        dtype = int(c["dtype"][i])
        source = int(c["source"][i])
        warp = int(c["warp"][i])
        init_rc = int(c["initial_ref_count"][i])
        return Event(
            seq=i,
            thread_seq=int(c["thread_seq"][i]),
            kernel=int(c["kernel"][i]),
            op=OPS[c["op"][i]],
            resource=RESOURCES[c["resource"][i]],
            memory_space=MEMORY_SPACES[space] if space >= 0 else None,
            device=int(c["device"][i]),
            block=self.block(int(c["block"][i])),
            thread=int(c["thread"][i]),
            warp=None if warp < 0 else warp,
            buffer_id=int(c["buffer_id"][i]),
            key_thread=int(c["key_thread"][i]),
            key_block=int(c["key_block"][i]),
            ref_count=int(c["ref_count"][i]),
            shape=self.shapes[shape] if shape >= 0 else None,
            dtype=self.dtypes[dtype] if dtype >= 0 else None,
            nbytes=int(c["nbytes"][i]),
            collective=init_rc > 1,
            source=self.source_of(i) if source >= 0 else None,
            initial_ref_count=init_rc,
            allocation=int(c["allocation"][i]),
        )

    def block(self, index: int) -> tuple[int, ...] | None:
        """The block tuple behind a `block` column value (None: kernel-level, -1)."""
        return self.blocks[index] if index >= 0 else None

    def lines_with_calls(self) -> tuple[np.ndarray, list[SourceLocation]]:
        """(each event's index into a list of lines, -1 for none; that list): `sources`
        itself when no event names a call, else one entry per line and call used, the line
        with its call (`source_of`). Made once per table."""
        if self.vias is None:
            return self.columns["source"], self.sources
        if self._lines_with_calls is None:
            src = self.columns["source"]
            placed = np.flatnonzero(src >= 0)
            pairs = (src[placed].astype(np.int64) * (len(self.calls) + 1)
                     + self.vias[placed].astype(np.int64) + 1)
            _, first, inverse = np.unique(pairs, return_index=True, return_inverse=True)
            index = np.full(len(src), -1, dtype=np.int32)
            index[placed] = inverse.reshape(-1)
            lines = [self.source_of(int(placed[j])) for j in first.tolist()]
            self._lines_with_calls = (index, lines)
        return self._lines_with_calls

    def source_of(self, i: int) -> SourceLocation | None:
        """Event `i`'s line, with the call that led to it (`via`) when it has one."""
        s = int(self.columns["source"][i])
        if s < 0:
            return None
        v = -1 if self.vias is None else int(self.vias[i])
        if v < 0:
            return self.sources[s]
        loc = self._with_call.get((s, v))
        if loc is None:
            loc = self._with_call[(s, v)] = dataclasses.replace(self.sources[s],
                                                                 via=self.calls[v])
        return loc

    # -- serialisation
    def to_dict(self) -> dict:
        return {
            "columns": {k: v.tolist() for k, v in self.columns.items()},
            "blocks": [list(b) for b in self.blocks],
            "shapes": [list(s) for s in self.shapes],
            "dtypes": self.dtypes,
            "sources": [s.to_dict() for s in self.sources],
            **({} if self.vias is None else {
                "calls": [c.to_dict() for c in self.calls], "vias": self.vias.tolist()}),
        }

    def with_v1_kernel_level(self) -> EventTable:
        """A version-1 table with its kernel-level requests moved to block -1.

        Version 1 wrote `()` both for kernel-level requests and for the one block of a
        kernel without a grid. Kernel-level requests never have a source line (the
        interpreter makes them, not a line of the kernel), so those are the ones.
        """
        c = dict(self.columns)
        empty = [i for i, b in enumerate(self.blocks) if b == ()]
        if empty:
            m = np.isin(c["block"], empty) & (c["source"] < 0)
            block = c["block"].copy()
            block[m] = -1
            c["block"] = block
        return EventTable(c, self.blocks, self.shapes, self.dtypes, self.sources, self.calls,
                          self.vias)

    @classmethod
    def from_dict(cls, d: dict, num_kernels: int | None = None,
                  path: str = "events") -> EventTable:
        """The table a JSON record (`to_dict`) describes, every value checked: raises
        `TraceFileError` naming the first bad one (`events.columns.block[17]: -5 is out of
        range (-1..3)`). Column values index the tables (`kernel` the `num_kernels`
        kernels; `block` the blocks, -1 for a kernel-level request; `shape`, `dtype`,
        `source` theirs, -1 for none); `thread_seq` is recomputed."""
        from . import schema as s

        d = s.obj(d, path)
        cp = f"{path}.columns"
        cols = s.obj(s.field(d, "columns", path), cp)
        raw = {}
        for k in COLUMNS:
            raw[k] = s.lst(s.field(cols, k, cp), f"{cp}.{k}", s.MAX_EVENTS)
            if len(raw[k]) != len(raw["thread_seq"]):
                s.fail(f"{cp}.{k}", f"{len(raw[k])} values, but {cp}.thread_seq has "
                                    f"{len(raw['thread_seq'])}: the columns differ in length")
        n = len(raw["thread_seq"])
        blocks = [s.int_tuple(b, f"{path}.blocks[{i}]", s.MAX_RANK, 0, s.MAX_COORD)
                  for i, b in enumerate(s.lst(s.field(d, "blocks", path), f"{path}.blocks",
                                              s.MAX_BLOCKS))]
        _unique(blocks, f"{path}.blocks")
        shapes = [s.int_tuple(x, f"{path}.shapes[{i}]", s.MAX_RANK, 0, s.MAX_DIM)
                  for i, x in enumerate(s.lst(s.field(d, "shapes", path), f"{path}.shapes",
                                              s.MAX_SHAPES))]
        dtypes = [s.string(x, f"{path}.dtypes[{i}]", s.MAX_DTYPE_CHARS)
                  for i, x in enumerate(s.lst(s.field(d, "dtypes", path), f"{path}.dtypes",
                                              s.MAX_DTYPES))]
        sources = []
        for i, x in enumerate(s.lst(s.field(d, "sources", path), f"{path}.sources",
                                    s.MAX_SOURCES)):
            sp = f"{path}.sources[{i}]"
            sources.append(SourceLocation.from_dict(s.obj(x, sp), sp).without_call())
        nk = s.MAX_KERNELS if num_kernels is None else num_kernels
        i32 = 2**31 - 1
        ranges = {
            "thread_seq": (0, i32),  # recomputed below
            "kernel": (0, nk - 1),
            "op": (0, len(OPS) - 1),
            "resource": (0, len(RESOURCES) - 1),
            "memory_space": (-1, len(MEMORY_SPACES) - 1),
            "device": (0, s.MAX_DEVICES - 1),
            "block": (-1, len(blocks) - 1),
            "thread": (-1, s.MAX_THREADS_PER_BLOCK - 1),
            "warp": (-1, s.MAX_WARP),
            "buffer_id": (-i32 - 1, i32),
            "key_thread": (-2**15, 2**15 - 1),
            "key_block": (-2**15, 2**15 - 1),
            "initial_ref_count": (0, s.MAX_REF_COUNT),
            "ref_count": (0, i32),
            "shape": (-1, len(shapes) - 1),
            "dtype": (-1, len(dtypes) - 1),
            "nbytes": (0, s.MAX_NBYTES),
            "source": (-1, len(sources) - 1),
            "allocation": (-1, n - 1),
        }
        columns = {}
        for k, dtype in COLUMNS.items():
            lo, hi = ranges[k]
            columns[k] = s.int_column(raw[k], f"{cp}.{k}", lo, hi).astype(dtype)
            raw[k] = None  # the list's memory can go
        s.check_allocations(columns, cp)
        s.check_sizes(columns, shapes, dtypes, cp)
        if n:
            columns["thread_seq"] = _thread_seq(columns).astype(COLUMNS["thread_seq"])
        # An event's call is in `vias` alone: a file's `via` on a table's shared line (or
        # call) would be every event's there, whichever call it came through; not read.
        calls, vias = [], None
        if d.get("vias") is not None or d.get("calls") is not None:  # (optional)
            for i, x in enumerate(s.lst(s.field(d, "calls", path), f"{path}.calls",
                                        s.MAX_SOURCES)):
                cp_i = f"{path}.calls[{i}]"
                calls.append(SourceLocation.from_dict(s.obj(x, cp_i), cp_i).without_call())
            vias = s.int_column(s.lst(s.field(d, "vias", path), f"{path}.vias",
                                      s.MAX_EVENTS), f"{path}.vias", -1, len(calls) - 1)
            if len(vias) != n:
                s.fail(f"{path}.vias", f"{len(vias)} values for {n} events")
        return cls(columns, blocks, shapes, dtypes, sources, calls, vias)


def _unique(items: list, path: str) -> None:
    seen: dict = {}
    for i, x in enumerate(items):
        j = seen.setdefault(x, i)
        if j != i:
            from .schema import fail

            fail(f"{path}[{i}]", f"repeats {path}[{j}]")


def _mapped(values: tuple, fn, n: int) -> np.ndarray:
    """`[fn(v) for v in values]` as an int64 array, calling `fn` once per distinct value."""
    table = {v: fn(v) for v in dict.fromkeys(values)}
    return np.fromiter(map(table.__getitem__, values), dtype=np.int64, count=n)


def _interned(values: tuple, n: int) -> tuple[np.ndarray, list]:
    """Indices into the distinct values (in order of first appearance; None -> -1)."""
    items = [v for v in dict.fromkeys(values) if v is not None]
    table = {v: i for i, v in enumerate(items)}
    table[None] = -1
    return np.fromiter(map(table.__getitem__, values), dtype=np.int64, count=n), items


@functools.lru_cache(maxsize=256)
def _dtype_name(v) -> str | None:
    """A numpy dtype's name (`str(dtype)` costs a few µs each time; a trace has a few)."""
    return None if v is None else str(v)


def _interned_names(values: tuple, n: int) -> tuple[np.ndarray, list[str]]:
    """Like `_interned`, by name: the hooks record numpy dtypes, named here once each."""
    names = _Interner()
    table = {v: names(_dtype_name(v)) for v in dict.fromkeys(values)}
    return np.fromiter(map(table.__getitem__, values), dtype=np.int64, count=n), names.items


# Up to this many events, `_thread_seq` counts in one Python pass (numpy's fixed costs
# dominate a small table); above it, with sorts.
SMALL_TABLE = 4096


def _thread_seq(cols: dict[str, np.ndarray]) -> np.ndarray:
    """Position of each event in its (kernel, device, block, thread, warp) sequence."""
    n = len(cols["kernel"])
    keys = [cols[k] for k in ("kernel", "device", "block", "thread", "warp")]
    if n <= SMALL_TABLE:
        seen: dict[tuple, int] = {}
        pos = []
        for key in zip(*(k.tolist() for k in keys)):
            i = seen.get(key, 0)
            seen[key] = i + 1
            pos.append(i)
        return np.array(pos, dtype=np.int64)
    order = np.lexsort(keys[::-1])  # stable: events of one sequence keep their order
    sk = [k[order] for k in keys]
    new = np.zeros(n, dtype=bool)
    new[0] = True
    for k in sk:
        new[1:] |= k[1:] != k[:-1]
    starts = np.flatnonzero(new)
    pos = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
    out = np.empty(n, dtype=np.int64)
    out[order] = pos
    return out
