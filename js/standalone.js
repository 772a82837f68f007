// Entry of the self-contained HTML export: a tiny stand-in for the anywidget model
// (get/set/on/off/send) whose `send` is answered from data embedded in the page.
import { DETAIL_TYPES, view } from "./data.js";
import { render } from "./widget.js";

/** Base64 -> DataView (what anywidget hands the widget for binary state). */
export function b64ToDataView(s) {
  const bin = atob(s);
  const u8 = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) u8[i] = bin.charCodeAt(i);
  return new DataView(u8.buffer);
}

function inflate(obj) {
  const out = {};
  for (const [k, v] of Object.entries(obj)) out[k] = b64ToDataView(v);
  return out;
}

/** Answers the widget's "events" and "source" requests from the embedded export. */
export class Answerer {
  constructor(doc, cellCol) {
    this.doc = doc;
    this.cellCol = cellCol;
    this.det = {};
    for (const [k, t] of Object.entries(DETAIL_TYPES)) this.det[k] = view(doc.details[k], t);
    this.byCell = null;
  }

  seqsOf(cell) {
    if (!this.byCell) {
      // CSR index: events grouped per cell, in recording order.
      const n = this.cellCol.length;
      const counts = new Int32Array(this.doc.state.meta.num_cells + 1);
      for (let i = 0; i < n; i++) if (this.cellCol[i] >= 0) counts[this.cellCol[i] + 1]++;
      for (let c = 1; c < counts.length; c++) counts[c] += counts[c - 1];
      const fill = counts.slice();
      const seqs = new Int32Array(counts[counts.length - 1]);
      for (let i = 0; i < n; i++) { const c = this.cellCol[i]; if (c >= 0) seqs[fill[c]++] = i; }
      this.byCell = { counts, seqs };
    }
    const { counts, seqs } = this.byCell;
    if (cell < 0 || cell + 1 >= counts.length) return new Int32Array(0);
    return seqs.subarray(counts[cell], counts[cell + 1]);
  }

  answer(msg) {
    const { doc, det } = this;
    if (msg.type === "events") {
      const all = this.seqsOf(msg.cell);
      const offset = Math.max(0, msg.offset || 0);
      const part = all.subarray(offset, offset + Math.min(2000, msg.limit || 500));
      const ev = doc.ev;
      const meta = doc.state.meta;
      const rows = [];
      const sources = {};
      for (const i of part) {
        const src = det.source[i];
        const sh = det.shape[i];
        const dt = det.dtype[i];
        rows.push([i, det.thread_seq[i], meta.ops[ev.op[i]], meta.resources[ev.resource[i]],
          ev.space[i] >= 0 ? meta.spaces[ev.space[i]] : null, ev.warp[i] >= 0 ? ev.warp[i] : null,
          sh >= 0 ? doc.tables.shapes[sh] : null, dt >= 0 ? doc.tables.dtypes[dt] : null,
          ev.nbytes[i], det.buffer_id[i], det.ref_count[i], det.initial_ref_count[i], ev.alloc[i], src]);
        if (src >= 0) sources[String(src)] = doc.tables.sources[src];
      }
      return { type: "events", id: msg.id, cell: msg.cell, offset, total: all.length, rows, sources };
    }
    if (msg.type === "source") {
      const snip = doc.snippets[`${msg.file}:${msg.line}`];
      return { type: "source", id: msg.id, file: msg.file, line: msg.line, start: 1, lines: [], ...(snip || {}) };
    }
    return null;
  }
}

/** The model shim handed to the widget's `render`. */
export function makeModel(doc) {
  const state = { data: doc.state };
  const handlers = new Map();
  const ev = { op: view(doc.state.columns.op, "<u1"), resource: view(doc.state.columns.resource, "<u1"),
    space: view(doc.state.columns.space, "<i1"), warp: view(doc.state.columns.warp, "<i1"),
    alloc: view(doc.state.columns.alloc, "<i4"), nbytes: view(doc.state.columns.nbytes, "<u4") };
  doc.ev = ev;
  const answerer = new Answerer(doc, view(doc.state.columns.cell, "<i4"));
  const emit = (name, ...args) => (handlers.get(name) || []).forEach((f) => f(...args));
  return {
    get: (k) => state[k],
    set: (k, v) => { state[k] = v; emit(`change:${k}`, v); },
    save_changes: () => {},
    on: (name, f) => { if (!handlers.has(name)) handlers.set(name, []); handlers.get(name).push(f); },
    off: (name, f) => { const l = handlers.get(name) || []; const i = l.indexOf(f); if (i >= 0) l.splice(i, 1); },
    send: (msg) => {
      const reply = answerer.answer(msg);
      if (reply) setTimeout(() => emit("msg:custom", reply, []), 0);
    },
  };
}

/** Decode the embedded JSON document (binary parts in base64) and mount the widget. */
export function mount(el, raw) {
  const doc = {
    state: { meta: raw.state.meta, columns: inflate(raw.state.columns), cells: inflate(raw.state.cells) },
    details: inflate(raw.details),
    tables: raw.tables,
    snippets: raw.snippets,
  };
  return render({ model: makeModel(doc), el });
}

if (typeof document !== "undefined") {
  const boot = () => {
    const src = document.getElementById("pallas-viz-data");
    const el = document.getElementById("pallas-viz-root");
    if (!src || !el) return;
    try {
      mount(el, JSON.parse(src.textContent));
    } catch (e) {
      el.textContent = `pallas_viz: could not show this trace: ${e}`;
    }
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", boot);
  else boot();
}
