// The source panel: the stored lines around the hit line, the hit line wrapped (never cut)
// with a caret under its column, the finding's branch line highlighted too. Its width is
// the user's: a handle on its left edge drags it.
import { branchRole, h, locLabel, replace } from "../format.js";
import { shortName } from "../names.js";

export class SourceView {
  constructor(app) {
    this.app = app;
    this.el = h("div", { class: "pv-source" });
    this.token = 0;
  }

  empty(text) {
    replace(this.el, h("div", { class: "pv-empty" }, text));
  }

  async show(loc, why, branch) {
    if (!loc) { this.empty("JAX recorded no source line for this."); return; }
    const app = this.app;
    const token = ++this.token;
    const reply = await app.transport.request({ type: "source", file: loc.file, line: loc.line });
    if (token !== this.token) return;
    const lines = reply.lines && reply.lines.length ? reply.lines : [loc.code || ""];
    const start = reply.lines && reply.lines.length ? reply.start : loc.line;
    let branchBlock = null;
    const inWindow = branch && branch.file === loc.file && branch.line >= start && branch.line < start + lines.length;
    if (branch && !inWindow) {
      const br = await app.transport.request({ type: "source", file: branch.file, line: branch.line });
      if (token !== this.token) return;
      const text = br.lines && br.lines.length ? br.lines[branch.line - br.start] : branch.code;
      if (text != null) {
        branchBlock = h("div", { class: "pv-codeblock pv-branchblock" }, h("div", { class: "pv-codelines" },
          this.line(branch.line, text, "pv-line pv-line-branch", null, branchRole(branch))));
      }
    }
    const code = h("div", { class: "pv-codeblock" }, h("div", { class: "pv-codelines" }, lines.map((text, i) => {
      const n = start + i;
      if (n === loc.line) return this.line(n, text, "pv-line pv-line-hit", loc.column, why ? `${why}: this line` : "this line");
      if (inWindow && n === branch.line) return this.line(n, text, "pv-line pv-line-branch", null, branchRole(branch));
      return this.line(n, text, "pv-line", null, null);
    })));
    replace(this.el,
      h("div", { class: "pv-pane-title" }, h("span", { class: "pv-srcname", title: loc.file }, locLabel(loc)),
        loc.column != null ? h("span", { class: "pv-muted", title: "column, counted from 1 (as editors count it)" }, ` col ${loc.column + 1}`) : null,
        loc.function ? h("span", { class: "pv-muted" }, ` in ${shortName(loc.function)}`) : null,
        why ? h("span", { class: "pv-muted pv-why" }, ` · ${why}`) : null),
      h("div", { class: "pv-path", title: loc.file }, loc.file),
      loc.via ? h("div", { class: "pv-branchnote pv-callnote", title: loc.via.file },
        `called from: ${locLabel(loc.via)}`,
        loc.via.code ? h("code", {}, ` ${loc.via.code.trim()}`) : null) : null,
      branchBlock ? h("div", { class: "pv-branchnote" }, `${branchRole(branch)}: ${locLabel(branch)}`) : null, branchBlock,
      branchBlock ? this.skipped(branch, loc, start) : null, code);
    // Keep the highlighted line in view (the block has a maximum height).
    const hit = code.querySelector(".pv-line-hit");
    if (hit && code.clientHeight && (hit.offsetTop < code.scrollTop || hit.offsetTop + hit.offsetHeight > code.scrollTop + code.clientHeight)) {
      code.scrollTop = Math.max(0, hit.offsetTop - (code.clientHeight - hit.offsetHeight) / 2);
    }
  }

  /** "⋯ 3 lines not shown" between the branch line shown apart and the stored lines after
   * it (the two blocks look alike: a gap between them must be said), or null. */
  skipped(branch, loc, start) {
    const gap = branch.file === loc.file ? start - branch.line - 1 : 0;
    if (gap <= 0) return null;
    return h("div", { class: "pv-skipnote", title: "lines between the branch and the code around this line" },
      `⋯ ${gap} line${gap === 1 ? "" : "s"} not shown`);
  }

  /** One numbered line; the hit line marks its column with a caret under the character.
   * Its indentation is kept for the rows it wraps onto (a hanging indent), and never
   * wraps on its own (`pv-indent`: white-space pre): a long indented line is not drawn
   * as an empty row and its code at column 0. */
  line(n, text, cls, column, title) {
    text = text || "";
    const lead = /^[ \t]*/.exec(text)[0].length;
    // (the indentation apart, in a span that never wraps: no row of spaces alone)
    const indent = lead ? h("span", { class: "pv-indent" }, text.slice(0, lead)) : null;
    let body;
    if (column != null && column >= lead && column < text.length) {
      // the token starting at the column: underlined, a caret (CSS ::after) under its first character
      const m = /^[\w.]+/.exec(text.slice(column));
      const end = column + (m ? m[0].length : 1);
      body = h("span", { class: "pv-text" }, indent, text.slice(lead, column),
        h("span", { class: "pv-col", title: `column ${column}` }, text.slice(column, end)),
        text.slice(end));
    } else if (column != null && column >= 0 && column < lead) {
      const end = column + 1;
      body = h("span", { class: "pv-text" }, text.slice(0, column),
        h("span", { class: "pv-col", title: `column ${column}` }, text.slice(column, end)),
        text.slice(end));
    } else {
      body = h("span", { class: "pv-text" }, indent, text.slice(lead) || (lead ? "" : " "));
    }
    if (lead) Object.assign(body.style, { paddingLeft: `calc(4px + ${lead}ch)`, textIndent: `-${lead}ch` });
    return h("div", { class: cls, title }, h("span", { class: "pv-gutter" }, String(n)), body);
  }
}

/** A drag handle that sets the source pane's width (a CSS variable on `root`). */
export function widthHandle(root, pane) {
  const handle = h("div", { class: "pv-drag", role: "separator", tabindex: "0", "aria-orientation": "vertical",
    title: "drag to widen the source panel (or use the arrow keys)", "aria-label": "source panel width" });
  const set = (px) => {
    const total = pane.parentElement ? pane.parentElement.clientWidth : 0;
    const w = Math.max(220, Math.min(total ? total - 200 : 2000, px));
    root.style.setProperty("--pv-source-w", `${Math.round(w)}px`);
  };
  handle.addEventListener("mousedown", (e) => {
    e.preventDefault();
    const right = pane.getBoundingClientRect().right;
    const move = (ev) => set(right - ev.clientX);
    const up = () => { document.removeEventListener("mousemove", move); document.removeEventListener("mouseup", up); };
    document.addEventListener("mousemove", move);
    document.addEventListener("mouseup", up);
  });
  handle.addEventListener("keydown", (e) => {
    if (e.key !== "ArrowLeft" && e.key !== "ArrowRight") return;
    e.preventDefault();
    set(pane.getBoundingClientRect().width + (e.key === "ArrowLeft" ? 40 : -40));
  });
  return handle;
}
