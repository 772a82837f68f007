"""The PNG view: blocks as rows, threads as columns, root causes marked and listed, from 1 to
4,096 blocks (real kernels, and synthetic traces for the big grids)."""

from __future__ import annotations

import base64
import dataclasses
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from matplotlib.figure import Figure

import pallas_viz as pv
from benchmarks.synthetic import _thread_seq, synthetic_table
from pallas_viz import examples as ex
from pallas_viz.analysis import analyse
from pallas_viz.examples import shapes
from pallas_viz.model import Finding, KernelInfo, SourceLocation
from pallas_viz.render import png
from pallas_viz.render.png import kernel_cells, layout_rows, render_png
from pallas_viz.store import EventTable

# --------------------------------------------------------------------------- helpers


def _artists(fig, gid):
    return [a for ax in fig.axes for a in ax.get_children() if a.get_gid() == gid]


def _points(fig, gid) -> set[tuple[int, int]]:
    """(thread column, displayed row) of every marker drawn with `gid`."""
    return {(int(round(x)), int(round(y)))
            for coll in _artists(fig, gid) for x, y in coll.get_offsets()}


def _texts(fig) -> list:
    """Every text artist of the figure: figure texts, tick labels, axis labels, notes."""
    return [t for t in fig.findobj(lambda a: hasattr(a, "get_text")) if t.get_text()]


def _all_text(fig) -> str:
    return "\n".join(t.get_text() for t in _texts(fig))


def _gid_text(fig, gid) -> str:
    return "\n".join(t.get_text() for t in fig.texts if t.get_gid() == gid)


def _grid_ax(fig):
    (im,) = _artists(fig, "heatmap")
    return im.axes, im.get_array()


def _row_labels(fig) -> list[str]:
    ax, _ = _grid_ax(fig)
    return [t.get_text() for t in ax.get_yticklabels()]


def _with_missing_request(table: EventTable, blocks: list[int], source: int = 1,
                          thread: int = 1) -> EventTable:
    """`table` without `thread`'s requests and releases at `source` in those blocks: a
    collective allocation that thread skipped there (a real partial collective)."""
    c = table.columns
    drop = np.isin(c["block"], blocks) & (c["thread"] == thread) & (c["source"] == source)
    cols = {k: v[~drop] for k, v in c.items()}
    cols["thread_seq"] = _thread_seq(cols)
    return EventTable(cols, table.blocks, table.shapes, table.dtypes, table.sources)


