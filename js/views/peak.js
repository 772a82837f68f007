// The buffers live at a block's SMEM / TMEM / REGS peak (the timeline pane shows it for its block,
// which follows the selected cell): the peak against the device's limit in words
// ("SMEM peak 96.0 KiB / 227 KiB (42 %) at line 118", from Python's `budget.peak_text`), then
// one row per live buffer, largest first: shape (or barrier), dtype, what it counts for (bytes,
// TMEM in columns), its line. The numbers come from `payload.peak_state` (the budget analysis'
// `SpacePeak.live`); this file only lists them. Clicking a row (or Enter on it) selects its
// request like a timeline bar does. Trace text goes through textContent (format.js `h`).
import { fmtBytes, h, locLabel, replace } from "../format.js";
import { unpack } from "./timeline.js";

export const PEAK_SPACES = ["SMEM", "TMEM", "REGS"];
// The spaces whose limit a kernel can hit at compile time: the events pane's link names these.
export const LIMIT_SPACES = ["SMEM", "TMEM"];

/** The payload's `meta.timeline.peak`, decoded (typed arrays), or null. */
export function decodePeak(pk) {
  if (!pk) return null;
  const out = { texts: pk.texts || [], kinds: pk.kinds || [], maxRows: pk.max_rows };
  for (const s of PEAK_SPACES) {
    const p = pk[s];
    out[s] = p ? { text: unpack(p.text), overhead: unpack(p.overhead), more: unpack(p.more), offsets: unpack(p.offsets), event: unpack(p.event), kind: unpack(p.kind) } : null;
  }
  return out;
}

/**
 * Block row `row`'s peak of `space`: `{text, overhead, more, items: [{event, kind}]}` (items
 * largest first, `kind` the shared description), or null when nothing of it is live.
 */
export function peakOf(pk, space, row) {
  const p = pk && pk[space];
  if (!p || row < 0 || row >= p.text.length || p.text[row] < 0) return null;
  const items = [];
  for (let i = p.offsets[row]; i < p.offsets[row + 1]; i++) items.push({ event: p.event[i], kind: pk.kinds[p.kind[i]] });
  return { text: pk.texts[p.text[row]], overhead: p.overhead[row], more: p.more[row], items };
}

/** The columns of one live buffer's row: [what, dtype, size, line]. */
export function peakCells(kind) {
  const what = kind.resource === "buffer" ? (kind.shape || "buffer") : kind.resource.replace("_", " ");
  const size = kind.space === "TMEM" && kind.narrow ? `${kind.size} (packed)` : kind.size;
  const line = `${kind.source ? locLabel(kind.source) : "no line recorded"}${kind.kernel_level ? " (kernel-level)" : ""}`;
  return [what, kind.resource === "buffer" ? kind.dtype || "" : "", size, line];
}

export class PeakView {
  /** `onSelect(event, loc)`: a row was chosen. */
  constructor(app, { onSelect }) {
    this.app = app;
    this.pk = decodePeak(app.meta.timeline && app.meta.timeline.peak);
    this.onSelect = onSelect;
    this.row = -1;
    this.el = h("div", { class: "pv-peak", role: "region", "aria-label": "buffers live at the memory peak" });
  }

  render(row) {
    this.row = row;
    const parts = [];
    const counts = {};
    for (const space of PEAK_SPACES) {
      const p = peakOf(this.pk, space, row);
      if (!p) continue;
      counts[space] = p.items.length;
      const rows = p.items.map((it) => {
        const cells = peakCells(it.kind);
        const tip = `${it.kind.space} ${cells[0]} ${cells[1]} · ${it.kind.nbytes} bytes requested${it.kind.charge !== it.kind.nbytes && it.kind.space !== "TMEM" ? `, ${it.kind.charge} counted` : ""} · request at step ${it.event} (click: select it and show its line)`;
        return h("tr", { class: "pv-peak-row", tabindex: "0", title: tip, "data-event": it.event, "data-space": space,
          onclick: () => this.onSelect(it.event, it.kind.source),
          onkeydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); this.onSelect(it.event, it.kind.source); } } },
        ...cells.map((c, j) => h("td", { class: `pv-peak-c${j}` }, c)));
      });
      if (p.overhead > 0) rows.push(h("tr", { class: "pv-peak-overhead", title: "counted in the peak, but no buffer of the kernel: the SMEM slot holding the TMEM address" }, h("td", {}, "TMEM address slot"), h("td", {}, ""), h("td", { class: "pv-peak-c2" }, fmtBytes(p.overhead)), h("td", {}, "")));
      if (p.more > 0) rows.push(h("tr", { class: "pv-peak-more" }, h("td", { colspan: "4" }, `… ${p.more} more (the smallest)`)));
      parts.push(h("div", { class: "pv-peak-space", "data-space": space },
        h("div", { class: "pv-peak-head" }, p.text),
        h("table", { class: "pv-peak-list", "aria-label": `buffers live at the ${space} peak, largest first` },
          h("thead", {}, h("tr", {}, ...["buffer", "dtype", space === "TMEM" ? "columns" : "bytes", "line"].map((x) => h("th", {}, x)))),
          h("tbody", {}, ...rows))));
    }
    if (!parts.length) parts.push(h("div", { class: "pv-muted pv-peak-none" }, "no SMEM, TMEM or REGS live in this block"));
    replace(this.el, parts);
    this.el.setAttribute("data-row", String(row));
    this.el.setAttribute("data-counts", JSON.stringify(counts));
    this.mark();
  }

  /** Outline the row of the selected event. */
  mark() {
    const sel = this.app.store.state.selEvent;
    for (const tr of this.el.querySelectorAll(".pv-peak-row")) tr.classList.toggle("pv-peak-sel", sel != null && +tr.getAttribute("data-event") === sel);
  }
}
