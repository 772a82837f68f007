import assert from "node:assert/strict";
import { test } from "node:test";
import { installDom } from "./dom.js";
import { protocol } from "./fixture.js";
import { decode, makeFilter } from "../data.js";
import { Answerer } from "../details.js";
import { foldRuns, visualRows, Layout } from "../layout.js";
import { cellsName, ranges } from "../names.js";
import { Store } from "../state.js";
import { Transport } from "../transport.js";
import { FindingsView } from "../views/findings.js";
import { EventsView } from "../views/events.js";
import { alignSequences, lcsPairs, DivergenceView } from "../views/divergence.js";
import { rowStates } from "../views/minimap.js";
import { SourceView } from "../views/source.js";

installDom();

const dv = (T, v) => { const a = T.from(v); return new DataView(a.buffer); };
const DET = { thread_seq: "<i4", shape: "<i4", dtype: "<i4", buffer_id: "<i4", ref_count: "<i4", initial_ref_count: "<i4", source: "<i4" };

/** Two blocks x 2 threads ("w"); in block (1) thread 0 alone makes a second request. */
function payload() {
  //          seq: 0   1   2   3   4   5
  const cell = [0, 1, 2, 3, 2, -1];
  const op = [0, 1, 0, 1, 0, 0];
  const meta = {
    num_events: 6, num_cells: 4,
    kernels: [{ index: 0, threads: 2, thread_axis: "w", operands: { buffers: 1, bytes: 8, events: 1, seqs: [5] } }],
    rows: [{ kernel: 0, device: 0, start: 0, label: "(0)", fp: 0 }, { kernel: 0, device: 0, start: 2, label: "(1)", fp: 1 }],
    findings: [{ kind: "partial_collective", severity: "error", message: "only w 0", suggestion: "hoist it", kernel: 0,
      cells: [2, 3], rows: [1], events: [4], num_events: 1, source: { file: "k.py", line: 9, column: 4, label: "k.py:9" },
      branch: { file: "k.py", line: 7, label: "k.py:7", code: "@pl.when(w == 0)", role: "threads part here" }, related: [], consequences: [], consequence_cells: [],
      missing: [{ cell: 3, before: null }], alignments: [] },
    { kind: "leak", severity: "warning", message: "never freed", suggestion: "", kernel: 0, cells: [2], rows: [1], events: [4], num_events: 1,
      source: null, branch: null, related: [], consequences: [], consequence_cells: [], missing: [], alignments: [] }],
    protocol: protocol({}, DET), stats: [], unplaced_events: 0,
  };
  return {
    meta,
    columns: { op: dv(Uint8Array, op), resource: dv(Uint8Array, [0, 0, 0, 0, 0, 0]), space: dv(Int8Array, [1, 1, 1, 1, 1, 0]),
      warp: dv(Int8Array, [-1, -1, -1, -1, -1, -1]), cell: dv(Int32Array, cell), alloc: dv(Int32Array, [0, 0, 1, 1, 2, 3]),
      nbytes: dv(Uint32Array, [4096, 4096, 4096, 4096, 4096, 8]) },
    cells: { row: dv(Int32Array, [0, 0, 1, 1]), thread: dv(Int32Array, [0, 1, 0, 1]), flags: dv(Uint8Array, [1, 1, 5, 5]) },
    details: { thread_seq: dv(Int32Array, [0, 0, 0, 0, 1, 0]), shape: dv(Int32Array, [0, 0, 0, 0, 0, -1]), dtype: dv(Int32Array, [0, 0, 0, 0, 0, -1]),
      buffer_id: dv(Int32Array, [1, 1, 2, 2, 3, 9]), ref_count: dv(Int32Array, [2, 2, 2, 2, 2, 1]), initial_ref_count: dv(Int32Array, [2, 2, 2, 2, 2, 1]),
      source: dv(Int32Array, [0, 0, 0, 0, 1, -1]) },
    tables: { shapes: ["(8, 128)"], dtypes: ["float32"], sources: [{ file: "k.py", line: 5, label: "k.py:5" }, { file: "k.py", line: 9, label: "k.py:9" }] },
    snippets: {},
  };
}

function fakeApp() {
  const state = payload();
  const data = decode(state);
  const answerer = new Answerer(data, state.tables, state.snippets);
  const app = {
    uid: "t", data, meta: data.meta, protocol: data.protocol, answerer,
    transport: new Transport({ local: answerer }),
    store: new Store({ finding: -1, filter: makeFilter(), mode: "totals", selEvent: -1 }),
    litEvents: new Set(), replayEvent: 0, selected: [],
    selectFinding(i) { this.store.set({ finding: i }); this.selected.push(i); },
    clearFinding() { this.store.set({ finding: -1 }); },
    selectEvent() {}, showSource() {},
    missingOf: (c) => (c === 3 ? [{ finding: 0, before: null, kind: "partial_collective", what: "SMEM (8, 128) float32", line: 9 }] : []),
    describe: (seq) => ({ op: "create", what: "SMEM (8, 128) float32", loc: { file: "k.py", line: seq === 4 ? 9 : 5, label: `k.py:${seq === 4 ? 9 : 5}` } }),
  };
  return app;
}

