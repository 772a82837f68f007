"""`%pallas_trace` / `%%pallas_trace`: trace a statement or cell and show what it allocated.

A thin shell over `pallas_viz.trace` and `pallas_viz.diff`: run the code, display the trace
(and its diff against a kept one), save it, re-raise.
"""

from __future__ import annotations

import argparse
import keyword
import re
import sys

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from .capture import trace as _trace
from .cli import positive_seconds
from .render.inert import terminal_safe
from .render.text import earlier_failure_text

NO_KERNEL = ("pallas_viz: no Pallas GPU kernel ran in interpret mode, so there is nothing to "
             "show (run it with interpret=plgpu.InterpretGPUParams()).")
# IPython's own history variables (_, __, _i, _ii, _7, _i7): IPython overwrites them.
_IPYTHON_HISTORY = re.compile(r"_+|_i+|_i?\d+")


@magics_class
class PallasVizMagics(Magics):
    """IPython magics of pallas_viz."""

    @magic_arguments()
    @argument("-o", dest="output", metavar="VAR",
              help="store the pallas_viz.Trace in the variable VAR (like %%timeit -o)")
    @argument("--diff", metavar="VAR",
              help="after showing the trace, print how it differs from the pallas_viz.Trace "
                   "in the variable VAR (root causes fixed, still there, new; allocation "
                   "changes), as pallas_viz.diff(VAR, new trace)")
    @argument("--races", action="store_true", help="turn on JAX's race detection")
    @argument("--no-raise", dest="no_raise", action="store_true",
              help="do not fail the cell when a kernel fails (the finding is still shown)")
    @argument("--static", action="store_true", help="show a PNG and the text summary, no widget")
    @argument("--json", metavar="PATH", help="save the trace as JSON to PATH")
    @argument("--html", metavar="PATH", help="save the trace as a standalone HTML page to PATH")
    @argument("--timeout", metavar="S", type=positive_seconds, default=120.0,
              help="stop a kernel whose threads wait on barriers with no progress (no "
                   "allocation event, no barrier arrival) for S seconds: a deadlock "
                   "(default 120)")
    @argument("statement", nargs=argparse.REMAINDER, metavar="STATEMENT",
              help="the code to trace (line magic; %%%%pallas_trace traces the cell body); "
                   "options come first, and `--` ends them")
    @line_cell_magic
    def pallas_trace(self, line: str, cell: str | None = None):
        """Trace the Pallas GPU kernels (interpret mode) a statement or cell runs, and show them.

            %pallas_trace [options] STATEMENT
            %%pallas_trace [options]
            CELL

        Shows the trace widget (or, with --static, a PNG and the summary), then prints its
        diff against the trace kept in --diff VAR, then writes --json/--html. When a kernel
        fails, the trace is shown first and then the cell fails with pallas_viz.KernelError.
        A --diff VAR that holds no trace, or a --json/--html path that surely cannot be
        written, is reported in one line before the code runs; a write that fails anyway,
        after it. The line magic's value is its statement's, when that is an expression
        (`y = %pallas_trace f(x)`); the trace is kept with -o VAR.
        """
        # (IPython leaves this function's frames out of the traceback of the cell's own
        # error: the user's frames are the news)
        __tracebackhide__ = True  # noqa: F841
        tokens, statement = _split_line(line)
        expression = False
        args = self.pallas_trace.parser.parse_args(tokens)
        if args.output is not None:
            _check_variable(args.output, self.shell)
        before = None if args.diff is None else _kept_trace(args.diff, self.shell)
        _check_outputs(args.json, args.html)
        if cell is None:
            if not statement:
                raise UsageError("%pallas_trace needs a statement to run; see %pallas_trace?")
            site = _calling_cell(self.shell)  # (the cell's file, the magic's line) or None
            first = site[1] if site else 1
            try:
                try:  # an expression: its value is the magic's (`y = %pallas_trace f(x)`)
                    (code, name), expression = self._compile(statement, first, "eval"), True
                except SyntaxError:
                    code, name = self._compile(statement, first)
            except SyntaxError as e:
                raise UsageError(f"%pallas_trace: the statement is not valid Python: "
                                 f"{e.msg}") from None
            if site:
                _register_statement(self.shell, name, site, line)
        else:
            if statement:
                raise UsageError(f"%%pallas_trace takes only options, not {statement!r}")
            typed, at = _typed_cell(self.shell, cell) or (None, 0)
            if typed is None:  # (not kept in IPython's history: the magic's line rebuilt)
                typed = ["%%pallas_trace" + (f" {line}" if line.strip() else ""),
                         *cell.split("\n")]
            # the body starts below `%%pallas_trace` (line 1, unless lines stand above it)
            code, name = self._compile(cell, first_line=at + 2)
            _register_typed(name, typed, at + 1)

        session = _trace(raise_errors=not args.no_raise, detect_races=args.races,
                         timeout_s=args.timeout)
        error = value = None
        try:
            with session:
                if expression:
                    value = eval(code, self.shell.user_global_ns, self.shell.user_ns)  # noqa: S307
                else:
                    self.shell.ex(code)
        except BaseException as e:  # noqa: BLE001 - shown below, then re-raised
            error = e
        tr = session.trace
        if args.output:
            self.shell.user_ns[args.output] = tr
        failed = []
        if tr.ran_kernels:
            _show(tr, static=args.static)  # first: a failed write must not hide the trace
            if before is not None:
                _show_diff(before, tr)
            failed = _write(tr, args.json, args.html)
        else:
            earlier = earlier_failure_text(tr)
            if earlier is not None:  # (the cell's error is an earlier run's: say so)
                print(earlier)
            elif error is None:  # (a cell that raised: its error is the news)
                print(NO_KERNEL)
            for path in (args.json, args.html):
                if path:
                    print(f"pallas_viz: {terminal_safe(path)} not written: no Pallas GPU kernel "
                          "ran, so there is no trace", file=sys.stderr)
        if error is not None:
            for e in failed:
                print(f"pallas_viz: {e}", file=sys.stderr)
            _concise(error)
            raise error
        if failed:
            for e in failed[:-1]:
                print(f"pallas_viz: {e}", file=sys.stderr)
            _concise(failed[-1])
            raise failed[-1]
        return value

    def _compile(self, source: str, first_line: int, mode: str = "exec"):
        """Compile under a cached `<ipython-input-N-...>` name so kernel lines resolve:
        `(code, that name)`.

        The code starts at `first_line` (2 in a cell magic: line 1 is `%%pallas_trace`; a
        line magic's own line in its cell), so source lines match what the user sees in
        the cell. What linecache holds stays Python (blank lines above the code); the lines
        as typed are registered apart (`snippets.register_typed`).
        """
        src = self.shell.transform_cell(source)
        dropped = _leading_blank(source) - _leading_blank(src)  # transform_cell strips them
        src = "\n" * (first_line - 1 + max(0, dropped)) + src
        filename = self.shell.compile.cache(src, _cell_number(self.shell), raw_code=source)
        return self.shell.compile(src, filename, mode), filename


