import assert from "node:assert/strict";
import { test } from "node:test";
import { b64Decode, b64DecodeTable, b64ToDataView, makeDoc, makeModel } from "../standalone.js";
import { Answerer } from "../details.js";
import { decode, view } from "../data.js";
import { protocol } from "./fixture.js";

const b64 = (T, values) => Buffer.from(T.from(values).buffer).toString("base64");

test("b64ToDataView round-trips binary columns", () => {
  const d = b64ToDataView(b64(Int32Array, [1, -2, 300000]));
  assert.deepEqual([...view(d, "<i4")], [1, -2, 300000]);
});

test("the table base64 decoder agrees with Node's for every length and rejects junk", () => {
  let x = 7;
  for (let len = 0; len < 70; len++) {
    const bytes = Buffer.alloc(len);
    for (let i = 0; i < len; i++) { x = (Math.imul(x, 1103515245) + 12345) >>> 0; bytes[i] = x >>> 24; }
    const s = bytes.toString("base64");
    assert.deepEqual(Buffer.from(b64DecodeTable(s)), bytes, `length ${len}`);
    assert.deepEqual(Buffer.from(b64DecodeTable(s.replace(/=+$/, ""))), bytes, `unpadded ${len}`);
    assert.deepEqual(Buffer.from(b64Decode(s)), bytes);
  }
  assert.deepEqual([...b64DecodeTable(Buffer.from([251, 255]).toString("base64url"))], [251, 255]);
  assert.throws(() => b64DecodeTable("AB*D"), /invalid base64/);
  assert.throws(() => b64DecodeTable("ABCDE"), /invalid base64/);
});

const DETAIL_TYPES = { thread_seq: "<i1", shape: "<i1", dtype: "<i1", buffer_id: "<i2", ref_count: "<i1", initial_ref_count: "<i1", source: "<i1" };

function page() {
  const meta = { num_events: 3, num_cells: 2, kernels: [{ index: 0, threads: 2, operands: { seqs: [] } }], rows: [{ kernel: 0, start: 0, label: "(0)" }],
    findings: [], protocol: protocol({ cell: "<i2" }, DETAIL_TYPES) };
  let parsed = 0;
  const more = () => {
    parsed++;
    return {
      columns: { op: b64(Uint8Array, [0, 1, 0]), resource: b64(Uint8Array, [0, 0, 1]), space: b64(Int8Array, [1, 1, -1]),
        alloc: b64(Int32Array, [1, 1, 2]), nbytes: b64(Uint32Array, [4096, 4096, 0]) },
      details: { thread_seq: b64(Int8Array, [0, 0, 1]), shape: b64(Int8Array, [0, 0, -1]), dtype: b64(Int8Array, [0, 0, -1]),
        buffer_id: b64(Int16Array, [5, 5, 6]), ref_count: b64(Int8Array, [2, 1, 1]), initial_ref_count: b64(Int8Array, [2, 2, 1]),
        source: b64(Int8Array, [0, 0, -1]) },
    };
  };
  const raw = { state: { meta, columns: { cell: b64(Int16Array, [0, 1, 1]), warp: b64(Int8Array, [-1, -1, -1]) },
    cells: { row: b64(Int32Array, [0, 0]), thread: b64(Int32Array, [0, 1]), flags: b64(Uint8Array, [0, 0]) } },
  tables: { shapes: ["(8, 128)"], dtypes: ["float32"], sources: [{ file: "k.py", line: 4 }] },
  snippets: { "k.py:4": { file: "k.py", start: 1, lines: ["a", "b", "c", "d"] } } };
  return { raw, more, parsed: () => parsed };
}

test("the page's state reads the second document only when a column there is used", () => {
  const p = page();
  const doc = makeDoc(p.raw, p.more);
  assert.deepEqual([...new Int16Array(doc.state.columns.cell.buffer)], [0, 1, 1]);
  assert.equal(p.parsed(), 0); // the first document has the cell column
  const model = makeModel(doc);
  assert.equal(model.get("data").meta.num_events, 3);
  const d = decode(model.get("data"));
  assert.deepEqual([...d.ev.cell], [0, 1, 1]);
  assert.equal(p.parsed(), 0);
  assert.deepEqual([...d.ev.op], [0, 1, 0]);
  assert.equal(p.parsed(), 1);
});

test("the answerer lists a cell's events and serves stored lines, in the protocol's row layout", () => {
  const p = page();
  const state = makeDoc(p.raw, p.more).state;
  const d = decode(state);
  const a = new Answerer(d, state.tables, state.snippets);
  const r = a.answer({ type: "events", id: 9, cell: 1 });
  assert.equal(r.id, 9);
  assert.equal(r.total, 2);
  assert.deepEqual(r.rows[0], [1, 0, "join", "buffer", "SMEM", null, "(8, 128)", "float32", 4096, 5, 1, 2, 1, 0]);
  assert.deepEqual(r.rows[1].slice(0, 5), [2, 1, "create", "barrier", null]);
  assert.equal(r.sources["0"].file, "k.py");
  assert.equal(a.answer({ type: "events", id: 1, cell: 7 }).total, 0);
  assert.deepEqual(a.answer({ type: "source", id: 3, file: "k.py", line: 4 }).lines, ["a", "b", "c", "d"]);
  assert.deepEqual(a.answer({ type: "source", id: 3, file: "k.py", line: 2 }).lines, ["a", "b", "c", "d"]); // a nearby line
  assert.deepEqual(a.answer({ type: "source", id: 4, file: "nope.py", line: 1 }).lines, []);
});

test("the page's model shim never pretends a kernel answered", async () => {
  const model = makeModel(makeDoc(page().raw, page().more));
  const replies = [];
  model.on("msg:custom", (r) => replies.push(r));
  model.send({ type: "events", id: 1, cell: 1 });
  await new Promise((r) => setTimeout(r, 5));
  assert.match(replies[0].error, /no kernel/);
});
