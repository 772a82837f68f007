"""`Trace`: a recorded session, loadable from and savable to versioned JSON."""

from __future__ import annotations

import datetime
import json
import os
import re

from .errors import EmptyTraceError, TraceFileError
from .model import Failure, Finding, KernelInfo
from .schema import FORMAT, VERSION  # noqa: F401 - the format's name and version live there
from .snippets import from_json as snippets_from_json
from .snippets import to_json as snippets_json
from .store import EventTable


class Trace:
    """Allocation events, kernels, findings and the failure of one traced run."""

    def __init__(self, events: EventTable | None = None, kernels: list[KernelInfo] | None = None,
                 findings: list[Finding] | None = None, failure: Failure | None = None,
                 meta: dict | None = None):
        self.events: EventTable = events if events is not None else EventTable.empty()
        self.kernels: list[KernelInfo] = list(kernels or [])
        self.findings: list[Finding] = list(findings or [])
        self.failure: Failure | None = failure
        self.meta: dict = dict(meta or {})
        # (file, line) -> (first line, code lines): read while recording, saved with the
        # trace; views show these and never open a path the trace names
        self.snippets: dict = {}
        self._budgets: dict = {}  # device name -> block budgets

    # -- queries
    @property
    def errors(self) -> list[Finding]:
        """Root causes of severity "error" (one per bug)."""
        return [f for f in self.findings if f.severity == "error"]

    def all_findings(self) -> list[Finding]:
        """Every finding: each root cause followed by its consequences."""
        out = []
        for f in self.findings:
            out.append(f)
            out.extend(f.consequences)
        return out

    def unplaced_events(self) -> int:
        """Events from inside a block the analyses could not pin to a (device, block,
        thread). A trace with any is never called clean."""
        from .analysis.frame import in_block_mask, placed_mask

        return int((in_block_mask(self.events) & ~placed_mask(self.events)).sum())

    @property
    def ran_kernels(self) -> bool:
        """True if any Pallas GPU kernel ran (or was rejected) in interpret mode."""
        return bool(self.kernels) or len(self.events) > 0 or self.failure is not None

    def kernel_info(self, index: int) -> KernelInfo | None:
        """The `KernelInfo` of kernel run `index`, or None (kernels are listed by index)."""
        ks = self.kernels
        if 0 <= index < len(ks) and ks[index].index == index:
            return ks[index]
        return next((k for k in ks if k.index == index), None)

    def require_kernels(self, action: str) -> None:
        """Raise `EmptyTraceError` if no kernel ran: there is nothing to `action`."""
        if not self.ran_kernels:
            raise EmptyTraceError(
                f"cannot {action} this trace: no Pallas GPU kernel ran in interpret mode while "
                "it recorded (run the kernel with interpret=plgpu.InterpretGPUParams() or under "
                "plgpu.force_gpu_interpret_mode())")

    def __repr__(self) -> str:
        return (f"<pallas_viz.Trace: {len(self.kernels)} kernel(s), {len(self.events)} events, "
                f"{len(self.errors)} error(s), {len(self.findings) - len(self.errors)} warning(s)>")

    # -- views
    def summary(self, color: bool = False) -> str:
        """The diagnostic report: findings like compiler errors, then per-kernel counts."""
        from .render.text import render_summary

        return render_summary(self, color=color)

    def budget(self, device: str | None = None):
        """Per-block peak live SMEM/TMEM/REGS with the buffers live at each peak, against
        `device`'s limits ("h100", "h200", "b200", "sm120"; default: the trace's, or b200
        for a trace that uses tensor memory, else h100)."""
        from .analysis.budget import block_budgets
        from .analysis.context import resolve_device

        device = resolve_device(device or self.meta.get("device"), self.events)
        if device not in self._budgets:
            self._budgets[device] = block_budgets(self.events, self.kernels, device)
        return self._budgets[device]

    def adopt(self, other: Trace) -> None:
        """Take `other`'s contents (the object `with pv.trace() as tr` handed out is filled
        when recording ends)."""
        self.events, self.kernels, self.failure = other.events, other.kernels, other.failure
        self.findings, self.meta, self.snippets = other.findings, other.meta, other.snippets
        self._budgets = dict(other._budgets)

    def keep_budgets(self, device: str, budgets) -> None:
        """Keep the budgets the analyses computed for `device` (so views reuse them)."""
        self._budgets[device] = budgets

    def failed_kernels(self) -> set[int]:
        """The kernels whose run stopped before their end (a failure, a deadlock, an
        interrupt): the blocks after the one that stopped never ran."""
        from .analysis.context import failed_kernels

        meta = self.meta
        return failed_kernels(meta.get("deadlocks") or (), meta.get("stopped_kernels") or (),
                              self.failure)

    def stats(self):
        """Per-kernel counts: events, buffers, bytes per memory space, barriers."""
        from .analysis.stats import kernel_stats

        return kernel_stats(self.events, self.kernels, self.failed_kernels())

    def plot(self, kernel: int | None = None, value: str = "events", kind: str = "grid",
             device: str | None = None):
        """A `matplotlib.figure.Figure` of `kernel` (default: the first finding's).

        kind="grid": the block x thread heatmap of `value` ("events" or "bytes") with the
        root causes marked; "timeline": per (block, thread) lanes with one bar per
        allocation held, barrier operations as ticks, the live SMEM/TMEM curve above;
        "memory": live SMEM/TMEM per block over the run against `device`'s limit.
        """
        self.require_kernels("plot")
        if kind == "grid":
            from .render.png import plot

            return plot(self, kernel=kernel, value=value)
        from .analysis.context import resolve_device

        target = resolve_device(device or self.meta.get("device"), self.events)
        if kind == "timeline":
            from .render.timeline import plot_timeline

            return plot_timeline(self, kernel=kernel, device=target)
        if kind == "memory":
            from .render.timeline import plot_memory

            return plot_memory(self, kernel=kernel, device=target)
        raise ValueError(f"kind must be \"grid\", \"timeline\" or \"memory\", not {kind!r}")

    def to_perfetto(self, path: str | os.PathLike, kernel: int | None = None) -> None:
        """Write a Chrome/Perfetto trace-event JSON (opens in ui.perfetto.dev): one process
        per block, one track per thread, a slice per allocation held, live-bytes counters,
        barrier operations and findings as instants. Steps, not wall time, are its clock."""
        from .analysis.context import resolve_device
        from .render.perfetto import write_perfetto

        self.require_kernels("export")
        write_perfetto(self, path, kernel=kernel,
                       device=resolve_device(self.meta.get("device"), self.events))

    def to_html(self, path: str | os.PathLike) -> None:
        """Write a self-contained HTML page of the trace (no network needed to view it)."""
        from .render.html import write_html

        self.require_kernels("write an HTML view of")
        write_html(self, path)

    def _ipython_display_(self) -> None:
        """In a Jupyter kernel: a static snapshot, then the live widget (which hides it)."""
        from .render.display import show

        show(self)

    def _repr_mimebundle_(self, include=None, exclude=None):
        """The widget in a notebook; `image/png` plus the summary as `text/plain` otherwise."""
        from .render.display import mimebundle

        return mimebundle(self)

    # -- persistence
    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "version": VERSION,
            "meta": {k: v for k, v in self.meta.items() if k != "loaded"},
            "kernels": [k.to_dict() for k in self.kernels],
            "events": self.events.to_dict(),
            "findings": [f.to_dict() for f in self.findings],
            "failure": None if self.failure is None else self.failure.to_dict(),
            "snippets": snippets_json(self.snippets),
        }

    def save(self, path: str | os.PathLike) -> None:
        """Write the trace as versioned JSON, atomically (a failed write leaves the old file
        and raises `OutputError`). ASCII only: text that is not valid Unicode (a lone
        surrogate in a message) is escaped, never a reason to fail."""
        from .fileio import atomic_write_text
        from .schema import savable

        text = json.dumps(savable(self.to_dict()), separators=(",", ":"), ensure_ascii=True,
                          allow_nan=False)
        atomic_write_text(path, text)

    @classmethod
    def from_dict(cls, d: dict) -> Trace:
        """The trace a saved JSON document describes, every field checked against
        `pallas_viz.schema`; raises `TraceFileError` naming the first bad field. The
        findings are recomputed from the events (the file's own are ignored)."""
        from . import schema as s
        from .build import build_trace

        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise TraceFileError("not a pallas_viz trace (no \"format\": \"pallas_viz.trace\")")
        version = d.get("version")
        if isinstance(version, bool) or not isinstance(version, int):
            raise TraceFileError("trace has no integer \"version\"")
        if version > VERSION:
            raise TraceFileError(
                f"trace version {s.show(version)} is newer than this pallas_viz reads "
                f"({VERSION}); upgrade pallas_viz")
        if version < 1:
            raise TraceFileError(f"trace version {version} is not one pallas_viz wrote "
                                 f"(1..{VERSION})")
        raw_kernels = s.lst(s.field(d, "kernels", ""), "kernels", s.MAX_KERNELS)
        kernels = [KernelInfo.from_dict(k, f"kernels[{i}]", i) for i, k in enumerate(raw_kernels)]
        events = EventTable.from_dict(s.field(d, "events", ""), num_kernels=len(kernels))
        if version < 2:
            events = events.with_v1_kernel_level()
        failure = Failure.from_dict(d.get("failure"), "failure", len(kernels))
        cells = [] if failure is None or failure.cell is None else [
            (failure.kernel, *failure.cell)]
        meta = s.meta_record(d.get("meta"), "meta", len(kernels), len(events), cells)
        s.check_cells(events.columns, events.blocks, [k.threads_per_block for k in kernels],
                      cells)
        try:
            snippets = snippets_from_json(d.get("snippets"))
        except (ValueError, TypeError) as e:
            raise TraceFileError(f"corrupt trace: snippets: {e}") from None
        for f, _line in snippets:
            if len(f) > s.MAX_FILE_NAME:
                s.fail("snippets", f"a file name of {len(f)} characters is longer than the "
                                   f"{s.MAX_FILE_NAME} allowed")
        # The findings are the current analyses' verdict on the saved events; the
        # file's own copy (kept for other readers) is never trusted.
        meta["loaded"] = True
        try:
            trace = build_trace(events, kernels, failure, meta)
        except Exception as e:  # noqa: BLE001 - a combination the schema let through
            raise TraceFileError(
                f"corrupt trace: {s.ANALYSES_FAILED} ({type(e).__name__}: "
                f"{s.show(str(e))})") from None
        trace.snippets = snippets
        return trace


