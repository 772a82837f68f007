// The blocks x threads grid: a virtualised canvas (only the rows in view are drawn), a
// tooltip, keyboard navigation, and a visually hidden table with the same content for
// screen readers. Cells of threads that never made a finding's request are drawn hatched
// and hollow; runs of alike blocks are one (stacked) row.
import { NSPACES } from "../data.js";
import { fmtBytes, fmtCount, h, inert, replace } from "../format.js";
import { moveCursor } from "../layout.js";
import { threadWord } from "../names.js";

const A11Y_MAX_ROWS = 300;

export class GridView {
  constructor(app) {
    this.app = app;
    this.canvas = h("canvas", { class: "pv-canvas", "aria-hidden": "true" });
    this.sizer = h("div", { class: "pv-sizer" }, this.canvas);
    this.tooltip = h("div", { class: "pv-tooltip", role: "tooltip" });
    this.live = h("div", { class: "pv-sr-only", "aria-live": "polite" });
    this.scroller = h("div", {
      class: "pv-scroller", tabindex: "0", role: "application",
      "aria-label": "blocks by threads grid: arrow keys move, Enter lists the cell's events, n and N jump to the next and previous error cell",
      "aria-roledescription": "grid",
    }, this.sizer);
    this.table = h("table", { class: "pv-sr-only pv-a11y-grid" });
    this.el = h("div", { class: "pv-gridwrap" }, this.scroller, this.tooltip, this.live, this.table);
    this.cursor = { v: 0, t: 0 };
    this.focused = false;
    this.scroller.addEventListener("scroll", () => { this.draw(); this.app.emit("gridscroll"); });
    this.scroller.addEventListener("mousemove", (e) => this.hover(e));
    this.scroller.addEventListener("mouseleave", () => { this.tooltip.style.display = "none"; });
    this.scroller.addEventListener("click", (e) => this.click(e));
    this.scroller.addEventListener("keydown", (e) => this.key(e));
    this.scroller.addEventListener("focus", () => { this.focused = true; this.draw(); });
    this.scroller.addEventListener("blur", () => { this.focused = false; this.draw(); });
  }

  get layout() { return this.app.layout; }

