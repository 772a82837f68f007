// pallas_viz trace widget (anywidget front end; also driven by the HTML export's shim).
// One state object (state.js) and small views around it (views/*.js): the grid and its
// overview, the findings, a cell's events, the source panel, the replay and the threads of a
// block side by side. Everything the views show comes from the payload; the kernel is asked
// only for the details of very large traces (transport.js). Trace text goes through
// textContent.
import { Replay, Steps, WarpCounts, cellCounts, cellTotals, decode, makeFilter, NSPACES } from "./data.js";
import { Answerer } from "./details.js";
import { fmtBytes, fmtCount, h, inert, locLabel, replace } from "./format.js";
import { COMPACT_BELOW, GEOM, GEOM_COMPACT, Layout, foldRuns, rowFlags, visualRows } from "./layout.js";
import { cellName, shortName, threadWord } from "./names.js";
import { Store } from "./state.js";
import { Theme } from "./theme.js";
import { Transport } from "./transport.js";
import { DivergenceView } from "./views/divergence.js";
import { EventsView } from "./views/events.js";
import { FindingsView } from "./views/findings.js";
import { GridView } from "./views/grid.js";
import { MinimapView } from "./views/minimap.js";
import { ReplayView } from "./views/replay.js";
import { SourceView, widthHandle } from "./views/source.js";
import { TimelineView } from "./views/timeline.js";
import { renderCompare } from "./views/compare.js";

const RESOURCE_LABELS = { buffer: "buffer", barrier: "barrier", cluster_barrier: "cluster barrier" };
let instances = 0;

/** Run `f` once the browser has had a chance to paint (or after 100 ms in a hidden tab). */
function afterPaint(f) {
  let done = false;
  const run = () => { if (!done) { done = true; f(); } };
  if (typeof requestAnimationFrame === "function") requestAnimationFrame(() => setTimeout(run, 0));
  setTimeout(run, 100);
}

/** Run `f` when the page is idle (work that can wait: replay tables, tooltip totals). */
function whenIdle(f) {
  if (typeof requestIdleCallback === "function") requestIdleCallback(() => f(), { timeout: 1500 });
  else setTimeout(f, 20);
}

export class TraceView {
  constructor(model, el, { invoke = null } = {}) {
    this.model = model;
    this.el = el;
    this.uid = `pv${++instances}`;
    this.listeners = new Map();
    const state = model.get("data");
    this.data = decode(state);
    this.meta = this.data.meta;
    this.protocol = this.data.protocol;
    this.answerer = this.data.det ? new Answerer(this.data, state.tables, state.snippets) : null;
    this.transport = new Transport({ local: this.answerer, invoke, model, timeoutMs: this.protocol.limits.request_timeout_ms });
    this.init();
  }

  emit(name) {
    for (const f of this.listeners.get(name) || []) f();
  }

  on(name, f) {
    if (!this.listeners.has(name)) this.listeners.set(name, []);
    this.listeners.get(name).push(f);
  }

  init() {
    const meta = this.meta;
    this.store = new Store({
      kernel: meta.kernels.length ? meta.kernels[0].index : 0, finding: -1, sel: -1, selOperands: null, selEvent: -1,
      mode: "totals", step: 0, speed: 1, gridOnly: true, filter: makeFilter(), fold: true, tab: "events",
    });
    this.expanded = new Set();
    this.unfolded = new Set();
    this.lit = new Set();
    this.litSecondary = new Set();
    this.litEvents = new Set();
    this.suspended = true;
    this.queued = [];
    this._replay = null;
    this._steps = null;
    this.countsVersion = 0;
    this.missing = new Map(); // cell -> [{finding, before, what, line}]
    meta.findings.forEach((f, i) => {
      for (const m of f.missing || []) {
        if (!this.missing.has(m.cell)) this.missing.set(m.cell, []);
        // what was requested is read from the detail columns when first shown, not here:
        // the first grid draw must not decode them
        const entry = { finding: i, before: m.before, kind: f.kind, line: f.source ? f.source.line : null };
        Object.defineProperty(entry, "what", { enumerable: true, get: () => this.requestOf(f).what });
        this.missing.get(m.cell).push(entry);
      }
    });
    this.recompute();
    this.build();
    this.store.subscribe((changed) => this.changed(changed));
    const first = meta.findings.findIndex((f) => f.severity === "error");
    if (this.compact) {
      if (meta.findings.length) this.selectFinding(Math.max(0, first));
    } else if (first >= 0) this.selectFinding(first);
    else if (meta.findings.length) this.selectFinding(0);
    else this.selectFirstBusyCell();
    this.store.set({ step: this.steps.count });
    this.suspended = false;
    this.draw();
    afterPaint(() => {
      const q = this.queued;
      this.queued = null;
      for (const f of q) f();
      whenIdle(() => { if (!this.destroyed) void this.totals; });
      whenIdle(() => { if (!this.destroyed && !this.compact) void this.replay; });
      whenIdle(() => { if (!this.destroyed && this.grid) this.grid.renderTable(); });
    });
  }

