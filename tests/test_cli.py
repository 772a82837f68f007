"""The `pallas-viz` command: exit codes, summaries, saved traces."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from pallas_viz import cli

BIN = os.path.join(os.path.dirname(sys.executable), "pallas-viz")

BUGGY = textwrap.dedent("""
    import sys
    from pallas_viz import examples as ex
    fn, args = getattr(ex, sys.argv[1])()
    fn(*args)
    print("script done")
""")


def run(*args, cwd=None):
    return subprocess.run([BIN, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    p = tmp_path_factory.mktemp("cli") / "user_script.py"
    p.write_text(BUGGY)
    return p


def test_demo_names_block_thread_and_line():
    r = run("demo", "--color", "never")
    assert r.returncode == 0, r.stderr
    assert "error[partial_collective]" in r.stdout
    # the thread axis is named as the kernel names it (`t`)
    assert re.search(r"blocks \(0\.\.1\), (threads|t) 0\.\.1", r.stdout)
    assert 'pl.run_scoped(scoped, plgpu.SMEM(SHAPE, jnp.float32), collective_axes="t")' in r.stdout
    assert "kernels.py:" in r.stdout


def test_run_buggy_script_exits_1_and_saves_json(script, tmp_path):
    out = tmp_path / "t.json"
    r = run("run", str(script), "collective_in_branch", "--json", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "script done" in r.stdout
    assert "partial_collective" in r.stdout
    d = json.loads(out.read_text())
    assert d["format"] == "pallas_viz.trace"
    show = run("show", str(out), "--color", "never")
    assert show.returncode == 1
    assert "error[partial_collective]" in show.stdout


def test_run_clean_script_exits_0(script):
    r = run("run", str(script), "hoisted_collective")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "clean: no findings" in r.stdout


def test_run_failing_kernel_exits_1(script):
    r = run("run", str(script), "barrier_in_branch")
    assert r.returncode == 1
    assert "interpreter_error" in r.stdout
    assert "script done" not in r.stdout


def test_run_script_errors(tmp_path):
    missing = run("run", str(tmp_path / "nope.py"))
    assert missing.returncode == 5 and "no such script" in missing.stderr
    raises = tmp_path / "raises.py"
    raises.write_text("raise RuntimeError('boom before kernels')\n")
    r = run("run", str(raises))
    assert r.returncode == 3
    assert "boom before kernels" in r.stderr
    nokernel = tmp_path / "nokernel.py"
    nokernel.write_text("print('hello')\n")
    r = run("run", str(nokernel))
    assert r.returncode == 4
    assert "no Pallas GPU kernel ran" in r.stdout


@pytest.mark.parametrize("content,needle", [
    ("", "is empty"),
    ('{"format": "pallas_viz.trace", "version": 1, "ev', "not valid JSON"),
    ('{"hello": 1}', "not a pallas_viz trace"),
    ('{"format": "pallas_viz.trace", "version": 99}', "newer"),
    ('{"format": "pallas_viz.trace", "version": 1, "kernels": []}', "corrupt trace"),
])
def test_show_bad_files(tmp_path, content, needle):
    p = tmp_path / "bad.json"
    p.write_text(content)
    r = run("show", str(p))
    assert r.returncode == 2
    assert needle in r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_show_missing_file(tmp_path):
    r = run("show", str(tmp_path / "missing.json"))
    assert r.returncode == 2 and "cannot read" in r.stderr


def test_help_documents_exit_codes():
    r = run("--help")
    assert r.returncode == 0
    for code in ("0  clean", "1  error findings", "3  the script raised", "4  the script ran no"):
        assert code in r.stdout


def test_html_and_png_outputs(script, tmp_path):
    out_json, html, png = tmp_path / "t.json", tmp_path / "t.html", tmp_path / "t.png"
    r = run("run", str(script), "collective_in_branch", "--json", str(out_json),
            "--html", str(html), "--png", str(png))
    assert r.returncode == 1, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = html.read_text()
    assert "partial_collective" in page and "<script" in page
    assert "https://" not in page.split("<script", 1)[0]  # nothing fetched from the network
    html2, png2 = tmp_path / "s.html", tmp_path / "s.png"
    show = run("show", str(out_json), "--html", str(html2), "--png", str(png2))
    assert show.returncode == 1
    assert png2.stat().st_size > 1000 and "partial_collective" in html2.read_text()


def test_show_empty_trace_refuses_pictures(tmp_path):
    import pallas_viz as pv

    with pv.trace() as tr:
        pass
    path = tmp_path / "empty.json"
    tr.save(path)
    r = run("show", str(path), "--png", str(tmp_path / "e.png"))
    assert r.returncode == 2
    assert "no Pallas GPU kernel ran" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "e.png").exists()


# --------------------------------------------------------------------------- hardening

ARGV_SCRIPT = textwrap.dedent("""
    import sys
    from pallas_viz import examples as ex
    print("ARGV", sys.argv[1:])
    fn, args = ex.hoisted_collective(grid=(1,))
    fn(*args)