test("names: ranges and cells grouped by block with the kernel's thread axis", () => {
  assert.equal(ranges([3, 0, 1, 2, 7, 9, 10]), "0..3, 7, 9, 10");
  assert.equal(ranges([4, 5]), "4, 5");
  const d = decode(payload());
  assert.equal(cellsName(d, [2, 3]), "block (1) · w 0, 1");
  assert.equal(cellsName(d, [0, 2]), "blocks (0), (1) · w 0");
  assert.equal(cellsName(d, [0, 3]), "block (0) · w 0; block (1) · w 1");
});

test("findings: cards name who made the request and who never did; arrows, Enter and Escape", () => {
  const app = fakeApp();
  const v = new FindingsView(app);
  app.store.set({ finding: 0 });
  v.render();
  assert.equal(v.items.length, 2);
  const text = v.items[0].textContent;
  assert.match(text, /made it: block \(1\) · w 0/);
  assert.match(text, /never did: block \(1\) · w 1/);
  assert.match(text, /threads part here: k\.py:7/);
  assert.match(text, /fix: hoist it/);
  assert.equal(v.items[0].getAttribute("aria-selected"), "true");
  assert.equal(v.el.getAttribute("role"), "listbox");
  v.items[0].dispatch("keydown", { key: "ArrowDown" });
  assert.deepEqual(app.selected, [1]);
  v.render();
  v.items[1].dispatch("keydown", { key: "Escape" });
  assert.equal(app.store.get("finding"), -1);
  v.items[0].dispatch("keydown", { key: "End" });
  assert.equal(app.store.get("finding"), 1);
});

test("events: a placeholder row where the missing request belongs, headers with tooltips", async () => {
  const app = fakeApp();
  const v = new EventsView(app);
  await v.load({ cell: 3 });
  const rows = v.el.querySelectorAll("tr");
  const missing = rows.filter((r) => r.classList.contains("pv-ev-missing"));
  assert.equal(missing.length, 1);
  assert.equal(missing[0].textContent, "∅never requested: SMEM (8, 128) float32 at line 9");
  // after the thread's own event (before = null: after its last one)
  const order = rows.filter((r) => r.classList.contains("pv-ev")).map((r) => r.classList.contains("pv-ev-missing"));
  assert.deepEqual(order, [false, true]);
  assert.ok(v.el.querySelectorAll("th").every((th) => th.getAttribute("title")));
  await v.load({ operands: true, kernel: 0 });
  assert.match(v.el.textContent, /Kernel operands of kernel 0/);
  assert.equal(v.el.querySelectorAll("tr").filter((r) => r.classList.contains("pv-ev")).length, 1);
});

test("divergence: LCS alignment with gaps, like the analysis's", () => {
  assert.deepEqual(lcsPairs(["a", "b", "c"], ["a", "c"]), [[0, 0], [2, 1]]);
  const al = alignSequences([[10, 11, 12], [20, 21]], [["a", "x", "b"], ["a", "b"]]);
  assert.deepEqual(al.rows, [[10, 20], [11, null], [12, 21]]);
  const extra = alignSequences([[10], [20, 21]], [["a"], ["y", "a"]]);
  assert.deepEqual(extra.rows, [[null, 20], [10, 21]]);
  const app = fakeApp();
  const v = new DivergenceView(app);
  v.render(1);
  const gaps = v.el.querySelectorAll("td").filter((td) => td.classList.contains("pv-gap"));
  assert.equal(gaps.length, 1); // block (1): w 1 never made w 0's second request
  assert.match(v.el.textContent, /1 position where the threads part/);
});

test("layout: alike runs fold, unflagged only, and a folded block maps to its fold row", () => {
  const meta = { kernels: [{ index: 0, threads: 2 }], rows: Array.from({ length: 8 }, (_, i) => ({ kernel: 0, device: 0, start: 2 * i, fp: i === 4 ? 1 : 0, label: `(${i})` })) };
  const flags = new Uint8Array(8);
  flags[6] = 4; // an error in block 6
  const runs = foldRuns(meta, 0, flags, 4 | 2 | 8, 3);
  assert.deepEqual(runs, [[0, 3]]); // 5 alone, 6 flagged, 7 alone
  const vr = visualRows(meta, 0, new Set(), new Map(), runs);
  assert.deepEqual(vr.map((r) => r.row), [0, 4, 5, 6, 7]);
  const L = new Layout(meta, 0, vr);
  assert.equal(L.vrowOfRow(2), 0);
  assert.equal(L.vrowOfRow(6), 3);
});

test("minimap: each block row gets its worst state", () => {
  const d = decode(payload());
  const { rows, state } = rowStates(d.meta, d.cells.row, d.cells.flags, Int32Array.from([1, 1, 2, 1]), d.protocol.flags, 0);
  assert.deepEqual(rows, [0, 1]);
  assert.deepEqual([...state], [2, 4]); // collective, error
});

