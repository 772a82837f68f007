"""The text view: findings like compiler diagnostics, then per-kernel counts."""

from __future__ import annotations

import os

from ..analysis.budget import budget_line, kernel_budgets
from ..analysis.repeats import repeated_roots
from ..cells import describe_cells, ranges
from ..model import Finding, SourceLocation
from .inert import one_line as _s

_COLORS = {"error": "\033[1;31m", "warning": "\033[1;33m", "bold": "\033[1m",
           "dim": "\033[2m", "green": "\033[1;32m", "cyan": "\033[36m", "reset": "\033[0m"}


def _c(text: str, style: str, color: bool) -> str:
    return f"{_COLORS[style]}{text}{_COLORS['reset']}" if color else text


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def display_path(path: str) -> str:
    """A path relative to the working directory when it lies below it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def short(loc: SourceLocation) -> str:
    return _s(loc.short(display_path(loc.file)))


def _code(loc: SourceLocation) -> str:
    """"  `code`" of a line named beside another (its code stripped), or nothing."""
    return f"  `{_s(loc.code.strip())}`" if loc.code else ""


def call_site(via: SourceLocation) -> str:
    """`file:line:col in function  `code`` of the call that led to a helper's line."""
    func = f" in {_s(via.function)}" if via.function else ""
    return f"{short(via)}{func}{_code(via)}"


def source_lines(loc: SourceLocation | None, color: bool = False, indent: str = "  ") -> list[str]:
    """`file:line:col`, the code line and a caret under the column."""
    if loc is None:
        return [f"{indent}(no source line: JAX gave none for this request)"]
    func = f" in {_s(loc.function)}" if loc.function else ""
    out = [f"{indent}--> {short(loc)}{func}"]
    if loc.code:
        code = _s(loc.code).expandtabs(4)
        stripped = code.lstrip()
        lead = len(code) - len(stripped)
        pad = " " * len(str(loc.line))
        out.append(f"{indent}{pad} |")
        out.append(f"{indent}{loc.line} | {stripped}")
        col = (loc.column - lead) if loc.column is not None and loc.column >= lead else 0
        callee = stripped[col:].split("(")[0]  # the call the column points at, if any
        width = len(callee) if "(" in stripped[col:] and callee.replace(
            ".", "").replace("_", "").isalnum() else 1
        caret = " " * col + "^" + "~" * (min(width, 40) - 1)
        out.append(f"{indent}{pad} | {_c(caret, 'error', color)}")
    return out


def _thread_word(f: Finding, trace) -> str:
    if trace is not None and f.kernel is not None and 0 <= f.kernel < len(trace.kernels):
        return _s(trace.kernels[f.kernel].thread_axis or "thread")
    return "thread"


def render_consequence(f: Finding, column: bool = False) -> str:
    """A consequence on one line: `kind at file:line: message` (`file:line (called from
    line N)` for a line in a helper: two calls of it are two places; `column`: with the
    call's column, for calls that share a line)."""
    where = f" at {short(f.source)}" if f.source is not None else ""
    if f.source is not None and f.source.via is not None:
        via = f.source.via
        col = f", column {via.column + 1}" if column and via.column is not None else ""
        where += f" (called from {_s(via.label(f.source))}{col})"
    msg = f.message.strip().splitlines()[0] if f.message.strip() else ""
    return f"{f.severity}[{f.kind}]{where}: {_s(msg)}"


def render_finding(f: Finding, trace=None, color: bool = False,
                   same_line_as_above: bool = False, runs: list[int] | None = None) -> str:
    """A root cause: `kind: message`, its line with a caret, the branch where the threads
    part, the cells, the hint, then each consequence on one line. `runs`: the kernel runs
    that had it, when more than its own (`analysis.repeats.repeated_roots`)."""
    kname = ""
    if trace is not None and f.kernel is not None and 0 <= f.kernel < len(trace.kernels):
        k = trace.kernels[f.kernel]
        which = (f"runs {ranges(runs)}" if runs is not None and len(runs) > 1
                 else str(k.index))
        kname = f" in kernel {which}" + (f" ({_s(k.name)})" if k.name else "")
    head = f"{_c(f.severity, f.severity, color)}[{f.kind}]{kname}: {_s(f.message)}"
    lines = [head]
    if same_line_as_above and f.source is not None:
        lines.append(f"  --> {short(f.source)} (the line above)")
    else:
        lines += source_lines(f.source, color)
    if f.source is not None and f.source.via is not None:
        lines.append(f"  = called from: {call_site(f.source.via)}")
    if f.branch is not None:
        lines.append(f"  = {_c(f.branch_label, 'cyan', color)}: {short(f.branch)}"
                     f"{_code(f.branch)}")
    if f.cells:
        lines.append(f"  = cells: {_s(describe_cells(f.cells, _thread_word(f, trace)))}")
    for r in f.related[:4]:
        lines.append(f"  = related: {short(r)}{_code(r)}")
    if f.suggestion:
        lines.append(f"  = {_c('help', 'green', color)}: {_s(f.suggestion)}")
    if f.consequences:
        lines.append(f"  = {len(f.consequences)} consequence(s) of this root cause:")
        shared = _shared_call_lines(f)
        for c in f.consequences[:_MAX_CONSEQUENCES]:
            via = c.source.via if c.source is not None else None
            column = via is not None and (via.file, via.line) in shared
            lines.append(f"    - {render_consequence(c, column)}")
        if len(f.consequences) > _MAX_CONSEQUENCES:
            lines.append(f"    - ... and {len(f.consequences) - _MAX_CONSEQUENCES} more")
    return "\n".join(lines)


