import assert from "node:assert/strict";
import { test } from "node:test";
import {
  Replay, Steps, cellCounts, cellTotals, decode, lazyColumns, makeFilter, passTable, view, warpCounts,
} from "../data.js";
import { OP, protocol } from "./fixture.js";

// A 2-cell trace: cell 0 creates a collective SMEM buffer (alloc 7), cell 1 joins it,
// cell 0 releases, cell 1 frees; cell 1 creates a barrier (alloc 8) and never frees it.
// One kernel-operand GMEM event (cell -1) comes first.
function dv(T, values) {
  const a = T.from(values);
  // place the data at an odd offset inside a bigger buffer to exercise the copy path
  const u8 = new Uint8Array(a.byteLength + 1);
  u8.set(new Uint8Array(a.buffer), 1);
  return new DataView(u8.buffer, 1, a.byteLength);
}
export function sample() {
  const op = [OP.create, OP.create, OP.join, OP.release, OP.free, OP.create];
  return {
    meta: {
      num_events: 6, num_cells: 2, ops: ["create", "join", "release", "free", "error"],
      resources: ["buffer", "barrier", "cluster_barrier"], spaces: ["GMEM", "SMEM", "TMEM", "REGS"],
      kernels: [{ index: 0, threads: 2 }], rows: [{ kernel: 0, start: 0, label: "(0)" }],
      findings: [], flags: { collective: 1, warning: 2, error: 4, failed: 8 }, protocol: protocol(),
    },
    columns: {
      op: dv(Uint8Array, op), resource: dv(Uint8Array, [0, 0, 0, 0, 0, 1]),
      space: dv(Int8Array, [0, 1, 1, 1, 1, -1]), warp: dv(Int8Array, [-1, -1, -1, -1, -1, 2]),
      cell: dv(Int32Array, [-1, 0, 1, 0, 1, 1]), alloc: dv(Int32Array, [0, 7, 7, 7, 7, 8]),
      nbytes: dv(Uint32Array, [4096, 2048, 2048, 2048, 2048, 0]),
    },
    cells: { row: dv(Int32Array, [0, 0]), thread: dv(Int32Array, [0, 1]), flags: dv(Uint8Array, [1, 5]) },
  };
}

test("view decodes little-endian columns from DataViews, also misaligned", () => {
  const d = decode(sample());
  assert.deepEqual([...d.ev.cell], [-1, 0, 1, 0, 1, 1]);
  assert.deepEqual([...d.ev.nbytes], [4096, 2048, 2048, 2048, 2048, 0]);
  assert.deepEqual([...d.cells.flags], [1, 5]);
  assert.equal(view(null, "<i4").length, 0);
  assert.throws(() => view(new DataView(new ArrayBuffer(4)), "<x9"));
});

test("decode rejects columns of the wrong length", () => {
  const s = sample();
  s.columns.op = new DataView(new ArrayBuffer(3));
  assert.throws(() => decode(s), /column op has 3 rows/);
});

test("cellTotals counts events, allocations and bytes per space, honouring filters", () => {
  const d = decode(sample());
  const all = cellTotals(d, makeFilter());
  assert.deepEqual([...all.events], [2, 3]);
  assert.deepEqual([...all.allocs], [1, 1]);
  assert.deepEqual([...all.barriers], [0, 1]);
  assert.equal(all.bytes[0 * 4 + 1], 2048);
  const noBarriers = cellTotals(d, makeFilter([true, false, true]));
  assert.deepEqual([...noBarriers.events], [2, 2]);
  const noSmem = cellTotals(d, makeFilter(undefined, [true, false, true, true]));
  assert.deepEqual([...noSmem.events], [0, 1]);
});

test("Replay shows what is live per cell at each step, forwards and backwards", () => {
  const d = decode(sample());
  const r = new Replay(d, makeFilter());
  const snap = () => [[...r.live], [...r.liveBarriers], r.bytes[1], r.bytes[4 + 1]];
  r.seek(2);
  assert.deepEqual(snap(), [[1, 0], [0, 0], 2048, 0]); // created in thread 0 only
  r.seek(3);
  assert.deepEqual(snap(), [[1, 1], [0, 0], 2048, 2048]); // joined by thread 1
  r.seek(5);
  assert.deepEqual(snap(), [[0, 0], [0, 0], 0, 0]);
  r.seek(6);
  assert.deepEqual(snap(), [[0, 0], [0, 1], 0, 0]); // the barrier stays
  r.seek(2);
  assert.deepEqual(snap(), [[1, 0], [0, 0], 2048, 0]);
  assert.equal(r.seek(99), 6);
  r.setFilter(makeFilter([true, false, true]));
  assert.deepEqual(snap(), [[0, 0], [0, 0], 0, 0]);
});

