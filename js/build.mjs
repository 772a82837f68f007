// Bundle the widget (ESM, for anywidget) and the HTML export viewer (IIFE) into
// ../pallas_viz/static/. Usage: node build.mjs [--watch]
import * as esbuild from "esbuild";

const outdir = new URL("../pallas_viz/static/", import.meta.url).pathname;
const common = { bundle: true, minify: true, target: ["es2020"], logLevel: "info", legalComments: "none" };
await esbuild.build({ ...common, entryPoints: { widget: "widget.js" }, format: "esm", outdir });
await esbuild.build({ ...common, entryPoints: { standalone: "standalone.js" }, format: "iife", outdir });
await esbuild.build({ ...common, entryPoints: { widget: "widget.css" }, outdir });
