import assert from "node:assert/strict";
import { test } from "node:test";
import { installDom } from "./dom.js";
import { makeDoc } from "../standalone.js";
import { CompareView, renderCompare } from "../views/compare.js";

installDom();

const EVIL = "</script><img src=x onerror=alert(1)>";

/** A compare state as pallas_viz/render/compare_widget.py builds it: one kernel, 5 blocks x
 *  2 threads; block (1) had a root fixed, blocks (2..4) fold into one clean run; after, a
 *  new root in block (0) thread 1. */
function state() {
  const root = (id, status, kind, line) => ({
    id, status, kind, severity: "error", message: `msg ${EVIL}`, where: `k${EVIL}.py:${line}`,
    file: `/x/k${EVIL}.py`, line, function: `body${EVIL}`, code: `pl.run_scoped(${EVIL})`,
  });
  const clean = () => [[0, []], [0, []]];
  return {
    version: 1, statuses: ["clean", "fixed", "still", "new"],
    marks: { clean: "", fixed: "✓", still: "●", new: "✚" },
    counts: { fixed: 1, still: 0, new: 1, new_errors: 1 },
    headline: "1 root cause fixed, 0 still, 1 new", empty: false,
    kernels: [{
      label: `kernel a${EVIL}`, status: "both", headline: "1 root cause fixed, 0 still, 1 new",
      roots: [root(0, "fixed", "partial_collective", 60), root(1, "new", "leak", 70)],
      changes: [{ id: 0, change: "changed", text: `~ SMEM (128,) float32 moved from k${EVIL}.py:60 to k.py:54 (request #0)` },
        { id: 1, change: "added", text: "+ barrier at k.py:57 (request #1)" }],
      sides: {
        before: { kernel: 0, name: `a${EVIL}`, thread_axis: "w", threads: 2, blocks: 5, counts: {},
          runs: [{ first: "(0)", last: "(0)", count: 1, cells: clean() },
            { first: "(1)", last: "(1)", count: 1, cells: [[1, [0], [0]], [1, [0], [0, 1]]] },
            { first: "(2)", last: "(4)", count: 3, cells: clean() }] },
        after: { kernel: 0, name: "a", thread_axis: "w", threads: 2, blocks: 5, counts: {},
          runs: [{ first: "(0)", last: "(0)", count: 1, cells: [[0, []], [3, [1]]] },
            { first: "(1)", last: "(1)", count: 1, cells: [[1, [0], [0]], [1, [0], [0, 1]]] },
            { first: "(2)", last: "(4)", count: 3, cells: clean() }] },
      },
    }, {
      label: "kernel b (runs only after)", status: "added", headline: "0 root causes fixed, 0 still, 0 new", roots: [], changes: [],
      sides: { before: null, after: { kernel: 1, name: "b", thread_axis: "thread", threads: 1, blocks: 1, counts: {},
        runs: [{ first: "(no grid)", last: "(no grid)", count: 1, cells: [[0, []]] }] } },
    }],
  };
}

test("compare: the header, both grids and each cell's status as given, folded runs counted per block", () => {
  const v = new CompareView(state());
  const text = v.el.textContent;
  assert.ok(text.includes("1 root cause fixed, 0 still, 1 new"));
  assert.ok(text.includes("✓ 1 fixed") && text.includes("● 0 still") && text.includes("✚ 1 new"));
  const grids = v.el.querySelectorAll("table.pv-cmp-grid");
  assert.deepEqual(grids.map((g) => g.getAttribute("data-side")), ["before", "after", "after"]);
  // 3 rows each (the run (2)..(4) is one row), a header row of threads
  const rows = grids[0].querySelectorAll("tr");
  assert.equal(rows.length, 4);
  assert.deepEqual(rows[0].children.map((c) => c.textContent), ["block", "w 0", "w 1"]);
  assert.equal(rows[3].children[0].textContent, "(2)..(4) ×3");
  assert.deepEqual(v.drawnCounts(), { before: { clean: 8, fixed: 2 }, after: { new: 1, clean: 8, fixed: 2 } });
  const cells = grids[1].querySelectorAll("td.pv-cmp-cell");
  assert.deepEqual(cells.map((c) => c.getAttribute("data-status")).slice(0, 4), ["clean", "new", "fixed", "fixed"]);
  assert.ok(cells[1].classList.contains("pv-cmp-new"));
  assert.equal(cells[1].textContent, "✚");
  assert.equal(cells[2].textContent, "✓");
  assert.ok(cells[1].getAttribute("title").includes(`new: leak at k${EVIL}.py:70`));
  // a side the kernel does not run on says so
  const sections = v.el.querySelectorAll("section.pv-cmp-kernel");
  assert.equal(sections.length, 2);
  assert.ok(sections[1].textContent.includes("the kernel does not run on this side"));
});

test("compare: the view draws the statuses it is given and derives none from the roots", () => {
  const s = state();
  // a cell said "still" although no root of that status exists: drawn as still all the same
  s.kernels[0].sides.before.runs[0].cells[0] = [2, []];
  const v = new CompareView(s);
  assert.equal(v.drawnCounts().before.still, 1);
  // and the counts in the header are the state's, not recounted from the lists
  s.counts.fixed = 7;
  assert.ok(new CompareView(s).el.textContent.includes("✓ 7 fixed"));
});

test("compare: roots listed per status with file:line; hovering one outlines its cells", () => {
  const v = new CompareView(state());
  const lists = v.el.querySelectorAll("div.pv-cmp-roots");
  assert.deepEqual(lists.map((l) => l.children[0].textContent), ["fixed (1)", "new (1)"]);
  const items = v.el.querySelectorAll("li.pv-cmp-root");
  assert.ok(items[0].textContent.includes(`error[partial_collective] k${EVIL}.py:60 in body${EVIL}`));
  items[0].dispatch("mouseenter");
  const lit = v.el.querySelectorAll("td.pv-cmp-lit");
  assert.equal(lit.length, 4); // block (1), both threads, before and after
  assert.ok(lit.every((c) => c.getAttribute("data-status") === "fixed"));
  items[0].dispatch("mouseleave");
  assert.equal(v.el.querySelectorAll("td.pv-cmp-lit").length, 0);
});

