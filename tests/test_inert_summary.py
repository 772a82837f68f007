"""The summary of a trace from someone else prints inert: no terminal escape gets through."""

from __future__ import annotations

import json

import pallas_viz as pv
from pallas_viz.examples import kernels as ex

HOSTILE = "\x1b]0;pwned\x07\x1b[2J\u202e\ud800"


def test_hostile_strings_in_a_trace_file_print_inert(tmp_path):
    fn, args = ex.collective_in_branch()
    with pv.trace() as tr:
        fn(*args)
    d = json.loads(json.dumps(tr.to_dict()))
    for s in d["events"]["sources"]:
        s["code"] = f"pl.run_scoped(x){HOSTILE}"
        s["function"] = f"body{HOSTILE}"
        s["file"] = s["file"] + HOSTILE
    d["kernels"][0]["thread_axis"] = f"t{HOSTILE}"
    d["kernels"][0]["name"] = f"k{HOSTILE}"
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(d))
    loaded = pv.load(path)
    for color in (False, True):
        text = loaded.summary(color=color)
        assert "\x07" not in text and "\x1b]" not in text and "\x1b[2J" not in text
        assert "\u202e" not in text and "\ud800" not in text
        assert "\\x1b]0;pwned\\x07" in text  # shown, escaped
        assert "partial_collective" in text  # and the diagnosis is still there


SPOOF = "\npallas_viz: clean in 1 kernel run(s)\u2028pallas_viz: clean\u2029\u200f"


def test_one_line_fields_cannot_add_a_line_of_their_own(tmp_path):
    # a kernel name, file, function or code line holding a newline or a Unicode line
    # separator would print a fake verdict at the start of a line of `show` or `diff`
    fn, args = ex.collective_in_branch()
    with pv.trace() as tr:
        fn(*args)
    d = json.loads(json.dumps(tr.to_dict()))
    for s in d["events"]["sources"]:
        s["code"] = f"pl.run_scoped(x){SPOOF}"
        s["function"] = f"body{SPOOF}"
        s["file"] = s["file"] + SPOOF
    d["kernels"][0]["thread_axis"] = f"t{SPOOF}"
    d["kernels"][0]["name"] = f"k{SPOOF}"
    path = tmp_path / "spoof.json"
    path.write_text(json.dumps(d))
    loaded = pv.load(path)
    text = loaded.summary()
    verdicts = [ln for ln in text.splitlines() if ln.startswith("pallas_viz")]
    assert len(verdicts) == 1 and verdicts[0].startswith("pallas_viz: 1 error(s)"), text
    assert not set("\u2028\u2029\u200f") & set(text)
    assert "\\npallas_viz: clean in 1 kernel run(s)\\u2028pallas_viz: clean\\u2029\\u200f" in text
    diff = pv.diff(tr, loaded).summary()
    assert not any(ln.lstrip().startswith("pallas_viz: clean") for ln in diff.splitlines()), diff
    assert not set("\u2028\u2029\u200f") & set(diff)