  // ---- drawing
  draw() {
    const app = this.app;
    const L = this.layout;
    if (!L || app.suspended || app.destroyed) return;
    const sc = this.scroller;
    this.sizer.style.width = `${L.width}px`;
    this.sizer.style.height = `${L.height}px`;
    if (!sc.clientWidth || !sc.clientHeight) {
      if (!app.resizeObs && (this._layoutWaits = (this._layoutWaits || 0) + 1) < 300) requestAnimationFrame(() => this.draw());
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
    const C = app.theme.colors();
    if (!app.theme.ready && (this._styleWaits = (this._styleWaits || 0) + 1) < 300) requestAnimationFrame(() => this.draw());
    ctx.fillStyle = C.panel;
    ctx.fillRect(0, 0, W, H);
    ctx.save();
    ctx.translate(-sx, -sy);
    const [first, last] = L.visibleRange(sy, H);
    const g = L.g;
    const st = app.store.state;
    const live = st.mode === "live";
    const rp = live ? app.replay : null;
    const curEv = live && rp.step > 0 ? rp.step - 1 : -1;
    const cur = curEv >= 0 ? app.data.ev.cell[curEv] : -1;
    const flagsArr = app.data.cells.flags;
    const F = app.protocol.flags;
    const lit = app.lit, litSecondary = app.litSecondary, missing = app.missing;
    const dim = lit.size > 0;
    let maxBytes = 1;
    if (live) {
      for (let v = first; v <= last; v++) {
        if (L.vrows[v].warp >= 0) continue;
        for (let t = 0; t < L.threads; t++) {
          const c = L.cellAt(v, t);
          let b = 0;
          for (let s = 0; s < NSPACES; s++) b += rp.bytes[c * NSPACES + s];
          maxBytes = Math.max(maxBytes, b);
        }
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
        const miss = vr.warp < 0 && !live && missing.has(c);
        if (vr.warp >= 0) {
          const n = (app.warps.get(vr.row) || new Map()).get(vr.warp * 65536 + t) || 0;
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
          const n = app.counts[c];
          if (miss) { fill = C.panel; stroke = C.errS; }
          else if (flags & F.failed) { fill = C.fail; stroke = C.failS; }
          else if (flags & F.error) { fill = C.err; stroke = C.errS; }
          else if (flags & F.warning) { fill = C.warn; stroke = C.warnS; }
          else if (flags & F.collective) { fill = C.coll; stroke = C.collS; }
          else if (n) { fill = C.clean; stroke = C.cleanS; }
          else { fill = C.empty; stroke = C.border; }
          text = fmtCount(n);
        }
        ctx.globalAlpha = dim && !lit.has(c) && !litSecondary.has(c) ? 0.35 : 1;
        if (vr.fold) { // a stack: several alike blocks behind this one
          for (const d of [6, 3]) {
            roundRect(ctx, x + d, y - d / 2, w, hh, 5);
            ctx.fillStyle = fill; ctx.fill(); ctx.lineWidth = 1; ctx.strokeStyle = stroke; ctx.stroke();
          }
        }
        roundRect(ctx, x, y, w, hh, 5);
        ctx.fillStyle = fill; ctx.fill();
        if (miss) {
          // never made the request: hollow, hatched, dashed outline
          ctx.save();
          roundRect(ctx, x, y, w, hh, 5);
          ctx.clip();
          ctx.strokeStyle = C.errS; ctx.lineWidth = 1.5; ctx.globalAlpha *= 0.55;
          ctx.beginPath();
          for (let k = -hh; k < w; k += 7) { ctx.moveTo(x + k, y + hh); ctx.lineTo(x + k + hh, y); }
          ctx.stroke();
          ctx.restore();
          roundRect(ctx, x, y, w, hh, 5);
          ctx.lineWidth = 2; ctx.setLineDash([4, 3]); ctx.strokeStyle = C.errS; ctx.stroke(); ctx.setLineDash([]);
        } else {
          ctx.lineWidth = 1; ctx.strokeStyle = stroke; ctx.stroke();
        }
        if (live && vr.warp < 0) {
          let bx = x + 4;
          for (let s = 0; s < NSPACES; s++) {
            const bw = ((w - 8) * rp.bytes[c * NSPACES + s]) / maxBytes;
            if (bw > 0) { ctx.fillStyle = C.spaces[s]; ctx.fillRect(bx, y + hh - 6, bw, 4); bx += bw; }
          }
        }
        if (vr.warp < 0 && !live) drawMarker(ctx, miss ? -1 : flags, F, C, x + 11, y + 11);
        ctx.fillStyle = C.fg;
        ctx.font = `600 12px ${C.mono}`;
        ctx.textAlign = "right";
        ctx.fillText(inert(text), x + w - 7, y + (sub ? hh / 2 - 4 : hh / 2));
        if (sub) {
          ctx.font = `10px ${C.ui}`; ctx.fillStyle = C.muted;
          ctx.fillText(inert(sub), x + w - 7, y + hh / 2 + 7);
        }
        ctx.globalAlpha = 1;
        if (lit.has(c)) {
          const f = app.meta.findings[st.finding];
          roundRect(ctx, x - 1.5, y - 1.5, w + 3, hh + 3, 6);
          ctx.lineWidth = 2; ctx.strokeStyle = f && f.severity === "warning" ? C.warnS : C.errS; ctx.stroke();
        } else if (litSecondary.has(c)) {
          roundRect(ctx, x - 1.5, y - 1.5, w + 3, hh + 3, 6);
          ctx.lineWidth = 1.5; ctx.setLineDash([4, 3]); ctx.strokeStyle = C.errS; ctx.stroke(); ctx.setLineDash([]);
        }
        if (c === st.sel && vr.warp < 0) {
          roundRect(ctx, x - 3.5, y - 3.5, w + 7, hh + 7, 7);
          ctx.lineWidth = 2.5; ctx.strokeStyle = C.accent; ctx.stroke();
        }
        if (c === cur && vr.warp < 0) {
          roundRect(ctx, x + 2, y + 2, w - 4, hh - 4, 4);
          ctx.lineWidth = 2; ctx.setLineDash([3, 2]); ctx.strokeStyle = C.accent; ctx.stroke(); ctx.setLineDash([]);
        }
        if (v === this.cursor.v && t === this.cursor.t && this.focused) {
          roundRect(ctx, x - 5, y - 5, w + 10, hh + 10, 8);
          ctx.lineWidth = 1.5; ctx.setLineDash([2, 2]); ctx.strokeStyle = C.fg; ctx.stroke(); ctx.setLineDash([]);
        }
      }
    }
    ctx.restore();
    // sticky row labels
    const labelsW = g.pad + g.labelW - 6;
    ctx.fillStyle = C.panel;
    ctx.fillRect(0, 0, labelsW, H);
    if (sx > 0) { ctx.fillStyle = C.border; ctx.fillRect(labelsW - 1, 0, 1, H); }
    ctx.textAlign = "left";
    for (let v = first; v <= last; v++) {
      const vr = L.vrows[v];
      const y = L.cellXY(v, 0)[1] - sy + g.cellH / 2;
      const r = app.meta.rows[vr.row];
      if (vr.warp >= 0) {
        ctx.font = `11px ${C.ui}`; ctx.fillStyle = C.muted;
        ctx.fillText(`warp ${vr.warp}`, g.pad + 26, y);
      } else if (vr.fold) {
        const last = app.meta.rows[vr.fold[1]];
        ctx.fillStyle = C.muted; ctx.font = `10px ${C.ui}`;
        ctx.fillText("▸", g.pad, y);
        ctx.font = `12px ${C.mono}`; ctx.fillStyle = C.fg;
        fitText(ctx, `${r.label}…${last.label}`, g.pad + 12, y - 6, g.labelW - 18);
        ctx.font = `10px ${C.ui}`; ctx.fillStyle = C.muted;
        fitText(ctx, `×${vr.fold[1] - vr.fold[0] + 1} alike, clean`, g.pad + 12, y + 8, g.labelW - 18);
      } else {
        const hasWarps = app.warps.has(vr.row);
        ctx.fillStyle = C.muted; ctx.font = `10px ${C.ui}`;
        if (hasWarps) ctx.fillText(app.expanded.has(vr.row) ? "▾" : "▸", g.pad, y);
        ctx.font = `12px ${C.mono}`; ctx.fillStyle = C.fg;
        fitText(ctx, r.label, g.pad + 12, y, g.labelW - 18);
      }
    }
    // sticky header
    const headH = g.pad + g.headerH - 4;
    ctx.fillStyle = C.panel;
    ctx.fillRect(0, 0, W, headH);
    if (sy > 0) { ctx.fillStyle = C.border; ctx.fillRect(0, headH - 1, W, 1); }
    ctx.font = `11px ${C.ui}`; ctx.fillStyle = C.muted; ctx.textAlign = "center";
    const tw = threadWord(app.meta, st.kernel);
    for (let t = 0; t < L.threads; t++) {
      const x = L.cellXY(0, t)[0] - sx + g.cellW / 2;
      if (x > g.labelW) ctx.fillText(inert(`${tw} ${t}`), x, g.pad + g.headerH / 2 - 2);
    }
    ctx.textAlign = "left";
    const k = app.meta.kernels.find((kk) => kk.index === st.kernel);
    ctx.fillText(k && k.cluster_dims ? "grid c(cluster)" : "block (grid)", g.pad, g.pad + g.headerH / 2 - 2);
  }

  // ---- accessible table (rows x threads with states), for screen readers
  renderTable() {
    const app = this.app;
    const L = this.layout;
    const tw = threadWord(app.meta, app.store.state.kernel);
    const n = Math.min(L.vrows.length, A11Y_MAX_ROWS);
    const rows = [];
    for (let v = 0; v < n; v++) {
      const vr = L.vrows[v];
      if (vr.warp >= 0) continue;
      const r = app.meta.rows[vr.row];
      const label = vr.fold ? `blocks ${r.label} to ${app.meta.rows[vr.fold[1]].label}, ${vr.fold[1] - vr.fold[0] + 1} alike clean` : `block ${r.label}`;
      const cells = [];
      for (let t = 0; t < L.threads; t++) cells.push(h("td", {}, this.stateText(L.cellAt(v, t))));
      rows.push(h("tr", {}, h("th", { scope: "row" }, label), cells));
    }
    const head = h("tr", {}, h("th", { scope: "col" }, "block"),
      Array.from({ length: L.threads }, (_, t) => h("th", { scope: "col" }, `${tw} ${t}`)));
    replace(this.table,
      h("caption", {}, `Blocks by ${tw}: state of each cell${L.vrows.length > n ? ` (first ${n} rows of ${L.vrows.length})` : ""}`),
      h("thead", {}, head), h("tbody", {}, rows));
  }

  /** One cell's state in words (the table, the live region). */
  stateText(c) {
    const app = this.app;
    const F = app.protocol.flags;
    const f = app.data.cells.flags[c];
    const parts = [];
    if (app.missing.has(c)) parts.push("never made the request");
    else if (f & F.failed) parts.push("failed");
    else if (f & F.error) parts.push("error");
    else if (f & F.warning) parts.push("warning");
    else if (f & F.collective) parts.push("joined collective");
    else parts.push(app.counts[c] ? "clean" : "no events");
    parts.push(`${app.counts[c]} event${app.counts[c] === 1 ? "" : "s"}`);
    return parts.join(", ");
  }

  // ---- interaction
  pointToHit(e) {
    const r = this.scroller.getBoundingClientRect();
    return this.layout.hit(e.clientX - r.left + this.scroller.scrollLeft, e.clientY - r.top + this.scroller.scrollTop);
  }

  hover(e) {
    const hit = this.pointToHit(e);
    const tip = this.tooltip;
    if (!hit || hit.t < 0) {
      const vr = hit && this.layout.vrows[hit.v];
      if (vr && vr.fold) {
        const m = this.app.meta;
        replace(tip, h("div", { class: "pv-tip-head" }, `blocks ${m.rows[vr.fold[0]].label}..${m.rows[vr.fold[1]].label} — ${vr.fold[1] - vr.fold[0] + 1} alike clean`),
          h("div", {}, "every thread made the same requests in each of these blocks; click to expand"));
        this.placeTip(e);
      } else tip.style.display = "none";
      return;
    }
    const vr = this.layout.vrows[hit.v];
    const c = this.layout.cellAt(hit.v, hit.t);
    replace(tip, ...this.app.tooltipLines(c, vr).map((l, i) => h("div", { class: i === 0 ? "pv-tip-head" : "" }, l)));
    this.placeTip(e);
  }

  placeTip(e) {
    const tip = this.tooltip;
    tip.style.display = "block";
    const wrap = this.el.getBoundingClientRect();
    tip.style.left = `${Math.max(0, Math.min(e.clientX - wrap.left + 14, wrap.width - 260))}px`;
    tip.style.top = `${e.clientY - wrap.top + 14}px`;
  }

  click(e) {
    const hit = this.pointToHit(e);
    this.scroller.focus({ preventScroll: true });
    if (!hit) return;
    const vr = this.layout.vrows[hit.v];
    if (hit.t < 0) {
      if (vr.fold) this.app.toggleFold(vr.fold[0]);
      else if (vr.warp < 0 && this.app.warps.has(vr.row)) this.app.toggleExpand(vr.row);
      return;
    }
    this.cursor = { v: hit.v, t: hit.t };
    if (vr.fold) { this.app.toggleFold(vr.fold[0]); return; }
    this.app.selectCell(this.layout.cellAt(hit.v, hit.t), { scroll: false });
  }

  key(e) {
    const L = this.layout;
    if (["ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", "Home", "End", "PageUp", "PageDown"].includes(e.key)) {
      e.preventDefault();
      e.stopPropagation();
      this.focused = true;
      this.cursor = moveCursor(this.cursor, e.key, L.vrows.length, L.threads);
      this.scrollTo(this.cursor.v, this.cursor.t);
      this.draw();
      const vr = L.vrows[this.cursor.v];
      const c = L.cellAt(this.cursor.v, this.cursor.t);
      if (vr) this.live.textContent = inert(`${vr.fold ? "folded blocks " : "block "}${this.app.meta.rows[vr.row].label}, ${threadWord(this.app.meta, this.app.store.state.kernel)} ${this.cursor.t}: ${this.stateText(c)}`);
    } else if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      const vr = L.vrows[this.cursor.v];
      if (!vr) return;
      if (vr.fold) { this.app.toggleFold(vr.fold[0]); return; }
      if (e.key === " " && vr.warp < 0 && this.app.warps.has(vr.row)) { this.app.toggleExpand(vr.row); return; }
      this.app.selectCell(L.cellAt(this.cursor.v, this.cursor.t), { scroll: false });
    }
  }

