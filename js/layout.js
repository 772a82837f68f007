// Grid geometry: which rows are visible (blocks of one kernel, runs of alike blocks folded
// into one row, expanded warps), where each cell is drawn, and which cell is under a point.

export const GEOM = { cellW: 64, cellH: 30, gap: 4, labelW: 132, headerH: 26, pad: 8 };
// For a narrow widget (a notebook beside an open sidebar): two columns fit in ~180 px.
export const GEOM_COMPACT = { cellW: 44, cellH: 28, gap: 3, labelW: 70, headerH: 24, pad: 6 };
export const COMPACT_BELOW = 480;

/** OR of the cell flags of each block row. */
export function rowFlags(meta, cellRow, cellFlags) {
  const out = new Uint8Array(meta.rows.length);
  for (let c = 0; c < cellFlags.length; c++) out[cellRow[c]] |= cellFlags[c];
  return out;
}

/**
 * Runs of consecutive block rows of one kernel that fold into one row: same fingerprint
 * (alike threads' request sequences), no flagged cell (`badMask` of `flagsOfRow`), at least
 * `minRun` long. Returns [first, last] row pairs.
 */
export function foldRuns(meta, kernel, flagsOfRow, badMask, minRun) {
  const out = [];
  const rows = meta.rows;
  let i = 0;
  while (i < rows.length) {
    const r = rows[i];
    if (r.kernel !== kernel || r.fp == null || r.fp < 0 || (flagsOfRow[i] & badMask)) { i++; continue; }
    let j = i;
    while (j + 1 < rows.length && rows[j + 1].kernel === kernel && rows[j + 1].fp === r.fp
      && rows[j + 1].device === r.device && !(flagsOfRow[j + 1] & badMask)) j++;
    if (j - i + 1 >= minRun) out.push([i, j]);
    i = j + 1;
  }
  return out;
}

/**
 * Visual rows of one kernel: `{row, warp}` with warp -1 for the block row itself, one
 * sub-row per warp seen in an expanded block, and `{row, warp: -1, fold: [first, last]}`
 * for a folded run (`folds`: runs from `foldRuns`, minus those the user opened).
 */
export function visualRows(meta, kernel, expanded = new Set(), warpsByRow = new Map(), folds = []) {
  const out = [];
  const foldAt = new Map(folds.map((f) => [f[0], f]));
  const rows = meta.rows;
  for (let i = 0; i < rows.length; i++) {
    if (rows[i].kernel !== kernel) continue;
    const f = foldAt.get(i);
    if (f) {
      out.push({ row: i, warp: -1, fold: f });
      i = f[1];
      continue;
    }
    out.push({ row: i, warp: -1 });
    if (expanded.has(i)) {
      const warps = new Set();
      for (const key of (warpsByRow.get(i) || new Map()).keys()) warps.add(Math.floor(key / 65536));
      for (const w of [...warps].sort((a, b) => a - b)) out.push({ row: i, warp: w });
    }
  }
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

  /** The cell index drawn at (v, t) (a folded run draws its first block's cells). */
  cellAt(v, t) {
    const vr = this.vrows[v];
    return vr ? this.meta.rows[vr.row].start + t : -1;
  }

  /** The visual row showing block row `r` (its own row, or the fold holding it), or -1. */
  vrowOfRow(r) {
    const vr = this.vrows;
    let lo = 0, hi = vr.length - 1, best = -1;
    while (lo <= hi) { // last vrow whose row <= r
      const mid = (lo + hi) >> 1;
      if (vr[mid].row <= r) { best = mid; lo = mid + 1; } else hi = mid - 1;
    }
    while (best > 0 && vr[best].warp >= 0) best--;
    if (best < 0) return -1;
    const x = vr[best];
    if (x.row === r) return best;
    if (x.fold && r >= x.fold[0] && r <= x.fold[1]) return best;
    return -1;
  }

  /** The visual row (block row, not a warp sub-row) of a cell, or -1. */
  vrowOfCell(cell, rowOfCell) {
    return this.vrowOfRow(rowOfCell[cell]);
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
