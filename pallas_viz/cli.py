"""`pallas-viz`: run a script with every kernel traced, show or diff saved traces, or the demo.

Exit codes:
  0  clean: no error findings (`demo`: the diagnosis was shown)
  1  error findings (the summary names them)
  2  bad usage, a trace file that cannot be read, an output (--json/--html/--png/
     --perfetto, or standard output itself) that cannot be written, or a script that
     starts its own pallas_viz.trace()
  3  the script raised an exception of its own (not a kernel failure); its traceback is
     printed as `python SCRIPT` prints it, without pallas-viz's own frames
  4  the script ran no Pallas GPU kernel in interpret mode (and ended normally); no
     --json/--html/--png/--perfetto is written (stderr says so)
  5  SCRIPT does not exist, or is a directory or another non-regular file
  N  the script called sys.exit(N), N not 0, and no kernel has an error finding (like
     `python SCRIPT`; sys.exit("message") prints the message and gives 1)
  130  interrupted (Ctrl-C): the summary of the partial trace is printed and --json,
     --html, --png, --perfetto are written first (if a kernel had started)
  141  standard output was closed early (`pallas-viz ... | head`): the rest of the output
     is dropped quietly; --json, --html, --png, --perfetto are still written
When several apply, the first of 130, 141, 2, 1, 3, N, 4, 0 wins.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import textwrap
import traceback

EXIT_CLEAN, EXIT_FINDINGS, EXIT_USAGE, EXIT_SCRIPT_RAISED, EXIT_NO_KERNEL, EXIT_NO_SCRIPT = (
    0, 1, 2, 3, 4, 5)
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141

_OUTPUTS = ("json", "html", "png", "perfetto")
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_RUN_PLACEMENT = (
    "Options of pallas-viz (--json, --html, --png, --perfetto, --color, --races, --timeout) are "
    "recognised before SCRIPT and anywhere after it; every other argument after SCRIPT goes to "
    "the script, in order. Everything after `--` goes to the script unchanged: `pallas-viz run "
    "[OPTIONS] SCRIPT ARGS -- --json mine` passes `--json mine` to the script, and `pallas-viz "
    "run [OPTIONS] -- SCRIPT ARGS` passes every ARG to it. Relative output paths are relative "
    "to the directory pallas-viz was started in, even if the script changes directory.")


def positive_seconds(text: str) -> float:
    """An argparse type: a finite positive number of seconds (`--timeout`)."""
    from .capture import checked_timeout

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    try:
        return checked_timeout(value)  # (the one check of a timeout, `pv.trace`'s)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a finite positive number of seconds, not {text!r}") from None


def _parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The one parser of `pallas-viz`, and its `run` subparser."""
    p = argparse.ArgumentParser(
        prog="pallas-viz", allow_abbrev=False,
        description="See the allocations of Pallas Mosaic GPU kernels in GPU interpret mode.",
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def outputs(sp):
        sp.add_argument("--json", metavar="PATH", help="save the trace as JSON")
        sp.add_argument("--html", metavar="PATH", help="write a self-contained HTML view")
        sp.add_argument("--png", metavar="PATH",
                        help="write the block x thread grid as an image (PNG; the extension "
                        "picks another format matplotlib writes, e.g. .svg)")
        sp.add_argument("--perfetto", metavar="PATH",
                        help="write a Chrome/Perfetto trace (ui.perfetto.dev): allocation "
                        "lifetimes per thread, live bytes per block, barrier operations")
        sp.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                        help="colour the summary (auto: when stdout is a terminal and NO_COLOR "
                        "is unset)")

    run = sub.add_parser(
        "run", allow_abbrev=False, help="run a Python script with every kernel traced",
        description=textwrap.fill("Run SCRIPT with every Pallas GPU interpret-mode kernel "
                                  "traced, print the diagnosis. " + _RUN_PLACEMENT, 88),
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("script", metavar="SCRIPT", help="the Python script to run, as __main__")
    # never filled by the parser (`_split_run` hands the script's arguments over apart);
    # "*" so a missing SCRIPT is reported alone, not as "SCRIPT, ARGS"
    run.add_argument("args", nargs="*", default=[], metavar="ARGS",
                     help="the script's own arguments (sys.argv[1:])")
    run.add_argument("--races", action="store_true", help="turn on JAX's race detection")
    run.add_argument("--timeout", type=positive_seconds, metavar="S", default=120.0,
                     help="stop a kernel whose threads wait on barriers with no progress (no "
                     "allocation event, no barrier arrival) for S seconds: a deadlock "
                     "(default 120, as in Jupyter)")
    outputs(run)

    show = sub.add_parser("show", allow_abbrev=False,
                          help="print the summary of a saved trace")
    show.add_argument("trace", metavar="TRACE.json", help="a trace saved with --json")
    outputs(show)

    diff = sub.add_parser("diff", allow_abbrev=False,
                          help="compare two saved traces: root causes fixed, still there, new "
                          "(exit 1 when AFTER has a new error)")
    diff.add_argument("before", metavar="BEFORE.json", help="a trace saved with --json")
    diff.add_argument("after", metavar="AFTER.json", help="a later trace saved with --json")
    diff.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                      help="colour the output (auto: when stdout is a terminal and NO_COLOR "
                      "is unset)")

    demo = sub.add_parser("demo", allow_abbrev=False,
                          help="diagnose a bundled kernel with a collective-allocation bug",
                          description="Diagnose a bundled kernel with a collective-allocation "
                          "bug. The bug is the point: the demo exits 0 once it has shown its "
                          "diagnosis (2 if an output cannot be written).")
    outputs(demo)
    return p, run