  /** Keep cell (v, t) in view; `center` puts it in the middle (jumps, first screen). */
  scrollTo(v, t, center = false) {
    // the content's size first (the first draw may not have run yet): scrolling clamps to it
    this.sizer.style.width = `${this.layout.width}px`;
    this.sizer.style.height = `${this.layout.height}px`;
    const [x, y] = this.layout.cellXY(v, t);
    const g = this.layout.g;
    const sc = this.scroller;
    if (center) {
      sc.scrollTop = Math.max(0, y - (sc.clientHeight - g.cellH) / 2);
      if (x + g.cellW + g.pad > sc.scrollLeft + sc.clientWidth || x - g.labelW - g.pad < sc.scrollLeft) {
        sc.scrollLeft = Math.max(0, x - g.labelW - g.pad - 8);
      }
      return;
    }
    if (y - g.headerH - g.pad < sc.scrollTop) sc.scrollTop = y - g.headerH - g.pad;
    else if (y + g.cellH + g.pad > sc.scrollTop + sc.clientHeight) sc.scrollTop = y + g.cellH + g.pad - sc.clientHeight;
    if (x - g.labelW - g.pad < sc.scrollLeft) sc.scrollLeft = x - g.labelW - g.pad;
    else if (x + g.cellW + g.pad > sc.scrollLeft + sc.clientWidth) sc.scrollLeft = x + g.cellW + g.pad - sc.clientWidth;
  }

