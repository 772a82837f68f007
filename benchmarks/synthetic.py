"""Synthetic `EventTable`s with realistic allocation patterns, built directly with numpy.

`synthetic_table(n)` returns a table of about `n` events shaped like a traced Pallas
Mosaic GPU kernel in interpret mode:

* kernel 0 (clean, ~80% of events): 4 threads per block, 2 blocks per cluster. Every
  grid step each thread makes the same collective SMEM buffer and barrier requests
  (one thread creates, the others join, in an order that rotates from block to block),
  a per-thread REGS accumulator, then releases everything (the last release frees).
* kernel 1 (~10%): 2 threads per block with the same clean pattern plus a *partial
  collective*: thread 0 alone requests a collective SMEM buffer inside a
  `pl.when(t == 0)` (its ref count sticks at 1, so it also leaks), in every block.
* kernel 2 (~10%): 3 threads per block with the clean pattern plus a *leak*: all threads
  request a collective buffer but the last thread never releases it, in every block.
* every kernel starts with GMEM operands allocated for all threads (warpgroup + 4 warps)
  at kernel level (block -1), never freed, like the interpreter's.

`synthetic_records(n)` yields the same kind of events as the argument tuples of
`Recorder.record`, for ingest benchmarks. Both are deterministic (seeded) and need no JAX.
"""

from __future__ import annotations

import numpy as np

from pallas_viz.model import SourceLocation
from pallas_viz.store import COLUMNS, OP_CODE, RESOURCE_CODE, SPACE_CODE, EventTable

FILE = "synthetic_kernel.py"
_LINES = {
    "operand": (10, "def kernel(a_gmem, b_gmem, out_gmem):"),
    "smem": (21, "pl.run_scoped(body, plgpu.SMEM((2, 64, 64), jnp.float16), collective_axes='wg')"),
    "barrier": (22, "plgpu.Barrier(num_arrivals=1)"),
    "acc": (30, "acc = plgpu.layout_cast(jnp.zeros((128, 128), jnp.float32), ...)"),
    "partial": (41, "pl.run_scoped(scratch, plgpu.SMEM((64,), jnp.float32), collective_axes='wg')"),
    "leaky": (52, "pl.run_scoped(stage, plgpu.SMEM((128, 128), jnp.float16), "
                  "collective_axes='wg')"),
}
SOURCES = [SourceLocation(FILE, line, 4, "kernel", code) for line, code in _LINES.values()]
_SRC = {name: i for i, name in enumerate(_LINES)}
SHAPES = [(256, 256), (2, 64, 64), (128, 128), (64,)]
DTYPES = ["float16", "float32"]
_NBYTES = {(0, 0): 256 * 256 * 2, (1, 0): 2 * 64 * 64 * 2, (2, 1): 128 * 128 * 4,
           (3, 1): 64 * 4, (2, 0): 128 * 128 * 2}

CREATE, JOIN, RELEASE, FREE = (OP_CODE[o] for o in ("create", "join", "release", "free"))
BUFFER, BARRIER = RESOURCE_CODE["buffer"], RESOURCE_CODE["barrier"]
GMEM, SMEM, REGS = SPACE_CODE["GMEM"], SPACE_CODE["SMEM"], SPACE_CODE["REGS"]

# (threads per block, iterations per block, share of events, bug)
KERNELS = ((4, 4, 0.8, None), (2, 4, 0.1, "partial"), (3, 4, 0.1, "leak"))

_T = ("op", "resource", "space", "thread", "rotate", "warp", "alloc", "key_thread",
      "init_rc", "rc", "shape", "dtype", "source")


