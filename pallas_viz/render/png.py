"""The static view: a block x thread heatmap of one kernel, findings marked, as a Figure or PNG.

Built on `matplotlib.figure.Figure` directly (no pyplot), so no global state is touched.
"""

from __future__ import annotations

import dataclasses
import io
import math
import os
import re
import textwrap

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from ..analysis.frame import in_block_mask, request_mask
from ..model import Finding, SourceLocation

FIG_W = 8.0  # inches
ERROR_COLOR = "#d62728"
WARNING_COLOR = "#f29e0b"
EMPTY_COLOR = "#ececec"
_MONO = "DejaVu Sans Mono"
VALUES = ("events", "bytes")


class TraceFigure(Figure):
    """A `Figure` that shows itself as a PNG in IPython, with or without pyplot.

    `savefig(path)` writes atomically (`pallas_viz.fileio`): a failed write leaves the old
    file untouched and raises `OutputError`, as does an image format matplotlib cannot write.
    """

    def _repr_png_(self) -> bytes:
        return figure_png(self)

    def savefig(self, fname, *args, **kwargs):
        if not isinstance(fname, (str, os.PathLike)):
            return super().savefig(fname, *args, **kwargs)
        from ..fileio import atomic_output

        path = os.fspath(fname)
        fmt = kwargs.pop("format", None)
        if fmt is None and not os.path.splitext(path)[1][1:]:
            path = path.rstrip(".") + "." + image_format(path)  # as matplotlib does
        fmt = image_format(path, fmt)
        with atomic_output(path, "wb") as f:
            return super().savefig(f, *args, format=fmt, **kwargs)


def image_format(path: str | os.PathLike, fmt: str | None = None) -> str:
    """The image format for `path` (its extension; PNG if none), or `OutputError` if
    matplotlib cannot write it."""
    from matplotlib import rcParams
    from matplotlib.backend_bases import FigureCanvasBase

    from ..errors import OutputError

    if fmt is None:
        fmt = os.path.splitext(os.fspath(path))[1][1:] or rcParams["savefig.format"]
    fmt = str(fmt).lower()
    supported = FigureCanvasBase.get_supported_filetypes()
    if fmt not in supported:
        raise OutputError(
            f"cannot write {os.fspath(path)}: unknown image format {fmt!r} (use one of "
            f"{', '.join('.' + k for k in sorted(supported))})")
    return fmt


def figure_png(fig: Figure, dpi: int = 100) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, facecolor="white")
    return buf.getvalue()


