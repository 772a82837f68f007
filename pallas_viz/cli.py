"""`pallas-viz`: run a script with every kernel traced, show a saved trace, or the demo.

Exit codes:
  0  clean: no error findings
  1  error findings (the summary names them)
  2  bad usage, or a trace file that cannot be read
  3  the script raised an exception of its own (not a kernel failure)
  4  the script ran no Pallas GPU kernel in interpret mode
  5  the script file does not exist
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback

EXIT_CLEAN, EXIT_FINDINGS, EXIT_USAGE, EXIT_SCRIPT_RAISED, EXIT_NO_KERNEL, EXIT_NO_SCRIPT = (
    0, 1, 2, 3, 4, 5)

_OUTPUT_OPTIONS = ("--json", "--html", "--png")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pallas-viz",
        description="See the allocations of Pallas Mosaic GPU kernels in GPU interpret mode.",
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def outputs(sp):
        sp.add_argument("--json", metavar="PATH", help="save the trace as JSON")
        sp.add_argument("--html", metavar="PATH", help="write a self-contained HTML view")
        sp.add_argument("--png", metavar="PATH", help="write the block x thread grid as PNG")
        sp.add_argument("--color", choices=("auto", "always", "never"), default="auto")

    run = sub.add_parser(
        "run", help="run a Python script with every kernel traced",
        description="Run SCRIPT with every Pallas GPU interpret-mode kernel traced, print the "
        "diagnosis. Options may come before or after the script's own arguments; put the "
        "script's arguments after `--` if they clash with ours.")
    run.add_argument("script", metavar="SCRIPT")
    run.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS")
    run.add_argument("--races", action="store_true", help="turn on JAX's race detection")
    run.add_argument("--timeout", type=float, metavar="S",
                     help="stop a kernel that makes no progress for S seconds (deadlock)")
    outputs(run)

    show = sub.add_parser("show", help="print the summary of a saved trace")
    show.add_argument("trace", metavar="TRACE.json")
    outputs(show)

    demo = sub.add_parser("demo", help="diagnose a bundled kernel with a collective-allocation bug")
    outputs(demo)
    return p


def _split_trailing_options(args: list[str]) -> tuple[list[str], list[str]]:
    """Move our output options out of a script's arguments (not after `--`)."""
    script_args, ours = [], []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            script_args.extend(args[i + 1:])
            break
        if a in _OUTPUT_OPTIONS + ("--timeout",) and i + 1 < len(args):
            ours += [a, args[i + 1]]
            i += 2
            continue
        if a.split("=", 1)[0] in _OUTPUT_OPTIONS + ("--timeout",):
            ours.append(a)
        elif a == "--races":
            ours.append(a)
        else:
            script_args.append(a)
        i += 1
    return script_args, ours


def _color(opt: str) -> bool:
    if opt == "always":
        return True
    if opt == "never" or os.environ.get("NO_COLOR"):
        return False
    return sys.stdout.isatty()


def _write_outputs(trace, ns) -> None:
    if ns.json:
        trace.save(ns.json)
        print(f"pallas_viz: trace saved to {ns.json}")
    if ns.html:
        trace.to_html(ns.html)
        print(f"pallas_viz: HTML view written to {ns.html}")
    if ns.png:
        trace.plot().savefig(ns.png, dpi=120)
        print(f"pallas_viz: PNG written to {ns.png}")


def _verdict(trace) -> int:
    return EXIT_FINDINGS if trace.errors else EXIT_CLEAN


def cmd_run(ns) -> int:
    import pallas_viz as pv

    if not os.path.isfile(ns.script):
        print(f"pallas-viz: no such script: {ns.script}", file=sys.stderr)
        return EXIT_NO_SCRIPT
    script_args, ours = _split_trailing_options(ns.args)
    if ours:
        opts = argparse.ArgumentParser(prog="pallas-viz run")
        for o in _OUTPUT_OPTIONS:
            opts.add_argument(o)
        opts.add_argument("--timeout", type=float)
        opts.add_argument("--races", action="store_true")
        extra = opts.parse_args(ours)
        for k in ("json", "html", "png", "timeout"):
            if getattr(extra, k) is not None:
                setattr(ns, k, getattr(extra, k))
        ns.races = ns.races or extra.races
    sys.argv = [ns.script, *script_args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(ns.script)))
    raised = None
    tr = pv.trace(raise_errors=False, detect_races=ns.races, timeout_s=ns.timeout)
    try:
        with tr as trace:
            runpy.run_path(ns.script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raised = e
    except Exception as e:  # the script's own exception, not a kernel failure
        raised = e
    trace = tr.trace
    if raised is not None and not isinstance(raised, SystemExit):
        tb = traceback.TracebackException.from_exception(raised)
        tb.stack = traceback.StackSummary.from_list(
            [f for f in tb.stack if os.path.abspath(f.filename) != os.path.abspath(__file__)
             and "runpy" not in f.filename])
        print("".join(tb.format()), file=sys.stderr, end="")
    if not trace.ran_kernels:
        print(trace.summary())
        if raised is not None:
            print(f"pallas-viz: {ns.script} raised {type(raised).__name__} before any kernel "
                  "ran", file=sys.stderr)
            return EXIT_SCRIPT_RAISED
        return EXIT_NO_KERNEL
    print(trace.summary(color=_color(ns.color)))
    _write_outputs(trace, ns)
    if trace.errors:
        return EXIT_FINDINGS
    if raised is not None:
        print(f"pallas-viz: {ns.script} raised {type(raised).__name__}", file=sys.stderr)
        return EXIT_SCRIPT_RAISED
    return EXIT_CLEAN


def cmd_show(ns) -> int:
    import pallas_viz as pv

    try:
        trace = pv.load(ns.trace)
    except pv.TraceFileError as e:
        print(f"pallas-viz: {e}", file=sys.stderr)
        return EXIT_USAGE
    print(trace.summary(color=_color(ns.color)))
    _write_outputs(trace, ns)
    return _verdict(trace)


def cmd_demo(ns) -> int:
    import pallas_viz as pv
    from pallas_viz.examples import collective_in_branch

    print("pallas_viz demo: a two-thread kernel (grid of 2 blocks) in GPU interpret mode on the "
          "CPU.\nThread 0 alone enters `pl.when(t == 0)` and makes a collective SMEM allocation "
          "there.\nJAX runs it without any error; pallas_viz shows what went wrong:\n")
    fn, args = collective_in_branch()
    with pv.trace() as trace:
        fn(*args)
    print(trace.summary(color=_color(ns.color)))
    _write_outputs(trace, ns)
    return EXIT_CLEAN


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `pallas-viz` command."""
    ns = _parser().parse_args(argv)
    try:
        return {"run": cmd_run, "show": cmd_show, "demo": cmd_demo}[ns.command](ns)
    except KeyboardInterrupt:
        print("pallas-viz: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        from pallas_viz.errors import PallasVizError

        if isinstance(e, PallasVizError):
            print(f"pallas-viz: {e}", file=sys.stderr)
            return EXIT_USAGE
        raise


if __name__ == "__main__":
    sys.exit(main())
