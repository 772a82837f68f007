"""The pytest plugin (`pytest --pallas-viz`, the markers) on real kernels, through pytester.

Most runs are in-process (`runpytest_inprocess`: no new JAX import, the reports are at
hand); pytester drops the modules a run imports afterwards, so `warm` first runs traced
kernels here to import every module they need. The xdist run and the import check run in
subprocesses.
"""

from __future__ import annotations

import os
import re
import types
from fnmatch import fnmatch

import jax
import pytest

import pallas_viz as pv
from pallas_viz import pytest_plugin as plugin
from pallas_viz.examples import kernels as ex
from pallas_viz.examples import races as race_ex

pytest_plugins = ["pytester"]

# (a conftest: the plugin's trace spans a test's fixtures, so the check runs after each
# test's whole protocol; the count is printed at the end of the run)
CONFTEST = """
import pytest

from pallas_viz import _jax

LEFT = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    out = yield
    if _jax.hooks_installed():
        LEFT.append(item.nodeid)
    return out


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"hooks left installed after: {LEFT}")
"""

HEADER = """
import unittest

import pytest

from pallas_viz.examples import deadlock, kernels as ex, races


def run(builder):
    fn, args = builder()
    return fn(*args).block_until_ready()
"""

MAIN = HEADER + """

def test_buggy():
    run(ex.collective_in_branch)


def test_clean():
    run(ex.hoisted_collective)


def test_no_kernel():
    assert True


def test_expects_kernel_error():
    with pytest.raises(Exception) as info:
        run(ex.aliased_after_branch)
    # the JAX exception itself, not a pallas_viz one
    assert type(info.value).__name__ == "JaxRuntimeError"


class TestWithUnittest(unittest.TestCase):
    def test_assert_raises(self):
        with self.assertRaises(Exception):
            run(ex.aliased_after_branch)


def test_own_failure():
    run(ex.collective_in_branch)
    assert 1 == 2, "fails for its own reason"


@pytest.mark.no_pallas_viz
def test_opted_out():
    run(ex.collective_in_branch)


@pytest.mark.pallas_viz(fail_on=None)
def test_marker_report_only():
    run(ex.collective_in_branch)
"""

MARKED = HEADER + """

def test_unmarked():
    run(ex.collective_in_branch)


@pytest.mark.pallas_viz(fail_on="warning")
def test_marked_fails():
    run(ex.collective_in_branch)


@pytest.mark.pallas_viz(detect_races=True)
def test_marked_race():
    run(races.unsynchronized_handoff)


@pytest.mark.pallas_viz(timeout_s=1)
def test_marked_deadlock_expected():
    with pytest.raises(Exception):
        run(deadlock.barrier_handshake_in_branch)


@pytest.mark.pallas_viz(fail_on="fatal")
def test_bad_marker():
    pass


@pytest.mark.pallas_viz(timeout_s=-5)
def test_bad_timeout():
    pass
"""


@pytest.fixture(scope="module")
def warm():
    """Import (by running them) every module the in-process runs' kernels need."""
    fn, args = ex.collective_in_branch()
    with pv.trace(raise_errors=False) as tr:
        fn(*args)
    tr.save(os.devnull)
    tr.to_html(os.devnull)
    from pallas_viz.render.text import render_finding

    render_finding(tr.findings[0], tr)
    fn, args = race_ex.unsynchronized_handoff()
    with pv.trace(raise_errors=False, detect_races=True):
        try:  # JAX 0.12 stops the run on the race (0.11 logs it and runs on)
            fn(*args).block_until_ready()
        except jax.errors.JaxRuntimeError:
            pass
    import pallas_viz.examples.deadlock  # noqa: F401
    import pallas_viz.simulate  # noqa: F401
    import pallas_viz.trace_diff  # noqa: F401


def _write(pytester, **modules) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(**modules)


def _no_hooks_left(result) -> None:
    result.stdout.fnmatch_lines(["hooks left installed after: []"])


def _reports(result) -> dict:
    """test name -> its call-phase report."""
    reports = result.reprec.getreports("pytest_runtest_logreport")
    return {r.nodeid.split("::")[-1]: r for r in reports if r.when == "call"}


def _payload(report) -> dict | None:
    found = [v for k, v in report.user_properties if k == plugin.PROPERTY]
    assert len(found) <= 1
    return found[0] if found else None


