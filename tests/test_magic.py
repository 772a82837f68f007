"""`%pallas_trace` in a real IPython shell: options, display before errors, files, help."""

from __future__ import annotations

import base64
import re

import pytest
from IPython.core.error import UsageError

import pallas_viz as pv

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def _outputs(ip) -> list[dict]:
    return [o["data"] for o in ip.display_pub.outputs]


def test_kernel_error_displays_then_fails_concisely(ip, capsys):
    result = ip.run_cell("%pallas_trace -o tr failing(*fa)")
    assert isinstance(result.error_in_exec, pv.KernelError)
    (data,) = _outputs(ip)  # shown before the cell failed
    assert WIDGET_MIME in data
    assert base64.b64decode(data["image/png"]).startswith(b"\x89PNG")
    tr = ip.user_ns["tr"]
    assert isinstance(tr, pv.Trace) and tr.failure is not None
    assert data["text/plain"] == tr.summary()
    out = capsys.readouterr().out
    # the root cause leads; the interpreter's error is folded under it
    assert "pallas_viz.KernelError: error[partial_collective]" in out
    assert "error[interpreter_error]" in out
    assert "Traceback" not in out and "JaxRuntimeError" not in out


def test_no_raise_static_and_files(ip, tmp_path):
    jpath, hpath = tmp_path / "t.json", tmp_path / "t page.html"
    ip.run_line_magic(
        "pallas_trace", f"--no-raise --static -o tr --json {jpath} --html '{hpath}' failing(*fa)")
    (data,) = _outputs(ip)
    assert WIDGET_MIME not in data and set(data) == {"image/png", "text/plain"}
    tr = ip.user_ns["tr"]
    assert tr.errors and tr.errors[0].kind == "partial_collective"
    assert "interpreter_error" in [c.kind for c in tr.errors[0].consequences]
    saved = pv.load(jpath)
    assert [f.kind for f in saved.findings] == [f.kind for f in tr.findings]
    html = hpath.read_text(encoding="utf-8")
    assert "<html" in html.lower() and "interpreter_error" in html


def test_cell_magic_kernel_defined_in_cell(ip):
    body = """\
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

def body(x_ref, o_ref):
    t = jax.lax.axis_index("t")
    @pl.when(t == 0)
    def _():
        def scoped(buf):
            o_ref[...] = x_ref[...]
        pl.run_scoped(scoped, plgpu.SMEM((8, 128), jnp.float32), collective_axes="t")

k = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((8, 128), jnp.float32), grid=(1,),
                 grid_names=("g",), num_threads=2, thread_name="t",
                 interpret=plgpu.InterpretGPUParams())
y = k(jnp.ones((8, 128), jnp.float32))
"""
    cell = "%%pallas_trace -o tr2 --races\n" + body
    number = ip.execution_count  # (IPython counts the cell before it runs it)
    result = ip.run_cell(cell, store_history=True)
    assert result.success, result.error_in_exec
    assert result.execution_count == number and ip.execution_count == number + 1
    tr = ip.user_ns["tr2"]
    assert tr.meta["detect_races"] is True
    assert "y" in ip.user_ns
    f = tr.errors[0]
    lines = cell.splitlines()
    expected = next(i for i, ln in enumerate(lines, 1) if "pl.run_scoped" in ln)
    assert f.source.line == expected  # the line as numbered in the notebook cell
    assert f.source.code.strip() == lines[expected - 1].strip()
    # labelled with the cell's own number (review N: "In [N+1]", the next cell's)
    from pallas_viz.render.source_names import describe_location

    assert describe_location(f.source.file, f.source.line) == f"In [{number}], line {expected}"
    assert len(_outputs(ip)) == 1


def test_unrelated_error_still_shows_trace(ip):
    result = ip.run_cell("%%pallas_trace -o tr\nclean(*ca)\nraise KeyError('boom')")
    assert isinstance(result.error_in_exec, KeyError)
    (data,) = _outputs(ip)
    assert "clean: no findings" in data["text/plain"]
    assert len(ip.user_ns["tr"].kernels) == 1


def test_no_kernel_says_so(ip, capsys):
    ip.run_line_magic("pallas_trace", "-o tr y = 40 + 2")
    out = capsys.readouterr().out
    assert "no Pallas GPU kernel ran in interpret mode" in out and out.count("\n") == 1
    assert _outputs(ip) == []
    assert ip.user_ns["y"] == 42 and not ip.user_ns["tr"].ran_kernels


