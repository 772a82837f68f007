"""`Trace`: a recorded session, loadable from and savable to versioned JSON."""

from __future__ import annotations

import datetime
import json
import os

from .errors import EmptyTraceError, TraceFileError
from .model import Failure, Finding, KernelInfo
from .snippets import from_json as snippets_from_json
from .snippets import to_json as snippets_json
from .store import EventTable

FORMAT = "pallas_viz.trace"
# 2: kernel-level requests have block -1 (1 wrote `()`, also the block of a kernel
# without a grid); findings are a tree of root causes; sources carry their branch.
VERSION = 2


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
        `device`'s limits ("h100", "h200", "b200", "sm120"; default: the trace's)."""
        from .analysis.budget import block_budgets

        device = device or self.meta.get("device") or "h100"
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

    def stats(self):
        """Per-kernel counts: events, buffers, bytes per memory space, barriers."""
        from .analysis.stats import kernel_stats

        return kernel_stats(self.events, self.kernels)

    def plot(self, kernel: int | None = None, value: str = "events"):
        """A `matplotlib.figure.Figure`: block x thread heatmap of `value` ("events" or
        "bytes") for `kernel` (default: the first finding's), findings marked."""
        from .render.png import plot

        self.require_kernels("plot")
        return plot(self, kernel=kernel, value=value)

    def to_html(self, path: str | os.PathLike) -> None:
        """Write a self-contained HTML page of the trace (no network needed to view it)."""
        from .render.html import write_html

        self.require_kernels("write an HTML view of")
        write_html(self, path)

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
        """Write the trace as versioned JSON."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict) -> Trace:
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise TraceFileError("not a pallas_viz trace (no \"format\": \"pallas_viz.trace\")")
        version = d.get("version")
        if not isinstance(version, int):
            raise TraceFileError("trace has no integer \"version\"")
        if version > VERSION:
            raise TraceFileError(
                f"trace version {version} is newer than this pallas_viz reads ({VERSION}); "
                "upgrade pallas_viz")
        from .build import build_trace

        try:
            events = EventTable.from_dict(d["events"])
            if version < 2:
                events = events.with_v1_kernel_level()
            kernels = [KernelInfo.from_dict(k) for k in d["kernels"]]
            failure = Failure.from_dict(d.get("failure"))
            meta = dict(d.get("meta") or {})
            snippets = snippets_from_json(d.get("snippets"))
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            raise TraceFileError(f"corrupt trace: {type(e).__name__}: {e}") from None
        # The findings are the current analyses' verdict on the saved events; the
        # file's own copy (kept for other readers) is never trusted.
        meta["loaded"] = True
        trace = build_trace(events, kernels, failure, meta)
        trace.snippets = snippets
        return trace


def load(path: str | os.PathLike) -> Trace:
    """Read a trace written by `Trace.save`; raises `TraceFileError` on a bad file."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise TraceFileError(f"cannot read {os.fspath(path)}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise TraceFileError(f"{os.fspath(path)} is not a text (JSON) file") from None
    if not text.strip():
        raise TraceFileError(f"{os.fspath(path)} is empty")
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceFileError(
            f"{os.fspath(path)} is not valid JSON (truncated or corrupt): {e.msg} at line "
            f"{e.lineno}, column {e.colno}") from None
    return Trace.from_dict(d)


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
