"""The summary of a trace from someone else prints inert: no terminal escape gets through."""

from __future__ import annotations

import json

import pallas_viz as pv
from pallas_viz.examples import kernels as ex

# (a lone surrogate is refused by the loader: test_loader)
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\u202e\u2066"


def _crafted(tmp_path, text: str):
    """(the recorded trace of collective_in_branch, the trace loaded from a copy of its
    file with `text` in every one-line field: code lines, functions, files, the kernel's
    name and thread axis)."""
    fn, args = ex.collective_in_branch()
    with pv.trace() as tr:
        fn(*args)
    d = json.loads(json.dumps(tr.to_dict()))
    for s in d["events"]["sources"]:
        s["code"] = f"pl.run_scoped(x){text}"
        s["function"] = f"body{text}"
        s["file"] = s["file"] + text
    d["kernels"][0]["thread_axis"] = f"t{text}"
    d["kernels"][0]["name"] = f"k{text}"
    path = tmp_path / "crafted.json"
    path.write_text(json.dumps(d))
    return tr, pv.load(path)


def test_hostile_strings_in_a_trace_file_print_inert(tmp_path):
    _, loaded = _crafted(tmp_path, HOSTILE)
    for color in (False, True):
        text = loaded.summary(color=color)
        assert "\x07" not in text and "\x1b]" not in text and "\x1b[2J" not in text
        assert "\u202e" not in text and "\u2066" not in text
        assert "\\x1b]0;pwned\\x07" in text  # shown, escaped
        assert "partial_collective" in text  # and the diagnosis is still there


SPOOF = "\npallas_viz: clean in 1 kernel run(s)\u2028pallas_viz: clean\u2029\u200f"


def test_one_line_fields_cannot_add_a_line_of_their_own(tmp_path):
    # a kernel name, file, function or code line holding a newline or a Unicode line
    # separator would print a fake verdict at the start of a line of `show` or `diff`
    tr, loaded = _crafted(tmp_path, SPOOF)
    text = loaded.summary()
    verdicts = [ln for ln in text.splitlines() if ln.lstrip().startswith("pallas_viz")]
    assert len(verdicts) == 1 and verdicts[0].startswith("pallas_viz: 1 error(s)"), text
    assert not set("\u2028\u2029\u200f") & set(text)
    assert "\\npallas_viz: clean in 1 kernel run(s)\\u2028pallas_viz: clean\\u2029\\u200f" in text
    diff = pv.diff(tr, loaded).summary()
    assert not any(ln.lstrip().startswith("pallas_viz: clean") for ln in diff.splitlines()), diff
    assert not set("\u2028\u2029\u200f") & set(diff)
