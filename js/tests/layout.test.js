import assert from "node:assert/strict";
import { test } from "node:test";
import { GEOM, Layout, moveCursor, visualRows } from "../layout.js";

const meta = {
  kernels: [{ index: 0, threads: 4 }, { index: 1, threads: 2 }],
  rows: [
    { kernel: 0, start: 0 }, { kernel: 0, start: 4 }, { kernel: 1, start: 8 }, { kernel: 1, start: 10 },
  ],
};

test("visualRows lists one kernel's blocks and expands warps", () => {
  assert.deepEqual(visualRows(meta, 1), [{ row: 2, warp: -1 }, { row: 3, warp: -1 }]);
  const warps = new Map([[0, new Map([[3 * 65536 + 1, 2], [1 * 65536 + 0, 1]])]]);
  assert.deepEqual(visualRows(meta, 0, new Set([0]), warps).map((r) => [r.row, r.warp]),
    [[0, -1], [0, 1], [0, 3], [1, -1]]);
});

test("Layout maps points to cells and back", () => {
  const L = new Layout(meta, 0, visualRows(meta, 0));
  const [x, y] = L.cellXY(1, 2);
  assert.deepEqual(L.hit(x + 1, y + 1), { v: 1, t: 2 });
  assert.equal(L.cellAt(1, 2), 6);
  assert.deepEqual(L.hit(GEOM.pad + 2, y + 2), { v: 1, t: -1 });
  assert.equal(L.hit(x + GEOM.cellW + 1, y + 1), null); // in the gap
  assert.equal(L.hit(5, 2), null); // header
  assert.deepEqual(L.visibleRange(0, 10_000), [0, 1]);
  assert.equal(L.height, GEOM.pad * 2 + GEOM.headerH + 2 * (GEOM.cellH + GEOM.gap));
  assert.equal(L.vrowOfCell(6, [0, 0, 0, 0, 1, 1, 1, 1]), 1);
});

test("virtualisation: only the rows in view are drawn for 1024 blocks", () => {
  const big = { kernels: [{ index: 0, threads: 16 }], rows: Array.from({ length: 1024 }, (_, i) => ({ kernel: 0, start: i * 16 })) };
  const L = new Layout(big, 0, visualRows(big, 0));
  const [a, b] = L.visibleRange(50_000, 400);
  assert.ok(b - a <= 14, `${a}..${b}`);
  assert.equal(L.cellAt(1023, 15), 1023 * 16 + 15);
});

test("moveCursor clamps to the grid", () => {
  assert.deepEqual(moveCursor({ v: 0, t: 0 }, "ArrowUp", 3, 2), { v: 0, t: 0 });
  assert.deepEqual(moveCursor({ v: 0, t: 0 }, "ArrowDown", 3, 2), { v: 1, t: 0 });
  assert.deepEqual(moveCursor({ v: 1, t: 0 }, "End", 3, 2), { v: 1, t: 1 });
  assert.deepEqual(moveCursor({ v: 1, t: 1 }, "PageDown", 3, 2), { v: 2, t: 1 });
});
