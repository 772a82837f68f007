import assert from "node:assert/strict";
import { test } from "node:test";
import * as mod from "../widget.js";

test("the widget module has anywidget's form: a default export with render, no named render", () => {
  // anywidget warns (deprecation) when the module exports `render` by name.
  assert.equal(mod.render, undefined);
  assert.equal(typeof mod.default, "object");
  assert.equal(typeof mod.default.render, "function");
});
