"""Real JupyterLab / Notebook 7 servers and a real Chromium for the browser tests.

`jupyter_server(kind, root_dir)` starts `jupyter lab` or `jupyter notebook` on 127.0.0.1
(free port, random token, our own workspace and runtime directories), waits for
`/api/status`, and terminates the process it started. `launch_chromium()` starts Debian's
Chromium through Playwright; no browser is ever downloaded.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-dev-shm-usage"]
REPO = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
ARTIFACTS = REPO / "test-artifacts"


def require_chromium() -> None:
    """Skip without Chromium, except under CI where a missing browser is a failure."""
    if os.path.exists(CHROMIUM):
        return
    msg = f"{CHROMIUM} is missing (apt-get install chromium)"
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail(msg + "; browser tests must run under CI")
    pytest.skip(msg)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JupyterServer:
    def __init__(self, kind: str, root_dir: pathlib.Path, base_url: str, token: str,
                 proc: subprocess.Popen, log: pathlib.Path):
        self.kind, self.root_dir, self.base_url, self.token = kind, root_dir, base_url, token
        self.proc, self.log = proc, log

    def url(self, path: str) -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.base_url}{path}{sep}token={self.token}"

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


@contextlib.contextmanager
def jupyter_server(kind: str, root_dir: pathlib.Path, timeout: float = 90.0,
                   save_widget_state: bool = False):
    """A `jupyter lab` (kind="lab") or `jupyter notebook` (kind="notebook") server;
    `save_widget_state` turns on ipywidgets' "Save Widget State Automatically"."""
    module = {"lab": "jupyterlab", "notebook": "notebook"}[kind]
    app = {"lab": "LabApp", "notebook": "JupyterNotebookApp"}[kind]
    port, token = free_port(), secrets.token_hex(16)
    state = pathlib.Path(tempfile.mkdtemp(prefix=f"pv-{kind}-state-"))
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(state / "runtime"),
               JUPYTER_CONFIG_DIR=str(state / "config"), JUPYTERLAB_SETTINGS_DIR=str(
                   state / "settings"), JUPYTERLAB_WORKSPACES_DIR=str(state / "workspaces"),
               PYTHONUNBUFFERED="1")
    # No news or update checks: they would reach for the network and pop toasts.
    if kind == "lab":  # (Notebook 7 has no such plugin: a settings file for it is an error)
        settings = state / "settings" / "@jupyterlab" / "apputils-extension"
        settings.mkdir(parents=True)
        (settings / "notification.jupyterlab-settings").write_text(
            json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    if save_widget_state:
        widgets = state / "settings" / "@jupyter-widgets" / "jupyterlab-manager"
        widgets.mkdir(parents=True, exist_ok=True)
        (widgets / "plugin.jupyterlab-settings").write_text(json.dumps({"saveState": True}))
    cmd = [sys.executable, "-m", module, "--no-browser", f"--port={port}", "--ip=127.0.0.1",
           f"--ServerApp.token={token}", "--ServerApp.port_retries=0",
           f"--ServerApp.root_dir={root_dir}", "--allow-root",
           f"--{app}.expose_app_in_browser=True",
           f"--{app}.workspaces_dir={state / 'workspaces'}"]
    log = state / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=root_dir)
    server = JupyterServer(kind, root_dir, f"http://127.0.0.1:{port}", token, proc, log)
    try:
        _wait_ready(server, timeout)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        shutil.rmtree(state, ignore_errors=True)


def _wait_ready(server: JupyterServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"jupyter {server.kind} exited with {server.proc.returncode}:\n"
                               + server.log_tail())
        try:
            with urllib.request.urlopen(server.url("/api/status"), timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.3)
    raise RuntimeError(f"jupyter {server.kind} did not answer in {timeout:.0f} s:\n"
                       + server.log_tail())


def copy_notebooks(dest: pathlib.Path) -> pathlib.Path:
    """A copy of `notebooks/` (what the server serves and the kernels write into)."""
    root = dest / "notebooks"
    shutil.copytree(NOTEBOOKS, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    return root


def launch_chromium(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                      args=CHROMIUM_ARGS)


def open_offline(browser, path: pathlib.Path, **page_kw):
    """A new page on the file `path` with every request off file:// aborted: `(page,
    errors)`, where errors collects page errors and the URLs that tried the network."""
    page = browser.new_page(**page_kw)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:")
               else (errors.append("network: " + r.request.url), r.abort()))
    page.goto(path.as_uri())
    return page, errors


