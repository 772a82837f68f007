"""Text from a trace file or a kernel made inert before it reaches a terminal.

A trace travels between people: a message, a file name or a code line in it may hold terminal
control sequences (`\\x1b]0;title\\x07`, `\\x1b[2J`), bidi overrides that reorder what the
reader sees (U+202E), or lone surrogates that make `print` raise. `terminal_safe` turns each of
them into a visible escape (`\\x1b`, `\\u202e`, `\\udc80`) and keeps everything else,
newlines and tabs included.
"""

from __future__ import annotations

import codecs
import re

# C0 controls except \t and \n, DEL, C1 controls, bidi marks, embeddings, overrides and
# isolates, the Unicode line and paragraph separators, lone surrogates (a str cannot hold a
# surrogate pair as one character, so every one is lone), and the characters that draw
# nothing: the soft hyphen, zero-width space, joiners and word joiner, invisible operators,
# U+FEFF and the tag characters (`kern\u200bels.py` must not read as `kernels.py`).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u061c\u180e\u200b-\u200f"
                     "\u2028\u2029\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
                     "\ud800-\udfff\U000e0000-\U000e007f]")
# Select Graphic Rendition (colours, bold) as the text renderer emits it.
_SGR = re.compile(r"\x1b\[[0-9;]{0,32}m")


def _escape(m: re.Match) -> str:
    cp = ord(m.group(0))
    if cp <= 0xFF:
        return f"\\x{cp:02x}"
    return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


def terminal_safe(text, keep_sgr: bool = False) -> str:
    """`text` with every control character, bidi override and lone surrogate escaped.

    With `keep_sgr`, complete SGR sequences (`\\x1b[1;31m`: colour and weight only) are kept,
    for a summary coloured by pallas_viz itself. Never raises.
    """
    try:
        if not isinstance(text, str):
            text = str(text)
        if not keep_sgr:
            return _UNSAFE.sub(_escape, text)
        out, pos = [], 0
        for m in _SGR.finditer(text):
            out.append(_UNSAFE.sub(_escape, text[pos:m.start()]))
            out.append(m.group(0))
            pos = m.end()
        out.append(_UNSAFE.sub(_escape, text[pos:]))
        return "".join(out)
    except Exception:  # noqa: BLE001 - a str() that raises, a str subclass gone wrong
        try:
            return _UNSAFE.sub(_escape, object.__repr__(text))
        except Exception:  # noqa: BLE001
            return "<unprintable>"


def one_line(text) -> str:
    """`terminal_safe(text)` with its newlines escaped too (`\\n`): for a field that is one
    line (a file or kernel name, a code line), so that text from a trace file cannot start
    a line of its own (a fake "clean" verdict) in the output around it."""
    return terminal_safe(text).replace("\n", "\\n")


def html_text(text) -> str:
    """`terminal_safe(text)` escaped for HTML: markup inert, unseen characters (U+202E)
    shown, for pages written in Python (the script-free snapshots)."""
    import html

    return html.escape(terminal_safe(text))


def safe_for_stdout(text, encoding: str | None = None, keep_sgr: bool = False) -> str:
    """`terminal_safe(text)` with the characters `encoding` lacks as backslash escapes
    (`\\xe9`, `\\u2713`), so printing it to a stream of that encoding cannot raise."""
    safe = terminal_safe(text, keep_sgr=keep_sgr)
    try:
        enc = codecs.lookup(encoding or "utf-8").name
    except (LookupError, TypeError):
        enc = "ascii"
    try:
        return safe.encode(enc, errors="backslashreplace").decode(enc, errors="replace")
    except Exception:  # noqa: BLE001 - an odd codec
        return safe.encode("ascii", errors="backslashreplace").decode("ascii")
