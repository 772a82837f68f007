"""The static view of one kernel, as a Figure or PNG: blocks as rows, threads as columns.

Laid out like the widget: one row per block (devices as separate row groups, labelled with
their grid coordinates, `(no grid)`, or `d1 (3)` with several devices), one column per thread
(the kernel's own thread axis name on the axis), shaded by allocation events (or bytes).
Only the cells of root causes are marked, each shape in an Okabe-Ito colour: a root's cells
with a filled marker (error: vermillion X, warning: orange triangle), the cells of threads that
never made the request hollow and hatched, its consequences' cells small and light. The row of
each root's culprit block is outlined and numbered; every root cause is listed under the grid
with its line, the branch where the threads part and its consequences in one line.

From 1 block to thousands: up to `FULL_ROWS` rows every block has its row; past that, runs of
blocks marked alike (clean ones included) fold into one labelled row, the culprit's block
always on a row of its own; when even that leaves more than `FOLD_ROWS` rows, the kernel
becomes a compact heat strip (each strip row the worst cell of a run of blocks), with each
root's culprit block marked and labelled.

Built on `matplotlib.figure.Figure` directly (no pyplot), so no global state is touched.
Text from a kernel or a trace file is drawn with mathtext off, its control characters made
visible (`terminal_safe`).
"""

from __future__ import annotations

import dataclasses
import io
import os
import textwrap

import numpy as np
from matplotlib import rc_context
from matplotlib.collections import PatchCollection
from matplotlib.colors import ListedColormap, to_rgba
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.text import Text
from matplotlib.ticker import MaxNLocator

from ..analysis.frame import placed_mask, request_mask
from ..analysis.repeats import root_groups
from ..cells import block_label, describe_cells, ranges
from ..model import Finding, SourceLocation
from .inert import one_line, terminal_safe
from .source_names import cell_label, describe_location

FIG_W = 8.0  # inches
# Okabe-Ito: distinguishable with every common colour-vision deficiency; every status also
# has its own marker shape.
ERROR_COLOR = "#D55E00"  # vermillion, X
WARNING_COLOR = "#E69F00"  # orange, triangle
CLEAN_COLOR = "#009E73"  # bluish green
COLLECTIVE_COLOR = "#0072B2"  # blue: the top of the event-count ramp
ERROR_LIGHT = "#F0C7A6"  # consequences: the same hues, lighter
WARNING_LIGHT = "#F6DDA6"
ERROR_DARK = "#8A3C00"  # strip rows of threads that never made the request
WARNING_DARK = "#8F6200"
WARNING_TEXT = "#9A6200"  # orange is too light for text on white
EMPTY_COLOR = "#ececec"
_MONO = "DejaVu Sans Mono"
VALUES = ("events", "bytes")

FULL_ROWS = 80  # up to this many rows, every block has its own row
FOLD_ROWS = 60  # folded rows at most; past that, the compact heat strip
STRIP_ROWS = 200  # rows of the heat strip at most
STRIP_H = 6.0  # inches: the heat strip's height


class TraceFigure(Figure):
    """A `Figure` that shows itself as a PNG in IPython, with or without pyplot.

    `savefig(path)` writes atomically (`pallas_viz.fileio`): a failed write leaves the old
    file untouched and raises `OutputError`, as does an image format matplotlib cannot write.
    """

    def _repr_png_(self) -> bytes:
        return figure_png(self)

    def draw(self, renderer):
        """Draw every text literally: no mathtext (a `$...$` from a trace is text, never a
        formula to typeset or fail on), and a control character, bidi override or lone
        surrogate a text holds shown escaped (`inert.terminal_safe`)."""
        for t in self.findobj(Text):
            t.set_parse_math(False)
            text = t.get_text()
            safe = terminal_safe(text)
            if safe != text:
                t.set_text(safe)
        with rc_context({"text.parse_math": False}):  # (tick labels made while drawing)
            return super().draw(renderer)

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


# Cell status, worst last: what a cell shows (the worst of every root it belongs to).
NONE, CONS_WARN, CONS_ERR, MISS_WARN, ROOT_WARN, MISS_ERR, ROOT_ERR = range(7)
_STATUS_GID = {ROOT_ERR: "root-error-cells", ROOT_WARN: "root-warning-cells",
               MISS_ERR: "missing-cells", MISS_WARN: "missing-cells",
               CONS_ERR: "consequence-cells", CONS_WARN: "consequence-cells"}
_STRIP_COLOR = {CONS_WARN: WARNING_LIGHT, CONS_ERR: ERROR_LIGHT, MISS_WARN: WARNING_DARK,
                ROOT_WARN: WARNING_COLOR, MISS_ERR: ERROR_DARK, ROOT_ERR: ERROR_COLOR}
