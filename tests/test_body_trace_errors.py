"""A kernel whose own code raises while JAX traces its body (a store of the wrong shape, a
name that is not defined).

Before, such a trace said "no Pallas GPU kernel ran in interpret mode ... run the kernel
with interpret=plgpu.InterpretGPUParams()": wrong advice for a kernel that was in
interpret mode and failed while JAX traced it. Now the error is reported at the user's
line as the kernel's own (`Failure.in_body`), whether it leaves the block or the block's
code catches it, in every launch shape; the exception that leaves the block stays the
user's own (never a `KernelError`), so `pytest.raises(ValueError)` still sees it.
"""

from __future__ import annotations

import json
import os
import sys

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from script_json import printed_json

import pallas_viz as pv
from pallas_viz import _jax as adapter
from pallas_viz.errors import TraceFileError
from pallas_viz.examples import shapes as sh

RAISED = "the kernel's code raised an error while JAX traced it"
CAUGHT = "(the code in the traced block caught this error)"
SHAPES = [s for s in sh.SHAPES if s != "two_devices"]  # (two devices: its own process)


def bad_store(ctx, x_ref, o_ref):
    def scoped(buf):
        buf[...] = x_ref[...][:4]  # BAD_STORE
        o_ref[...] = x_ref[...]

    pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32), collective_axes=ctx.axis)


def undefined_name(ctx, x_ref, o_ref):
    o_ref[...] = x_ref[...] * scale  # noqa: F821  # UNDEFINED


CASES = {"bad_store": (bad_store, ValueError, "Invalid shape for `swap`", "BAD_STORE"),
         "undefined_name": (undefined_name, NameError, "name 'scale' is not defined",
                            "UNDEFINED")}


def _check(tr, case: str, caught: bool) -> None:
    body, error, text, marker = CASES[case]
    (f,) = tr.findings
    assert f.kind == "trace_error" and f.severity == "error", tr.summary()
    assert f.message.startswith(f"{RAISED}: {error.__name__}: ") and text in f.message
    assert f.message.endswith(CAUGHT) == caught
    assert (f.source.file, f.source.line) == (__file__, sh.marked_line(body, marker))
    assert f.suggestion.startswith("JAX traces a kernel's body before anything runs")
    assert tr.failure.phase == "trace" and tr.failure.in_body and tr.failure.caught == caught
    text = tr.summary()
    assert "no Pallas GPU kernel ran" not in text and "InterpretGPUParams" not in text


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("shape", SHAPES)
def test_the_kernel_s_own_error_is_reported_at_its_line(shape, case):
    body, error, text, _ = CASES[case]
    fn, args = sh.launch(body, shape)
    for raise_errors in (True, False, True):  # (JAX does not cache a failed trace)
        # it leaves the block as the user's own error, whether or not errors are raised
        with pytest.raises(error, match="swap|scale") as info:
            with pv.trace(raise_errors=raise_errors) as tr:
                jax.block_until_ready(fn(*args))
        assert not isinstance(info.value, pv.KernelError)
        assert not adapter.hooks_installed()
        _check(tr, case, caught=False)
        # the block's code catches it
        with pv.trace() as tr:
            with pytest.raises(error):
                jax.block_until_ready(fn(*args))
        _check(tr, case, caught=True)


def test_a_rejection_by_pallas_is_not_called_the_kernel_s_own():
    def private_scope(ctx, x_ref, o_ref):
        pl.run_scoped(lambda b: ctx.store(b, x_ref[...]), ctx.smem(sh.SHAPE, jnp.float32))

    fn, args = sh.launch(private_scope, "grid3")
    with pytest.raises(pv.KernelError):
        with pv.trace() as tr:
            fn(*args)
    (f,) = tr.findings
    assert f.message.startswith("JAX rejected the kernel while tracing it: ValueError: ")
    assert not tr.failure.in_body


def _caught_bad_store(shape: str):
    """A trace of `bad_store` in `shape`, its error caught in the block."""
    fn, args = sh.launch(bad_store, shape)
    with pv.trace() as tr:
        with pytest.raises(ValueError):
            fn(*args)
    return tr


def test_in_body_survives_a_round_trip_and_is_validated(tmp_path):
    tr = _caught_bad_store("no_grid")
    path = tmp_path / "t.json"
    tr.save(path)
    back = pv.load(path)
    assert back.failure.in_body and back.findings[0].message.startswith(RAISED)
    d = tr.to_dict()
    d["failure"]["in_body"] = 1
    with pytest.raises(TraceFileError, match="in_body"):
        pv.Trace.from_dict(d)
    d["failure"].update(in_body=True, caught=False, phase="run")
    with pytest.raises(TraceFileError, match="in_body"):
        pv.Trace.from_dict(d)


