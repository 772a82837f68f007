// pallas_viz trace widget (anywidget front end; also driven by the HTML export's shim).
// Grid of blocks x threads on a virtualised canvas, findings, per-cell events fetched on
// demand, source panel and replay over recording order. Trace text goes through textContent.
import { NSPACES, Replay, WarpCounts, cellCounts, cellTotals, decode, makeFilter } from "./data.js";
import { fmtBytes, fmtCount, h, locLabel, replace } from "./format.js";
import { GEOM, Layout, moveCursor, visualRows } from "./layout.js";

const RESOURCE_LABELS = ["buffer", "barrier", "cluster barrier"];
const ROW_LIMIT = 500;

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

class TraceView {
  constructor(model, el) {
    this.model = model;
    this.el = el;
    this.pending = new Map();
    this.nextId = 1;
    this.onMsg = (msg) => this.handleMsg(msg);
    model.on("msg:custom", this.onMsg);
    this.load(model.get("data"));
  }

  // ---- data
  load(state) {
    this.data = decode(state);
    const meta = this.data.meta;
    this.meta = meta;
    this.filter = makeFilter();
    this.kernel = meta.kernels.length ? meta.kernels[0].index : 0;
    this.expanded = new Set();
    this.mode = "totals";
    this.sel = -1;
    this.cursor = { v: 0, t: 0 };
    this.finding = -1;
    this.lit = new Set();
    this.litSecondary = new Set();
    this.litEvents = new Set();
    this.eventsReply = null;
    this.selEvent = -1;
    this._cellFindings = null;
    // Until the first grid draw: no intermediate draws, requests wait (see `request`).
    this.suspended = true;
    this.queued = [];
    this._replay = null;
    this.recompute();
    this.build();
    const first = meta.findings.findIndex((f) => f.severity === "error");
    if (first >= 0) this.selectFinding(first);
    else if (meta.findings.length) this.selectFinding(0);
    else this.selectFirstBusyCell();
    this.suspended = false;
    this.draw();
    afterPaint(() => {
      const q = this.queued;
      this.queued = null;
      for (const f of q) f();
      // What the first draw did not need: tooltip totals (bytes), the replay's tables.
      whenIdle(() => { if (!this.destroyed) void this.totals; });
      whenIdle(() => { if (!this.destroyed) void this.replay; });
    });
  }

  /** Per-cell event counts (what the grid shows) and the warps of each block row. */
  recompute() {
    const counts = cellCounts(this.data, this.filter);
    this.counts = counts.events;
    this._totals = null;
    this.warps = new WarpCounts(this.data, this.filter, counts.warped);
    this.vrows = visualRows(this.meta, this.kernel, this.expanded, this.warps);
    this.layout = new Layout(this.meta, this.kernel, this.vrows);
  }

  /** Cell -> indices of the findings that mark it (tooltips), built on first use. */
  get cellFindings() {
    if (!this._cellFindings) {
      const m = (this._cellFindings = new Map());
      this.meta.findings.forEach((f, i) => {
        for (const c of f.cells) {
          if (!m.has(c)) m.set(c, []);
          m.get(c).push(i);
        }
      });
    }
    return this._cellFindings;
  }

  /** Allocations, barriers and bytes per cell (tooltips), computed on first use. */
  get totals() {
    if (!this._totals) this._totals = cellTotals(this.data, this.filter);
    return this._totals;
  }

  /** The replay (liveness per step), built on first use or when the page is idle. */
  get replay() {
    if (!this._replay) {
      this._replay = new Replay(this.data, this.filter);
      this._replay.seek(this.data.n);
    }
    return this._replay;
  }

  /** The replay step (the last one until the replay is used). */
  get step() {
    return this._replay ? this._replay.step : this.data.n;
  }

  request(msg) {
    const id = this.nextId++;
    return new Promise((resolve) => {
      this.pending.set(id, resolve);
      const send = () => this.model.send({ ...msg, id });
      if (this.queued) this.queued.push(send); else send();
    });
  }

  handleMsg(msg) {
    if (!msg || msg.id == null || !this.pending.has(msg.id)) return;
    const resolve = this.pending.get(msg.id);
    this.pending.delete(msg.id);
    resolve(msg);
  }