  /** What a finding's request was: "SMEM (8, 128) float32" and its line. */
  requestOf(f) {
    const line = f.source ? f.source.line : null;
    if (f.events && f.events.length) {
      const d = this.describe(f.events[0]);
      if (d.what) return { what: d.what, line };
    }
    return { what: "the request", line };
  }

  /** An event in words from the payload: op, "SMEM buffer (8, 128) float32", its line. */
  describe(seq) {
    const { ev, det, protocol: p } = this.data;
    const op = p.ops[ev.op[seq]];
    const res = p.resources[ev.resource[seq]];
    const sp = ev.space[seq] >= 0 ? p.spaces[ev.space[seq]] : "";
    if (!det) return { op, what: `${sp} ${RESOURCE_LABELS[res] || res}`.trim(), loc: null };
    const t = this.answerer.tables;
    const shape = det.shape[seq] >= 0 ? t.shapes[det.shape[seq]] : "";
    const dtype = det.dtype[seq] >= 0 ? t.dtypes[det.dtype[seq]] : "";
    const what = res === "buffer" ? [sp, shape, dtype].filter(Boolean).join(" ") : [sp, RESOURCE_LABELS[res] || res].filter(Boolean).join(" ");
    const loc = det.source[seq] >= 0 ? t.sources[det.source[seq]] : null;
    return { op, what, loc };
  }

  missingOf(cell) {
    return this.missing.get(cell) || [];
  }

  // ---- derived data
  recompute() {
    const st = this.store.state;
    const counts = cellCounts(this.data, st.filter);
    this.counts = counts.events;
    this.countsVersion++;
    this._totals = null;
    this.warps = new WarpCounts(this.data, st.filter, counts.warped);
    this.relayout();
  }

  relayout() {
    const st = this.store.state;
    if (!this._rowFlags) this._rowFlags = rowFlags(this.meta, this.data.cells.row, this.data.cells.flags);
    const F = this.protocol.flags;
    const bad = F.error | F.warning | F.failed;
    let folds = st.fold ? foldRuns(this.meta, st.kernel, this._rowFlags, bad, this.protocol.limits.fold_min_run) : [];
    // a run holding a missing cell or the selection never folds
    folds = folds.filter((f) => !this.unfolded.has(f[0]));
    this.folds = folds;
    this.vrows = visualRows(this.meta, st.kernel, this.expanded, this.warps, folds);
    const w = this.root ? this.root.clientWidth : 0;
    this.geom = w > 0 && w < COMPACT_BELOW ? GEOM_COMPACT : GEOM;
    this.layout = new Layout(this.meta, st.kernel, this.vrows, this.geom);
    if (this.grid) this.grid.scroller.dataset.geom = JSON.stringify(this.geom);
  }

  get cellFindings() {
    if (!this._cellFindings) {
      const m = (this._cellFindings = new Map());
      this.meta.findings.forEach((f, i) => {
        for (const c of f.cells) { if (!m.has(c)) m.set(c, []); m.get(c).push(i); }
      });
    }
    return this._cellFindings;
  }

  get totals() {
    if (!this._totals) this._totals = cellTotals(this.data, this.store.state.filter);
    return this._totals;
  }

  get steps() {
    const g = this.store.state.gridOnly;
    if (!this._steps || this._steps.gridOnly !== g) this._steps = new Steps(this.data, g);
    return this._steps;
  }

  /** Events replayed at the current step. */
  get replayEvent() {
    return this.steps.toEvent(this.store.state.step);
  }

  get replay() {
    if (!this._replay) {
      this._replay = new Replay(this.data, this.store.state.filter);
      this._replay.seek(this.replayEvent);
    }
    return this._replay;
  }

