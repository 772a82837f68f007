// The timeline of one block (memray's memory-over-time view is the model): one lane per
// (thread, warp) with a bar per allocation the thread holds, from its request to its
// release (to the block's end, outlined, when it never releases it), coloured by memory
// space; barrier arrivals as ticks and waits as lines; above them the block's live SMEM (and
// TMEM) against the device's limit, with its peak. The numbers come from Python
// (`payload.timeline_state`: the timeline plot's `thread_holds`, `live_memory`,
// `barrier_ops_of`, `pair_waits`); this file only lays them out and draws them on canvases,
// the visible lanes only. Clicking a bar selects its cell, its request and its line;
// clicking elsewhere moves the replay there; the replay step is a vertical line. Under the
// plot, the buffers live at the block's SMEM / TMEM peak (views/peak.js).
import { view } from "../data.js";
import { fmtBytes, h, inert, locLabel, replace } from "../format.js";
import { threadWord } from "../names.js";
import { PeakView } from "./peak.js";

export const LABEL_W = 112; // lane labels, left of the plot
export const RIGHT_PAD = 10;
export const LANE_PAD = 6; // vertical space around a lane's bars
export const SUB_H = 12; // height of one sub-row of overlapping bars
export const MAX_SUBS_DRAWN = 10; // a lane never grows past this many sub-rows
export const CURVE_H = 86;
export const TMEM_H = 54;
const CLUSTER_BARRIER = "#F0E442"; // Okabe-Ito yellow (the matplotlib timeline's colour)