_GLYPH = {"error": "\u2716", "warning": "\u25b2"}  # heavy X, triangle: the markers' shapes
_KIND_WORD = {"sequence_divergence": "divergence", "interpreter_error": "interpreter error",
              "partial_collective": "partial collective",
              "collective_mismatch": "collective mismatch",
              "nonzero_thread_collective": "non-zero thread collective",
              "smem_over_budget": "SMEM over budget", "tmem_over_budget": "TMEM over budget",
              "trace_error": "trace error", "warp_allocation": "warp allocation"}


def _safe(text) -> str:
    """Kernel or trace-file text of one line (a name, a code line) for a matplotlib text
    drawn with `parse_math=False`: its newlines escaped too, so that it cannot draw a line
    of its own (a fake verdict)."""
    return one_line(text).expandtabs(4)


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def short_file(loc: SourceLocation) -> str:
    """`file:line` with notebook cells as `In [N], line 3` and long paths cut from the left."""
    if cell_label(loc.file) is not None:
        return describe_location(loc.file, loc.line)
    path = loc.file
    if len(path) > 60:
        path = "…" + os.sep + os.sep.join(path.split(os.sep)[-3:])
    return f"{path}:{loc.line}"


def _where(loc: SourceLocation) -> str:
    """`kernels.py:60` or `In [7], line 3`, terminal-safe."""
    return _safe(describe_location(loc.file, loc.line))


def default_kernel(trace) -> int | None:
    """The kernel of the first finding that has one, else the first kernel."""
    for f in trace.findings:
        if f.kernel is not None and 0 <= f.kernel < len(trace.kernels):
            return f.kernel
    return 0 if trace.kernels else None


def _thread_axis(trace, kernel: int | None) -> str:
    if kernel is not None and 0 <= kernel < len(trace.kernels):
        return trace.kernels[kernel].thread_axis or "thread"
    return "thread"


# --------------------------------------------------------------------------- the grid


@dataclasses.dataclass
class KernelCells:
    """One kernel's (device, block) rows x thread columns: values, status, culprits."""

    kernel: int
    rows: list[tuple[int, tuple[int, ...]]]  # (device, block), by device then grid order
    threads: int
    values: np.ndarray  # (rows, threads): events or bytes requested
    status: np.ndarray  # (rows, threads): NONE .. ROOT_ERR
    culprits: dict[int, int]  # root number (as listed) -> row of its culprit block
    roots: list[tuple[int, Finding]]  # this kernel's roots with their numbers
    multi_device: bool

    def row_label(self, r: int, device: bool = True) -> str:
        d, b = self.rows[r]
        return f"d{d} {block_label(b)}" if self.multi_device and device else block_label(b)


MAX_THREADS = 1024  # columns at most (a trace file could name any thread)


def _grid_cells(cells) -> set[tuple[int, tuple[int, ...], int]]:
    return {(d, tuple(b), t) for d, b, t in cells
            if b is not None and d >= 0 and 0 <= t < MAX_THREADS}