@dataclasses.dataclass
class Grid:
    """Per-(block, thread) values of one kernel, laid out in bands of `width` blocks."""

    columns: list[tuple[int, tuple[int, ...]]]  # (device, block) per flat block position
    threads: int
    width: int  # blocks per band
    values: np.ndarray  # shape (len(columns), threads)

    @property
    def bands(self) -> int:
        return max(1, math.ceil(len(self.columns) / self.width))

    @property
    def rows(self) -> int:
        return self.bands * self.threads

    def position(self, column: int, thread: int) -> tuple[int, int]:
        """(x, y) of a cell in the image."""
        return column % self.width, (column // self.width) * self.threads + thread

    def image(self) -> np.ndarray:
        """Rows x width values; NaN pads the last band."""
        img = np.full((self.rows, self.width), np.nan)
        for j in range(len(self.columns)):
            for t in range(self.threads):
                x, y = self.position(j, t)
                img[y, x] = self.values[j, t]
        return img


def kernel_grid(trace, kernel: int, value: str = "events") -> Grid:
    """Event counts (or bytes requested) per (device, block) x thread of one kernel."""
    if value not in VALUES:
        raise ValueError(f"value must be one of {VALUES}, not {value!r}")
    table = trace.events
    c = table.columns
    m = (c["kernel"] == kernel) & in_block_mask(table)
    if value == "bytes":
        m &= request_mask(table)
    dev, blk, thr = c["device"][m], c["block"][m], c["thread"][m]
    keys = set(zip(dev.tolist(), (table.blocks[b] for b in blk.tolist())))
    for f in trace.findings:
        if f.kernel == kernel:
            keys |= {(d, tuple(b)) for d, b, _ in f.cells if b is not None}
    columns = sorted(keys)
    info = trace.kernels[kernel] if 0 <= kernel < len(trace.kernels) else None
    threads = max([info.threads_per_block if info else 1, *(t + 1 for t in thr.tolist())],
                  default=1)
    for f in trace.findings:
        if f.kernel == kernel:
            threads = max([threads, *(t + 1 for _, _, t in f.cells)])
    col_of = {k: i for i, k in enumerate(columns)}
    block_col = {}
    for d, b in columns:
        block_col.setdefault(d, {})[b] = col_of[(d, b)]
    values = np.zeros((len(columns), threads))
    if m.any():
        cols = np.array([col_of[(d, table.blocks[b])] for d, b in zip(dev.tolist(), blk.tolist())])
        weights = c["nbytes"][m].astype(float) if value == "bytes" else None
        flat = np.bincount(cols * threads + thr, weights=weights,
                           minlength=len(columns) * threads)
        values = flat.reshape(len(columns), threads)
    return Grid(columns, threads, _band_width(columns, threads), values)


def _band_width(columns: list, threads: int) -> int:
    """Blocks per band: one band up to 32 blocks, a 2-D grid's rows, else a squarish image."""
    n = len(columns)
    if n <= 32:
        return max(1, n)
    blocks = {b for _, b in columns}
    if all(len(b) == 2 for b in blocks):
        last = len({b[1] for b in blocks})
        if 4 <= last <= 64 and len({b[0] for b in blocks}) * last == len(blocks):
            return last
    w = math.ceil(math.sqrt(n * threads * 2) / 8) * 8
    return min(n, max(32, w))


def _block_label(d: int, b: tuple[int, ...], multi_device: bool) -> str:
    s = str(b[0]) if len(b) == 1 else "(" + ",".join(map(str, b)) + ")"
    return f"d{d}:{s}" if multi_device else s


def short_file(loc: SourceLocation) -> str:
    """`file:line` with notebook cells as `Cell In[N]` and long paths cut from the left."""
    m = re.match(r"<ipython-input-(\d+)-[0-9a-f]+>", loc.file)
    if m:
        return f"Cell In[{m.group(1)}], line {loc.line}"
    path = loc.file
    if len(path) > 60:
        path = "…" + os.sep + os.sep.join(path.split(os.sep)[-3:])
    return f"{path}:{loc.line}"


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def default_kernel(trace) -> int | None:
    """The kernel of the first finding that has one, else the first kernel."""
    for f in trace.findings:
        if f.kernel is not None and 0 <= f.kernel < len(trace.kernels):
            return f.kernel
    return 0 if trace.kernels else None


def _caption(trace, kernel: int | None) -> tuple[list[tuple[str, dict]], str]:
    """Lines (text, style) under the plot: the first error (or warning), its line and code."""
    first: Finding | None = next(iter(trace.errors), None) or next(iter(trace.findings), None)
    if first is None:
        return [("clean: no findings", {"color": "#2a7d2a", "weight": "bold"})], "clean"
    color = ERROR_COLOR if first.severity == "error" else WARNING_COLOR
    where = ""
    if first.kernel is not None and first.kernel != kernel:
        where = f" (kernel {first.kernel})"
    head = f"{first.severity}[{first.kind}]{where}: "
    wrapped = textwrap.wrap(head + first.message, 105)
    if len(wrapped) > 3:
        wrapped = wrapped[:3]
        wrapped[-1] = _clip(wrapped[-1] + " …", 105)
    lines = [(wrapped[0], {"color": color, "weight": "bold"})]
    lines += [(w, {"color": color}) for w in wrapped[1:]]
    if first.source is not None:
        func = f" in {first.source.function}" if first.source.function else ""
        lines.append((_clip(f"--> {short_file(first.source)}{func}", 110), {"family": _MONO}))
        if first.source.code:
            code = f"{first.source.line} | {first.source.code.strip()}"
            lines.append((_clip(code, 100), {"family": _MONO, "weight": "bold"}))
    else:
        lines.append(("(no source line: JAX gave none for this request)", {"color": "#555"}))
    more = len(trace.findings) - 1
    if more > 0:
        lines.append((f"+ {more} more finding(s): see tr.summary()", {"color": "#555"}))
    return lines, first.severity


def plot(trace, kernel: int | None = None, value: str = "events") -> Figure:
    """Heatmap of `kernel`'s blocks x threads (event counts or bytes), findings marked."""
    if kernel is None:
        kernel = default_kernel(trace)
    elif not 0 <= kernel < len(trace.kernels):
        raise ValueError(f"kernel must be in 0..{len(trace.kernels) - 1}, not {kernel}")
    caption, _ = _caption(trace, kernel)
    cap_h = 0.22 * len(caption) + 0.15
    if kernel is None:
        return _message_figure(trace, caption, cap_h)
    grid = kernel_grid(trace, kernel, value)
    if not grid.columns:
        return _message_figure(trace, caption, cap_h, kernel)

    w, rows = grid.width, grid.rows
    left, right = 1.15, 1.35  # inches: y labels; colorbar and legend
    cell_w = min(0.8, (FIG_W - left - right) / w)
    cell_h = min(0.45, max(0.12, 4.5 / rows))
    hm_w, hm_h = cell_w * w, cell_h * rows
    top, xlab = 0.75, 0.5
    fig_h = top + hm_h + xlab + cap_h
    fig = TraceFigure(figsize=(FIG_W, fig_h), dpi=100, layout=None)
    ax = fig.add_axes((left / FIG_W, (cap_h + xlab) / fig_h, hm_w / FIG_W, hm_h / fig_h))

    # Zero ("no events") falls under vmin and shows grey; padding (NaN) stays blank.
    cmap = ListedColormap(_blues(256), name="pv_blues").with_extremes(
        bad=(1, 1, 1, 0), under=EMPTY_COLOR)
    img = grid.image()
    vmax = max(1.0, float(grid.values.max()))
    im = ax.imshow(img, cmap=cmap, vmin=1e-9, vmax=vmax, aspect="auto", interpolation="nearest",
                   origin="upper", extent=(-0.5, w - 0.5, rows - 0.5, -0.5))
    im.set_gid("heatmap")
    _axes_labels(ax, grid, trace, value)
    _annotate_counts(ax, grid, img, vmax, cell_w, cell_h, value)
    n_err, n_warn = _mark_findings(ax, grid, trace, kernel, cell_w, cell_h)

    cax = fig.add_axes(((left + hm_w + 0.15) / FIG_W, (cap_h + xlab) / fig_h,
                        0.12 / FIG_W, max(hm_h, 0.6) / fig_h))
    cb = fig.colorbar(im, cax=cax)
    cb.set_label("allocation events" if value == "events" else "bytes requested", fontsize=8)
    cb.ax.tick_params(labelsize=7)
    if value == "events":
        cb.ax.yaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    _legend(fig, ax, n_err, n_warn)
    _title(fig, trace, kernel, grid, fig_h)
    _draw_caption(fig, caption, cap_h, fig_h)
    return fig


def _blues(n: int) -> np.ndarray:
    """A light-to-dark blue ramp that stays distinct from the grey "no events" cells."""
    lo, hi = np.array([0.80, 0.88, 0.97]), np.array([0.03, 0.19, 0.42])
    t = np.linspace(0, 1, n)[:, None]
    return np.hstack([lo + (hi - lo) * t, np.ones((n, 1))])


def _axes_labels(ax, grid: Grid, trace, value: str) -> None:
    multi = len({d for d, _ in grid.columns}) > 1
    w, t = grid.width, grid.threads
    ax.set_xlim(-0.5, w - 0.5)
    ax.set_ylim(grid.rows - 0.5, -0.5)
    ax.tick_params(labelsize=8, length=2)
    if grid.bands == 1:
        step = max(1, math.ceil(w / 16))
        xs = list(range(0, w, step))
        ax.set_xticks(xs, [_block_label(*grid.columns[x], multi) for x in xs])
        ax.set_xlabel("block", fontsize=9)
        ax.set_yticks(range(t), [f"thread {i}" for i in range(t)])
        if t > 16:
            ys = list(range(0, t, math.ceil(t / 16)))
            ax.set_yticks(ys, [f"thread {i}" for i in ys])
    else:
        step = max(1, math.ceil(w / 16))
        ax.set_xticks(range(0, w, step), [f"+{x}" for x in range(0, w, step)], fontsize=7)
        ax.set_xlabel(f"block (each band: {w} blocks; column = offset in the band)", fontsize=9)
        bstep = max(1, math.ceil(grid.bands / 24))
        ys, labels = [], []
        for band in range(0, grid.bands, bstep):
            first = grid.columns[band * w]
            last = grid.columns[min(len(grid.columns), (band + 1) * w) - 1]
            ys.append(band * t + (t - 1) / 2)
            labels.append(f"{_block_label(*first, multi)}–{_block_label(*last, multi)}")
        ax.set_yticks(ys, labels, fontsize=7)
        ax.set_ylabel(f"blocks (threads 0..{t - 1} top to bottom)", fontsize=8)
        for band in range(1, grid.bands):
            ax.axhline(band * t - 0.5, color="white", lw=1.2)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _annotate_counts(ax, grid, img, vmax, cell_w, cell_h, value) -> None:
    if cell_w < 0.3 or cell_h < 0.25 or value != "events":
        return
    for j in range(len(grid.columns)):
        for t in range(grid.threads):
            x, y = grid.position(j, t)
            v = grid.values[j, t]
            color = "white" if v > vmax * 0.55 else "#1b2a41"
            ax.text(x + 0.28, y - 0.22, f"{int(v)}", ha="center", va="center", fontsize=7,
                    color=color if v else "#999", parse_math=False)


def _mark_findings(ax, grid, trace, kernel, cell_w, cell_h) -> tuple[int, int]:
    """Scatter markers on finding cells (error X, warning triangle); a box on the first error."""
    col_of = {k: i for i, k in enumerate(grid.columns)}
    err, warn = set(), set()
    for f in trace.findings:
        if f.kernel != kernel:
            continue
        for d, b, t in f.cells:
            j = col_of.get((d, None if b is None else tuple(b)))
            if j is not None:
                (err if f.severity == "error" else warn).add(grid.position(j, t))
    warn -= err
    size = max(3.0, min(160.0, (min(cell_w, cell_h) * 72 * 0.5) ** 2))
    edge = 0.6 if size > 30 else 0.0
    if err:
        xs, ys = zip(*sorted(err))
        ax.scatter(xs, ys, marker="X", s=size, c=ERROR_COLOR, edgecolors="white",
                   linewidths=edge, label="error", gid="error-cells", zorder=3)
    if warn:
        xs, ys = zip(*sorted(warn))
        ax.scatter(xs, ys, marker="^", s=size, c=WARNING_COLOR, edgecolors="#5a3d00",
                   linewidths=edge, label="warning", gid="warning-cells", zorder=3)
    first = next((f for f in trace.errors if f.kernel == kernel), None)
    if first is not None and len(first.cells) <= 32 and min(cell_w, cell_h) >= 0.2:
        for d, b, t in first.cells:
            j = col_of.get((d, None if b is None else tuple(b)))
            if j is None:
                continue
            x, y = grid.position(j, t)
            ax.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, ec=ERROR_COLOR,
                                   lw=1.8, gid="first-error-cell", zorder=2.5,
                                   clip_on=False))
    return len(err), len(warn)


