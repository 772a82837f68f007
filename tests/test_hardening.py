"""Untrusted input and unwritable output: atomic writes, inert text, the widget's requests,
the magic's options. Every bad input gets one clear line, never a traceback or a hang."""

from __future__ import annotations

import base64
import dataclasses
import os
import stat
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError

import pallas_viz as pv
from pallas_viz import fileio
from pallas_viz.errors import OutputError
from pallas_viz.model import SourceLocation
from pallas_viz.render.inert import safe_for_stdout, terminal_safe
from pallas_viz.trace import Trace

# Not writable even for root: sysfs refuses new files.
UNWRITABLE_DIR = "/sys"
linux_only = pytest.mark.skipif(not os.path.isdir("/sys/kernel") or not os.path.exists("/dev/full"),
                                reason="needs Linux /sys and /dev/full")


# --------------------------------------------------------------------------- fileio

def _one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("cannot write ")
    return msg


def test_atomic_write_replaces_and_keeps_mode(tmp_path):
    p = tmp_path / "t.json"
    p.write_text("old")
    os.chmod(p, 0o640)
    fileio.atomic_write_text(p, "new ✓")
    assert p.read_text(encoding="utf-8") == "new ✓"
    assert stat.S_IMODE(p.stat().st_mode) == 0o640
    fileio.atomic_write_bytes(tmp_path / "b.bin", b"\x00\x01")
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["b.bin", "t.json"]  # no temp left