  // ---- DOM
  build() {
    const meta = this.meta;
    const st = this.store.state;
    this.compact = meta.num_cells === 0;
    this.theme = null;
    // (as the text summary counts them: a root cause several runs of a kernel had, once a run)
    const copies = (f) => Math.max(1, (f.runs || []).length);
    const errors = meta.findings.reduce((n, f) => n + (f.severity === "error" ? copies(f) : 0), 0);
    const warnings = meta.findings.reduce((n, f) => n + copies(f), 0) - errors;
    this.kernelSelect = meta.kernels.length > 1
      ? h("select", { class: "pv-select", "aria-label": "kernel", title: "which kernel run the grid shows", onchange: (e) => this.setKernel(+e.target.value) },
        meta.kernels.map((k) => h("option", { value: k.index }, `kernel ${k.index}${k.name ? ` · ${shortName(k.name)}` : ""}`)))
      : null;
    const verdict = meta.findings.length
      ? [errors ? h("span", { class: "pv-badge pv-badge-error", title: "root causes of severity error (each may explain several symptoms)" }, `● ${errors} error${errors === 1 ? "" : "s"}`) : null,
        warnings ? h("span", { class: "pv-badge pv-badge-warning", title: "root causes of severity warning" }, `▲ ${warnings} warning${warnings === 1 ? "" : "s"}`) : null]
      : h("span", { class: "pv-badge pv-badge-clean", title: "no findings: every thread made matching allocations and freed them" }, "✓ clean");
    const runs = meta.kernels.length;
    this.kernelInfo = h("div", { class: "pv-kinfo" });
    const header = h("div", { class: "pv-header" },
      h("div", { class: "pv-title", title: "pallas_viz: allocations per block and thread" }, h("span", { class: "pv-logo" }, "▦"), "pallas_viz"),
      verdict,
      h("span", { class: "pv-muted", title: "allocation events recorded · kernel runs" },
        `${fmtCount(meta.num_events)} event${meta.num_events === 1 ? "" : "s"}${runs ? ` · ${runs} kernel run${runs === 1 ? "" : "s"}` : ""}`),
      h("div", { class: "pv-spacer" }),
      this.kernelSelect);

    const root = (this.root = h("div", { class: "pv-root", id: this.uid }));
    this.theme = new Theme(root);
    this.findings = new FindingsView(this);
    this.source = new SourceView(this);
    this.events = new EventsView(this);
    const findingsPane = h("div", { class: "pv-findpane pv-area-find" },
      h("div", { class: "pv-pane-title", title: "root causes: what to fix, with the symptoms each explains" }, "Findings"),
      this.failureBanner(), this.findings.el);
    const sourcePane = h("div", { class: "pv-sourcepane pv-area-source" }, this.source.el);

    if (this.compact) {
      root.classList.add("pv-compact");
      const op = meta.kernels[0] && meta.kernels[0].operands;
      this.operands = h("div", { class: "pv-operands" });
      replace(root, header, h("div", { class: "pv-body" }, findingsPane, sourcePane, this.requestPane(),
        op && op.events ? h("div", { class: "pv-eventspane pv-area-lower" }, this.events.el) : null));
      this.renderOperands();
      if (op && op.events) this.afterFirstPaint(() => this.selectOperands(meta.kernels[0].index));
      replace(this.el, root);
      this.source.empty("Select a finding to see its source line.");
      this.findings.render();
      this.observe();
      return;
    }

    this.grid = new GridView(this);
    this.minimap = new MinimapView(this);
    this.divergence = new DivergenceView(this);
    this.replayView = new ReplayView(this);
    this.timeline = this.meta.timeline ? new TimelineView(this) : null;

    const chip = (label, on, toggle, tip, cls = "") => {
      const b = h("button", { class: `pv-chip ${cls}`, "aria-pressed": String(on), title: tip, onclick: () => {
        const now = b.getAttribute("aria-pressed") !== "true";
        b.setAttribute("aria-pressed", String(now));
        toggle(now);
      } }, label);
      return b;
    };
    const p = this.protocol;
    const setFilter = (f) => this.store.set({ filter: f });
    const spaces = p.spaces.map((s, i) => chip(s, true, (v) => {
      const f = this.store.state.filter; setFilter(makeFilter(f.resources.slice(), Object.assign(f.spaces.slice(), { [i]: v })));
    }, `show ${s} events (memory space filter)`, `pv-space-${i}`));
    const res = p.resources.map((r, i) => chip(RESOURCE_LABELS[r] || r, true, (v) => {
      const f = this.store.state.filter; setFilter(makeFilter(Object.assign(f.resources.slice(), { [i]: v }), f.spaces.slice()));
    }, `show ${RESOURCE_LABELS[r] || r} events (resource filter)`));
    this.foldChip = chip("fold alike blocks", st.fold, (v) => this.store.set({ fold: v }),
      "fold runs of blocks whose threads made identical requests into one row");
    const legend = h("div", { class: "pv-legend", role: "list", "aria-label": "legend" },
      legendItem("clean", "pv-l-clean", "", "every request matched and freed"),
      legendItem("joined collective", "pv-l-coll", "◆", "this thread joined a collective allocation"),
      legendItem("warning", "pv-l-warn", "▲", "a warning finding covers this cell"),
      legendItem("error", "pv-l-error", "●", "an error finding covers this cell"),
      legendItem("never requested", "pv-l-missing", "○", "this thread never made the request its finding is about (hatched, hollow)"),
      legendItem("failed", "pv-l-failed", "✕", "the run failed in this cell"));
    const toolbar = h("div", { class: "pv-toolbar" },
      h("span", { class: "pv-label", title: "filter by memory space" }, "memory"), spaces,
      h("span", { class: "pv-label", title: "filter by resource" }, "resource"), res, this.foldChip,
      h("div", { class: "pv-spacer" }), legend);

    this.operands = h("div", { class: "pv-operands" });
    this.prevBtn = h("button", { class: "pv-btn", title: "previous error cell (N)", "aria-label": "previous error cell", onclick: () => this.jumpError(-1) }, "◀ N");
    this.nextBtn = h("button", { class: "pv-btn", title: "next error cell (n)", "aria-label": "next error cell", onclick: () => this.jumpError(1) }, "n ▶");
    this.navLabel = h("span", { class: "pv-muted pv-navlabel" });
    const nav = h("div", { class: "pv-nav" }, h("span", { class: "pv-label", title: "cells marked error or never requested" }, "error cells"), this.prevBtn, this.navLabel, this.nextBtn);
    this.gridArea = h("div", { class: "pv-gridarea" }, this.grid.el, this.minimap.el);
    const gridPane = h("div", { class: "pv-gridpane pv-area-grid" },
      h("div", { class: "pv-pane-title" }, h("span", { title: "one row per block, one column per thread" }, "Blocks × threads"), this.kernelInfo, h("div", { class: "pv-spacer" }), nav),
      this.operands, this.gridArea);

    this.tabEvents = h("button", { class: "pv-tab", role: "tab", title: "the selected cell's events", onclick: () => this.store.set({ tab: "events" }) }, "Events");
    this.tabDiv = h("button", { class: "pv-tab", role: "tab", title: "the selected block's threads side by side, aligned", onclick: () => this.store.set({ tab: "divergence" }) }, "Threads side by side");
    this.tabTimeline = this.timeline ? h("button", { class: "pv-tab pv-tab-timeline", role: "tab", title: "the selected block's allocation lifetimes per thread, barrier operations and live memory against the device's limit", onclick: () => this.store.set({ tab: "timeline" }) }, "Timeline") : null;
    this.lowerBody = h("div", { class: "pv-lowerbody" });
    const lower = h("div", { class: "pv-eventspane pv-area-lower" }, h("div", { class: "pv-tabs", role: "tablist" }, this.tabEvents, this.tabDiv, this.tabTimeline), this.lowerBody);
    const drag = widthHandle(root, sourcePane);
    sourcePane.prepend(drag);

    replace(root, header, toolbar, h("div", { class: "pv-body" }, gridPane, findingsPane, this.replayView.el, lower, sourcePane));
    root.addEventListener("keydown", (e) => this.rootKey(e));
    replace(this.el, root);
    this.events.empty("Select a cell to list its events.");
    this.source.empty("Select an event or a finding to see its source line.");
    this.divergence.render(-1);
    this.renderTabs();
    this.findings.render();
    this.renderKernelInfo();
    this.replayView.update();
    this.updateNav();
    this.observe();
  }

