// Decoding of the widget payload (binary columns) and the per-cell numbers the
// grid draws: event counts under a filter, totals for tooltips, warps per block row and
// liveness at a replay step. Everything works on typed arrays (no per-event objects); columns
// are decoded on first use, so the first grid draw only touches what it shows. Column types,
// op codes and the numbers of spaces and resources come from the payload (`meta.protocol`).
import { codes, protocolOf } from "./protocol.js";

// The number of memory spaces the per-cell byte arrays are laid out for (`c * NSPACES + s`).
// The payload's own count is checked against it in `decode`.
export const NSPACES = 4;

const VIEWS = {
  "<u1": Uint8Array, "<i1": Int8Array, "<i2": Int16Array, "<u2": Uint16Array, "<i4": Int32Array,
  "<u4": Uint32Array, "<f8": Float64Array,
};

/** A typed array over a DataView / ArrayBuffer / typed array (copies if misaligned). */
export function view(buf, type) {
  const T = VIEWS[type];
  if (!T) throw new Error(`unknown column type ${type}`);
  if (buf == null) return new T(0);
  let buffer, offset, length;
  if (buf instanceof ArrayBuffer) {
    buffer = buf; offset = 0; length = buf.byteLength;
  } else {
    buffer = buf.buffer; offset = buf.byteOffset; length = buf.byteLength;
  }
  if (offset % T.BYTES_PER_ELEMENT !== 0) {
    const copy = new Uint8Array(length);
    copy.set(new Uint8Array(buffer, offset, length));
    buffer = copy.buffer; offset = 0;
  }
  return new T(buffer, offset, Math.floor(length / T.BYTES_PER_ELEMENT));
}

/**
 * Typed-array views of `columns` (name -> buffer) as an object whose properties are
 * decoded on first access. A column given as a plain buffer is checked (row count) at once;
 * one behind a getter (the HTML export's lazily parsed parts) when it is first used.
 */
export function lazyColumns(columns, types, n) {
  const out = {};
  for (const k of Object.keys(types)) {
    const type = types[k];
    const check = (a) => {
      if (n != null && a.length !== n) throw new Error(`column ${k} has ${a.length} rows, expected ${n}`);
      return a;
    };
    const desc = Object.getOwnPropertyDescriptor(columns, k);
    if (!desc || !desc.get) {
      const a = check(view(columns[k], type));
      Object.defineProperty(out, k, { value: a, enumerable: true });
      continue;
    }
    let a = null;
    Object.defineProperty(out, k, {
      enumerable: true, configurable: true,
      get() { if (a === null) a = check(view(columns[k], type)); return a; },
    });
  }
  return out;
}

/**
 * Turn the synced state `{meta, columns, cells, details?}` into (lazily decoded) typed
 * arrays: `ev` (per-event columns), `cells`, `det` (detail columns, or null), `OP` (op codes).
 */
export function decode(state) {
  const meta = state.meta;
  const p = protocolOf(meta);
  if (p.spaces.length > NSPACES) throw new Error(`${p.spaces.length} memory spaces, the front end holds ${NSPACES}`);
  const n = meta.num_events;
  const ev = lazyColumns(state.columns, p.column_types, n);
  const cells = lazyColumns(state.cells, p.cell_types, meta.num_cells);
  const hasDetails = state.details != null && Object.keys(p.detail_types || {}).length > 0;
  let det = null;
  const data = { meta, protocol: p, ev, cells, n, numCells: meta.num_cells, OP: codes(p.ops), RES: codes(p.resources) };
  Object.defineProperty(data, "det", {
    enumerable: true,
    get() {
      if (det === null && hasDetails) det = lazyColumns(state.details, p.detail_types, n);
      return det;
    },
  });
  return data;
}

/** A filter: which resources and memory spaces count (all, by default). */
export function makeFilter(resources = [true, true, true], spaces = [true, true, true, true]) {
  return { resources, spaces };
}

export function passes(filter, resource, space) {
  return filter.resources[resource] !== false && (space < 0 || filter.spaces[space] !== false);
}

