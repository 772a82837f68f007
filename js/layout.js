// Grid geometry: which rows are visible (blocks of one kernel, expanded warps),
// where each cell is drawn, and which cell is under a point.

export const GEOM = { cellW: 64, cellH: 30, gap: 4, labelW: 132, headerH: 26, pad: 8 };

/**
 * Visual rows of one kernel: `{row, warp}` with warp -1 for the block row itself and
 * one sub-row per warp seen in an expanded block.
 */
export function visualRows(meta, kernel, expanded = new Set(), warpsByRow = new Map()) {
  const out = [];
  meta.rows.forEach((r, i) => {
    if (r.kernel !== kernel) return;
    out.push({ row: i, warp: -1 });
    if (expanded.has(i)) {
      const warps = new Set();
      for (const key of (warpsByRow.get(i) || new Map()).keys()) warps.add(Math.floor(key / 65536));
      for (const w of [...warps].sort((a, b) => a - b)) out.push({ row: i, warp: w });
    }
  });
  return out;
}

export class Layout {
  constructor(meta, kernel, vrows, geom = GEOM) {
    this.meta = meta;
    this.kernel = kernel;
    this.vrows = vrows;
    this.g = geom;
    const k = meta.kernels.find((x) => x.index === kernel);
    this.threads = k ? k.threads : 1;
  }

  get width() {
    const g = this.g;
    return g.pad * 2 + g.labelW + this.threads * (g.cellW + g.gap);
  }

  get height() {
    const g = this.g;
    return g.pad * 2 + g.headerH + this.vrows.length * (g.cellH + g.gap);
  }

  /** Top-left of cell (visual row v, thread column t), in content coordinates. */
  cellXY(v, t) {
    const g = this.g;
    return [g.pad + g.labelW + t * (g.cellW + g.gap), g.pad + g.headerH + v * (g.cellH + g.gap)];
  }

  /** Visual rows intersecting [top, top + height). */
  visibleRange(top, height) {
    const g = this.g;
    const step = g.cellH + g.gap;
    const first = Math.max(0, Math.floor((top - g.pad - g.headerH) / step));
    const last = Math.min(this.vrows.length - 1, Math.floor((top + height - g.pad - g.headerH) / step));
    return [first, last];
  }

  /** `{v, t}` for a point on a cell, `{v, t: -1}` on a row label, else null. */
  hit(x, y) {
    const g = this.g;
    const step = g.cellH + g.gap;
    const yy = y - g.pad - g.headerH;
    if (yy < 0) return null;
    const v = Math.floor(yy / step);
    if (v >= this.vrows.length || yy - v * step > g.cellH) return null;
    if (x >= g.pad && x < g.pad + g.labelW) return { v, t: -1 };
    const xx = x - g.pad - g.labelW;
    if (xx < 0) return null;
    const t = Math.floor(xx / (g.cellW + g.gap));
    if (t >= this.threads || xx - t * (g.cellW + g.gap) > g.cellW) return null;
    return { v, t };
  }

  /** The cell index drawn at (v, t). */
  cellAt(v, t) {
    const vr = this.vrows[v];
    return vr ? this.meta.rows[vr.row].start + t : -1;
  }

  /** The visual row (block row, not a warp sub-row) of a cell, or -1. */
  vrowOfCell(cell, rowOfCell) {
    const r = rowOfCell[cell];
    return this.vrows.findIndex((x) => x.row === r && x.warp === -1);
  }
}

/** Move a (v, t) cursor by a key; returns the new cursor. */
export function moveCursor(cur, key, nRows, nThreads) {
  let { v, t } = cur;
  if (key === "ArrowUp") v -= 1;
  else if (key === "ArrowDown") v += 1;
  else if (key === "ArrowLeft") t -= 1;
  else if (key === "ArrowRight") t += 1;
  else if (key === "Home") t = 0;
  else if (key === "End") t = nThreads - 1;
  else if (key === "PageUp") v -= 10;
  else if (key === "PageDown") v += 10;
  return { v: Math.max(0, Math.min(nRows - 1, v)), t: Math.max(0, Math.min(nThreads - 1, t)) };
}