  // ---- DOM
  build() {
    const meta = this.meta;
    const errors = meta.findings.filter((f) => f.severity === "error").length;
    const warnings = meta.findings.length - errors;
    this.kernelSelect = meta.kernels.length > 1
      ? h("select", { class: "pv-select", "aria-label": "kernel", onchange: (e) => this.setKernel(+e.target.value) },
        meta.kernels.map((k) => h("option", { value: k.index }, `kernel ${k.index}${k.name ? ` · ${shortName(k.name)}` : ""}`)))
      : null;
    const verdict = meta.findings.length
      ? [errors ? h("span", { class: "pv-badge pv-badge-error" }, `${errors} error${errors === 1 ? "" : "s"}`) : null,
        warnings ? h("span", { class: "pv-badge pv-badge-warning" }, `${warnings} warning${warnings === 1 ? "" : "s"}`) : null]
      : h("span", { class: "pv-badge pv-badge-clean" }, "clean");
    this.kernelInfo = h("div", { class: "pv-kinfo" });
    const header = h("div", { class: "pv-header" },
      h("div", { class: "pv-title" }, h("span", { class: "pv-logo" }, "▦"), "pallas_viz"),
      verdict,
      h("span", { class: "pv-muted" }, `${fmtCount(meta.num_events)} events · ${meta.kernels.length} kernel run${meta.kernels.length === 1 ? "" : "s"}`),
      h("div", { class: "pv-spacer" }),
      this.kernelSelect);

    // filters + legend
    const chip = (label, on, toggle, cls = "") => {
      const b = h("button", { class: `pv-chip ${cls}`, "aria-pressed": String(on), onclick: () => {
        const now = b.getAttribute("aria-pressed") !== "true";
        b.setAttribute("aria-pressed", String(now));
        toggle(now);
        this.filterChanged();
      } }, label);
      return b;
    };
    const spaces = meta.spaces.map((s, i) => chip(s, true, (v) => { this.filter.spaces[i] = v; }, `pv-space-${i}`));
    const res = RESOURCE_LABELS.map((r, i) => chip(r, true, (v) => { this.filter.resources[i] = v; }));
    const legend = h("div", { class: "pv-legend" },
      legendItem("clean", "pv-l-clean", ""), legendItem("joined collective", "pv-l-coll", "◆"),
      legendItem("warning", "pv-l-warn", "▲"), legendItem("error", "pv-l-error", "●"),
      legendItem("failed", "pv-l-failed", "✕"));
    const toolbar = h("div", { class: "pv-toolbar" },
      h("span", { class: "pv-label" }, "memory"), spaces,
      h("span", { class: "pv-label" }, "resource"), res, h("div", { class: "pv-spacer" }), legend);

    // grid
    this.canvas = h("canvas", { class: "pv-canvas" });
    this.sizer = h("div", { class: "pv-sizer" }, this.canvas);
    this.tooltip = h("div", { class: "pv-tooltip", role: "tooltip" });
    this.scroller = h("div", { class: "pv-scroller", tabindex: "0", role: "grid", "aria-label": "blocks by threads" }, this.sizer);
    this.scroller.addEventListener("scroll", () => this.draw());
    this.scroller.addEventListener("mousemove", (e) => this.hover(e));
    this.scroller.addEventListener("mouseleave", () => { this.tooltip.style.display = "none"; });
    this.scroller.addEventListener("click", (e) => this.click(e));
    this.scroller.addEventListener("keydown", (e) => this.key(e));
    this.operands = h("div", { class: "pv-operands" });
    const gridPane = h("div", { class: "pv-gridpane" }, h("div", { class: "pv-pane-title" }, "Blocks × threads", this.kernelInfo), this.operands, h("div", { class: "pv-gridwrap" }, this.scroller, this.tooltip));

    this.findingsEl = h("div", { class: "pv-findings", role: "listbox", "aria-label": "findings" });
    const findingsPane = h("div", { class: "pv-findpane" },
      h("div", { class: "pv-pane-title" }, "Findings"), this.failureBanner(), this.findingsEl);

    // replay
    this.slider = h("input", { type: "range", min: 0, max: this.data.n, value: this.data.n, class: "pv-slider", "aria-label": "replay step" });
    this.slider.addEventListener("input", () => this.seek(+this.slider.value));
    this.playBtn = h("button", { class: "pv-btn", title: "play / pause", onclick: () => this.togglePlay() }, "▶ play");
    this.stepLabel = h("span", { class: "pv-steplabel" });
    this.stepEvent = h("span", { class: "pv-stepevent" });
    this.modeBtn = h("button", { class: "pv-btn pv-mode", title: "show totals or what is live at the replay step", onclick: () => this.setMode(this.mode === "live" ? "totals" : "live") });
    const replayBar = h("div", { class: "pv-replay" },
      h("span", { class: "pv-label" }, "replay"),
      h("button", { class: "pv-btn", title: "first step", onclick: () => this.seek(0) }, "|◀"),
      h("button", { class: "pv-btn", title: "previous event ([)", onclick: () => this.seek(this.step - 1) }, "◀ 1"),
      this.playBtn,
      h("button", { class: "pv-btn", title: "next event (])", onclick: () => this.seek(this.step + 1) }, "1 ▶"),
      h("button", { class: "pv-btn", title: "last step", onclick: () => this.seek(this.data.n) }, "▶|"),
      this.slider, this.stepLabel, this.modeBtn, this.stepEvent);

    this.eventsEl = h("div", { class: "pv-events" });
    this.sourceEl = h("div", { class: "pv-source" });
    const bottom = h("div", { class: "pv-bottom" },
      h("div", { class: "pv-eventspane" }, this.eventsEl),
      h("div", { class: "pv-sourcepane" }, this.sourceEl));

    this.root = h("div", { class: "pv-root" }, header, toolbar,
      h("div", { class: "pv-main" }, gridPane, findingsPane), replayBar, bottom);
    this.root.addEventListener("keydown", (e) => {
      if ((e.key === "[" || e.key === "]") && e.target.tagName !== "INPUT" && e.target.tagName !== "SELECT") {
        e.preventDefault();
        this.seek(this.step + (e.key === "]" ? 1 : -1));
      }
    });
    replace(this.el, this.root);
    replace(this.eventsEl, h("div", { class: "pv-empty" }, "Select a cell to list its events."));
    replace(this.sourceEl, h("div", { class: "pv-empty" }, "Select an event or a finding to see its source line."));
    this.renderFindings();
    this.renderKernelInfo();
    this.updateReplayBar();
    // Draw again when the grid's box changes size (also when it is first laid out).
    this.resizeObs = typeof ResizeObserver !== "undefined" ? new ResizeObserver(() => {
      if (`${this.scroller.clientWidth}x${this.scroller.clientHeight}` !== this.drawnSize) this.draw();
    }) : null;
    if (this.resizeObs) this.resizeObs.observe(this.scroller);
    // JupyterLab flags a theme change on <body>; the exported page follows the system's
    // colour scheme: repaint the canvas with the new colours.
    this.themeObs = typeof MutationObserver !== "undefined" && typeof document !== "undefined"
      ? new MutationObserver(() => this.themeChanged()) : null;
    if (this.themeObs) this.themeObs.observe(document.body, { attributes: true, attributeFilter: ["data-jp-theme-name", "data-jp-theme-light"] });
    this.schemeQuery = typeof matchMedia === "function" ? matchMedia("(prefers-color-scheme: dark)") : null;
    this.onScheme = () => this.themeChanged();
    if (this.schemeQuery && this.schemeQuery.addEventListener) this.schemeQuery.addEventListener("change", this.onScheme);
  }