def _legend(fig, ax, n_err, n_warn) -> None:
    from matplotlib.lines import Line2D

    handles = [Rectangle((0, 0), 1, 1, fc=EMPTY_COLOR, ec="#bbb", label="no events")]
    if n_err:
        handles.append(Line2D([], [], ls="", marker="X", color=ERROR_COLOR, mec="white", ms=8,
                              label=f"error ({n_err} cell{'s' if n_err != 1 else ''})"))
    if n_warn:
        handles.append(Line2D([], [], ls="", marker="^", color=WARNING_COLOR, mec="#5a3d00",
                              ms=7, label=f"warning ({n_warn} cell{'s' if n_warn != 1 else ''})"))
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=len(handles),
              fontsize=8, frameon=False, borderaxespad=0.2, handlelength=1.2)


def _title(fig, trace, kernel, grid, fig_h) -> None:
    k = trace.kernels[kernel]
    name = f" {_clip(k.name, 48)}" if k.name else ""
    of = f" (of {len(trace.kernels)}; plot(kernel=i) for others)" if len(trace.kernels) > 1 else ""
    fig.text(0.1 / FIG_W, 1 - 0.12 / fig_h, f"kernel {kernel}{name}{of}", fontsize=10,
             weight="bold", va="top", parse_math=False)
    c = trace.events.columns
    n = int((c["kernel"] == kernel).sum())
    nb = len(grid.columns)
    sub = (f"{nb} block{'s' if nb != 1 else ''} × {grid.threads} thread"
           f"{'s' if grid.threads != 1 else ''}, {n} allocation events")
    if k.launch is not None:
        sub += f"; launched at {short_file(k.launch)}"
    fig.text(0.1 / FIG_W, 1 - 0.34 / fig_h, _clip(sub, 110), fontsize=8, color="#444", va="top",
             parse_math=False)