def _cell_number(shell) -> int:
    """The number of the cell running now (its `In [N]`): IPython counts a cell before it
    runs it, so `execution_count` is already the next cell's; the cell's code, cached under
    its number, and the running cell's result hold its own."""
    # the outermost cell on the stack: a cell magic that runs its body as a cell of its own
    # (`%%capture`) gives that body the next number, and the running result with it
    cells = _cell_files(shell)
    frame, found = sys._getframe(1), None
    while frame is not None:
        n = cells.get(frame.f_code.co_filename)
        found = n if isinstance(n, int) and n > 0 else found
        frame = frame.f_back
    if found is not None:
        return found
    result = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    n = getattr(result, "execution_count", None)
    return n if isinstance(n, int) else shell.execution_count


def _cell_files(shell) -> dict:
    """The file names IPython compiled the session's cells under -> their cell numbers."""
    return getattr(getattr(shell, "compile", None), "_filename_map", None) or {}


def _typed_cell(shell, body: str) -> tuple[list[str], int] | None:
    """The running `%%pallas_trace` cell as the user typed it and the index of the magic's
    line in it (blank lines, or another cell magic's line, may stand above it), when
    IPython's history holds it: the cell it ran last, if `body` ends it below a `%%` line.
    (IPython hands the magic the body alone; a cell run without history is not there.)"""
    raw = _last_raw_cell(shell)
    if raw is None:
        return None
    lines = raw.split("\n")
    for at in range(len(lines)):
        if (lines[at].lstrip().startswith("%%")
                and "\n".join(lines[at + 1:]).rstrip("\n") == body.rstrip("\n")):
            return [ln.rstrip("\r") for ln in lines], at
    return None