  /** Redraw now, and again whenever the theme's colours change during the next ~2 s (a
   * theme's stylesheet may apply some frames after JupyterLab flags the change). */
  themeChanged() {
    this.draw();
    let frames = 0;
    const tick = () => {
      if (this.destroyed || !this.root.isConnected) return;
      if (this.themeKey() !== this._colorsKey) this.draw();
      if (++frames < 120) requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  }

  failureBanner() {
    const f = this.meta.failure;
    if (!f) return null;
    return h("div", { class: "pv-failure" }, h("b", {}, `${f.phase === "trace" ? "Tracing" : "The run"} failed: `),
      `${f.type}: ${f.message}`);
  }

  renderKernelInfo() {
    const k = this.meta.kernels.find((x) => x.index === this.kernel);
    const s = this.meta.stats.find((x) => x.kernel === this.kernel);
    if (!k) { replace(this.kernelInfo); replace(this.operands); return; }
    const parts = [];
    if (k.name) parts.push(shortName(k.name));
    if (s) {
      parts.push(`${s.blocks} block${s.blocks === 1 ? "" : "s"} × ${k.threads} thread${k.threads === 1 ? "" : "s"}`);
      for (const [sp, b] of Object.entries(s.bytes)) if (sp !== "GMEM") parts.push(`${sp} ${fmtBytes(b)}`);
      if (s.barriers) parts.push(`${s.barriers} barrier${s.barriers === 1 ? "" : "s"}`);
    }
    replace(this.kernelInfo, parts.join(" · "));
    if (k.launch) this.kernelInfo.title = `launched at ${locLabel(k.launch)}`;
    const op = k.operands;
    replace(this.operands, op && op.buffers
      ? [h("span", { class: "pv-label" }, "kernel operands"), `GMEM · ${op.buffers} buffer${op.buffers === 1 ? "" : "s"} · ${fmtBytes(op.bytes)}`]
      : []);
  }

  // ---- grid drawing
  /** The theme's identity: its resolved background and text colour variables. */
  themeKey() {
    const cs = getComputedStyle(this.root);
    return `${cs.getPropertyValue("--pv-bg").trim()}|${cs.getPropertyValue("--pv-fg").trim()}`;
  }

  colors() {
    const key = this.themeKey();
    if (this._colors && key === this._colorsKey) return this._colors;
    const colors = this.readColors();
    if (key !== "|") {
      this._colorsKey = key;
      this._colors = colors;
    } else if ((this._styleWaits = (this._styleWaits || 0) + 1) < 300) {
      // Not attached or the stylesheet has not applied yet: draw again on the next frame.
      requestAnimationFrame(() => this.draw());
    }
    return colors;
  }

  readColors() {
    // Resolve each CSS variable (theme-dependent, may use color-mix) to an rgb() string.
    if (!this.probe) { this.probe = h("span", { style: { display: "none" } }); this.root.appendChild(this.probe); }
    const probe = this.probe;
    const v = (n, d) => {
      probe.style.color = d;
      probe.style.color = `var(${n}, ${d})`;
      return getComputedStyle(probe).color || d;
    };
    const cs = getComputedStyle(this.root);
    const family = (n, d) => cs.getPropertyValue(n).trim() || d;
    return {
      mono: family("--pv-mono", "ui-monospace, Menlo, monospace"),
      ui: family("--pv-font", "system-ui, sans-serif"),
      bg: v("--pv-bg", "#fff"), panel: v("--pv-panel", "#fff"), fg: v("--pv-fg", "#222"), muted: v("--pv-muted", "#888"),
      border: v("--pv-border", "#ddd"), empty: v("--pv-cell-empty", "#f3f4f6"),
      clean: v("--pv-cell-clean", "#e7f6ec"), cleanS: v("--pv-clean", "#2e9b57"),
      coll: v("--pv-cell-coll", "#e5efff"), collS: v("--pv-coll", "#2f6fd6"),
      warn: v("--pv-cell-warn", "#fff4d6"), warnS: v("--pv-warn", "#c98a00"),
      err: v("--pv-cell-error", "#fde5e5"), errS: v("--pv-error", "#d93025"),
      fail: v("--pv-cell-failed", "#f3e1f7"), failS: v("--pv-failed", "#9c27b0"),
      accent: v("--pv-accent", "#1a73e8"),
      spaces: [v("--pv-space-0", "#8d6e63"), v("--pv-space-1", "#2f6fd6"), v("--pv-space-2", "#00897b"), v("--pv-space-3", "#8e24aa")],
    };
  }

  draw() {
    if (!this.canvas || !this.layout || this.suspended || this.destroyed) return;
    const L = this.layout;
    const sc = this.scroller;
    this.sizer.style.width = `${L.width}px`;
    this.sizer.style.height = `${L.height}px`;
    if (!sc.clientWidth || !sc.clientHeight) {
      // Not laid out yet (detached or hidden): the ResizeObserver draws once it is.
      if (!this.resizeObs && (this._layoutWaits = (this._layoutWaits || 0) + 1) < 300) requestAnimationFrame(() => this.draw());
      return;
    }
    this.drawnSize = `${sc.clientWidth}x${sc.clientHeight}`;
    const W = Math.max(1, Math.min(sc.clientWidth, L.width));
    const H = Math.max(1, Math.min(sc.clientHeight, L.height));
    const dpr = (typeof window !== "undefined" && window.devicePixelRatio) || 1;
    const cv = this.canvas;
    if (cv.width !== Math.round(W * dpr) || cv.height !== Math.round(H * dpr)) {
      cv.width = Math.round(W * dpr); cv.height = Math.round(H * dpr);
      cv.style.width = `${W}px`; cv.style.height = `${H}px`;
    }
    const sx = sc.scrollLeft, sy = sc.scrollTop;
    cv.style.transform = `translate(${sx}px, ${sy}px)`;
    const ctx = cv.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    const C = this.colors();
    ctx.fillStyle = C.panel;
    ctx.fillRect(0, 0, W, H);
    ctx.save();
    ctx.translate(-sx, -sy);
    const [first, last] = L.visibleRange(sy, H);
    const g = L.g;
    const live = this.mode === "live";
    const rp = live ? this.replay : null;
    const cur = live && rp.step > 0 ? this.data.ev.cell[rp.step - 1] : -1;
    const flagsArr = this.data.cells.flags;
    const F = this.meta.flags;
    const dim = this.lit.size > 0;
    let maxBytes = 1;
    if (live) for (let v = first; v <= last; v++) {
      const vr = L.vrows[v];
      if (vr.warp >= 0) continue;
      for (let t = 0; t < L.threads; t++) {
        const c = L.cellAt(v, t);
        let b = 0;
        for (let s = 0; s < NSPACES; s++) b += rp.bytes[c * NSPACES + s];
        maxBytes = Math.max(maxBytes, b);
      }
    }
    ctx.textBaseline = "middle";
    for (let v = first; v <= last; v++) {
      const vr = L.vrows[v];
      for (let t = 0; t < L.threads; t++) {
        const c = L.cellAt(v, t);
        const [x, y] = L.cellXY(v, t);
        const w = g.cellW, hh = g.cellH;
        const flags = flagsArr[c];
        let fill, stroke, text = "", sub = "";
        if (vr.warp >= 0) {
          const n = (this.warps.get(vr.row) || new Map()).get(vr.warp * 65536 + t) || 0;
          fill = n ? C.clean : C.empty; stroke = C.border; text = n ? fmtCount(n) : "";
        } else if (live) {
          const nLive = rp.live[c], nBar = rp.liveBarriers[c];
          let b = 0;
          for (let s = 0; s < NSPACES; s++) b += rp.bytes[c * NSPACES + s];
          if (rp.failed[c]) { fill = C.fail; stroke = C.failS; }
          else if (nLive || nBar) { fill = C.coll; stroke = C.collS; }
          else { fill = C.empty; stroke = C.border; }
          text = nLive || nBar ? `${nLive}${nBar ? `+${nBar}b` : ""}` : "·";
          sub = b ? fmtBytes(b) : "";
        } else {
          const n = this.counts[c];
          if (flags & F.failed) { fill = C.fail; stroke = C.failS; }
          else if (flags & F.error) { fill = C.err; stroke = C.errS; }
          else if (flags & F.warning) { fill = C.warn; stroke = C.warnS; }
          else if (flags & F.collective) { fill = C.coll; stroke = C.collS; }
          else if (n) { fill = C.clean; stroke = C.cleanS; }
          else { fill = C.empty; stroke = C.border; }
          text = fmtCount(n);
        }
        ctx.globalAlpha = dim && !this.lit.has(c) ? 0.35 : 1;
        roundRect(ctx, x, y, w, hh, 5);
        ctx.fillStyle = fill; ctx.fill();
        ctx.lineWidth = 1; ctx.strokeStyle = stroke; ctx.stroke();
        if (live && vr.warp < 0) {
          // stacked bytes bar per memory space
          let bx = x + 4;
          const total = Math.max(1, maxBytes);
          for (let s = 0; s < NSPACES; s++) {
            const bw = ((w - 8) * rp.bytes[c * NSPACES + s]) / total;
            if (bw > 0) { ctx.fillStyle = C.spaces[s]; ctx.fillRect(bx, y + hh - 5, bw, 3); bx += bw; }
          }
        }
        if (vr.warp < 0) drawMarker(ctx, flags, F, C, x + 8, y + 9);
        ctx.fillStyle = C.fg;
        ctx.font = `600 12px ${C.mono}`;
        ctx.textAlign = "right";
        ctx.fillText(text, x + w - 7, y + (sub ? hh / 2 - 4 : hh / 2));
        if (sub) {
          ctx.font = `10px ${C.ui}`; ctx.fillStyle = C.muted;
          ctx.fillText(sub, x + w - 7, y + hh / 2 + 7);
        }
        ctx.globalAlpha = 1;
        if (this.lit.has(c)) {
          const f = this.meta.findings[this.finding];
          roundRect(ctx, x - 1.5, y - 1.5, w + 3, hh + 3, 6);
          ctx.lineWidth = 2; ctx.strokeStyle = f && f.severity === "warning" ? C.warnS : C.errS; ctx.stroke();
        } else if (this.litSecondary && this.litSecondary.has(c)) {
          // a consequence of the selected root cause: same colour, dashed and thinner
          roundRect(ctx, x - 1.5, y - 1.5, w + 3, hh + 3, 6);
          ctx.lineWidth = 1.5; ctx.setLineDash([4, 3]); ctx.strokeStyle = C.errS; ctx.stroke(); ctx.setLineDash([]);
        }
        if (c === this.sel && vr.warp < 0) {
          roundRect(ctx, x - 3, y - 3, w + 6, hh + 6, 7);
          ctx.lineWidth = 2.5; ctx.strokeStyle = C.accent; ctx.stroke();
        }
        if (c === cur && vr.warp < 0) {
          roundRect(ctx, x + 2, y + 2, w - 4, hh - 4, 4);
          ctx.lineWidth = 2; ctx.setLineDash([3, 2]); ctx.strokeStyle = C.accent; ctx.stroke(); ctx.setLineDash([]);
        }
        if (v === this.cursor.v && t === this.cursor.t && this.focused) {
          roundRect(ctx, x - 5, y - 5, w + 10, hh + 10, 8);
          ctx.lineWidth = 1; ctx.setLineDash([2, 2]); ctx.strokeStyle = C.fg; ctx.stroke(); ctx.setLineDash([]);
        }
      }
    }
    ctx.restore();
    // sticky row labels (on the pane's background; a rule shows once cells scroll under)
    const labelsW = g.pad + g.labelW - 6;
    ctx.fillStyle = C.panel;
    ctx.fillRect(0, 0, labelsW, H);
    if (sx > 0) { ctx.fillStyle = C.border; ctx.fillRect(labelsW - 1, 0, 1, H); }
    ctx.textAlign = "left";
    for (let v = first; v <= last; v++) {
      const vr = L.vrows[v];
      const y = L.cellXY(v, 0)[1] - sy + g.cellH / 2;
      const r = this.meta.rows[vr.row];
      if (vr.warp >= 0) {
        ctx.font = `11px ${C.ui}`; ctx.fillStyle = C.muted;
        ctx.fillText(`warp ${vr.warp}`, g.pad + 26, y);
      } else {
        const hasWarps = this.warps.has(vr.row);
        ctx.fillStyle = C.muted; ctx.font = `10px ${C.ui}`;
        if (hasWarps) ctx.fillText(this.expanded.has(vr.row) ? "▾" : "▸", g.pad, y);
        ctx.font = `12px ${C.mono}`; ctx.fillStyle = C.fg;
        ctx.fillText(r.label, g.pad + 12, y);
      }
    }
    // sticky header
    const headH = g.pad + g.headerH - 4;
    ctx.fillStyle = C.panel;
    ctx.fillRect(0, 0, W, headH);
    if (sy > 0) { ctx.fillStyle = C.border; ctx.fillRect(0, headH - 1, W, 1); }
    ctx.font = `11px ${C.ui}`; ctx.fillStyle = C.muted; ctx.textAlign = "center";
    for (let t = 0; t < L.threads; t++) {
      const x = L.cellXY(0, t)[0] - sx + g.cellW / 2;
      if (x > g.labelW) ctx.fillText(`${this.threadWord()} ${t}`, x, g.pad + g.headerH / 2 - 2);
    }
    ctx.textAlign = "left";
    ctx.fillText(this.meta.kernels.find((k) => k.index === this.kernel)?.cluster_dims ? "grid c(cluster)" : "block (grid)", g.pad, g.pad + g.headerH / 2 - 2);
  }

  // ---- interaction
  pointToHit(e) {
    const r = this.scroller.getBoundingClientRect();
    return this.layout.hit(e.clientX - r.left + this.scroller.scrollLeft, e.clientY - r.top + this.scroller.scrollTop);
  }

  hover(e) {
    const hit = this.pointToHit(e);
    const tip = this.tooltip;
    if (!hit || hit.t < 0) { tip.style.display = "none"; return; }
    const vr = this.vrows[hit.v];
    const c = this.layout.cellAt(hit.v, hit.t);
    replace(tip, ...this.tooltipLines(c, vr).map((l, i) => h("div", { class: i === 0 ? "pv-tip-head" : "" }, l)));
    tip.style.display = "block";
    const wrap = tip.parentElement.getBoundingClientRect();
    tip.style.left = `${Math.min(e.clientX - wrap.left + 14, wrap.width - 240)}px`;
    tip.style.top = `${e.clientY - wrap.top + 14}px`;
  }

  tooltipLines(c, vr) {
    const r = this.meta.rows[vr.row];
    const t = this.data.cells.thread[c];
    const lines = [`block ${r.label} · ${this.threadWord()} ${t}${vr.warp >= 0 ? ` · warp ${vr.warp}` : ""}${r.device ? ` · device ${r.device}` : ""}`];
    if (this.mode === "live") {
      const rp = this.replay;
      lines.push(`at step ${rp.step}: ${rp.live[c]} live buffer(s), ${rp.liveBarriers[c]} barrier(s)`);
      const b = [];
      for (let s = 0; s < NSPACES; s++) if (rp.bytes[c * NSPACES + s]) b.push(`${this.meta.spaces[s]} ${fmtBytes(rp.bytes[c * NSPACES + s])}`);
      if (b.length) lines.push(b.join(" · "));
      if (rp.failed[c]) lines.push("failed here");
    } else {
      const T = this.totals;
      lines.push(`${T.events[c]} event(s) · ${T.allocs[c]} allocation(s) · ${T.barriers[c]} barrier(s)`);
      const b = [];
      for (let s = 0; s < NSPACES; s++) if (T.bytes[c * NSPACES + s]) b.push(`${this.meta.spaces[s]} ${fmtBytes(T.bytes[c * NSPACES + s])}`);
      lines.push(b.length ? b.join(" · ") : "no buffer bytes");
    }
    const F = this.meta.flags;
    const fl = this.data.cells.flags[c];
    if (fl & F.collective) lines.push("joined a collective allocation");
    if (fl & F.failed) lines.push("the run failed in this cell");
    for (const i of this.cellFindings.get(c) || []) {
      const f = this.meta.findings[i];
      lines.push(`${f.severity}: ${f.kind}`);
    }
    return lines;
  }

  click(e) {
    const hit = this.pointToHit(e);
    this.scroller.focus({ preventScroll: true });
    if (!hit) return;
    const vr = this.vrows[hit.v];
    if (hit.t < 0) {
      if (vr.warp < 0 && this.warps.has(vr.row)) this.toggleExpand(vr.row);
      return;
    }
    this.cursor = { v: hit.v, t: hit.t };
    this.selectCell(this.layout.cellAt(hit.v, hit.t));
  }

  key(e) {
    const L = this.layout;
    if (["ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", "Home", "End", "PageUp", "PageDown"].includes(e.key)) {
      e.preventDefault();
      this.focused = true;
      this.cursor = moveCursor(this.cursor, e.key, this.vrows.length, L.threads);
      this.scrollTo(this.cursor.v, this.cursor.t);
      this.draw();
    } else if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      const vr = this.vrows[this.cursor.v];
      if (!vr) return;
      if (e.key === " " && vr.warp < 0 && this.warps.has(vr.row)) { this.toggleExpand(vr.row); return; }
      this.selectCell(L.cellAt(this.cursor.v, this.cursor.t));
    }
  }