test("warpCounts groups events per row, warp and thread", () => {
  const d = decode(sample());
  const w = warpCounts(d, makeFilter());
  assert.equal(w.get(0).get(2 * 65536 + 1), 1);
});

test("decode honours narrowed column types from the payload", () => {
  const s = sample();
  s.meta.protocol = protocol({ cell: "<i2", nbytes: "<u2" });
  s.columns.cell = dv(Int16Array, [-1, 0, 1, 0, 1, 1]);
  s.columns.nbytes = dv(Uint16Array, [4096, 2048, 2048, 2048, 2048, 0]);
  const d = decode(s);
  assert.ok(d.ev.cell instanceof Int16Array);
  assert.deepEqual([...d.ev.cell], [-1, 0, 1, 0, 1, 1]);
  assert.deepEqual([...cellTotals(d, makeFilter()).events], [2, 3]);
});

test("lazyColumns decodes a column behind a getter on first use only, and checks it then", () => {
  let reads = 0;
  const cols = { a: dv(Int32Array, [1, 2, 3]) };
  Object.defineProperty(cols, "b", { get() { reads++; return dv(Int32Array, [4, 5, 6]); } });
  Object.defineProperty(cols, "c", { get() { return dv(Int32Array, [7]); } });
  const out = lazyColumns(cols, { a: "<i4", b: "<i4", c: "<i4" }, 3);
  assert.equal(reads, 0);
  assert.deepEqual([...out.b], [4, 5, 6]);
  assert.deepEqual([...out.b], [4, 5, 6]);
  assert.equal(reads, 1);
  assert.throws(() => out.c, /column c has 1 rows, expected 3/);
});

test("cellCounts counts events and marks cells with warps in one pass, under filters", () => {
  const d = decode(sample());
  const all = cellCounts(d, makeFilter());
  assert.deepEqual([...all.events], [2, 3]);
  assert.deepEqual([...all.warped], [0, 1]);
  const noBarriers = cellCounts(d, makeFilter([true, false, true]));
  assert.deepEqual([...noBarriers.events], [2, 2]);
  assert.deepEqual([...noBarriers.warped], [0, 0]); // the warp's only event is the barrier
  const noSmem = cellTotals(d, makeFilter(undefined, [true, false, true, true]));
  assert.deepEqual([...cellCounts(d, makeFilter(undefined, [true, false, true, true])).events],
    [...noSmem.events]);
  const t = passTable(makeFilter([true, false, true], [true, false, true, true]));
  assert.equal(t[(0 << 3) + 1 + 1], 0); // buffer in SMEM
  assert.equal(t[(0 << 3) + 0 + 1], 1); // buffer in GMEM
  assert.equal(t[(1 << 3) - 1 + 1], 0); // barrier (no space)
  assert.equal(t[(2 << 3) - 1 + 1], 1); // cluster barrier
});

test("warpCounts rows without warps have none, and counts follow the filter", () => {
  const d = decode(sample());
  assert.equal(warpCounts(d, makeFilter()).has(0), true);
  assert.equal(warpCounts(d, makeFilter([true, false, true])).has(0), false);
  assert.equal(warpCounts(d, makeFilter([true, false, true])).get(0), undefined);
});

// The replay against a direct recomputation from the events, on a random trace with
// repeated allocation ids, re-requests after a release, unmatched releases and errors.
function randomTrace(seed, n, numCells) {
  let x = seed;
  const rnd = (k) => { x = (Math.imul(x, 1103515245) + 12345) >>> 0; return (x >>> 8) % k; };
  const cols = { op: [], resource: [], space: [], warp: [], cell: [], alloc: [], nbytes: [] };
  for (let i = 0; i < n; i++) {
    const res = rnd(10) < 7 ? 0 : 1 + rnd(2);
    cols.op.push([OP.create, OP.join, OP.release, OP.free, OP.error][rnd(20) === 0 ? 4 : rnd(4)]);
    cols.resource.push(res);
    cols.space.push(res === 0 ? rnd(4) : -1);
    cols.warp.push(rnd(3) - 1);
    cols.cell.push(rnd(numCells + 1) - 1);
    cols.alloc.push(rnd(6));
    cols.nbytes.push(res === 0 ? 256 * (1 + rnd(8)) : 0);
  }
  return {
    meta: { num_events: n, num_cells: numCells, kernels: [{ index: 0, threads: numCells }],
      rows: [{ kernel: 0, start: 0 }], findings: [], flags: { collective: 1, warning: 2, error: 4, failed: 8 }, protocol: protocol() },
    columns: { op: dv(Uint8Array, cols.op), resource: dv(Uint8Array, cols.resource), space: dv(Int8Array, cols.space),
      warp: dv(Int8Array, cols.warp), cell: dv(Int32Array, cols.cell), alloc: dv(Int32Array, cols.alloc),
      nbytes: dv(Uint32Array, cols.nbytes) },
    cells: { row: dv(Int32Array, new Array(numCells).fill(0)), thread: dv(Int32Array, [...Array(numCells).keys()]),
      flags: dv(Uint8Array, new Array(numCells).fill(0)) },
  };
}