def _split_run(argv: list[str], run: argparse.ArgumentParser) -> tuple[list[str], list[str]]:
    """The arguments after `run` as (what the parser reads, the script's own arguments).

    Our options are taken before SCRIPT and after it (help: `_RUN_PLACEMENT`); the parser
    gets them followed by `-- SCRIPT`, so a script named like an option still works.
    """
    takes_value = {s: a.nargs != 0 for a in run._actions for s in a.option_strings}
    trailing = {s for s in takes_value if s not in ("-h", "--help")}
    ours: list[str] = []
    script: str | None = None
    rest: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        name = a.split("=", 1)[0]
        if script is None:
            if a == "--":
                if i + 1 < len(argv):
                    script, rest = argv[i + 1], list(argv[i + 2:])
                break
            if a.startswith("-") and a != "-":
                ours.append(a)
                if takes_value.get(name) and "=" not in a and i + 1 < len(argv):
                    ours.append(argv[i + 1])
                    i += 1
            else:
                script = a
        elif a == "--":
            rest.extend(argv[i + 1:])
            break
        elif name in trailing:
            ours.append(a)
            if takes_value[name] and "=" not in a and i + 1 < len(argv):
                ours.append(argv[i + 1])
                i += 1
        else:
            rest.append(a)
        i += 1
    return ours + ([] if script is None else ["--", script]), rest


class _Console:
    """stdout and stderr with inert text, a quiet end when stdout's reader has gone."""

    def __init__(self):
        self.stdout_gone = False  # its reader closed it (EPIPE)
        self.stdout_failed = False  # it cannot be written (a full disk, /dev/full)

    def out(self, text: str, keep_sgr: bool = False) -> None:
        from .render.inert import safe_for_stdout

        if self.stdout_gone or self.stdout_failed:
            return
        try:
            stream = sys.stdout
            stream.write(safe_for_stdout(text, getattr(stream, "encoding", None),
                                         keep_sgr=keep_sgr) + "\n")
            stream.flush()
        except BrokenPipeError:
            self.drop_stdout()
        except (OSError, ValueError) as e:
            self.stdout_failed = True
            self.err(f"pallas-viz: cannot write to standard output: "
                     f"{getattr(e, 'strerror', None) or e}")
            self.drop_stdout(broken=False)

    def err(self, text: str) -> None:
        from .render.inert import safe_for_stdout

        try:
            stream = sys.stderr
            stream.write(safe_for_stdout(text, getattr(stream, "encoding", None)) + "\n")
            stream.flush()
        except (OSError, ValueError):
            pass

    def probe_stdout(self) -> bool:
        """True if stdout is (now found) closed by its reader."""
        if not self.stdout_gone:
            try:
                sys.stdout.flush()
            except BrokenPipeError:
                self.drop_stdout()
            except (OSError, ValueError):
                pass
        if not self.stdout_gone:
            try:  # a pipe without readers polls as an error, no write needed
                import select

                poller = select.poll()
                poller.register(sys.stdout.fileno(), select.POLLOUT)
                if any(ev & select.POLLERR for _, ev in poller.poll(0)):
                    self.drop_stdout()
            except (OSError, ValueError, AttributeError):
                pass
        return self.stdout_gone

    def exit_code(self, code: int) -> int:
        """`code`, unless stdout broke: 141 (closed by its reader) or 2 (unwritable)."""
        if code == EXIT_INTERRUPTED:
            return code
        if self.stdout_gone:
            return EXIT_BROKEN_PIPE
        if self.stdout_failed:
            return EXIT_USAGE
        return code

    def drop_stdout(self, broken: bool = True) -> None:
        """The standard recipe: point stdout at devnull so nothing at exit raises again."""
        self.stdout_gone = self.stdout_gone or broken
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):  # not a real file (pytest's capture)
            pass


