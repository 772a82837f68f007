"""Bundle the widget's JS/CSS (js/ -> pallas_viz/static/) with npm.

Two entry points, one rule:

- the hatch build hook (every `pip install`, editable or not), and
- `python hatch_build.py` (what `scripts/dev` runs before each command, so an edit in js/
  reaches the editable install without reinstalling).

The bundle is rebuilt (`npm run build`) only when it is missing or the sources it is made
of (js/*.js, *.mjs, *.css, package.json, package-lock.json) hash differently from the last
build (pallas_viz/static/.sources-sha256). `npm ci` runs only when js/node_modules is missing
or package-lock.json changed since it last ran. Set PALLAS_VIZ_SKIP_JS=1 to skip (the
widget then shows a notice).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

OUTPUTS = ("widget.js", "widget.css", "standalone.js")
SOURCE_SUFFIXES = {".js", ".mjs", ".css", ".json"}
BUILD_STAMP = ".sources-sha256"  # in pallas_viz/static/
NPM_STAMP = ".pallas_viz-lock-sha256"  # in js/node_modules/


# Folders of js/ the bundle is not built from.
NOT_SOURCES = {"node_modules", "tests"}


def _sha256(paths, base: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(p.relative_to(base).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def sources_hash(js: Path) -> str:
    """The hash of what the bundle is built from: every source file under js/, in
    subfolders too (js/views/), but not js/tests/ or js/node_modules/."""
    return _sha256((p for p in js.rglob("*")
                    if p.is_file() and p.suffix in SOURCE_SUFFIXES
                    and not NOT_SOURCES & set(p.relative_to(js).parts[:-1])), js)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def is_stale(js: Path, static: Path) -> bool:
    if not all((static / o).exists() for o in OUTPUTS):
        return True
    return _read(static / BUILD_STAMP) != sources_hash(js)


def build(root: Path, warn=print) -> bool:
    """Rebuild the bundle under `root` if it is stale; True if it was rebuilt."""
    js, static = root / "js", root / "pallas_viz" / "static"
    if os.environ.get("PALLAS_VIZ_SKIP_JS") or not (js / "package.json").exists():
        return False
    if not is_stale(js, static):
        return False
    npm = shutil.which("npm")
    if npm is None:
        if all((static / o).exists() for o in OUTPUTS):
            warn("npm not found: keeping the existing (stale) JS bundle")
            return False
        raise RuntimeError("building pallas_viz needs npm (Node.js >= 18) to bundle the "
                           "widget; install Node.js or set PALLAS_VIZ_SKIP_JS=1")
    lock = js / "package-lock.json"
    lock_hash = _sha256([lock], js) if lock.exists() else ""
    stamp = js / "node_modules" / NPM_STAMP
    if not (js / "node_modules" / ".bin" / "esbuild").exists() or _read(stamp) != lock_hash:
        cmd = "ci" if lock.exists() else "install"
        subprocess.run([npm, cmd, "--no-audit", "--no-fund"], cwd=js, check=True)
        stamp.write_text(lock_hash + "\n")
    subprocess.run([npm, "run", "build"], cwd=js, check=True)
    (static / BUILD_STAMP).write_text(sources_hash(js) + "\n")
    return True


try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run as a script, outside a hatch build
    BuildHookInterface = None

if BuildHookInterface is not None:

    class JSBuildHook(BuildHookInterface):
        PLUGIN_NAME = "custom"

        def initialize(self, version, build_data):
            build(Path(self.root), warn=self.app.display_warning)


if __name__ == "__main__":
    try:
        build(Path(__file__).resolve().parent,
              warn=lambda msg: print(f"hatch_build.py: {msg}", file=sys.stderr))
    except (RuntimeError, subprocess.CalledProcessError) as e:
        sys.exit(f"hatch_build.py: {e}")
