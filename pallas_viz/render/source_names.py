"""The code around a line, as a trace stored it, with its file's human name."""

from __future__ import annotations

from ..file_names import cell_label, describe_location, file_label

__all__ = ["cell_label", "describe_location", "file_label", "snippet"]


def snippet(trace, filename: str, line: int) -> dict:
    """The code around `line` that `trace` stored while it was recorded.

    Returns `{"file", "line", "name", "label", "start", "lines"}`; `lines` is empty
    when the trace stored none for that line.
    """
    from ..snippets import lookup

    start, text = lookup(trace, filename, line)
    return {
        "file": filename,
        "line": int(line),
        "name": file_label(filename),
        "label": describe_location(filename, line),
        "start": start,
        "lines": text,
    }