def _color(opt: str) -> bool:
    if opt == "always":
        return True
    if opt == "never" or os.environ.get("NO_COLOR"):
        return False
    try:
        return sys.stdout.isatty()
    except (OSError, ValueError, AttributeError):
        return False


def _debug() -> bool:
    return bool(os.environ.get("PALLAS_VIZ_DEBUG"))


def _prepare_outputs(ns, con: _Console, inputs: dict[str, str] | None = None
                     ) -> list[tuple[str, str, str, str | None]] | None:
    """(kind, path as given, absolute path, image format) of each output, checked now, before
    any kernel runs; None (the reason printed) if one cannot be written, if two outputs
    name one file, or if an output names one of `inputs` (what -> path: the script being
    run, the trace being read), which writing it would destroy."""
    from .errors import OutputError
    from .fileio import check_output_path

    out = []
    taken = {os.path.realpath(p): what for what, p in (inputs or {}).items()}
    for kind in _OUTPUTS:
        path = getattr(ns, kind, None)
        if path is None:
            continue
        try:
            fmt = None
            if kind == "png":
                from .render.png import image_format

                fmt = image_format(path)
            out.append((kind, path, check_output_path(path), fmt))
        except OutputError as e:
            con.err(f"pallas-viz: {e}")
            return None
        real = os.path.realpath(out[-1][2])
        if real in taken:
            con.err(f"pallas-viz: --{kind} {path} names {taken[real]}: writing it there "
                    "would overwrite it; give the output a path of its own")
            return None
        taken[real] = f"the file --{kind} writes"
    return out


def _write_outputs(trace, outputs, con: _Console, from_file: bool = False) -> bool:
    """Write each output; print one line per success or failure. True if all were written.

    `from_file`: the trace was loaded from a file, so a view that cannot draw it is that
    file's fault (one line), not a bug of pallas_viz (a traceback).
    """
    from .errors import PallasVizError
    from .fileio import atomic_output, atomic_path

    ok = True
    for kind, shown, path, fmt in outputs:
        try:
            if kind == "json":
                with atomic_path(path) as tmp:
                    trace.save(tmp)
                done = f"pallas_viz: trace saved to {shown}"
            elif kind == "html":
                trace.to_html(path)
                done = f"pallas_viz: HTML view written to {shown}"
            elif kind == "perfetto":
                trace.to_perfetto(path)
                done = f"pallas_viz: Perfetto trace written to {shown}"
            else:
                fig = trace.plot()
                with atomic_output(path, "wb") as f:
                    fig.savefig(f, format=fmt, dpi=120)
                done = f"pallas_viz: {fmt.upper()} written to {shown}"
        except PallasVizError as e:
            con.err(f"pallas-viz: {e}")
            ok = False
        except Exception as e:  # a trace from a file that the views cannot draw
            if _debug() or not from_file:
                raise
            con.err(f"pallas-viz: cannot write {shown}: the trace is inconsistent "
                    f"({type(e).__name__}: {e})")
            ok = False
        else:
            con.out(done)
    return ok


def _is_internal(filename: str) -> bool:
    if filename in ("<frozen runpy>",):
        return True
    path = os.path.abspath(filename)
    if os.path.basename(path) == "runpy.py":
        return True
    return path.startswith(_PACKAGE_DIR + os.sep)


def _script_traceback(exc: BaseException) -> str:
    """The traceback Python would print for the script: no runpy or pallas_viz frames."""
    te = traceback.TracebackException.from_exception(exc)
    seen: set[int] = set()
    todo = [te]
    while todo:
        t = todo.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        t.stack = traceback.StackSummary.from_list(
            [f for f in t.stack if not _is_internal(f.filename)])
        todo += [x for x in (t.__cause__, t.__context__) if x is not None]
        todo += list(getattr(t, "exceptions", None) or [])
    return "".join(te.format()).rstrip("\n")


