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
def jupyter_server(kind: str, root_dir: pathlib.Path, timeout: float = 90.0):
    """A `jupyter lab` (kind="lab") or `jupyter notebook` (kind="notebook") server."""
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


def artifact(name: str) -> pathlib.Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / name
