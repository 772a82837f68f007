// Entry of the self-contained HTML export: a tiny stand-in for the anywidget model
// (get/set/on/off/send) over data embedded in the page. The widget answers its own event and
// source requests from that data (details.js), as it does in Jupyter.
//
// The page embeds two JSON documents. `#pallas-viz-data` holds what the first grid draw
// needs (metadata, the per-event columns the grid counts, cells, string tables, source
// snippets); `#pallas-viz-more` holds the rest (per-event columns for the replay and the
// tooltips, and the event detail columns) and is parsed on first use. Binary columns are
// base64, each decoded on first use.
import widget from "./widget.js";

const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const LUT = new Uint8Array(256).fill(255);
for (let i = 0; i < 64; i++) LUT[B64.charCodeAt(i)] = i;
LUT["-".charCodeAt(0)] = 62; // base64url too
LUT["_".charCodeAt(0)] = 63;

/** Base64 -> bytes with a lookup table (for engines without `Uint8Array.fromBase64`). */
export function b64DecodeTable(s) {
  let n = s.length;
  while (n > 0 && s.charCodeAt(n - 1) === 61) n--; // "="
  if (n % 4 === 1) throw new Error("invalid base64 length");
  const out = new Uint8Array((n * 3) >> 2);
  let bad = 0, j = 0, i = 0;
  for (const end = n - (n % 4); i < end; i += 4) {
    const a = LUT[s.charCodeAt(i)], b = LUT[s.charCodeAt(i + 1)];
    const c = LUT[s.charCodeAt(i + 2)], d = LUT[s.charCodeAt(i + 3)];
    bad |= a | b | c | d;
    const v = (a << 18) | (b << 12) | (c << 6) | d;
    out[j++] = v >> 16; out[j++] = (v >> 8) & 255; out[j++] = v & 255;
  }
  if (i < n) {
    const a = LUT[s.charCodeAt(i)], b = LUT[s.charCodeAt(i + 1)];
    const c = i + 2 < n ? LUT[s.charCodeAt(i + 2)] : 0;
    bad |= a | b | c;
    const v = (a << 18) | (b << 12) | (c << 6);
    out[j++] = v >> 16;
    if (i + 2 < n) out[j++] = (v >> 8) & 255;
  }
  if (bad & 0xc0) throw new Error("invalid base64 character");
  return out;
}

/** Base64 -> bytes: the engine's own decoder when it has one (Chromium 140+), else a table. */
export function b64Decode(s) {
  if (typeof Uint8Array.fromBase64 === "function") return Uint8Array.fromBase64(s);
  return b64DecodeTable(s);
}

/** Base64 -> DataView (what anywidget hands the widget for binary state). */
export function b64ToDataView(s) {
  const u8 = b64Decode(s);
  return new DataView(u8.buffer, u8.byteOffset, u8.byteLength);
}

/**
 * `{name: base64}` parts, decoded to DataViews on first access. Each name is looked up in
 * `sources` (functions returning objects, called in order until one has it: the second
 * document is only parsed for what the first lacks).
 */
function lazyBuffers(names, ...sources) {
  const out = {};
  for (const k of names) {
    let dv = null;
    Object.defineProperty(out, k, {
      enumerable: true,
      get() {
        if (dv === null) {
          let s = null;
          for (const src of sources) {
            const o = src();
            if (o && typeof o[k] === "string") { s = o[k]; break; }
          }
          dv = s === null ? new DataView(new ArrayBuffer(0)) : b64ToDataView(s);
        }
        return dv;
      },
    });
  }
  return out;
}

/**
 * The widget's state from the embedded `raw` document (binary parts in base64) and `more`
 * (the second document, or a function returning it, called on first need).
 */
export function makeDoc(raw, more = null) {
  if (raw.state && raw.state.compare) return { state: raw.state }; // a trace diff: JSON only
  let extra = null;
  const rest = () => {
    if (extra === null) extra = (typeof more === "function" ? more() : more) || {};
    return extra;
  };
  const meta = raw.state.meta;
  const p = meta.protocol || {};
  const cols = raw.state.columns || {};
  const details = Object.keys(p.detail_types || {});
  return {
    state: {
      meta,
      columns: lazyBuffers(Object.keys(p.column_types || {}), () => cols, () => rest().columns),
      cells: lazyBuffers(Object.keys(raw.state.cells), () => raw.state.cells),
      details: details.length ? lazyBuffers(details, () => raw.details, () => rest().details) : null,
      tables: raw.tables,
      snippets: raw.snippets,
    },
  };
}

/** The model shim handed to the widget's `render`. */
export function makeModel(doc) {
  const state = { data: doc.state };
  const handlers = new Map();
  const emit = (name, ...args) => (handlers.get(name) || []).forEach((f) => f(...args));
  return {
    get: (k) => state[k],
    set: (k, v) => { state[k] = v; emit(`change:${k}`, v); },
    save_changes: () => {},
    on: (name, f) => { if (!handlers.has(name)) handlers.set(name, []); handlers.get(name).push(f); },
    off: (name, f) => { const l = handlers.get(name) || []; const i = l.indexOf(f); if (i >= 0) l.splice(i, 1); },
    // No kernel behind a page: the widget answers from the embedded data and never sends.
    send: (msg) => setTimeout(() => emit("msg:custom", { ...msg, error: "no kernel behind an exported page" }, []), 0),
  };
}

/** Mount the widget on `el` from the embedded documents (see `makeDoc`). */
export function mount(el, raw, more = null) {
  return widget.render({ model: makeModel(makeDoc(raw, more)), el });
}

if (typeof document !== "undefined") {
  const boot = () => {
    const src = document.getElementById("pallas-viz-data");
    const el = document.getElementById("pallas-viz-root");
    if (!src || !el) return;
    try {
      const raw = JSON.parse(src.textContent);
      const moreEl = document.getElementById("pallas-viz-more");
      mount(el, raw, () => (moreEl ? JSON.parse(moreEl.textContent) : {}));
    } catch (e) {
      el.textContent = `pallas_viz: could not show this trace: ${e}`;
    }
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", boot);
  else boot();
}
