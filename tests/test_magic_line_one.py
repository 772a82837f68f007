"""A `%%pallas_trace` cell is shown as the user typed it, numbered as JupyterLab numbers it.

(review N, section 2, "Related": the source panel showed the magic's line as an empty line
1, not the `%%pallas_trace ...` line the user sees in the cell.) IPython hands the magic the
cell's body; the magic runs it from line 2, so that every line number the texts give
(`In [N], line L`) is the cell editor's, where `%%pallas_trace` is line 1. The stored
source around a finding (widget, HTML export, saved trace) shows that line 1 as typed, the
finding's line where the editor has it, and the branch the analysis reads from the code.
A `%pallas_trace` statement on line 3 of its cell is line 3, shown in its cell.
"""

from __future__ import annotations

import json

import pytest
from browser_util import (
    artifact,
    jupyter_server,
    write_notebook,
)

import pallas_viz as pv
from pallas_viz.render.source_names import snippet

IMPORTS = ("import jax, jax.numpy as jnp\nfrom jax.experimental import pallas as pl\n"
           "from jax.experimental.pallas import mosaic_gpu as plgpu")
KERNEL = '''\
def body(x_ref, o_ref):
    t = jax.lax.axis_index("t")
    @pl.when(t == 0)
    def _():
        pl.run_scoped(lambda buf: None, plgpu.SMEM((8, 128), jnp.float32), collective_axes="t")
kern = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((8, 128), jnp.float32), grid=(1,),
                    grid_names=("g",), num_threads=2, thread_name="t",
                    interpret=plgpu.InterpretGPUParams())'''
MAGIC = "%%pallas_trace --no-raise -o tr --static"
CELL = f"{MAGIC}\n{KERNEL}\ny = kern(jnp.ones((8, 128), jnp.float32))\n"
HIT, BRANCH, LAUNCH = 6, 4, 10  # as the cell editor numbers them (the magic's line is 1)


def _shown(tr, file: str, line: int) -> dict[int, str]:
    """The stored lines around `file:line`, by line number, as the views show them."""
    s = snippet(tr, file, line)
    return {s["start"] + i: text for i, text in enumerate(s["lines"])}


def _cell_lines(cell: str) -> dict[int, str]:
    return dict(enumerate(cell.split("\n"), start=1))


def _check(tr, cell: str, number: int, hit: int = HIT, branch: int = BRANCH,
           launch: int = LAUNCH) -> None:
    (f,) = tr.errors
    assert (f.source.line, f.branch.line, tr.kernels[0].launch.line) == (hit, branch, launch)
    text = tr.summary()
    assert f"--> In [{number}], line {hit} in body" in text, text
    assert f"threads part here: In [{number}], line {branch}" in text, text
    assert f"launched at In [{number}], line {launch}" in text, text
    typed = _cell_lines(cell)
    for loc in (f.source, f.branch, tr.kernels[0].launch):
        shown = _shown(tr, loc.file, loc.line)
        assert shown and all(typed[n] == t for n, t in shown.items()), (shown, typed)
    # the window around the finding starts at the magic's line, as typed
    shown = _shown(tr, f.source.file, hit)
    magic_line = next(n for n, t in typed.items() if t.startswith("%%pallas_trace"))
    assert shown[magic_line] == typed[magic_line], shown


def test_cell_magic_line_one_is_the_magic_as_typed(ip, tmp_path):
    ip.run_cell(IMPORTS)
    number = ip.execution_count
    assert ip.run_cell(CELL, store_history=True).success
    tr = ip.user_ns["tr"]
    _check(tr, CELL, number)
    assert _shown(tr, tr.errors[0].source.file, HIT)[1] == MAGIC
    # saved and loaded, and in the HTML export's stored snippets: the same lines
    tr.save(tmp_path / "t.json")
    back = pv.load(tmp_path / "t.json")
    _check(back, CELL, number)
    tr.to_html(tmp_path / "t.html")
    page = (tmp_path / "t.html").read_text()
    assert json.dumps(MAGIC)[1:-1] in page or MAGIC in page


def test_blank_lines_above_the_magic_count_as_the_editor_counts_them(ip):
    ip.run_cell(IMPORTS)
    cell = "\n\n" + CELL  # the editor shows the magic on line 3
    number = ip.execution_count
    assert ip.run_cell(cell, store_history=True).success
    _check(ip.user_ns["tr"], cell, number, HIT + 2, BRANCH + 2, LAUNCH + 2)


def test_under_another_cell_magic_the_lines_count_from_the_cells_top(ip):
    ip.run_cell(IMPORTS)
    cell = "%%capture captured\n" + CELL  # the editor shows %%pallas_trace on line 2
    number = ip.execution_count
    assert ip.run_cell(cell, store_history=True).success
    _check(ip.user_ns["tr"], cell, number, HIT + 1, BRANCH + 1, LAUNCH + 1)


def test_cell_magic_without_history_rebuilds_the_magic_line(ip):
    """`run_cell_magic` (no cell in IPython's history): the magic's line from its arguments."""
    ip.run_cell(IMPORTS)
    ip.run_cell_magic("pallas_trace", "--no-raise -o tr  --static",
                      f"{KERNEL}\ny = kern(jnp.ones((8, 128), jnp.float32))\n# other\n")
    tr = ip.user_ns["tr"]
    (f,) = tr.errors
    shown = _shown(tr, f.source.file, f.source.line)
    assert shown[1] == "%%pallas_trace --no-raise -o tr  --static", shown
    assert shown[HIT].lstrip().startswith("pl.run_scoped("), shown


