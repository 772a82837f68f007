import assert from "node:assert/strict";
import { test } from "node:test";
import { Answerer, b64ToDataView } from "../standalone.js";
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