def _last_raw_cell(shell) -> str | None:
    raws = getattr(getattr(shell, "history_manager", None), "input_hist_raw", None)
    try:
        raw = raws[-1] if raws else None
    except (IndexError, TypeError, KeyError):
        return None
    return raw if isinstance(raw, str) else None


def _calling_cell(shell) -> tuple[str, int] | None:
    """The notebook cell (its cached file name) and line a line magic was called from: its
    statement is numbered as the cell shows it (`In [5], line 3`, not line 1)."""
    cells = _cell_files(shell)
    frame = sys._getframe(2)
    for _ in range(12):  # (IPython's own frames between the cell and the magic)
        if frame is None:
            return None
        if frame.f_code.co_filename in cells and frame.f_lineno:
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return None


def _register_statement(shell, name: str, site: tuple[str, int], line: str) -> None:
    """Show a line magic's statement in its cell: the cell's lines, its own as typed."""
    import linecache

    cell_file, at = site
    code = [ln.rstrip("\r\n") for ln in linecache.getlines(cell_file)]
    if not 1 <= at <= len(code):
        return
    typed = _typed_lines(code, _last_raw_cell(shell))
    if "get_ipython()" in typed[at - 1]:  # not in the history: the call IPython made of it
        call = f"get_ipython().run_line_magic('pallas_trace', {line!r})"
        typed[at - 1] = typed[at - 1].replace(call, f"%pallas_trace {line}")
    from .snippets import register_typed

    register_typed(name, typed)


def _typed_lines(code: list[str], raw: str | None, keep: int = 0) -> list[str]:
    """`code` (the lines Python ran) with the lines IPython rewrote (magics, `!` shell
    escapes: `get_ipython()` calls) as typed in `raw`, when `raw` is that cell: same lines
    elsewhere. Its first `keep` lines are `raw`'s (the cell magic's line, blank lines)."""
    if raw is None:
        return list(code)
    typed = raw.split("\n")
    n, m = len(code), len(typed)
    while n and not code[n - 1].strip():
        n -= 1
    while m and not typed[m - 1].strip():
        m -= 1
    if n != m or any(c != t for c, t in zip(code[keep:n], typed[keep:n])
                     if "get_ipython()" not in c):
        return [*typed[:keep], *code[keep:]] if len(typed) >= keep else list(code)
    return [*typed[:keep], *(t if "get_ipython()" in c else c
                             for c, t in zip(code[keep:n], typed[keep:n])), *code[n:]]


def _register_typed(name: str, typed: list[str], keep: int) -> None:
    """Register the `%%pallas_trace` cell `name` as typed: its first `keep` lines (the
    magic's line and any blank lines above it) are the cell's, the rest Python's unless
    IPython rewrote them."""
    import linecache

    from .snippets import register_typed

    code = [ln.rstrip("\r\n") for ln in linecache.getlines(name)]
    register_typed(name, _typed_lines(code, "\n".join(typed), keep))


# Options that take a value; `--opt=value` carries its own.
_TAKES_VALUE = {"-o", "--diff", "--json", "--html", "--timeout"}


def _read_token(line: str, i: int) -> tuple[str, int]:
    """The shell-like word starting at `i` (quotes removed, no backslash escapes, so Windows
    paths stay as typed) and the index after it."""
    out, quote, j = [], None, i
    while j < len(line):
        c = line[j]
        if quote is not None:
            if c == quote:
                quote = None
            else:
                out.append(c)
        elif c in "'\"":
            quote = c
        elif c.isspace():
            break
        else:
            out.append(c)
        j += 1
    if quote is not None:
        raise UsageError(f"%pallas_trace: no closing quotation in {line[i:]!r}")
    return "".join(out), j


