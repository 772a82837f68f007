// Theme colours for the canvases, resolved from the widget's CSS variables (which follow
// JupyterLab's light and dark themes and the page's colour scheme).
import { h } from "./format.js";

const VARS = {
  bg: ["--pv-bg", "#fff"], panel: ["--pv-panel", "#fff"], fg: ["--pv-fg", "#222"], muted: ["--pv-muted", "#888"],
  border: ["--pv-border", "#ddd"], empty: ["--pv-cell-empty", "#f3f4f6"],
  clean: ["--pv-cell-clean", "#e5eef7"], cleanS: ["--pv-clean", "#0072b2"],
  coll: ["--pv-cell-coll", "#e6f3fb"], collS: ["--pv-coll", "#56b4e9"],
  warn: ["--pv-cell-warn", "#fbefd6"], warnS: ["--pv-warn", "#e69f00"],
  err: ["--pv-cell-error", "#f7e1d3"], errS: ["--pv-error", "#d55e00"],
  fail: ["--pv-cell-failed", "#f6e6ef"], failS: ["--pv-failed", "#cc79a7"],
  accent: ["--pv-accent", "#1a73e8"], cur: ["--pv-cur", "#000"],
  space0: ["--pv-space-0", "#8d6e63"], space1: ["--pv-space-1", "#0072b2"],
  space2: ["--pv-space-2", "#009e73"], space3: ["--pv-space-3", "#cc79a7"],
};

export class Theme {
  constructor(root) {
    this.root = root;
    this.cache = null;
    this.key = null;
  }

  /** The theme's identity: its resolved background and text colour variables. */
  currentKey() {
    const cs = getComputedStyle(this.root);
    return `${cs.getPropertyValue("--pv-bg").trim()}|${cs.getPropertyValue("--pv-fg").trim()}`;
  }

  /** Colours as rgb() strings, or null while the stylesheet has not applied. */
  colors() {
    const key = this.currentKey();
    if (this.cache && key === this.key) return this.cache;
    const c = this.read();
    if (key !== "|") { this.key = key; this.cache = c; }
    return c;
  }

  get ready() {
    return this.currentKey() !== "|";
  }

  read() {
    if (!this.probe) { this.probe = h("span", { style: { display: "none" } }); this.root.appendChild(this.probe); }
    const probe = this.probe;
    const out = {};
    for (const [k, [name, d]] of Object.entries(VARS)) {
      probe.style.color = d;
      probe.style.color = `var(${name}, ${d})`;
      out[k] = getComputedStyle(probe).color || d;
    }
    const cs = getComputedStyle(this.root);
    out.mono = cs.getPropertyValue("--pv-mono").trim() || "ui-monospace, Menlo, monospace";
    out.ui = cs.getPropertyValue("--pv-font").trim() || "system-ui, sans-serif";
    out.spaces = [out.space0, out.space1, out.space2, out.space3];
    return out;
  }
}