/** Whether `filter` lets every event through. */
export function passesAll(filter) {
  return !filter.resources.includes(false) && !filter.spaces.includes(false);
}

/** `filter` as a table indexed by `resource * 8 + space + 1` (1 = passes). */
export function passTable(filter) {
  const t = new Uint8Array(256);
  for (let r = 0; r < 32; r++) {
    for (let s = -1; s < 7; s++) t[r * 8 + s + 1] = passes(filter, r, s) ? 1 : 0;
  }
  return t;
}

/**
 * What the first grid draw needs, in one pass over two or three columns: events per cell
 * under `filter`, and which cells have events with a known warp (rows that can be expanded).
 */
export function cellCounts(data, filter) {
  const { ev, n, numCells } = data;
  const cell = ev.cell;
  const warp = ev.warp;
  const events = new Int32Array(numCells);
  const warped = new Uint8Array(numCells);
  if (passesAll(filter)) {
    for (let i = 0; i < n; i++) {
      const c = cell[i];
      if (c < 0) continue;
      events[c]++;
      if (warp[i] >= 0) warped[c] = 1;
    }
  } else {
    const pass = passTable(filter);
    const res = ev.resource, sp = ev.space;
    for (let i = 0; i < n; i++) {
      const c = cell[i];
      if (c < 0 || pass[(res[i] << 3) + sp[i] + 1] === 0) continue;
      events[c]++;
      if (warp[i] >= 0) warped[c] = 1;
    }
  }
  return { events, warped };
}

/** Per-cell totals over all events passing `filter`: events, allocations, bytes by space. */
export function cellTotals(data, filter) {
  const { ev, n, numCells, OP, RES } = data;
  const events = new Int32Array(numCells);
  const allocs = new Int32Array(numCells);
  const barriers = new Int32Array(numCells);
  const bytes = new Float64Array(numCells * NSPACES);
  const pass = passTable(filter);
  const cell = ev.cell, op = ev.op, res = ev.resource, sp = ev.space, nb = ev.nbytes;
  for (let i = 0; i < n; i++) {
    const c = cell[i];
    if (c < 0) continue;
    const r = res[i], s = sp[i];
    if (pass[(r << 3) + s + 1] === 0) continue;
    events[c]++;
    const o = op[i];
    if (o === OP.create || o === OP.join) {
      if (r === RES.buffer) {
        allocs[c]++;
        if (s >= 0) bytes[c * NSPACES + s] += nb[i];
      } else {
        barriers[c]++;
      }
    }
  }
  return { events, allocs, barriers, bytes };
}

/**
 * Warps seen per block row, counted on demand: `has(row)` from the cells' `warped` marks,
 * `get(row)` -> Map(warp * 65536 + thread -> events) for one row (one scan, then cached).
 */
export class WarpCounts {
  constructor(data, filter, warped) {
    this.data = data;
    this.filter = filter;
    const rows = data.meta.rows;
    const cellRow = data.cells.row;
    this.rowWarped = new Uint8Array(rows.length);
    for (let c = 0; c < warped.length; c++) if (warped[c]) this.rowWarped[cellRow[c]] = 1;
    this.cache = new Map();
  }

  has(row) {
    return this.rowWarped[row] === 1;
  }

  get(row) {
    if (!this.has(row)) return undefined;
    let m = this.cache.get(row);
    if (m) return m;
    m = new Map();
    const { ev, n, cells, meta } = this.data;
    const lo = meta.rows[row].start;
    let hi = lo;
    while (hi < cells.row.length && cells.row[hi] === row) hi++;
    const pass = passTable(this.filter);
    const cell = ev.cell, warp = ev.warp, res = ev.resource, sp = ev.space, thread = cells.thread;
    for (let i = 0; i < n; i++) {
      const c = cell[i];
      const w = warp[i];
      if (c < lo || c >= hi || w < 0 || pass[(res[i] << 3) + sp[i] + 1] === 0) continue;
      const key = w * 65536 + thread[c];
      m.set(key, (m.get(key) || 0) + 1);
    }
    this.cache.set(row, m);
    return m;
  }
}

