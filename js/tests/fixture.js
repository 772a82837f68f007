// A protocol description like the one pallas_viz/render/payload.py sends (`meta.protocol`),
// for hand-made payloads in the unit tests (tests/test_frontend.py checks the real one).
export const OPS = ["create", "join", "release", "free", "error"];
export const OP = { create: 0, join: 1, release: 2, free: 3, error: 4 };

export function protocol(columnTypes = {}, detailTypes = {}) {
  return {
    version: 2, ops: OPS, resources: ["buffer", "barrier", "cluster_barrier"], spaces: ["GMEM", "SMEM", "TMEM", "REGS"],
    flags: { collective: 1, warning: 2, error: 4, failed: 8 },
    column_types: { op: "<u1", resource: "<u1", space: "<i1", warp: "<i1", cell: "<i4", alloc: "<i4", nbytes: "<u4", ...columnTypes },
    cell_types: { row: "<i4", thread: "<i4", flags: "<u1" },
    detail_types: detailTypes,
    event_row: ["seq", "thread_seq", "op", "resource", "space", "warp", "shape", "dtype", "nbytes", "buffer_id", "ref_count", "initial_ref_count", "alloc", "source"],
    limits: { rows_per_reply: 2000, finding_events: 10000, inline_details_max_events: 2000000, request_timeout_ms: 200, aligned_blocks: 8, aligned_rows: 400, fold_min_run: 3 },
  };
}
