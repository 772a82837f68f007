import assert from "node:assert/strict";
import { test } from "node:test";
import { OP, Replay, cellTotals, decode, makeFilter, view, warpCounts } from "../data.js";

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
      findings: [], flags: { collective: 1, warning: 2, error: 4, failed: 8 },
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