  scrollTo(v, t) {
    const [x, y] = this.layout.cellXY(v, t);
    const g = this.layout.g;
    const sc = this.scroller;
    if (y - g.headerH - g.pad < sc.scrollTop) sc.scrollTop = y - g.headerH - g.pad;
    else if (y + g.cellH + g.pad > sc.scrollTop + sc.clientHeight) sc.scrollTop = y + g.cellH + g.pad - sc.clientHeight;
    if (x - g.labelW - g.pad < sc.scrollLeft) sc.scrollLeft = x - g.labelW - g.pad;
    else if (x + g.cellW + g.pad > sc.scrollLeft + sc.clientWidth) sc.scrollLeft = x + g.cellW + g.pad - sc.clientWidth;
  }

  toggleExpand(row) {
    if (this.expanded.has(row)) this.expanded.delete(row); else this.expanded.add(row);
    this.vrows = visualRows(this.meta, this.kernel, this.expanded, this.warps);
    this.layout = new Layout(this.meta, this.kernel, this.vrows);
    this.draw();
  }

  setKernel(k) {
    if (k === this.kernel) return;
    this.kernel = k;
    if (this.kernelSelect) this.kernelSelect.value = String(k);
    this.vrows = visualRows(this.meta, this.kernel, this.expanded, this.warps);
    this.layout = new Layout(this.meta, this.kernel, this.vrows);
    this.cursor = { v: 0, t: 0 };
    this.scroller.scrollTop = 0;
    this.renderKernelInfo();
    this.draw();
  }