/** Warps seen per cell of each row -> `{has(row), get(row) -> Map(warp*65536+thread -> n)}`. */
export function warpCounts(data, filter) {
  return new WarpCounts(data, filter, cellCounts(data, filter).warped);
}

function hash3(a, b, c) {
  let h = Math.imul(a ^ 0x2f6fd6, 0x9e3779b1) ^ Math.imul(b + 0x7f4a7c15, 0x85ebca77) ^ Math.imul(c + 1, 0xc2b2ae3d);
  h ^= h >>> 15;
  h = Math.imul(h, 0x2c1b3c6d);
  return h ^ (h >>> 13);
}

/**
 * The open requests of the replay's first pass: (cell, allocation, resource) -> bytes, an
 * open-addressing table (linear probing, keys stored in the slots) holding only what is
 * open at the current event, so it stays small; removal shifts entries back (no tombstones).
 */
class OpenTable {
  constructor(cap = 16) {
    this.alloc(cap);
    this.size = 0;
  }

  alloc(cap) {
    this.mask = cap - 1;
    this.cell = new Int32Array(cap).fill(-1); // -1: empty (cells here are >= 0)
    this.aid = new Int32Array(cap);
    this.res = new Uint8Array(cap);
    this.hash = new Int32Array(cap);
    this.bytes = new Float64Array(cap);
  }

  /** The slot of the key, or the empty slot where it would go. */
  find(c, a, r) {
    const hv = hash3(c, a, r);
    const { mask, cell, aid, res, hash } = this;
    let h = hv & mask;
    while (cell[h] !== -1 && (hash[h] !== hv || cell[h] !== c || aid[h] !== a || res[h] !== r)) h = (h + 1) & mask;
    this.lastHash = hv;
    return h;
  }

  /** Add `b` bytes to the key at slot `h` (from `find`), inserting it if empty. */
  add(h, c, a, r, b) {
    if (this.cell[h] !== -1) { this.bytes[h] += b; return; }
    this.cell[h] = c; this.aid[h] = a; this.res[h] = r; this.hash[h] = this.lastHash; this.bytes[h] = b;
    if (++this.size * 2 > this.mask + 1) this.grow();
  }

  grow() {
    const { cell, aid, res, hash, bytes } = this;
    this.alloc(cell.length * 2);
    const mask = this.mask;
    for (let i = 0; i < cell.length; i++) {
      if (cell[i] === -1) continue;
      let h = hash[i] & mask;
      while (this.cell[h] !== -1) h = (h + 1) & mask;
      this.cell[h] = cell[i]; this.aid[h] = aid[i]; this.res[h] = res[i]; this.hash[h] = hash[i]; this.bytes[h] = bytes[i];
    }
  }

  /** Remove the entry at slot `h`, moving later entries of its probe run back. */
  remove(h) {
    const { mask, cell, aid, res, hash, bytes } = this;
    let i = h, j = h;
    for (;;) {
      j = (j + 1) & mask;
      if (cell[j] === -1) break;
      const k = hash[j] & mask; // home slot of the entry at j: it may move to i unless k is in (i, j]
      if (i <= j ? i < k && k <= j : i < k || k <= j) continue;
      cell[i] = cell[j]; aid[i] = aid[j]; res[i] = res[j]; hash[i] = hash[j]; bytes[i] = bytes[j];
      i = j;
    }
    cell[i] = -1;
    this.size--;
  }
}

/**
 * Replay: what is live per cell after the first `step` events (recording order).
 * A request (create/join) makes an allocation live in its cell; the same cell's
 * release/free of that allocation ends it. Moves are incremental both ways.
 */