def _draw_caption(fig, caption, cap_h, fig_h) -> None:
    y = cap_h - 0.08
    for text, style in caption:
        fig.text(0.1 / FIG_W, y / fig_h, text, fontsize=8, va="top", parse_math=False, **style)
        y -= 0.22


def _message_figure(trace, caption, cap_h, kernel=None) -> Figure:
    """No grid to draw (rejected at trace time, or nothing ran): a headline and the caption."""
    if not trace.ran_kernels:
        head = "no Pallas GPU kernel ran in interpret mode"
    elif kernel is None:
        head = "no kernel ran: JAX rejected it while tracing"
    else:
        head = f"kernel {kernel}: no allocations inside blocks"
    fig_h = 0.6 + cap_h
    fig = TraceFigure(figsize=(FIG_W, fig_h), dpi=100)
    fig.text(0.1 / FIG_W, 1 - 0.15 / fig_h, head, fontsize=10, weight="bold", va="top",
             parse_math=False)
    _draw_caption(fig, caption, cap_h, fig_h)
    return fig


def render_png(trace, kernel: int | None = None, value: str = "events", dpi: int = 100) -> bytes:
    """The plot as PNG bytes (the static fallback of the widget)."""
    return figure_png(plot(trace, kernel=kernel, value=value), dpi=dpi)
