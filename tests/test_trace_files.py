"""`pv.load` on bad files: one clear `TraceFileError` each, never a raw exception."""

from __future__ import annotations

import json

import pytest

import pallas_viz as pv
from pallas_viz import examples as ex


@pytest.fixture(scope="module")
def good_trace_text(tmp_path_factory):
    fn, args = ex.collective_in_branch()
    with pv.trace() as tr:
        fn(*args)
    path = tmp_path_factory.mktemp("traces") / "good.json"
    tr.save(path)
    assert pv.load(path).findings == tr.findings  # the baseline loads
    return path.read_text()


def _load_text(tmp_path, text, name="t.json", mode="w"):
    path = tmp_path / name
    if mode == "wb":
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(pv.TraceFileError) as info:
        pv.load(path)
    return str(info.value)


@pytest.mark.parametrize("frac", [0.1, 0.5, 0.99])
def test_truncated(tmp_path, good_trace_text, frac):
    msg = _load_text(tmp_path, good_trace_text[: int(len(good_trace_text) * frac)])
    assert "not valid JSON (truncated or corrupt)" in msg
    assert " at at " not in msg, msg  # (JSON's "... starting at" and our "at line")


def test_empty_and_blank(tmp_path):
    assert "is empty" in _load_text(tmp_path, "")
    assert "is empty" in _load_text(tmp_path, "  \n\t")


def test_binary_garbage(tmp_path):
    msg = _load_text(tmp_path, b"\x89PNG\r\n\x1a\n\xff\xfe\x00", mode="wb")
    assert "not a text (JSON) file" in msg or "not valid JSON" in msg


def test_missing_file(tmp_path):
    with pytest.raises(pv.TraceFileError) as info:
        pv.load(tmp_path / "nope.json")
    assert "cannot read" in str(info.value)


@pytest.mark.parametrize("doc", [[1, 2, 3], {"a": 1}, "text", 42, None,
                                 {"format": "chrome-trace", "version": 1}])
def test_foreign_json(tmp_path, doc):
    assert "not a pallas_viz trace" in _load_text(tmp_path, json.dumps(doc))


def test_newer_schema(tmp_path, good_trace_text):
    d = json.loads(good_trace_text)
    d["version"] = 99
    msg = _load_text(tmp_path, json.dumps(d))
    assert "version 99 is newer" in msg and "upgrade pallas_viz" in msg


def test_missing_version(tmp_path, good_trace_text):
    d = json.loads(good_trace_text)
    del d["version"]
    assert "no integer \"version\"" in _load_text(tmp_path, json.dumps(d))


@pytest.mark.parametrize("damage", [
    lambda d: d.pop("events"),
    lambda d: d["events"]["columns"].pop("thread"),
    lambda d: d["events"]["columns"]["thread"].pop(),  # columns of different lengths
    lambda d: d["events"]["columns"].__setitem__("kernel", ["x"] * len(
        d["events"]["columns"]["kernel"])),
    lambda d: d["kernels"][0].pop("num_devices"),
    lambda d: d.__setitem__("kernels", None),
    lambda d: d["events"].__setitem__("sources", [{"line": 3}]),
])
def test_corrupt_content(tmp_path, good_trace_text, damage):
    d = json.loads(good_trace_text)
    damage(d)
    assert "corrupt trace" in _load_text(tmp_path, json.dumps(d))


@pytest.mark.parametrize("claim", [
    lambda d: d["findings"].append({"kind": "leak"}),
    lambda d: d["findings"][0].__setitem__("cells", 7),
    lambda d: d.__setitem__("findings", []),
])
def test_findings_in_a_file_are_never_trusted(tmp_path, good_trace_text, claim):
    """A file can claim any findings; `pv.load` re-analyses the saved events instead."""
    d = json.loads(good_trace_text)
    claim(d)
    path = tmp_path / "claims.json"
    path.write_text(json.dumps(d))
    tr = pv.load(path)
    assert [f.kind for f in tr.findings] == ["partial_collective"]
    assert tr.meta["loaded"] is True


def test_version_1_file_still_loads(tmp_path, good_trace_text):
    """Version 1 wrote `()` for kernel-level requests; those (no source line) move to -1."""
    d = json.loads(good_trace_text)
    d["version"] = 1
    cols = d["events"]["columns"]
    blocks = d["events"]["blocks"]
    blocks.append([])
    empty = len(blocks) - 1
    cols["block"] = [empty if b == -1 else b for b in cols["block"]]
    for f in d["findings"]:
        f.pop("consequences", None)
        f.pop("branch", None)
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(d))
    tr = pv.load(path)
    assert [f.kind for f in tr.findings] == ["partial_collective"]
    assert all(e.block is None for e in tr.events if e.memory_space == "GMEM")


def _branch_sources(d):
    return [s["branch"] for s in d["events"]["sources"] if s and s.get("branch")]


def test_a_branch_kind_outside_the_known_ones_is_corrupt(tmp_path, good_trace_text):
    d = json.loads(good_trace_text)
    (branch,) = _branch_sources(d)
    assert branch["kind"] == "branch"
    branch["kind"] = "<script>"
    msg = _load_text(tmp_path, json.dumps(d))
    assert "corrupt trace" in msg and ".branch.kind: '<script>' is not one of" in msg


def test_a_file_without_branch_kinds_loads_with_the_branch_advice(tmp_path, good_trace_text):
    """Files written before sources had a `kind`: the branch is kept, its kind unknown."""
    d = json.loads(good_trace_text)
    for s in d["events"]["sources"]:
        if s and s.get("branch"):
            s["branch"].pop("kind")
    path = tmp_path / "old.json"
    path.write_text(json.dumps(d))
    (root,) = pv.load(path).findings
    assert root.branch is not None and root.branch.kind is None
    assert "`pl.when`" in root.suggestion


def test_a_loop_root_keeps_its_kind_and_advice_through_a_file(tmp_path):
    from pallas_viz.examples import shapes as sh

    fn, args = sh.launch(sh.BUGGY["collective_in_loop"], "grid1")
    tr, _ = sh.run_traced(fn, args)
    tr.save(tmp_path / "loop.json")
    (root,) = pv.load(tmp_path / "loop.json").findings
    assert root.branch.kind == "loop" and "trip count" in root.suggestion
    assert (root.branch.line, root.message, root.suggestion) == (
        tr.findings[0].branch.line, tr.findings[0].message, tr.findings[0].suggestion)