""")


def _script(tmp_path, body, name="s.py"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


def _argv(out: str) -> list[str]:
    (line,) = [ln for ln in out.splitlines() if ln.startswith("ARGV ")]
    return eval(line[5:])  # noqa: S307 - our own script printed it


def test_options_before_and_after_the_script_and_double_dash(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = _script(tmp_path, ARGV_SCRIPT)
    code = cli.main(["run", str(s), "a", "--color", "never", "-v", "--json=t.json", "b",
                     "--", "--json", "mine", "--color"])
    out = capsys.readouterr().out
    assert code == 0
    assert _argv(out) == ["a", "-v", "b", "--json", "mine", "--color"]
    assert "\x1b[" not in out and (tmp_path / "t.json").exists()
    assert not (tmp_path / "mine").exists()
    code = cli.main(["run", "--color", "always", "--json", "u.json", str(s), "x"])
    out = capsys.readouterr().out
    assert code == 0 and _argv(out) == ["x"] and "\x1b[" in out and (tmp_path / "u.json").exists()
    # everything after `--` before the script goes to it, our options included
    code = cli.main(["run", "--color", "never", "--", str(s), "--color", "always", "--races"])
    out = capsys.readouterr().out
    assert code == 0 and _argv(out) == ["--color", "always", "--races"] and "\x1b[" not in out


def test_one_parser_documents_the_placement():
    parser, run = cli._parser()
    text = " ".join(run.format_help().split())
    assert "are recognised before SCRIPT and anywhere after it" in text
    assert "Everything after `--` goes to the script unchanged" in text
    assert "cmd_run" not in text
    for code in ("130 interrupted", "141 standard output was closed", "N the script called "
                 "sys.exit(N)", "2 bad usage"):
        assert code in text


@pytest.mark.parametrize("argv", [
    ["run", "--timeout", "nan", "x.py"], ["run", "--timeout", "-1", "x.py"],
    ["run", "--timeout=inf", "x.py"], ["run", "--bogus", "x.py"], ["run"],
    ["show"], ["nope"], ["run", "--js", "t.json", "x.py"],  # no abbreviations
])
def test_bad_usage_exits_2(argv, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err


@pytest.mark.parametrize("argv,command", [
    (["show", "a.json", "b.json"], "show"), (["show", "a.json", "--bogus"], "show"),
    (["diff", "a.json", "b.json", "c.json"], "diff")])
def test_extra_arguments_get_the_commands_own_usage(argv, command, capsys):
    # (review W: the top-level usage line, `pallas-viz [-h] COMMAND ...`, was printed)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: pallas-viz {command} ") and (
        f"pallas-viz {command}: error: unrecognized arguments: {argv[-1]}") in err, err


@pytest.mark.parametrize("body,code,stderr", [
    ("raise SystemExit('bye \\x1b[2J now')", 1, "bye \\x1b[2J now"),
    ("raise SystemExit(7)", 7, None),
    ("import sys; sys.exit(0)", 0, None),
    ("import sys; sys.exit(None)", 0, None),
])
def test_script_system_exit(tmp_path, capsys, body, code, stderr):
    s = _script(tmp_path, ARGV_SCRIPT + body + "\n")
    assert cli.main(["run", str(s)]) == code
    captured = capsys.readouterr()
    assert "clean: no findings" in captured.out  # the summary is still printed
    if stderr is not None:
        assert captured.err.strip().splitlines() == [stderr]
    assert "\x1b" not in captured.err


def test_system_exit_does_not_hide_error_findings(tmp_path, capsys):
    s = _script(tmp_path, BUGGY + "raise SystemExit(0)\n")
    assert cli.main(["run", str(s), "collective_in_branch"]) == 1


def test_relative_outputs_follow_the_start_directory(tmp_path, capsys, monkeypatch):
    (tmp_path / "elsewhere").mkdir()
    _script(tmp_path, ARGV_SCRIPT + "import os; os.chdir('elsewhere')\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "s.py", "--json", "t.json", "--html", "t.html"]) == 0
    assert (tmp_path / "t.json").exists() and (tmp_path / "t.html").exists()
    assert list((tmp_path / "elsewhere").iterdir()) == []
    assert os.getcwd() == str(tmp_path)  # restored after the script


def test_base_exception_subclass_is_the_scripts_exception(tmp_path, capsys):
    s = _script(tmp_path, ARGV_SCRIPT + textwrap.dedent("""
        class Stop(BaseException):
            pass

        def deeper():
            raise Stop("stopped \\x1b]0;pwn\\x07 here")

        deeper()
    """))
    assert cli.main(["run", str(s)]) == 3
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    files = re.findall(r'File "([^"]+)"', err)
    assert files == [str(s), str(s)]  # the script's frames only, like Python
    assert "Stop: stopped \\x1b]0;pwn\\x07 here" in err
    assert "\x1b" not in err and "runpy" not in err and "pallas_viz" not in err.split(
        "Stop:")[0]
    assert lines[-1] == f"pallas-viz: {s} raised Stop"


def test_script_exception_before_any_kernel(tmp_path, capsys):
    s = _script(tmp_path, "def f():\n    raise ValueError('early')\nf()\n")
    assert cli.main(["run", str(s)]) == 3
    err = capsys.readouterr().err
    assert "ValueError: early" in err and re.findall(r'File "([^"]+)"', err) == [str(s)] * 2


def test_script_that_traces_itself_gets_one_line(tmp_path, capsys):
    s = _script(tmp_path, """
        import pallas_viz as pv
        from pallas_viz import examples as ex
        fn, args = ex.hoisted_collective(grid=(1,))
        with pv.trace() as tr:
            fn(*args)
    """)
    assert cli.main(["run", str(s)]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert "starts its own pallas_viz.trace()" in line and "run it with `python`" in line
    assert "no Pallas GPU kernel ran" not in captured.out


@pytest.mark.parametrize("option,path,needle", [
    ("--json", "missing/t.json", "directory {tmp}/missing does not exist"),
    ("--html", "{tmp}", "it is a directory"),
    ("--png", "t.xyz", "unknown image format 'xyz'"),
    ("--png", "/sys/t.png", "Permission denied"),
    ("--json", "/sys/t.json", "Permission denied"),
])
def test_unwritable_output_is_refused_before_the_script_runs(tmp_path, capsys, monkeypatch,
                                                              option, path, needle):
    monkeypatch.chdir(tmp_path)
    s = _script(tmp_path, ARGV_SCRIPT)
    assert cli.main(["run", str(s), option, path.format(tmp=tmp_path)]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("pallas-viz: cannot write ") and needle.format(tmp=tmp_path) in line
    assert "ARGV" not in captured.out  # no kernel ran


@pytest.mark.parametrize("option", ["--json", "--html", "--png"])
def test_output_to_dev_full_fails_in_one_line(tmp_path, capsys, option):
    s = _script(tmp_path, ARGV_SCRIPT)
    assert cli.main(["run", str(s), option, "/dev/full"]) == 2
    captured = capsys.readouterr()
    assert "clean: no findings" in captured.out and "written" not in captured.out
    assert "saved" not in captured.out
    assert captured.err.strip().splitlines() == [
        "pallas-viz: cannot write /dev/full: No space left on device"]


def test_png_to_dev_full_subprocess(script):
    r = run("run", str(script), "hoisted_collective", "--png", "/dev/full")
    assert r.returncode == 2
    assert "PNG written" not in r.stdout
    assert r.stderr.strip() == "pallas-viz: cannot write /dev/full: No space left on device"


def test_show_writes_outputs_and_refuses_a_directory(tmp_path, capsys, example_traces):
    p = tmp_path / "t.json"
    example_traces["collective_in_branch"].save(p)
    assert cli.main(["show", str(p), "--html", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().endswith("it is a directory")
    assert cli.main(["show", str(p), "--png", str(tmp_path / "t.svg")]) == 1
    assert "SVG written" in capsys.readouterr().out
    assert (tmp_path / "t.svg").read_text().lstrip().startswith("<?xml")


def test_an_output_never_overwrites_the_script_the_trace_or_another_output(
        tmp_path, capsys, monkeypatch, example_traces):
    # (review W: `run --json victim.py victim.py` replaced the script with the trace, and
    # `show T --json same --html same` said both were written, and kept only the HTML)
    monkeypatch.chdir(tmp_path)
    s = _script(tmp_path, ARGV_SCRIPT)
    before = s.read_text()
    assert cli.main(["run", "--json", str(s), str(s)]) == 2
    err = capsys.readouterr()
    assert err.err.strip() == (f"pallas-viz: --json {s} names the script being run: writing "
                               "it there would overwrite it; give the output a path of its own")
    assert "ARGV" not in err.out and s.read_text() == before  # refused before it ran
    p = tmp_path / "t.json"
    example_traces["collective_in_branch"].save(p)
    saved = p.read_text()
    assert cli.main(["show", str(p), "--html", "t.json"]) == 2
    assert "names the trace being read" in capsys.readouterr().err and p.read_text() == saved
    assert cli.main(["show", str(p), "--json", "same.out", "--html", "./same.out"]) == 2
    assert capsys.readouterr().err.strip() == (
        "pallas-viz: --html ./same.out names the file --json writes: writing it there would "
        "overwrite it; give the output a path of its own")
    assert not (tmp_path / "same.out").exists()


def _poison(obj, text):
    """Put `text` into every code line, function name and message of a saved trace."""
    if isinstance(obj, dict):
        return {k: (v + text if k in ("code", "function", "message", "name") and
                    isinstance(v, str) else _poison(v, text)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_poison(v, text) for v in obj]
    return obj


def test_hostile_trace_prints_inert(tmp_path, capsys, example_traces):
    evil = "\x1b]0;pwn\x07\x1b[2J\u202eevil\u2066"
    d = _poison(example_traces["collective_in_branch"].to_dict(), evil)
    p = tmp_path / "evil.json"
    p.write_text(json.dumps(d))
    assert cli.main(["show", str(p), "--color", "never"]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out
    assert "\\x1b]0;pwn\\x07\\x1b[2J\\u202eevil\\u2066" in out
    assert cli.main(["show", str(p), "--color", "always"]) == 1
    out = capsys.readouterr().out
    assert "\\x1b]0;pwn" in out
    assert set(re.findall(r"\x1b[^\[]", out)) == set()  # only SGR colour sequences remain
    assert all(re.fullmatch(r"\x1b\[[0-9;]*m", m) for m in re.findall(r"\x1b\[[^a-zA-Z]*.", out))


def test_broken_pipe_is_quiet_and_exits_141(tmp_path):
    p = subprocess.Popen([BIN, "demo", "--color", "never"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    assert p.stdout.readline().startswith(b"pallas_viz demo")
    p.stdout.close()  # like `| head -1`
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 141
    assert err == ""
    s = _script(tmp_path, ARGV_SCRIPT + "for i in range(300000):\n    print('line', i)\n")
    out_json = tmp_path / "t.json"
    r = subprocess.run(f"'{BIN}' run '{s}' --json '{out_json}' | head -2", shell=True,
                       capture_output=True, text=True, timeout=300,
                       executable="/bin/bash", env={**os.environ, "SHELLOPTS": "pipefail"})
    assert r.returncode == 141, r.stderr
    assert r.stderr == "" and len(r.stdout.splitlines()) == 2
    assert out_json.exists()  # the outputs are still written


def test_ctrl_c_on_a_stuck_kernel_prints_summary_writes_json_exits_130(tmp_path):
    s = _script(tmp_path, """
        from pallas_viz.examples.deadlock import spin_on_flag
        fn, args = spin_on_flag()  # a thread polls memory: no deadlock check ends it
        print("STARTING", flush=True)
        fn(*args)
    """)
    out_json = tmp_path / "stuck.json"
    p = subprocess.Popen([BIN, "run", str(s), "--json", str(out_json), "--color", "never"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "STARTING"
        time.sleep(2.0)  # the kernel is now stuck on its barrier (no --timeout)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 130, err
    assert "interrupted" in out and "spin_on_flag" in out
    assert f"pallas_viz: trace saved to {out_json}" in out
    assert "Traceback" not in err and "interrupted (Ctrl-C)" in err
    import pallas_viz as pv

    assert pv.load(out_json).meta.get("interrupted") is True


# ------------------------------------------------- UX audit: no kernel, no script, README

NO_TRACE = "no Pallas GPU kernel ran, so there is no trace"
ADVICE = "InterpretGPUParams"  # the empty summary's advice: only for a script that ended well


def test_no_kernel_says_each_output_is_not_written(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _script(tmp_path, "print('hello')\n")
    assert cli.main(["run", "--json", "out.json", "--html", "o.html", "s.py"]) == 4
    captured = capsys.readouterr()
    assert ADVICE in captured.out  # it ended normally: the advice fits
    assert captured.err.splitlines() == [f"pallas-viz: out.json not written: {NO_TRACE}",
                                         f"pallas-viz: o.html not written: {NO_TRACE}"]
    assert sorted(os.listdir(tmp_path)) == ["s.py"]
    # a file left from an earlier run is not the trace of this one: say so
    (tmp_path / "out.json").write_text("old")
    assert cli.main(["run", "s.py", "--json", "out.json"]) == 4
    assert capsys.readouterr().err.splitlines() == [
        f"pallas-viz: out.json not written: {NO_TRACE} (the file already there is left as "
        "it was)"]
    assert (tmp_path / "out.json").read_text() == "old"


def test_no_kernel_subprocess_is_not_silent(tmp_path):
    s = _script(tmp_path, "print('hello')\n")
    out = tmp_path / "out.json"
    r = run("run", "--json", str(out), str(s))
    assert r.returncode == 4
    assert r.stderr.splitlines() == [f"pallas-viz: {out} not written: {NO_TRACE}"]
    assert not out.exists()


@pytest.mark.parametrize("body,code,err", [
    ("raise RuntimeError('boom')\n", 3,
     ["RuntimeError: boom", "pallas-viz: s.py raised RuntimeError before any kernel ran"]),
    ("import sys; sys.exit(2)\n", 2,
     ["pallas-viz: s.py exited with status 2 before any kernel ran"]),
    ("import sys; sys.exit('usage: s.py N')\n", 1,
     ["usage: s.py N", "pallas-viz: s.py exited with status 1 before any kernel ran"]),
    ("raise KeyboardInterrupt\n", 130, ["pallas-viz: interrupted before any kernel ran"]),
])
def test_script_that_stops_before_any_kernel_gets_no_interpret_advice(
        tmp_path, capsys, monkeypatch, body, code, err):
    monkeypatch.chdir(tmp_path)
    _script(tmp_path, body)
    assert cli.main(["run", "s.py", "--json", "t.json"]) == code
    captured = capsys.readouterr()
    assert captured.out == ""  # the crash / exit / Ctrl-C is the news, not InterpretGPUParams
    lines = captured.err.splitlines()
    assert lines[-len(err) - 1:] == [*err, f"pallas-viz: t.json not written: {NO_TRACE}"]
    assert ADVICE not in captured.err and not (tmp_path / "t.json").exists()


def test_script_that_raises_after_a_kernel_still_writes_its_trace(tmp_path, capsys,
                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    _script(tmp_path, ARGV_SCRIPT + "raise RuntimeError('after the kernel')\n")
    assert cli.main(["run", "s.py", "--json", "t.json", "--color", "never"]) == 3
    captured = capsys.readouterr()
    assert "clean: no findings" in captured.out
    assert "pallas_viz: trace saved to t.json" in captured.out
    assert captured.err.splitlines()[-1] == "pallas-viz: s.py raised RuntimeError"
    assert "not written" not in captured.err and (tmp_path / "t.json").exists()


@pytest.mark.parametrize("args", [["run"], ["run", "--races"], ["run", "--"]])
def test_run_without_script_names_only_script(args):
    r = run(*args)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert lines[0].startswith("usage: pallas-viz run [-h]")
    assert "SCRIPT [ARGS ...]" in r.stderr
    assert lines[-1] == "pallas-viz run: error: the following arguments are required: SCRIPT"


def test_run_a_directory_or_a_device_is_not_a_script(tmp_path, capsys):
    assert cli.main(["run", str(tmp_path)]) == 5
    assert capsys.readouterr().err == f"pallas-viz: {tmp_path} is a directory, not a script\n"
    assert cli.main(["run", "/dev/null"]) == 5
    assert capsys.readouterr().err == "pallas-viz: /dev/null is not a regular file, not a script\n"
    assert cli.main(["run", str(tmp_path / "nope.py")]) == 5
    assert capsys.readouterr().err == f"pallas-viz: no such script: {tmp_path / 'nope.py'}\n"
    r = run("run", "/tmp")
    assert (r.returncode, r.stderr, r.stdout) == (
        5, "pallas-viz: /tmp is a directory, not a script\n", "")


def _readme_command_line() -> str:
    readme = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "README.md")
    with open(readme, encoding="utf-8") as f:
        section = f.read().split("## Command line", 1)[1].split("\n## ", 1)[0]
    return section.split("```text", 1)[1].split("```", 1)[0]


def test_readme_command_line_lists_every_option():
    block = _readme_command_line()
    parser, _run = cli._parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sub in commands.choices.items():
        assert f"pallas-viz {name}" in block
        for action in sub._actions:
            for opt in action.option_strings:
                if opt.startswith("--") and opt != "--help":
                    assert opt in block, (name, opt)


def test_help_wording():
    text = run("run", "--help").stdout
    assert "SCRIPT [ARGS ...]" in text and "the Python script to run, as __main__" in text
    flat = " ".join(run("--help").stdout.split())
    assert "an output (--json/--html/--png/ --perfetto, or standard output itself)" in flat
    assert "5 SCRIPT does not exist, or is a directory or another non-regular file" in flat
    diff = " ".join(run("diff", "--help").stdout.split())
    assert "(auto: when stdout is a terminal and NO_COLOR is unset)" in diff


PALLAS_CALL_GRID = textwrap.dedent("""
    from pallas_viz.examples import corpus
    fn, args = corpus.CLEAN_KERNELS["pallas_call_scratch"]()
    fn(*args)
    print("script done")
