// Answers "events" and "source" requests in the browser, from the detail columns, string
// tables and snippets the payload carries (the widget's state, or the HTML export's
// documents): no kernel needed. Rows follow `protocol.event_row`.

/** Events grouped per cell, in recording order (CSR: counts + seqs), built once. */
export function cellIndex(cellCol, numCells) {
  const n = cellCol.length;
  const counts = new Int32Array(numCells + 1);
  for (let i = 0; i < n; i++) { const c = cellCol[i]; if (c >= 0) counts[c + 1]++; }
  for (let c = 1; c < counts.length; c++) counts[c] += counts[c - 1];
  const fill = counts.slice();
  const seqs = new Int32Array(counts[counts.length - 1]);
  for (let i = 0; i < n; i++) { const c = cellCol[i]; if (c >= 0) seqs[fill[c]++] = i; }
  return { counts, seqs };
}

export class Answerer {
  /**
   * `data`: decoded payload (`ev`, `det`, `meta`, `protocol`); `tables`: shapes, dtypes,
   * sources; `snippets`: "file:line" -> {start, lines, ...}.
   */
  constructor(data, tables, snippets) {
    this.data = data;
    this.tables = tables || { shapes: [], dtypes: [], sources: [] };
    this.snippets = snippets || {};
    this.byCell = null;
  }

  seqsOf(cell) {
    if (!this.byCell) this.byCell = cellIndex(this.data.ev.cell, this.data.numCells);
    const { counts, seqs } = this.byCell;
    if (!(cell >= 0) || cell + 1 >= counts.length) return new Int32Array(0);
    return seqs.subarray(counts[cell], counts[cell + 1]);
  }

  /** One event as a row in `protocol.event_row` order, and its source index. */
  row(i) {
    const { ev, det, meta, protocol: p } = this.data;
    const t = this.tables;
    const src = det.source[i], sh = det.shape[i], dt = det.dtype[i];
    const v = {
      seq: i, thread_seq: det.thread_seq[i], op: p.ops[ev.op[i]], resource: p.resources[ev.resource[i]],
      space: ev.space[i] >= 0 ? p.spaces[ev.space[i]] : null, warp: ev.warp[i] >= 0 ? ev.warp[i] : null,
      shape: sh >= 0 ? t.shapes[sh] : null, dtype: dt >= 0 ? t.dtypes[dt] : null, nbytes: ev.nbytes[i],
      buffer_id: det.buffer_id[i], ref_count: det.ref_count[i], initial_ref_count: det.initial_ref_count[i],
      alloc: ev.alloc[i], source: src,
    };
    void meta;
    return p.event_row.map((k) => v[k]);
  }

  /** Rows for event indices `seqs`, with the source locations they use. */
  rows(seqs) {
    const rows = [];
    const sources = {};
    if (!seqs.length) return { rows, sources };
    const srcCol = this.data.det.source;
    for (const i of seqs) {
      rows.push(this.row(i));
      const s = srcCol[i];
      if (s >= 0) sources[String(s)] = this.tables.sources[s];
    }
    return { rows, sources };
  }

  answer(msg) {
    const meta = this.data.meta;
    const limit = this.data.protocol.limits.rows_per_reply;
    if (msg.type === "events") {
      let all;
      if (msg.operands) {
        const k = meta.kernels.find((x) => x.index === msg.kernel);
        all = Int32Array.from((k && k.operands && k.operands.seqs) || []);
      } else {
        all = this.seqsOf(msg.cell);
      }
      const offset = Math.max(0, msg.offset || 0);
      const part = all.subarray(offset, offset + Math.min(limit, msg.limit || 500));
      return { type: "events", id: msg.id, cell: msg.cell, kernel: msg.kernel, operands: !!msg.operands,
        offset, total: all.length, ...this.rows(part) };
    }
    if (msg.type === "source") {
      const snip = this.snippets[`${msg.file}:${msg.line}`] || this.around(msg.file, msg.line);
      return { type: "source", id: msg.id, file: msg.file, line: msg.line, start: 1, lines: [], ...(snip || {}) };
    }
    return { type: "error", id: msg.id, error: `unknown request type ${String(msg.type).slice(0, 40)}` };
  }

  /** A stored snippet of `file` that covers `line` (a branch line near a stored one). */
  around(file, line) {
    for (const snip of Object.values(this.snippets)) {
      if (snip.file === file && snip.lines && line >= snip.start && line < snip.start + snip.lines.length) return snip;
    }
    return null;
  }
}
