"""Hatch build hook: bundle the widget's JS/CSS (js/ -> pallas_viz/static/) with npm.

Runs `npm ci` (or `npm install`) and `npm run build` in js/ when the bundle is missing or
older than its sources. Set PALLAS_VIZ_SKIP_JS=1 to skip (the widget then shows a notice).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

OUTPUTS = ("widget.js", "widget.css", "standalone.js")


def _stale(js: Path, static: Path) -> bool:
    outs = [static / o for o in OUTPUTS]
    if not all(o.exists() for o in outs):
        return True
    sources = [p for p in js.iterdir() if p.suffix in {".js", ".mjs", ".css", ".json"}]
    newest = max((p.stat().st_mtime for p in sources), default=0)
    return newest > min(o.stat().st_mtime for o in outs)


class JSBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version, build_data):
        root = Path(self.root)
        js, static = root / "js", root / "pallas_viz" / "static"
        if os.environ.get("PALLAS_VIZ_SKIP_JS") or not (js / "package.json").exists():
            return
        if not _stale(js, static):
            return
        npm = shutil.which("npm")
        if npm is None:
            if (static / "widget.js").exists():
                self.app.display_warning("npm not found: keeping the existing (stale) JS bundle")
                return
            raise RuntimeError("building pallas_viz needs npm (Node.js >= 18) to bundle the "
                               "widget; install Node.js or set PALLAS_VIZ_SKIP_JS=1")
        if not (js / "node_modules" / ".bin" / "esbuild").exists():
            cmd = "ci" if (js / "package-lock.json").exists() else "install"
            subprocess.run([npm, cmd, "--no-audit", "--no-fund"], cwd=js, check=True)
        subprocess.run([npm, "run", "build"], cwd=js, check=True)
