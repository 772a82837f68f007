// Contract check driven by tests/test_frontend.py: read a widget state produced by
// pallas_viz/render/payload.py (binary buffers as base64) from stdin, decode it with the
// front end's own code, and print what the views would read, as JSON.
import { decode, cellCounts, makeFilter } from "../data.js";
import { Answerer } from "../details.js";
import { codes, rowFields } from "../protocol.js";

const chunks = [];
for await (const c of process.stdin) chunks.push(c);
const input = JSON.parse(Buffer.concat(chunks).toString("utf8"));
const dv = (s) => { const b = Buffer.from(s, "base64"); return new DataView(b.buffer, b.byteOffset, b.byteLength); };
const mapv = (o) => (o ? Object.fromEntries(Object.entries(o).map(([k, v]) => [k, dv(v)])) : null);
const state = { meta: input.meta, columns: mapv(input.columns), cells: mapv(input.cells), details: mapv(input.details) };
const data = decode(state);
const out = { ev: {}, cells: {}, det: {}, OP: data.OP, RES: data.RES, flags: data.protocol.flags };
for (const k of Object.keys(data.protocol.column_types)) out.ev[k] = Array.from(data.ev[k]);
for (const k of Object.keys(data.protocol.cell_types)) out.cells[k] = Array.from(data.cells[k]);
if (data.det) for (const k of Object.keys(data.protocol.detail_types)) out.det[k] = Array.from(data.det[k]);
out.counts = Array.from(cellCounts(data, makeFilter()).events);
out.rowFields = rowFields(data.protocol);
out.opCodes = codes(data.protocol.ops);
if (data.det) {
  const a = new Answerer(data, input.tables, input.snippets);
  out.replies = [];
  for (let c = 0; c < data.numCells; c++) out.replies.push(a.answer({ type: "events", id: c, cell: c, offset: 0, limit: 2000 }));
  out.operands = data.meta.kernels.map((k) => a.answer({ type: "events", id: "k", operands: true, kernel: k.index }));
  out.sources = (input.locations || []).map(([file, line]) => a.answer({ type: "source", id: 1, file, line }));
}
process.stdout.write(JSON.stringify(out));