def test_new_file_gets_umask_mode(tmp_path):
    old = os.umask(0o027)
    try:
        fileio.atomic_write_text(tmp_path / "n.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "n.txt").stat().st_mode) == 0o640


def test_failed_writer_leaves_old_file_and_no_temp(tmp_path):
    p = tmp_path / "t.html"
    p.write_text("old")
    with pytest.raises(RuntimeError):
        with fileio.atomic_output(p, "w") as f:
            f.write("half a file")
            raise RuntimeError("writer bug")
    with pytest.raises(KeyboardInterrupt):
        with fileio.atomic_path(p) as tmp:
            open(tmp, "w").write("half")
            raise KeyboardInterrupt
    assert p.read_text() == "old"
    assert [x.name for x in tmp_path.iterdir()] == ["t.html"]


def test_symlinked_output_keeps_its_link(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    fileio.atomic_write_text(link, "new")
    assert link.is_symlink() and target.read_text() == "new"


def test_missing_directory_is_a_directory_and_not_a_directory(tmp_path):
    with pytest.raises(OutputError) as e:
        fileio.atomic_write_text(tmp_path / "no" / "such" / "t.json", "x")
    assert f"directory {tmp_path / 'no' / 'such'} does not exist" in _one_line(e)
    with pytest.raises(OutputError) as e:
        fileio.atomic_write_text(tmp_path, "x")
    assert _one_line(e).endswith("it is a directory")
    (tmp_path / "f").write_text("a file")
    with pytest.raises(OutputError) as e:
        fileio.atomic_write_bytes(tmp_path / "f" / "t.png", b"x")
    assert _one_line(e).endswith(f"{tmp_path / 'f'} is not a directory")
    with pytest.raises(OutputError) as e:
        fileio.atomic_write_text("a\0b", "x")
    assert "NUL" in _one_line(e)
    assert list(tmp_path.iterdir()) == [tmp_path / "f"]


@linux_only
def test_full_disk_and_unwritable_place():
    with pytest.raises(OutputError) as e:
        fileio.atomic_write_text("/dev/full", "x" * 100)
    assert _one_line(e) == "cannot write /dev/full: No space left on device"
    with pytest.raises(OutputError) as e:
        with fileio.atomic_path("/dev/full") as p:
            with open(p, "wb") as f:
                f.write(b"x")
    assert "No space left" in _one_line(e)
    with pytest.raises(OutputError) as e:
        fileio.atomic_write_text(f"{UNWRITABLE_DIR}/pallas_viz_test.json", "x")
    assert _one_line(e) == f"cannot write {UNWRITABLE_DIR}/pallas_viz_test.json: Permission denied"
    with pytest.raises(OutputError):
        fileio.check_output_path(f"{UNWRITABLE_DIR}/t.json")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_read_only_directory(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(OutputError) as e:
            fileio.atomic_write_text(ro / "t.json", "x")
        assert _one_line(e).endswith("Permission denied")
    finally:
        ro.chmod(0o755)


def _with_deadline(fn, seconds=10.0):
    """fn() in a thread; fail (instead of hanging the suite) if it does not return."""
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("v", fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "blocked"
    return out["v"]


def test_read_source_lines_refuses_what_is_not_a_small_regular_file(tmp_path):
    src = tmp_path / "k.py"
    src.write_bytes(b"# -*- coding: latin-1 -*-\r\nx = '\xe9'\ry = 2\n")
    assert fileio.read_source_lines(src) == ["# -*- coding: latin-1 -*-", "x = 'é'", "y = 2"]
    big = tmp_path / "big.py"
    big.write_bytes(b"#" * (fileio.MAX_SOURCE_BYTES + 1))
    fifo = tmp_path / "fifo.py"
    os.mkfifo(fifo)
    for bad in [big, fifo, tmp_path, tmp_path / "missing.py", "/dev/zero", "/dev/stdin",
                "/proc/self/environ", "/proc/self/status", "a\0b", 12]:
        assert _with_deadline(lambda b=bad: fileio.read_source_lines(b)) is None, bad


# --------------------------------------------------------------------------- inert text

def test_terminal_safe_escapes_characters_that_draw_nothing():
    # (review S: a file named `kern\u200bels\u2060.py\ufeff` printed exactly as kernels.py)
    assert terminal_safe("kern\u200bels\u2060.py\ufeff \xad \U000e0041!") == (
        "kern\\u200bels\\u2060.py\\ufeff \\xad \\U000e0041!")
    assert terminal_safe("emoji \U0001f600 stays") == "emoji \U0001f600 stays"


def test_terminal_safe_escapes_controls_bidi_and_surrogates():
    hostile = "\x1b]0;pwn\x07\x1b[2Jmsg\u202eevil\u2066\x85\x7f\x00\ud800"
    out = terminal_safe(hostile)
    assert out == ("\\x1b]0;pwn\\x07\\x1b[2Jmsg\\u202eevil\\u2066\\x85\\x7f\\x00\\ud800")
    assert terminal_safe("tab\tand\nnewline é ✓ 中") == "tab\tand\nnewline é ✓ 中"
    out.encode("utf-8")  # printable everywhere
    colored = "\x1b[1;31merror\x1b[0m \x1b]8;;http://x\x07link \x1b[2J"
    assert terminal_safe(colored, keep_sgr=True) == (
        "\x1b[1;31merror\x1b[0m \\x1b]8;;http://x\\x07link \\x1b[2J")
    assert safe_for_stdout("é \u202e \udc80 ✓", "ascii") == "\\xe9 \\u202e \\udc80 \\u2713"
    assert safe_for_stdout("x", "no-such-codec") == "x"

    class Nasty:
        def __str__(self):
            raise RuntimeError("no")

    assert terminal_safe(Nasty()).startswith("<")
    assert terminal_safe(b"\x1b") == "b'\\x1b'"


# what `terminal_safe` escapes: controls, bidi marks and overrides, line and paragraph
# separators, lone surrogates, and the characters that draw nothing (soft hyphen, zero
# width, joiners, invisible operators, U+FEFF, tag characters)
UNSAFE = set(range(0x00, 0x09)) | set(range(0x0B, 0x20)) | set(range(0x7F, 0xA0)) | set(
    range(0x202A, 0x202F)) | set(range(0x2066, 0x206A)) | set(range(0xD800, 0xE000)) | {
    0xAD, 0x61C, 0x180E, 0x2028, 0x2029, 0xFEFF} | set(range(0x200B, 0x2010)) | set(
    range(0x2060, 0x2065)) | set(range(0xE0000, 0xE0080))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text(alphabet=st.characters(codec=None)), st.booleans())
def test_terminal_safe_never_raises_and_leaves_nothing_unsafe(text, keep_sgr):
    out = terminal_safe(text, keep_sgr=keep_sgr)
    kept = out if not keep_sgr else __import__("re").sub(r"\x1b\[[0-9;]{0,32}m", "", out)
    assert not any(ord(c) in UNSAFE for c in kept)
    if not any(ord(c) in UNSAFE for c in text):
        assert out == text
    safe_for_stdout(text, "ascii").encode("ascii")


# --------------------------------------------------------------------------- widget requests

@pytest.fixture(scope="module")
def widget_trace():
    from pallas_viz import examples as ex

    fn, args = ex.collective_in_branch()
    with pv.trace() as tr:
        fn(*args)
    return tr


@pytest.fixture
def widget(widget_trace):
    from pallas_viz.render.widget import TraceWidget

    return TraceWidget(widget_trace)


BAD_EVENTS = [
    {"cell": "abc"}, {"cell": None}, {"cell": [1]}, {"cell": float("inf")}, {"cell": 10**30},
    {"cell": -1}, {"cell": True}, {"cell": 1.5}, {},
    {"cell": 0, "offset": "x"}, {"cell": 0, "offset": -1}, {"cell": 0, "offset": None},
    {"cell": 0, "limit": float("nan")}, {"cell": 0, "limit": 0}, {"cell": 0, "limit": "9"},
]


@pytest.mark.parametrize("fields", BAD_EVENTS, ids=repr)
def test_malformed_events_request_gets_an_error_reply(widget, fields):
    reply = widget._handle_custom_msg({"type": "events", "id": 7, **fields})
    assert reply["type"] == "events" and reply["id"] == 7 and reply["error"]
    assert reply["rows"] == [] and reply["total"] == 0  # what the front end reads


def test_huge_limit_and_offset_are_clamped(widget):
    full = widget._handle_custom_msg({"type": "events", "id": 1, "cell": 0})
    big = widget._handle_custom_msg({"type": "events", "id": 2, "cell": 0, "limit": 10**30})
    assert "error" not in big and big["rows"] == full["rows"]
    past = widget._handle_custom_msg({"type": "events", "id": 3, "cell": 0, "offset": 10**30})
    assert past["rows"] == [] and past["total"] == full["total"] and "error" not in past


@pytest.mark.parametrize("fields", [
    {"line": "abc"}, {"line": None}, {"line": 0}, {"line": 1.0}, {"line": 10**30},
    {"file": None}, {"file": ""}, {"file": ["x"]}, {"file": "/etc/passwd"},
], ids=repr)
def test_malformed_source_request_gets_an_error_reply(widget, widget_trace, fields):
    loc = widget_trace.findings[0].source
    reply = widget._handle_custom_msg({"type": "source", "id": "s", "file": loc.file,
                                       "line": loc.line, **fields})
    assert reply["type"] == "source" and reply["id"] == "s" and reply["error"]
    assert reply["lines"] == []
    missing = widget._handle_custom_msg({"type": "source", "id": "m"})
    assert missing["error"] and missing["lines"] == []


@pytest.mark.parametrize("content", [
    {"type": "nope", "id": 3}, {"id": 4}, {"type": None}, {"type": ["events"]}, "junk", None,
    [1, 2], {"type": "events", "id": {"nested": "id"}, "cell": 0},
], ids=repr)
def test_unknown_or_junk_requests_get_an_error_reply(widget, content):
    reply = widget._handle_custom_msg(content)
    assert isinstance(reply, dict) and reply["id"] in (None, 3, 4)
    if not (isinstance(content, dict) and content.get("type") == "events"):
        assert reply["type"] == "error" and reply["error"]


def test_a_failing_answer_is_an_error_reply_not_an_exception(widget, monkeypatch):
    from pallas_viz.render import payload

    monkeypatch.setattr(payload, "event_rows", lambda *a: 1 / 0)
    reply = widget._handle_custom_msg({"type": "events", "id": 9, "cell": 0})
    assert reply["id"] == 9 and "ZeroDivisionError" in reply["error"]


def _with_launch(tr, file: str, code: str | None = None, meta: dict | None = None) -> Trace:
    k = dataclasses.replace(tr.kernels[0], launch=SourceLocation(file=file, line=1, code=code))
    return Trace(events=tr.events, kernels=[k, *tr.kernels[1:]], findings=tr.findings,
                 failure=tr.failure, meta={**tr.meta, **(meta or {})})


def test_source_never_reads_fifos_devices_or_proc(widget_trace, tmp_path):
    from pallas_viz.render.widget import TraceWidget

    fifo = tmp_path / "kernel.py"
    os.mkfifo(fifo)
    for file in [str(fifo), "/dev/zero", "/proc/self/environ", str(tmp_path)]:
        w = TraceWidget(_with_launch(widget_trace, file))
        reply = _with_deadline(
            lambda w=w, f=file: w._handle_custom_msg({"type": "source", "id": 1, "file": f,
                                                      "line": 1}))
        assert reply["lines"] == [], file


def test_loaded_trace_serves_only_its_stored_code(widget_trace, tmp_path):
    from pallas_viz.render.widget import TraceWidget

    secret = tmp_path / "secret.py"
    secret.write_text("TOKEN = 'do not show'\n")
    loaded = _with_launch(widget_trace, str(secret), code="stored line", meta={"loaded": True})
    w = TraceWidget(loaded)
    reply = w._handle_custom_msg({"type": "source", "id": 1, "file": str(secret), "line": 1})
    assert reply["lines"] == ["stored line"] and reply["start"] == 1
    assert "do not show" not in repr(reply)
    loc = widget_trace.findings[0].source  # a real file, on this machine, still not read
    reply = w._handle_custom_msg({"type": "source", "id": 2, "file": loc.file,
                                  "line": loc.line})
    assert reply["lines"] == [loc.code]
    # even a trace recorded here serves only what it stored while recording: the
    # code around its own lines, never a file named later
    live = TraceWidget(_with_launch(widget_trace, str(secret)))
    reply = live._handle_custom_msg({"type": "source", "id": 3, "file": str(secret), "line": 1})
    assert reply["lines"] == [] and reply["error"]
    real = TraceWidget(widget_trace)._handle_custom_msg(
        {"type": "source", "id": 4, "file": loc.file, "line": loc.line})
    assert len(real["lines"]) > 1 and loc.code in real["lines"]  # the stored context


def test_saved_trace_carries_its_snippets_and_never_reads_the_files(widget_trace, tmp_path):
    """Snippets are read while recording and saved; a loaded trace's views use them even
    when the file they came from is gone, and a file naming /etc/passwd shows nothing."""
    import json

    import pallas_viz as pv
    from pallas_viz.render.html import html_document

    path = tmp_path / "t.json"
    widget_trace.save(path)
    d = json.loads(path.read_text())
    assert d["snippets"] and all(len(s["lines"]) >= 1 for s in d["snippets"])
    loaded = pv.load(path)
    assert loaded.snippets == widget_trace.snippets
    d["events"]["sources"][0]["file"] = "/etc/passwd"
    d["events"]["sources"][0]["line"] = 1
    path.write_text(json.dumps(d))
    page = html_document(pv.load(path))
    # the file's first line (e.g. "root:x:0:0:root:/root:/bin/bash"), not the bare "root:"
    # that the page's own CSS may hold (".pv-cmp-root:hover")
    first = open("/etc/passwd", encoding="utf-8").readline().strip()
    assert first and first not in page and "root:x:0:0" not in page


# --------------------------------------------------------------------------- magic

@pytest.mark.parametrize("line", [
    "-o 1bad clean(*ca)", "-o a.b clean(*ca)", "-o __builtins__ clean(*ca)",
    "-o class clean(*ca)", "-o In clean(*ca)", "-o _ clean(*ca)", "-o _i3 clean(*ca)",
    "--timeout nan clean(*ca)", "--timeout inf clean(*ca)", "--timeout -1 clean(*ca)",
    "--timeout=0 clean(*ca)", "--json 'unclosed clean(*ca)", "-h",
])
def test_magic_refuses_bad_options(ip, line):
    from IPython.core.error import UsageError

    builtins = ip.user_ns["__builtins__"]
    with pytest.raises(UsageError):
        ip.run_line_magic("pallas_trace", line)
    assert ip.user_ns["__builtins__"] is builtins
    assert ip.display_pub.outputs == []  # nothing ran


def test_magic_statement_is_kept_as_typed(ip, tmp_path):
    path = tmp_path / "a b.json"
    ip.run_line_magic("pallas_trace",
                      f'-o tr --json "{path}" --timeout=30 y = ("x  y", clean(*ca))[0]')
    assert ip.user_ns["y"] == "x  y"
    assert ip.user_ns["tr"].meta["timeout_s"] == 30.0
    assert pv.load(path).kernels
    ip.run_line_magic("pallas_trace", "-o tr -- -1 if clean(*ca) is None else -2")
    assert ip.user_ns["tr"].ran_kernels


def _outputs(ip):
    return [o["data"] for o in ip.display_pub.outputs]


def test_magic_unwritable_json_is_refused_before_the_code_runs(ip, tmp_path, capsys):
    # a kernel may run for minutes: a path that surely cannot be written is said first
    missing = tmp_path / "no" / "t.json"
    ip.user_ns.pop("tr", None)
    result = ip.run_cell(f"%pallas_trace -o tr --json {missing} ran = clean(*ca)")
    assert isinstance(result.error_in_exec, UsageError)
    assert str(result.error_in_exec) == (
        f"%pallas_trace: cannot write {missing}: directory {missing.parent} does not exist")
    assert _outputs(ip) == [] and "ran" not in ip.user_ns and "tr" not in ip.user_ns
    assert "Traceback" not in capsys.readouterr().out


def test_magic_failing_kernel_and_unwritable_html_runs_nothing(ip, tmp_path, capsys):
    result = ip.run_cell(f"%pallas_trace -o tr --html {tmp_path} failing(*fa)")
    assert isinstance(result.error_in_exec, UsageError)
    assert f"cannot write {tmp_path}: it is a directory" in str(result.error_in_exec)
    assert _outputs(ip) == []


def test_magic_write_that_fails_after_the_run_shows_first_then_one_line(ip, tmp_path, capsys):
    # the check passed, then the directory went away while the code ran
    gone = tmp_path / "gone"
    gone.mkdir()
    result = ip.run_cell(f"%pallas_trace -o tr --json {gone / 't.json'} "
                         f"import shutil; shutil.rmtree({str(gone)!r}); clean(*ca)")
    assert isinstance(result.error_in_exec, OutputError)
    (data,) = _outputs(ip)  # the trace was shown before the error
    assert "clean: no findings" in data["text/plain"]
    assert base64.b64decode(data["image/png"]).startswith(b"\x89PNG")
    out = capsys.readouterr().out
    assert f"pallas_viz.OutputError: cannot write {gone / 't.json'}: directory" in out
    assert "Traceback" not in out
    assert ip.user_ns["tr"].ran_kernels


def test_magic_timeout_help_says_what_it_means(ip):
    help_text = " ".join(ip.find_line_magic("pallas_trace").__doc__.split())
    assert "no progress (no allocation event, no barrier arrival)" in help_text
    assert "runs longer than" not in help_text


# --------------------------------------------------------------------------- writers

def test_html_and_image_writers_report_one_line(widget_trace, tmp_path):
    old = tmp_path / "t.html"
    old.write_text("old page")
    with pytest.raises(OutputError) as e:
        widget_trace.to_html(tmp_path / "missing" / "t.html")
    _one_line(e)
    fig = widget_trace.plot()
    with pytest.raises(OutputError) as e:
        fig.savefig(tmp_path / "t.xyz")
    assert "unknown image format 'xyz'" in _one_line(e)
    (tmp_path / "d.png").mkdir()
    with pytest.raises(OutputError) as e:
        fig.savefig(tmp_path / "d.png")
    assert _one_line(e).endswith("it is a directory")
    fig.savefig(tmp_path / "t.PNG")
    assert (tmp_path / "t.PNG").read_bytes()[:4] == b"\x89PNG"
    fig.savefig(tmp_path / "noext")  # like matplotlib: the default extension is added
    assert (tmp_path / "noext.png").read_bytes()[:4] == b"\x89PNG"
    assert old.read_text() == "old page"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left


@linux_only
def test_writers_to_dev_full(widget_trace):
    with pytest.raises(OutputError) as e:
        widget_trace.to_html("/dev/full")
    assert "No space left" in _one_line(e)
    with pytest.raises(OutputError) as e:
        widget_trace.plot().savefig("/dev/full", format="png")
    assert "No space left" in _one_line(e)


def test_the_caret_underlines_the_call_at_the_column():
    # a call after the line's start (a lambda branch, a decorator) is underlined whole, as
    # one at the start is; a column at no call gets a bare caret
    from pallas_viz.render.text import source_lines

    def caret(code: str, col: int) -> str:
        return source_lines(SourceLocation("k.py", 3, col, "f", code))[-1].split("| ", 1)[1]

    assert caret("    pl.run_scoped(scoped, x)", 4) == "^~~~~~~~~~~~~"
    assert caret("    cond(p, lambda: pl.run_scoped(f, T), g)", 20) == " " * 16 + "^~~~~~~~~~~~~"
    assert caret("    @pl.when(t == 0)", 5) == " ^~~~~~~"
    assert caret("    x = y[0]", 4) == "^"