class _Template:
    """The events of one block, as rows of small ints; `alloc` numbers lifetimes."""

    def __init__(self):
        self.rows: list[tuple] = []
        self.allocs = 0

    def lifetime(self) -> int:
        self.allocs += 1
        return self.allocs - 1

    def collective(self, resource, space, shape, dtype, source, threads, releasers, t):
        """Requests by `threads` (first creates), releases by `releasers` (last frees)."""
        a = self.lifetime()
        rot = len(threads) == t
        for i, th in enumerate(threads):
            self.rows.append((CREATE if i == 0 else JOIN, resource, space, th, rot, -1, a, 0,
                              t, t, shape, dtype, source))
        rc = t
        for th in releasers:
            rc -= 1
            self.rows.append((FREE if rc == 0 else RELEASE, resource, space, th, rot, -1, a,
                              0, t, rc, shape, dtype, source))

    def arrays(self) -> dict[str, np.ndarray]:
        cols = np.array(self.rows, dtype=np.int64).T
        return dict(zip(_T, cols))


def _template(t: int, iters: int, bug: str | None) -> _Template:
    tp = _Template()
    everyone = list(range(t))
    for it in range(iters):
        tp.collective(BUFFER, SMEM, 1, 0, _SRC["smem"], everyone, [], t)
        smem = len(tp.rows) - t
        tp.collective(BARRIER, -1, -1, -1, _SRC["barrier"], everyone, [], t)
        bar = len(tp.rows) - t
        regs = []
        for th in everyone:  # per-thread accumulators: not collective
            a = tp.lifetime()
            regs.append(a)
            tp.rows.append((CREATE, BUFFER, REGS, th, True, -1, a, th, 1, 1, 2, 1,
                            _SRC["acc"]))
        for th, a in zip(everyone, regs):
            tp.rows.append((FREE, BUFFER, REGS, th, True, -1, a, th, 1, 0, 2, 1, _SRC["acc"]))
        if bug == "partial" and it == 0:
            a = tp.lifetime()  # thread 0 alone: created with ref count t, released once
            tp.rows.append((CREATE, BUFFER, SMEM, 0, False, -1, a, 0, t, t, 3, 1,
                            _SRC["partial"]))
            tp.rows.append((RELEASE, BUFFER, SMEM, 0, False, -1, a, 0, t, t - 1, 3, 1,
                            _SRC["partial"]))
        if bug == "leak" and it == iters - 1:
            tp.collective(BUFFER, SMEM, 2, 0, _SRC["leaky"], everyone, everyone[:-1], t)
        # release barrier then buffer, every thread, last one frees
        for start, res, space, shape, dtype, src in (
                (bar, BARRIER, -1, -1, -1, _SRC["barrier"]),
                (smem, BUFFER, SMEM, 1, 0, _SRC["smem"])):
            a = tp.rows[start][6]
            for i, th in enumerate(everyone):
                rc = t - 1 - i
                tp.rows.append((FREE if rc == 0 else RELEASE, res, space, th, True, -1, a, 0,
                                t, rc, shape, dtype, src))
    return tp


def _operands(t: int) -> _Template:
    """GMEM operands: allocated once for every (warpgroup, warp) of device 0, never freed."""
    tp = _Template()
    for shape, init in ((0, 1), (0, 1), (0, t)):
        a = tp.lifetime()
        first = True
        for th in range(t):
            for warp in (-1, 0, 1, 2, 3):
                tp.rows.append((CREATE if first else JOIN, BUFFER, GMEM, th, False, warp, a, 0,
                                init, init, shape, 0, -1))
                first = False
    return tp