""")


def test_races_in_the_interpreters_shared_smem_copy_do_not_fail_a_correct_kernel(tmp_path):
    # a correct pallas_call with a grid: JAX's race detection stops it on the one SMEM copy
    # GPU interpret mode shares among its blocks. That is a warning, explained (no script
    # traceback, no exit 3), and not an error (exit 0: `--races` in CI passes it)
    s = tmp_path / "pc.py"
    s.write_text(PALLAS_CALL_GRID)
    r = run("run", "--races", "--color", "never", str(s))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning[race]" in r.stdout and "0 error(s), 1 warning(s)" in r.stdout
    assert "Traceback" not in r.stderr and "raised" not in r.stderr, r.stderr
    # JAX 0.12 stops the run on the race (0.11 logs it and goes on), and the warning says so
    stopped = "script done" not in r.stdout
    assert ("race detection stopped the run there" in r.stdout) is stopped


def test_run_has_the_magics_watchdog_by_default():
    # (review K2: a kernel spinning on memory, which the deadlock check cannot see, kept
    # `pallas-viz run` running for good without --timeout; %%pallas_trace stops it at 120 s)
    from pallas_viz.cli import _parser

    _, sub = _parser()
    assert sub.parse_args(["x.py"]).timeout == 120.0
    assert sub.parse_args(["--timeout", "5", "x.py"]).timeout == 5.0
    r = run("run", "--help")
    assert "(default 120, as in Jupyter)" in " ".join(r.stdout.split()), r.stdout


def test_run_refuses_a_saved_trace(script, tmp_path, capsys):
    # (review P: `pallas-viz run trace.json` ran the JSON as Python, exit 3, and printed the
    # whole trace in the traceback)
    out = tmp_path / "t.json"
    assert run("run", str(script), "collective_in_branch", "--json", str(out)).returncode == 1
    assert cli.main(["run", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"pallas-viz: {out} is a saved trace, not a script: show it with "
                           f"`pallas-viz show {out}`")