  /** Scroll cell `c` into view (centred when `center`), moving the keyboard cursor to it. */
  showCell(c, center = false) {
    const v = this.layout.vrowOfCell(c, this.app.data.cells.row);
    if (v < 0) return;
    this.cursor = { v, t: this.app.data.cells.thread[c] };
    if (center && !this.scroller.clientHeight) { this.pendingCenter = c; return; }
    this.scrollTo(v, this.cursor.t, center);
  }

  /** Called once the grid has a size: apply a centring asked for before layout. */
  sized() {
    if (this.pendingCenter != null) {
      const c = this.pendingCenter;
      this.pendingCenter = null;
      this.showCell(c, true);
    }
  }
}

function fitText(ctx, text, x, y, maxW) {
  if (ctx.measureText(text).width <= maxW) { ctx.fillText(text, x, y); return; }
  let s = text;
  while (s.length > 1 && ctx.measureText(`${s}…`).width > maxW) s = s.slice(0, -1);
  ctx.fillText(`${s}…`, x, y);
}

export function roundRect(ctx, x, y, w, hh, r) {
  ctx.beginPath();
  ctx.moveTo(x + r, y);
  ctx.arcTo(x + w, y, x + w, y + hh, r);
  ctx.arcTo(x + w, y + hh, x, y + hh, r);
  ctx.arcTo(x, y + hh, x, y, r);
  ctx.arcTo(x, y, x + w, y, r);
  ctx.closePath();
}