def _kernel_columns(kernel: int, t: int, iters: int, bug, n_blocks: int, block_base: int,
                    alloc_base: int, cluster: int) -> tuple[dict[str, np.ndarray], int]:
    body = _template(t, iters, bug).arrays()
    ops = _operands(t).arrays()
    e = len(body["op"])
    b = np.repeat(np.arange(n_blocks, dtype=np.int64), e)
    tiled = {k: np.tile(v, n_blocks) for k, v in body.items()}
    n_allocs_block = int(body["alloc"].max()) + 1
    n_ops_allocs = int(ops["alloc"].max()) + 1
    rot = b % t
    thread = np.where(tiled["rotate"] == 1, (tiled["thread"] + rot) % t, tiled["thread"])
    # The creator of a rotated collective is the first requester: rotate the op order too.
    key_thread = np.where(tiled["space"] == REGS, thread, tiled["key_thread"])
    alloc = alloc_base + n_ops_allocs + b * n_allocs_block + tiled["alloc"]
    # buffer ids: a per-kernel counter from 100 (REGS: a counter from -100 per grid step)
    buffer_id = np.where(tiled["space"] == REGS, -100 - tiled["alloc"] % 8,
                         100 + b * n_allocs_block + tiled["alloc"])
    n = len(b)
    shape = tiled["shape"]
    dtype = tiled["dtype"]
    nbytes = np.zeros(n, dtype=np.int64)
    for (s, d), nb in _NBYTES.items():
        nbytes[(shape == s) & (dtype == d)] = nb
    cols = {
        "kernel": np.full(n, kernel), "op": tiled["op"], "resource": tiled["resource"],
        "memory_space": tiled["space"], "device": np.zeros(n, dtype=np.int64),
        "block": block_base + 1 + b,  # block-table index + 1 (0 stands for kernel level)
        "thread": thread, "warp": tiled["warp"], "buffer_id": buffer_id,
        "key_thread": key_thread, "key_block": b % cluster,
        "initial_ref_count": tiled["init_rc"], "ref_count": tiled["rc"], "shape": shape,
        "dtype": dtype, "nbytes": nbytes, "source": tiled["source"], "allocation": alloc,
    }
    m = len(ops["op"])
    opcols = {
        "kernel": np.full(m, kernel), "op": ops["op"], "resource": ops["resource"],
        "memory_space": ops["space"], "device": np.zeros(m, dtype=np.int64),
        "block": np.zeros(m, dtype=np.int64), "thread": ops["thread"], "warp": ops["warp"],
        "buffer_id": 100 + ops["alloc"], "key_thread": ops["key_thread"],
        "key_block": np.zeros(m, dtype=np.int64), "initial_ref_count": ops["init_rc"],
        "ref_count": ops["rc"], "shape": ops["shape"], "dtype": ops["dtype"],
        "nbytes": np.full(m, _NBYTES[(0, 0)]), "source": ops["source"],
        "allocation": alloc_base + ops["alloc"],
    }
    out = {k: np.concatenate([opcols[k], cols[k]]) for k in cols}
    return out, alloc_base + n_ops_allocs + n_blocks * n_allocs_block


def _thread_seq(cols: dict[str, np.ndarray]) -> np.ndarray:
    """Position of each event within its (kernel, device, block, thread, warp) sequence."""
    n = len(cols["kernel"])
    order = np.lexsort((np.arange(n), cols["warp"], cols["thread"], cols["block"],
                        cols["device"], cols["kernel"]))
    keys = np.stack([cols[k][order] for k in ("kernel", "device", "block", "thread", "warp")])
    new = np.r_[True, np.any(keys[:, 1:] != keys[:, :-1], axis=0)]
    starts = np.flatnonzero(new)
    pos = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
    seq = np.empty(n, dtype=np.int64)
    seq[order] = pos
    return seq


