// A minimal DOM for the view tests under Node: elements, text nodes, attributes, classes,
// events, and selectors by class / tag (enough for format.js `h` and the views' own calls).
class Node {
  constructor() { this.parentNode = null; this.childNodes = []; }
  get firstChild() { return this.childNodes[0] || null; }
  appendChild(c) { if (c.parentNode) c.parentNode.removeChild(c); c.parentNode = this; this.childNodes.push(c); return c; }
  prepend(c) { if (c.parentNode) c.parentNode.removeChild(c); c.parentNode = this; this.childNodes.unshift(c); return c; }
  removeChild(c) { const i = this.childNodes.indexOf(c); if (i >= 0) this.childNodes.splice(i, 1); c.parentNode = null; return c; }
  get textContent() { return this.childNodes.map((c) => c.textContent).join(""); }
  set textContent(v) { this.childNodes = []; if (v !== "") this.appendChild(new Text(String(v))); }
}

class Text extends Node {
  constructor(t) { super(); this.data = t; }
  get textContent() { return this.data; }
}

class Element extends Node {
  constructor(tag) {
    super();
    this.tagName = tag.toUpperCase();
    this.attrs = {};
    this.listeners = {};
    this.style = { setProperty(k, v) { this[k] = v; } };
    const el = this;
    this.classList = {
      add: (...c) => { const s = new Set(el.className.split(" ").filter(Boolean)); c.forEach((x) => s.add(x)); el.className = [...s].join(" "); },
      remove: (...c) => { el.className = el.className.split(" ").filter((x) => x && !c.includes(x)).join(" "); },
      toggle: (c, on) => { const has = el.classList.contains(c); const want = on === undefined ? !has : on; if (want) el.classList.add(c); else el.classList.remove(c); return want; },
      contains: (c) => el.className.split(" ").includes(c),
    };
    this.className = "";
  }
  setAttribute(k, v) { this.attrs[k] = String(v); if (k === "id") this.id = String(v); }
  getAttribute(k) { return k in this.attrs ? this.attrs[k] : null; }
  addEventListener(t, f) { (this.listeners[t] = this.listeners[t] || []).push(f); }
  removeEventListener(t, f) { this.listeners[t] = (this.listeners[t] || []).filter((x) => x !== f); }
  dispatch(type, props = {}) {
    const ev = { type, target: props.target || this, defaultPrevented: false, propagation: true,
      preventDefault() { this.defaultPrevented = true; }, stopPropagation() { this.propagation = false; }, ...props };
    for (let n = this; n && ev.propagation; n = n.parentNode) for (const f of (n.listeners && n.listeners[type]) || []) f(ev);
    return ev;
  }
  click() { return this.dispatch("click"); }
  focus() { globalThis.document.activeElement = this; }
  get children() { return this.childNodes.filter((c) => c instanceof Element); }
  matches(sel) {
    return sel.split(",").some((one) => {
      const s = one.trim();
      const [tag, ...cls] = s.split(".");
      return (!tag || this.tagName === tag.toUpperCase()) && cls.every((c) => this.classList.contains(c));
    });
  }
  querySelectorAll(sel) {
    const out = [];
    const walk = (n) => { for (const c of n.children) { if (c.matches(sel)) out.push(c); walk(c); } };
    walk(this);
    return out;
  }
  querySelector(sel) { return this.querySelectorAll(sel)[0] || null; }
  closest(sel) { for (let n = this; n; n = n.parentNode) if (n instanceof Element && n.matches(sel)) return n; return null; }
  get innerText() { return this.textContent; }
  getBoundingClientRect() { return { x: 0, y: 0, top: 0, left: 0, right: 0, bottom: 0, width: 0, height: 0 }; }
}

export function installDom() {
  globalThis.document = {
    createElement: (t) => new Element(t),
    createTextNode: (t) => new Text(t),
    activeElement: null,
  };
  return globalThis.document;
}
