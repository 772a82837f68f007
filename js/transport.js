// How the front end asks for what the grid's state does not hold: a local answerer over the
// payload (the usual case: no kernel needed), else the kernel through anywidget's commands
// (`experimental.invoke`), else anywidget's plain custom messages. Every kernel request has a
// unique id and a timeout; a failure comes back as `{error}` (never a promise that hangs).

let counter = 0;

/** A request id no other view, widget or page load will reuse. */
export function uniqueId() {
  counter += 1;
  const rnd = Math.random().toString(36).slice(2, 10);
  return `pv-${Date.now().toString(36)}-${rnd}-${counter}`;
}

function timeoutSignal(ms) {
  if (typeof AbortSignal !== "undefined" && typeof AbortSignal.timeout === "function") return AbortSignal.timeout(ms);
  const c = new AbortController();
  setTimeout(() => c.abort(new Error("timeout")), ms);
  return c.signal;
}

export class Transport {
  /**
   * `local`: an Answerer (details in the payload) or null; `invoke`: anywidget's
   * `experimental.invoke` or null; `model`: the anywidget model (plain messages);
   * `timeoutMs`: how long to wait for the kernel.
   */
  constructor({ local = null, invoke = null, model = null, timeoutMs = 8000 } = {}) {
    this.local = local;
    this.invoke = invoke;
    this.model = model;
    this.timeoutMs = timeoutMs;
    this.pending = new Map();
    this.onMsg = (msg) => {
      if (!msg || msg.id == null || !this.pending.has(msg.id)) return;
      const done = this.pending.get(msg.id);
      this.pending.delete(msg.id);
      done(msg);
    };
    if (model && !local && !invoke) model.on("msg:custom", this.onMsg);
  }

  /** Where answers come from: "payload" or "kernel". */
  get source() {
    return this.local ? "payload" : "kernel";
  }

  async request(msg) {
    if (this.local) {
      try {
        return this.local.answer({ ...msg, id: msg.id || uniqueId() });
      } catch (e) {
        return { ...msg, error: `could not read this from the trace: ${e.message || e}` };
      }
    }
    const id = uniqueId();
    if (this.invoke) {
      try {
        const out = await this.invoke(msg.type, { ...msg, id }, { signal: timeoutSignal(this.timeoutMs) });
        const reply = Array.isArray(out) ? out[0] : out;
        return reply || { ...msg, error: "the kernel sent an empty answer" };
      } catch (e) {
        return { ...msg, error: kernelError(e, this.timeoutMs) };
      }
    }
    if (!this.model) return { ...msg, error: "no kernel to ask: this view holds no event details" };
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        resolve({ ...msg, error: kernelError({ name: "TimeoutError" }, this.timeoutMs) });
      }, this.timeoutMs);
      this.pending.set(id, (reply) => { clearTimeout(timer); resolve(reply); });
      try {
        this.model.send({ ...msg, id });
      } catch (e) {
        clearTimeout(timer);
        this.pending.delete(id);
        resolve({ ...msg, error: kernelError(e, this.timeoutMs) });
      }
    });
  }

  dispose() {
    if (this.model && !this.local && !this.invoke) this.model.off("msg:custom", this.onMsg);
    this.pending.clear();
  }
}

function kernelError(e, ms) {
  const name = e && e.name;
  if (name === "TimeoutError" || name === "AbortError") return `the kernel did not answer within ${Math.round(ms / 1000)} s (restarted or busy?): re-run the cell to ask it again`;
  return `the kernel cannot be reached (${(e && e.message) || e}): re-run the cell`;
}
