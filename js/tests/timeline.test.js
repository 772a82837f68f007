import assert from "node:assert/strict";
import { test } from "node:test";
import { blockLayout, columnMax, curveOf, decodeTimeline, LANE_PAD, laneHeight, MAX_SUBS_DRAWN, SUB_H, unpack, visibleLanes, xOf } from "../views/timeline.js";

const b64 = (T, values) => {
  const a = new T(values);
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString("base64");
};

test("unpack decodes [dtype, base64] arrays", () => {
  assert.deepEqual([...unpack(["<i4", b64(Int32Array, [3, -1, 70000])])], [3, -1, 70000]);
  assert.deepEqual([...unpack(["<i1", b64(Int8Array, [0, 2, -1])])], [0, 2, -1]);
  assert.equal(unpack(null).length, 0);
});

// Two blocks of 2 threads (cells 0-1 and 2-3); events 0..9.
const cell = new Int32Array([0, 1, 0, 1, 2, 0, 0, 2, 3, 1]);
const warp = new Int8Array([-1, -1, -1, -1, -1, 1, 1, -1, -1, -1]);

test("blockLayout: a lane per thread plus one per (thread, warp), one bar per hold", () => {
  // holds (sorted by begin): 0->2 (t0), 1->-1 (t1, never released), 3->9 (t1),
  // 4->7 (other block), 5->6 (t0 warp 1)
  const holds = { begin: new Int32Array([0, 1, 3, 4, 5]), end: new Int32Array([2, -1, 9, 7, 6]) };
  const L = blockLayout({ holds, cell, warp, start: 0, threads: 2, x1: 10 });
  assert.deepEqual(L.lanes.map((l) => [l.thread, l.warp, l.cell]), [[0, -1, 0], [0, 1, 0], [1, -1, 1]]);
  assert.deepEqual(L.lanes.map((l) => l.bars), [[0], [4], [1, 2]]);
  assert.equal(L.holdLane[3], -1); // the other block's hold
  // t1's never-released hold runs to x1 = 10, so its later hold stacks below it
  assert.deepEqual(L.lanes.map((l) => l.subs), [1, 1, 2]);
  assert.deepEqual([L.holdSub[1], L.holdSub[2]], [0, 1]);
  assert.equal(L.height, laneHeight(1) * 2 + laneHeight(2));
  const other = blockLayout({ holds, cell, warp, start: 2, threads: 2, x1: 10 });
  assert.deepEqual(other.lanes.map((l) => l.bars.length), [1, 0]);
});

test("blockLayout: bars that do not overlap share a sub-row; a released one frees it", () => {
  const c = new Int32Array(10).fill(0);
  const w = new Int8Array(10).fill(-1);
  const holds = { begin: new Int32Array([0, 1, 2, 5]), end: new Int32Array([2, 4, 3, 8]) };
  const L = blockLayout({ holds, cell: c, warp: w, start: 0, threads: 1, x1: 10 });
  assert.deepEqual([...L.holdSub], [0, 1, 0, 0]);
  assert.equal(L.lanes[0].subs, 2);
});

test("blockLayout places barrier operations on their (thread, warp) lane, else the thread's", () => {
  const holds = { begin: new Int32Array([5]), end: new Int32Array([6]) };
  const ops = { step: new Int32Array([1, 2, 3]), cell: new Int32Array([0, 1, 3]), warp: new Int32Array([1, 7, -1]), kind: new Int8Array([0, 1, 0]), end: new Int32Array([-1, 4, -1]) };
  const L = blockLayout({ holds, cell, warp, start: 0, threads: 2, x1: 10, ops });
  assert.deepEqual(L.lanes.map((l) => l.ops), [[], [0], [1]]);
});

