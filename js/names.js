// Names of blocks, threads and sets of cells as the user reads them: `block (41) · w 1`,
// with the kernel's own thread axis name.

export function shortName(name) {
  return name ? name.replaceAll(".<locals>", "") : "";
}

/** The kernel's thread axis name ("w"), or "thread". */
export function threadWord(meta, kernel) {
  const k = meta.kernels.find((kk) => kk.index === kernel) || meta.kernels[0];
  return (k && k.thread_axis) || "thread";
}

/** "0..3" for consecutive numbers, "0, 2, 5" otherwise (sorted). */
export function ranges(nums) {
  const xs = [...new Set(nums)].sort((a, b) => a - b);
  if (!xs.length) return "";
  const parts = [];
  let a = xs[0], b = xs[0];
  for (let i = 1; i <= xs.length; i++) {
    if (i < xs.length && xs[i] === b + 1) { b = xs[i]; continue; }
    parts.push(a === b ? String(a) : b === a + 1 ? `${a}, ${b}` : `${a}..${b}`);
    if (i < xs.length) { a = b = xs[i]; }
  }
  return parts.join(", ");
}

/** `block (41) · w 1` for one cell. */
export function cellName(data, c) {
  const meta = data.meta;
  const row = meta.rows[data.cells.row[c]];
  return `block ${row.label} · ${threadWord(meta, row.kernel)} ${data.cells.thread[c]}`;
}

/**
 * The blocks and threads of a set of cells, grouped by block: `block (41) · w 0, 1`,
 * `blocks (0), (1) · w 0..1` when every block has the same threads; at most `max` groups.
 */
export function cellsName(data, cells, max = 3) {
  const meta = data.meta;
  if (!cells.length) return "";
  const byRow = new Map();
  for (const c of cells) {
    const r = data.cells.row[c];
    if (!byRow.has(r)) byRow.set(r, []);
    byRow.get(r).push(data.cells.thread[c]);
  }
  const rows = [...byRow.keys()].sort((a, b) => a - b);
  const tw = threadWord(meta, meta.rows[rows[0]].kernel);
  const threadSets = rows.map((r) => ranges(byRow.get(r)));
  if (rows.length > 1 && threadSets.every((s) => s === threadSets[0])) {
    const labels = rows.slice(0, max).map((r) => meta.rows[r].label);
    const more = rows.length > max ? ` and ${rows.length - max} more` : "";
    return `blocks ${labels.join(", ")}${more} · ${tw} ${threadSets[0]}`;
  }
  const parts = rows.slice(0, max).map((r, i) => `block ${meta.rows[r].label} · ${tw} ${threadSets[i]}`);
  if (rows.length > max) parts.push(`${rows.length - max} more block${rows.length - max === 1 ? "" : "s"}`);
  return parts.join("; ");
}
