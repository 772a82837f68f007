// The events of the selected cell (or of a kernel's operands), in recording order. A
// thread that never made a finding's request gets a placeholder row where it belongs in
// its sequence ("never requested: SMEM (8, 128) float32 at line 60").
import { fmtBytes, h, locLabel, replace } from "../format.js";
import { rowFields } from "../protocol.js";
import { cellName } from "../names.js";
import { LIMIT_SPACES, peakOf } from "./peak.js";

const PAGE = 500;
// Column: [header, tooltip]. The line comes early so that it stays in view at 1,400 px.
const COLS = [
  ["seq", "position of the event in the whole recording (replay step)"],
  ["op", "create, join (a collective buffer another thread created), release, free, error"],
  ["resource", "buffer, barrier or cluster barrier; coll = collective, shared by the block's threads"],
  ["space", "memory space: GMEM, SMEM, TMEM, REGS"],
  ["shape", "buffer shape"],
  ["dtype", "element type"],
  ["line", "the kernel line that made the request (click the row for the source)"],
  ["bytes", "buffer size"],
  ["buffer", "the interpreter's buffer id"],
  ["ref", "reference count after this event / when created"],
  ["warp", "warp, when the event has one"],
  ["#", "position of the event in this thread's own sequence"],
];

export class EventsView {
  constructor(app) {
    this.app = app;
    this.el = h("div", { class: "pv-events" });
    this.reply = null;
    this.rows = new Map();
    this.token = 0;
  }

  empty(text) {
    this.reply = null;
    replace(this.el, h("div", { class: "pv-empty" }, text));
  }

  /** List the events of `sel` ({cell} or {operands, kernel}). */
  async load(sel) {
    const app = this.app;
    const token = ++this.token;
    const limit = Math.min(PAGE, app.protocol.limits.rows_per_reply);
    this.loadingTimer = setTimeout(() => {
      if (token === this.token) replace(this.el, h("div", { class: "pv-empty" }, "Loading events…"));
    }, 120);
    const msg = sel.operands ? { type: "events", operands: true, kernel: sel.kernel, offset: 0, limit }
      : { type: "events", cell: sel.cell, offset: 0, limit };
    const reply = await app.transport.request(msg);
    clearTimeout(this.loadingTimer);
    if (token !== this.token) return;
    if (reply.error && !(reply.rows && reply.rows.length)) {
      this.reply = null;
      replace(this.el, this.title(sel, null), h("div", { class: "pv-empty pv-error-msg", role: "alert" }, `Could not list these events: ${reply.error}`));
      return;
    }
    this.reply = { ...reply, sel };
    this.render();
  }

  async more() {
    const r = this.reply;
    if (!r) return;
    const token = this.token;
    const msg = r.sel.operands ? { type: "events", operands: true, kernel: r.sel.kernel } : { type: "events", cell: r.sel.cell };
    const more = await this.app.transport.request({ ...msg, offset: r.rows.length, limit: PAGE });
    if (token !== this.token || more.error) return;
    r.rows = r.rows.concat(more.rows);
    Object.assign(r.sources, more.sources);
    this.render();
  }

  title(sel, reply, shown) {
    const app = this.app;
    const what = sel.operands ? `Kernel operands of kernel ${sel.kernel}` : `Events of ${cellName(app.data, sel.cell)}`;
    const count = reply ? ` ${reply.total} event${reply.total === 1 ? "" : "s"}${shown != null && shown < reply.rows.length ? `, ${shown} shown by the filters` : ""}` : "";
    return h("div", { class: "pv-pane-title" }, what, h("span", { class: "pv-muted" }, count), sel.operands ? null : this.peakLink(sel.cell));
  }

  /** The cell's block peak in words, a link to the buffers live at it (the Timeline tab). */
  peakLink(cell) {
    const app = this.app;
    const tl = app.timeline;
    if (!tl || !tl.peak || !tl.peak.pk || cell < 0) return null;
    const row = app.data.cells.row[cell];
    const spaces = LIMIT_SPACES.map((s) => peakOf(tl.peak.pk, s, row)).filter(Boolean);
    if (!spaces.length) return null;
    const n = spaces.reduce((k, p) => k + p.items.length, 0);
    return h("button", { class: "pv-link pv-peak-link", title: "the buffers live at this block's memory peak: shape, dtype, bytes, line (Timeline tab)", onclick: () => app.store.set({ tab: "timeline" }) },
      `${spaces.map((p) => p.text).join(" · ")} · ${n} buffer${n === 1 ? "" : "s"} live ›`);
  }

