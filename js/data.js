// Decoding of the widget payload (binary columns) and the per-cell numbers the
// grid draws: totals under a filter, and liveness at a replay step.

export const OP = { create: 0, join: 1, release: 2, free: 3, error: 4 };
export const NSPACES = 4;

const VIEWS = {
  "<u1": Uint8Array, "<i1": Int8Array, "<i2": Int16Array, "<i4": Int32Array,
  "<u4": Uint32Array, "<f8": Float64Array,
};
const EVENT_TYPES = {
  op: "<u1", resource: "<u1", space: "<i1", warp: "<i1", cell: "<i4", alloc: "<i4",
  nbytes: "<u4",
};
const CELL_TYPES = { row: "<i4", thread: "<i4", flags: "<u1" };
export const DETAIL_TYPES = {
  thread_seq: "<i4", shape: "<i4", dtype: "<i2", buffer_id: "<i4", ref_count: "<i4",
  initial_ref_count: "<i4", source: "<i4",
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

/** Turn the synced state `{meta, columns, cells}` into typed arrays. */
export function decode(state) {
  const meta = state.meta;
  const ev = {};
  for (const [k, t] of Object.entries(EVENT_TYPES)) ev[k] = view(state.columns[k], t);
  const cells = {};
  for (const [k, t] of Object.entries(CELL_TYPES)) cells[k] = view(state.cells[k], t);
  const n = meta.num_events;
  for (const [k, a] of Object.entries(ev)) {
    if (a.length !== n) throw new Error(`column ${k} has ${a.length} rows, expected ${n}`);
  }
  return { meta, ev, cells, n, numCells: meta.num_cells };
}

/** A filter: which resources and memory spaces count. */
export function makeFilter(resources = [true, true, true], spaces = [true, true, true, true]) {
  return { resources, spaces };
}

export function passes(filter, resource, space) {
  return filter.resources[resource] !== false && (space < 0 || filter.spaces[space] !== false);
}

/** Per-cell totals over all events passing `filter`: events, allocations, bytes by space. */
export function cellTotals(data, filter) {
  const { ev, n, numCells } = data;
  const events = new Int32Array(numCells);
  const allocs = new Int32Array(numCells);
  const barriers = new Int32Array(numCells);
  const bytes = new Float64Array(numCells * NSPACES);
  for (let i = 0; i < n; i++) {
    const c = ev.cell[i];
    if (c < 0 || !passes(filter, ev.resource[i], ev.space[i])) continue;
    events[c]++;
    const op = ev.op[i];
    if (op === OP.create || op === OP.join) {
      if (ev.resource[i] === 0) {
        allocs[c]++;
        if (ev.space[i] >= 0) bytes[c * NSPACES + ev.space[i]] += ev.nbytes[i];
      } else {
        barriers[c]++;
      }
    }
  }
  return { events, allocs, barriers, bytes };
}

/** Warps seen per cell of the rows in `rowSet` -> Map(cell -> Map(warp -> events)). */
export function warpCounts(data, filter) {
  const { ev, n, cells } = data;
  const out = new Map();
  for (let i = 0; i < n; i++) {
    const c = ev.cell[i];
    const w = ev.warp[i];
    if (c < 0 || w < 0 || !passes(filter, ev.resource[i], ev.space[i])) continue;
    const row = cells.row[c];
    let m = out.get(row);
    if (!m) out.set(row, (m = new Map()));
    const key = w * 65536 + cells.thread[c];
    m.set(key, (m.get(key) || 0) + 1);
  }
  return out;
}

/**
 * Replay: what is live per cell after the first `step` events (recording order).
 * A request (create/join) makes an allocation live in its cell; the same cell's
 * release/free of that allocation ends it. Moves are incremental both ways.
 */
export class Replay {
  constructor(data, filter) {
    this.data = data;
    const { ev, n, numCells } = data;
    // Signed deltas per event, resolved once: +1/+bytes on request, -1/-bytes on its end.
    this.dLive = new Int8Array(n);
    this.dBytes = new Float64Array(n);
    const open = new Map();
    for (let i = 0; i < n; i++) {
      const c = ev.cell[i];
      if (c < 0) continue;
      const op = ev.op[i];
      const key = c * 17179869184 + (ev.alloc[i] >>> 0) * 4 + ev.resource[i];
      if (op === OP.create || op === OP.join) {
        const b = ev.resource[i] === 0 ? ev.nbytes[i] : 0;
        open.set(key, b + (open.get(key) || 0));
        this.dLive[i] = 1;
        this.dBytes[i] = b;
      } else if (op === OP.release || op === OP.free) {
        if (open.has(key)) {
          this.dLive[i] = -1;
          this.dBytes[i] = -open.get(key);
          open.delete(key);
        }
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
    this.live.fill(0); this.liveBarriers.fill(0); this.bytes.fill(0); this.failed.fill(0);
    this.step = 0;
    this.seek(target);
  }

  _apply(i, sign) {
    const { ev } = this.data;
    const c = ev.cell[i];
    if (c < 0 || !passes(this.filter, ev.resource[i], ev.space[i])) return;
    if (ev.op[i] === OP.error) { this.failed[c] += sign; return; }
    const d = this.dLive[i] * sign;
    if (d === 0) return;
    if (ev.resource[i] === 0) {
      this.live[c] += d;
      if (ev.space[i] >= 0) this.bytes[c * NSPACES + ev.space[i]] += this.dBytes[i] * sign;
    } else {
      this.liveBarriers[c] += d;
    }
  }

  /** Move to `step` (0..n): the state after events [0, step). */
  seek(step) {
    step = Math.max(0, Math.min(this.data.n, step | 0));
    while (this.step < step) this._apply(this.step++, 1);
    while (this.step > step) this._apply(--this.step, -1);
    return this.step;
  }
}
