import assert from "node:assert/strict";
import { test } from "node:test";
import { Answerer, b64Decode, b64DecodeTable, b64ToDataView, makeDoc, makeModel } from "../standalone.js";
import { view } from "../data.js";

const b64 = (T, values) => Buffer.from(T.from(values).buffer).toString("base64");

test("b64ToDataView round-trips binary columns", () => {
  const d = b64ToDataView(b64(Int32Array, [1, -2, 300000]));
  assert.deepEqual([...view(d, "<i4")], [1, -2, 300000]);
});

test("the HTML shim answers event requests from embedded columns", () => {
  const det = {
    thread_seq: b64ToDataView(b64(Int32Array, [0, 0, 1])), shape: b64ToDataView(b64(Int32Array, [0, 0, -1])),
    dtype: b64ToDataView(b64(Int16Array, [0, 0, -1])), buffer_id: b64ToDataView(b64(Int32Array, [5, 5, 6])),
    ref_count: b64ToDataView(b64(Int32Array, [2, 1, 1])), initial_ref_count: b64ToDataView(b64(Int32Array, [2, 2, 1])),
    source: b64ToDataView(b64(Int32Array, [0, 0, -1])),
  };
  const doc = {
    state: { meta: { num_cells: 2, ops: ["create", "join", "release", "free", "error"], resources: ["buffer", "barrier"], spaces: ["GMEM", "SMEM"] } },
    details: det,
    tables: { shapes: ["(8, 128)"], dtypes: ["float32"], sources: [{ file: "k.py", line: 4, label: "k.py:4" }] },
    snippets: { "k.py:4": { start: 1, lines: ["a", "b", "c", "d"] } },
    ev: { op: Uint8Array.from([0, 1, 0]), resource: Uint8Array.from([0, 0, 1]), space: Int8Array.from([1, 1, -1]),
      warp: Int8Array.from([-1, -1, -1]), alloc: Int32Array.from([1, 1, 2]), nbytes: Uint32Array.from([4096, 4096, 0]) },
  };
  const a = new Answerer(doc, Int32Array.from([0, 1, 1]));
  const r = a.answer({ type: "events", id: 9, cell: 1 });
  assert.equal(r.id, 9);
  assert.equal(r.total, 2);
  assert.deepEqual(r.rows[0], [1, 0, "join", "buffer", "SMEM", null, "(8, 128)", "float32", 4096, 5, 1, 2, 1, 0]);
  assert.deepEqual(r.rows[1].slice(0, 5), [2, 1, "create", "barrier", null]);
  assert.equal(r.sources["0"].file, "k.py");
  assert.equal(a.answer({ type: "events", id: 1, cell: 7 }).total, 0);
  const s = a.answer({ type: "source", id: 3, file: "k.py", line: 4 });
  assert.deepEqual(s.lines, ["a", "b", "c", "d"]);
  assert.deepEqual(a.answer({ type: "source", id: 4, file: "nope.py", line: 1 }).lines, []);
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

test("the model shim answers on a later task, reading the second document only when needed", async () => {
  const meta = { num_events: 3, num_cells: 2, ops: ["create", "join", "release", "free", "error"],
    resources: ["buffer", "barrier"], spaces: ["GMEM", "SMEM"], column_types: { cell: "<i2" } };
  let parsed = 0;
  const more = () => {
    parsed++;
    return {
      columns: { op: b64(Uint8Array, [0, 1, 0]), resource: b64(Uint8Array, [0, 0, 1]), space: b64(Int8Array, [1, 1, -1]),
        alloc: b64(Int32Array, [1, 1, 2]), nbytes: b64(Uint32Array, [4096, 4096, 0]) },
      details: { thread_seq: b64(Int8Array, [0, 0, 1]), shape: b64(Int8Array, [0, 0, -1]), dtype: b64(Int8Array, [0, 0, -1]),
        buffer_id: b64(Int16Array, [5, 5, 6]), ref_count: b64(Int8Array, [2, 1, 1]), initial_ref_count: b64(Int8Array, [2, 2, 1]),
        source: b64(Int8Array, [0, 0, -1]) },
      detail_types: { thread_seq: "<i1", shape: "<i1", dtype: "<i1", buffer_id: "<i2", ref_count: "<i1",
        initial_ref_count: "<i1", source: "<i1" },
    };
  };
  const raw = { state: { meta, columns: { cell: b64(Int16Array, [0, 1, 1]), warp: b64(Int8Array, [-1, -1, -1]) },
    cells: { row: b64(Int32Array, [0, 0]) } },
  tables: { shapes: ["(8, 128)"], dtypes: ["float32"], sources: [{ file: "k.py", line: 4 }] }, snippets: {} };
  const doc = makeDoc(raw, more);
  assert.deepEqual([...new Int16Array(doc.state.columns.cell.buffer)], [0, 1, 1]);
  assert.equal(parsed, 0); // the first document has the cell column
  const model = makeModel(doc);
  assert.deepEqual(model.get("data").meta, meta);
  const replies = [];
  model.on("msg:custom", (r) => replies.push(r));
  model.send({ type: "events", id: 1, cell: 1 });
  assert.equal(replies.length, 0); // not synchronously
  await new Promise((r) => setTimeout(r, 5));
  assert.equal(replies.length, 1);
  assert.equal(parsed, 1);
  assert.deepEqual(replies[0].rows[0], [1, 0, "join", "buffer", "SMEM", null, "(8, 128)", "float32", 4096, 5, 1, 2, 1, 0]);
  assert.deepEqual(replies[0].rows[1].slice(0, 5), [2, 1, "create", "barrier", null]);
  model.send({ type: "source", id: 2, file: "k.py", line: 4 });
  await new Promise((r) => setTimeout(r, 5));
  assert.equal(parsed, 1);
  assert.deepEqual(replies[1].lines, []);
});
