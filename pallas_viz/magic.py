"""`%pallas_trace` / `%%pallas_trace`: trace a statement or cell and show what it allocated.

A thin shell over `pallas_viz.trace`: run the code, save and display the trace, re-raise.
"""

from __future__ import annotations

import argparse
import re

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display
from IPython.utils.process import arg_split

from .capture import trace as _trace

NO_KERNEL = ("pallas_viz: no Pallas GPU kernel ran in interpret mode, so there is nothing to "
             "show (run it with interpret=plgpu.InterpretGPUParams()).")


@magics_class
class PallasVizMagics(Magics):
    """IPython magics of pallas_viz."""

    @magic_arguments()
    @argument("-o", dest="output", metavar="VAR",
              help="store the pallas_viz.Trace in the variable VAR (like %%timeit -o)")
    @argument("--races", action="store_true", help="turn on JAX's race detection")
    @argument("--no-raise", dest="no_raise", action="store_true",
              help="do not fail the cell when a kernel fails (the finding is still shown)")
    @argument("--static", action="store_true", help="show a PNG and the text summary, no widget")
    @argument("--json", metavar="PATH", help="save the trace as JSON to PATH")
    @argument("--html", metavar="PATH", help="save the trace as a standalone HTML page to PATH")
    @argument("--timeout", metavar="S", type=float, default=120.0,
              help="give up on a kernel that runs longer than S seconds (default 120)")
    @argument("statement", nargs=argparse.REMAINDER, metavar="STATEMENT",
              help="the code to trace (line magic; %%%%pallas_trace traces the cell body)")
    @line_cell_magic
    def pallas_trace(self, line: str, cell: str | None = None):
        """Trace the Pallas GPU kernels (interpret mode) a statement or cell runs, and show them.

            %pallas_trace [options] STATEMENT
            %%pallas_trace [options]
            CELL

        Shows the trace widget (or, with --static, a PNG and the summary). When a kernel
        fails, the trace is shown first and then the cell fails with pallas_viz.KernelError.
        """
        try:
            args = parse_argstring(self.pallas_trace, line)
        except ValueError as e:  # shlex: "No closing quotation"
            raise UsageError(f"%pallas_trace: cannot split the line: {e}") from None
        args.json, args.html = _unquote(args.json), _unquote(args.html)
        statement = _strip_options(line, len(args.statement))
        if cell is None:
            if not statement.strip():
                raise UsageError("%pallas_trace needs a statement to run; see %pallas_trace?")
            source = statement
        else:
            if statement.strip():
                raise UsageError(f"%%pallas_trace takes only options, not {statement.strip()!r}")
            source = cell
        if args.timeout is not None and args.timeout <= 0:
            raise UsageError("--timeout must be a positive number of seconds")
        code = self._compile(source, first_line=1 if cell is None else 2)

        session = _trace(raise_errors=not args.no_raise, detect_races=args.races,
                         timeout_s=args.timeout)
        error = None
        try:
            with session:
                self.shell.ex(code)
        except BaseException as e:  # noqa: BLE001 - shown below, then re-raised
            error = e
        tr = session.trace
        if args.output:
            self.shell.user_ns[args.output] = tr
        if tr.ran_kernels:
            if args.json:
                tr.save(args.json)
            if args.html:
                tr.to_html(args.html)
            _show(tr, static=args.static)
        elif error is None:
            print(NO_KERNEL)
        if error is not None:
            _concise(error)
            raise error

    def _compile(self, source: str, first_line: int):
        """Compile under a cached `<ipython-input-N-...>` name so kernel lines resolve.

        The code starts at `first_line` (2 in a cell magic: line 1 is `%%pallas_trace`), so
        source lines match what the user sees in the cell.
        """
        src = self.shell.transform_cell(source)
        dropped = _leading_blank(source) - _leading_blank(src)  # transform_cell strips them
        src = "\n" * (first_line - 1 + max(0, dropped)) + src
        filename = self.shell.compile.cache(src, self.shell.execution_count, raw_code=source)
        return self.shell.compile(src, filename, "exec")


def _strip_options(line: str, n_rest: int) -> str:
    """`line` without its leading option tokens, the statement's quotes and spacing kept."""
    argv = arg_split(line, strict=False)
    opts = argv[: len(argv) - n_rest]
    if not opts:
        return line.strip()
    for m in re.finditer(r"\s+|$", line):
        if arg_split(line[: m.start()], strict=False) == opts:
            return line[m.start():].strip()
    return " ".join(argv[len(opts):])


def _leading_blank(text: str) -> int:
    lines = text.split("\n")
    return next((i for i, ln in enumerate(lines) if ln.strip()), len(lines) - 1)


def _unquote(path: str | None) -> str | None:
    """Option values keep their quotes in IPython's splitting: drop one matching pair."""
    if path and len(path) >= 2 and path[0] == path[-1] and path[0] in "'\"":
        return path[1:-1]
    return path


def _show(tr, static: bool) -> None:
    from .render.display import mimebundle

    bundle = mimebundle(tr, static=static)
    data, meta = bundle if isinstance(bundle, tuple) else (bundle, {})
    display(data, metadata=meta, raw=True)


def _concise(error: BaseException) -> None:
    """Let IPython print a KernelError as its message alone, not a chained JAX traceback."""
    from .errors import KernelError

    if isinstance(error, KernelError):
        text = f"pallas_viz.KernelError: {error}"
        hint = ("(the interpreter's exception is the __cause__ of this error; "
                "rerun with --no-raise to keep the cell from failing)")
        error._render_traceback_ = lambda: [text, hint]


def load_ipython_extension(ipython) -> None:
    """Register `%pallas_trace` (`%load_ext pallas_viz`)."""
    ipython.register_magics(PallasVizMagics)
