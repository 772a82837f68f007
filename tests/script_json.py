"""Run a test helper script in a fresh Python process and read the JSON it printed."""

from __future__ import annotations

import json
import os
import subprocess


def printed_json(cmd: list[str], *, env: dict | None = None, timeout: float = 300):
    """The value of the last line of `cmd`'s output that is JSON (one starting with "[" or
    "{"); a RuntimeError with the process's output when it printed none. `env`: variables
    added to this process's environment."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    for line in reversed(proc.stdout.splitlines()):
        if line[:1] in ("[", "{"):
            return json.loads(line)
    raise RuntimeError(f"{' '.join(cmd)} printed no result (rc={proc.returncode}):\n"
                       f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