function liveAt(d, filter, step) {
  // The reference: a Map of open requests, replayed from the first event.
  const { ev } = d;
  const open = new Map();
  const live = new Array(d.numCells).fill(0), bars = new Array(d.numCells).fill(0);
  const bytes = new Array(d.numCells * 4).fill(0), failed = new Array(d.numCells).fill(0);
  const ends = new Map();
  for (let i = 0; i < step; i++) {
    const c = ev.cell[i];
    if (c < 0) continue;
    const key = `${c}/${ev.alloc[i]}/${ev.resource[i]}`;
    const pass = filter.resources[ev.resource[i]] && (ev.space[i] < 0 || filter.spaces[ev.space[i]]);
    const op = ev.op[i];
    if (op === OP.error) { if (pass) failed[c]++; continue; }
    if (op === OP.create || op === OP.join) {
      const b = ev.resource[i] === 0 ? ev.nbytes[i] : 0;
      open.set(key, (open.get(key) || 0) + b);
      if (pass) {
        if (ev.resource[i] === 0) { live[c]++; if (ev.space[i] >= 0) bytes[c * 4 + ev.space[i]] += b; } else bars[c]++;
      }
    } else if (open.has(key)) {
      const b = open.get(key);
      open.delete(key);
      ends.set(i, b);
      if (pass) {
        if (ev.resource[i] === 0) { live[c]--; if (ev.space[i] >= 0) bytes[c * 4 + ev.space[i]] -= b; } else bars[c]--;
      }
    }
  }
  return { live, bars, bytes, failed };
}

test("Replay matches a direct recomputation at every step, both ways, under filters", () => {
  // 5 cells: few keys, many re-requests; 300 cells: the open table grows and wraps around.
  for (const [seed, cells] of [[1, 5], [2, 5], [3, 5], [4, 300], [5, 300]]) {
    const d = decode(randomTrace(seed, 400 * (cells > 5 ? 8 : 1), cells));
    for (const filter of [makeFilter(), makeFilter([true, false, true], [true, true, false, true])]) {
      const r = new Replay(d, filter);
      const steps = [0, 1, 57, 399, 400, 200, 3, 0, 250, 250, 121, d.n, d.n - 1, Math.floor(d.n / 2)];
      for (const s of steps) {
        r.seek(s);
        const want = liveAt(d, filter, s);
        assert.deepEqual([...r.live], want.live, `live, seed ${seed}, step ${s}`);
        assert.deepEqual([...r.liveBarriers], want.bars, `barriers, seed ${seed}, step ${s}`);
        assert.deepEqual([...r.bytes], want.bytes, `bytes, seed ${seed}, step ${s}`);
        assert.deepEqual([...r.failed], want.failed, `failed, seed ${seed}, step ${s}`);
      }
    }
  }
});

test("decode refuses a payload without a protocol or of another version", () => {
  const s = sample();
  delete s.meta.protocol;
  assert.throws(() => decode(s), /no protocol/);
  const t = sample();
  t.meta.protocol = { ...protocol(), version: 1 };
  assert.throws(() => decode(t), /protocol 1/);
});

test("Steps skip kernel operands when asked, and map steps to events both ways", () => {
  const d = decode(sample()); // event 0 is a kernel operand (cell -1)
  const all = new Steps(d, false);
  assert.equal(all.count, 6);
  assert.equal(all.toEvent(3), 3);
  const grid = new Steps(d, true);
  assert.equal(grid.count, 5);
  assert.equal(grid.toEvent(0), 0);
  assert.equal(grid.toEvent(1), 2); // after the first grid event (event 1)
  assert.equal(grid.toEvent(5), 6);
  assert.equal(grid.fromEvent(2), 1);
  assert.equal(grid.fromEvent(6), 5);
  assert.equal(grid.fromEvent(1), 0);
});
