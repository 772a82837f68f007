"""pytest plugin: trace the Pallas GPU interpret-mode kernels of your tests with pallas_viz.

Installed with pallas_viz (entry point ``pytest11``); it does nothing unless asked:

``pytest --pallas-viz``
    Runs each phase of every test (its fixtures' setup, its call, their teardown) in its
    own ``pv.trace(raise_errors=False)`` and prints, in the terminal summary, the root
    causes found for each test, one line each (a fixture's as ``test (setup)`` or
    ``test (teardown)``; a module-scoped fixture's in the phase of the test that runs it).
    Tests that ran no Pallas kernel are not reported. Any of the options below turns the
    plugin on as well.
``--pallas-viz-fail-on=error|warning``
    Fails a test that passed but whose kernels have a root cause of that severity (or
    worse), as a failed assertion would: ``@pytest.mark.xfail`` on a test of a known kernel
    bug makes it an expected failure. The default is to report only.
``--pallas-viz-html=DIR``
    Writes one self-contained HTML page per test with findings.
``--pallas-viz-json=DIR``
    Saves the trace of every traced test that ran a kernel (``pv.load()`` it, or compare two
    runs with ``pallas_viz.trace_diff``). File names come from the test node id, sanitised.
``--pallas-viz-races`` / ``--pallas-viz-timeout S``
    ``detect_races=True`` / ``timeout_s=S`` for every traced test. Without it a kernel that
    makes no progress for 120 s is stopped as a deadlock (as ``pallas-viz run`` does).

An output directory that cannot be written is a usage error before any test runs; an
output that fails to be written later fails the run (exit 1).

Markers:

``@pytest.mark.pallas_viz(fail_on="warning", detect_races=True, timeout_s=10)``
    Traces the test even without ``--pallas-viz``; the given keywords override the
    command-line options for that test (``fail_on=None``: report only). The output options
    (``--pallas-viz-html``/``-json``) apply to marked tests too.
``@pytest.mark.no_pallas_viz``
    Never traces the test (it wins over ``pallas_viz``).

A test that starts its own ``pv.trace()`` keeps it: while that block runs, the plugin's
trace steps aside (its hooks out), so the test's trace records its kernels as it would
without the plugin, and the plugin's report leaves them out (its section and summary say
how many kernel runs the test traced itself). A phase that runs inside a test's trace
opened in an earlier phase (a fixture's, from setup to teardown) is not traced by the
plugin: its kernels are that trace's, and its report says so. Only a ``pv.trace()`` the
test starts in another Python thread cannot start while the plugin's records
(``pv.TraceActiveError``; mark such a test ``no_pallas_viz``).

What a test expects stays as it is: a kernel failure propagates into the test unchanged
(``pytest.raises``/``assertRaises`` catch the JAX exception as before, never a
``pv.KernelError``). When a test passes although one of its kernels failed, the test
expected that failure: the root causes of that kernel are reported as "expected" and never
fail the test. A test that fails because a kernel failed in the interpreter (the JAX
exception left the test) is reported root cause first: its failure report starts with the
root causes, one line each as in the terminal summary, and JAX's traceback follows whole;
the short test summary (``FAILED t.py::test_a - error[...] ...``) names the first. A test
that fails for its own reasons is reported with its own failure, as pytest reports it. In
both cases the findings are added as a "pallas_viz" report section.

With pytest-xdist each worker traces its own tests; the findings travel to the controller
in the reports' ``user_properties`` (``("pallas_viz", {...})``) and are printed there.
"""

from __future__ import annotations

import hashlib
import os
import re

import pytest

from .cli import positive_seconds

FAIL_ON = ("error", "warning")
# a kernel without progress for this long is stopped as a deadlock (as `pallas-viz run` and
# `%%pallas_trace` do); `--pallas-viz-timeout` / the marker's `timeout_s` change it
DEFAULT_TIMEOUT_S = 120.0
MARKER_KEYWORDS = ("fail_on", "detect_races", "timeout_s")
PROPERTY = "pallas_viz"  # name of the user_properties entry carrying a test's findings
_RAISING_KINDS = ("interpreter_error", "trace_error", "deadlock")
_STATE = pytest.StashKey[dict]()


