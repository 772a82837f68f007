// The compare view of a trace diff (`pv.diff(a, b)`): per kernel, two grids side by side
// (before | after), block rows x thread columns, each cell drawn with the status Python
// computed for it (trace_diff.GridStatus: fixed, still, new or clean), the counts header and
// the root causes of each status with their file:line. Clicking a cell (or Enter on it; arrow
// keys move between a grid's cells, one tab stop per grid) lists,
// under the grids, the root causes at that cell and the changes of its allocation sequence
// (trace_diff.KernelDiff.changes_at). Nothing is derived here: statuses, counts, headlines,
// row runs and each cell's roots and changes all come from the state. Trace text goes through
// textContent.
import { h, replace } from "../format.js";

const TITLES = {
  fixed: "fixed: an error cell before, clean after",
  still: "still: a root cause here before and after",
  new: "new: a root cause here only after",
  clean: "clean: no root cause here",
};
const SIDES = ["before", "after"];
// arrow key -> [row step, column step] in a grid
const ARROWS = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };

function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

export class CompareView {
  /** `state` is the widget's `data.compare` (pallas_viz/render/compare_widget.py). */
  constructor(state) {
    this.state = state;
    this.cellEls = []; // [{el, kernel, side, label, thread, ids, changes}]
    this.details = []; // per kernel: the element the selected cell's details go in
    this.el = h("div", { class: "pv-root pv-compare", role: "region", "aria-label": "pallas_viz trace diff" });
    this.render();
  }

  status(code) {
    return this.state.statuses[code];
  }

  render() {
    const s = this.state;
    const c = s.counts;
    const badges = ["fixed", "still", "new"].map((st) => h("span", {
      class: `pv-badge pv-cmp-badge-${st}${c[st] ? "" : " pv-cmp-zero"}`, title: TITLES[st],
    }, `${s.marks[st]} ${c[st]} ${st}`));
    const header = h("div", { class: "pv-header" },
      h("div", { class: "pv-title" }, h("span", { class: "pv-logo" }, "▦"), "pallas_viz diff"),
      h("span", { class: "pv-cmp-headline" }, s.headline), badges,
      h("div", { class: "pv-spacer" }), this.legend());
    const body = s.kernels.length
      ? s.kernels.map((k, i) => this.kernel(k, i))
      : h("div", { class: "pv-empty" }, "No Pallas kernel ran in either trace.");
    replace(this.el, header, body);
  }

  legend() {
    return h("div", { class: "pv-legend", role: "list", "aria-label": "legend" },
      ["fixed", "still", "new", "clean"].map((st) => h("span", { class: "pv-legend-item", role: "listitem", title: TITLES[st] },
        h("span", { class: `pv-swatch pv-cmp-${st}`, "aria-hidden": "true" }, this.state.marks[st] || ""), st)));
  }

  kernel(k, index) {
    const grids = SIDES.some((side) => k.sides[side])
      ? h("div", { class: "pv-cmp-grids" }, SIDES.map((side) => this.grid(k, index, side)))
      : null;
    const detail = grids ? h("div", { class: "pv-cmp-detail", "aria-live": "polite" },
      h("div", { class: "pv-muted" }, "Click a cell for its root causes and how its allocations changed.")) : null;
    this.details[index] = detail;
    return h("section", { class: "pv-cmp-kernel", "data-kernel": index },
      h("div", { class: "pv-pane-title" }, h("span", {}, k.label), h("span", { class: "pv-muted" }, k.headline)),
      grids, detail, this.roots(k, index));
  }

  grid(k, index, side) {
    const g = k.sides[side];
    const title = h("div", { class: "pv-cmp-side-title" }, h("span", { class: "pv-label" }, side));
    if (!g) return h("div", { class: `pv-cmp-side pv-cmp-${side}-side` }, title, h("div", { class: "pv-empty" }, "the kernel does not run on this side"));
    title.appendChild(h("span", { class: "pv-muted" }, ` ${g.name || `kernel ${g.kernel}`} · ${plural(g.blocks, "block")} × ${g.threads} ${g.thread_axis}`));
    const head = h("tr", {}, h("th", { scope: "col" }, "block"),
      Array.from({ length: g.threads }, (_, t) => h("th", { scope: "col" }, `${g.thread_axis} ${t}`)));
    const matrix = []; // rows of cell infos: arrow keys move through them
    const rows = g.runs.map((run, r) => {
      const label = run.count === 1 ? run.first : `${run.first}..${run.last} ×${run.count}`;
      matrix.push([]);
      return h("tr", {}, h("th", { scope: "row", class: "pv-cmp-block" }, label),
        run.cells.map(([code, ids, changes], t) => this.cell(k, index, side, label, g, t, code, ids, changes || [], run.count, matrix, r)));
    });
    // one tab stop per grid (the first cell, later the last one visited): arrows do the rest
    if (matrix.length && matrix[0].length) matrix[0][0].el.setAttribute("tabindex", "0");
    const table = h("table", { class: "pv-cmp-grid", "data-side": side, "aria-label": `${side}: blocks by ${g.thread_axis}` },
      h("thead", {}, head), h("tbody", {}, rows));
    return h("div", { class: `pv-cmp-side pv-cmp-${side}-side` }, title, h("div", { class: "pv-cmp-scroll" }, table));
  }