test("compare: kernel text stays text (no element is made from it)", () => {
  const v = new CompareView(state());
  assert.equal(v.el.querySelectorAll("img").length, 0);
  assert.equal(v.el.querySelectorAll("script").length, 0);
  assert.ok(v.el.textContent.includes(`kernel a${EVIL}`));
  assert.ok(v.el.textContent.includes(`msg ${EVIL}`));
});

test("compare: no kernel on either side, and the widget and page entry points", () => {
  const s = state();
  s.kernels = [];
  s.headline = "0 root causes fixed, 0 still, 0 new";
  assert.ok(new CompareView(s).el.textContent.includes("No Pallas kernel ran in either trace."));
  const el = document.createElement("div");
  const model = { get: (k) => (k === "data" ? { compare: state() } : null) };
  assert.equal(typeof renderCompare(model, el), "function");
  assert.equal(el.querySelectorAll("td.pv-cmp-cell").length, 13);
  // the exported page hands the compare state through unchanged (no columns to decode)
  const doc = makeDoc({ state: { compare: state() } });
  assert.equal(doc.state.compare.headline, "1 root cause fixed, 0 still, 1 new");
});

test("compare: clicking a cell lists its root causes and its allocation changes", () => {
  const v = new CompareView(state());
  const detail = v.el.querySelectorAll("div.pv-cmp-detail")[0];
  assert.ok(detail.textContent.startsWith("Click a cell"));
  // after, block (1), w 1: the fixed root, and two changes of its sequence
  const cell = v.cellEls.find((c) => c.side === "after" && c.label === "(1)" && c.thread === 1);
  assert.equal(cell.el.getAttribute("data-changes"), "2");
  assert.ok(cell.el.getAttribute("title").includes("2 allocation changes (click for details)"));
  cell.el.click();
  assert.ok(cell.el.classList.contains("pv-cmp-sel"));
  assert.equal(v.el.querySelectorAll("td.pv-cmp-sel").length, 1);
  assert.equal(detail.getAttribute("data-selected"), "after (1) 1");
  assert.equal(detail.querySelector(".pv-cmp-detail-head").textContent, "✓after · block (1) · w 1: fixed");
  const roots = detail.querySelector("ul.pv-cmp-detail-roots").querySelectorAll("li");
  assert.equal(roots.length, 1);
  assert.ok(roots[0].textContent.includes(`fixed: error[partial_collective] k${EVIL}.py:60`));
  assert.ok(roots[0].textContent.includes(`pl.run_scoped(${EVIL})`));
  const changes = detail.querySelectorAll("li.pv-cmp-ch");
  assert.deepEqual(changes.map((c) => c.getAttribute("data-change")), ["changed", "added"]);
  assert.equal(changes[1].textContent, "+ barrier at k.py:57 (request #1)");
  assert.equal(detail.querySelectorAll("img").length, 0); // kernel text stays text
  // a folded run says how many blocks it stands for; a clean cell, that nothing changed
  const run = v.cellEls.find((c) => c.side === "before" && c.label === "(2)..(4) ×3" && c.thread === 0);
  const enter = run.el.dispatch("keydown", { key: "Enter" });
  assert.ok(enter.defaultPrevented);
  assert.ok(detail.textContent.includes("before · block (2)..(4) ×3 (3 blocks alike) · w 0: clean"));
  assert.ok(detail.textContent.includes("no root cause at this cell"));
  assert.ok(detail.textContent.includes("allocations: the same sequence before and after"));
  assert.ok(!cell.el.classList.contains("pv-cmp-sel"));
  // a kernel that runs on one side only has nothing to compare
  const b = v.cellEls.find((c) => c.kernel === 1);
  b.el.click();
  const other = v.el.querySelectorAll("div.pv-cmp-detail")[1];
  assert.ok(other.textContent.includes("the kernel runs on one side only"));
});

test("compare: one tab stop per grid; arrow keys move between its cells", () => {
  const v = new CompareView(state());
  const before = v.cellEls.filter((c) => c.kernel === 0 && c.side === "before");
  assert.deepEqual(before.map((c) => c.el.getAttribute("tabindex")), ["0", "-1", "-1", "-1", "-1", "-1"]);
  const down = before[0].el.dispatch("keydown", { key: "ArrowDown" });
  assert.ok(down.defaultPrevented);
  assert.equal(document.activeElement, before[2].el); // block (1), w 0
  before[2].el.dispatch("keydown", { key: "ArrowRight" });
  assert.equal(document.activeElement, before[3].el);
  before[3].el.dispatch("keydown", { key: "ArrowRight" }); // past the last column: stays
  assert.equal(document.activeElement, before[3].el);
  assert.deepEqual(before.map((c) => c.el.getAttribute("tabindex")), ["-1", "-1", "-1", "0", "-1", "-1"]);
  before[3].el.dispatch("keydown", { key: "Enter" });
  assert.ok(v.el.querySelectorAll("div.pv-cmp-detail")[0].textContent.includes("before · block (1) · w 1: fixed"));
  // the other grid keeps its own tab stop
  const after = v.cellEls.filter((c) => c.kernel === 0 && c.side === "after");
  assert.equal(after[0].el.getAttribute("tabindex"), "0");
  assert.equal(before[0].el.dispatch("keydown", { key: "a" }).defaultPrevented, false);
});