def test_no_kernel_names_the_files_it_did_not_write(ip, capsys, tmp_path):
    js, page = tmp_path / "t.json", tmp_path / "t.html"
    ip.run_line_magic("pallas_trace", f"--json {js} --html {page} y = 40 + 2")
    captured = capsys.readouterr()
    assert "no Pallas GPU kernel ran in interpret mode" in captured.out
    assert captured.err == (
        f"pallas_viz: {js} not written: no Pallas GPU kernel ran, so there is no trace\n"
        f"pallas_viz: {page} not written: no Pallas GPU kernel ran, so there is no trace\n")
    assert not js.exists() and not page.exists()
    # a cell that raised before any kernel: its error, no advice, the files still named
    result = ip.run_cell(f"%%pallas_trace --json {js}\nraise KeyError('boom')")
    assert isinstance(result.error_in_exec, KeyError)
    captured = capsys.readouterr()
    assert "no Pallas GPU kernel ran in interpret mode" not in captured.out
    assert f"pallas_viz: {js} not written" in captured.err and not js.exists()


@pytest.mark.parametrize("line", ["--bogus 1", "--timeout abc 1", "-o", "", "--timeout 0 1",
                                  "x = 'unclosed"])
def test_bad_options_are_usage_errors(ip, line):
    with pytest.raises(UsageError):
        ip.run_line_magic("pallas_trace", line)


def test_cell_magic_takes_only_options(ip):
    with pytest.raises(UsageError):
        ip.run_cell_magic("pallas_trace", "-o tr 1 + 1", "x = 1")


def test_help(ip):
    """`%pallas_trace?` shows the usage and every option with its own help, as plain text."""
    shown = ip.object_inspect_mime("%pallas_trace")["text/plain"]
    assert "\x1b[" not in shown  # no terminal colour codes
    flat = " ".join(shown.split())  # argparse wraps the help to the terminal's width
    assert "%pallas_trace [options] STATEMENT" in flat and "%%pallas_trace [options] CELL" in flat
    for opt in ("-o VAR", "--diff VAR", "--races", "--no-raise", "--static", "--json PATH",
                "--html PATH", "--timeout S"):
        assert opt in flat
    parser = ip.find_line_magic("pallas_trace").parser
    documented = [a for a in parser._actions if a.help]
    assert len(documented) == 9  # the options above and STATEMENT: none left undocumented
    for action in documented:
        assert " ".join(action.help.replace("%%", "%").split()) in flat, action.dest


def _diff_lines(out: str) -> list[str]:
    """The lines of the diff summary the magic printed (JAX may print progress before)."""
    lines = out.splitlines()
    return lines[next(i for i, ln in enumerate(lines) if ln.startswith("kernel ")):]


@pytest.fixture
def pair(ip):
    """`bug(*ba)` (a collective allocation in a `pl.when` branch) and `fix(*fa)` (hoisted)."""
    ip.run_cell("bug, ba = ex.collective_in_branch()\nfix, fa = ex.hoisted_collective()")
    yield ip
    for name in ("bug", "ba", "fix", "fa"):
        ip.user_ns.pop(name, None)


def test_diff_buggy_then_fixed(pair, capsys):
    """`--diff tr` shows the new trace, then pv.diff(tr, new) says what the fix changed."""
    ip = pair
    ip.run_line_magic("pallas_trace", "--static -o tr bug(*ba)")
    before = ip.user_ns["tr"]
    assert [f.kind for f in before.errors] == ["partial_collective"]
    capsys.readouterr()
    ip.display_pub.clear_output()
    result = ip.run_cell("%%pallas_trace --static --diff tr -o tr2\nfix(*fa)")
    assert result.success, result.error_in_exec
    after = ip.user_ns["tr2"]
    assert ip.user_ns["tr"] is before and after.findings == []
    (data,) = _outputs(ip)  # the new trace is displayed as without --diff
    assert data["text/plain"] == after.summary()
    out = capsys.readouterr().out
    summary = pv.diff(before, after).summary()
    assert out.endswith(summary + "\n")  # printed last, as TraceDiff.summary() has it
    lines = summary.splitlines()
    assert lines[0] == ("kernel collective_in_branch -> hoisted_collective (paired by order: "
                        "the names differ): 1 root cause fixed, 0 still there, 0 new")
    assert lines[1].startswith("  fixed: error[partial_collective]")
    assert lines[-1].startswith(
        "pallas_viz diff: 1 root cause fixed, 0 still there, 0 new (no new error)")
    # the other way round (line magic, `--diff=VAR`): the bug comes back as new
    ip.run_line_magic("pallas_trace", "--static --diff=tr2 bug(*ba)")
    back = _diff_lines(capsys.readouterr().out)
    assert back[0].endswith("0 root causes fixed, 0 still there, 1 new")
    assert back[-1].startswith("pallas_viz diff: 0 root causes fixed, 0 still there, 1 new "
                               "(1 new error(s))")