test("visibleLanes finds the lanes in a window; a lane's height is capped", () => {
  const holds = { begin: new Int32Array(0), end: new Int32Array(0) };
  const L = blockLayout({ holds, cell, warp, start: 0, threads: 1000, x1: 10 });
  assert.equal(L.lanes.length, 1000);
  const lh = laneHeight(1);
  assert.deepEqual(visibleLanes(L, 0, lh * 3), [0, 3]);
  assert.deepEqual(visibleLanes(L, lh * 10 + 1, lh), [10, 12]);
  assert.deepEqual(visibleLanes(L, lh * 999, 500), [999, 1000]);
  assert.equal(laneHeight(500), LANE_PAD + MAX_SUBS_DRAWN * SUB_H);
  assert.equal(xOf(5, 0, 10, 100, 200), 200);
});

test("decodeTimeline and curveOf split the concatenated curves by block row", () => {
  const p = (T, v, t = "<i4") => [t, b64(T, v)];
  const tl = decodeTimeline({
    device: { name: "h100", smem_per_block: 1000, tmem_columns: 0, has_tmem: false },
    holds: { count: 1, begin: p(Int32Array, [1]), end: p(Int32Array, [-1]) },
    live: {
      SMEM: { offsets: p(Int32Array, [0, 3, 5]), steps: p(Int32Array, [0, 1, 4, 5, 9]), values: p(Int32Array, [0, 64, 64, 0, 0]) },
      TMEM: { offsets: p(Int32Array, [0, 0, 0]), steps: p(Int32Array, []), values: p(Int32Array, []) },
      peaks: p(Int32Array, [64, 1, -1, -1, 0, 5, -1, -1]),
    },
    barriers: { count: 0, kinds: ["arrive", "wait_start", "wait_end"], step: p(Int32Array, []), kind: p(Int8Array, [], "<i1"), cell: p(Int32Array, []), warp: p(Int32Array, []), end: p(Int32Array, []) },
  });
  assert.deepEqual([...curveOf(tl.smem, 0).steps], [0, 1, 4]);
  assert.deepEqual([...curveOf(tl.smem, 1).values], [0, 0]);
  assert.equal(curveOf(tl.tmem, 1).steps.length, 0);
  assert.equal(tl.peaks[0], 64);
});

test("blockLayout stays fast at 1M events", () => {
  const n = 1_000_000;
  const c = new Int32Array(n), w = new Int8Array(n).fill(-1);
  for (let i = 0; i < n; i++) c[i] = (i >> 1) % 4096; // 2048 blocks x 2 threads
  const H = n / 2;
  const begin = new Int32Array(H), end = new Int32Array(H);
  for (let i = 0; i < H; i++) { begin[i] = 2 * i; end[i] = Math.min(n - 1, 2 * i + 8193); }
  const t0 = Date.now();
  const L = blockLayout({ holds: { begin, end }, cell: c, warp: w, start: 0, threads: 2, x1: n });
  let want = 0;
  for (let i = 0; i < H; i++) if (c[begin[i]] < 2) want++;
  assert.equal(L.lanes[0].bars.length + L.lanes[1].bars.length, want);
  assert.ok(Date.now() - t0 < 1500, `${Date.now() - t0} ms`);
});

test("columnMax: the largest value held in each pixel column, -1 outside the curve", () => {
  // 0 from step 0, 5 from 2, 1 from 3, 9 at 7 (held one step): 8 steps on 4 columns
  const steps = new Int32Array([0, 2, 3, 7]), values = new Int32Array([0, 5, 1, 9]);
  assert.deepEqual([...columnMax(steps, values, 0, 8, 4)], [0, 5, 1, 9]);
  // a window after the curve's start; the peak in a column is never lost
  assert.deepEqual([...columnMax(steps, values, 2, 4, 2)], [5, 1]);
  assert.deepEqual([...columnMax(steps, values, 0, 100, 10)], [9, -1, -1, -1, -1, -1, -1, -1, -1, -1]);
  const n = 500_000;
  const s = new Int32Array(n), v = new Int32Array(n);
  for (let i = 0; i < n; i++) { s[i] = 2 * i; v[i] = i % 1000; }
  v[123_457] = 5000;
  const t0 = Date.now();
  const cols = columnMax(s, v, 0, 2 * n, 1200);
  assert.equal(Math.max(...cols), 5000);
  assert.ok(cols.every((x) => x >= 0));
  assert.ok(Date.now() - t0 < 200, `${Date.now() - t0} ms`);
});
