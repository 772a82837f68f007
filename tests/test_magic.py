"""`%pallas_trace` in a real IPython shell: options, display before errors, files, help."""

from __future__ import annotations

import base64

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
    result = ip.run_cell(cell)
    assert result.success, result.error_in_exec
    tr = ip.user_ns["tr2"]
    assert tr.meta["detect_races"] is True
    assert "y" in ip.user_ns
    f = tr.errors[0]
    lines = cell.splitlines()
    expected = next(i for i, ln in enumerate(lines, 1) if "pl.run_scoped" in ln)
    assert f.source.line == expected  # the line as numbered in the notebook cell
    assert f.source.code.strip() == lines[expected - 1].strip()
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
    for opt in ("-o VAR", "--races", "--no-raise", "--static", "--json PATH", "--html PATH",
                "--timeout S"):
        assert opt in flat
    parser = ip.find_line_magic("pallas_trace").parser
    documented = [a for a in parser._actions if a.help]
    assert len(documented) == 8  # the options above and STATEMENT: none left undocumented
    for action in documented:
        assert " ".join(action.help.replace("%%", "%").split()) in flat, action.dest