def test_shell_escapes_in_the_cell_read_as_typed(ip):
    ip.run_cell(IMPORTS)
    cell = f"{MAGIC}\n{KERNEL}\n!true\ny = kern(jnp.ones((8, 128), jnp.float32))\n"
    number = ip.execution_count
    assert ip.run_cell(cell, store_history=True).success
    _check(ip.user_ns["tr"], cell, number, launch=LAUNCH + 1)


def test_line_magic_statement_is_numbered_in_its_cell(ip):
    ip.run_cell(IMPORTS)
    ip.run_cell(KERNEL, store_history=True)
    cell = ("x = 1\n\nout = %pallas_trace --no-raise -o tr --static "
            "kern(jnp.ones((8, 128), jnp.float32))\nz = 2")
    number = ip.execution_count
    assert ip.run_cell(cell, store_history=True).success
    tr = ip.user_ns["tr"]
    assert ip.user_ns["out"].shape == (8, 128)
    launch = tr.kernels[0].launch
    assert launch.line == 3
    assert f"launched at In [{number}], line 3" in tr.summary()
    shown = _shown(tr, launch.file, 3)
    assert shown == _cell_lines(cell), shown


# ------------------------------------------------------------------ in a real JupyterLab
NOTEBOOK = ["%load_ext pallas_viz\n" + IMPORTS, CELL.replace(" --static", "").rstrip("\n")]

# The source pane's rows (gutter number, text), the hit row's, the finding card's location,
# and the traced cell's own lines and execution count from JupyterLab's model (what its
# editor shows and numbers).
PANE_JS = """() => {
  const root = document.querySelector('.pv-root');
  const pane = root.querySelector('.pv-area-source');
  const rows = [...pane.querySelectorAll('.pv-codeblock:not(.pv-branchblock) .pv-line')]
    .map((r) => [r.querySelector('.pv-gutter').textContent,
                 r.querySelector('.pv-text').textContent]);
  const hit = pane.querySelector('.pv-line-hit');
  const branch = pane.querySelector('.pv-line-branch');
  const cell = window.jupyterapp.shell.currentWidget.content.model.cells.get(1);
  return {
    rows, hit: hit && hit.querySelector('.pv-gutter').textContent,
    branch: branch && branch.querySelector('.pv-gutter').textContent,
    title: pane.querySelector('.pv-pane-title').textContent,
    card: root.querySelector('.pv-finding.pv-selected .pv-floc').textContent,
    source: cell.sharedModel.getSource(), count: cell.executionCount,
  };
}"""


def _caret(page) -> tuple[float, list[int]]:
    """The hit column's left edge and the x of the caret's pixels under it (the error
    colour in the rows just below the underlined token), in page pixels."""
    import io

    import numpy as np
    from PIL import Image

    hit = page.locator(".pv-root .pv-line-hit")
    hit.scroll_into_view_if_needed()
    col = hit.locator(".pv-col")
    rgb = [int(v) for v in col.evaluate(
        "(c) => getComputedStyle(c).textDecorationColor.match(/\\d+/g).slice(0, 3)")]
    lb, cb = hit.bounding_box(), col.bounding_box()
    img = np.asarray(Image.open(io.BytesIO(hit.screenshot())).convert("RGB")).astype(int)
    top = round(cb["y"] + cb["height"] - lb["y"]) + 2
    band = img[top:top + 10]
    near = (np.abs(band - np.array(rgb)).max(axis=2) < 40).any(axis=0)
    return cb["x"], [round(lb["x"]) + int(x) for x in np.nonzero(near)[0]]


@pytest.mark.browser
def test_lab_source_pane_shows_the_cell_as_typed(tmp_path, playwright_browser):
    from test_browser import new_page, open_notebook, run_all

    write_notebook(tmp_path / "cell.ipynb", NOTEBOOK)
    with jupyter_server("lab", tmp_path) as server:
        page, errors = new_page(playwright_browser)
        try:
            open_notebook(page, server, "/lab/tree/cell.ipynb")
            run_all(page)
            page.wait_for_selector(".pv-root .pv-line-hit", timeout=60_000)
            s = page.evaluate(PANE_JS)
            typed = _cell_lines(s["source"])
            n = s["count"]
            # every row of the pane is the editor's line of that number, line 1 the magic
            assert s["rows"] and s["rows"][0] == ["1", NOTEBOOK[1].split("\n")[0]], s
            for num, text in s["rows"]:
                assert typed[int(num)] == text, (num, text, s)
            assert s["hit"] == str(HIT) and s["branch"] == str(BRANCH), s
            assert typed[HIT].lstrip().startswith("pl.run_scoped("), s
            assert f"In [{n}], line {HIT}" in s["title"], s
            assert f"In [{n}], line {HIT}" in s["card"], s
            left, at = _caret(page)
            assert at and left - 2 <= min(at) <= left + 10, (left, at)
            page.evaluate("() => window.jupyterapp.commands.execute("
                          "'notebook:toggle-all-cell-line-numbers')")
            page.locator(".jp-Cell").nth(1).locator(".jp-InputArea").screenshot(
                path=artifact("magic-line-one-cell.png"))
            page.locator(".pv-root").screenshot(path=artifact("magic-line-one-widget.png"))
        except Exception:
            page.screenshot(path=artifact("magic-line-one-failure.png"))
            print(server.log_tail())
            raise
        finally:
            page.close()
    assert not errors
