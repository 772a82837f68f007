"""The PNG view: heatmap values, finding markers, caption, layouts from 1 to 1024 blocks."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from matplotlib.figure import Figure

import pallas_viz as pv
from pallas_viz import examples as ex
from pallas_viz.model import Finding, KernelInfo
from pallas_viz.render.png import kernel_grid, render_png
from pallas_viz.store import COLUMNS, OP_CODE, RESOURCE_CODE, SPACE_CODE, EventTable


def _artist(fig, gid):
    return [a for ax in fig.axes for a in ax.get_children() if a.get_gid() == gid]


def _cells(fig, gid) -> set[tuple[int, int]]:
    (coll,) = _artist(fig, gid)
    return {(int(x), int(y)) for x, y in coll.get_offsets()}


def _texts(fig) -> str:
    return "\n".join(t.get_text() for t in fig.texts)


def test_plot_marks_error_cells_and_captions_first_error(example_traces):
    tr = example_traces["collective_in_branch"]
    fig = tr.plot()
    assert isinstance(fig, Figure)
    (im,) = _artist(fig, "heatmap")
    # Rows are threads, columns the 2 blocks; thread 0 creates and frees the SMEM buffer.
    np.testing.assert_array_equal(im.get_array(), [[2, 2], [0, 0]])
    assert _cells(fig, "error-cells") == {(0, 0), (1, 0), (0, 1), (1, 1)}
    assert not _artist(fig, "warning-cells")  # the leak's cells are error cells too
    first = tr.errors[0]
    text = _texts(fig)
    assert f"kernels.py:{first.source.line}" in text
    assert first.source.code.strip() in text
    assert first.kind in text


def test_warning_cells_and_bytes(example_traces):
    tr = example_traces["collective_in_branch"]
    leak = [f for f in tr.all_findings() if f.kind == "leak"]
    only_leak = pv.Trace(tr.events, tr.kernels, leak)
    fig = only_leak.plot(value="bytes")
    assert _cells(fig, "warning-cells") == {(0, 0), (1, 0)}  # thread 0 of blocks 0 and 1
    assert not _artist(fig, "error-cells")
    (im,) = _artist(fig, "heatmap")
    np.testing.assert_array_equal(im.get_array(), [[8 * 128 * 4] * 2, [0, 0]])
    assert "warning[leak]" in _texts(fig)


def test_multi_kernel_trace_picks_kernel():
    clean, a = ex.clean_collective()
    buggy, b = ex.collective_in_branch_nonzero(grid=(1,))
    with pv.trace() as tr:
        clean(*a)
        buggy(*b)
    assert len(tr.kernels) == 2
    fig = tr.plot()  # the kernel with the first finding
    assert "kernel 1" in _texts(fig) and "of 2" in _texts(fig)
    assert (0, 1) in _cells(fig, "error-cells")  # block 0, thread 1
    fig0 = tr.plot(kernel=0)
    assert not _artist(fig0, "error-cells")
    (im,) = _artist(fig0, "heatmap")
    assert im.get_array().shape == (2, 2) and (im.get_array() > 0).all()
    with pytest.raises(ValueError):
        tr.plot(kernel=2)


def _synthetic_trace(n_blocks: int) -> pv.Trace:
    """Thread 0 of every block creates a buffer; a finding flags thread 1 everywhere."""
    n = n_blocks
    cols = {k: np.zeros(n, dtype=v) for k, v in COLUMNS.items()}
    cols["op"][:] = OP_CODE["create"]
    cols["resource"][:] = RESOURCE_CODE["buffer"]
    cols["memory_space"][:] = SPACE_CODE["SMEM"]
    cols["block"][:] = np.arange(n)
    cols["warp"][:] = -1
    cols["shape"][:] = -1
    cols["dtype"][:] = -1
    cols["source"][:] = -1
    table = EventTable(cols, [(i,) for i in range(n)], [], [], [])
    finding = Finding("partial_collective", "error", "thread 1 never requests it",
                      [(0, (i,), 1) for i in range(n)], list(range(n)), kernel=0)
    return pv.Trace(table, [KernelInfo(0, "k", None, 1, 2, 1)], [finding])


@pytest.mark.parametrize("n", [1, 1024])
def test_layout_scales_from_one_to_1024_blocks(n):
    tr = _synthetic_trace(n)
    grid = kernel_grid(tr, 0)
    fig = tr.plot()
    w, h = fig.get_size_inches()
    assert w == 8 and h < 10
    (im,) = _artist(fig, "heatmap")
    img = im.get_array()
    assert img.shape == (grid.rows, grid.width)
    assert img.shape[1] <= 128 and img.shape[0] <= 64  # wrapped into bands, not a 1024 strip
    b = n - 1  # the last block: thread 0 has its event, thread 1 is marked
    x, y = grid.position(b, 0)
    assert img[y, x] == 1
    assert grid.position(b, 1) in _cells(fig, "error-cells")
    assert len(_cells(fig, "error-cells")) == n


def test_png_and_mimebundle(example_traces):
    tr = example_traces["clean_collective"]
    png = render_png(tr)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    # A notebook shows `tr.plot()` as a PNG even when pyplot was never imported.
    assert tr.plot()._repr_png_().startswith(b"\x89PNG")
    bundle = tr._repr_mimebundle_()
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    assert base64.b64decode(data["image/png"]).startswith(b"\x89PNG")
    assert data["text/plain"] == tr.summary()
    assert "text/html" not in data


def test_rejected_kernel_plots_its_caption(example_traces):
    tr = example_traces["missing_collective_axes"]
    text = _texts(tr.plot())
    assert "rejected" in text and "trace_error" in text
    assert tr.failure.source.code.strip() in text
    assert render_png(tr).startswith(b"\x89PNG")
