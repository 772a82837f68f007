// The findings list: one card per root cause, naming its blocks and threads (who made
// the request, who never did), its branch line, its fix and its folded consequences.
// A listbox: arrow keys move the selection, Enter/Space select, Esc clears.
import { branchRole, h, locLabel, replace } from "../format.js";
import { cellsName, ranges, shortName } from "../names.js";

export class FindingsView {
  constructor(app) {
    this.app = app;
    this.el = h("div", { class: "pv-findings", role: "listbox", "aria-label": "findings (root causes): arrow keys move, Escape clears" });
    this.el.addEventListener("keydown", (e) => this.key(e));
    this.items = [];
  }

  render() {
    const app = this.app;
    const fs = app.meta.findings;
    const sel = app.store.state.finding;
    if (!fs.length) {
      const unplaced = app.meta.unplaced_events || 0;
      const analysed = app.meta.num_events - unplaced;
      replace(this.el, unplaced
        ? h("div", { class: "pv-clean-msg" }, h("div", { class: "pv-big" }, "?"),
          `Not verified: ${unplaced} block-level event${unplaced === 1 ? "" : "s"} could not be placed in a (device, block, thread); ${analysed} analysed.`)
        : h("div", { class: "pv-clean-msg" }, h("div", { class: "pv-big" }, "✓"),
          `No findings in ${analysed} analysed event${analysed === 1 ? "" : "s"}: every thread of every block made matching allocations, and everything allocated was freed.`));
      this.items = [];
      return;
    }
    this.items = fs.map((f, i) => this.card(f, i, i === sel));
    replace(this.el, this.items);
    if (sel >= 0) this.el.setAttribute("aria-activedescendant", this.items[sel].id);
  }

  card(f, i, selected) {
    const app = this.app;
    const missingCells = new Set((f.missing || []).map((m) => m.cell));
    // A root cause several runs of a kernel had (a kernel called in a loop): one card, its
    // cells named in the run the grid shows (else its first run); every run's are lit.
    const runs = f.runs || [];
    const repeated = runs.length > 1;
    const cur = app.store.state.kernel;
    const shown = repeated && runs.includes(cur) ? cur : f.kernel;
    const named = repeated ? f.cells.filter((c) => app.meta.rows[app.data.cells.row[c]].kernel === shown) : f.cells;
    const made = named.filter((c) => !missingCells.has(c));
    const skipped = named.filter((c) => missingCells.has(c));
    const where = [];
    if (made.length) where.push(h("div", { class: "pv-where", title: "the cells this finding is about" }, h("span", { class: "pv-where-k" }, skipped.length ? "made it: " : "where: "), cellsName(app.data, made)));
    if (skipped.length) where.push(h("div", { class: "pv-where pv-where-missing", title: "threads that never made the request (drawn hatched in the grid)" }, h("span", { class: "pv-where-k" }, "never did: "), cellsName(app.data, skipped)));
    if (!f.cells.length && f.kernel != null) where.push(h("div", { class: "pv-where" }, `kernel ${f.kernel}${app.meta.kernels.length > 1 ? "" : ""} (no block)`));
    const card = h("div", {
      class: `pv-finding pv-sev-${f.severity}${selected ? " pv-selected" : ""}`, role: "option",
      id: `${app.uid}-finding-${i}`, tabindex: selected || (app.store.state.finding < 0 && i === 0) ? "0" : "-1",
      "aria-selected": String(selected), onclick: () => app.selectFinding(i),
    },
    h("div", { class: "pv-fhead" },
      h("span", { class: "pv-sevicon", title: f.severity, "aria-label": f.severity }, f.severity === "error" ? "●" : "▲"),
      h("span", { class: "pv-kind", title: `finding kind: ${f.kind}` }, f.kind.replaceAll("_", " ")),
      f.source ? h("span", { class: "pv-floc", title: f.source.file }, locLabel(f.source)) : null,
      repeated ? h("span", { class: "pv-runs pv-muted", title: "the same root cause in each of these runs of the kernel (a kernel called in a loop)" }, ` in kernel runs ${ranges(runs)}`) : null),
    where,
    h("div", { class: "pv-msg" }, f.message),
    f.branch ? h("div", { class: "pv-branch", title: `${f.branch.file}:${f.branch.line}` }, h("b", {}, `${branchRole(f.branch)}: `),
      locLabel(f.branch), f.branch.code ? h("code", {}, ` ${f.branch.code.trim()}`) : null) : null,
    selected && f.suggestion ? h("div", { class: "pv-suggest" }, h("b", {}, "fix: "), f.suggestion) : null,
    f.consequences && f.consequences.length
      ? h("details", { class: "pv-consequences", onclick: (e) => e.stopPropagation() },
        h("summary", { title: "symptoms this root cause explains" }, `${f.consequences.length} consequence${f.consequences.length === 1 ? "" : "s"} of this root cause`),
        f.consequences.map((c) => h("div", { class: `pv-consequence pv-sev-${c.severity}` },
          h("span", { class: "pv-kind" }, c.kind.replaceAll("_", " ")),
          c.source ? h("span", { class: "pv-floc", title: c.source.file }, ` ${locLabel(c.source)} `) : null,
          c.cells.length ? h("span", { class: "pv-muted" }, ` ${cellsName(app.data, c.cells, 2)} `) : null,
          h("span", { class: "pv-msg" }, c.message))))
      : null,
    selected ? h("div", { class: "pv-muted pv-fcells" }, `${f.cells.length} cell${f.cells.length === 1 ? "" : "s"} · ${f.num_events} event${f.num_events === 1 ? "" : "s"}${f.kernel != null && app.meta.kernels.length > 1 ? ` · ${repeated ? `kernel runs ${ranges(runs)}` : `kernel ${f.kernel}`}${shortName(app.meta.kernels.find((k) => k.index === f.kernel)?.name) ? ` ${shortName(app.meta.kernels.find((k) => k.index === f.kernel).name)}` : ""}` : ""}`) : null);
    return card;
  }

  key(e) {
    const app = this.app;
    const n = app.meta.findings.length;
    if (!n) return;
    const cur = app.store.state.finding;
    if (e.key === "Escape") {
      e.preventDefault();
      e.stopPropagation();
      const at = Math.max(0, this.items.indexOf(e.target.closest(".pv-finding")));
      app.clearFinding();
      const el = this.items[at];
      if (el) { el.tabIndex = 0; el.focus({ preventScroll: true }); }
      return;
    }
    let next = null;
    if (e.key === "ArrowDown") next = cur < 0 ? 0 : Math.min(n - 1, cur + 1);
    else if (e.key === "ArrowUp") next = cur < 0 ? 0 : Math.max(0, cur - 1);
    else if (e.key === "Home") next = 0;
    else if (e.key === "End") next = n - 1;
    else if (e.key === "Enter" || e.key === " ") {
      const i = this.items.indexOf(e.target.closest(".pv-finding"));
      if (i >= 0) next = i;
    }
    if (next != null && cur < 0 && (e.key === "ArrowDown" || e.key === "ArrowUp")) {
      const i = this.items.indexOf(e.target.closest(".pv-finding"));
      if (i >= 0) next = i;
    }
    if (next == null) return;
    e.preventDefault();
    e.stopPropagation();
    app.selectFinding(next);
    this.focusSelected();
  }

  focusSelected() {
    const i = this.app.store.state.finding;
    const el = this.items[i];
    if (el) { el.focus({ preventScroll: true }); if (el.scrollIntoView) el.scrollIntoView({ block: "nearest" }); }
  }
}
