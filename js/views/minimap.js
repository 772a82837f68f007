// The overview beside the grid: one pixel row per block (several blocks per pixel row
// past the strip's height), coloured by the worst state in it, with the grid's viewport
// outlined. Click or drag to jump there. Scales to tens of thousands of blocks.
import { h } from "../format.js";

const RANK = { empty: 0, clean: 1, coll: 2, warn: 3, err: 4, fail: 5 };

/** Per block row of `kernel`, its state rank (see RANK): one pass over the cells. */
export function rowStates(meta, cellRow, cellFlags, counts, flags, kernel) {
  const rows = [];
  const state = new Uint8Array(meta.rows.length);
  for (let c = 0; c < cellFlags.length; c++) {
    const f = cellFlags[c];
    let s = counts[c] ? RANK.clean : RANK.empty;
    if (f & flags.failed) s = RANK.fail;
    else if (f & flags.error) s = RANK.err;
    else if (f & flags.warning) s = RANK.warn;
    else if (f & flags.collective) s = Math.max(s, RANK.coll);
    const r = cellRow[c];
    if (s > state[r]) state[r] = s;
  }
  meta.rows.forEach((r, i) => { if (r.kernel === kernel) rows.push(i); });
  return { rows, state };
}

export class MinimapView {
  constructor(app) {
    this.app = app;
    this.canvas = h("canvas", { class: "pv-minimap-canvas" });
    this.el = h("div", {
      class: "pv-minimap", title: "overview: one line per block, coloured by its worst state (click to jump)",
      role: "slider", tabindex: "-1", "aria-label": "overview of all blocks; click to jump",
    }, this.canvas);
    let dragging = false;
    this.el.addEventListener("mousedown", (e) => { dragging = true; this.jump(e); });
    this.el.addEventListener("mousemove", (e) => { if (dragging) this.jump(e); else this.hover(e); });
    const up = () => { dragging = false; };
    this.el.addEventListener("mouseup", up);
    this.el.addEventListener("mouseleave", up);
    this.states = null;
  }

  /** Whether the overview is worth showing: more blocks than the grid shows at once. */
  get wanted() {
    const s = this.stateRows();
    return s.rows.length > 12;
  }

  stateRows() {
    const app = this.app;
    const k = app.store.state.kernel;
    if (!this.states || this.statesKey !== `${k}|${app.countsVersion}`) {
      this.states = rowStates(app.meta, app.data.cells.row, app.data.cells.flags, app.counts, app.protocol.flags, k);
      this.statesKey = `${k}|${app.countsVersion}`;
    }
    return this.states;
  }

  draw() {
    const app = this.app;
    if (app.suspended || app.destroyed) return;
    const { rows, state } = this.stateRows();
    const H = this.el.clientHeight, W = this.el.clientWidth;
    if (!H || !W || !rows.length) return;
    const dpr = (typeof window !== "undefined" && window.devicePixelRatio) || 1;
    const cv = this.canvas;
    if (cv.width !== Math.round(W * dpr) || cv.height !== Math.round(H * dpr)) {
      cv.width = Math.round(W * dpr); cv.height = Math.round(H * dpr);
      cv.style.width = `${W}px`; cv.style.height = `${H}px`;
    }
    const ctx = cv.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    const C = app.theme.colors();
    ctx.fillStyle = C.panel;
    ctx.fillRect(0, 0, W, H);
    const colors = [C.empty, C.clean, C.coll, C.warnS, C.errS, C.failS];
    const n = rows.length;
    const per = Math.max(1, n / H); // blocks per pixel row
    const lines = Math.min(H, n);
    const rowH = H / lines;
    for (let p = 0; p < lines; p++) {
      const a = Math.floor(p * per), b = Math.max(a + 1, Math.floor((p + 1) * per));
      let s = 0;
      for (let i = a; i < b && i < n; i++) if (state[rows[i]] > s) s = state[rows[i]];
      ctx.fillStyle = colors[s];
      // errors get the full width, others a narrower bar so red stands out
      const x0 = s >= RANK.warn ? 0 : 3;
      ctx.fillRect(x0, p * rowH, W - x0 * 2, Math.max(1, rowH - (rowH > 3 ? 1 : 0)));
    }
    // the grid's viewport
    const L = app.layout, sc = app.grid.scroller;
    const [first, last] = L.visibleRange(sc.scrollTop, sc.clientHeight);
    const fr = L.vrows[first], lr = L.vrows[last];
    if (fr && lr) {
      const i0 = rows.indexOf(fr.row), i1 = rows.indexOf(lr.fold ? lr.fold[1] : lr.row);
      if (i0 >= 0 && i1 >= 0) {
        const y0 = (i0 / n) * H, y1 = ((i1 + 1) / n) * H;
        ctx.strokeStyle = C.fg; ctx.lineWidth = 1.5;
        ctx.strokeRect(0.75, y0 + 0.75, W - 1.5, Math.max(3, y1 - y0) - 1.5);
      }
    }
  }

  rowAt(e) {
    const { rows } = this.stateRows();
    const r = this.el.getBoundingClientRect();
    const f = Math.max(0, Math.min(0.9999, (e.clientY - r.top) / r.height));
    return rows[Math.floor(f * rows.length)];
  }

  hover(e) {
    const r = this.rowAt(e);
    if (r != null) this.el.title = `block ${this.app.meta.rows[r].label}: click to jump`;
  }

  jump(e) {
    e.preventDefault();
    const r = this.rowAt(e);
    if (r != null) this.app.jumpToRow(r);
  }
}