def _run_script(script: str, session) -> tuple[BaseException | None, bool]:
    """Run `script` as __main__ under the trace session: (its exception or None, interrupted).

    The session is entered first, so pallas_viz's own errors (an unsupported JAX) are not
    taken for the script's.
    """
    session.__enter__()
    exc = None
    try:
        runpy.run_path(script, run_name="__main__")
    except BaseException as e:  # noqa: BLE001 - the script's: reported by the caller
        exc = e
    try:
        suppressed = session.__exit__(None if exc is None else type(exc), exc,
                                      None if exc is None else exc.__traceback__)
    except KeyboardInterrupt:  # Ctrl-C aborted a kernel through the interpreter's failure
        return None, True
    if exc is None or suppressed:
        return None, False
    if isinstance(exc, KeyboardInterrupt):
        return None, True
    return exc, False


def _is_trace_file(path: str) -> bool:
    """Whether `path` starts as a pallas_viz trace file does (its JSON object's format)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.lstrip().startswith(b"{") and b'"pallas_viz.trace"' in head


def cmd_run(ns, con: _Console) -> int:
    import pallas_viz as pv

    if not os.path.isfile(ns.script):
        if os.path.isdir(ns.script):
            con.err(f"pallas-viz: {ns.script} is a directory, not a script")
        elif os.path.exists(ns.script):
            con.err(f"pallas-viz: {ns.script} is not a regular file, not a script")
        else:
            con.err(f"pallas-viz: no such script: {ns.script}")
        return EXIT_NO_SCRIPT
    if _is_trace_file(ns.script):
        con.err(f"pallas-viz: {ns.script} is a saved trace, not a script: show it with "
                f"`pallas-viz show {ns.script}`")
        return EXIT_USAGE
    outputs = _prepare_outputs(ns, con, {"the script being run": ns.script})
    if outputs is None:
        return EXIT_USAGE
    start_cwd = os.getcwd()
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [ns.script, *ns.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(ns.script)))
    session = pv.trace(raise_errors=False, detect_races=ns.races, timeout_s=ns.timeout)
    try:
        raised, interrupted = _run_script(ns.script, session)
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        try:
            os.chdir(start_cwd)
        except OSError:
            pass
    trace = session.trace

    if isinstance(raised, pv.TraceActiveError):
        con.err(f"pallas-viz: {ns.script} starts its own pallas_viz.trace(), which cannot run "
                "inside the trace of `pallas-viz run`: run it with `python`, or remove its "
                "trace() to run it under pallas-viz")
        return EXIT_USAGE
    status = None
    if isinstance(raised, SystemExit):
        code, raised = raised.code, None
        if isinstance(code, int):  # bool included, like Python
            status = int(code) or None
        elif code is not None:
            con.err(str(code))
            status = 1
    if isinstance(raised, BrokenPipeError) and con.probe_stdout():
        raised = None  # the script printed into a closed pipe (`| head`)
    if raised is not None:
        con.err(_script_traceback(raised))

    color = _color(ns.color)
    if not trace.ran_kernels:
        # The advice of the empty summary (run the kernel in interpret mode) fits only a
        # script that ended normally; a crash, Ctrl-C or sys.exit(N) is the news instead.
        if interrupted:
            con.err("pallas-viz: interrupted before any kernel ran")
            code = EXIT_INTERRUPTED
        elif raised is not None:
            con.err(f"pallas-viz: {ns.script} raised {type(raised).__name__} before any "
                    "kernel ran")
            code = EXIT_SCRIPT_RAISED
        elif status:
            con.err(f"pallas-viz: {ns.script} exited with status {status} before any "
                    "kernel ran")
            code = status
        else:
            con.out(trace.summary())
            code = EXIT_NO_KERNEL
        for _kind, shown, path, _fmt in outputs:
            stale = " (the file already there is left as it was)" if os.path.lexists(
                path) else ""
            con.err(f"pallas-viz: {shown} not written: no Pallas GPU kernel ran, so there "
                    f"is no trace{stale}")
        return code
    con.out(trace.summary(color=color), keep_sgr=color)
    written = _write_outputs(trace, outputs, con)
    if interrupted:
        con.err("pallas-viz: interrupted (Ctrl-C): the summary above is of the partial trace")
        return EXIT_INTERRUPTED
    if not written:
        return EXIT_USAGE
    if trace.errors:
        return EXIT_FINDINGS
    if raised is not None:
        con.err(f"pallas-viz: {ns.script} raised {type(raised).__name__}")
        return EXIT_SCRIPT_RAISED
    return status or EXIT_CLEAN


def cmd_show(ns, con: _Console) -> int:
    import pallas_viz as pv

    outputs = _prepare_outputs(ns, con, {"the trace being read": ns.trace})
    if outputs is None:
        return EXIT_USAGE
    try:
        trace = pv.load(ns.trace)
        color = _color(ns.color)
        summary = trace.summary(color=color)
        verdict = EXIT_FINDINGS if trace.errors else EXIT_CLEAN
    except pv.TraceFileError as e:
        con.err(f"pallas-viz: {e}")
        return EXIT_USAGE
    except Exception as e:  # a file that loads but does not hold together
        if _debug():
            raise
        con.err(f"pallas-viz: {ns.trace} is not a consistent pallas_viz trace "
                f"({type(e).__name__}: {e})")
        return EXIT_USAGE
    con.out(summary, keep_sgr=color)
    written = _write_outputs(trace, outputs, con, from_file=True)
    return verdict if written else EXIT_USAGE


def cmd_demo(ns, con: _Console) -> int:
    import pallas_viz as pv
    from pallas_viz.examples import collective_in_branch

    outputs = _prepare_outputs(ns, con)
    if outputs is None:
        return EXIT_USAGE
    con.out("pallas_viz demo: a two-thread kernel (grid of 2 blocks) in GPU interpret mode on the "
            "CPU.\nThread 0 alone enters `pl.when(t == 0)` and makes a collective SMEM allocation "
            "there.\nJAX runs it without any error; pallas_viz shows what went wrong:\n")
    fn, args = collective_in_branch()
    with pv.trace() as trace:
        fn(*args)
    color = _color(ns.color)
    con.out(trace.summary(color=color), keep_sgr=color)
    written = _write_outputs(trace, outputs, con)
    return EXIT_CLEAN if written else EXIT_USAGE


def cmd_diff(ns, con: _Console) -> int:
    """Root causes fixed / still there / new between two saved traces (exit 1: a new error)."""
    import pallas_viz as pv

    try:
        before, after = pv.load(ns.before), pv.load(ns.after)
    except pv.TraceFileError as e:
        con.err(f"pallas-viz: {e}")
        return EXIT_USAGE
    d = pv.diff(before, after)
    color = _color(ns.color)
    con.out(d.summary(color=color), keep_sgr=color)
    return EXIT_FINDINGS if d.new_errors else EXIT_CLEAN


_COMMANDS = {"run": cmd_run, "show": cmd_show, "diff": cmd_diff, "demo": cmd_demo}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `pallas-viz` command; returns the exit code (see the module doc)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    con = _Console()
    try:
        parser, run = _parser()
        script_args: list[str] = []
        if argv and argv[0] == "run":
            head, script_args = _split_run(argv[1:], run)
            argv = ["run", *head]
        try:
            ns, extra = parser.parse_known_args(argv)
            if extra:  # (said by the command's own parser, with its own usage line)
                sub = next(a for a in parser._actions
                           if isinstance(a, argparse._SubParsersAction))
                sub.choices[ns.command].error(f"unrecognized arguments: {' '.join(extra)}")
        except SystemExit as e:  # --help (0) or a usage error (2), already printed
            sys.stdout.flush()
            return e.code if isinstance(e.code, int) else EXIT_USAGE
        if ns.command == "run":
            ns.args = script_args
        code = _COMMANDS[ns.command](ns, con)
        if not (con.stdout_gone or con.stdout_failed):
            try:
                sys.stdout.flush()
            except BrokenPipeError:
                con.drop_stdout()
            except (OSError, ValueError):
                con.stdout_failed = True
                con.drop_stdout(broken=False)
        return con.exit_code(code)
    except KeyboardInterrupt:
        con.err("pallas-viz: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        con.drop_stdout()
        return EXIT_BROKEN_PIPE
    except Exception as e:
        from pallas_viz.errors import PallasVizError

        if isinstance(e, PallasVizError):
            con.err(f"pallas-viz: {e}")
            return EXIT_USAGE
        raise


if __name__ == "__main__":
    sys.exit(main())