_MAX_CONSEQUENCES = 12


def _shared_call_lines(f: Finding) -> set[tuple[str, int]]:
    """The lines holding two or more of the calls that led to the lines of `f` and its
    consequences (`a(x); pl.when(...)(lambda: a(y))`): their calls are told by column."""
    cols: dict[tuple[str, int], set] = {}
    for x in (f, *f.consequences):
        via = x.source.via if x.source is not None else None
        if via is not None:
            cols.setdefault((via.file, via.line), set()).add(via.column)
    return {k for k, v in cols.items() if len(v) > 1}


def earlier_failure_text(trace) -> str | None:
    """What to say of a block in which no kernel ran and the error that left it was an
    earlier kernel run's failure, which JAX kept and raised again (`meta["earlier_failure"]`,
    its innermost error line); None otherwise."""
    line = trace.meta.get("earlier_failure")
    if trace.ran_kernels or not isinstance(line, str):
        return None
    head = ("pallas_viz: no kernel ran in this block. The error that left it is an earlier "
            f"kernel run's failure ({_s(line)}): with several devices, JAX keeps a failed "
            "kernel's errors and raises them again at the next call, before that call's "
            "kernel starts.")
    if str(trace.meta.get("jax_version", "")).startswith("0.11."):
        return head + (" JAX 0.11 raises it at every later call of this process: restart "
                       "the process (the notebook's kernel), then run the kernel again.")
    return head + (" Call `jax.effects_barrier()` once after a failed run (it raises "
                   "that error and clears it), then run the kernel again.")


def render_summary(trace, color: bool = False) -> str:
    """The whole report for a trace."""
    out = []
    earlier = earlier_failure_text(trace)
    if earlier is not None:
        return earlier
    if not trace.ran_kernels:
        return ("pallas_viz: no Pallas GPU kernel ran in interpret mode, so there is nothing "
                "to show. Run the kernel with interpret=plgpu.InterpretGPUParams() (or under "
                "plgpu.force_gpu_interpret_mode()).")
    previous = None
    roots = repeated_roots(trace.findings, trace.kernels)
    for f, runs in roots:
        same = f.source is not None and f.source == previous
        out.append(render_finding(f, trace, color, same_line_as_above=same, runs=runs))
        out.append("")
        previous = f.source
    errors = len(trace.errors)
    warnings = len(trace.findings) - errors
    unplaced = trace.unplaced_events()
    if trace.findings:
        verdict = _c(f"{errors} error(s), {warnings} warning(s)",
                     "error" if errors else "warning", color)
    elif unplaced:
        verdict = _c(f"not verified: {unplaced} block-level event(s) could not be placed in a "
                     f"(device, block, thread)", "warning", color)
    else:
        verdict = _c("clean: no findings", "green", color)
    analysed = len(trace.events) - unplaced
    out.append(_c("pallas_viz", "bold", color) + f": {verdict} in {len(trace.kernels)} "
               f"kernel run(s), {len(trace.events)} allocation events ({analysed} analysed)")
    if len(roots) < len(trace.findings):
        out.append(f"  ({len(trace.findings)} root cause(s), {len(roots)} distinct: the same "
                   "root cause in several runs of a kernel is shown once)")
    if trace.meta.get("interrupted"):
        out.append("  (interrupted: the trace holds the events recorded before the interrupt)")
    budget_lines = {kb.kernel: budget_line(kb) for kb in kernel_budgets(trace.budget())}
    # each kernel run's lines; runs whose lines read the same (a kernel called in a loop)
    # are printed once, naming the runs
    runs: dict[tuple[str, str | None], list[int]] = {}
    for s in trace.stats():
        k = trace.kernels[s.kernel]
        name = f" {_s(k.name)}" if k.name else ""
        launch = f" launched at {short(k.launch)}" if k.launch else ""
        spaces = ", ".join(f"{sp} {s.buffers[sp]} buffer(s) {_fmt_bytes(s.bytes[sp])}"
                           for sp in s.buffers) or "no buffers"
        word = _s(k.thread_axis or "thread")
        grid = " (no grid)" if s.no_grid else ""
        if s.blocks == 0:  # only kernel-level requests (operands): no block to count
            places = "all kernel-level (operands: its blocks requested nothing)"
        else:
            places = (f"{s.blocks} (device, block) pair(s)" if k.num_devices > 1
                      else f"{s.blocks} block(s){grid}") + f" x {s.threads} {word}"
            if s.cut_short:
                places += " (the run stopped: only the blocks that ran are counted)"
        text = (f"{name}{launch}: {s.events} events, {places}; {spaces}; {s.barriers} "
                f"barrier(s), {s.cluster_barriers} cluster barrier(s)")
        runs.setdefault((text, budget_lines.get(s.kernel)), []).append(s.kernel)
    for (text, line), ks in runs.items():
        which = (f"kernel {ks[0]}" if len(ks) == 1
                 else f"kernels {ranges(ks)} ({len(ks)} runs, each)")
        out.append(f"  {which}{text}")
        if line:
            out.append(f"    {line}")
    return "\n".join(out)