def pytest_addoption(parser):
    group = parser.getgroup("pallas_viz", "pallas_viz (Pallas Mosaic GPU kernel allocations)")
    group.addoption("--pallas-viz", action="store_true", default=False, dest="pallas_viz",
                    help="trace every test's Pallas GPU interpret-mode kernels with pallas_viz "
                    "and report their root causes in the terminal summary (any "
                    "--pallas-viz-* option turns it on too)")
    group.addoption("--pallas-viz-fail-on", choices=FAIL_ON, default=None,
                    dest="pallas_viz_fail_on",
                    help="fail a test whose kernels have a root cause of this severity or "
                    "worse (default: report only)")
    group.addoption("--pallas-viz-html", metavar="DIR", default=None, dest="pallas_viz_html",
                    help="write an HTML page per test with findings into DIR")
    group.addoption("--pallas-viz-json", metavar="DIR", default=None, dest="pallas_viz_json",
                    help="save the trace of every traced test that ran a kernel into DIR")
    group.addoption("--pallas-viz-races", action="store_true", default=False,
                    dest="pallas_viz_races", help="turn on JAX's race detection while tracing")
    group.addoption("--pallas-viz-timeout", type=positive_seconds, metavar="S", default=None,
                    dest="pallas_viz_timeout",
                    help="stop a kernel that makes no progress for S seconds as a deadlock "
                    f"(default {DEFAULT_TIMEOUT_S:g})")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "pallas_viz(fail_on=None, detect_races=False, timeout_s=None): trace this test's "
        "Pallas GPU kernels with pallas_viz, even without --pallas-viz")
    config.addinivalue_line("markers", "no_pallas_viz: never trace this test with pallas_viz")
    config.pluginmanager.register(PallasVizPlugin(config), "pallas_viz-plugin")


def file_stem(nodeid: str) -> str:
    """A file name (without extension) for a test node id: `tests/t.py::test_a[1-x]` ->
    `tests_t.py__test_a_1-x_-<hash>`; a short hash of the id is added when characters were
    replaced or the id was cut, so two ids never share a file. (A `/` becoming `_` and `::`
    becoming `__` count: `sub/test_x.py::t` and `sub_test_x.py::t` are two tests; only an
    id of a test file in the rootdir, without `__`, keeps its plain name.)"""
    stem = nodeid.replace("::", "__").replace("/", "_").replace("\\", "_")
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", stem)
    lossy = safe != stem or "/" in nodeid or "\\" in nodeid or "__" in nodeid
    if len(safe) > 120:
        safe, lossy = safe[:120], True
    if lossy:
        safe += "-" + hashlib.sha1(nodeid.encode()).hexdigest()[:8]
    return safe.lstrip(".") or "test"


