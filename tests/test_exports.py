"""The Trace methods and CLI flags for the timeline, memory and Perfetto views."""

from __future__ import annotations

import json

import pytest

import pallas_viz as pv
from pallas_viz.cli import main as cli
from pallas_viz.examples import kernels as ex


@pytest.fixture(scope="module")
def buggy():
    fn, args = ex.collective_in_branch()
    with pv.trace() as tr:
        fn(*args)
    return tr


@pytest.mark.parametrize("kind", ["grid", "timeline", "memory"])
def test_plot_kinds(buggy, kind):
    fig = buggy.plot(kind=kind)
    assert fig.axes  # drawn, not empty
    assert fig._repr_png_().startswith(b"\x89PNG")


def test_plot_kind_is_checked(buggy):
    with pytest.raises(ValueError, match="timeline"):
        buggy.plot(kind="pie")


def test_to_perfetto_and_cli_flag(buggy, tmp_path, capsys):
    path = tmp_path / "t.perfetto.json"
    buggy.to_perfetto(path)
    doc = json.loads(path.read_text())
    names = {e["name"] for e in doc["traceEvents"]}
    assert any("SMEM (8, 128) float32" in n for n in names)
    assert any("partial_collective" in n for n in names)
    saved = tmp_path / "t.json"
    buggy.save(saved)
    out = tmp_path / "from_cli.json"
    assert cli(["show", str(saved), "--perfetto", str(out), "--color", "never"]) == 1
    assert "Perfetto trace written to" in capsys.readouterr().out
    assert json.loads(out.read_text())["traceEvents"]
    # an unwritable place: one line, exit 2, before anything is drawn
    assert cli(["show", str(saved), "--perfetto", str(tmp_path / "no" / "x.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_empty_trace_refuses_views(tmp_path):
    with pv.trace() as tr:
        pass
    with pytest.raises(pv.EmptyTraceError):
        tr.to_perfetto(tmp_path / "x.json")
    with pytest.raises(pv.EmptyTraceError):
        tr.plot(kind="timeline")


def test_trace_device_picks_the_budget_preset():
    from pallas_viz.examples import ops

    fn, args = ops.hopper_matmul()
    with pv.trace(device="sm120") as tr:  # 99 KiB of SMEM per block
        fn(*args)
    assert tr.meta["device"] == "sm120"
    (root,) = [f for f in tr.findings if f.kind == "smem_over_budget"]
    assert root.severity == "error" and "99" in root.message
    # another preset after the fact: the same peaks, that preset's limit
    h100, sm120 = tr.budget("h100"), tr.budget("sm120")
    assert {b.smem.limit for b in h100} == {232448} and {b.smem.limit for b in sm120} == {101376}
    assert [b.smem.peak for b in h100] == [b.smem.peak for b in sm120]
    with pytest.raises(ValueError, match="h100"):
        pv.trace(device="a100")