  cell(k, index, side, label, g, t, code, ids, changes, count, matrix, row) {
    const st = this.status(code);
    const tip = [`${side} · block ${label} · ${g.thread_axis} ${t}: ${st}`]
      .concat(ids.map((i) => { const r = k.roots[i]; return `${r.status}: ${r.kind} at ${r.where}`; }))
      .concat(changes.length ? [`${plural(changes.length, "allocation change")} (click for details)`] : []);
    const info = { kernel: index, side, label, thread: t, status: st, ids, changes, count, axis: g.thread_axis, matrix, row };
    const pick = () => this.select(k, info);
    const el = h("td", {
      class: `pv-cmp-cell pv-cmp-${st}`, "data-status": st, "data-count": count, "data-changes": changes.length,
      title: tip.join("\n"), tabindex: "-1", onclick: pick,
      onkeydown: (e) => {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); pick(); return; }
        const step = ARROWS[e.key];
        if (!step) return;
        e.preventDefault();
        const next = (matrix[row + step[0]] || [])[t + step[1]];
        if (next) this.focusCell(next);
      },
    }, this.state.marks[st] || "");
    info.el = el;
    matrix[row].push(info);
    this.cellEls.push(info);
    return el;
  }

  /** Make `info`'s cell its grid's tab stop and focus it. */
  focusCell(info, options) {
    for (const r of info.matrix) for (const c of r) c.el.setAttribute("tabindex", c === info ? "0" : "-1");
    info.el.focus(options);
  }

  /** Show the root causes and allocation changes of one cell under its kernel's grids. */
  select(k, info) {
    for (const c of this.cellEls) c.el.classList.toggle("pv-cmp-sel", c === info);
    this.focusCell(info, { preventScroll: true }); // the arrows go on from here
    const detail = this.details[info.kernel];
    if (!detail) return;
    const alike = info.count > 1 ? ` (${info.count} blocks alike)` : "";
    const head = h("div", { class: "pv-cmp-detail-head" },
      h("span", { class: `pv-swatch pv-cmp-${info.status}`, "aria-hidden": "true" }, this.state.marks[info.status] || ""),
      `${info.side} · block ${info.label}${alike} · ${info.axis} ${info.thread}: ${info.status}`);
    const roots = info.ids.length
      ? h("ul", { class: "pv-cmp-detail-roots" }, info.ids.map((i) => {
        const r = k.roots[i];
        return h("li", { "data-root": i },
          h("b", {}, `${r.status}: ${r.severity}[${r.kind}]`), " ", h("code", { class: "pv-cmp-where" }, r.where),
          h("div", { class: "pv-cmp-msg" }, r.message),
          r.code ? h("pre", { class: "pv-cmp-code" }, r.code) : null);
      }))
      : h("div", { class: "pv-muted pv-cmp-detail-noroot" }, "no root cause at this cell");
    let changes;
    if (k.status !== "both") changes = h("div", { class: "pv-muted" }, "the kernel runs on one side only: its allocations are not compared");
    else if (!info.changes.length) changes = h("div", { class: "pv-muted pv-cmp-detail-same" }, "allocations: the same sequence before and after");
    else {
      changes = h("div", {}, h("div", { class: "pv-label" }, `allocations: ${plural(info.changes.length, "change")}`),
        h("ul", { class: "pv-cmp-detail-changes" }, info.changes.map((i) => {
          const ch = k.changes[i];
          return h("li", { class: `pv-cmp-ch pv-cmp-ch-${ch.change}`, "data-change": ch.change }, ch.text);
        })));
    }
    replace(detail, head, roots, changes);
    detail.setAttribute("data-selected", `${info.side} ${info.label} ${info.thread}`);
  }

  roots(k, index) {
    const groups = ["fixed", "still", "new"].map((st) => {
      const list = k.roots.filter((r) => r.status === st);
      if (!list.length) return null;
      return h("div", { class: `pv-cmp-roots pv-cmp-roots-${st}` },
        h("div", { class: "pv-label" }, `${st} (${list.length})`),
        h("ul", {}, list.map((r) => h("li", {
          class: "pv-cmp-root", tabindex: "0", title: r.code || r.message,
          onmouseenter: () => this.light(index, r.id), onmouseleave: () => this.light(index, -1),
          onfocus: () => this.light(index, r.id), onblur: () => this.light(index, -1),
        }, h("span", { class: `pv-swatch pv-cmp-${st}`, "aria-hidden": "true" }, this.state.marks[st]),
        h("b", {}, `${r.severity}[${r.kind}]`), " ", h("code", { class: "pv-cmp-where" }, r.where),
        r.function ? h("span", { class: "pv-muted" }, ` in ${r.function}`) : null,
        h("div", { class: "pv-cmp-msg" }, r.message)))));
    }).filter(Boolean);
    return groups.length ? h("div", { class: "pv-cmp-rootlist" }, groups) : null;
  }

  /** Outline the cells of root `id` of kernel `index` (-1: none). */
  light(index, id) {
    for (const c of this.cellEls) c.el.classList.toggle("pv-cmp-lit", id >= 0 && c.kernel === index && c.ids.includes(id));
  }

  /** How many block x thread cells of each status each side draws (folded runs count
   *  once per block): what the tests read. */
  drawnCounts() {
    const out = {};
    for (const t of this.el.querySelectorAll("table.pv-cmp-grid")) {
      const side = t.getAttribute("data-side");
      out[side] = out[side] || {};
      for (const c of t.querySelectorAll("td.pv-cmp-cell")) {
        const st = c.getAttribute("data-status");
        out[side][st] = (out[side][st] || 0) + Number(c.getAttribute("data-count"));
      }
    }
    return out;
  }
}

/** Mount the compare view of `model.get("data").compare` on `el`. */
export function renderCompare(model, el) {
  const view = new CompareView(model.get("data").compare);
  replace(el, view.el);
  return () => {};
}