export class Replay {
  constructor(data, filter) {
    this.data = data;
    const { ev, n, numCells, OP, RES } = data;
    this.OP = OP;
    this.BUFFER = RES.buffer;
    const cell = ev.cell, op = ev.op, res = ev.resource, alloc = ev.alloc, nb = ev.nbytes;
    // Signed deltas per event, resolved once: +1/+bytes on request, -1/-bytes on its end.
    this.dLive = new Int8Array(n);
    this.dBytes = new Float64Array(n);
    const open = new OpenTable();
    for (let i = 0; i < n; i++) {
      const c = cell[i];
      if (c < 0) continue;
      const o = op[i];
      if (o !== OP.create && o !== OP.join && o !== OP.release && o !== OP.free) continue;
      const r = res[i];
      const h = open.find(c, alloc[i], r);
      if (o === OP.create || o === OP.join) {
        const b = r === RES.buffer ? nb[i] : 0;
        open.add(h, c, alloc[i], r, b);
        this.dLive[i] = 1;
        this.dBytes[i] = b;
      } else if (open.cell[h] !== -1) {
        this.dLive[i] = -1;
        this.dBytes[i] = -open.bytes[h];
        open.remove(h);
      }
    }
    this.live = new Int32Array(numCells);
    this.liveBarriers = new Int32Array(numCells);
    this.bytes = new Float64Array(numCells * NSPACES);
    this.failed = new Uint8Array(numCells);
    this.step = 0;
    this.setFilter(filter);
  }

  setFilter(filter) {
    const target = this.step;
    this.filter = filter;
    this.pass = passTable(filter);
    this.live.fill(0); this.liveBarriers.fill(0); this.bytes.fill(0); this.failed.fill(0);
    this.step = 0;
    this.seek(target);
  }

  /** Add (sign 1) or take back (sign -1) the effect of events [lo, hi); order is irrelevant. */
  _run(lo, hi, sign) {
    const { ev } = this.data;
    const cell = ev.cell, res = ev.resource, sp = ev.space, op = ev.op;
    const { pass, dLive, dBytes, live, liveBarriers, bytes, failed } = this;
    const OP = this.OP, BUFFER = this.BUFFER;
    for (let i = lo; i < hi; i++) {
      const c = cell[i];
      if (c < 0) continue;
      const r = res[i], s = sp[i];
      if (pass[(r << 3) + s + 1] === 0) continue;
      if (op[i] === OP.error) { failed[c] += sign; continue; }
      const d = dLive[i] * sign;
      if (d === 0) continue;
      if (r === BUFFER) {
        live[c] += d;
        if (s >= 0) bytes[c * NSPACES + s] += dBytes[i] * sign;
      } else {
        liveBarriers[c] += d;
      }
    }
  }

  /** Move to `step` (0..n): the state after events [0, step). */
  seek(step) {
    step = Math.max(0, Math.min(this.data.n, step | 0));
    if (step > this.step) this._run(this.step, step, 1);
    else if (step < this.step) this._run(step, this.step, -1);
    this.step = step;
    return this.step;
  }
}

/**
 * The replay's steps: every event, or only those drawn in the grid (block-level; kernel
 * operands have no cell). `toEvent(k)` is the event count after k steps.
 */
export class Steps {
  constructor(data, gridOnly) {
    this.n = data.n;
    this.gridOnly = gridOnly;
    if (gridOnly) {
      const cell = data.ev.cell;
      let m = 0;
      for (let i = 0; i < data.n; i++) if (cell[i] >= 0) m++;
      this.idx = new Int32Array(m);
      m = 0;
      for (let i = 0; i < data.n; i++) if (cell[i] >= 0) this.idx[m++] = i;
      this.count = m;
    } else {
      this.idx = null;
      this.count = data.n;
    }
  }

  /** Events replayed after `k` steps. */
  toEvent(k) {
    k = Math.max(0, Math.min(this.count, k | 0));
    if (!this.idx) return k;
    return k === 0 ? 0 : this.idx[k - 1] + 1;
  }

  /** The step reached once `events` events are replayed (the last grid event among them). */
  fromEvent(events) {
    if (!this.idx) return Math.max(0, Math.min(this.count, events));
    let lo = 0, hi = this.count; // number of idx entries < events
    while (lo < hi) { const mid = (lo + hi) >> 1; if (this.idx[mid] < events) lo = mid + 1; else hi = mid; }
    return lo;
  }
}