def _section(report) -> str:
    return "\n".join(c for name, c in report.sections if name == "pallas_viz")


def test_pallas_viz_flag_end_to_end(pytester, warm):
    _write(pytester, test_kernels=MAIN)
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--pallas-viz", "--pallas-viz-fail-on=error",
        "--pallas-viz-json", "out/json", "--pallas-viz-html", "out/html")
    result.assert_outcomes(passed=6, failed=2)
    _no_hooks_left(result)
    reps = _reports(result)

    # fail-on=error fails the buggy test, with the finding rendered in full
    buggy = reps["test_buggy"]
    assert buggy.failed
    text = str(buggy.longrepr)
    assert "--pallas-viz-fail-on=error" in text
    assert "partial_collective" in text and "pl.run_scoped" in text
    assert _payload(buggy)["failed_on"] == "error"
    assert _payload(buggy)["errors"] == 1

    # a test failing for its own reason keeps its failure; findings come as a section
    own = reps["test_own_failure"]
    assert own.failed and "fails for its own reason" in str(own.longrepr)
    assert "pallas_viz" not in str(own.longrepr)
    assert "error[partial_collective]" in _section(own)
    assert _payload(own)["failed_on"] is None

    # expected kernel errors: the test catches the JAX exception, the finding does not
    # fail it and is reported as expected
    for name in ("test_expects_kernel_error", "test_assert_raises"):
        rep = reps[name]
        assert rep.passed, rep.longrepr
        p = _payload(rep)
        assert p["findings"] == [] and p["expected"], p
        assert p["errors"] == 0

    # clean and kernel-free tests; the opted-out and the report-only-marked ones
    assert reps["test_clean"].passed
    assert _payload(reps["test_clean"]) == {
        "ran_kernels": True, "findings": [], "expected": [], "errors": 0, "warnings": 0,
        "failed_on": None, "json": _payload(reps["test_clean"])["json"]}
    assert _payload(reps["test_no_kernel"]) is None
    assert _payload(reps["test_opted_out"]) is None
    assert reps["test_opted_out"].passed
    marked = reps["test_marker_report_only"]
    assert marked.passed and _payload(marked)["errors"] == 1
    assert "error[partial_collective]" in _section(marked)

    # the terminal summary: one block per test with findings, nothing for the others
    out = result.stdout.str()
    summary = out[out.index("= pallas_viz ="):]
    result.stdout.fnmatch_lines([
        "*= pallas_viz =*",
        "test_kernels.py::test_buggy FAILED (--pallas-viz-fail-on=error)",
        "    error?partial_collective? *kernels.py:*: collective SMEM buffer*",
        "pallas_viz: 6 test(s) ran Pallas kernels, 3 with findings: 3 error and 0 warning "
        "root cause(s); 1 failed by fail-on",
    ])
    assert "(expected: the test caught its kernel's failure) error[" in summary
    for quiet in ("test_clean", "test_no_kernel", "test_opted_out"):
        assert quiet not in summary

    # JSON for every traced test that ran a kernel, HTML for those with findings
    json_dir, html_dir = pytester.path / "out" / "json", pytester.path / "out" / "html"
    ran = {"test_buggy", "test_clean", "test_expects_kernel_error",
           "TestWithUnittest__test_assert_raises", "test_own_failure",
           "test_marker_report_only"}
    assert sorted(p.name for p in json_dir.iterdir()) == sorted(
        f"test_kernels.py__{n}.json" for n in ran)
    assert sorted(p.name for p in html_dir.iterdir()) == sorted(
        f"test_kernels.py__{n}.html" for n in ran - {"test_clean"})
    tr = pv.load(json_dir / "test_kernels.py__test_buggy.json")
    assert [f.kind for f in tr.findings] == ["partial_collective"]
    assert tr.kernels[0].name == "collective_in_branch"
    assert pv.load(json_dir / "test_kernels.py__test_clean.json").findings == []
    assert "<html" in (html_dir / "test_kernels.py__test_buggy.html").read_text().lower()
    assert f"pallas_viz: 6 trace(s) saved in {json_dir}" in summary
    assert f"pallas_viz: 5 HTML page(s) written in {html_dir}" in summary


