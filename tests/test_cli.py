"""The `pallas-viz` command: exit codes, summaries, saved traces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

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
    assert "blocks (0..1), threads 0..1" in r.stdout
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