  observe() {
    // Draw again when the grid's box changes size (also when it is first laid out).
    this.resizeObs = typeof ResizeObserver !== "undefined" ? new ResizeObserver(() => {
      this.root.classList.toggle("pv-narrow", this.root.clientWidth > 0 && this.root.clientWidth < 760);
      if (!this.grid) return;
      const w = this.root.clientWidth;
      if (w > 0 && (w < COMPACT_BELOW) !== (this.geom === GEOM_COMPACT)) {
        const sel = this.store.state.sel;
        this.relayout();
        if (sel >= 0) this.grid.showCell(sel, true);
        this.grid.drawnSize = null;
      }
      const sc = this.grid.scroller;
      if (`${sc.clientWidth}x${sc.clientHeight}` !== this.grid.drawnSize) { this.grid.sized(); this.draw(); }
    }) : null;
    if (this.resizeObs) {
      this.resizeObs.observe(this.root);
      if (this.grid) this.resizeObs.observe(this.grid.scroller);
    }
    this.themeObs = typeof MutationObserver !== "undefined" && typeof document !== "undefined"
      ? new MutationObserver(() => this.themeChanged()) : null;
    if (this.themeObs) this.themeObs.observe(document.body, { attributes: true, attributeFilter: ["data-jp-theme-name", "data-jp-theme-light"] });
    this.schemeQuery = typeof matchMedia === "function" ? matchMedia("(prefers-color-scheme: dark)") : null;
    this.onScheme = () => this.themeChanged();
    if (this.schemeQuery && this.schemeQuery.addEventListener) this.schemeQuery.addEventListener("change", this.onScheme);
  }