def test_an_output_directory_that_cannot_be_written_is_a_usage_error(pytester, warm):
    # (review P: each test reported the problem and the run exited 0, the artifacts
    # missing from a green CI run)
    _write(pytester, test_out=HEADER + """

def test_buggy():
    open("ran", "a").close()  # (a mark: the test ran)
    run(ex.collective_in_branch)
""")
    (pytester.path / "afile").write_text("not a directory")
    for flag, where in (("--pallas-viz-json", "afile"), ("--pallas-viz-html", "afile/sub")):
        result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--pallas-viz",
                                              f"{flag}={where}")
        assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
        text = result.stdout.str() + result.stderr.str()
        assert f"{flag} {pytester.path / where}: cannot write there" in text, text
        # before any test runs: the exit code alone would also come from a check made
        # when the run ends, after the tests and their kernels ran
        assert not (pytester.path / "ran").exists(), text
    assert (pytester.path / "afile").read_text() == "not a directory"


def test_an_output_that_fails_to_be_written_fails_the_run(pytester, warm):
    # the directory was fine at the start; a test replaced it with a file
    _write(pytester, test_out=HEADER + """
import shutil


def test_buggy():
    shutil.rmtree("out")
    with open("out", "w") as f:
        f.write("a file now")
    run(ex.collective_in_branch)
""")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--pallas-viz-json=out")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    summary = out[out.index("= pallas_viz ="):]
    assert "could not write output" in summary, summary
    assert "saved in" not in summary, summary
    assert "pallas_viz: no trace could be written in" in summary


def test_markers_without_flag(pytester, warm):
    _write(pytester, test_marked=MARKED)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    # JAX 0.12 stops the race's run with a JaxRuntimeError (0.11 logs it and runs on)
    stops = not jax.__version__.startswith("0.11.")
    result.assert_outcomes(passed=3 - stops, failed=3 + stops)
    _no_hooks_left(result)
    reps = _reports(result)

    assert reps["test_unmarked"].passed and _payload(reps["test_unmarked"]) is None

    fails = reps["test_marked_fails"]
    assert fails.failed and _payload(fails)["failed_on"] == "warning"
    # (review P: the summary credited --pallas-viz-fail-on, which was not given)
    assert "(@pytest.mark.pallas_viz(fail_on='warning'))" in str(fails.longrepr)
    assert "--pallas-viz-fail-on" not in str(fails.longrepr)

    # detect_races=True: the race is the root cause; the test's own JAX error wins
    race = reps["test_marked_race"]
    assert race.failed == stops and ("JaxRuntimeError" in str(race.longrepr)) == stops
    assert "error[race]" in _section(race)

    # timeout_s=1: the deadlock is stopped, the test expected the kernel to fail
    dead = reps["test_marked_deadlock_expected"]
    assert dead.passed
    assert any("deadlock" in x for x in _payload(dead)["expected"]), _payload(dead)

    bad = reps["test_bad_marker"]
    assert bad.failed and "fail_on must be None, 'error' or 'warning'" in str(bad.longrepr)
    # said once (not again as the context of another exception)
    assert str(bad.longrepr).count("fail_on must be None") == 1, str(bad.longrepr)
    assert "During handling" not in str(bad.longrepr)
    bad = reps["test_bad_timeout"]
    assert bad.failed and ("timeout_s must be None or a finite positive number of seconds, "
                           "not -5") in str(bad.longrepr)
    result.stdout.fnmatch_lines([
        "*= pallas_viz =*",
        "test_marked.py::test_marked_fails FAILED (@pytest.mark.pallas_viz(fail_on='warning'))",
    ])


OWN_TRACE = HEADER + """
import threading

import pallas_viz as pv


def own(builder):
    with pv.trace(raise_errors=False) as tr:
        run(builder)
    return tr


@pytest.fixture
def fixture_trace():
    # (opened in the setup phase, closed in the teardown phase: each its own plugin trace)
    with pv.trace(raise_errors=False) as tr:
        yield tr
    assert [f.kind for f in tr.findings] == ["partial_collective"]


def test_a_fixture_s_trace(fixture_trace):
    run(ex.collective_in_branch)


def test_own_trace_only():
    tr = own(ex.collective_in_branch)
    assert [f.kind for f in tr.findings] == ["partial_collective"]


@pytest.mark.parametrize("i", range(3))
def test_own_trace_then_a_bug(i):
    tr = own(ex.hoisted_collective)
    assert tr.findings == [] and len(tr.kernels) == 1
    run(ex.collective_in_branch)  # after the test's own trace: the plugin's again


def test_a_bug_then_own_traces():
    run(ex.collective_in_branch)
    for _ in range(2):
        assert own(ex.hoisted_collective).findings == []


def test_own_trace_in_another_thread():
    errors = []

    def worker():
        try:
            own(ex.hoisted_collective)
        except pv.TraceActiveError as e:
            errors.append(e)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    raise errors[0]


@pytest.mark.no_pallas_viz
def test_opted_out_own_trace():
    assert own(ex.hoisted_collective).kernels
"""


