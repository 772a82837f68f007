import assert from "node:assert/strict";
import { test } from "node:test";
import { installDom } from "./dom.js";
import { decodePeak, peakCells, peakOf, PeakView } from "../views/peak.js";
import { holdOf } from "../views/timeline.js";

installDom();

const b64 = (values) => {
  const a = new Int32Array(values);
  return ["<i4", Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString("base64")];
};
const SRC = { file: "k.py", line: 141, column: 3, function: "kernel", code: "pl.run_scoped(<b>x</b>)", name: "k.py", label: "k.py:141" };
const KINDS = [
  { space: "SMEM", resource: "buffer", shape: "(2, 256, 64)", dtype: "float16", nbytes: 65536, charge: 65536, size: "64.0 KiB", narrow: true, source: SRC, kernel_level: false },
  { space: "SMEM", resource: "barrier", shape: null, dtype: null, nbytes: 8, charge: 8, size: "8 B", narrow: false, source: SRC, kernel_level: false },
  { space: "TMEM", resource: "buffer", shape: "(128, 256)", dtype: "float32", nbytes: 131072, charge: 256, size: "256 columns", narrow: false, source: { ...SRC, line: 240, label: "k.py:240" }, kernel_level: false },
  { space: "SMEM", resource: "buffer", shape: "(<img src=x onerror=alert(1)>,)", dtype: "f<32>", nbytes: 4096, charge: 4096, size: "4.0 KiB", narrow: false, source: null, kernel_level: true },
  { space: "REGS", resource: "buffer", shape: "(64, 128)", dtype: "float32", nbytes: 32768, charge: 32768, size: "32.0 KiB", narrow: false, source: { ...SRC, line: 160, label: "k.py:160" }, kernel_level: false },
];
// three block rows: row 0 holds a buffer and two barriers at its SMEM peak and a TMEM buffer
// (with the 4-byte TMEM address slot) and two warpgroups' accumulators in registers; row 1
// nothing; row 2 a kernel-level buffer, 1 more
const PK = {
  texts: ["SMEM peak 64.0 KiB / 227 KiB (28 %) at line 141", "TMEM peak 256 / 512 columns (50 %) at line 240", "SMEM peak 8.0 KiB / 227 KiB (4 %)", "REGS peak 64.0 KiB / 256 KiB (25 %) at line 160"],
  kinds: KINDS, max_rows: 200,
  SMEM: { text: b64([0, -1, 2]), overhead: b64([4, 0, 0]), more: b64([0, 0, 1]), offsets: b64([0, 3, 3, 4]), event: b64([5, 2, 3, 9]), kind: b64([0, 1, 1, 3]) },
  TMEM: { text: b64([1, -1, -1]), overhead: b64([0, 0, 0]), more: b64([0, 0, 0]), offsets: b64([0, 1, 1, 1]), event: b64([7]), kind: b64([2]) },
  REGS: { text: b64([3, -1, -1]), overhead: b64([0, 0, 0]), more: b64([0, 0, 0]), offsets: b64([0, 2, 2, 2]), event: b64([11, 12]), kind: b64([4, 4]) },
};

test("decodePeak / peakOf: a row's live buffers, largest first, with the peak in words", () => {
  const pk = decodePeak(PK);
  const p = peakOf(pk, "SMEM", 0);
  assert.equal(p.text, PK.texts[0]);
  assert.deepEqual(p.items.map((x) => x.event), [5, 2, 3]);
  assert.equal(p.overhead, 4);
  // what is listed plus the overhead adds up to the peak
  assert.equal(p.items.reduce((s, x) => s + x.kind.charge, 0) + p.overhead, 65536 + 16 + 4);
  assert.equal(peakOf(pk, "SMEM", 1), null);
  assert.equal(peakOf(pk, "TMEM", 2), null);
  assert.equal(peakOf(pk, "TMEM", 0).items[0].kind.charge, 256);
  assert.equal(peakOf(pk, "SMEM", 2).more, 1);
  assert.equal(peakOf(pk, "SMEM", 9), null);
  const regs = peakOf(pk, "REGS", 0);
  assert.deepEqual(regs.items.map((x) => x.event), [11, 12]);
  assert.equal(regs.items.reduce((s, x) => s + x.kind.charge, 0), 65536);
  assert.equal(peakOf(pk, "REGS", 1), null);
  assert.equal(decodePeak(null), null);
  assert.equal(peakOf(null, "SMEM", 0), null);
});

test("peakCells: shape (or barrier), dtype, size (TMEM in columns), line", () => {
  assert.deepEqual(peakCells(KINDS[0]), ["(2, 256, 64)", "float16", "64.0 KiB", "k.py:141"]);
  assert.deepEqual(peakCells(KINDS[1]), ["barrier", "", "8 B", "k.py:141"]);
  assert.deepEqual(peakCells(KINDS[2]), ["(128, 256)", "float32", "256 columns", "k.py:240"]);
  assert.deepEqual(peakCells({ ...KINDS[2], narrow: true, size: "64 columns" })[2], "64 columns (packed)");
  assert.equal(peakCells(KINDS[3])[3], "no line recorded (kernel-level)");
});

test("PeakView lists the rows, escapes kernel text and selects a row's request", () => {
  const picked = [];
  const app = { meta: { timeline: { peak: PK } }, store: { state: { selEvent: -1 } } };
  const v = new PeakView(app, { onSelect: (seq, loc) => picked.push([seq, loc && loc.line]) });
  v.render(0);
  const rows = v.el.querySelectorAll("tr.pv-peak-row");
  assert.equal(rows.length, 6); // 3 SMEM + 1 TMEM + 2 REGS
  assert.deepEqual(v.el.querySelectorAll("div.pv-peak-head").map((x) => x.textContent), [PK.texts[0], PK.texts[1], PK.texts[3]]);
  assert.equal(v.el.querySelectorAll("tr.pv-peak-overhead").length, 1);
  assert.deepEqual(JSON.parse(v.el.getAttribute("data-counts")), { SMEM: 3, TMEM: 1, REGS: 2 });
  assert.deepEqual(rows.slice(4).map((r) => r.getAttribute("data-space")), ["REGS", "REGS"]);
  assert.equal(rows[4].textContent, "(64, 128)float3232.0 KiBk.py:160");
  rows[0].click();
  rows[3].click();
  assert.deepEqual(picked, [[5, 141], [7, 240]]);
  const enter = rows[1].dispatch("keydown", { key: "Enter" });
  assert.ok(enter.defaultPrevented);
  assert.deepEqual(picked[2], [2, 141]);
  app.store.state.selEvent = 2;
  v.mark();
  assert.deepEqual(v.el.querySelectorAll("tr.pv-peak-sel").map((r) => r.getAttribute("data-event")), ["2"]);
  v.render(1);
  assert.equal(v.el.querySelectorAll("tr.pv-peak-row").length, 0);
  assert.equal(v.el.querySelectorAll("div.pv-peak-none").length, 1);
  v.render(2);
  const row = v.el.querySelector("tr.pv-peak-row");
  assert.equal(row.textContent.includes("<img src=x onerror=alert(1)>"), true); // a text node
  assert.equal(row.querySelectorAll("img").length, 0);
  assert.equal(v.el.querySelectorAll("tr.pv-peak-more").length, 1);
});

test("holdOf finds the hold a request begins", () => {
  const begin = new Int32Array([0, 3, 5, 9]);
  assert.deepEqual([0, 3, 5, 9, 4, 10, -1].map((s) => holdOf(begin, s)), [0, 1, 2, 3, -1, -1, -1]);
});
