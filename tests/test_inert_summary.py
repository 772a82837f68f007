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
