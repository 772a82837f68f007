// Small formatting helpers and a DOM builder that only ever creates text nodes
// for strings (trace text such as paths and code is never parsed as HTML).

export function fmtBytes(n) {
  if (!n) return "0 B";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return i === 0 ? `${n} B` : `${n.toFixed(n < 10 ? 1 : 0)} ${units[i]}`;
}

export function fmtCount(n) {
  if (n < 1000) return String(n);
  if (n < 1e6) return `${(n / 1000).toFixed(n < 1e4 ? 1 : 0)}k`;
  return `${(n / 1e6).toFixed(1)}M`;
}

/** `kernels.py:110` / `In [7], line 3` for a location dict from Python. */
export function locLabel(loc) {
  if (!loc) return "";
  return loc.label || `${loc.name || loc.file}:${loc.line}`;
}

// What a finding's branch line is called: the payload's `role` (`Finding.branch_label`,
// which the analysis decides); a payload without one gets a name that claims nothing.
export function branchRole(branch) {
  return (branch && branch.role) || "branch";
}

// Characters that change how the text around them reads without being seen: C0/C1
// controls (tab and newline aside), bidi marks, embeddings, overrides and isolates, the
// Unicode line and paragraph separators, and the characters that draw nothing (the soft
// hyphen, zero-width space, joiners and word joiner, invisible operators, U+FEFF, the tag
// characters). Shown as escapes (`\u202e`), as the terminal summary shows them
// (`pallas_viz.render.inert`): a code line from a trace file cannot reorder itself (U+202E)
// or pass for another (`kern\u200bels.py`).
const UNSEEN = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\u{e0000}-\u{e007f}]/gu;

/** `s` with every such character as a visible escape: `\x1b`, `\u202e`, `\U000e0041`. */
export function inert(s) {
  return String(s).replace(UNSEEN, (c) => {
    const cp = c.codePointAt(0);
    if (cp <= 0xff) return `\\x${cp.toString(16).padStart(2, "0")}`;
    return cp <= 0xffff ? `\\u${cp.toString(16).padStart(4, "0")}` : `\\U${cp.toString(16).padStart(8, "0")}`;
  });
}

/**
 * `h("div", {class: "x", onclick: f}, "text", child)`: an element whose string
 * children become text nodes (textContent), never markup, and whose strings (attributes
 * too) show their unseen characters (`inert`).
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "style" && typeof v === "object") Object.assign(el.style, v);
    else el.setAttribute(k, v === true ? "" : inert(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c == null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (typeof c === "string" || typeof c === "number") el.appendChild(document.createTextNode(inert(c)));
    else el.appendChild(c);
  }
}

/** Remove all children of `el` (and optionally add new ones). */
export function replace(el, ...children) {
  while (el.firstChild) el.removeChild(el.firstChild);
  append(el, children);
  return el;
}
