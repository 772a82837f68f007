// Bundle the widget (ESM, for anywidget) and the HTML export viewer (IIFE) into
// ../pallas_viz/static/. Usage: node build.mjs [--watch]
//   --watch  rebuild on every change under js/ until Ctrl-C (esbuild's context.watch()).
//            With an editable install (scripts/dev), reload the notebook page to see it.
import * as esbuild from "esbuild";

const outdir = new URL("../pallas_viz/static/", import.meta.url).pathname;
const absWorkingDir = new URL(".", import.meta.url).pathname; // js/, whatever the cwd
const common = { absWorkingDir, bundle: true, minify: true, target: ["es2020"], logLevel: "info", legalComments: "none" };
const builds = [
  { ...common, entryPoints: { widget: "widget.js" }, format: "esm", outdir },
  { ...common, entryPoints: { standalone: "standalone.js" }, format: "iife", outdir },
  { ...common, entryPoints: { widget: "widget.css" }, outdir },
];

const args = process.argv.slice(2);
const unknown = args.filter((a) => a !== "--watch");
if (unknown.length) {
  console.error(`build.mjs: unknown argument(s) ${unknown.join(" ")}; usage: node build.mjs [--watch]`);
  process.exit(2);
}

if (args.includes("--watch")) {
  const contexts = await Promise.all(builds.map((b) => esbuild.context(b)));
  await Promise.all(contexts.map((c) => c.watch()));
  console.log("build.mjs: watching js/ (Ctrl-C to stop)");
  const stop = async () => {
    await Promise.all(contexts.map((c) => c.dispose()));
    process.exit(0);
  };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
} else {
  await Promise.all(builds.map((b) => esbuild.build(b)));
}
