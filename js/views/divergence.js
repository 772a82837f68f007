// The divergence view of one block: each thread's requests side by side, aligned like a
// diff (the analysis's own alignment for the blocks of a finding, sent in the payload; the
// same kind of alignment computed here for any other block), gaps where a thread never
// made a request, each row linked to its line.
import { h, locLabel, replace } from "../format.js";
import { threadWord } from "../names.js";

const MAX_LEN = 1500;

/** LCS pairs (i in a, j in b) of two signature arrays. */
export function lcsPairs(a, b) {
  const n = a.length, m = b.length;
  const L = new Uint16Array((n + 1) * (m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      L[i * (m + 1) + j] = a[i] === b[j] ? L[(i + 1) * (m + 1) + j + 1] + 1
        : Math.max(L[(i + 1) * (m + 1) + j], L[i * (m + 1) + j + 1]);
    }
  }
  const out = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) { out.push([i, j]); i++; j++; } else if (L[(i + 1) * (m + 1) + j] >= L[i * (m + 1) + j + 1]) i++; else j++;
  }
  return out;
}

/**
 * `{threads, rows}` like the Python `block_alignment`: `seqs[t]` = event indices of thread
 * t's requests, `sig[t]` = their signatures. Each thread is aligned against thread 0.
 */
export function alignSequences(seqs, sig) {
  const n = seqs.length;
  if (!n) return { threads: [], rows: [] };
  const base = sig[0] || [];
  const matched = base.map((_, i) => ({ 0: seqs[0][i] }));
  const extra = new Map();
  for (let t = 1; t < n; t++) {
    const pairs = lcsPairs(base, sig[t] || []);
    const pairOf = new Map(pairs.map(([i, j]) => [j, i]));
    let nextBase = 0;
    const sorted = pairs.slice().sort((x, y) => x[1] - y[1]);
    let k = 0;
    for (let j = 0; j < (sig[t] || []).length; j++) {
      while (k < sorted.length && sorted[k][1] < j) { nextBase = sorted[k][0] + 1; k++; }
      if (pairOf.has(j)) matched[pairOf.get(j)][t] = seqs[t][j];
      else {
        if (!extra.has(nextBase)) extra.set(nextBase, []);
        extra.get(nextBase).push([t, seqs[t][j]]);
      }
    }
  }
  const rows = [];
  for (let i = 0; i <= base.length; i++) {
    for (const [t, s] of extra.get(i) || []) { const row = new Array(n).fill(null); row[t] = s; rows.push(row); }
    if (i < base.length) rows.push(Array.from({ length: n }, (_, t) => (matched[i][t] === undefined ? null : matched[i][t])));
  }
  return { threads: Array.from({ length: n }, (_, t) => t), rows };
}

export class DivergenceView {
  constructor(app) {
    this.app = app;
    this.el = h("div", { class: "pv-divergence" });
  }

  /** The alignment of block row `r`: the payload's, else computed from the details. */
  alignment(r) {
    const app = this.app;
    for (const f of app.meta.findings) for (const a of f.alignments || []) if (a.row === r) return { ...a, source: "analysis" };
    const det = app.data.det;
    if (!det) return null;
    const row = app.meta.rows[r];
    const k = app.meta.kernels.find((x) => x.index === row.kernel);
    const threads = k ? k.threads : 1;
    const { OP, ev, protocol: p } = app.data;
    const regs = p.spaces.indexOf("REGS");
    const seqs = [], sig = [];
    for (let t = 0; t < threads; t++) {
      const all = app.answerer.seqsOf(row.start + t);
      const s = [], g = [];
      for (const i of all) {
        const o = ev.op[i];
        if ((o !== OP.create && o !== OP.join) || ev.space[i] === regs) continue;
        s.push(i);
        g.push(`${det.source[i]}|${ev.resource[i]}|${ev.space[i]}|${det.shape[i]}|${det.dtype[i]}|${det.initial_ref_count[i] > 1 ? 1 : 0}`);
        if (s.length >= MAX_LEN) break;
      }
      seqs.push(s); sig.push(g);
    }
    return { row: r, ...alignSequences(seqs, sig), source: "computed" };
  }

  render(r) {
    const app = this.app;
    if (r == null || r < 0) { replace(this.el, h("div", { class: "pv-empty" }, "Select a cell to compare its block's threads.")); return; }
    const al = this.alignment(r);
    const row = app.meta.rows[r];
    const tw = threadWord(app.meta, row.kernel);
    const title = h("div", { class: "pv-pane-title", title: "each thread's requests side by side, aligned; a gap (∅) is a request that thread never made" },
      `Threads of block ${row.label} side by side`);
    if (!al) { replace(this.el, title, h("div", { class: "pv-empty" }, "This trace is too large to hold event details in the page: the alignment is shown for the blocks of each finding only.")); return; }
    if (!al.rows.length) { replace(this.el, title, h("div", { class: "pv-empty" }, "No requests in this block.")); return; }
    const gaps = al.rows.filter((x) => x.includes(null)).length;
    const cells = (seq) => {
      if (seq == null) return h("td", { class: "pv-gap", title: "never requested by this thread" }, "∅ never");
      const d = app.describe(seq);
      return h("td", { class: "pv-alcell", title: d.loc ? `${d.loc.file}:${d.loc.line}` : "" },
        h("span", { class: `pv-op pv-op-${d.op}` }, d.op), ` ${d.what}`, d.loc ? h("span", { class: "pv-loc" }, ` ${locLabel(d.loc)}`) : null);
    };
    const body = al.rows.map((x) => {
      const any = x.find((s) => s != null);
      const d = any != null ? app.describe(any) : null;
      return h("tr", { class: `pv-alrow${x.includes(null) ? " pv-alrow-gap" : ""}`, tabindex: "0",
        onclick: () => d && d.loc && app.showSource(d.loc, "aligned request"),
        onkeydown: (e) => { if (e.key === "Enter" && d && d.loc) app.showSource(d.loc, "aligned request"); } },
      x.map(cells));
    });
    replace(this.el, title,
      h("div", { class: "pv-muted pv-alnote" }, gaps ? `${gaps} position${gaps === 1 ? "" : "s"} where the threads part` : "the threads agree at every position",
        al.truncated ? " (first rows only)" : ""),
      h("div", { class: "pv-tablewrap" }, h("table", { class: "pv-table pv-altable" },
        h("thead", {}, h("tr", {}, al.threads.map((t) => h("th", { scope: "col", title: `the requests of ${tw} ${t}, in its order` }, `${tw} ${t}`)))),
        h("tbody", {}, body))));
  }
}