/** State markers, at least 10 px: ● error, ▲ warning, ✕ failed, ◆ collective, ○ missing. */
export function drawMarker(ctx, flags, F, C, x, y) {
  ctx.save();
  if (flags === -1) {
    ctx.strokeStyle = C.errS; ctx.lineWidth = 2;
    ctx.beginPath(); ctx.arc(x, y, 5, 0, Math.PI * 2); ctx.stroke();
  } else if (flags & F.failed) {
    ctx.strokeStyle = C.failS; ctx.lineWidth = 2.5;
    ctx.beginPath(); ctx.moveTo(x - 5, y - 5); ctx.lineTo(x + 5, y + 5);
    ctx.moveTo(x + 5, y - 5); ctx.lineTo(x - 5, y + 5); ctx.stroke();
  } else if (flags & F.error) {
    ctx.fillStyle = C.errS; ctx.beginPath(); ctx.arc(x, y, 5.5, 0, Math.PI * 2); ctx.fill();
  } else if (flags & F.warning) {
    ctx.fillStyle = C.warnS; ctx.beginPath(); ctx.moveTo(x, y - 6); ctx.lineTo(x + 6, y + 5); ctx.lineTo(x - 6, y + 5); ctx.closePath(); ctx.fill();
  } else if (flags & F.collective) {
    ctx.fillStyle = C.collS; ctx.beginPath(); ctx.moveTo(x, y - 5.5); ctx.lineTo(x + 5.5, y); ctx.lineTo(x, y + 5.5); ctx.lineTo(x - 5.5, y); ctx.closePath(); ctx.fill();
  }
  ctx.restore();
}