def load(path: str | os.PathLike) -> Trace:
    """Read a trace written by `Trace.save`; raises `TraceFileError` on a bad file.

    Only a regular file of at most `schema.MAX_FILE_BYTES` is read (never a FIFO, a device,
    standard input or anything under /proc, /sys or /dev), and every field is checked
    (`Trace.from_dict`)."""
    from . import schema as s

    name, data = _read_trace_file(path)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise TraceFileError(f"{name} is not a text (JSON) file") from None
    del data
    if not text.strip():
        raise TraceFileError(f"{name} is empty")
    d = s.parse_json(text, name)
    del text
    try:
        return Trace.from_dict(d)
    except TraceFileError as e:  # (which file, when two are read: `pallas-viz diff`)
        raise TraceFileError(f"{name}: {e}") from None


_FD_PATH = re.compile(r"^/(?:dev/(?:stdin|fd/\d+)|proc/(?:self|thread-self|\d+)/fd/\d+)$")


def _read_trace_file(path) -> tuple[str, bytes]:
    """(`path` as shown in messages, its bytes); a one-line `TraceFileError` otherwise."""
    import stat

    from .fileio import read_regular_bytes
    from .render.inert import terminal_safe
    from .schema import MAX_FILE_BYTES

    try:
        p = os.fspath(path)
    except TypeError:
        raise TraceFileError(f"cannot read {terminal_safe(repr(path))}: not a path") from None
    if isinstance(p, bytes):
        p = os.fsdecode(p)
    name = terminal_safe(p) if p else "''"
    cap = f"{MAX_FILE_BYTES} bytes ({MAX_FILE_BYTES / 1024**3:g} GiB)"
    if p == "-" or _FD_PATH.match(os.path.normpath(p)):
        raise TraceFileError(
            f"cannot read {name}: pallas_viz.load reads a trace file, not standard input or a "
            "file descriptor; save the trace to a file and load that")
    try:
        st = os.stat(p)
    except OSError as e:
        raise TraceFileError(f"cannot read {name}: {e.strerror or e}") from None
    except ValueError as e:  # an embedded NUL
        raise TraceFileError(f"cannot read {name}: invalid path ({e})") from None
    mode = st.st_mode
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))
    for test, what in kinds:
        if test(mode):
            raise TraceFileError(f"cannot read {name}: it is {what}, not a trace file")
    if not stat.S_ISREG(mode):
        raise TraceFileError(f"cannot read {name}: it is not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        raise TraceFileError(f"cannot read {name}: its {st.st_size} bytes are more than the "
                             f"{cap} a trace file may be")
    real = os.path.realpath(p)
    if real.startswith(("/proc/", "/sys/", "/dev/")):
        raise TraceFileError(f"cannot read {name}: {terminal_safe(real)} is a system file, "
                             "not a trace file")
    if not os.access(p, os.R_OK):
        raise TraceFileError(f"cannot read {name}: Permission denied")
    data = read_regular_bytes(p, max_bytes=MAX_FILE_BYTES)
    if data is None:
        raise TraceFileError(f"cannot read {name}: it is not a readable regular file of at "
                             f"most {cap} (or it changed while being read)")
    return name, data


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