test("store: one notification per set, with the keys that changed", () => {
  const s = new Store({ a: 1, b: 2 });
  const seen = [];
  s.subscribe((changed) => seen.push([...changed].sort()));
  s.set({ a: 1 });
  s.set({ a: 2, b: 3 });
  s.batch(() => { s.set({ a: 5 }); s.set({ b: 6 }); });
  assert.deepEqual(seen, [["a", "b"], ["a", "b"]]);
});

test("transport: the kernel path times out, and a dead comm is an error, never a hang", async () => {
  const silent = { on() {}, off() {}, send() {} };
  const t = new Transport({ model: silent, timeoutMs: 30 });
  const r = await t.request({ type: "events", cell: 0 });
  assert.match(r.error, /did not answer/);
  const dead = { on() {}, off() {}, send() { throw new Error("Cannot send"); } };
  const r2 = await new Transport({ model: dead, timeoutMs: 30 }).request({ type: "events", cell: 0 });
  assert.match(r2.error, /cannot be reached.*Cannot send/);
  const ids = new Set();
  // (a timer keeps Node's loop alive: AbortSignal.timeout's own timer does not)
  const invoke = async (name, msg, { signal }) => {
    ids.add(msg.id);
    await new Promise((res, rej) => { const keep = setTimeout(res, 1000); signal.addEventListener("abort", () => { clearTimeout(keep); rej(signal.reason); }); });
  };
  const t3 = new Transport({ invoke, timeoutMs: 20 });
  const [a, b] = await Promise.all([t3.request({ type: "source" }), t3.request({ type: "source" })]);
  assert.match(a.error, /did not answer/);
  assert.match(b.error, /did not answer/);
  assert.equal(ids.size, 2); // unique ids
  const ok = await new Transport({ invoke: async (name, msg) => [{ type: name, id: msg.id, rows: [] }] }).request({ type: "events", cell: 1 });
  assert.equal(ok.type, "events");
});


test("source: a gap after the branch line is said, and an indented line wraps under its code", async () => {
  // (review N: line 7 between the branch line and the stored lines was skipped unmarked;
  // a long line indented 18 spaces showed its number on an empty row, its code at column 0)
  const long = " ".repeat(18) + "plgpu.Barrier(num_arrivals=3),";
  const store = { "k.py:6": { start: 6, lines: ["    @pl.when(t < 2)"] }, "k.py:13": { start: 8, lines: ["a", "b", "c", "d", "e", long] } };
  const app = { transport: { request: async (q) => ({ type: "source", ...(store[`${q.file}:${q.line}`] || { start: q.line, lines: [] }) }) } };
  const v = new SourceView(app);
  await v.show({ file: "k.py", line: 13, column: 18, label: "k.py:13" }, "the request", { file: "k.py", line: 6, label: "k.py:6", code: "@pl.when(t < 2)" });
  const note = v.el.querySelector(".pv-skipnote");
  assert.ok(note, "no note for the skipped line");
  assert.equal(note.textContent, "⋯ 1 line not shown");
  const hit = v.el.querySelector(".pv-line-hit");
  const text = hit.querySelector(".pv-text");
  assert.equal(text.style.textIndent, "-18ch");
  assert.equal(text.style.paddingLeft, "calc(4px + 18ch)");
  assert.equal(text.textContent, long);  // (the text as it is: its indentation in a span that never wraps)
  assert.equal(text.querySelector(".pv-indent").textContent, " ".repeat(18));
  // the branch line right before the stored lines: nothing skipped, nothing said
  store["k.py:13"].start = 7;
  store["k.py:13"].lines = ["x", ...store["k.py:13"].lines];
  await v.show({ file: "k.py", line: 13, label: "k.py:13" }, "", { file: "k.py", line: 6, label: "k.py:6" });
  assert.equal(v.el.querySelector(".pv-skipnote"), null);
});

test("findings and source: a branch is named by its role in the payload (review: the unnamed-axis warning's branch read \"threads part here\")", async () => {
  const app = fakeApp();
  const f = app.meta.findings[0];
  f.branch = { ...f.branch, role: "branch here (its axis not known)" };
  const v = new FindingsView(app);
  v.render();
  assert.match(v.items[0].textContent, /branch here \(its axis not known\): k\.py:7/);
  assert.doesNotMatch(v.items[0].textContent, /threads part here/);
  const store = { "k.py:7": { start: 7, lines: ["@pl.when(a == 0)"] }, "k.py:20": { start: 18, lines: ["a", "b", "c"] } };
  const src = new SourceView({ transport: { request: async (q) => ({ type: "source", ...store[`${q.file}:${q.line}`] }) } });
  await src.show({ file: "k.py", line: 20, label: "k.py:20" }, "", f.branch);
  assert.equal(src.el.querySelector(".pv-branchnote").textContent, "branch here (its axis not known): k.py:7");
  assert.equal(src.el.querySelector(".pv-line-branch").getAttribute("title"), "branch here (its axis not known)");
  // a payload without a role: called a branch, claiming nothing of what it does
  await src.show({ file: "k.py", line: 20, label: "k.py:20" }, "", { file: "k.py", line: 7, label: "k.py:7" });
  assert.equal(src.el.querySelector(".pv-branchnote").textContent, "branch: k.py:7");
});