def synthetic_table(n_events: int, kernels=KERNELS) -> EventTable:
    """An `EventTable` of about `n_events` events (at least one block per kernel)."""
    parts = []
    blocks: list[tuple[int, ...]] = [()]
    alloc = 0
    for k, (t, iters, share, bug) in enumerate(kernels):
        per_block = len(_template(t, iters, bug).rows)
        n_blocks = max(1, round(n_events * share / per_block))
        cluster = 2 if k == 0 else 1
        base = len(blocks) - 1
        blocks += [(i // cluster, i % cluster) if cluster > 1 else (i, 0)
                   for i in range(n_blocks)]
        cols, alloc = _kernel_columns(k, t, iters, bug, n_blocks, base, alloc, cluster)
        parts.append(cols)
    # Blocks of different kernels need different block-table entries only by index: the
    # coordinates repeat across kernels, as in a real trace, but the table interns them.
    cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    table_blocks, block_col = _intern_blocks(blocks[1:], cols["block"] - 1)
    cols["block"] = block_col
    cols["thread_seq"] = _thread_seq(cols)
    cols = {k: cols[k].astype(COLUMNS[k]) for k in COLUMNS}
    return EventTable(cols, table_blocks, SHAPES, DTYPES, SOURCES)


def _intern_blocks(blocks: list[tuple], col: np.ndarray) -> tuple[list[tuple], np.ndarray]:
    uniq: dict[tuple, int] = {}
    remap = np.empty(len(blocks), dtype=np.int64)
    for i, b in enumerate(blocks):
        remap[i] = uniq.setdefault(b, len(uniq))
    # -1 (a kernel-level request) stays -1
    return list(uniq), np.where(col >= 0, remap[np.maximum(col, 0)], -1)


def synthetic_records(n_events: int) -> list[tuple]:
    """Argument tuples for `Recorder.record(*args)` replaying `synthetic_table(n)`.

    Each tuple is (kernel, op, resource, memory_space, device, block, thread, warp, key,
    ref_count, shape, dtype, nbytes, source) with `key` the interpreter's
    (memory_space_id, device_id, block_id, thread_id, initial_ref_count, buffer_id)
    and `source` one of a handful of shared objects, as the hooks pass them.
    """
    from pallas_viz.model import MEMORY_SPACES, OPS, RESOURCES

    t = synthetic_table(n_events)
    c = {k: v.tolist() for k, v in t.columns.items()}
    src_objs = [object() for _ in t.sources]
    out = []
    for i in range(len(t)):
        sp = c["memory_space"][i]
        sh, dt, so, w = c["shape"][i], c["dtype"][i], c["source"][i], c["warp"][i]
        key = (sp if sp >= 0 else 0, c["device"][i], c["key_block"][i], c["key_thread"][i],
               c["initial_ref_count"][i], c["buffer_id"][i])
        out.append((
            c["kernel"][i], OPS[c["op"][i]], RESOURCES[c["resource"][i]],
            MEMORY_SPACES[sp] if sp >= 0 else None, c["device"][i], t.block(c["block"][i]),
            c["thread"][i], None if w < 0 else w, key, c["ref_count"][i],
            t.shapes[sh] if sh >= 0 else None, t.dtypes[dt] if dt >= 0 else None,
            c["nbytes"][i], src_objs[so] if so >= 0 else None,
        ))
    return out


def synthetic_barrier_ops(n_ops: int) -> list[tuple]:
    """Argument tuples for `Recorder.barrier_op(*args)`: about `n_ops` barrier operations
    shaped like a pipelined kernel's (a TMA copy arrives at a per-slot barrier, each of the
    block's 2 consumer threads waits for that phase and sees it end, phases counting up).

    Each tuple is (kernel, op, resource, device, block, thread, warp, allocation, part,
    target_block, phase, arrivals, num_arrivals, completes, via, freed, key, barrier_id,
    source), as the hooks pass them (`source` one of a handful of shared objects).
    Deterministic; needs no JAX.
    """
    src = [object() for _ in range(3)]
    out: list[tuple] = []
    slots, steps, threads = 2, 8, 2
    block = 0
    alloc = 0
    while len(out) < n_ops:
        coords = (block // 2, block % 2)
        for _slot in range(slots):
            key = (0, 0, block % 2, 0, threads, 1000 + alloc)
            for step in range(steps):
                phase = step
                out.append((0, "arrive", "barrier", 0, coords, 0, None, alloc, None, None,
                            phase, 1, 1, True, "copy", False, key, None, src[0]))
                for t in range(threads):
                    out.append((0, "wait", "barrier", 0, coords, t, None, alloc, None, None,
                                phase, 1, 1, False, "thread", False, key, None, src[1]))
                    out.append((0, "waited", "barrier", 0, coords, t, None, alloc, None, None,
                                phase, 1, 1, False, "thread", False, key, None, src[1]))
            alloc += 1
        block += 1
    return out[:n_ops]
