// The one state object the views share: `store.set({...})` notifies every subscriber with
// the set of keys that changed; views redraw only what depends on them.

export class Store {
  constructor(initial = {}) {
    this.state = { ...initial };
    this.subs = [];
    this.batching = 0;
    this.changed = new Set();
  }

  get(key) {
    return this.state[key];
  }

  /** Update keys; subscribers hear once per call (or once per `batch`). */
  set(patch) {
    for (const [k, v] of Object.entries(patch)) {
      if (this.state[k] !== v) { this.state[k] = v; this.changed.add(k); }
    }
    if (!this.batching) this.flush();
  }

  /** Run `f` with notifications held until it returns. */
  batch(f) {
    this.batching++;
    try { f(); } finally { this.batching--; }
    if (!this.batching) this.flush();
  }

  flush() {
    if (!this.changed.size) return;
    const changed = this.changed;
    this.changed = new Set();
    for (const fn of this.subs.slice()) fn(changed, this.state);
  }

  subscribe(fn) {
    this.subs.push(fn);
    return () => { this.subs = this.subs.filter((x) => x !== fn); };
  }
}