def test_diff_against_the_same_kernel_is_empty(pair, capsys):
    ip = pair
    ip.run_line_magic("pallas_trace", "--static -o tr bug(*ba)")
    capsys.readouterr()
    ip.run_line_magic("pallas_trace", "--static -o tr --diff tr bug(*ba)")  # -o may reuse it
    lines = _diff_lines(capsys.readouterr().out)
    assert lines == [
        "kernel collective_in_branch: 0 root causes fixed, 1 still there, 0 new",
        lines[1],
        "  allocations: same sequences in every block and thread",
        "pallas_viz diff: no change (1 root cause still there, same allocations)",
    ]
    assert lines[1].startswith("  still: error[partial_collective]")
    assert len(_outputs(ip)) == 2  # both traces shown


@pytest.mark.parametrize(("value", "message"), [
    (None, "--diff 'before': no such variable; keep a trace in it first "
           "(%pallas_trace -o before ... or before = pallas_viz.load(PATH))"),
    ("42", "--diff 'before': not a pallas_viz.Trace (its value is of type int); keep one "
           "with -o before or before = pallas_viz.load(PATH)"),
    ("tr.summary()", "--diff 'before': not a pallas_viz.Trace (its value is of type str); "
                     "keep one with -o before or before = pallas_viz.load(PATH)"),
])
def test_diff_needs_a_kept_trace(ip, capsys, value, message):
    """Checked before the code runs; one line, no traceback, in IPython's usage-error style."""
    ip.user_ns.pop("before", None)
    if value is not None:
        ip.run_line_magic("pallas_trace", "--static -o tr clean(*ca)")
        ip.run_cell(f"before = {value}")
    ip.display_pub.clear_output()
    capsys.readouterr()
    with pytest.raises(UsageError, match="^" + re.escape(message) + "$"):
        ip.run_line_magic("pallas_trace", "--diff before y = clean(*ca)")
    result = ip.run_cell("%%pallas_trace --diff before\ny = clean(*ca)")
    assert isinstance(result.error_before_exec or result.error_in_exec, UsageError)
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    assert captured.err == f"UsageError: {message}\n"
    assert "y" not in ip.user_ns and _outputs(ip) == []  # nothing ran
    ip.user_ns.pop("before", None)


def test_diff_when_no_kernel_ran(ip, capsys):
    ip.run_line_magic("pallas_trace", "--static -o tr clean(*ca)")
    capsys.readouterr()
    ip.run_line_magic("pallas_trace", "--diff tr y = 40 + 2")
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "no Pallas GPU kernel ran in interpret mode" in out


BUDGET_CELL = """\
%%pallas_trace -o {out} --no-raise
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
{pad}
def big(x_ref, o_ref):
    def scoped(buf):
        o_ref[...] = x_ref[...]
    pl.run_scoped(scoped, plgpu.SMEM((256, 256), jnp.float32))

k = plgpu.kernel(big, out_type=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                 interpret=plgpu.InterpretGPUParams())
y = k(jnp.ones((8, 128), jnp.float32))
"""


def test_texts_name_notebook_cells_as_the_notebook_does(ip):
    # (review N: "live then: ... at 3932423606.py:7" and a diff's "moved from
    # /tmp/ipykernel_.../2205036975.py:11 to ...", where the rest says "In [8], line 7")
    first = ip.execution_count
    assert ip.run_cell(BUDGET_CELL.format(out="b1", pad=""), store_history=True).success
    assert ip.run_cell(BUDGET_CELL.format(out="b2", pad="\n"), store_history=True).success
    (f,) = ip.user_ns["b1"].errors
    assert f.kind == "smem_over_budget"
    assert f"live then: (256, 256) float32 256.0 KiB at In [{first}], line 9" in f.message, \
        f.message
    text = pv.diff(ip.user_ns["b1"], ip.user_ns["b2"]).summary(color=False)
    assert f"moved from In [{first}], line 9 to In [{first + 1}], line 10" in text, text
    assert "ipython-input" not in text and "ipython-input" not in f.message


def test_a_cells_own_error_shows_its_frames_not_the_magics(ip, capsys):
    # (review N: the traceback of a cell's own KeyError listed pallas_viz's magic.py frames)
    result = ip.run_cell("%%pallas_trace -o tr\nx = 1\nraise KeyError('boom')")
    assert isinstance(result.error_in_exec, KeyError)
    out = capsys.readouterr().out
    assert "raise KeyError('boom')" in out and "KeyError: 'boom'" in out, out
    assert "magic.py" not in out and "self.shell.ex(code)" not in out, out


def test_the_line_magic_has_its_expressions_value(ip):
    # (review N: `y = %pallas_trace kA(x)` left y None; %time gives the value)
    ip.run_cell("y = %pallas_trace -o tr clean(*ca)")
    y, tr = ip.user_ns["y"], ip.user_ns["tr"]
    assert y is not None and y.shape == (8, 128), y
    assert tr.ran_kernels and not tr.findings
    ip.run_line_magic("pallas_trace", "-o tr2 z = clean(*ca)")  # a statement: no value
    assert ip.user_ns["z"].shape == (8, 128)