class PallasVizPlugin:
    """Per-session state: options, and the reports collected for the summary."""

    def __init__(self, config):
        self.config = config
        opt = config.getoption
        self.fail_on = opt("pallas_viz_fail_on")
        self.detect_races = bool(opt("pallas_viz_races"))
        timeout = opt("pallas_viz_timeout")
        self.timeout_s = DEFAULT_TIMEOUT_S if timeout is None else timeout
        base = str(config.invocation_params.dir)
        self.html_dir = _absdir(base, opt("pallas_viz_html"))
        self.json_dir = _absdir(base, opt("pallas_viz_json"))
        # Any of its options turns the plugin on: a CI gate written as
        # `pytest --pallas-viz-fail-on=error` must not pass every test unseen.
        self.enabled = bool(opt("pallas_viz") or self.fail_on or self.detect_races
                            or timeout is not None or self.html_dir or self.json_dir)
        for flag, path in (("--pallas-viz-html", self.html_dir),
                           ("--pallas-viz-json", self.json_dir)):
            if path:
                _writable_dir(flag, path)
        self.results: list[tuple[str, dict]] = []

    # -- which tests, with which settings
    def settings(self, item) -> dict | None:
        """The trace settings of `item`, None if it is not traced. Raises ValueError on a
        malformed marker."""
        if item.get_closest_marker("no_pallas_viz") is not None:
            return None
        marker = item.get_closest_marker("pallas_viz")
        if marker is None and not self.enabled:
            return None
        s = {"fail_on": self.fail_on, "detect_races": self.detect_races,
             "timeout_s": self.timeout_s}
        if marker is not None:
            if marker.args:
                raise ValueError("@pytest.mark.pallas_viz takes keywords only "
                                 f"({', '.join(MARKER_KEYWORDS)})")
            unknown = sorted(set(marker.kwargs) - set(MARKER_KEYWORDS))
            if unknown:
                raise ValueError(f"@pytest.mark.pallas_viz: unknown keyword(s) "
                                 f"{', '.join(unknown)} (known: {', '.join(MARKER_KEYWORDS)})")
            s.update(marker.kwargs)
        if not isinstance(s["detect_races"], bool):
            raise ValueError(f"@pytest.mark.pallas_viz: detect_races must be True or False, "
                             f"not {s['detect_races']!r}")
        if s["fail_on"] not in (None, *FAIL_ON):
            raise ValueError(f"@pytest.mark.pallas_viz: fail_on must be None, 'error' or "
                             f"'warning', not {s['fail_on']!r}")
        from .capture import checked_timeout

        try:
            checked_timeout(s["timeout_s"])
        except ValueError as e:
            raise ValueError(f"@pytest.mark.pallas_viz: {e}") from None
        return s

    # -- tracing each phase of a test: its fixtures' setup, its call, their teardown
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item):
        return (yield from self._phase(item, "setup"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        return (yield from self._phase(item, "call"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item):
        return (yield from self._phase(item, "teardown"))

    def _phase(self, item, when: str):
        """Run one phase of `item` in its own `pv.trace()` (if the test is traced); a phase
        that passed although its kernels have a root cause of the `fail_on` severity
        raises pytest's failure there, as an assertion of the test would (so `xfail`
        treats a known kernel bug as the expected failure)."""
        try:
            settings, problem = self.settings(item), None
        except ValueError as e:
            problem = str(e)
        if problem is not None:  # (said once, by the call; outside the except: no chain)
            if when == "call":
                pytest.fail(problem, pytrace=False)
            return (yield)
        if settings is None:
            return (yield)
        import pallas_viz as pv

        states = item.stash.setdefault(_STATE, {})
        ctx = pv.trace(raise_errors=False, detect_races=bool(settings["detect_races"]),
                       timeout_s=settings["timeout_s"])
        ctx._yield_to_nested = True  # the test's own pv.trace() records its kernels
        try:
            ctx.__enter__()
        except (pv.UnsupportedJaxError, pv.TraceActiveError) as e:
            # a trace of this thread that does not yield: the test's own, opened in an
            # earlier phase (a fixture's), records this phase's kernels
            states[when] = ({"inside_own_trace": True} if getattr(e, "same_thread", False)
                            else {"problem": f"not traced: {type(e).__name__}: {e}"})
            return (yield)
        try:
            result = yield
        except BaseException as exc:
            states[when] = self._finish(item, when, ctx, settings, exc)
            raise  # the test's own exception, unchanged
        state = states[when] = self._finish(item, when, ctx, settings, None)
        if state.get("failing"):
            raise pytest.fail.Exception(state["failure_text"], pytrace=False)
        return result

    def _finish(self, item, when: str, ctx, settings, exc) -> dict:
        """The phase's trace ended: its outputs written, its root causes sorted into the
        test's own and those of a kernel failure the phase expected (it passed anyway)."""
        state = {"settings": settings}
        try:
            # raise_errors=False: returns (True for a kernel failure) instead of raising;
            # the caller re-raises the test's exception itself. KeyboardInterrupt goes on.
            kernel_failed = ctx.__exit__(None if exc is None else type(exc), exc,
                                         None if exc is None else exc.__traceback__)
            # (the phase's exception is a kernel's failure with a root cause found)
            state["kernel_failed"] = exc is not None and kernel_failed is True
        except KeyboardInterrupt:
            raise
        except Exception as e:  # an analysis bug must not change the test's outcome
            state["problem"] = f"analysis failed: {type(e).__name__}: {e}"
        trace = ctx.trace
        state["trace"] = trace
        if trace.meta.get("nested_traces"):
            state["own_traces"] = (trace.meta["nested_traces"],
                                   trace.meta.get("nested_trace_kernels", 0))
        if not trace.ran_kernels:
            return state
        trace.meta["pytest"] = {"nodeid": item.nodeid, "phase": when}  # (the files' test)
        stem = file_stem(item.nodeid) + ("" if when == "call" else f"-{when}")
        try:
            # (a file is named in the report only once it is written)
            if self.json_dir:
                os.makedirs(self.json_dir, exist_ok=True)
                path = os.path.join(self.json_dir, stem + ".json")
                trace.save(path)
                state["json"] = path
            if self.html_dir and trace.findings:
                from .render.html import write_html

                os.makedirs(self.html_dir, exist_ok=True)
                path = os.path.join(self.html_dir, stem + ".html")
                write_html(trace, path, title=f"pallas_viz: {_phase_id(item.nodeid, when)}")
                state["html"] = path
        except Exception as e:
            state["problem"] = f"could not write output: {type(e).__name__}: {e}"
            state["write_failed"] = True
        # A phase that passed although a kernel raised caught that failure: expected.
        failed = _failed_kernels(trace) if exc is None else set()
        roots = list(trace.findings)
        state["actual"] = [f for f in roots if f.kernel not in failed]
        state["expected"] = [f for f in roots if f.kernel in failed]
        fail_on = settings["fail_on"]
        failing = [f for f in state["actual"] if _at_least(f.severity, fail_on)]
        if exc is None and failing:
            state["failing"] = failing
            state["failure_text"] = _failure_text(failing, trace, fail_on,
                                                  _fail_on_source(item, settings), state)
        return state

    # -- the verdict
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        state = item.stash.get(_STATE, {}).pop(call.when, None)
        if state is None:
            return report
        trace = state.get("trace")
        payload: dict = {"ran_kernels": False, "findings": [], "expected": [], "errors": 0,
                         "warnings": 0, "failed_on": None}
        if call.when != "call":
            payload["phase"] = call.when
        if state.get("problem"):
            payload["problem"] = state["problem"]
        if state.get("write_failed"):
            payload["write_failed"] = True
        if report.failed and call.excinfo is not None and _is_trace_active(call.excinfo):
            payload["problem"] = ("the test's own pv.trace() in another Python thread "
                                  "cannot start while the plugin's records: mark the test "
                                  "@pytest.mark.no_pallas_viz")
        if "own_traces" in state:
            traces, kernels = state["own_traces"]
            payload["own_traces"] = traces
            payload["own_trace_kernels"] = kernels
        if state.get("inside_own_trace"):
            payload["inside_own_trace"] = True
        if trace is None or not trace.ran_kernels:
            if "problem" in payload or "own_traces" in payload or "inside_own_trace" in payload:
                report.sections.append(("pallas_viz", _section_text(payload)))
                report.user_properties.append((PROPERTY, payload))
            return report
        payload["ran_kernels"] = True
        for key in ("json", "html"):
            if key in state:
                payload[key] = state[key]
        actual, expected = state["actual"], state["expected"]
        payload["findings"] = _lines(actual, trace)
        payload["expected"] = _lines(expected, trace)
        payload["errors"] = sum(f.severity == "error" for f in actual)
        payload["warnings"] = len(actual) - payload["errors"]
        if report.failed and state.get("kernel_failed"):
            # a kernel failed in the interpreter: its root cause leads the failure report,
            # before JAX's traceback (kept whole after it)
            roots = _failure_roots(actual, trace)
            if roots:
                _lead_with_roots(report, [_line(f, trace) for f in roots])
        if state.get("failing"):
            if report.failed:
                payload["failed_on"] = state["settings"]["fail_on"]
                payload["failed_by"] = _fail_on_source(item, state["settings"])
            elif hasattr(report, "wasxfail"):  # xfail: the kernel bug it expects
                payload["xfailed"] = True
        elif actual or expected or "problem" in payload or "own_traces" in payload:
            report.sections.append(("pallas_viz", _section_text(payload)))
        report.user_properties.append((PROPERTY, payload))
        return report

    # -- the summary (on the xdist controller too: reports arrive here)
    def pytest_runtest_logreport(self, report):
        for name, value in report.user_properties:
            if name == PROPERTY and isinstance(value, dict) and (
                    value.get("phase", "call") == report.when):  # (each phase's own)
                self.results.append((_phase_id(report.nodeid, report.when), value))

    def pytest_sessionfinish(self, session):
        """Outputs asked for and not written fail the run (exit 1), as a test would."""
        if any(p.get("write_failed") for _, p in self.results) and (
                session.exitstatus == pytest.ExitCode.OK):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if not self.enabled and not self.results:
            return
        tw = terminalreporter
        tw.write_sep("=", "pallas_viz")
        ran = [(n, p) for n, p in self.results if p.get("ran_kernels")]
        tests = len({n.split(" (")[0] for n, _ in ran})
        # (in node id order: under xdist reports arrive in the order tests end)
        reported = sorted(((n, p) for n, p in self.results
                           if p["findings"] or p["expected"] or "problem" in p),
                          key=lambda r: r[0])
        for nodeid, p in reported:
            verdict = (f" FAILED ({p.get('failed_by') or 'fail_on=' + p['failed_on']})"
                       if p["failed_on"] else " XFAIL (the kernel bug it expects)"
                       if p.get("xfailed") else "")
            tw.write_line(f"{nodeid}{verdict}", bold=True)
            for line in p["findings"]:
                tw.write_line(f"    {line}", red=line.startswith("error"),
                              yellow=line.startswith("warning"))
            for line in p["expected"]:
                tw.write_line(f"    (expected: the test caught its kernel's failure) {line}")
            if "problem" in p:
                tw.write_line(f"    pallas_viz: {p['problem']}", yellow=True)
            if "html" in p:
                tw.write_line(f"    html: {p['html']}")
        errors = sum(p["errors"] for _, p in ran)
        warnings = sum(p["warnings"] for _, p in ran)
        with_findings = sum(bool(p["findings"]) for _, p in ran)
        failed = sum(bool(p["failed_on"]) for _, p in ran)
        own = [p for _, p in self.results if p.get("own_traces")]
        if own:
            k = sum(p.get("own_trace_kernels", 0) for p in own)
            tw.write_line(f"pallas_viz: {len(own)} test phase(s) traced {k} kernel run(s) in "
                          "their own pv.trace(): left to them, not in this report")
        inside = sum(bool(p.get("inside_own_trace")) for _, p in self.results)
        if inside:
            tw.write_line(f"pallas_viz: {inside} test phase(s) ran inside a pv.trace() of "
                          "their test opened in an earlier phase (a fixture's): left to it, "
                          "not in this report")
        if not ran:
            tw.write_line("pallas_viz: no traced test ran a Pallas GPU kernel in interpret mode")
            return
        tail = f"; {failed} failed by fail-on" if failed else ""
        tw.write_line(f"pallas_viz: {tests} test(s) ran Pallas kernels, {with_findings} "
                      f"with findings: {errors} error and {warnings} warning root cause(s)"
                      f"{tail}")
        for key, wanted, what in (
                ("json", self.json_dir, "trace(s) saved"),
                ("html", self.html_dir, "HTML page(s) written")):
            if not wanted:
                continue
            n = sum(key in p for _, p in ran)
            if n:
                tw.write_line(f"pallas_viz: {n} {what} in {wanted}")
            elif key == "json" or with_findings:
                tw.write_line(f"pallas_viz: no {what.split('(s)')[0]} could be written in "
                              f"{wanted} (see the problems above)", yellow=True)


# --------------------------------------------------------------------------- helpers


def _writable_dir(flag: str, path: str) -> None:
    """Make the output directory `path`, and check a file can be written in it; else a
    usage error before any test runs (exit 4), not artifacts missing from a green run."""
    import tempfile

    try:
        os.makedirs(path, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".pallas_viz-probe-")
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise pytest.UsageError(f"{flag} {path}: cannot write there "
                                f"({e.strerror or type(e).__name__})") from None


def _absdir(base: str, path: str | None) -> str | None:
    if not path:
        return None
    return os.path.normpath(os.path.join(base, os.path.expanduser(path)))


def _at_least(severity: str, fail_on: str | None) -> bool:
    if fail_on is None:
        return False
    return severity == "error" or (fail_on == "warning" and severity == "warning")


def _failed_kernels(trace) -> set:
    """Kernels that raised (None: one JAX rejected before it ran)."""
    out = set()
    if trace.failure is not None:
        out.add(trace.failure.kernel)
    for f in trace.findings:
        for g in (f, *getattr(f, "consequences", [])):
            if g.kind in _RAISING_KINDS:
                out.add(g.kernel)
    return out


def _lines(findings, trace) -> list[str]:
    """Each root cause's line once: the same one in several runs of a kernel (a test that
    calls it in a loop) says in how many."""
    from .analysis.repeats import repeated_roots

    return [_line(f, trace, len(runs)) for f, runs in repeated_roots(findings, trace.kernels)]


def _line(f, trace, runs: int = 1) -> str:
    """The finding's line in the terminal summary, its text escaped (`one_line`)."""
    from .render.inert import one_line

    line = f.one_line()
    if f.kernel is not None and 0 <= f.kernel < len(trace.kernels):
        name = trace.kernels[f.kernel].name
        if name:
            line += f" (kernel {name}" + (f", in {runs} runs)" if runs > 1 else ")")
    n = len(getattr(f, "consequences", []) or [])
    if n:
        line += f" [+{n} consequence(s)]"
    return one_line(line)


def _failure_roots(actual, trace) -> list:
    """The root causes of a kernel failure: those of the kernel(s) that failed, errors
    first (the one `pv.trace()` raises as `KernelError` leads); else every error."""
    failed = _failed_kernels(trace)
    roots = [f for f in actual if f.kernel in failed] or [
        f for f in actual if f.severity == "error"]
    return sorted(roots, key=lambda f: f.severity != "error")


def _lead_with_roots(report, lines: list[str]) -> None:
    """Make `report`'s failure lead with the kernel failure's root causes (`lines`, made
    inert by `_line`): a header above the traceback, and the first root as the first line
    of the crash message, which the short test summary (`FAILED t.py::test - error[...]`)
    and `--tb=line` show. The traceback and the exception's own message follow, unchanged.

    Only pytest's own representation is changed (a native entry put before the first
    traceback's entries), so the report still travels from an xdist worker whole."""
    head = "pallas_viz: root cause{} of the kernel failure below:".format(
        "s" if len(lines) > 1 else "")
    text = "\n".join([head, *(f"    {x}" for x in lines)]) + "\n"
    summary = lines[0] + (f" [+{len(lines) - 1} more root cause(s)]" if len(lines) > 1
                          else "")
    longrepr = report.longrepr
    if isinstance(longrepr, str):  # (its first line is the summary's)
        report.longrepr = f"{summary}\n{text}\n{longrepr}"
        return
    chain = getattr(longrepr, "chain", None)
    first = chain[0][0] if chain else getattr(longrepr, "reprtraceback", None)
    entries = getattr(first, "reprentries", None)
    if entries is None:
        return
    try:  # (pytest's own class of a plain-text entry: the same in 7 and 8)
        from _pytest._code import code as pytest_code
    except ImportError:  # pragma: no cover - a pytest without it: the summary line only
        pytest_code = None
    native = getattr(pytest_code, "ReprEntryNative", None)
    if native is not None:
        # (a "long" entry starts with an empty line of its own; the others do not)
        gap = "" if entries and entries[0].style == "long" else "\n"
        first.reprentries = [native([text + gap]), *entries]
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and isinstance(getattr(crash, "message", None), str):
        crash.message = f"{summary}\n{crash.message}"


def _is_trace_active(excinfo) -> bool:
    from .errors import TraceActiveError

    return excinfo.errisinstance(TraceActiveError)


def _section_text(payload: dict) -> str:
    out = list(payload["findings"])
    out += [f"(expected: the test caught its kernel's failure) {x}"
            for x in payload["expected"]]
    if "problem" in payload:
        out.append(f"pallas_viz: {payload['problem']}")
    if "own_traces" in payload:
        out.append(_own_traces_text(payload))
    if payload.get("inside_own_trace"):
        out.append("pallas_viz: this phase ran inside the test's own pv.trace(), opened in an "
                   "earlier phase (a fixture's): its kernels are left to it, not in this "
                   "report")
    for key in ("html", "json"):
        if key in payload:
            out.append(f"{key}: {payload[key]}")
    return "\n".join(out)


def _own_traces_text(payload: dict) -> str:
    n, k = payload["own_traces"], payload["own_trace_kernels"]
    return (f"pallas_viz: the test's own pv.trace() ({n} block{'' if n == 1 else 's'}) "
            f"recorded {k} kernel run{'' if k == 1 else 's'}: left to it, not in this "
            "report")


def _phase_id(nodeid: str, when: str) -> str:
    """The test's id, with the phase when it is not the call: `t.py::test_a (setup)`."""
    return nodeid if when == "call" else f"{nodeid} ({when})"


def _fail_on_source(item, settings) -> str:
    """What set the test's fail-on: its marker or the command line."""
    marker = item.get_closest_marker("pallas_viz")
    if marker is not None and "fail_on" in marker.kwargs:
        return f"@pytest.mark.pallas_viz(fail_on={settings['fail_on']!r})"
    return f"--pallas-viz-fail-on={settings['fail_on']}"


def _failure_text(failing, trace, fail_on, source, paths) -> str:
    from .render.text import render_finding

    n = len(failing)
    head = f"pallas_viz: {n} root cause(s) of severity {fail_on!r} or worse ({source})"
    parts = [head, ""]
    for f in failing:
        parts.append(render_finding(f, trace, color=False))
        parts.append("")
    for key in ("html", "json"):
        if key in paths:
            parts.append(f"{key}: {paths[key]}")
    return "\n".join(parts).rstrip()