def kernel_cells(trace, kernel: int, value: str = "events") -> KernelCells:
    """Event counts (or bytes requested) and finding status per (device, block) x thread."""
    if value not in VALUES:
        raise ValueError(f"value must be one of {VALUES}, not {value!r}")
    table = trace.events
    c = table.columns
    m = (c["kernel"] == kernel) & placed_mask(table) & (c["thread"] < MAX_THREADS)
    if value == "bytes":
        m &= request_mask(table)
    dev = c["device"][m].astype(np.int64)
    bidx = c["block"][m].astype(np.int64)
    thr = c["thread"][m].astype(np.int64)
    nb = max(1, len(table.blocks))
    ukeys, inverse = np.unique(dev * nb + bidx, return_inverse=True)
    pairs = [(int(k) // nb, table.blocks[int(k) % nb]) for k in ukeys.tolist()]

    roots = [(n, f) for n, copies in numbered_roots(trace) for f in copies if f.kernel == kernel]
    marked: list[tuple[int, set]] = []  # (status, cells), applied in order (max wins)
    for _, f in roots:
        err = f.severity == "error"
        for cons in f.consequences:
            marked.append((CONS_ERR if cons.severity == "error" else CONS_WARN,
                           _grid_cells(cons.cells)))
        missing = _grid_cells(cell for cell, _ in f.missing)
        marked.append((ROOT_ERR if err else ROOT_WARN, _grid_cells(f.cells) - missing))
        marked.append((MISS_ERR if err else MISS_WARN, missing))
    places = {(d, b) for _, cells in marked for d, b, _ in cells}
    rows = sorted(set(pairs) | places)
    row_of = {p: i for i, p in enumerate(rows)}

    info = trace.kernels[kernel] if 0 <= kernel < len(trace.kernels) else None
    threads = min(max(info.threads_per_block if info else 1, 1), MAX_THREADS)
    if len(thr):
        threads = max(threads, int(thr.max()) + 1)
    threads = max([threads, *(t + 1 for _, cells in marked for _, _, t in cells)])

    values = np.zeros((len(rows), threads))
    if len(thr):
        pair_row = np.array([row_of[p] for p in pairs], dtype=np.int64)
        weights = c["nbytes"][m].astype(float) if value == "bytes" else None
        flat = np.bincount(pair_row[inverse] * threads + thr, weights=weights,
                           minlength=len(rows) * threads)
        values = flat.reshape(len(rows), threads).astype(float)
    status = np.zeros((len(rows), threads), dtype=np.int8)
    for s, cells in marked:
        for d, b, t in cells:
            r = row_of[(d, b)]
            status[r, t] = max(status[r, t], s)

    culprits = {}
    for n, f in roots:
        cells = _grid_cells(f.cells) | _grid_cells(cell for cell, _ in f.missing)
        if cells:  # the root's first block in grid order, as the analysis orders roots
            d, b, _ = min(cells, key=lambda x: (x[1], x[0], x[2]))
            culprits[n] = row_of[(d, b)]
    devices = {d for d, _ in rows}
    multi = len(devices) > 1 or devices - {0} != set() or bool(info and info.num_devices > 1)
    return KernelCells(kernel, rows, threads, values, status, culprits, roots, multi)


@dataclasses.dataclass(frozen=True)
class Band:
    """A displayed row: the grid rows [start, stop) (one block, a fold or a strip run)."""

    start: int
    stop: int
    kind: str  # "block", "clean" (a fold of clean blocks), "same" (marked alike), "strip"

    @property
    def size(self) -> int:
        return self.stop - self.start


def layout_rows(kc: KernelCells, full: int = FULL_ROWS, folded: int = FOLD_ROWS,
                strip: int = STRIP_ROWS) -> tuple[str, list[Band]]:
    """("full" | "folded" | "strip", the displayed rows)."""
    n = len(kc.rows)
    if n <= full:
        return "full", [Band(i, i + 1, "block") for i in range(n)]
    devices = np.array([d for d, _ in kc.rows])
    culprit_rows = sorted(set(kc.culprits.values()))
    change = np.any(kc.status[1:] != kc.status[:-1], axis=1) | (devices[1:] != devices[:-1])
    cuts = {0, n, *(np.flatnonzero(change) + 1).tolist()}
    cuts |= {r for c in culprit_rows for r in (c, c + 1)}
    edges = sorted(cuts)
    bands = []
    for a, b in zip(edges, edges[1:]):
        kind = "block" if b - a == 1 else ("same" if kc.status[a].any() else "clean")
        bands.append(Band(a, b, kind))
    if len(bands) <= folded:
        return "folded", bands
    # The heat strip: runs of rows of one device, each shown as its worst cells.
    bands = []
    starts = np.flatnonzero(np.r_[True, devices[1:] != devices[:-1]]).tolist() + [n]
    for a, b in zip(starts, starts[1:]):
        k = max(1, round(strip * (b - a) / n))
        cuts = np.unique(np.linspace(a, b, k + 1).round().astype(int)).tolist()
        bands += [Band(x, y, "strip") for x, y in zip(cuts, cuts[1:])]
    return "strip", bands


def _band_label(kc: KernelCells, band: Band) -> str:
    first = kc.row_label(band.start)
    if band.size == 1 or band.kind == "strip":
        return first
    return f"{first}–{kc.row_label(band.stop - 1, device=False)}"


# --------------------------------------------------------------------------- root causes


def _consequence_line(f: Finding) -> str:
    kinds: dict[str, int] = {}
    for c in f.consequences:
        word = _KIND_WORD.get(c.kind, c.kind.replace("_", " "))
        kinds[word] = kinds.get(word, 0) + 1
    n = len(f.consequences)
    parts = [w if k == 1 else f"{w} ×{k}" for w, k in kinds.items()]
    return f"+{n} consequence{'s' if n != 1 else ''}: {', '.join(parts)}"


def _text_color(severity: str) -> str:
    return ERROR_COLOR if severity == "error" else WARNING_TEXT


MAX_DETAILED = 5  # roots of the plotted kernel shown with their lines, branch and cells
MAX_LISTED = 14  # roots listed at all (the others are counted)
_WIDE, _MONO_WIDE = 122, 112  # characters that fit across the figure at 8 pt


def numbered_roots(trace) -> list[tuple[int, list[Finding]]]:
    """The root causes as numbered in the figure: each once however many runs of a kernel
    had it (`analysis.repeats.root_groups`), with its copies, one per run."""
    return [(n, [trace.findings[i] for i in group]) for n, group in
            enumerate(root_groups(trace.findings, trace.kernels), start=1)]


def root_lines(trace, kernel: int | None) -> list[tuple[str, dict, str]]:
    """(text, style, gid) lines under the grid: every root cause, numbered as marked."""
    if not trace.findings:
        return [("\u2714 clean: no findings", {"color": CLEAN_COLOR, "weight": "bold"},
                 "no-findings")]
    out: list[tuple[str, dict, str]] = []
    detailed = 0
    roots = numbered_roots(trace)
    for n, copies in roots:
        if n > MAX_LISTED:
            rest = len(roots) - MAX_LISTED
            out.append((f"+ {rest} more root cause{'s' if rest != 1 else ''}: "
                        "print(tr.summary())", {"color": "#444"}, "more-roots"))
            break
        # (a root cause several runs had: the plotted run's copy, if it is one of them)
        f = next((c for c in copies if c.kernel == kernel), copies[0])
        runs = [c.kernel for c in copies if c.kernel is not None]
        color = _text_color(f.severity)
        where = f" {_where(f.source)}" if f.source is not None else ""
        other = f" (kernel runs {ranges(runs)})" if len(runs) > 1 else ""
        if f.kernel != kernel:
            which = f"kernel runs {ranges(runs)}" if len(runs) > 1 else f"kernel {f.kernel}"
            other = (f" ({which}: plot(kernel={f.kernel}))" if f.kernel is not None
                     else " (before any kernel ran)")
        msg = " ".join(terminal_safe(f.message).split())
        head = (f"{_GLYPH.get(f.severity, '•')} {n}  {_safe(f.severity)}[{_safe(f.kind)}]"
                f"{where}{other}: {msg}")
        detail = f.kernel == kernel and detailed < MAX_DETAILED
        wrapped = textwrap.wrap(head, _WIDE) or [head]
        if len(wrapped) > (2 if detail else 1):
            keep = 2 if detail else 1
            wrapped = wrapped[:keep]
            wrapped[-1] = _clip(wrapped[-1] + " …", _WIDE)
        out.append((wrapped[0], {"color": color, "weight": "bold"}, f"root-{n}"))
        out += [("    " + w, {"color": color}, f"root-{n}") for w in wrapped[1:]]
        if not detail:
            continue
        detailed += 1
        axis = _thread_axis(trace, kernel)
        if f.source is not None and f.source.code:
            code = f"{f.source.line} | {_safe(f.source.code).strip()}"
            out.append((_clip("      " + code, _MONO_WIDE), {"family": _MONO, "weight": "bold"},
                        f"root-{n}-code"))
        if f.source is not None and f.source.via is not None:
            v = f.source.via
            code = f"   {_safe(v.code).strip()}" if v.code else ""
            out.append((_clip(f"      called from: {_where(v)}{code}", _MONO_WIDE),
                        {"family": _MONO}, f"root-{n}-via"))
        if f.branch is not None:
            code = f"   {_safe(f.branch.code).strip()}" if f.branch.code else ""
            out.append((_clip(f"      {f.branch_label}: {_where(f.branch)}{code}", _MONO_WIDE),
                        {"family": _MONO, "color": COLLECTIVE_COLOR}, f"root-{n}-branch"))
        missing = [cell for cell, _ in f.missing]
        requested = [cell for cell in f.cells if cell not in set(missing)]
        if requested or missing:
            parts = []
            if requested:
                parts.append(f"cells: {describe_cells(requested, axis)}")
            if missing:
                parts.append(f"never made the request: {describe_cells(missing, axis)}")
            out.append((_clip("      " + _safe("; ".join(parts)), _WIDE), {"color": "#333"},
                        f"root-{n}-cells"))
        if f.consequences:
            out.append((_clip("      " + _safe(_consequence_line(f)), _WIDE), {"color": "#333"},
                        f"root-{n}-consequences"))
    return out


# --------------------------------------------------------------------------- drawing


def plot(trace, kernel: int | None = None, value: str = "events") -> Figure:
    """`kernel`'s blocks (rows) x threads (columns), root causes marked and listed below."""
    if value not in VALUES:
        raise ValueError(f"value must be one of {VALUES}, not {value!r}")
    if kernel is None:
        kernel = default_kernel(trace)
    elif not 0 <= kernel < len(trace.kernels):
        raise ValueError(f"kernel must be in 0..{len(trace.kernels) - 1}, not {kernel}")
    lines = root_lines(trace, kernel)
    if kernel is None:
        return _message_figure(trace, lines)
    kc = kernel_cells(trace, kernel, value)
    if not kc.rows:
        return _message_figure(trace, lines, kernel)
    mode, bands = layout_rows(kc)
    return _grid_figure(trace, kc, mode, bands, lines, value)


_LINE_H = 0.19  # inches per text line under the grid
_TOP = 0.62  # title and subtitle
_XAXIS = 0.45  # thread ticks and the axis name, above the grid


def _grid_figure(trace, kc: KernelCells, mode: str, bands: list[Band], lines, value) -> Figure:
    starts = np.array([b.start for b in bands])
    sizes = np.array([b.size for b in bands])
    vals = np.add.reduceat(kc.values, starts, axis=0) / sizes[:, None]
    stat = np.maximum.reduceat(kc.status, starts, axis=0)
    n_rows, n_threads = vals.shape
    labels = [_band_label(kc, b) for b in bands]

    legend = _legend_handles(stat, vals, mode)
    left = float(np.clip(0.35 + 0.058 * max(len(s) for s in labels), 0.7, 2.2))
    legend_w = 1.75
    notes_w = 0.55 if mode == "full" else 1.3  # culprit numbers; fold sizes, strip labels
    grid_max_w = min(3.0, FIG_W - left - notes_w - 0.75 - legend_w)
    cell_w = min(0.7, grid_max_w / n_threads)
    grid_w = cell_w * n_threads
    if mode == "strip":
        row_h = STRIP_H / n_rows
    else:
        row_h = float(np.clip(5.6 / n_rows, 0.11, 0.34))
    grid_h = row_h * n_rows
    area_h = max(grid_h, 0.2 * len(legend) + 0.15, 0.9)
    list_h = _LINE_H * len(lines) + 0.15
    fig_h = _TOP + _XAXIS + area_h + 0.3 + list_h
    fig = TraceFigure(figsize=(FIG_W, fig_h), dpi=100, layout=None)
    top = fig_h - _TOP - _XAXIS  # the grid's top edge, inches from the bottom
    ax = fig.add_axes((left / FIG_W, (top - grid_h) / fig_h, grid_w / FIG_W, grid_h / fig_h))

    cmap = ListedColormap(_ramp(256), name="pv_events").with_extremes(under=EMPTY_COLOR)
    vmax = max(1.0, float(vals.max()))
    im = ax.imshow(vals, cmap=cmap, vmin=1e-9, vmax=vmax, aspect="auto",
                   interpolation="nearest", origin="upper",
                   extent=(-0.5, n_threads - 0.5, n_rows - 0.5, -0.5))
    im.set_gid("heatmap")
    _axes(ax, trace, kc, bands, labels, mode, row_h)
    if mode == "strip":
        worst = np.repeat(stat, sizes, axis=0) == kc.status
        _strip_overlay(ax, stat, np.add.reduceat(worst, starts, axis=0) / sizes[:, None])
    else:
        _markers(ax, stat, cell_w, row_h)
        if mode == "full" and value == "events" and cell_w >= 0.3 and row_h >= 0.25:
            _counts(ax, vals, vmax)
    _culprits(ax, kc, bands, stat, mode, row_h, cell_w)
    if mode == "folded":
        _fold_notes(ax, bands)

    cbar_h = float(np.clip(grid_h, 0.9, 2.4))
    cax = fig.add_axes(((left + grid_w + notes_w) / FIG_W, (top - cbar_h) / fig_h,
                        0.12 / FIG_W, cbar_h / fig_h))
    cb = fig.colorbar(im, cax=cax)
    cax.set_gid("colorbar")
    what = "allocation events" if value == "events" else "bytes requested"
    cb.set_label(what + ("" if mode == "full" else "\n(mean per block)"), fontsize=7)
    cb.ax.tick_params(labelsize=6.5)
    if value == "events":
        cb.ax.yaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    if legend:
        lg = fig.legend(handles=legend, loc="upper left", frameon=False, fontsize=7,
                        bbox_to_anchor=((left + grid_w + notes_w + 0.62) / FIG_W, top / fig_h),
                        borderaxespad=0.0, handlelength=1.4, labelspacing=0.6)
        lg.set_gid("legend")
    _title(fig, trace, kc, mode, bands, fig_h)
    _draw_lines(fig, lines, list_h, fig_h)
    return fig


def _ramp(n: int) -> np.ndarray:
    """Very light blue to Okabe-Ito blue: distinct from the grey of cells without events."""
    lo, hi = np.array(to_rgba("#DCEAF5")[:3]), np.array(to_rgba(COLLECTIVE_COLOR)[:3]) * 0.8
    t = np.linspace(0, 1, n)[:, None]
    return np.hstack([lo + (hi - lo) * t, np.ones((n, 1))])


def _axes(ax, trace, kc: KernelCells, bands, labels, mode, row_h) -> None:
    n_rows, n_threads = len(bands), kc.threads
    ax.set_xlim(-0.5, n_threads - 0.5)
    ax.set_ylim(n_rows - 0.5, -0.5)
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    step = max(1, -(-n_threads // 16))
    ax.set_xticks(range(0, n_threads, step), [str(t) for t in range(0, n_threads, step)])
    axis = _thread_axis(trace, kc.kernel)
    name = "thread" if axis == "thread" else f"{_safe(axis)}  (thread axis)"
    ax.set_xlabel(name, fontsize=8, parse_math=False)
    ax.tick_params(labelsize=7, length=2)
    if mode == "strip":
        ys = np.unique(np.linspace(0, n_rows - 1, 17).round().astype(int)).tolist()
    else:
        per = max(1, int(np.ceil(0.1 / row_h)))
        ys = list(range(0, n_rows, per))
    ax.set_yticks(ys, [labels[y] for y in ys], fontsize=6.5 if row_h < 0.14 else 7)
    for y, tick in zip(ys, ax.get_yticklabels()):
        if bands[y].kind in ("clean", "same"):
            tick.set_style("italic")
            tick.set_color(CLEAN_COLOR if bands[y].kind == "clean" else "#444")
    ax.set_ylabel("device, block" if kc.multi_device else "block", fontsize=8)
    if mode != "strip" and row_h >= 0.2:
        for i in range(1, n_rows):
            ax.axhline(i - 0.5, color="white", lw=0.6)
    if mode != "strip" and n_threads > 1:
        for t in range(1, n_threads):
            ax.axvline(t - 0.5, color="white", lw=0.8)
    for i in range(1, n_rows):  # devices as separate row groups
        if kc.rows[bands[i].start][0] != kc.rows[bands[i - 1].start][0]:
            ax.axhline(i - 0.5, color="#222", lw=1.6, gid="device-separator", zorder=3.2)
    for side in ("right", "bottom"):
        ax.spines[side].set_visible(False)


def _marker_size(cell_w: float, row_h: float) -> float:
    # a marker may overflow a thin row a little: only marked rows have one
    return float(np.clip((min(cell_w, max(row_h, 0.16)) * 72 * 0.8) ** 2, 30.0, 170.0))


def _markers(ax, stat: np.ndarray, cell_w: float, row_h: float) -> None:
    size = _marker_size(cell_w, row_h)
    edge = 0.6 if size > 30 else 0.35
    for s, marker, face, edgec, scale, lw in (
            (CONS_WARN, "^", WARNING_LIGHT, WARNING_COLOR, 0.55, 0.6),
            (CONS_ERR, "X", ERROR_LIGHT, ERROR_COLOR, 0.55, 0.6),
            (ROOT_WARN, "^", WARNING_COLOR, "black", 1.0, edge),
            (ROOT_ERR, "X", ERROR_COLOR, "white", 1.0, edge)):
        ys, xs = np.nonzero(stat == s)
        if len(xs):
            ax.scatter(xs, ys, marker=marker, s=size * scale, c=face, edgecolors=edgec,
                       linewidths=lw, gid=_STATUS_GID[s], zorder=4)
    # threads that never made the request: hatched cell, hollow marker
    cells, colors, markers = [], [], []
    for s, color, marker in ((MISS_WARN, WARNING_COLOR, "^"), (MISS_ERR, ERROR_COLOR, "X")):
        ys, xs = np.nonzero(stat == s)
        cells += list(zip(xs.tolist(), ys.tolist()))
        colors += [color] * len(xs)
        markers += [marker] * len(xs)
    if cells:
        patches = [Rectangle((x - 0.5, y - 0.5), 1, 1) for x, y in cells]
        pc = PatchCollection(patches, facecolor="white", edgecolor=colors, hatch="///",
                             linewidth=0.0, zorder=3)
        pc.set_gid("missing-hatch")
        ax.add_collection(pc)
        for marker in sorted(set(markers)):
            pts = [(x, y) for (x, y), m in zip(cells, markers) if m == marker]
            cols = [c for c, m in zip(colors, markers) if m == marker]
            xs, ys = zip(*pts)
            ax.scatter(xs, ys, marker=marker, s=size * 0.85, facecolors="white",
                       edgecolors=cols, linewidths=1.5, gid="missing-cells", zorder=4)


def _strip_overlay(ax, stat: np.ndarray, share: np.ndarray) -> None:
    """The heat strip: a marked cell is a bar in its status colour (the worst of its
    blocks), as long as the share of its blocks marked so (a quarter at least)."""
    ys, xs = np.nonzero(stat)
    if not len(xs):
        return
    bars = [Rectangle((x - 0.5, y - 0.5), 0.25 + 0.75 * share[y, x], 1)
            for y, x in zip(ys.tolist(), xs.tolist())]
    colors = [_STRIP_COLOR[int(stat[y, x])] for y, x in zip(ys.tolist(), xs.tolist())]
    pc = PatchCollection(bars, facecolor=colors, edgecolor="none", zorder=2)
    pc.set_gid("status-strip")
    ax.add_collection(pc)


def _counts(ax, vals: np.ndarray, vmax: float) -> None:
    for y, x in np.ndindex(*vals.shape):
        v = vals[y, x]
        color = "white" if v > vmax * 0.55 else "#1b2a41"
        ax.text(x - 0.42, y - 0.38, f"{int(v)}", ha="left", va="top", fontsize=6.5,
                color=color if v else "#888", parse_math=False, gid="count")


def _culprits(ax, kc: KernelCells, bands, stat, mode, row_h, cell_w) -> None:
    """Outline each root's culprit row and number it at the right (as the list below)."""
    band_of = {}
    for i, b in enumerate(bands):
        for n, r in kc.culprits.items():
            if b.start <= r < b.stop:
                band_of.setdefault(i, []).append(n)
    severity = {n: f.severity for n, f in kc.roots}
    placed: list[float] = []  # label positions (bands), to keep strip labels apart
    min_gap = 0.17 / row_h
    for i in sorted(band_of):
        nums = sorted(band_of[i])
        color = ERROR_COLOR if any(severity[n] == "error" for n in nums) else WARNING_COLOR
        ax.add_patch(Rectangle((-0.5, i - 0.5), kc.threads, 1, fill=False, ec=color, lw=1.6,
                               clip_on=False, zorder=3.5, gid="culprit-row"))
        for tick in ax.get_yticklabels():
            if tick.get_position()[1] == i:
                tick.set_color(color)
                tick.set_weight("bold")
        if mode == "strip":  # the strip's rows are too thin for markers: mark these ones
            size = max(_marker_size(cell_w, 0.2), 36.0)
            for s, marker, face, edgec in ((ROOT_ERR, "X", ERROR_COLOR, "white"),
                                           (ROOT_WARN, "^", WARNING_COLOR, "black"),
                                           (MISS_ERR, "X", "white", ERROR_COLOR),
                                           (MISS_WARN, "^", "white", WARNING_COLOR)):
                xs = np.flatnonzero(stat[i] == s)
                if len(xs):
                    ax.scatter(xs, [i] * len(xs), marker=marker, s=size, c=face,
                               edgecolors=edgec, linewidths=1.0, zorder=6,
                               gid=_STATUS_GID[s])
        y = float(i)
        if mode == "strip":
            while placed and y - placed[-1] < min_gap:
                y = placed[-1] + min_gap
        placed.append(y)
        label = "\u25c0 " + ", ".join(map(str, nums))
        if mode == "strip":  # the culprit's own block, not the strip row's first
            label += "  " + ", ".join(kc.row_label(kc.culprits[n]) for n in nums[:2])
        dy = -(y - i) * row_h * 72  # points; the y axis points down
        ax.annotate(label, xy=(1.0, i), xycoords=ax.get_yaxis_transform(),
                    xytext=(5, dy), textcoords="offset points", va="center", ha="left",
                    fontsize=7.5, weight="bold", color=_text_color(severity[nums[0]])
                    if color == WARNING_COLOR else ERROR_COLOR, annotation_clip=False,
                    gid="culprit-label",
                    arrowprops=dict(arrowstyle="-", color="#666", lw=0.6,
                                    shrinkA=0, shrinkB=0) if dy else None)


def _fold_notes(ax, bands) -> None:
    for i, b in enumerate(bands):
        if b.kind == "clean":
            text, color = f"{b.size} clean blocks", CLEAN_COLOR
        elif b.kind == "same":
            text, color = f"{b.size} blocks alike", "#444"
        else:
            continue
        ax.annotate(text, xy=(1.0, i), xycoords=ax.get_yaxis_transform(), xytext=(5, 0),
                    textcoords="offset points", va="center", ha="left", fontsize=7,
                    style="italic", color=color, annotation_clip=False, gid="fold-note")


def _legend_handles(stat: np.ndarray, vals: np.ndarray, mode: str) -> list:
    present = set(np.unique(stat).tolist())
    handles = []
    strip = mode == "strip"

    def mark(marker, face, edge, label, ms=8, mew=0.6):
        handles.append(Line2D([], [], ls="", marker=marker, color=face, mfc=face, mec=edge,
                              ms=ms, mew=mew, label=label))

    def patch(color, label, hatch=None, ec="#999"):
        handles.append(Rectangle((0, 0), 1, 1, fc=color, ec=ec, hatch=hatch, lw=0.6,
                                 label=label))

    if ROOT_ERR in present:
        mark("X", ERROR_COLOR, "white", "root cause (error)")
    if ROOT_WARN in present:
        mark("^", WARNING_COLOR, "black", "root cause (warning)")
    if MISS_ERR in present or MISS_WARN in present:
        color = ERROR_COLOR if MISS_ERR in present else WARNING_COLOR
        if strip:
            patch(ERROR_DARK if MISS_ERR in present else WARNING_DARK, "never made the request")
        else:
            patch("white", "never made the request", hatch="////", ec=color)
    if CONS_ERR in present or CONS_WARN in present:
        if strip:
            patch(ERROR_LIGHT if CONS_ERR in present else WARNING_LIGHT, "consequence")
        elif CONS_ERR in present:
            mark("X", ERROR_LIGHT, ERROR_COLOR, "consequence", ms=5.5)
        else:
            mark("^", WARNING_LIGHT, WARNING_COLOR, "consequence", ms=5.5)
    if strip and (ROOT_ERR in present or ROOT_WARN in present):
        patch(ERROR_COLOR if ROOT_ERR in present else WARNING_COLOR, "root cause cells")
    if (vals <= 0).any():
        patch(EMPTY_COLOR, "no events")
    if any(h.get_label().startswith("root") for h in handles):
        handles.append(Rectangle((0, 0), 1, 1, fc="none", ec=ERROR_COLOR, lw=1.4,
                                 label="\u25c0 n  culprit block"))
    return handles


def _title(fig, trace, kc: KernelCells, mode: str, bands, fig_h) -> None:
    k = trace.kernels[kc.kernel]
    name = f" {_clip(_safe(k.name), 48)}" if k.name else ""
    of = f" (of {len(trace.kernels)}; plot(kernel=i) for others)" if len(trace.kernels) > 1 else ""
    fig.text(0.12 / FIG_W, 1 - 0.1 / fig_h, f"kernel {kc.kernel}{name}{of}", fontsize=10,
             weight="bold", va="top", parse_math=False, gid="title")
    errors = sum(f.severity == "error" for _, f in kc.roots)
    warnings = len(kc.roots) - errors
    if kc.roots:
        parts = []
        if errors:
            parts.append(f"{_GLYPH['error']} {errors} error{'s' if errors != 1 else ''}")
        if warnings:
            parts.append(f"{_GLYPH['warning']} {warnings} warning{'s' if warnings != 1 else ''}")
        verdict, color = "   ".join(parts), ERROR_COLOR if errors else WARNING_TEXT
    else:
        verdict, color = "\u2714 clean", CLEAN_COLOR
    fig.text(1 - 0.12 / FIG_W, 1 - 0.1 / fig_h, verdict, fontsize=10, weight="bold", va="top",
             ha="right", color=color, parse_math=False, gid="verdict")
    c = trace.events.columns
    n_events = int((c["kernel"] == kc.kernel).sum())
    nb = len(kc.rows)
    axis = _safe(_thread_axis(trace, kc.kernel))
    places = ("(device, block) pair" if kc.multi_device else "block") + ("s" if nb != 1 else "")
    sub = (f"{nb} {places} × {kc.threads} {axis}, "
           f"{n_events} allocation events")
    if k.launch is not None:
        sub += f"; launched at {_where(k.launch)}"
    if mode == "folded":
        sub += f"; runs of blocks marked alike folded ({len(bands)} rows)"
    elif mode == "strip":
        per = round(len(kc.rows) / len(bands))
        sub += (f"; heat strip: {len(bands)} rows of ~{per} blocks (bar: the worst mark, "
                "its length: the share of blocks)")
    fig.text(0.12 / FIG_W, 1 - 0.36 / fig_h, _clip(sub, 125), fontsize=7.5, color="#444",
             va="top", parse_math=False, gid="subtitle")


def _draw_lines(fig, lines, list_h, fig_h) -> None:
    y = list_h - 0.1
    for text, style, gid in lines:
        fig.text(0.12 / FIG_W, y / fig_h, text, fontsize=8, va="top", parse_math=False,
                 gid=gid, **style)
        y -= _LINE_H


def _message_figure(trace, lines, kernel=None) -> Figure:
    """No grid to draw (rejected at trace time, or nothing ran): a headline and the roots."""
    if not trace.ran_kernels:
        head = "no Pallas GPU kernel ran in interpret mode"
    elif kernel is None:
        head = "no kernel ran: JAX rejected it while tracing"
    else:
        name = trace.kernels[kernel].name
        head = f"kernel {kernel}{' ' + _safe(name) if name else ''}: no allocations inside blocks"
    list_h = _LINE_H * len(lines) + 0.15
    fig_h = 0.55 + list_h
    fig = TraceFigure(figsize=(FIG_W, fig_h), dpi=100)
    fig.text(0.12 / FIG_W, 1 - 0.12 / fig_h, head, fontsize=10, weight="bold", va="top",
             parse_math=False, gid="title")
    _draw_lines(fig, lines, list_h, fig_h)
    return fig


def render_png(trace, kernel: int | None = None, value: str = "events", dpi: int = 100) -> bytes:
    """The plot as PNG bytes (the static fallback of the widget)."""
    return figure_png(plot(trace, kernel=kernel, value=value), dpi=dpi)