  filterChanged() {
    this.recompute();
    if (this._replay) this._replay.setFilter(this.filter);
    this.draw();
    if (this.eventsReply) this.renderEvents(this.eventsReply);
  }

  selectFirstBusyCell() {
    const rows = this.vrows;
    for (let v = 0; v < rows.length; v++) {
      for (let t = 0; t < this.layout.threads; t++) {
        const c = this.layout.cellAt(v, t);
        if (this.counts[c]) { this.cursor = { v, t }; this.selectCell(c); return; }
      }
    }
  }

  async selectCell(c, { keepFinding = false } = {}) {
    if (c < 0) return;
    this.sel = c;
    if (!keepFinding && this.finding >= 0 && !this.lit.has(c)) this.clearFinding();
    const row = this.data.cells.row[c];
    const k = this.meta.rows[row].kernel;
    if (k !== this.kernel) this.setKernel(k);
    const v = this.layout.vrowOfCell(c, this.data.cells.row);
    if (v >= 0) { this.cursor = { v, t: this.data.cells.thread[c] }; this.scrollTo(v, this.cursor.t); }
    this.draw();
    replace(this.eventsEl, h("div", { class: "pv-empty" }, "Loading events…"));
    const reply = await this.request({ type: "events", cell: c, offset: 0, limit: ROW_LIMIT });
    if (this.sel !== c) return;
    this.eventsReply = reply;
    this.renderEvents(reply);
  }