def test_a_test_s_own_trace_is_left_to_it(pytester, warm):
    """The plugin's trace steps aside while a test's own `pv.trace()` runs: the test's
    trace sees its kernels as without the plugin, the plugin reports the kernels run
    outside it (after it too) and says how many it left to the test."""
    _write(pytester, test_own=OWN_TRACE)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--pallas-viz",
                                          "--pallas-viz-fail-on=error")
    _no_hooks_left(result)
    result.assert_outcomes(passed=3, failed=5, errors=0)  # the fixture's teardown too
    reps = _reports(result)
    outcomes = {name: r.outcome for name, r in reps.items()}
    assert outcomes == {
        "test_a_fixture_s_trace": "passed", "test_own_trace_only": "passed",
        "test_own_trace_then_a_bug[0]": "failed",
        "test_own_trace_then_a_bug[1]": "failed", "test_own_trace_then_a_bug[2]": "failed",
        "test_a_bug_then_own_traces": "failed", "test_own_trace_in_another_thread": "failed",
        "test_opted_out_own_trace": "passed"}, outcomes
    # its own trace found the bug; the plugin's has no kernel of its own to report
    p = _payload(reps["test_own_trace_only"])
    assert (p["ran_kernels"], p["findings"], p["own_traces"], p["own_trace_kernels"]) == (
        False, [], 1, 1)
    assert "recorded 1 kernel run: left to it, not in this report" in _section(
        reps["test_own_trace_only"])
    # the bug after (or before) the test's own traces is the plugin's: one root, the same
    # line in every run
    lines = set()
    for name in ("test_own_trace_then_a_bug[0]", "test_own_trace_then_a_bug[1]",
                 "test_own_trace_then_a_bug[2]", "test_a_bug_then_own_traces"):
        p = _payload(reps[name])
        assert p["ran_kernels"] and p["errors"] == 1 and len(p["findings"]) == 1, (name, p)
        assert p["failed_on"] == "error"
        assert p["findings"][0].startswith("error[partial_collective]"), p
        lines.add(p["findings"][0])
        assert (p["own_traces"], p["own_trace_kernels"]) == (
            (2, 2) if name == "test_a_bug_then_own_traces" else (1, 1)), (name, p)
    assert len(lines) == 1, lines
    # a trace in another Python thread still cannot start: the hint names the marker
    rep = reps["test_own_trace_in_another_thread"]
    assert "TraceActiveError" in str(rep.longrepr)
    assert "another Python thread" in _section(rep)
    assert "@pytest.mark.no_pallas_viz" in _section(rep)
    assert _payload(reps["test_opted_out_own_trace"]) is None
    # the fixture's trace, open from setup to teardown, records the call's kernel: the
    # call is left to it, said as such (not as a problem)
    p = _payload(reps["test_a_fixture_s_trace"])
    assert p["inside_own_trace"] and not p["ran_kernels"] and "problem" not in p, p
    text = _section(reps["test_a_fixture_s_trace"])
    assert "ran inside the test's own pv.trace(), opened in an earlier phase" in text, text
    assert "TraceActiveError" not in text
    result.stdout.fnmatch_lines([
        "pallas_viz: 5 test phase(s) traced 6 kernel run(s) in their own pv.trace(): "
        "left to them, not in this report",
        "pallas_viz: 2 test phase(s) ran inside a pv.trace() of their test opened in an "
        "earlier phase (a fixture's): left to it, not in this report"])
    assert "not traced: TraceActiveError" not in result.stdout.str()