TWO_DEVICES = """
import json, sys
import jax
import pallas_viz as pv
sys.path.insert(0, {tests!r})
import test_body_trace_errors as t
from pallas_viz.examples import shapes as sh
out = []
for case in sorted(t.CASES):
    body = t.CASES[case][0]
    fn, args = sh.launch(body, "two_devices")
    for _ in range(2):
        try:
            with pv.trace() as tr:
                jax.block_until_ready(fn(*args))
        except Exception as e:
            left = type(e).__name__
        out.append([case, left, [[f.kind, f.message, f.source.file, f.source.line]
                                  for f in tr.findings], tr.failure.in_body])
print(json.dumps(out))
"""


def test_on_two_devices():
    tests = os.path.dirname(os.path.abspath(__file__))
    got = printed_json([sys.executable, "-c", TWO_DEVICES.format(tests=tests)],
                       env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    assert len(got) == 2 * len(CASES)
    for case, left, findings, in_body in got:
        body, error, text, marker = CASES[case]
        assert left == error.__name__ and in_body, (case, left)
        ((kind, message, file, line),) = findings
        assert kind == "trace_error" and message.startswith(RAISED) and text in message
        assert (file, line) == (__file__, sh.marked_line(body, marker)), json.dumps(findings)


@pytest.mark.browser
def test_the_html_export_says_the_kernel_s_code_raised(playwright_browser, tmp_path):
    from browser_util import open_offline

    tr = _caught_bad_store("grid3")
    path = tmp_path / "t.html"
    tr.to_html(path)
    page, errors = open_offline(playwright_browser, path,
                                viewport={"width": 1280, "height": 900})
    page.wait_for_selector(".pv-finding")
    assert page.inner_text(".pv-finding .pv-msg").startswith(RAISED)
    assert page.inner_text(".pv-requestpane .pv-empty").startswith(
        "The kernel's code raised an error while JAX traced it: no block ran")
    page.close()
    assert not errors


def ref_kept_past_its_scope(ctx, x_ref, o_ref):
    """The scoped buffer is kept in a list and read after its `pl.run_scoped` returned."""
    kept = []

    def scoped(buf):  # SCOPED
        ctx.store(buf, x_ref[...] * 2.0)
        kept.append(buf)

    pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32), collective_axes=ctx.axis)
    sh.store_block_rows(ctx, o_ref, ctx.load(kept[0], sh.SHAPE[0]))


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "core_map", "cluster2", "tmem"])
def test_a_ref_used_after_its_scope_is_reported_at_the_scope(shape):
    # JAX raises UnexpectedTracerError from the call, after tracing the kernel, outside
    # Pallas's code: the summary said "no Pallas GPU kernel ran in interpret mode ... run
    # the kernel with interpret=plgpu.InterpretGPUParams()"
    fn, args = sh.launch(ref_kept_past_its_scope, shape)
    seen = set()
    for _ in range(2):
        with pytest.raises(jax.errors.UnexpectedTracerError):  # (the user's error, as it was)
            with pv.trace() as tr:
                fn(*args)
        (f,) = tr.findings
        assert f.kind == "trace_error" and tr.failure.in_body, tr.summary()
        assert (f.source.file, f.source.line) == (
            __file__, sh.marked_line(ref_kept_past_its_scope, "SCOPED"))
        assert f.suggestion.startswith("A ref that `pl.run_scoped` allocated was used after "
                                       "its scoped function returned"), f.suggestion
        assert "InterpretGPUParams" not in tr.summary()
        seen.add((f.message, f.suggestion, f.source.line))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("shape", ["no_grid", "grid3", "core_map", "cluster2", "tmem"])
def test_a_ref_used_after_its_scope_is_reported_when_the_block_catches_it(shape):
    # the error never passes Pallas's code, nor leaves the traced block: the summary said
    # "no Pallas GPU kernel ran in interpret mode ... interpret=plgpu.InterpretGPUParams()"
    fn, args = sh.launch(ref_kept_past_its_scope, shape)
    seen = set()
    for _ in range(2):
        with pv.trace() as tr:
            try:
                fn(*args)
            except jax.errors.UnexpectedTracerError:
                pass
        (f,) = tr.findings
        assert f.kind == "trace_error" and tr.failure.in_body and tr.failure.caught
        assert (f.source.file, f.source.line) == (
            __file__, sh.marked_line(ref_kept_past_its_scope, "SCOPED"))
        assert f.suggestion.startswith("A ref that `pl.run_scoped` allocated was used after "
                                       "its scoped function returned"), f.suggestion
        assert "(the code in the traced block caught this error)" in f.message
        assert "InterpretGPUParams" not in tr.summary()
        seen.add((f.message, f.suggestion, f.source.line))
    assert len(seen) == 1, seen