  themeChanged() {
    this.draw();
    let frames = 0;
    const key = this.theme.key;
    const tick = () => {
      if (this.destroyed || !this.root.isConnected) return;
      if (this.theme.currentKey() !== key) this.draw();
      if (++frames < 120) requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  }

  failureBanner() {
    const f = this.meta.failure;
    if (!f) return null;
    return h("div", { class: "pv-failure", role: "alert" }, h("b", {}, `${f.phase === "trace" ? "Tracing" : "The run"} failed: `),
      `${f.type}: ${f.message}`);
  }

  /** Compact failure layout: the request the interpreter was serving when it failed. */
  requestPane() {
    const f = this.meta.failure;
    const rows = [];
    if (f && f.request) for (const [k, v] of Object.entries(f.request)) rows.push(h("tr", {}, h("th", { scope: "row" }, k), h("td", { class: "pv-code" }, typeof v === "string" ? v : JSON.stringify(v))));
    const body = rows.length ? h("table", { class: "pv-table pv-request" }, h("tbody", {}, rows))
      : h("div", { class: "pv-empty" }, f && f.phase === "trace"
        ? `${f.in_body ? "The kernel's code raised an error while JAX traced it" : "JAX rejected the kernel while tracing it"}: no block ran, so there is no grid to show. The finding and its line say what to change.`
        : "No block-level request was recorded before the failure.");
    return h("div", { class: "pv-requestpane pv-area-lower" }, h("div", { class: "pv-pane-title", title: "what the interpreter was serving when it failed" }, f && f.request ? "The failing request" : "No grid"), body);
  }

  renderKernelInfo() {
    const st = this.store.state;
    const k = this.meta.kernels.find((x) => x.index === st.kernel);
    const s = this.meta.stats.find((x) => x.kernel === st.kernel);
    if (!k) { replace(this.kernelInfo); this.renderOperands(); return; }
    const parts = [];
    if (k.name) parts.push(shortName(k.name));
    if (s) {
      parts.push(`${s.blocks} block${s.blocks === 1 ? "" : "s"}${s.cut_short ? " ran" : ""} × ${k.threads} ${threadWord(this.meta, k.index)}`);
      for (const [sp, b] of Object.entries(s.bytes)) if (sp !== "GMEM") parts.push(`${sp} ${fmtBytes(b)}`);
      if (s.barriers) parts.push(`${s.barriers} barrier${s.barriers === 1 ? "" : "s"}`);
    }
    replace(this.kernelInfo, parts.join(" · "));
    this.kernelInfo.title = inert(k.launch ? `launched at ${locLabel(k.launch)}` : "this kernel run")
      + (s && s.cut_short ? "; the run stopped in this kernel: only the blocks that ran are counted" : "");
    this.renderOperands();
  }

  renderOperands() {
    const k = this.meta.kernels.find((x) => x.index === this.store.state.kernel) || this.meta.kernels[0];
    const op = k && k.operands;
    if (!op || !op.events) { replace(this.operands); return; }
    const sel = this.store.state.selOperands === k.index;
    replace(this.operands, h("button", {
      class: `pv-operand-row${sel ? " pv-selected" : ""}`, "aria-pressed": String(sel),
      title: "kernel-level requests (operands the interpreter allocates for the whole device; no block): click to list them",
      onclick: () => this.selectOperands(k.index),
    }, h("span", { class: "pv-label" }, "kernel operands"), ` GMEM · ${op.buffers} buffer${op.buffers === 1 ? "" : "s"} · ${fmtBytes(op.bytes)} · ${op.events} event${op.events === 1 ? "" : "s"}`));
  }

  renderTabs() {
    if (!this.tabEvents) return;
    const tab = this.store.state.tab;
    this.tabEvents.setAttribute("aria-selected", String(tab === "events"));
    this.tabDiv.setAttribute("aria-selected", String(tab === "divergence"));
    if (this.tabTimeline) this.tabTimeline.setAttribute("aria-selected", String(tab === "timeline"));
    replace(this.lowerBody, tab === "timeline" && this.timeline ? this.timeline.el : tab === "divergence" ? this.divergence.el : this.events.el);
  }

  // ---- state changes
  changed(changed) {
    const st = this.store.state;
    if (changed.has("filter")) {
      this.recompute();
      if (this._replay) this._replay.setFilter(st.filter);
      this.events.render();
    }
    if (changed.has("fold") || changed.has("kernel")) {
      this.relayout();
      if (this.grid) this.grid.renderTable();
    }
    if (changed.has("tab")) this.renderTabs();
    if (changed.has("gridOnly")) this._steps = null;
    if (changed.has("step") || changed.has("mode") || changed.has("gridOnly")) {
      if (this._replay || st.mode === "live") this.replay.seek(this.replayEvent);
      if (this.replayView) this.replayView.update();
      this.events.markCurrent(st.mode === "live" ? this.replayEvent - 1 : -1);
    }
    if (changed.has("speed") && this.replayView) this.replayView.update();
    if (this.timeline) this.timeline.changed(changed);
    this.draw();
  }

  draw() {
    if (this.suspended || this.destroyed || this.compact) return;
    this.grid.draw();
    const want = this.minimap.wanted;
    this.gridArea.classList.toggle("pv-with-minimap", want);
    if (want) this.minimap.draw();
  }

  afterFirstPaint(f) {
    if (this.queued) this.queued.push(f); else f();
  }

  // ---- selection
  selectFirstBusyCell() {
    const L = this.layout;
    for (let v = 0; v < L.vrows.length; v++) {
      for (let t = 0; t < L.threads; t++) {
        const c = L.cellAt(v, t);
        if (this.counts[c]) { this.selectCell(c, { center: true }); return; }
      }
    }
  }

  /** Open the fold holding block row `r`, if any. */
  unfoldRow(r) {
    const f = this.folds.find((x) => r >= x[0] && r <= x[1]);
    if (!f) return;
    this.unfolded.add(f[0]);
    this.relayout();
    this.grid.renderTable();
  }

  toggleFold(first) {
    if (this.unfolded.has(first)) this.unfolded.delete(first); else this.unfolded.add(first);
    this.relayout();
    this.grid.renderTable();
    this.draw();
  }

  toggleExpand(row) {
    if (this.expanded.has(row)) this.expanded.delete(row); else this.expanded.add(row);
    this.relayout();
    this.draw();
  }

  setKernel(k) {
    if (k === this.store.state.kernel) return;
    if (this.kernelSelect) this.kernelSelect.value = String(k);
    this.store.set({ kernel: k });
    if (this.grid) { this.grid.cursor = { v: 0, t: 0 }; this.grid.scroller.scrollTop = 0; }
    this.renderKernelInfo();
    // (a root cause several runs had names its cells in the run shown)
    if (this.findings && this.meta.findings.some((f) => (f.runs || []).length > 1)) this.findings.render();
  }

  jumpToRow(r) {
    const row = this.meta.rows[r];
    if (!row) return;
    this.setKernel(row.kernel);
    this.unfoldRow(r);
    const v = this.layout.vrowOfRow(r);
    if (v >= 0) { this.grid.cursor = { v, t: 0 }; this.grid.scrollTo(v, 0, true); }
    this.draw();
  }

  selectCell(c, { keepFinding = false, scroll = true, center = false } = {}) {
    if (c < 0 || this.compact) return;
    const st = this.store.state;
    const row = this.data.cells.row[c];
    const k = this.meta.rows[row].kernel;
    if (k !== st.kernel) this.setKernel(k);
    this.unfoldRow(row);
    const patch = { sel: c, selOperands: null };
    if (!keepFinding && st.finding >= 0 && !this.lit.has(c) && !this.litSecondary.has(c)) this.clearFindingState(patch);
    this.store.set(patch);
    if (scroll || center) this.grid.showCell(c, center);
    this.draw();
    this.afterFirstPaint(() => {
      if (this.store.state.sel !== c) return;
      this.events.load({ cell: c });
      this.divergence.render(row);
    });
    this.renderOperands();
  }

  selectOperands(kernel) {
    this.store.set({ sel: -1, selOperands: kernel });
    this.renderOperands();
    this.store.set({ tab: "events" });
    this.events.load({ operands: true, kernel });
  }

  selectEvent(seq, loc) {
    this.store.set({ selEvent: seq });
    this.events.render();
    this.showSource(loc, `event ${seq}`);
  }

  showSource(loc, why, branch) {
    this.afterFirstPaint(() => this.source.show(loc, why, branch));
  }

  clearFindingState(patch) {
    patch.finding = -1;
    this.lit = new Set();
    this.litSecondary = new Set();
    this.litEvents = new Set();
  }

  clearFinding() {
    const patch = {};
    this.clearFindingState(patch);
    this.store.set(patch);
    this.findings.render();
    this.updateNav();
    this.draw();
  }

  selectFinding(i) {
    const f = this.meta.findings[i];
    if (!f) return;
    this.lit = new Set(f.cells);
    this.litSecondary = new Set(f.consequence_cells || []);
    this.litEvents = new Set(f.events);
    this.store.set({ finding: i });
    this.findings.render();
    // The source line first (what the finding is about), then a cell: the thread that never
    // made the request when there is one (its events show where it belongs), else the cell
    // of the finding's first event.
    this.showSource(f.source, f.kind.replaceAll("_", " "), f.branch);
    // (a root cause several runs of a kernel had: its cells in the run shown, if one of them)
    const runs = f.runs || [];
    const k = this.store.state.kernel;
    const inShown = runs.length > 1 && runs.includes(k)
      ? (c) => this.meta.rows[this.data.cells.row[c]].kernel === k : () => true;
    const own = f.cells.filter(inShown);
    let cell = own.length ? own[0] : -1;
    const evs = runs.length > 1 ? f.events.filter((e) => this.data.ev.cell[e] >= 0 && inShown(this.data.ev.cell[e])) : f.events;
    if (evs.length) {
      const ec = this.data.ev.cell[evs[0]];
      if (ec >= 0 && this.lit.has(ec)) cell = ec;
    }
    const miss = (f.missing || []).find((m) => this.lit.has(m.cell) && inShown(m.cell));
    if (miss) cell = miss.cell;
    if (cell >= 0 && !this.compact) {
      this.selectCell(cell, { keepFinding: true, center: true });
    } else if (f.kernel != null && !this.compact) {
      this.setKernel(f.kernel);
      this.draw();
    }
    this.updateNav();
  }

  /** Cells to visit with n / N: error or failed cells and cells that never made a request. */
  get errorCells() {
    if (!this._errorCells) {
      const F = this.protocol.flags;
      const flags = this.data.cells.flags;
      const out = [];
      for (let c = 0; c < flags.length; c++) if ((flags[c] & (F.error | F.failed)) || this.missing.has(c)) out.push(c);
      this._errorCells = out;
    }
    return this._errorCells;
  }

  jumpError(dir) {
    const cells = this.errorCells;
    if (!cells.length) return;
    const sel = this.store.state.sel;
    let i = cells.indexOf(sel);
    if (i < 0) {
      i = dir > 0 ? cells.findIndex((c) => c > sel) : cells.length - 1 - [...cells].reverse().findIndex((c) => c < sel);
      if (i < 0 || i >= cells.length) i = dir > 0 ? 0 : cells.length - 1;
    } else i = (i + dir + cells.length) % cells.length;
    this.selectCell(cells[i], { keepFinding: this.lit.has(cells[i]), center: true });
    this.updateNav();
  }

  updateNav() {
    if (!this.navLabel) return;
    const cells = this.errorCells;
    const i = cells.indexOf(this.store.state.sel);
    this.navLabel.textContent = cells.length ? `${i >= 0 ? i + 1 : "–"} / ${cells.length}` : "none";
    this.prevBtn.disabled = this.nextBtn.disabled = !cells.length;
  }

  rootKey(e) {
    const tag = e.target.tagName;
    if (tag === "INPUT" || tag === "SELECT" || tag === "TEXTAREA" || e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.key === "[" || e.key === "]") {
      e.preventDefault();
      this.seek(this.store.state.step + (e.key === "]" ? 1 : -1));
    } else if (e.key === "n" || e.key === "N") {
      e.preventDefault();
      this.jumpError(e.key === "n" ? 1 : -1);
    } else if (e.key === "Escape") {
      if (this.store.state.finding >= 0) { e.preventDefault(); this.clearFinding(); } else if (this.store.state.mode === "live") { e.preventDefault(); this.setMode("totals"); }
    }
  }

  // ---- replay
  setMode(mode) {
    this.store.set({ mode });
  }

  setGridOnly(on) {
    const ev = this.replayEvent;
    this._steps = new Steps(this.data, on);
    this.store.set({ gridOnly: on, step: this._steps.fromEvent(ev) });
  }

  seek(step, { follow = true } = {}) {
    const k = Math.max(0, Math.min(this.steps.count, step | 0));
    this.store.set({ step: k, mode: "live" });
    if (follow) {
      const e = this.replayEvent - 1;
      const c = e >= 0 ? this.data.ev.cell[e] : -1;
      if (c >= 0) { this.grid.showCell(c, false); this.draw(); }
    }
  }

  stepText() {
    const k = this.store.state.step;
    const ev = this.replayEvent;
    if (k === 0 || ev === 0) return "before the first event";
    const i = ev - 1;
    const { ev: E, protocol: p } = this.data;
    const c = E.cell[i];
    const sp = E.space[i] >= 0 ? `${p.spaces[E.space[i]]} ` : "";
    const res = p.resources[E.resource[i]];
    const where = c >= 0 ? cellName(this.data, c) : "kernel level (operands)";
    return `#${i} ${p.ops[E.op[i]]} ${sp}${RESOURCE_LABELS[res] || res} — ${where}`;
  }

  tooltipLines(c, vr) {
    const r = this.meta.rows[vr.row];
    const t = this.data.cells.thread[c];
    const tw = threadWord(this.meta, r.kernel);
    const lines = [`block ${r.label} · ${tw} ${t}${vr.warp >= 0 ? ` · warp ${vr.warp}` : ""}${r.device ? ` · device ${r.device}` : ""}`];
    if (this.store.state.mode === "live") {
      const rp = this.replay;
      lines.push(`at step ${this.store.state.step}: ${rp.live[c]} live buffer(s), ${rp.liveBarriers[c]} barrier(s)`);
      const b = [];
      for (let s = 0; s < NSPACES; s++) if (rp.bytes[c * NSPACES + s]) b.push(`${this.protocol.spaces[s]} ${fmtBytes(rp.bytes[c * NSPACES + s])}`);
      if (b.length) lines.push(b.join(" · "));
      if (rp.failed[c]) lines.push("failed here");
    } else {
      const T = this.totals;
      lines.push(`${T.events[c]} event(s) · ${T.allocs[c]} allocation(s) · ${T.barriers[c]} barrier(s)`);
      const b = [];
      for (let s = 0; s < NSPACES; s++) if (T.bytes[c * NSPACES + s]) b.push(`${this.protocol.spaces[s]} ${fmtBytes(T.bytes[c * NSPACES + s])}`);
      lines.push(b.length ? b.join(" · ") : "no buffer bytes");
    }
    const F = this.protocol.flags;
    const fl = this.data.cells.flags[c];
    for (const m of this.missingOf(c)) lines.push(`never requested: ${m.what}${m.line != null ? ` at line ${m.line}` : ""}`);
    if (fl & F.collective) lines.push("joined a collective allocation");
    if (fl & F.failed) lines.push("the run failed in this cell");
    for (const i of this.cellFindings.get(c) || []) {
      const f = this.meta.findings[i];
      lines.push(`${f.severity}: ${f.kind}`);
    }
    return lines;
  }

  destroy() {
    this.destroyed = true;
    if (this.replayView) this.replayView.stop();
    if (this.timeline) this.timeline.destroy();
    this.transport.dispose();
    if (this.resizeObs) this.resizeObs.disconnect();
    if (this.themeObs) this.themeObs.disconnect();
    if (this.schemeQuery && this.schemeQuery.removeEventListener) this.schemeQuery.removeEventListener("change", this.onScheme);
  }
}

function legendItem(label, cls, mark, tip) {
  return h("span", { class: "pv-legend-item", role: "listitem", title: tip }, h("span", { class: `pv-swatch ${cls}`, "aria-hidden": "true" }, mark), label);
}

// The static snapshot shown just before the widget (pallas_viz.render.display): a CSS
// rule hides it in JupyterLab and Notebook 7 while the widget is drawn; other front ends
// (VS Code, ...) have no such output area, so the widget hides it itself.
function hideSnapshot(model, el) {
  const sid = model.get("snapshot_id");
  if (!sid || (el.closest && el.closest(".jp-OutputArea-child"))) return;
  for (const n of document.querySelectorAll(".pv-snapshot")) {
    if (n.dataset && n.dataset.pv === sid) n.style.display = "none";
  }
}

// anywidget's module form: a default export with `render` (a named `render` export is the
// deprecated form anywidget warns about). `experimental.invoke` is anywidget's command call.
function render({ model, el, experimental }) {
  const state = model.get("data");
  if (state && state.compare) {
    const dispose = renderCompare(model, el); // a trace diff (CompareWidget)
    try {
      hideSnapshot(model, el);
    } catch (e) {
      // the snapshot only stays visible
    }
    return dispose;
  }
  const invoke = experimental && typeof experimental.invoke === "function" ? experimental.invoke : null;
  let view;
  try {
    view = new TraceView(model, el, { invoke });
  } catch (e) {
    el.textContent = `pallas_viz: could not show this trace: ${e && e.message ? e.message : e}`;
    return () => {};
  }
  try {
    hideSnapshot(model, el);
  } catch (e) {
    // the snapshot only stays visible
  }
  return () => view.destroy();
}

export default { render };
