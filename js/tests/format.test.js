import assert from "node:assert/strict";
import { test } from "node:test";
import { fmtBytes, fmtCount, h, inert, locLabel } from "../format.js";

// A minimal document: elements record children; text nodes keep raw text. There is
// no innerHTML, so markup in strings can only ever become text.
class Node_ { constructor() { this.childNodes = []; } appendChild(c) { this.childNodes.push(c); return c; } }
class Element_ extends Node_ {
  constructor(tag) { super(); this.tagName = tag; this.attrs = {}; this.listeners = {}; this.style = {}; }
  setAttribute(k, v) { this.attrs[k] = v; }
  addEventListener(k, f) { this.listeners[k] = f; }
  get firstChild() { return this.childNodes[0]; }
  removeChild(c) { this.childNodes.splice(this.childNodes.indexOf(c), 1); }
  get textContent() { return this.childNodes.map((c) => c.textContent).join(""); }
}
globalThis.document = {
  createElement: (t) => new Element_(t),
  createTextNode: (s) => ({ nodeType: 3, textContent: s }),
};

test("h() turns strings into text nodes, never markup", () => {
  const evil = "<script>alert(1)</script><img src=x onerror=alert(2)>";
  const el = h("div", { class: "x", title: evil, onclick: () => 1 }, evil, ["a", h("b", {}, "c")], null);
  assert.equal(el.childNodes[0].nodeType, 3);
  assert.equal(el.childNodes[0].textContent, evil);
  assert.equal(el.childNodes.length, 3);
  assert.equal(el.textContent, `${evil}ac`);
  assert.equal(el.attrs.title, evil); // attributes are set with setAttribute, not parsed
  assert.equal(typeof el.listeners.click, "function");
  assert.equal(el.className, "x");
});

test("formatting", () => {
  assert.equal(fmtBytes(0), "0 B");
  assert.equal(fmtBytes(512), "512 B");
  assert.equal(fmtBytes(2048), "2.0 KiB");
  assert.equal(fmtBytes(64 * 1024 * 1024), "64 MiB");
  assert.equal(fmtCount(999), "999");
  assert.equal(fmtCount(1500), "1.5k");
  assert.equal(fmtCount(2_500_000), "2.5M");
  assert.equal(locLabel({ file: "/a/b.py", name: "b.py", line: 3 }), "b.py:3");
  assert.equal(locLabel({ file: "x", line: 3, label: "In [7], line 3" }), "In [7], line 3");
});

test("unseen characters show as escapes: bidi overrides, separators, controls", () => {
  const code = "x = 1 \u202e// y\u2066z\u2069\u2028w\u200f\u001b[2J\u0085";
  const el = h("div", { title: code }, code);
  const shown = "x = 1 \\u202e// y\\u2066z\\u2069\\u2028w\\u200f\\x1b[2J\\x85";
  assert.equal(el.textContent, shown);
  assert.equal(el.attrs.title, shown);
  assert.equal(inert("tab\tand\nnewline stay, é and 漢 too"), "tab\tand\nnewline stay, é and 漢 too");
  assert.equal(inert(42), "42");
});

test("characters that draw nothing show as escapes (review S: kern\u200bels.py read as kernels.py)", () => {
  assert.equal(inert("kern\u200bels\u2060.py\ufeff \u00ad \u{e0041}!"),
    "kern\\u200bels\\u2060.py\\ufeff \\xad \\U000e0041!");
  assert.equal(inert("emoji \u{1f600} stays"), "emoji \u{1f600} stays");
});