  async loadMore() {
    const r = this.eventsReply;
    if (!r) return;
    const more = await this.request({ type: "events", cell: r.cell, offset: r.rows.length, limit: ROW_LIMIT });
    if (this.sel !== r.cell) return;
    r.rows = r.rows.concat(more.rows);
    Object.assign(r.sources, more.sources);
    this.renderEvents(r);
  }

  renderEvents(reply) {
    const c = reply.cell;
    const row = this.meta.rows[this.data.cells.row[c]];
    const t = this.data.cells.thread[c];
    const spaces = this.meta.spaces;
    const shown = reply.rows.filter((r) => this.filter.resources[this.meta.resources.indexOf(r[3])] !== false
      && (r[4] == null || this.filter.spaces[spaces.indexOf(r[4])] !== false));
    const head = h("div", { class: "pv-pane-title" }, `Events of block ${row.label} · ${this.threadWord()} ${t}`,
      h("span", { class: "pv-muted" }, ` ${reply.total} event${reply.total === 1 ? "" : "s"}${shown.length < reply.rows.length ? `, ${shown.length} shown by the filters` : ""}`));
    const cols = ["seq", "#", "op", "resource", "space", "shape", "dtype", "bytes", "buffer", "ref", "warp", "line"];
    const curSeq = this.mode === "live" ? this.step - 1 : -1;
    this.evRows = new Map();
    this.curSeqShown = curSeq;
    const body = shown.map((r) => {
      const [seq, tseq, op, res, sp, warp, shape, dtype, nbytes, bid, rc, irc, , src] = r;
      const loc = src >= 0 ? reply.sources[String(src)] : null;
      const cls = ["pv-ev"];
      if (this.litEvents.has(seq)) cls.push("pv-ev-lit");
      if (seq === this.selEvent) cls.push("pv-ev-sel");
      if (seq === curSeq) cls.push("pv-ev-cur");
      const tr = h("tr", { class: cls.join(" "), tabindex: "0", onclick: () => this.selectEvent(seq, loc),
        onkeydown: (e) => { if (e.key === "Enter") this.selectEvent(seq, loc); } },
      h("td", { class: "pv-num" }, String(seq)), h("td", { class: "pv-num pv-muted" }, String(tseq)),
      h("td", {}, h("span", { class: `pv-op pv-op-${op}` }, op)),
      h("td", {}, res, irc > 1 ? h("span", { class: "pv-coll-tag", title: "collective: shared by the threads of the block" }, "coll") : null), h("td", {}, sp ? h("span", { class: `pv-sp pv-space-${spaces.indexOf(sp)}` }, sp) : "—"),
      h("td", { class: "pv-code" }, shape || "—"), h("td", { class: "pv-code" }, dtype || "—"),
      h("td", { class: "pv-num" }, nbytes ? fmtBytes(nbytes) : "—"), h("td", { class: "pv-num" }, String(bid)),
      h("td", { class: "pv-num" }, `${rc}/${irc}`), h("td", { class: "pv-num" }, warp == null ? "—" : String(warp)),
      h("td", { class: "pv-loc", title: loc ? `${loc.file}:${loc.line}` : "" }, loc ? locLabel(loc) : "—"));
      this.evRows.set(seq, tr);
      return tr;
    });
    const table = h("table", { class: "pv-table" },
      h("thead", {}, h("tr", {}, cols.map((x) => h("th", {}, x)))), h("tbody", {}, body));
    const more = reply.rows.length < reply.total
      ? h("button", { class: "pv-btn pv-more", onclick: () => this.loadMore() }, `load more (${reply.total - reply.rows.length} left)`)
      : null;
    replace(this.eventsEl, head, reply.total ? h("div", { class: "pv-tablewrap" }, table) : h("div", { class: "pv-empty" }, "This thread made no allocation requests (it never reached them)."), more);
  }