def _synthetic(n_blocks: int, bad: list[tuple] | None = None, bug=None,
               devices: int = 1) -> pv.Trace:
    """`n_blocks` blocks of 2 threads (grid coordinates (i, j), j in 0..1), analysed; with
    `bad`, thread 1 skips the collective SMEM allocation in those blocks. `devices=2` puts
    the second half of the blocks on device 1."""
    per_block = 14 if bug == "partial" else 12
    t = synthetic_table(per_block * n_blocks, kernels=((2, 1, 1.0, bug),))
    assert len(t.blocks) == n_blocks
    if devices == 2:
        c = dict(t.columns)
        on_1 = np.array([b[0] >= n_blocks // 4 for b in t.blocks])
        c["device"] = np.where((c["block"] >= 0) & on_1[np.maximum(c["block"], 0)], 1,
                               0).astype(c["device"].dtype)
        t = EventTable(c, t.blocks, t.shapes, t.dtypes, t.sources)
    if bad:
        t = _with_missing_request(t, [t.blocks.index(b) for b in bad])
    kernels = [KernelInfo(0, "synthetic", None, devices, 2, 2, "wg")]
    return pv.Trace(t, kernels, analyse(t, kernels))


# --------------------------------------------------------------------------- one kernel


def test_root_cells_missing_threads_and_the_list(example_traces):
    tr = example_traces["collective_in_branch"]
    root = tr.findings[0]
    fig = tr.plot()
    assert isinstance(fig, Figure)
    ax, img = _grid_ax(fig)
    # Blocks are rows, threads columns, as in the widget; thread 0 creates and frees.
    np.testing.assert_array_equal(img, [[2, 0], [2, 0]])
    assert _row_labels(fig) == ["(0)", "(1)"]
    assert ax.get_xlabel() == "t  (thread axis)"
    assert _points(fig, "root-error-cells") == {(0, 0), (0, 1)}
    # thread 1 never made the request: hollow marker on a hatched cell
    assert _points(fig, "missing-cells") == {(1, 0), (1, 1)}
    (hatch,) = _artists(fig, "missing-hatch")
    assert hatch.get_hatch() and len(hatch.get_paths()) == 2
    assert not _artists(fig, "consequence-cells")  # the leak and divergence are root cells
    (outline,) = _artists(fig, "culprit-row")
    assert outline.get_y() == -0.5  # block (0), where the root shows first
    assert "\u25c0 1" in [t.get_text() for t in _artists(fig, "culprit-label")]

    assert _gid_text(fig, "verdict") == "\u2716 1 error"
    head = _gid_text(fig, "root-1")
    assert f"error[partial_collective] kernels.py:{root.source.line}:" in head
    assert root.source.code.strip() in _gid_text(fig, "root-1-code")
    assert _gid_text(fig, "root-1-branch").strip() == (
        f"threads part here: kernels.py:{root.branch.line}   {root.branch.code.strip()}")
    assert "never made the request: blocks (0..1), t 1" in _gid_text(fig, "root-1-cells")
    assert _gid_text(fig, "root-1-consequences").strip() == "+2 consequences: divergence, leak"
    assert "/work" not in _all_text(fig)  # file names, not paths


def test_warning_root_and_bytes(example_traces):
    tr = example_traces["collective_in_branch"]
    leak = [f for f in tr.all_findings() if f.kind == "leak"]
    only_leak = pv.Trace(tr.events, tr.kernels, leak)
    fig = only_leak.plot(value="bytes")
    assert _points(fig, "root-warning-cells") == {(0, 0), (0, 1)}  # thread 0, both blocks
    assert not _artists(fig, "root-error-cells")
    _, img = _grid_ax(fig)
    np.testing.assert_array_equal(img, [[8 * 128 * 4, 0]] * 2)
    assert "warning[leak]" in _gid_text(fig, "root-1")
    assert _gid_text(fig, "verdict") == "\u25b2 1 warning"
    assert "bytes requested" in _all_text(fig)


def test_clean_kernel(example_traces):
    fig = example_traces["clean_collective"].plot()
    assert not any(_artists(fig, g) for g in (
        "root-error-cells", "root-warning-cells", "missing-cells", "consequence-cells",
        "culprit-row"))
    assert _gid_text(fig, "verdict") == "\u2714 clean"
    assert _gid_text(fig, "no-findings") == "\u2714 clean: no findings"


def test_multi_kernel_trace_picks_kernel_and_lists_every_root():
    clean, a = ex.clean_collective()
    buggy, b = ex.collective_in_branch_nonzero(grid=(1,))
    with pv.trace() as tr:
        clean(*a)
        buggy(*b)
    assert len(tr.kernels) == 2
    fig = tr.plot()  # the kernel of the first root
    assert "kernel 1" in _gid_text(fig, "title") and "of 2" in _gid_text(fig, "title")
    assert _points(fig, "root-error-cells") == {(1, 0)}  # block 0, thread 1 requested
    assert _points(fig, "missing-cells") == {(0, 0)}  # thread 0 never did
    fig0 = tr.plot(kernel=0)
    assert not _artists(fig0, "root-error-cells") and not _artists(fig0, "culprit-row")
    _, img = _grid_ax(fig0)
    assert img.shape == (2, 2) and (img > 0).all()
    # the other kernel's root is still listed, with how to see it
    assert "(kernel 1: plot(kernel=1))" in _gid_text(fig0, "root-1")
    assert _gid_text(fig0, "verdict") == "\u2714 clean"
    with pytest.raises(ValueError):
        tr.plot(kernel=2)


def test_no_grid_block_label():
    fn, args = shapes.launch(shapes.BUGGY["collective_in_branch"], "no_grid")
    tr, _ = shapes.run_traced(fn, args)
    fig = tr.plot()
    assert _row_labels(fig) == ["(no grid)"]
    assert _points(fig, "root-error-cells") == {(1, 0)}  # the last thread alone
    assert _points(fig, "missing-cells") == {(0, 0)}
    branch = shapes.BRANCH_LINE["collective_in_branch"]
    assert f"threads part here: shapes.py:{branch}" in _gid_text(fig, "root-1-branch")


# --------------------------------------------------------------------------- 64 blocks


GRID_64, BAD_BLOCK, BAD_THREAD = 64, 41, 1


def _bug_in_one_block(x_ref, o_ref):
    g = jax.lax.axis_index("g")
    t = jax.lax.axis_index("t")

    @pl.when((g == BAD_BLOCK) & (t == BAD_THREAD))  # BRANCH
    def _():
        def scoped(buf):
            buf[...] = x_ref[...]

        pl.run_scoped(scoped, plgpu.SMEM((8, 128), jnp.float32), collective_axes="t")  # ALLOC

    def every_block(buf):
        o_ref[...] = buf[...]

    pl.run_scoped(every_block, plgpu.SMEM((8, 128), jnp.float32), collective_axes="t")


def _line_of(fn, marker: str) -> int:
    src, first = inspect.getsourcelines(fn)
    return next(first + i for i, s in enumerate(src) if s.rstrip().endswith(marker))


@pytest.fixture(scope="module")
def trace_64():
    """64 blocks x 2 threads; only thread 1 of block 41 makes a collective allocation."""
    fn = plgpu.kernel(_bug_in_one_block, out_type=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                      grid=(GRID_64,), grid_names=("g",), num_threads=2, thread_name="t",
                      interpret=plgpu.InterpretGPUParams())
    with pv.trace(raise_errors=False) as tr:
        fn(jnp.ones((8, 128), jnp.float32))
    return tr


def test_64_blocks_bug_in_block_41(trace_64):
    tr = trace_64
    (root,) = tr.findings
    assert root.kind == "partial_collective"
    fig = tr.plot()
    _, img = _grid_ax(fig)
    assert img.shape == (GRID_64, 2)  # every block has its row
    assert _row_labels(fig) == [f"({i})" for i in range(GRID_64)]
    # one root: thread 1 of block 41 made the request, thread 0 never did
    assert _points(fig, "root-error-cells") == {(BAD_THREAD, BAD_BLOCK)}
    assert _points(fig, "missing-cells") == {(1 - BAD_THREAD, BAD_BLOCK)}
    (outline,) = _artists(fig, "culprit-row")
    assert outline.get_y() == BAD_BLOCK - 0.5
    bold = [t for t in fig.axes[0].get_yticklabels() if t.get_weight() == "bold"]
    assert [t.get_text() for t in bold] == [f"({BAD_BLOCK})"]
    # its consequences (the aliasing it causes) are lighter and smaller, in their own rows
    cons = _points(fig, "consequence-cells")
    assert cons and all(y != BAD_BLOCK for _, y in cons)
    (root_marks,) = _artists(fig, "root-error-cells")
    (cons_marks,) = _artists(fig, "consequence-cells")
    assert cons_marks.get_sizes()[0] < root_marks.get_sizes()[0]
    # the rows of the 62 other blocks are unmarked
    marked_rows = {y for g in ("root-error-cells", "missing-cells", "consequence-cells")
                   for _, y in _points(fig, g)}
    assert len(marked_rows) <= 2

    here = "test_plot.py"
    assert f"{here}:{_line_of(_bug_in_one_block, '# ALLOC')}" in _gid_text(fig, "root-1")
    assert _gid_text(fig, "root-1-branch").strip().startswith(
        f"threads part here: {here}:{_line_of(_bug_in_one_block, '# BRANCH')}")
    cons_line = _gid_text(fig, "root-1-consequences").strip()
    assert cons_line.startswith(f"+{len(root.consequences)} consequences: ")
    assert "leak" in cons_line and "divergence" in cons_line
    w, h = fig.get_size_inches()
    assert w == 8 and h < 13


# --------------------------------------------------------------------------- 4,096 blocks


def test_4096_blocks_one_culprit_folds_clean_runs():
    tr = _synthetic(4096, bad=[(1172, 1)])
    fig = tr.plot()
    _, img = _grid_ax(fig)
    assert img.shape == (3, 2)  # clean run, the culprit's row, clean run
    assert _row_labels(fig) == ["(0, 0)–(1172, 0)", "(1172, 1)", "(1173, 0)–(2047, 1)"]
    notes = [t.get_text() for t in _artists(fig, "fold-note")]
    assert notes == ["2345 clean blocks", "1750 clean blocks"]
    assert _points(fig, "root-error-cells") == {(0, 1)}
    assert _points(fig, "missing-cells") == {(1, 1)}
    assert "block (1172, 1)" in _gid_text(fig, "root-1-cells")
    assert "runs of blocks marked alike folded" in _gid_text(fig, "subtitle")
    assert "(mean per block)" in _all_text(fig)


def test_4096_blocks_marked_alike_keep_the_culprit_row():
    tr = _synthetic(4096, bug="partial")  # thread 0 alone, in every block
    fig = tr.plot()
    assert _row_labels(fig) == ["(0, 0)", "(0, 1)–(2047, 1)"]
    assert [t.get_text() for t in _artists(fig, "fold-note")] == ["4095 blocks alike"]
    assert _points(fig, "root-error-cells") == {(0, 0), (0, 1)}
    (outline,) = _artists(fig, "culprit-row")
    assert outline.get_y() == -0.5


def test_4096_blocks_scattered_become_a_heat_strip():
    bad = [(i // 2, i % 2) for i in range(2345, 4096, 10)]
    tr = _synthetic(4096, bad=bad)
    fig = tr.plot()
    kc = kernel_cells(tr, 0)
    mode, bands = layout_rows(kc)
    assert mode == "strip" and len(bands) <= png.STRIP_ROWS
    _, img = _grid_ax(fig)
    assert img.shape == (len(bands), 2)
    # the culprit's row is in the strip, marked and labelled with its own block
    culprit = kc.culprits[1]
    assert kc.rows[culprit] == (0, (1172, 1))
    (band,) = [i for i, b in enumerate(bands) if b.start <= culprit < b.stop]
    assert _points(fig, "root-error-cells") == {(0, band)}
    assert _points(fig, "missing-cells") == {(1, band)}
    (label,) = _artists(fig, "culprit-label")
    assert label.get_text() == "\u25c0 1  (1172, 1)"
    (strip,) = _artists(fig, "status-strip")
    assert len(strip.get_paths()) > 100  # the marked cells of later runs, as bars
    assert "heat strip" in _gid_text(fig, "subtitle")
    w, h = fig.get_size_inches()
    assert w == 8 and h < 12


def test_layout_never_drops_a_culprit_row():
    tr = _synthetic(4096, bad=[(1172, 1)])
    kc = kernel_cells(tr, 0)
    for full, folded in ((80, 60), (80, 2)):  # folded, then forced into the strip
        mode, bands = layout_rows(kc, full=full, folded=folded)
        assert [b.start for b in bands] == sorted(b.start for b in bands)
        assert bands[0].start == 0 and bands[-1].stop == len(kc.rows)
        assert all(a.stop == b.start for a, b in zip(bands, bands[1:]))
        hit = [b for b in bands if b.start <= kc.culprits[1] < b.stop]
        assert len(hit) == 1
        if mode == "folded":
            assert hit[0].size == 1


def test_two_devices_are_row_groups():
    tr = _synthetic(16, bad=[(6, 0)], devices=2)
    fig = tr.plot()
    labels = _row_labels(fig)
    assert labels[0] == "d0 (0, 0)" and labels[-1] == "d1 (7, 1)"
    assert "d1 (6, 0)" in labels
    (sep,) = _artists(fig, "device-separator")
    assert sep.get_ydata()[0] == labels.index("d1 (4, 0)") - 0.5
    assert _points(fig, "root-error-cells") == {(0, labels.index("d1 (6, 0)"))}
    assert _grid_ax(fig)[0].get_ylabel() == "device, block"
    assert "(device, block) pairs" in _gid_text(fig, "subtitle")


# --------------------------------------------------------------------------- text


def _hostile_trace(file: str = "/tmp/$x$/k.py") -> pv.Trace:
    """A one-block trace whose kernel text holds mathtext, escapes and a lone surrogate."""
    t = synthetic_table(12, kernels=((2, 1, 1.0, None),))
    nasty = "$x$ costs $5 \x1b]0;title\x07 \x1b[2J \u202e \ud800"
    src = SourceLocation(file, 3, 4, "k$f$", "pl.run_scoped(f, $x$)\x1b[31m",
                         branch=SourceLocation(file, 2, 4, None, "@pl.when($t$ == 0)\x1b[0m"))
    root = Finding("partial_collective", "error", nasty, [(0, (0, 0), 0), (0, (0, 0), 1)], [],
                   source=src, branch=src.branch, missing=[((0, (0, 0), 1), None)],
                   kernel=0, consequences=[Finding("leak", "warning", nasty,
                                                   [(0, (0, 0), 0)], [], source=src,
                                                   kernel=0)])
    k = KernelInfo(0, "$\\alpha$ \x1b[1m", SourceLocation(file, 9), 1, 2, 2, "$w$\x1b")
    return pv.Trace(t, [k], [root])


def test_kernel_text_is_drawn_literally():
    tr = _hostile_trace()
    fig = tr.plot()
    assert render_png(tr).startswith(b"\x89PNG")  # mathtext would raise on "$5 ..."
    texts = _texts(fig)
    for t in texts:
        if "$" in t.get_text():  # kernel text: never mathtext
            assert not t.get_parse_math(), t.get_text()
        assert not any(ch in t.get_text() for ch in "\x1b\x07\u202e\ud800"), t.get_text()
    everything = _all_text(fig)
    assert "$x$ costs $5 \\x1b]0;title\\x07 \\x1b[2J \\u202e \\ud800" in everything
    assert "pl.run_scoped(f, $x$)\\x1b[31m" in _gid_text(fig, "root-1-code")
    assert "@pl.when($t$ == 0)\\x1b[0m" in _gid_text(fig, "root-1-branch")
    assert "$\\alpha$ \\x1b[1m" in _gid_text(fig, "title")
    assert _grid_ax(fig)[0].get_xlabel() == "$w$\\x1b  (thread axis)"
    assert "k.py:3" in _gid_text(fig, "root-1")


@pytest.mark.parametrize("kind", ["grid", "timeline", "memory"])
def test_every_plot_draws_trace_text_literally_on_one_line(kind, tmp_path):
    # (review S: the timeline and memory plots escaped nothing: a thread axis of
    # "$\\undefinedmacro$" raised at draw time, U+202E reversed the title, ESC and BEL made
    # the SVG invalid XML; and a newline in the thread axis drew a fake verdict line in the
    # grid and timeline images)
    import xml.dom.minidom

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    tr = _hostile_trace()
    tr.kernels[0] = dataclasses.replace(tr.kernels[0], name="k\u202eeman \x1b[2J\x07",
                                        thread_axis="$\\undefinedmacro$\n\nVERDICT: clean")
    fig = tr.plot(kind=kind)
    FigureCanvasAgg(fig).draw()  # (mathtext would raise here)
    for t in fig.findobj(Text):
        text = t.get_text()
        assert not t.get_parse_math(), text
        assert not any(ch in text for ch in "\x1b\x07\u202e\ud800"), text
        assert "\nVERDICT" not in text, text
    fig.savefig(tmp_path / "p.svg")
    xml.dom.minidom.parse(str(tmp_path / "p.svg"))  # well-formed


@pytest.mark.parametrize("file, shown", [
    ("<ipython-input-7-0123abcd>", "In [7], line 3"),
    ("/tmp/ipykernel_4242/3187.py", "notebook cell, line 3"),
])
def test_notebook_cells_are_named_not_pathed(file, shown):
    fig = _hostile_trace(file).plot()
    assert f" {shown}:" in _gid_text(fig, "root-1")
    assert "ipykernel_" not in _all_text(fig) and "ipython-input" not in _all_text(fig)


def test_many_roots_are_listed_then_counted(example_traces):
    tr = example_traces["collective_in_branch"]
    root = tr.findings[0]
    # (twenty different roots: identical ones would be one, as a kernel run in a loop is)
    many = pv.Trace(tr.events, tr.kernels,
                    [dataclasses.replace(root, message=f"{root.message} ({i})") for i in range(20)])
    fig = many.plot()
    assert _gid_text(fig, "root-14") and not _gid_text(fig, "root-15")
    assert _gid_text(fig, "more-roots") == "+ 6 more root causes: print(tr.summary())"
    assert _gid_text(fig, "root-5-branch") and not _gid_text(fig, "root-6-branch")
    assert fig.get_size_inches()[1] < 14


# --------------------------------------------------------------------------- outputs


def test_png_and_mimebundle(example_traces):
    tr = example_traces["clean_collective"]
    assert render_png(tr).startswith(b"\x89PNG\r\n\x1a\n")
    # A notebook shows `tr.plot()` as a PNG even when pyplot was never imported.
    assert tr.plot()._repr_png_().startswith(b"\x89PNG")
    bundle = tr._repr_mimebundle_()
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    assert base64.b64decode(data["image/png"]).startswith(b"\x89PNG")
    assert data["text/plain"] == tr.summary()
    # a static, script-free snapshot for viewers without the live widget
    assert "<script" not in data["text/html"].lower() and "Static view" in data["text/html"]


def test_rejected_kernel_plots_its_root(example_traces):
    tr = example_traces["missing_collective_axes"]
    fig = tr.plot()
    assert "rejected" in _gid_text(fig, "title")
    assert "trace_error" in _gid_text(fig, "root-1")
    assert tr.failure.source.code.strip() in _gid_text(fig, "root-1-code")
    assert render_png(tr).startswith(b"\x89PNG")


def test_value_must_be_known(example_traces):
    with pytest.raises(ValueError):
        example_traces["clean_collective"].plot(value="nbytes")