def artifact(name: str) -> pathlib.Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / name


# ---------------------------------------------------------------- traces for the front end
def grid_geometry() -> dict:
    """The grid geometry the widget draws with (js/layout.js `GEOM`)."""
    import re

    text = (REPO / "js" / "layout.js").read_text()
    m = re.search(r"export const GEOM = \{([^}]*)\}", text)
    assert m, "GEOM not found in js/layout.js"
    return {k: int(v) for k, v in re.findall(r"(\w+):\s*(\d+)", m.group(1))}


def many_blocks_trace(blocks: int = 4096, bad: int = 3001):
    """`blocks` x 2 threads ("w"), no two neighbours alike (nothing folds); in block `bad`
    thread 0 alone makes a second collective SMEM request (line 14): thread 1 never does."""
    import numpy as np

    from pallas_viz.analysis import analyse
    from pallas_viz.model import KernelInfo, SourceLocation
    from pallas_viz.store import COLUMNS, OP_CODE, RESOURCE_CODE, SPACE_CODE, EventTable
    from pallas_viz.trace import Trace

    rows = []  # (block, thread, op, nbytes, source, ref, buffer)
    buf = 0
    for b in range(blocks):
        nb = 1024 * (1 + b % 7)
        rows += [(b, 0, "create", nb, 0, 2, buf), (b, 1, "join", nb, 0, 2, buf),
                 (b, 0, "release", nb, 0, 1, buf), (b, 1, "free", nb, 0, 0, buf)]
        buf += 1
        if b == bad:
            rows += [(b, 0, "create", 4096, 1, 2, buf), (b, 0, "release", 4096, 1, 1, buf)]
            buf += 1
    n = len(rows)
    cols = {k: np.zeros(n, v) for k, v in COLUMNS.items()}
    for j, name in enumerate(("block", "thread")):
        cols[name][:] = [r[j] for r in rows]
    cols["op"][:] = [OP_CODE[r[2]] for r in rows]
    cols["resource"][:] = RESOURCE_CODE["buffer"]
    cols["memory_space"][:] = SPACE_CODE["SMEM"]
    cols["warp"][:] = -1
    cols["nbytes"][:] = [r[3] for r in rows]
    cols["source"][:] = [r[4] for r in rows]
    cols["ref_count"][:] = [r[5] for r in rows]
    cols["initial_ref_count"][:] = 2
    cols["buffer_id"][:] = [r[6] for r in rows]
    cols["allocation"][:] = [r[6] for r in rows]
    seen: dict = {}
    for i, r in enumerate(rows):
        cols["thread_seq"][i] = seen.get(r[:2], 0)
        seen[r[:2]] = cols["thread_seq"][i] + 1
    code = "pl.run_scoped({}, plgpu.SMEM((8, 128), jnp.float32), collective_axes='w')"
    locs = [SourceLocation("/k/big.py", 10, 4, "body", "    " + code.format("body")),
            SourceLocation("/k/big.py", 14, 8, "body", "        " + code.format("scratch"))]
    table = EventTable(cols, [(b,) for b in range(blocks)], [(8, 128)], ["float32"], locs)
    kernels = [KernelInfo(0, "big", None, 1, 2, 1, "w")]
    return Trace(table, kernels, analyse(table, kernels))


def large_example_trace():
    """The 64-block kernel whose bug sits in block 41 (pallas_viz.examples.large), traced."""
    import pallas_viz as pv
    from pallas_viz.examples.large import one_bad_block

    fn, args = one_bad_block()
    with pv.trace(raise_errors=False) as tr:
        fn(*args)
    return tr


def write_notebook(path: pathlib.Path, cells: list[str]) -> pathlib.Path:
    """A notebook of code cells (Python 3 kernel), unexecuted."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    path.write_text(nbformat.writes(nb))
    return path


LARGE_NOTEBOOK = [
    "%load_ext pallas_viz\nfrom pallas_viz.examples.large import one_bad_block\n"
    "fn, args = one_bad_block()",
    "%%pallas_trace --no-raise -o tr\nfn(*args)",
]