  selectEvent(seq, loc) {
    this.selEvent = seq;
    if (this.eventsReply) this.renderEvents(this.eventsReply);
    this.showSource(loc, `event ${seq}`);
  }

  async showSource(loc, why, branch) {
    if (!loc) {
      replace(this.sourceEl, h("div", { class: "pv-empty" }, "JAX recorded no source line for this."));
      return;
    }
    const token = (this.sourceToken = (this.sourceToken || 0) + 1);
    const reply = await this.request({ type: "source", file: loc.file, line: loc.line });
    if (token !== this.sourceToken) return;
    const lines = reply.lines && reply.lines.length ? reply.lines : [loc.code || ""];
    const start = reply.lines && reply.lines.length ? reply.start : loc.line;
    // Lines as wide as the longest (the block scrolls sideways; the highlight spans it all).
    const code = h("div", { class: "pv-codeblock" }, h("div", { class: "pv-codelines" }, lines.map((text, i) => {
      const n = start + i;
      const cls = n === loc.line ? "pv-line pv-line-hit"
        : branch && branch.file === loc.file && n === branch.line ? "pv-line pv-line-branch" : "pv-line";
      return h("div", { class: cls, title: cls.includes("branch") ? "threads part here" : null },
        h("span", { class: "pv-gutter" }, String(n)), h("span", { class: "pv-text" }, text || " "));
    })));
    replace(this.sourceEl,
      h("div", { class: "pv-pane-title" }, h("span", { class: "pv-srcname", title: loc.file }, locLabel(loc)),
        loc.function ? h("span", { class: "pv-muted" }, ` in ${shortName(loc.function)}`) : null,
        why ? h("span", { class: "pv-muted pv-why" }, ` · ${why}`) : null),
      h("div", { class: "pv-path", title: loc.file }, loc.file), code);
    // Keep the highlighted line in view (vertically: the block has a maximum height).
    const hit = code.querySelector(".pv-line-hit");
    if (hit && code.clientHeight && (hit.offsetTop < code.scrollTop || hit.offsetTop + hit.offsetHeight > code.scrollTop + code.clientHeight)) {
      code.scrollTop = Math.max(0, hit.offsetTop - (code.clientHeight - hit.offsetHeight) / 2);
    }
  }

  renderFindings() {
    const fs = this.meta.findings;
    if (!fs.length) {
      const unplaced = this.meta.unplaced_events || 0;
      const analysed = this.meta.num_events - unplaced;
      replace(this.findingsEl, unplaced
        ? h("div", { class: "pv-clean-msg" }, h("div", { class: "pv-big" }, "?"),
          `Not verified: ${unplaced} block-level event${unplaced === 1 ? "" : "s"} could not be placed in a (device, block, thread); ${analysed} analysed.`)
        : h("div", { class: "pv-clean-msg" }, h("div", { class: "pv-big" }, "✓"),
          `No findings in ${analysed} analysed event${analysed === 1 ? "" : "s"}: every thread of every block made matching allocations, and everything allocated was freed.`));
      return;
    }
    replace(this.findingsEl, fs.map((f, i) => {
      const item = h("div", { class: `pv-finding pv-sev-${f.severity}${i === this.finding ? " pv-selected" : ""}`, role: "option", tabindex: "0",
        "aria-selected": String(i === this.finding), onclick: () => this.selectFinding(i),
        onkeydown: (e) => { if (e.key === "Enter") this.selectFinding(i); } },
      h("div", { class: "pv-fhead" }, h("span", { class: "pv-sevicon" }, f.severity === "error" ? "●" : "▲"),
        h("span", { class: "pv-kind" }, f.kind.replaceAll("_", " ")),
        f.source ? h("span", { class: "pv-floc", title: f.source.file }, locLabel(f.source)) : null),
      h("div", { class: "pv-msg" }, f.message),
      f.branch ? h("div", { class: "pv-branch", title: f.branch.file }, h("b", {}, "threads part here: "),
        locLabel(f.branch), f.branch.code ? h("code", {}, ` ${f.branch.code.trim()}`) : null) : null,
      i === this.finding && f.suggestion ? h("div", { class: "pv-suggest" }, h("b", {}, "fix: "), f.suggestion) : null,
      f.consequences && f.consequences.length
        ? h("details", { class: "pv-consequences", onclick: (e) => e.stopPropagation() },
          h("summary", {}, `${f.consequences.length} consequence${f.consequences.length === 1 ? "" : "s"} of this root cause`),
          f.consequences.map((c) => h("div", { class: `pv-consequence pv-sev-${c.severity}` },
            h("span", { class: "pv-kind" }, c.kind.replaceAll("_", " ")),
            c.source ? h("span", { class: "pv-floc", title: c.source.file }, ` ${locLabel(c.source)} `) : null,
            h("span", { class: "pv-msg" }, c.message))))
        : null,
      i === this.finding ? h("div", { class: "pv-muted pv-fcells" }, `${f.cells.length} cell${f.cells.length === 1 ? "" : "s"} · ${f.num_events} event${f.num_events === 1 ? "" : "s"}`) : null);
      return item;
    }));
  }

  clearFinding() {
    this.finding = -1;
    this.lit = new Set();
    this.litSecondary = new Set();
    this.litEvents = new Set();
    this.renderFindings();
  }

