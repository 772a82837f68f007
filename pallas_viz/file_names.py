"""Human names for source files, notebook cells included (`In [7]`)."""

from __future__ import annotations

import os
import re

_IPYTHON_INPUT = re.compile(r"^<ipython-input-(\d+)-[0-9a-f]+>$")
_IPYKERNEL_CELL = re.compile(r"(^|[\\/])ipykernel_\d+[\\/]\d+\.py$")


def _execution_count(filename: str) -> int | None:
    """The `In [N]` number IPython recorded for a cell file, if this process ran it."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency of ipywidgets
        return None
    ip = get_ipython()
    mapping = getattr(getattr(ip, "compile", None), "_filename_map", None) or {}
    n = mapping.get(filename)
    return n if isinstance(n, int) and n > 0 else None


def cell_label(filename: str) -> str | None:
    """`In [7]` for a notebook cell file, "notebook cell" when its number is unknown, else None."""
    m = _IPYTHON_INPUT.match(filename)
    if m:
        return f"In [{int(m.group(1))}]"
    if _IPYKERNEL_CELL.search(filename):
        n = _execution_count(filename)
        return f"In [{n}]" if n is not None else "notebook cell"
    return None


def file_label(filename: str) -> str:
    """A short name for a file: `In [7]` for notebook cells, else the base name."""
    return cell_label(filename) or os.path.basename(filename) or filename


def describe_location(filename: str, line: int) -> str:
    """`In [7], line 3` for a notebook cell, else `kernels.py:110`."""
    cell = cell_label(filename)
    if cell is not None:
        return f"{cell}, line {line}"
    return f"{file_label(filename)}:{line}"
