"""A kernel JAX rejects while tracing it, its error caught by the code in the block.

Before, a `pv.trace()` whose code caught JAX's error (a `try` around a kernel call, a
test's `pytest.raises`) recorded nothing: its summary read "no Pallas GPU kernel ran in
interpret mode ... run the kernel with interpret=plgpu.InterpretGPUParams()", wrong
advice for a kernel that was in interpret mode and was rejected. Now the error JAX
raised lowering the kernel is kept on its way out, and the trace reports it at the
user's line, with the same advice as when it leaves the block, saying it was caught.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl

import pallas_viz as pv
from pallas_viz import _jax as adapter
from pallas_viz.errors import TraceFileError
from pallas_viz.examples import shapes as sh

REJECTED = "Scoped allocation must have the thread axis in its collective axes"
CAUGHT = "(the code in the traced block caught this error)"

pytest_plugins = ["pytester"]
# every shape with a thread axis (`pallas_call` has none: the same body runs there)
SHAPES = [s for s in sh.SHAPES if s not in ("pallas_call", "two_devices")]


def private_scope(ctx, x_ref, o_ref):
    def scoped(buf):
        ctx.store(buf, x_ref[...])

    pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32))  # PRIVATE


PRIVATE = sh.marked_line(private_scope, "PRIVATE")


def _caught_trace(fn, args, after=None):
    with pv.trace(timeout_s=10) as tr:
        with pytest.raises(ValueError, match=REJECTED):
            fn(*args)
        if after is not None:
            after()
    return tr


@pytest.mark.parametrize("shape", SHAPES)
def test_a_caught_rejection_is_reported_at_its_line(shape):
    fn, args = sh.launch(private_scope, shape)
    seen = set()
    for _ in range(2):  # (JAX does not cache a lowering that failed: it runs again)
        tr = _caught_trace(fn, args)
        assert not adapter.hooks_installed()
        (f,) = tr.findings
        assert f.kind == "trace_error" and f.severity == "error", tr.summary()
        assert REJECTED in f.message and f.message.endswith(CAUGHT)
        assert (f.source.file, f.source.line) == (__file__, PRIVATE)
        assert "collective_axes=" in f.suggestion
        assert tr.failure.phase == "trace" and tr.failure.caught
        text = tr.summary()
        assert "no Pallas GPU kernel ran" not in text and "InterpretGPUParams" not in text
        seen.add((f.message, f.source.line))
    assert len(seen) == 1


def test_the_rejection_that_leaves_the_block_is_not_called_caught():
    fn, args = sh.launch(private_scope, "grid1")
    with pytest.raises(pv.KernelError):
        with pv.trace() as tr:
            fn(*args)
    (f,) = tr.findings
    assert REJECTED in f.message and CAUGHT not in f.message
    assert f.source.line == PRIVATE and not tr.failure.caught


def test_the_user_s_own_error_raised_from_it_goes_on_unchanged():
    fn, args = sh.launch(private_scope, "no_grid")

    class MineError(Exception):
        pass

    with pytest.raises(MineError):
        with pv.trace() as tr:
            try:
                fn(*args)
            except ValueError as e:
                raise MineError("the kernel was rejected") from e
    (f,) = tr.findings
    assert f.message.endswith(CAUGHT) and f.source.line == PRIVATE
    assert not adapter.hooks_installed()


def test_a_kernel_run_after_the_caught_rejection_is_recorded_too():
    bad, args = sh.launch(private_scope, "grid3")
    good, good_args = sh.launch(sh.hoisted_collective, "grid3")
    tr = _caught_trace(bad, args, after=lambda: jax.block_until_ready(good(*good_args)))
    assert len(tr.kernels) == 1 and len(tr.events) > 0
    assert [f.kind for f in tr.findings] == ["trace_error"]
    assert tr.findings[0].message.endswith(CAUGHT)


def test_caught_survives_a_round_trip_and_is_validated(tmp_path):
    fn, args = sh.launch(private_scope, "no_grid")
    tr = _caught_trace(fn, args)
    path = tmp_path / "t.json"
    tr.save(path)
    back = pv.load(path)
    assert back.failure.caught and back.findings[0].message.endswith(CAUGHT)
    d = tr.to_dict()
    d["failure"]["caught"] = "yes"
    with pytest.raises(TraceFileError, match="caught"):
        pv.Trace.from_dict(d)
    d["failure"]["caught"] = True
    d["failure"]["phase"] = "run"
    with pytest.raises(TraceFileError, match="caught"):
        pv.Trace.from_dict(d)


PLUGIN_TESTS = """
import pytest
from jax.experimental import pallas as pl
import jax.numpy as jnp
from pallas_viz.examples import shapes as sh


def private_scope(ctx, x_ref, o_ref):
    pl.run_scoped(lambda b: ctx.store(b, x_ref[...]), ctx.smem(sh.SHAPE, jnp.float32))


def test_expects_the_rejection():
    fn, args = sh.launch(private_scope, "no_grid")
    with pytest.raises(ValueError, match="thread axis"):
        fn(*args)
"""


def test_the_plugin_reports_a_rejection_the_test_expected(pytester):
    pytester.makepyfile(test_rejected=PLUGIN_TESTS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--pallas-viz",
                                          "--pallas-viz-fail-on=error")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*(expected: the test caught its kernel's failure) error?trace_error? *"
        "Scoped allocation must have the thread axis*caught this error*"])
    assert not adapter.hooks_installed()