def _split_line(line: str) -> tuple[list[str], str]:
    """The magic's line, read once: its option words, and the statement after them.

    Options come first; the statement starts at the first word that is not an option or an
    option's value (or after `--`) and is kept exactly as typed, quotes and spacing included.
    """
    tokens: list[str] = []
    i, n, want_value = 0, len(line), False
    while True:
        while i < n and line[i].isspace():
            i += 1
        if i >= n:
            return tokens, ""
        if not want_value and line[i] != "-":
            return tokens, line[i:].strip()
        word, j = _read_token(line, i)
        if want_value:
            tokens.append(word)
            want_value = False
        elif word == "--":
            return tokens, line[j:].strip()
        else:
            tokens.append(word)
            want_value = word in _TAKES_VALUE
        i = j


def _check_variable(name: str, shell) -> None:
    """Refuse a `-o` name that cannot hold the trace or would break the session."""
    if not name.isidentifier():
        raise UsageError(f"-o {name!r}: not a Python variable name")
    if keyword.iskeyword(name):
        raise UsageError(f"-o {name!r}: a Python keyword, not a variable name")
    if name.startswith("__") and name.endswith("__"):
        raise UsageError(f"-o {name!r}: dunder names belong to Python; pick another name")
    hidden = getattr(shell, "user_ns_hidden", {}) or {}
    if name in hidden or _IPYTHON_HISTORY.fullmatch(name):
        raise UsageError(f"-o {name!r}: IPython uses that name; pick another name")


def _kept_trace(name: str, shell):
    """The `pallas_viz.Trace` a `--diff` name holds, checked before the code runs."""
    from .trace import Trace

    if not name.isidentifier():
        raise UsageError(f"--diff {name!r}: not a Python variable name")
    if name not in shell.user_ns:
        raise UsageError(f"--diff {name!r}: no such variable; keep a trace in it first "
                         f"(%pallas_trace -o {name} ... or {name} = pallas_viz.load(PATH))")
    value = shell.user_ns[name]
    if not isinstance(value, Trace):
        raise UsageError(f"--diff {name!r}: not a pallas_viz.Trace (its value is of type "
                         f"{type(value).__name__}); keep one with -o {name} or "
                         f"{name} = pallas_viz.load(PATH)")
    return value


def _check_outputs(*paths: str | None) -> None:
    """Refuse, before the code runs, an output path that surely cannot be written (a
    directory that does not exist, one without write permission)."""
    from .errors import OutputError
    from .fileio import check_output_path

    for path in paths:
        if path:
            try:
                check_output_path(path)
            except OutputError as e:
                raise UsageError(f"%pallas_trace: {e}") from None


def _write(tr, json_path: str | None, html_path: str | None) -> list[Exception]:
    """Write the requested files; the errors (one line each) of those that failed."""
    from .errors import PallasVizError
    from .fileio import atomic_path

    failed: list[Exception] = []
    if json_path:
        try:
            with atomic_path(json_path) as tmp:
                tr.save(tmp)
        except PallasVizError as e:
            failed.append(e)
    if html_path:
        try:
            tr.to_html(html_path)
        except PallasVizError as e:
            failed.append(e)
    return failed


def _leading_blank(text: str) -> int:
    lines = text.split("\n")
    return next((i for i, ln in enumerate(lines) if ln.strip()), len(lines) - 1)


def _show(tr, static: bool) -> None:
    from .render.display import show

    show(tr, static=static)


def _show_diff(before, after) -> None:
    from .render.display import in_jupyter_kernel, show_diff
    from .trace_diff import diff

    d = diff(before, after)
    if in_jupyter_kernel():  # the compare view (its text form is the summary, once)
        show_diff(d)
    else:
        print(d.summary())


def _concise(error: BaseException) -> None:
    """Let IPython print a KernelError or OutputError as its message alone, no traceback."""
    from .errors import KernelError, OutputError

    if isinstance(error, KernelError):
        text = f"pallas_viz.KernelError: {error}"
        hint = ("(the interpreter's exception is the __cause__ of this error; "
                "rerun with --no-raise to keep the cell from failing)")
        error._render_traceback_ = lambda: [text, hint]
    elif isinstance(error, OutputError):
        text = f"pallas_viz.OutputError: {error}"
        error._render_traceback_ = lambda: [text]


def load_ipython_extension(ipython) -> None:
    """Register `%pallas_trace` (`%load_ext pallas_viz`)."""
    ipython.register_magics(PallasVizMagics)