def test_plugin_imports_no_jax_when_off(pytester):
    """The entry point loads the plugin in every pytest run of the environment: cheap."""
    pytester.makepyfile(test_light="""
        import sys

        def test_no_jax():
            assert "jax" not in sys.modules
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "= pallas_viz =" not in result.stdout.str()  # no summary when off


@pytest.mark.slow
def test_xdist_workers_report_to_the_controller(pytester):
    pytest.importorskip("xdist")
    _write(pytester, test_par=HEADER + """

def test_buggy():
    run(ex.collective_in_branch)


def test_clean():
    run(ex.hoisted_collective)


def test_expects_kernel_error():
    with pytest.raises(Exception):
        run(ex.aliased_after_branch)


def test_kernel_fails():
    run(ex.aliased_after_branch)
""")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "2", "--pallas-viz", "--pallas-viz-fail-on=error")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines([
        "*= pallas_viz =*",
        "pallas_viz: 4 test(s) ran Pallas kernels, 2 with findings: 2 error and 0 warning "
        "root cause(s); 1 failed by fail-on",
    ])
    out = result.stdout.str()
    summary = out[out.index("= pallas_viz ="):]
    assert "test_par.py::test_buggy FAILED (--pallas-viz-fail-on=error)" in summary
    assert "test_par.py::test_expects_kernel_error" in summary
    assert "test_clean" not in summary
    # a kernel's failure leads with its root cause on the controller too (the report
    # travelled from a worker), JAX's traceback after it
    block = _failure_block(out, "test_kernel_fails")
    assert block[1].startswith("[gw"), block[:3]  # (xdist's worker line)
    assert block[2] == "pallas_viz: root cause of the kernel failure below:", block[:4]
    assert block[3].startswith("    error[partial_collective] "), block[:4]
    assert _index(block, TRACEBACK_START["long"]) > 3
    result.stdout.fnmatch_lines([
        "FAILED test_par.py::test_kernel_fails - error?partial_collective? *"])


def test_file_stem():
    assert plugin.file_stem("test_a.py::test_b") == "test_a.py__test_b"
    # a test in a subdirectory and its look-alike in the rootdir: two files (review W)
    sub, flat = plugin.file_stem("sub/test_x.py::test_a"), plugin.file_stem("sub_test_x.py::test_a")
    assert sub != flat and sub.startswith("sub_test_x.py__test_a-") and len(sub) == 30
    assert flat == "sub_test_x.py__test_a"
    assert plugin.file_stem("t.py::a__b") != plugin.file_stem("t.py::a::b")
    s = plugin.file_stem("tests/test_a.py::test_b[1-x y/z]")
    assert s.startswith("tests_test_a.py__test_b_1-x_y_z_-") and len(s) == 41
    # different ids that sanitise alike keep different names
    assert plugin.file_stem("t.py::f[a b]") != plugin.file_stem("t.py::f[a_b]")
    long = plugin.file_stem("t.py::" + "x" * 300)
    assert len(long) == 129 and long != plugin.file_stem("t.py::" + "x" * 301)
    assert not plugin.file_stem("..::x").startswith(".")


@pytest.mark.parametrize("fail_on, severity, expected", [
    (None, "error", False), ("error", "error", True), ("error", "warning", False),
    ("warning", "warning", True), ("warning", "error", True)])
def test_fail_on_threshold(fail_on, severity, expected):
    assert plugin._at_least(severity, fail_on) is expected


def test_registered_markers(pytester):
    result = pytester.runpytest_inprocess("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.pallas_viz(fail_on=None, *",
                                 "@pytest.mark.no_pallas_viz: *"])


def test_one_line_form_is_the_model_s():
    f = pv.Finding(kind="leak", severity="warning", message="m", cells=[], events=[],
                   source=pv.SourceLocation("k.py", 3, 4))
    assert f.one_line() == "warning[leak] k.py:3:5: m"


@pytest.mark.parametrize("value", ["-5", "0", "nan", "inf", "abc"])
def test_a_bad_timeout_option_is_a_usage_error(pytester, value):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("--pallas-viz", f"--pallas-viz-timeout={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--pallas-viz-timeout*seconds*"])


@pytest.mark.parametrize("value", [-5, 0, float("nan"), float("inf"), "abc", True])
def test_a_bad_timeout_s_is_refused_before_anything_runs(value):
    with pytest.raises(ValueError, match="timeout_s must be None or a finite positive"):
        pv.trace(timeout_s=value)


FIXTURES = HEADER + """

@pytest.fixture
def buggy_setup():
    run(ex.collective_in_branch)
    yield


@pytest.fixture(scope="module")
def buggy_module():
    run(ex.collective_in_branch)
    yield


@pytest.fixture
def buggy_teardown():
    yield
    run(ex.collective_in_branch)


@pytest.fixture
def deadlocks():
    run(deadlock.barrier_handshake_in_branch)


def test_setup(buggy_setup):
    run(ex.hoisted_collective)


def test_module(buggy_module):
    pass


def test_teardown(buggy_teardown):
    pass


def test_deadlocking_fixture(deadlocks):
    pass


def test_plain():
    run(ex.hoisted_collective)
"""


def test_fixtures_are_traced_in_their_phase(pytester, warm):
    # (review P: kernels of fixtures were not traced: their bugs passed fail-on, and a
    # deadlock in one hung the suite)
    _write(pytester, test_fix=FIXTURES)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--pallas-viz-fail-on=error",
                                          "--pallas-viz-json=out")
    _no_hooks_left(result)
    reports = result.reprec.getreports("pytest_runtest_logreport")
    by = {(r.nodeid.split("::")[-1], r.when): r for r in reports}
    # a root cause of a fixture fails its phase: an error of the test, as a fixture's assert
    for name, when in (("test_setup", "setup"), ("test_module", "setup"),
                       ("test_teardown", "teardown")):
        rep = by[(name, when)]
        assert rep.failed, (name, when)
        assert "partial_collective" in str(rep.longrepr), str(rep.longrepr)
        p = _payload(rep)
        assert p["phase"] == when and p["failed_on"] == "error" and p["errors"] == 1, p
    assert ("test_setup", "call") not in by  # (a failed setup: the test does not run)
    assert by[("test_teardown", "call")].passed
    # the wait-for check stops the fixture's deadlock: the fixture raises, the test errors
    dead = by[("test_deadlocking_fixture", "setup")]
    assert dead.failed and "JaxRuntimeError" in str(dead.longrepr)
    assert any("deadlock" in x for x in _payload(dead)["findings"]), _payload(dead)
    assert by[("test_plain", "call")].passed
    result.stdout.fnmatch_lines([
        "*= pallas_viz =*",
        "test_fix.py::test_module (setup) FAILED (--pallas-viz-fail-on=error)",
        "*error?partial_collective?*",
        "test_fix.py::test_setup (setup) FAILED (--pallas-viz-fail-on=error)",
        "*error?partial_collective?*",
        "test_fix.py::test_teardown (teardown) FAILED (--pallas-viz-fail-on=error)",
    ])
    out = pytester.path / "out"
    assert (out / "test_fix.py__test_setup-setup.json").exists()
    assert (out / "test_fix.py__test_plain.json").exists()  # a call's clean kernel
    tr = pv.load(out / "test_fix.py__test_teardown-teardown.json")
    assert tr.meta["pytest"] == {"nodeid": "test_fix.py::test_teardown", "phase": "teardown"}
    assert [f.kind for f in tr.findings] == ["partial_collective"]
    # the default watchdog, as `pallas-viz run` has it
    assert tr.meta["timeout_s"] == plugin.DEFAULT_TIMEOUT_S == 120.0


XFAIL = HEADER + """

@pytest.mark.xfail(strict=True, reason="known kernel bug")
def test_known_bug_strict():
    run(ex.collective_in_branch)


@pytest.mark.xfail(reason="known kernel bug")
def test_known_bug():
    run(ex.collective_in_branch)


@pytest.mark.xfail(raises=ZeroDivisionError, reason="another error expected")
def test_other_error_expected():
    run(ex.collective_in_branch)


@pytest.mark.pallas_viz(detect_races="yes")
def test_bad_races_keyword():
    pass
"""


def test_fail_on_alone_turns_tracing_on_and_xfail_expects_a_kernel_bug(pytester, warm):
    # (review P: `--pallas-viz-fail-on=error` without `--pallas-viz` traced nothing and
    # passed the buggy test; a known kernel bug under xfail(strict=True) failed as XPASS)
    _write(pytester, test_x=XFAIL)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--pallas-viz-fail-on=error",
                                          "-rxX")
    _no_hooks_left(result)
    reps = _reports(result)
    for name in ("test_known_bug_strict", "test_known_bug"):
        rep = reps[name]
        assert rep.skipped and hasattr(rep, "wasxfail"), (name, rep.outcome)
        assert _payload(rep)["xfailed"] is True
    other = reps["test_other_error_expected"]
    assert other.failed and "partial_collective" in str(other.longrepr)
    bad = reps["test_bad_races_keyword"]
    assert bad.failed and ("detect_races must be True or False, not 'yes'"
                           in str(bad.longrepr)), str(bad.longrepr)
    result.stdout.fnmatch_lines(["test_x.py::test_known_bug XFAIL (the kernel bug it expects)"])
    result.assert_outcomes(xfailed=2, failed=2)


LEAD = HEADER + """
from pallas_viz import simulate


def test_kernel_fails():
    run(ex.aliased_after_branch)


def test_thread_id():
    with simulate.simulate_nonzero_thread_device_requests():
        run(ex.hoisted_collective)


def test_own_failure():
    run(ex.collective_in_branch)
    assert 1 == 2, "fails for its own reason"


def test_plain():
    assert 1 == 2
"""

# test -> the text of JAX's error (which of the aliased allocations a thread reaches first
# and finds of the wrong kind varies from run to run); how a traceback starts in each style
LEAD_ERRORS = {"test_kernel_fails": "ValueError: ",
               "test_thread_id": "`thread_id` must be zero when allocating a buffer for all "
                                 "threads"}
TRACEBACK_START = {"long": ">   outs = pallas_helpers.kernel(",
                   "short": "*/jax/_src/pallas/mosaic_gpu/core.py:*: in wrapper",
                   "native": "Traceback (most recent call last):"}


def _failure_block(out: str, name: str) -> list[str]:
    """The lines of test `name`'s failure report: from its `___ name ___` line to the next
    test's, or to the next `===` part of the output."""
    lines = out.splitlines()
    start = next(i for i, x in enumerate(lines) if re.fullmatch(rf"_+ {name} _+", x))
    end = next((i for i in range(start + 1, len(lines))
                if re.fullmatch(r"_+ \S+ _+|=+ .* =+", lines[i])), len(lines))
    return lines[start:end]


def _index(lines: list[str], pattern: str) -> int:
    return next(i for i, x in enumerate(lines) if fnmatch(x, pattern))


def test_a_kernel_failure_is_reported_root_cause_first(pytester, warm):
    # (review: JAX's long traceback came first, the root cause only in the section after it)
    _write(pytester, test_lead=LEAD)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--pallas-viz", "-rA")
    result.assert_outcomes(failed=4)
    _no_hooks_left(result)
    reps, out = _reports(result), result.stdout.str()
    for name, error in LEAD_ERRORS.items():
        (root,) = _payload(reps[name])["findings"]  # the terminal summary's line
        block = _failure_block(out, name)
        # right under the test's header: the root cause, in the summary's one-line form
        assert block[1:3] == ["pallas_viz: root cause of the kernel failure below:",
                              f"    {root}"], block[:4]
        # then JAX's traceback, kept whole, and the pallas_viz section after it
        jax_tb = _index(block, TRACEBACK_START["long"])
        assert 3 < jax_tb < _index(block, f"E *{error}*")
        assert _index(block, "*JaxRuntimeError*") > jax_tb
        section = _index(block, "*- pallas_viz -*")
        assert section > _index(block, "*: JaxRuntimeError") and block[section + 1] == root
        # the short test summary and the crash message name it too, before JAX's message
        (short,) = [x for x in out.splitlines() if x.startswith(f"FAILED test_lead.py::{name}")]
        shown = short.split(" - ", 1)[1].removesuffix("...")
        assert len(shown) > 20 and root.startswith(shown), short
        message = reps[name].longrepr.reprcrash.message
        assert message.split("\n")[0] == root and error in message
    # the partial_collective root of the aliased buffers, the simulated thread_id error's
    assert _payload(reps["test_kernel_fails"])["findings"][0].startswith(
        "error[partial_collective] ")
    assert _payload(reps["test_thread_id"])["findings"][0].startswith(
        f"error[nonzero_thread_collective] {pytester.path / 'test_lead.py'}:")

    # a test failing for its own reason (its kernel did not fail) keeps its own report;
    # a plain one (no kernel) is reported exactly as pytest reports it without the plugin
    own = reps["test_own_failure"]
    assert "pallas_viz" not in str(own.longrepr)
    assert own.longrepr.reprcrash.message.startswith("AssertionError: fails for its own")
    plain = _failure_block(out, "test_plain")
    result.stdout.fnmatch_lines(["FAILED test_lead.py::test_plain - assert 1 == 2"])
    without = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:pallas_viz",
                                           "-rA", "-k", "test_plain")
    without.assert_outcomes(failed=1)
    # (the conftest's summary line follows the failures when no pallas_viz summary does)
    assert plain == [x for x in _failure_block(without.stdout.str(), "test_plain")
                     if not x.startswith("hooks left installed after")], plain
    assert str(reps["test_plain"].longrepr) == str(_reports(without)["test_plain"].longrepr)
    without.stdout.fnmatch_lines(["FAILED test_lead.py::test_plain - assert 1 == 2"])

    # the other traceback styles: the root first, JAX's traceback after it
    for tb in ("short", "native"):
        result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--pallas-viz",
                                              f"--tb={tb}", "-k", "test_kernel_fails")
        result.assert_outcomes(failed=1)
        block = _failure_block(result.stdout.str(), "test_kernel_fails")
        root = _payload(_reports(result)["test_kernel_fails"])["findings"][0]
        assert block[1:4] == ["pallas_viz: root cause of the kernel failure below:",
                              f"    {root}", ""], (tb, block[:5])
        assert _index(block, TRACEBACK_START[tb]) == 4, (tb, block[:6])
        assert any(LEAD_ERRORS["test_kernel_fails"] in x for x in block[5:]), tb


