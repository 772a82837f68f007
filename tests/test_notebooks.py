"""Every tutorial notebook executes top to bottom in a real Jupyter kernel.

A cell that raises fails the test; the notebooks assert on their own traces
(`assert tr.findings == []`, the finding kinds, the source lines), so a wrong answer fails too.
"""

from __future__ import annotations

import pathlib
import re
import shutil

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

NOTEBOOKS = pathlib.Path(__file__).resolve().parent.parent / "notebooks"
NAMES = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
TIMEOUT = {"03-warp-specialized-matmul.ipynb": 600}
# A notebook that ends with a `%%pallas_trace --diff VAR` cell: the counts its diff
# summary must give, on its first (kernel) line and its total line.
DIFF_COUNTS = {"01-quickstart.ipynb": "1 root cause fixed, 0 still there, 0 new"}


def test_the_tutorials_are_there():
    assert NAMES == ["01-quickstart.ipynb", "02-thread-id-must-be-zero.ipynb",
                     "03-warp-specialized-matmul.ipynb"]


@pytest.mark.parametrize("name", NAMES)
def test_notebook_is_committed_without_outputs(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, (
                f"{name} cell {i} has saved outputs: strip them "
                "(jupyter nbconvert --clear-output --inplace)")
    assert "widgets" not in nb.metadata, f"{name} has saved widget state: strip it"


@pytest.mark.parametrize("name", NAMES)
def test_notebook_executes(name, tmp_path):
    src = tmp_path / name
    shutil.copy(NOTEBOOKS / name, src)
    nb = nbformat.read(src, as_version=4)
    client = NotebookClient(nb, timeout=TIMEOUT.get(name, 300), kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute()
    except CellExecutionError as e:
        pytest.fail(f"{name}: a cell failed:\n{e}")
    finally:
        nbformat.write(nb, tmp_path / f"executed-{name}")
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    errors = [o for o in outputs if o.output_type == "error"]
    assert not errors, errors
    if name in DIFF_COUNTS:
        _check_diff_output(nb, DIFF_COUNTS[name])
    # Every %%pallas_trace cell showed the trace: a static snapshot (what a notebook reopened
    # without its widget state shows), then the live widget that hides it (same id).
    magic_cells = [c for c in nb.cells
                   if c.cell_type == "code" and c.source.lstrip().startswith("%%pallas_trace")]
    assert magic_cells, f"{name} traces nothing with %%pallas_trace"
    for c in magic_cells:
        shown = [o for o in c.outputs if o.output_type == "display_data"]
        assert shown, f"no display output for:\n{c.source}"
        snap, live = shown[0]["data"], shown[1]["data"]
        assert "image/png" in snap and "pallas_viz" in snap["text/plain"], sorted(snap)
        sid = re.search(r'class="pv-snapshot" data-pv="([0-9a-f]{32})"', snap["text/html"])
        assert sid and "<script" not in snap["text/html"].lower()
        assert "application/vnd.jupyter.widget-view+json" in live, sorted(live)
        assert "image/png" not in live and "text/html" not in live
        model = live["application/vnd.jupyter.widget-view+json"]["model_id"]
        state = nb.metadata.get("widgets", {}).get(
            "application/vnd.jupyter.widget-state+json", {}).get("state", {})
        if model in state:  # nbclient stores the widget state when it has it
            assert state[model]["state"]["snapshot_id"] == sid.group(1)


def _check_diff_output(nb, counts: str) -> None:
    """The notebook ends with a `%%pallas_trace --diff` cell (and at most one code cell after
    it) whose diff says `counts` and no new error."""
    code = [c for c in nb.cells if c.cell_type == "code"]
    diffs = [i for i, c in enumerate(code)
             if c.source.lstrip().startswith("%%pallas_trace") and "--diff" in c.source]
    assert diffs and diffs[-1] >= len(code) - 2, "the notebook does not end with --diff"
    cell = code[diffs[-1]]
    # shown once: as the text form of the diff's static compare view, not printed as well
    printed = "".join(o.text for o in cell.outputs
                      if o.output_type == "stream" and o.name == "stdout")
    assert "pallas_viz diff:" not in printed, printed
    shown = [o["data"] for o in cell.outputs if o.output_type == "display_data"]
    text = shown[2]["text/plain"] if len(shown) > 2 else ""
    lines = text.splitlines()
    kernel = [ln for ln in lines if ln.startswith("kernel ")]
    assert kernel and kernel[0].endswith(f": {counts}"), text
    assert lines[-1].startswith(f"pallas_viz diff: {counts} (no new error)"), text
    # after the trace's snapshot and widget: the diff's static compare view, then the
    # compare widget (before | after grids) that hides it
    assert len(shown) == 4, [sorted(d) for d in shown]
    snap, live = shown[2], shown[3]
    assert 'class="pv-snapshot"' in snap["text/html"] and "pv-compare-static" in snap["text/html"]
    assert "application/vnd.jupyter.widget-view+json" in live


def test_static_shows_the_png_and_the_summary_in_a_kernel(tmp_path):
    # (review N: `%%pallas_trace --static` in JupyterLab showed the PNG alone: the summary
    # was that output's text/plain, which JupyterLab never renders beside an image)
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("%load_ext pallas_viz\n"
                                  "from pallas_viz.examples import kernels as ex\n"
                                  "fn, args = ex.collective_in_branch()"),
        nbformat.v4.new_code_cell("%%pallas_trace --static --no-raise -o tr\nfn(*args)"),
        nbformat.v4.new_code_cell("print(repr(tr.summary()))"),
    ])
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    shown = [o for o in nb.cells[1].outputs if o.output_type == "display_data"]
    assert [sorted(o["data"]) for o in shown] == [["image/png", "text/plain"], ["text/plain"]]
    summary = eval(nb.cells[2].outputs[0]["text"])  # noqa: S307 - the repr printed above
    assert shown[1]["data"]["text/plain"] == summary and "partial_collective" in summary
    assert "summary follows" in shown[0]["data"]["text/plain"]