  render() {
    const app = this.app;
    const reply = this.reply;
    if (!reply) return;
    const p = app.protocol;
    const F = rowFields(p);
    const st = app.store.state;
    const filter = st.filter;
    const shown = reply.rows.filter((r) => filter.resources[p.resources.indexOf(r[F.resource])] !== false
      && (r[F.space] == null || filter.spaces[p.spaces.indexOf(r[F.space])] !== false));
    const curSeq = st.mode === "live" ? app.replayEvent - 1 : -1;
    this.rows = new Map();
    this.curShown = curSeq;
    const placeholders = reply.sel.operands ? [] : app.missingOf(reply.sel.cell);
    const before = new Map();
    const after = [];
    for (const m of placeholders) {
      if (m.before == null) after.push(m);
      else { if (!before.has(m.before)) before.set(m.before, []); before.get(m.before).push(m); }
    }
    const body = [];
    for (const r of shown) {
      const seq = r[F.seq];
      for (const m of before.get(seq) || []) body.push(this.placeholder(m));
      body.push(this.row(r, reply, curSeq));
    }
    // a placeholder whose event is filtered out or past the loaded page still shows
    const shownSeqs = new Set(shown.map((r) => r[F.seq]));
    for (const [seq, ms] of before) if (!shownSeqs.has(seq)) for (const m of ms) body.push(this.placeholder(m));
    for (const m of after) body.push(this.placeholder(m));
    const table = h("table", { class: "pv-table" },
      h("thead", {}, h("tr", {}, COLS.map(([x, tip]) => h("th", { title: tip, scope: "col" }, x)))), h("tbody", {}, body));
    const more = reply.rows.length < reply.total
      ? h("button", { class: "pv-btn pv-more", onclick: () => this.more() }, `load more (${reply.total - reply.rows.length} left)`)
      : null;
    const none = reply.sel.operands ? "This kernel has no kernel-level requests."
      : "This thread made no allocation requests (it never reached them).";
    replace(this.el, this.title(reply.sel, reply, shown.length),
      reply.total || body.length ? h("div", { class: "pv-tablewrap" }, table) : null,
      reply.total ? null : h("div", { class: "pv-empty" }, none), more);
  }

  row(r, reply, curSeq) {
    const app = this.app;
    const F = rowFields(app.protocol);
    const st = app.store.state;
    const seq = r[F.seq];
    const src = r[F.source];
    const loc = src >= 0 ? reply.sources[String(src)] : null;
    const cls = ["pv-ev"];
    if (app.litEvents.has(seq)) cls.push("pv-ev-lit");
    if (seq === st.selEvent) cls.push("pv-ev-sel");
    if (seq === curSeq) cls.push("pv-ev-cur");
    const spaces = app.protocol.spaces;
    const sp = r[F.space], op = r[F.op], irc = r[F.initial_ref_count];
    const tr = h("tr", { class: cls.join(" "), tabindex: "0", onclick: () => app.selectEvent(seq, loc),
      onkeydown: (e) => { if (e.key === "Enter") app.selectEvent(seq, loc); } },
    h("td", { class: "pv-num" }, String(seq)),
    h("td", {}, h("span", { class: `pv-op pv-op-${op}` }, op)),
    h("td", {}, r[F.resource], irc > 1 ? h("span", { class: "pv-coll-tag", title: "collective: shared by the threads of the block" }, "coll") : null),
    h("td", {}, sp ? h("span", { class: `pv-sp pv-space-${spaces.indexOf(sp)}` }, sp) : "—"),
    h("td", { class: "pv-code" }, r[F.shape] || "—"), h("td", { class: "pv-code" }, r[F.dtype] || "—"),
    h("td", { class: "pv-loc", title: loc ? `${loc.file}:${loc.line}` : "" }, loc ? locLabel(loc) : "—"),
    h("td", { class: "pv-num" }, r[F.nbytes] ? fmtBytes(r[F.nbytes]) : "—"), h("td", { class: "pv-num" }, String(r[F.buffer_id])),
    h("td", { class: "pv-num" }, `${r[F.ref_count]}/${irc}`), h("td", { class: "pv-num" }, r[F.warp] == null ? "—" : String(r[F.warp])),
    h("td", { class: "pv-num pv-muted" }, String(r[F.thread_seq])));
    this.rows.set(seq, tr);
    return tr;
  }

  placeholder(m) {
    const app = this.app;
    const text = `never requested: ${m.what}${m.line != null ? ` at line ${m.line}` : ""}`;
    return h("tr", { class: "pv-ev pv-ev-missing", tabindex: "0", title: `this thread never made the request the finding is about (${m.kind})`,
      onclick: () => app.selectFinding(m.finding),
      onkeydown: (e) => { if (e.key === "Enter") app.selectFinding(m.finding); } },
    h("td", { class: "pv-num" }, "∅"),
    h("td", { colspan: String(COLS.length - 1), class: "pv-missing-text" }, text));
  }

  /** Move the "current replay event" mark without rebuilding the table. */
  markCurrent(cur) {
    if (!this.rows || cur === this.curShown) return;
    const old = this.rows.get(this.curShown);
    if (old) old.classList.remove("pv-ev-cur");
    const now = this.rows.get(cur);
    if (now) now.classList.add("pv-ev-cur");
    this.curShown = cur;
  }
}