/** Bytes of a base64 string (atob: browsers and Node 16+). */
export function b64Bytes(s) {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** `[dtype, base64]` -> typed array. */
export function unpack(spec) {
  if (!spec) return new Int32Array(0);
  return view(b64Bytes(spec[1]), spec[0]);
}

/** The payload's `meta.timeline`, decoded (typed arrays). */
export function decodeTimeline(tl) {
  if (!tl) return null;
  const curve = (c) => ({ offsets: unpack(c.offsets), steps: unpack(c.steps), values: unpack(c.values) });
  return {
    device: tl.device,
    begin: unpack(tl.holds.begin), end: unpack(tl.holds.end),
    smem: curve(tl.live.SMEM), tmem: curve(tl.live.TMEM), peaks: unpack(tl.live.peaks),
    ops: { kinds: tl.barriers.kinds, step: unpack(tl.barriers.step), kind: unpack(tl.barriers.kind), cell: unpack(tl.barriers.cell), warp: unpack(tl.barriers.warp), end: unpack(tl.barriers.end) },
  };
}

/** A block row's live curve: `{steps, values}` (each value holds until the next step). */
export function curveOf(curve, row) {
  const a = curve.offsets[row], b = curve.offsets[row + 1];
  return { steps: curve.steps.subarray(a, b), values: curve.values.subarray(a, b) };
}

/**
 * Lanes and bars of one block. `holds`: {begin, end} (request row, release row or -1, sorted
 * by begin); `cell`, `warp`: per-event columns; the block's cells are `start .. start +
 * threads - 1`; `x1`: the step drawn for a hold never released; `ops`: barrier operations
 * ({step, kind, cell, warp, end}). One lane per thread (warp -1) plus one per (thread, warp)
 * its requests name, sorted; a lane's overlapping bars are stacked in sub-rows (first fit,
 * like the matplotlib timeline's `_pack_lanes`).
 * Returns {lanes: [{thread, warp, cell, subs, bars: [hold index], ops: [op index]}],
 * holdLane, holdSub (by hold index, -1 outside the block), y: lane tops, height}.
 */
export function blockLayout({ holds, cell, warp, start, threads, x1, ops = null }) {
  const inBlock = (c) => c >= start && c < start + threads;
  const keyOf = (t, w) => t * 1024 + (w + 1);
  const keys = new Set();
  for (let t = 0; t < threads; t++) keys.add(keyOf(t, -1));
  const mine = [];
  for (let i = 0; i < holds.begin.length; i++) {
    const c = cell[holds.begin[i]];
    if (!inBlock(c)) continue;
    mine.push(i);
    keys.add(keyOf(c - start, warp[holds.begin[i]]));
  }
  const sorted = [...keys].sort((a, b) => a - b);
  const laneIdx = new Map(sorted.map((k, i) => [k, i]));
  const lanes = sorted.map((k) => ({ thread: Math.floor(k / 1024), warp: (k % 1024) - 1, cell: start + Math.floor(k / 1024), subs: 1, bars: [], ops: [] }));
  const holdLane = new Int32Array(holds.begin.length).fill(-1);
  const holdSub = new Int32Array(holds.begin.length).fill(-1);
  const free = lanes.map(() => []); // per lane: end step of each sub-row
  for (const i of mine) {
    const b = holds.begin[i];
    const L = laneIdx.get(keyOf(cell[b] - start, warp[b]));
    const e = holds.end[i] < 0 ? x1 : holds.end[i];
    const ends = free[L];
    let s = 0;
    while (s < ends.length && ends[s] > b) s++;
    ends[s] = e;
    holdLane[i] = L;
    holdSub[i] = s;
    lanes[L].bars.push(i);
  }
  lanes.forEach((ln, L) => { ln.subs = Math.max(1, free[L].length); });
  if (ops) {
    for (let j = 0; j < ops.step.length; j++) {
      const c = ops.cell[j];
      if (!inBlock(c)) continue;
      const t = c - start;
      let L = laneIdx.get(keyOf(t, ops.warp[j]));
      if (L === undefined) L = laneIdx.get(keyOf(t, -1));
      lanes[L].ops.push(j);
    }
  }
  const y = new Float64Array(lanes.length + 1);
  lanes.forEach((ln, L) => { y[L + 1] = y[L] + laneHeight(ln.subs); });
  return { lanes, holdLane, holdSub, y, height: y[lanes.length] };
}

export function laneHeight(subs) {
  return LANE_PAD + Math.min(subs, MAX_SUBS_DRAWN) * SUB_H;
}

/** Lanes `[first, last)` of a layout that meet the vertical window [top, top + h). */
export function visibleLanes(layout, top, hgt) {
  const y = layout.y;
  const n = layout.lanes.length;
  let lo = 0, hi = n;
  while (lo < hi) { const m = (lo + hi) >> 1; if (y[m + 1] <= top) lo = m + 1; else hi = m; }
  let last = lo;
  while (last < n && y[last] < top + hgt) last++;
  return [lo, last];
}

/**
 * A step curve (`values[i]` held from `steps[i]` to the next step, the last one for one step)
 * over the window [v0, v1] on `pw` pixel columns: per column the largest value held within
 * it, -1 where the curve is not. O(changes + columns).
 */
export function columnMax(steps, values, v0, v1, pw) {
  const n = Math.max(1, Math.ceil(pw));
  const out = new Float64Array(n).fill(-1);
  const scale = pw / Math.max(1, v1 - v0);
  for (let i = 0; i < steps.length; i++) {
    const a = steps[i], b = i + 1 < steps.length ? steps[i + 1] : steps[i] + 1;
    if (b <= v0 || a > v1) continue;
    const c0 = Math.max(0, Math.floor((a - v0) * scale));
    const c1 = Math.min(n - 1, Math.max(c0, Math.ceil((b - v0) * scale) - 1));
    const v = values[i];
    for (let c = c0; c <= c1; c++) if (v > out[c]) out[c] = v;
  }
  return out;
}

/** The hold whose request is event `seq` (holds sorted by begin), or -1. */
export function holdOf(begin, seq) {
  let lo = 0, hi = begin.length;
  while (lo < hi) { const m = (lo + hi) >> 1; if (begin[m] < seq) lo = m + 1; else hi = m; }
  return lo < begin.length && begin[lo] === seq ? lo : -1;
}

/** Screen x of step `s` in the window [v0, v1] over a plot of width `w` starting at `left`. */
export function xOf(s, v0, v1, left, w) {
  return left + ((s - v0) / Math.max(1, v1 - v0)) * w;
}

export class TimelineView {
  constructor(app) {
    this.app = app;
    this.tl = decodeTimeline(app.meta.timeline);
    this.row = -1;
    this.layout = null;
    this.win = null; // [v0, v1] steps shown
    this.selHold = -1;
    this.drawn = null;
    this.picker = h("select", { class: "pv-select pv-tl-picker", "aria-label": "timeline block", title: "the block the timeline shows (selecting a grid cell shows its block)", onchange: (e) => this.setRow(+e.target.value) });
    this.info = h("span", { class: "pv-muted pv-tl-info" });
    const dev = this.tl ? this.tl.device : null;
    this.legend = h("div", { class: "pv-tl-legend", role: "list", "aria-label": "timeline legend" },
      app.protocol.spaces.map((s, i) => h("span", { class: "pv-legend-item", role: "listitem", title: `${s} buffer held` }, h("span", { class: `pv-bar pv-bar-${i}` }), s)),
      h("span", { class: "pv-legend-item", role: "listitem", title: "barrier allocation held" }, h("span", { class: "pv-bar pv-tl-bar-barrier" }), "barrier"),
      h("span", { class: "pv-legend-item", role: "listitem", title: "cluster barrier allocation held" }, h("span", { class: "pv-bar pv-tl-bar-cluster" }), "cluster barrier"),
      h("span", { class: "pv-legend-item", role: "listitem", title: "held to the block's end: never released" }, h("span", { class: "pv-bar pv-tl-bar-open" }), "never released"),
      h("span", { class: "pv-legend-item", role: "listitem", title: "barrier arrive (tick) and wait (line)" }, "┃ arrive ━ wait"),
      h("span", { class: "pv-legend-item", role: "listitem", title: `the device's limit per block (${dev ? dev.name : "?"})` }, h("span", { class: "pv-tl-limit-swatch" }), `limit ${dev ? dev.name : ""}`));
    this.curve = h("canvas", { class: "pv-tl-curve" });
    this.lanesCanvas = h("canvas", { class: "pv-tl-lanes" });
    this.sizer = h("div", { class: "pv-tl-sizer" });
    this.scroller = h("div", { class: "pv-tl-scroller", tabindex: "0", "aria-label": "allocation lanes of the block" }, this.lanesCanvas, this.sizer);
    this.tip = h("div", { class: "pv-tooltip pv-tl-tip", role: "tooltip" });
    this.plot = h("div", { class: "pv-tl-plot" }, this.curve, this.scroller, this.tip);
    this.peak = new PeakView(app, { onSelect: (seq, loc) => this.selectRequest(seq, loc) });
    this.el = h("div", { class: "pv-timeline" },
      h("div", { class: "pv-tl-head" }, h("span", { class: "pv-label", title: "which block's lanes and live memory" }, "block"), this.picker,
        h("button", { class: "pv-btn", title: "fit the whole block (or double-click the plot)", onclick: () => { this.win = null; this.draw(); } }, "fit"), this.info),
      this.legend, this.plot, this.peak.el);
    this.scroller.addEventListener("scroll", () => this.drawLanes());
    for (const c of [this.curve, this.lanesCanvas]) {
      c.addEventListener("mousemove", (e) => this.hover(e, c));
      c.addEventListener("mouseleave", () => { this.tip.style.display = "none"; });
      c.addEventListener("click", (e) => this.click(e, c));
      c.addEventListener("dblclick", () => { this.win = null; this.draw(); });
      c.addEventListener("wheel", (e) => this.wheel(e, c), { passive: false });
    }
    // redraw when the pane's width changes (not for its first size, nor its height: the
    // draw that attached it already used them)
    this.resizeObs = typeof ResizeObserver !== "undefined" ? new ResizeObserver(() => { if (this.el.clientWidth !== this.drawnWidth) this.draw(); }) : null;
    if (this.resizeObs) this.resizeObs.observe(this.el);
  }

  get visible() {
    return this.app.store.state.tab === "timeline" && this.el.isConnected;
  }

  /** The block row shown by default: the first root cause's, else the selected cell's. */
  defaultRow() {
    const app = this.app;
    const f = app.meta.findings[0];
    if (f && f.rows && f.rows.length) return f.rows[0];
    const sel = app.store.state.sel;
    if (sel >= 0) return app.data.cells.row[sel];
    const k = app.store.state.kernel;
    return app.meta.rows.findIndex((r) => r.kernel === k);
  }

  /** Show block row `r` (its kernel's blocks in the picker). */
  setRow(r) {
    if (r < 0 || r === this.row || !this.tl) return;
    this.row = r;
    this.layout = null;
    this.win = null;
    this.selHold = -1;
    this.allocEvents = null;
    this.fillPicker();
    this.scroller.scrollTop = 0;
    this.draw();
  }

  fillPicker() {
    const meta = this.app.meta;
    const k = meta.rows[this.row].kernel;
    const opts = [];
    const MAX = 2000;
    meta.rows.forEach((r, i) => {
      if (r.kernel === k && (opts.length < MAX || i === this.row)) opts.push(h("option", { value: i, selected: i === this.row ? "" : null }, `block ${r.label}`));
    });
    replace(this.picker, opts);
    this.picker.value = String(this.row);
  }

  /** Follow the grid: a selected cell shows its block. */
  changed(changed) {
    const st = this.app.store.state;
    if (changed.has("sel") && st.sel >= 0) {
      const r = this.app.data.cells.row[st.sel];
      if (r !== this.row) { this.setRow(r); return; }
    }
    if (changed.has("tab") || changed.has("step") || changed.has("mode") || changed.has("gridOnly")) this.draw();
    if (changed.has("selEvent")) this.peak.mark();
  }

  ensureLayout() {
    if (this.row < 0) this.setRow(this.defaultRow());
    if (this.layout || this.row < 0) return this.layout;
    const app = this.app;
    const r = app.meta.rows[this.row];
    const k = app.meta.kernels.find((x) => x.index === r.kernel);
    const threads = k ? k.threads : 1;
    const sm = curveOf(this.tl.smem, this.row);
    let x0 = sm.steps.length ? sm.steps[0] : 0;
    let x1 = sm.steps.length ? sm.steps[sm.steps.length - 1] + 1 : 1;
    const holds = { begin: this.tl.begin, end: this.tl.end };
    const L = blockLayout({ holds, cell: app.data.ev.cell, warp: app.data.ev.warp, start: r.start, threads, x1, ops: this.tl.ops });
    // ops after the block's last event (a wait that ends later) widen the window
    for (const ln of L.lanes) for (const j of ln.ops) { x1 = Math.max(x1, this.tl.ops.step[j] + 1, this.tl.ops.end[j] + 1); x0 = Math.min(x0, this.tl.ops.step[j]); }
    L.x0 = x0;
    L.x1 = x1;
    L.threads = threads;
    L.kernel = r.kernel;
    this.layout = L;
    const tm = curveOf(this.tl.tmem, this.row);
    this.hasTmem = this.tl.peaks[this.row * 4 + 2] > 0 || (tm.values.length > 0 && this.tl.device.has_tmem && tm.values.some((v) => v > 0));
    const pk = this.tl.peaks;
    const dev = this.tl.device;
    const bars = L.lanes.reduce((s, ln) => s + ln.bars.length, 0);
    this.peak.render(this.row);
    this.info.textContent = inert(`${bars} hold${bars === 1 ? "" : "s"} · SMEM peak ${fmtBytes(Math.max(0, pk[this.row * 4]))} of ${fmtBytes(dev.smem_per_block)} (${dev.name})`
      + (this.hasTmem ? ` · TMEM peak ${pk[this.row * 4 + 2]} of ${dev.tmem_columns} columns` : ""));
    return L;
  }

  window() {
    const L = this.layout;
    return this.win || [L.x0, L.x1];
  }

  plotWidth(canvas) {
    return Math.max(10, canvas.clientWidth - LABEL_W - RIGHT_PAD);
  }

  draw() {
    if (!this.tl || !this.visible) return;
    if (!this.ensureLayout()) return;
    this.drawnWidth = this.el.clientWidth;
    this.drawn = { row: this.row, lanes: [], curve: null, cursor: null };
    this.drawCurve();
    this.drawLanes();
  }

  /** Size a canvas to its CSS box (device pixels) and return its 2D context. */
  ctxOf(canvas, cssW, cssH) {
    const dpr = (typeof devicePixelRatio === "number" && devicePixelRatio) || 1;
    if (canvas.width !== Math.round(cssW * dpr) || canvas.height !== Math.round(cssH * dpr)) {
      canvas.width = Math.round(cssW * dpr);
      canvas.height = Math.round(cssH * dpr);
      canvas.style.width = `${cssW}px`;
      canvas.style.height = `${cssH}px`;
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, cssW, cssH);
    return ctx;
  }

  cursorStep() {
    const st = this.app.store.state;
    if (st.mode !== "live") return null;
    return this.app.replayEvent - 1;
  }

  drawCurve() {
    const app = this.app;
    const C = app.theme.colors();
    const w = this.plot.clientWidth || 600;
    const hgt = CURVE_H + (this.hasTmem ? TMEM_H : 0);
    const ctx = this.ctxOf(this.curve, w, hgt);
    const pw = w - LABEL_W - RIGHT_PAD;
    const [v0, v1] = this.window();
    const dev = this.tl.device;
    const out = {};
    const strip = (curve, top, sh, limit, label, fmt, color) => {
      const { steps, values } = curveOf(curve, this.row);
      let peak = -1, peakStep = -1;
      for (let i = 0; i < values.length; i++) if (values[i] > peak) { peak = values[i]; peakStep = steps[i]; }
      const ymax = Math.max(limit, peak, 1) * 1.1;
      const yOf = (v) => top + sh - 4 - (v / ymax) * (sh - 12);
      ctx.fillStyle = C.muted;
      ctx.font = `11px ${C.ui}`;
      ctx.textBaseline = "middle";
      ctx.fillText(inert(label), 4, top + sh / 2);
      ctx.strokeStyle = C.border;
      ctx.lineWidth = 1;
      ctx.beginPath(); ctx.moveTo(LABEL_W, top + sh - 4 + 0.5); ctx.lineTo(LABEL_W + pw, top + sh - 4 + 0.5); ctx.stroke();
      // the step curve (each value held to the next step), filled below
      ctx.save();
      ctx.beginPath(); ctx.rect(LABEL_W, top, pw, sh); ctx.clip();
      if (steps.length > 2 * pw) {
        // more changes than pixels: one level per pixel column, its largest value (the
        // peak stays visible), a few thousand segments instead of one per change
        const cols = columnMax(steps, values, v0, v1, pw);
        ctx.beginPath();
        let started = false, lastX = LABEL_W;
        for (let c = 0; c < cols.length; c++) {
          if (cols[c] < 0) continue;
          const x = LABEL_W + c, y = yOf(cols[c]);
          if (!started) { ctx.moveTo(x, yOf(0)); started = true; }
          ctx.lineTo(x, y); ctx.lineTo(x + 1, y);
          lastX = x + 1;
        }
        ctx.lineTo(lastX, yOf(0));
        ctx.closePath();
      } else if (steps.length) {
        ctx.beginPath();
        ctx.moveTo(xOf(steps[0], v0, v1, LABEL_W, pw), yOf(0));
        for (let i = 0; i < steps.length; i++) {
          const x = xOf(steps[i], v0, v1, LABEL_W, pw);
          if (i) ctx.lineTo(x, yOf(values[i - 1]));
          ctx.lineTo(x, yOf(values[i]));
        }
        ctx.lineTo(xOf(steps[steps.length - 1] + 1, v0, v1, LABEL_W, pw), yOf(values[values.length - 1]));
        ctx.lineTo(xOf(steps[steps.length - 1] + 1, v0, v1, LABEL_W, pw), yOf(0));
        ctx.closePath();
        ctx.globalAlpha = 0.18; ctx.fillStyle = color; ctx.fill(); ctx.globalAlpha = 1;
        ctx.strokeStyle = color; ctx.lineWidth = 1.5; ctx.stroke();
      }
      ctx.restore();
      const res = { peak, peakStep, limit, limitY: null, peakX: null, peakY: null };
      if (limit > 0) {
        const ly = Math.round(yOf(limit)) + 0.5;
        ctx.strokeStyle = C.errS; ctx.lineWidth = 1.2; ctx.setLineDash([5, 4]);
        ctx.beginPath(); ctx.moveTo(LABEL_W, ly); ctx.lineTo(LABEL_W + pw, ly); ctx.stroke(); ctx.setLineDash([]);
        ctx.fillStyle = C.errS; ctx.textAlign = "right"; ctx.textBaseline = "bottom";
        ctx.fillText(inert(`limit ${fmt(limit)} (${dev.name})`), LABEL_W + pw, ly - 1);
        ctx.textAlign = "left";
        res.limitY = ly;
      }
      if (peak > 0) {
        const px = xOf(peakStep, v0, v1, LABEL_W, pw), py = yOf(peak);
        ctx.fillStyle = peak > limit && limit > 0 ? C.errS : color;
        ctx.beginPath(); ctx.arc(px, py, 3.5, 0, 2 * Math.PI); ctx.fill();
        ctx.textBaseline = "bottom";
        const text = `peak ${fmt(peak)} at step ${peakStep}`;
        const tw = ctx.measureText(text).width;
        ctx.fillText(inert(text), Math.min(Math.max(LABEL_W, px + 5), LABEL_W + pw - tw), Math.max(top + 11, py - 3));
        res.peakX = px; res.peakY = py;
      }
      return res;
    };
    out.smem = strip(this.tl.smem, 0, CURVE_H, dev.smem_per_block, "live SMEM", fmtBytes, C.space1);
    if (this.hasTmem) out.tmem = strip(this.tl.tmem, CURVE_H, TMEM_H, dev.tmem_columns, "live TMEM", (v) => `${v} col`, C.space2);
    const cs = this.cursorStep();
    if (cs != null && cs >= v0 && cs <= v1) {
      const x = Math.round(xOf(cs + 0.5, v0, v1, LABEL_W, pw)) + 0.5;
      ctx.strokeStyle = C.accent; ctx.lineWidth = 1.5;
      ctx.beginPath(); ctx.moveTo(x, 0); ctx.lineTo(x, hgt); ctx.stroke();
      this.drawn.cursor = x;
    }
    this.drawn.curve = out;
    this.el.dataset.curve = JSON.stringify(out);
  }

  drawLanes() {
    if (!this.layout || !this.visible) return;
    const app = this.app;
    const C = app.theme.colors();
    const L = this.layout;
    const tl = this.tl;
    const ev = app.data.ev;
    const w = this.scroller.clientWidth || this.plot.clientWidth || 600;
    const viewH = Math.max(40, Math.min(L.height + 2, 320));
    this.scroller.style.height = `${viewH}px`;
    this.sizer.style.height = `${L.height}px`;
    const top = this.scroller.scrollTop;
    this.lanesCanvas.style.top = `${top}px`;
    const ctx = this.ctxOf(this.lanesCanvas, w, viewH);
    const pw = w - LABEL_W - RIGHT_PAD;
    const [v0, v1] = this.window();
    const [first, last] = visibleLanes(L, top, viewH);
    const bufferCode = app.data.RES.buffer;
    const barrierCode = app.data.RES.barrier;
    const lanes = [];
    const F = app.protocol.flags;
    const tw = threadWord(app.meta, L.kernel);
    ctx.font = `11px ${C.ui}`;
    ctx.textBaseline = "middle";
    const runColor = new Array(MAX_SUBS_DRAWN).fill(null); // per sub-row: the bars being merged
    const runX0 = new Float64Array(MAX_SUBS_DRAWN), runX1 = new Float64Array(MAX_SUBS_DRAWN);
    for (let li = first; li < last; li++) {
      const ln = L.lanes[li];
      const y0 = L.y[li] - top;
      const lh = L.y[li + 1] - L.y[li];
      if (li > first && L.lanes[li - 1].thread !== ln.thread) {
        ctx.strokeStyle = C.border; ctx.lineWidth = 1;
        ctx.beginPath(); ctx.moveTo(0, Math.round(y0) + 0.5); ctx.lineTo(w, Math.round(y0) + 0.5); ctx.stroke();
      }
      const flags = app.data.cells.flags[ln.cell];
      ctx.fillStyle = flags & (F.error | F.failed) ? C.errS : C.fg;
      ctx.fillText(inert(`${tw} ${ln.thread}${ln.warp >= 0 ? ` · w${ln.warp}` : ""}`), 6, y0 + lh / 2);
      const sh = (lh - LANE_PAD) / Math.min(ln.subs, MAX_SUBS_DRAWN);
      let drawnBars = 0;
      ctx.save();
      ctx.beginPath(); ctx.rect(LABEL_W, y0, pw, lh); ctx.clip();
      // Bars of one colour that touch in a sub-row (no gap of half a pixel) are filled as one
      // rectangle: the same pixels, but at a block of 100k holds a few thousand fills instead
      // of one per hold. Outlines (lit, selected) go on top once the fills are done.
      runColor.fill(null);
      const flush = (s) => {
        if (runColor[s] === null) return;
        ctx.fillStyle = runColor[s];
        ctx.fillRect(runX0[s], y0 + LANE_PAD / 2 + s * sh, runX1[s] - runX0[s], sh - 1);
        runColor[s] = null;
      };
      const outlines = [];
      const lit = app.litEvents.size > 0;
      for (const i of ln.bars) {
        const b = tl.begin[i];
        const open = tl.end[i] < 0;
        const e = open ? L.x1 : tl.end[i];
        if (e < v0 || b > v1) continue;
        const x = xOf(b, v0, v1, LABEL_W, pw);
        const bw = Math.max(2, xOf(e, v0, v1, LABEL_W, pw) - x);
        const sub = Math.min(L.holdSub[i], MAX_SUBS_DRAWN - 1);
        const by = y0 + LANE_PAD / 2 + sub * sh;
        const res = ev.resource[b];
        const sp = ev.space[b];
        const color = res === bufferCode ? (sp >= 0 ? C.spaces[sp] : C.muted) : res === barrierCode ? C.collS : CLUSTER_BARRIER;
        if (open) {
          flush(sub);
          ctx.fillStyle = color;
          ctx.globalAlpha = 0.45; ctx.fillRect(x, by, bw, sh - 1); ctx.globalAlpha = 1;
          ctx.strokeStyle = C.errS; ctx.lineWidth = 1.2; ctx.setLineDash([4, 3]);
          ctx.strokeRect(x + 0.5, by + 0.5, bw - 1, sh - 2); ctx.setLineDash([]);
        } else if (runColor[sub] === color && x <= runX1[sub] + 0.5) {
          runX1[sub] = Math.max(runX1[sub], x + bw);
        } else {
          flush(sub);
          runColor[sub] = color; runX0[sub] = x; runX1[sub] = x + bw;
        }
        if (lit && app.litEvents.has(b)) outlines.push([C.errS, 2, x + 1, by + 1, bw - 2, sh - 3]);
        if (i === this.selHold) outlines.push([C.accent, 2.5, x, by, bw, sh - 1]);
        drawnBars++;
      }
      for (let s = 0; s < MAX_SUBS_DRAWN; s++) flush(s);
      for (const [color, width, ox, oy, ow, oh] of outlines) { ctx.strokeStyle = color; ctx.lineWidth = width; ctx.strokeRect(ox, oy, ow, oh); }
      // barrier operations: arrivals as ticks, waits as lines (dashed while never ended)
      let ticks = 0;
      ctx.strokeStyle = C.fg;
      for (const j of ln.ops) {
        const kind = tl.ops.kinds[tl.ops.kind[j]];
        const s = tl.ops.step[j];
        const x = Math.round(xOf(s + 0.5, v0, v1, LABEL_W, pw)) + 0.5;
        if (kind === "arrive") {
          ctx.lineWidth = 2; ctx.beginPath(); ctx.moveTo(x, y0 + 1); ctx.lineTo(x, y0 + lh - 1); ctx.stroke(); ticks++;
        } else if (kind === "wait_start") {
          const end = tl.ops.end[j];
          const x2 = xOf((end >= 0 ? end : L.x1) + 0.5, v0, v1, LABEL_W, pw);
          ctx.lineWidth = 3; if (end < 0) ctx.setLineDash([4, 3]);
          ctx.beginPath(); ctx.moveTo(x, y0 + lh / 2); ctx.lineTo(Math.max(x + 2, x2), y0 + lh / 2); ctx.stroke(); ctx.setLineDash([]);
          ctx.lineWidth = 1; ctx.beginPath(); ctx.moveTo(x, y0 + lh / 2 - 4); ctx.lineTo(x, y0 + lh / 2 + 4); ctx.stroke();
          ticks++;
        }
      }
      ctx.restore();
      lanes.push({ lane: li, thread: ln.thread, warp: ln.warp, cell: ln.cell, bars: drawnBars, holds: ln.bars.length, ticks, y: y0 });
    }
    const cs = this.cursorStep();
    let cursor = null;
    if (cs != null && cs >= v0 && cs <= v1) {
      cursor = Math.round(xOf(cs + 0.5, v0, v1, LABEL_W, pw)) + 0.5;
      ctx.strokeStyle = C.accent; ctx.lineWidth = 1.5;
      ctx.beginPath(); ctx.moveTo(cursor, 0); ctx.lineTo(cursor, viewH); ctx.stroke();
    }
    if (this.drawn) { this.drawn.lanes = lanes; this.drawn.laneCursor = cursor; }
    this.el.dataset.lanes = JSON.stringify(lanes);
    this.el.dataset.row = String(this.row);
    this.el.dataset.cursor = cursor == null ? "" : String(cursor);
    this.el.dataset.window = JSON.stringify([v0, v1]);
  }

  /** The step under x, or null left of the plot. */
  stepAt(x, canvas) {
    const pw = this.plotWidth(canvas);
    if (x < LABEL_W) return null;
    const [v0, v1] = this.window();
    return v0 + ((x - LABEL_W) / pw) * (v1 - v0);
  }

  /** The hold under a point of the lanes canvas, or -1. */
  holdAt(x, y) {
    const L = this.layout;
    if (!L || x < LABEL_W) return -1;
    const yy = y + this.scroller.scrollTop;
    const [li] = visibleLanes(L, yy, 1);
    const ln = L.lanes[li];
    if (!ln || yy < L.y[li] || yy >= L.y[li + 1]) return -1;
    const lh = L.y[li + 1] - L.y[li];
    const sh = (lh - LANE_PAD) / Math.min(ln.subs, MAX_SUBS_DRAWN);
    const sub = Math.floor((yy - L.y[li] - LANE_PAD / 2) / sh);
    const pw = this.plotWidth(this.lanesCanvas);
    const [v0, v1] = this.window();
    let best = -1;
    for (const i of ln.bars) {
      if (Math.min(L.holdSub[i], MAX_SUBS_DRAWN - 1) !== sub) continue;
      const b = this.tl.begin[i];
      const e = this.tl.end[i] < 0 ? L.x1 : this.tl.end[i];
      const xa = xOf(b, v0, v1, LABEL_W, pw);
      const xb = xa + Math.max(2, xOf(e, v0, v1, LABEL_W, pw) - xa);
      if (x >= xa - 1 && x <= xb + 1) best = i; // the latest bar that starts here wins
    }
    return best;
  }

  /** Events of each allocation of the shown block (for the tooltip's ref counts). */
  eventsOfAlloc(a) {
    if (!this.allocEvents) {
      const m = (this.allocEvents = new Map());
      const { ev } = this.app.data;
      const r = this.app.meta.rows[this.row];
      const lo = r.start, hi = r.start + this.layout.threads;
      const cell = ev.cell, alloc = ev.alloc;
      for (let i = 0; i < cell.length; i++) {
        if (cell[i] < lo || cell[i] >= hi || alloc[i] < 0) continue;
        if (!m.has(alloc[i])) m.set(alloc[i], []);
        m.get(alloc[i]).push(i);
      }
    }
    return this.allocEvents.get(a) || [];
  }

  holdLines(i) {
    const app = this.app;
    const { ev, protocol: p, det } = app.data;
    const b = this.tl.begin[i], e = this.tl.end[i];
    const d = app.describe(b);
    const ln = this.layout.lanes[this.layout.holdLane[i]];
    const lines = [`${d.what || "allocation"} · ${threadWord(app.meta, this.layout.kernel)} ${ln.thread}${ln.warp >= 0 ? ` · warp ${ln.warp}` : ""}`];
    lines.push(`${p.ops[ev.op[b]]} at step ${b} → ${e >= 0 ? `${p.ops[ev.op[e]]} at step ${e}` : "never released"}${ev.nbytes[b] ? ` · ${fmtBytes(ev.nbytes[b])}` : ""}`);
    if (det) {
      const seqs = this.eventsOfAlloc(ev.alloc[b]);
      const parts = [];
      for (const s of seqs) {
        const op = p.ops[ev.op[s]];
        if (op === "create" || op === "join" || op === "release" || op === "free") parts.push(`${det.ref_count[s]}${op === "release" || op === "free" ? ` (${op} t${app.data.cells.thread[ev.cell[s]]} @${s})` : ""}`);
      }
      if (parts.length) lines.push(`ref count: ${parts.slice(0, 12).join(" → ")}${parts.length > 12 ? " …" : ""}`);
    }
    if (d.loc) lines.push(locLabel(d.loc));
    return lines;
  }

  hover(e, canvas) {
    if (!this.layout) return;
    const r = canvas.getBoundingClientRect();
    const x = e.clientX - r.left, y = e.clientY - r.top;
    let lines = null;
    if (canvas === this.lanesCanvas) {
      const i = this.holdAt(x, y);
      if (i >= 0) lines = this.holdLines(i);
    }
    if (!lines) {
      const s = this.stepAt(x, canvas);
      if (s == null) { this.tip.style.display = "none"; return; }
      const step = Math.floor(s);
      const { steps, values } = curveOf(this.tl.smem, this.row);
      let v = 0;
      for (let k = 0; k < steps.length && steps[k] <= step; k++) v = values[k];
      lines = [`step ${step}`, `live SMEM ${fmtBytes(v)} of ${fmtBytes(this.tl.device.smem_per_block)}`, "click: replay to this step"];
    }
    replace(this.tip, ...lines.map((l, k) => h("div", { class: k ? "" : "pv-tip-head" }, l)));
    const pr = this.plot.getBoundingClientRect();
    this.tip.style.display = "block";
    this.tip.style.left = `${Math.min(e.clientX - pr.left + 12, Math.max(0, pr.width - 330))}px`;
    this.tip.style.top = `${e.clientY - pr.top + 14}px`;
  }

  click(e, canvas) {
    if (!this.layout) return;
    const r = canvas.getBoundingClientRect();
    const x = e.clientX - r.left, y = e.clientY - r.top;
    const i = canvas === this.lanesCanvas ? this.holdAt(x, y) : -1;
    if (i >= 0) { this.selectHold(i); return; }
    const s = this.stepAt(x, canvas);
    if (s == null) return;
    const app = this.app;
    app.seek(app.steps.fromEvent(Math.max(0, Math.floor(s)) + 1), { follow: false });
  }

  /** Select a hold: its cell, its request (and its line), its bar outlined. */
  selectHold(i, loc = null) {
    const app = this.app;
    const b = this.tl.begin[i];
    this.selHold = i;
    const c = app.data.ev.cell[b];
    if (c >= 0) app.selectCell(c, { keepFinding: app.lit.has(c) || app.litSecondary.has(c), scroll: true });
    app.selectEvent(b, app.describe(b).loc || loc);
    this.el.dataset.selected = String(b);
    this.draw();
  }

  /** Select request `seq` (a buffer live at the peak): its bar when it has one, else (a
   * kernel-level request) the event and its line. */
  selectRequest(seq, loc) {
    const i = holdOf(this.tl.begin, seq);
    if (i >= 0) { this.selectHold(i, loc); return; }
    this.selHold = -1;
    this.app.selectEvent(seq, this.app.describe(seq).loc || loc);
    this.el.dataset.selected = String(seq);
    this.draw();
  }

  wheel(e, canvas) {
    if (!this.layout || !(e.ctrlKey || e.shiftKey || e.metaKey)) return;
    e.preventDefault();
    const s = this.stepAt(e.clientX - canvas.getBoundingClientRect().left, canvas);
    if (s == null) return;
    const [v0, v1] = this.window();
    const f = e.deltaY > 0 ? 1.25 : 0.8;
    const L = this.layout;
    const n0 = Math.max(L.x0, s - (s - v0) * f), n1 = Math.min(L.x1, s + (v1 - s) * f);
    this.win = n1 - n0 >= 2 ? [n0, n1] : this.win;
    this.draw();
  }

  destroy() {
    if (this.resizeObs) this.resizeObs.disconnect();
  }
}