  selectFinding(i) {
    const f = this.meta.findings[i];
    if (!f) return;
    this.finding = i;
    this.lit = new Set(f.cells);
    this.litSecondary = new Set(f.consequence_cells || []);
    this.litEvents = new Set(f.events);
    this.renderFindings();
    const sel = this.findingsEl.children[i];
    if (sel && sel.scrollIntoView) sel.scrollIntoView({ block: "nearest" });
    let cell = f.cells.length ? f.cells[0] : -1;
    // prefer the cell of the finding's first event
    if (f.events.length) {
      const ec = this.data.ev.cell[f.events[0]];
      if (ec >= 0 && this.lit.has(ec)) cell = ec;
    }
    // The source line first (what the finding is about), then the cell's events.
    this.showSource(f.source, f.kind.replaceAll("_", " "), f.branch);
    if (cell >= 0) {
      this.selectCell(cell, { keepFinding: true }); // draws
    } else {
      if (f.kernel != null) this.setKernel(f.kernel);
      this.draw();
    }
  }

  // ---- replay
  setMode(mode) {
    this.mode = mode;
    this.updateReplayBar();
    this.draw();
    this.markCurrentEvent();
  }

  seek(step) {
    this.replay.seek(step);
    if (this.mode !== "live") this.mode = "live";
    this.slider.value = String(this.replay.step);
    this.updateReplayBar();
    this.draw();
    this.markCurrentEvent();
  }

  /** Move the events table's "current replay event" mark (without rebuilding the table). */
  markCurrentEvent() {
    const cur = this.mode === "live" ? this.step - 1 : -1;
    if (!this.evRows || cur === this.curSeqShown) return;
    const old = this.evRows.get(this.curSeqShown);
    if (old) old.classList.remove("pv-ev-cur");
    const now = this.evRows.get(cur);
    if (now) now.classList.add("pv-ev-cur");
    this.curSeqShown = cur;
  }

  togglePlay() {
    if (this.playing) { this.playing = false; this.playBtn.textContent = "▶ play"; return; }
    if (this.replay.step >= this.data.n) this.replay.seek(0);
    this.playing = true;
    this.playBtn.textContent = "❚❚ pause";
    const per = Math.max(1, Math.ceil(this.data.n / 240));
    let last = 0;
    const tick = (ts) => {
      if (!this.playing) return;
      if (ts - last > (this.data.n < 120 ? 250 : 16)) {
        last = ts;
        this.seek(this.replay.step + per);
        if (this.replay.step >= this.data.n) { this.playing = false; this.playBtn.textContent = "▶ play"; return; }
      }
      requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  }

  updateReplayBar() {
    const n = this.data.n;
    const s = this.step;
    this.stepLabel.textContent = `step ${s} / ${n}`;
    this.modeBtn.textContent = this.mode === "live" ? "showing: live at step" : "showing: totals";
    this.modeBtn.setAttribute("aria-pressed", String(this.mode === "live"));
    if (this.mode !== "live" || s === 0) { this.stepEvent.textContent = this.mode === "live" ? "before the first event" : ""; return; }
    const i = s - 1;
    const ev = this.data.ev;
    const c = ev.cell[i];
    const sp = ev.space[i] >= 0 ? `${this.meta.spaces[ev.space[i]]} ` : "";
    const where = c >= 0
      ? `block ${this.meta.rows[this.data.cells.row[c]].label} · ${this.threadWord()} ${this.data.cells.thread[c]}`
      : "kernel level (operands)";
    this.stepEvent.textContent = `#${i} ${this.meta.ops[ev.op[i]]} ${sp}${RESOURCE_LABELS[ev.resource[i]]} — ${where}`;
  }

  /** The current kernel's thread axis name ("w"), or "thread". */
  threadWord() {
    const k = this.meta.kernels.find((kk) => kk.index === this.kernel) || this.meta.kernels[0];
    return (k && k.thread_axis) || "thread";
  }

  destroy() {
    this.destroyed = true;
    this.playing = false;
    this.model.off("msg:custom", this.onMsg);
    if (this.resizeObs) this.resizeObs.disconnect();
    if (this.themeObs) this.themeObs.disconnect();
    if (this.schemeQuery && this.schemeQuery.removeEventListener) this.schemeQuery.removeEventListener("change", this.onScheme);
  }
}

function shortName(name) {
  return name.replaceAll(".<locals>", "");
}

function legendItem(label, cls, mark) {
  return h("span", { class: "pv-legend-item" }, h("span", { class: `pv-swatch ${cls}` }, mark), label);
}

function roundRect(ctx, x, y, w, hh, r) {
  ctx.beginPath();
  ctx.moveTo(x + r, y);
  ctx.arcTo(x + w, y, x + w, y + hh, r);
  ctx.arcTo(x + w, y + hh, x, y + hh, r);
  ctx.arcTo(x, y + hh, x, y, r);
  ctx.arcTo(x, y, x + w, y, r);
  ctx.closePath();
}

function drawMarker(ctx, flags, F, C, x, y) {
  ctx.save();
  if (flags & F.failed) {
    ctx.strokeStyle = C.failS; ctx.lineWidth = 2;
    ctx.beginPath(); ctx.moveTo(x - 3.5, y - 3.5); ctx.lineTo(x + 3.5, y + 3.5);
    ctx.moveTo(x + 3.5, y - 3.5); ctx.lineTo(x - 3.5, y + 3.5); ctx.stroke();
  } else if (flags & F.error) {
    ctx.fillStyle = C.errS; ctx.beginPath(); ctx.arc(x, y, 3.5, 0, Math.PI * 2); ctx.fill();
  } else if (flags & F.warning) {
    ctx.fillStyle = C.warnS; ctx.beginPath(); ctx.moveTo(x, y - 4); ctx.lineTo(x + 4, y + 3.5); ctx.lineTo(x - 4, y + 3.5); ctx.closePath(); ctx.fill();
  } else if (flags & F.collective) {
    ctx.fillStyle = C.collS; ctx.beginPath(); ctx.moveTo(x, y - 4); ctx.lineTo(x + 4, y); ctx.lineTo(x, y + 4); ctx.lineTo(x - 4, y); ctx.closePath(); ctx.fill();
  }
  ctx.restore();
}

// anywidget's module form: a default export with `render` (a named `render` export is the
// deprecated form anywidget warns about).
function render({ model, el }) {
  const view = new TraceView(model, el);
  return () => view.destroy();
}

export { TraceView };
export default { render };