def test_the_root_leading_a_failure_is_inert():
    """Kernel text (file and kernel names, messages) reaches the failure report escaped,
    each root on its one line: no terminal control sequence, no line of its own."""
    evil = "\x1b]0;pwned\x07\u202e\x1b[2J"
    loc = pv.SourceLocation(f"/k/k{evil}.py", 3, 0, "body", "x = 1" + evil)
    f = pv.Finding("leak", "error", f"m{evil}\nPASSED", [(0, (0,), 0)], [], loc, kernel=0)
    tr = pv.Trace(kernels=[pv.KernelInfo(0, "k" + evil, None, 1, 2, 1)], findings=[f])
    line = plugin._line(f, tr)
    try:
        raise RuntimeError("the kernel failed")
    except RuntimeError:
        info = pytest.ExceptionInfo.from_current()
    report = types.SimpleNamespace(longrepr=info.getrepr())
    plugin._lead_with_roots(report, [line, line])
    text = str(report.longrepr)
    shown = text + report.longrepr.reprcrash.message
    assert not set("\x1b\x07\u202e") & set(shown)
    assert "\\x1b]0;pwned\\x07\\u202e" in shown
    lines = text.splitlines()
    assert lines[:3] == ["pallas_viz: root causes of the kernel failure below:",
                         f"    {line}", f"    {line}"]
    assert "PASSED" not in [x.strip() for x in lines]
    assert "RuntimeError: the kernel failed" in text  # the traceback, after
    assert report.longrepr.reprcrash.message == (
        f"{line} [+1 more root cause(s)]\nRuntimeError: the kernel failed")
    report = types.SimpleNamespace(longrepr="a report as text")
    plugin._lead_with_roots(report, [line])
    assert report.longrepr == (f"{line}\npallas_viz: root cause of the kernel failure below:\n"
                               f"    {line}\n\na report as text")


LOOP = HEADER + """

def test_buggy_in_a_loop():
    fn, args = ex.collective_in_branch()
    for _ in range(3):
        fn(*args).block_until_ready()
"""


def test_a_kernel_called_in_a_loop_is_one_line(pytester, warm):
    _write(pytester, test_loop=LOOP)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--pallas-viz")
    result.assert_outcomes(passed=1)
    (p,) = [_payload(r) for r in _reports(result).values()]
    assert p["errors"] == 3 and len(p["findings"]) == 1, p
    assert p["findings"][0].endswith("(kernel collective_in_branch, in 3 runs) "
                                     "[+2 consequence(s)]"), p["findings"]
    _no_hooks_left(result)
