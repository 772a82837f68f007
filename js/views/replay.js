// The replay bar: step through the recording (grid events only by default: kernel
// operands are not drawn), play at a chosen speed, switch between totals and what is live
// at the step, with a legend for the live labels and bars. Its height never changes.
import { h, inert } from "../format.js";

export const SPEEDS = [0.25, 1, 4, 16];

export class ReplayView {
  constructor(app) {
    this.app = app;
    const st = app.store.state;
    this.slider = h("input", { type: "range", min: 0, max: app.steps.count, value: app.steps.count, class: "pv-slider", "aria-label": "replay step", title: "replay step ([ and ] step by one)" });
    this.slider.addEventListener("input", () => app.seek(+this.slider.value));
    this.playBtn = h("button", { class: "pv-btn pv-play", title: "play / pause the replay", onclick: () => this.togglePlay() }, "▶ play");
    this.stepLabel = h("span", { class: "pv-steplabel", title: "replayed steps / all steps" });
    this.stepEvent = h("div", { class: "pv-stepevent", "aria-live": "polite" });
    this.modeBtn = h("button", { class: "pv-btn pv-mode", title: "show totals, or what is live at the replay step", onclick: () => app.setMode(app.store.state.mode === "live" ? "totals" : "live") });
    this.speed = h("select", { class: "pv-select pv-speed", "aria-label": "replay speed", title: "replay speed",
      onchange: (e) => app.store.set({ speed: +e.target.value }) },
    SPEEDS.map((s) => h("option", { value: s, selected: s === st.speed ? "" : null }, `${s}×`)));
    this.gridOnly = h("input", { type: "checkbox", checked: st.gridOnly ? "" : null, onchange: (e) => app.setGridOnly(e.target.checked) });
    const gridOnlyLabel = h("label", { class: "pv-check", title: "step only through events drawn in the grid (kernel operands in GMEM have no cell)" }, this.gridOnly, "grid events only");
    this.legend = h("div", { class: "pv-replay-legend", title: "what a cell shows while replaying" },
      h("span", { class: "pv-legend-item", title: "live buffers + live barriers (b) the thread holds at this step" }, h("code", {}, "2+1b"), " live buffers + barriers"),
      h("span", { class: "pv-legend-item", title: "bytes held, per memory space" }, "bar: bytes held by space"),
      app.protocol.spaces.map((s, i) => h("span", { class: "pv-legend-item", title: `${s} bytes` }, h("span", { class: `pv-bar pv-bar-${i}` }), s)),
      h("span", { class: "pv-legend-item", title: "the cell of the event at this step" }, h("span", { class: "pv-swatch pv-l-cur" }), "current event"));
    this.el = h("div", { class: "pv-replay" },
      h("div", { class: "pv-replay-row" },
        h("span", { class: "pv-label", title: "replay the recording in order" }, "replay"),
        h("button", { class: "pv-btn", title: "first step", "aria-label": "first step", onclick: () => app.seek(0) }, "|◀"),
        h("button", { class: "pv-btn", title: "previous event ([)", "aria-label": "previous event", onclick: () => app.seek(app.store.state.step - 1) }, "◀ 1"),
        this.playBtn,
        h("button", { class: "pv-btn", title: "next event (])", "aria-label": "next event", onclick: () => app.seek(app.store.state.step + 1) }, "1 ▶"),
        h("button", { class: "pv-btn", title: "last step", "aria-label": "last step", onclick: () => app.seek(app.steps.count) }, "▶|"),
        this.slider, this.stepLabel, this.speed, gridOnlyLabel, this.modeBtn),
      this.stepEvent, this.legend);
  }

  update() {
    const app = this.app;
    const st = app.store.state;
    const n = app.steps.count;
    this.slider.max = String(n);
    this.slider.value = String(st.step);
    this.stepLabel.textContent = `step ${st.step} / ${n}`;
    const live = st.mode === "live";
    this.modeBtn.textContent = live ? "showing: live at step" : "showing: totals";
    this.modeBtn.setAttribute("aria-pressed", String(live));
    this.legend.classList.toggle("pv-hidden", !live);
    this.stepEvent.textContent = live ? inert(app.stepText()) : "totals over the whole run (press ▶ or drag the slider to replay)";
  }

  togglePlay() {
    const app = this.app;
    if (this.playing) { this.stop(); return; }
    if (app.store.state.step >= app.steps.count) app.seek(0);
    this.playing = true;
    this.playBtn.textContent = "❚❚ pause";
    let last = 0, carry = 0;
    const tick = (ts) => {
      if (!this.playing || app.destroyed) return;
      const speed = app.store.state.speed || 1;
      // 1x: about 8 steps a second for short traces, the whole run in ~30 s for long ones
      const base = Math.max(8, app.steps.count / 30);
      if (last) carry += ((ts - last) / 1000) * base * speed;
      last = ts;
      const k = Math.floor(carry);
      if (k > 0) {
        carry -= k;
        app.seek(app.store.state.step + k, { follow: true });
        if (app.store.state.step >= app.steps.count) { this.stop(); return; }
      }
      requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  }

  stop() {
    this.playing = false;
    this.playBtn.textContent = "▶ play";
  }
}
