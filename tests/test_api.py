"""The trace API on the bundled kernels: findings, cells, lines, errors, round trips."""

from __future__ import annotations

import inspect

import jax
import pytest

import pallas_viz as pv
import pallas_viz.simulate as sim
from pallas_viz import _jax as adapter
from pallas_viz import examples as ex


def _line_of(text: str, builder) -> int:
    """Line number in kernels.py of the first line of `builder` containing `text`."""
    lines, start = inspect.getsourcelines(builder)
    for i, line in enumerate(lines):
        if text in line:
            return start + i
    raise AssertionError(text)


def _kinds(tr):
    return sorted({f.kind for f in tr.findings})


def test_clean_kernels_have_no_findings(example_traces):
    for name in ("clean_collective", "hoisted_collective"):
        tr = example_traces[name]
        assert tr.findings == [], tr.summary()
        assert tr.failure is None
        assert len(tr.kernels) == 1 and tr.kernels[0].threads_per_block == 2


def test_event_fields(example_traces):
    tr = example_traces["clean_collective"]
    smem = [e for e in tr.events if e.memory_space == "SMEM"]
    # 2 blocks x 2 threads request the collective SMEM buffer: 1 create + 1 join per block
    assert sorted(e.op for e in smem if e.op in ("create", "join")) == ["create"] * 2 + [
        "join"] * 2
    assert {e.block for e in smem} == {(0,), (1,)}
    assert {e.thread for e in smem} == {0, 1}
    e = smem[0]
    assert e.shape == (8, 128) and e.dtype == "float32" and e.nbytes == 8 * 128 * 4
    assert e.collective and e.key_thread == 0 and e.resource == "buffer"
    assert e.source is not None and e.source.file.endswith("kernels.py")
    assert "pl.run_scoped" in e.source.code
    assert e.source.line == _line_of("pl.run_scoped", ex.clean_collective)
    barriers = [e for e in tr.events if e.resource == "barrier"]
    assert sorted({e.op for e in barriers}) == ["create", "free", "join", "release"]
    assert all(e.memory_space is None for e in barriers)
    # seq is the global order, thread_seq the order within each (block, thread)
    assert [e.seq for e in tr.events] == list(range(len(tr.events)))
    per_thread = {}
    for ev in tr.events:
        key = (ev.kernel, ev.device, ev.block, ev.thread, ev.warp)
        assert ev.thread_seq == per_thread.get(key, 0)
        per_thread[key] = ev.thread_seq + 1
    # GMEM operands are allocated for all threads and never freed (not leaks)
    gmem = [e for e in tr.events if e.memory_space == "GMEM"]
    assert gmem and all(e.block is None for e in gmem)
    assert not any(e.op == "free" for e in gmem)


def test_collective_in_branch_is_partial_and_leaks(example_traces):
    tr = example_traces["collective_in_branch"]
    line = _line_of("pl.run_scoped", ex.collective_in_branch)
    assert tr.failure is None  # JAX itself says nothing
    # one bug, one root: the partial collective; its symptoms fold under it
    (partial,) = tr.findings
    assert partial.kind == "partial_collective" and partial.severity == "error"
    assert sorted(c.kind for c in partial.consequences) == ["leak", "sequence_divergence"]
    assert partial.source.line == line
    assert "collective_axes" in partial.source.code
    assert partial.branch is not None and partial.branch.code.strip() == "@pl.when(t == 0)"
    assert set(partial.cells) == {(0, (b,), t) for b in (0, 1) for t in (0, 1)}
    assert "t 1 never requests it" in partial.message
    leak = next(f for f in partial.consequences if f.kind == "leak")
    assert leak.severity == "warning" and leak.source.line == line
    assert set(leak.cells) == {(0, (0,), 0), (0, (1,), 0)}
    assert "stuck at 1 (of 2)" in leak.message
    # findings point at real events
    for f in tr.all_findings():
        assert f.events and all(0 <= s < len(tr.events) for s in f.events)


def test_nonzero_thread_creates_collective(example_traces):
    tr = example_traces["collective_in_branch_nonzero"]
    # thread 1 alone makes it: one root, which says that thread 0 never requested it
    (root,) = tr.findings
    assert root.kind == "partial_collective"
    assert set(root.cells) == {(0, (b,), t) for b in (0, 1) for t in (0, 1)}
    assert root.source.line == _line_of("pl.run_scoped", ex.collective_in_branch_nonzero)
    assert "requested only by t 1 of 2" in root.message and "thread 0" in root.message
    # one thread missing: it is thread 0 (not "among them", which needs several)
    assert ("t 0 never requests it (it is thread 0 of the block, which owns allocations "
            "for all threads)") in root.message
    assert "among them" not in root.message
    assert root.branch.code.strip() == "@pl.when(t == 1)"


def test_partial_collective_missing_several_threads_including_thread_0():
    from pallas_viz.examples import shapes

    fn, args = shapes.launch(shapes.collective_in_branch, "no_grid", num_threads=3)
    for _ in range(3):  # the message must not depend on the threads' interleaving
        with pv.trace(raise_errors=False) as tr:
            fn(*args)
        (root,) = tr.findings
        assert root.kind == "partial_collective"
        assert ("requested only by w 2 of 3; w 0..1 never request it (thread 0 of the "
                "block, which owns allocations for all threads, is among them)"
                ) in root.message


def test_mismatched_shapes(example_traces):
    tr = example_traces["mismatched_collective_shapes"]
    # one root: the first branch's allocation; the second branch's allocation and the
    # mismatch of the two (merged into one buffer) fold under it
    (root,) = tr.findings
    assert root.kind == "partial_collective"
    src_lines, start = inspect.getsourcelines(ex.mismatched_collective_shapes)
    expected = {start + i for i, s in enumerate(src_lines) if "pl.run_scoped" in s}
    assert root.source.line == min(expected)  # by source order, never by interleaving
    assert root.branch.code.strip() == "@pl.when(t == 0)"
    assert any(r.code.strip() == "@pl.when(t == 1)" for r in root.related)
    mm = next(c for c in root.consequences if c.kind == "collective_mismatch")
    assert {mm.source.line, *(r.line for r in mm.related)} == expected
    assert "(8, 128)" in mm.message and "(4, 128)" in mm.message
    kinds = sorted(c.kind for c in root.consequences)
    assert kinds.count("partial_collective") == 1 and "sequence_divergence" in kinds


def test_barrier_in_branch_fails_with_line(example_traces):
    tr = example_traces["barrier_in_branch"]
    assert tr.failure is not None and tr.failure.type == "AssertionError"
    (root,) = tr.findings  # the barrier allocated in a branch; the failure folds under it
    assert root.kind == "partial_collective" and "barrier" in root.message
    assert root.source.line == _line_of("pl.run_scoped", ex.barrier_in_branch)
    assert root.branch.code.strip() == "@pl.when(t == 0)"
    err = next(c for c in root.consequences if c.kind == "interpreter_error")
    assert "Barrier remains allocated" in err.message
    assert err.source.line == _line_of("pl.run_scoped", ex.barrier_in_branch)
    assert err.cells == [(0, (0,), 0)]


def test_trace_time_error_is_attributed(example_traces):
    tr = example_traces["missing_collective_axes"]
    assert tr.failure.phase == "trace"
    (f,) = tr.findings
    assert f.kind == "trace_error"
    assert f.source.line == _line_of("pl.run_scoped", ex.missing_collective_axes)
    assert "collective_axes" in f.suggestion


def test_kernel_error_names_kind_cell_and_line():
    fn, args = ex.barrier_in_branch()
    with pytest.raises(pv.KernelError) as info:
        with pv.trace():
            fn(*args)
    msg = str(info.value)
    assert "partial_collective" in msg and "block (0), t 0..1" in msg
    assert "threads part here" in msg and "@pl.when(t == 0)" in msg
    assert "interpreter_error" in msg and "Barrier remains allocated" in msg  # folded
    assert f"kernels.py:{_line_of('pl.run_scoped', ex.barrier_in_branch)}" in msg
    assert "pl.run_scoped(scoped, plgpu.Barrier" in msg
    assert isinstance(info.value.__cause__, jax.errors.JaxRuntimeError)
    assert info.value.finding.kind == "partial_collective"
    assert not adapter.hooks_installed()
    # the interpreter state was reset: the next kernel runs
    fn, args = ex.hoisted_collective()
    with pv.trace() as tr:
        fn(*args)
    assert tr.findings == []


def test_simulated_thread_id_error():
    fn, args = ex.hoisted_collective()
    with sim.simulate_nonzero_thread_device_requests():
        with pytest.raises(pv.KernelError) as info:
            with pv.trace() as tr:
                fn(*args)
    assert "`thread_id` must be zero when allocating a buffer for all threads" in str(
        info.value.__cause__)
    f = info.value.finding
    assert f.kind == "nonzero_thread_collective"
    assert f.cells == [(0, None, 2)]  # a kernel-level (whole-device) request
    assert "thread_id=2" in f.message
    assert tr.failure.request["thread_id"] == 2
    assert tr.failure.request["memory_space"] == "GMEM"
    assert f.source is not None and f.source.file == __file__  # the kernel's launch line
    # after the simulation ends, the same kernel is clean again
    fn, args = ex.hoisted_collective()
    with pv.trace() as tr2:
        fn(*args)
    assert tr2.findings == []


def test_raise_errors_false_keeps_quiet():
    fn, args = ex.barrier_in_branch()
    with pv.trace(raise_errors=False) as tr:
        fn(*args)
    assert tr.errors[0].kind == "partial_collective"
    assert "interpreter_error" in [c.kind for c in tr.errors[0].consequences]


def test_user_exception_passes_through_and_hooks_go():
    fn, args = ex.clean_collective()
    with pytest.raises(ZeroDivisionError):
        with pv.trace() as tr:
            fn(*args)
            1 / 0  # noqa: B018
    assert len(tr.kernels) == 1 and tr.findings == []
    assert not adapter.hooks_installed()


def test_cached_kernel_is_recorded():
    fn, args = ex.clean_collective()
    jitted = jax.jit(fn)
    jitted(*args).block_until_ready()  # compiled and cached before tracing
    with pv.trace() as tr:
        jitted(*args).block_until_ready()
    assert len(tr.events) == 36 and tr.findings == []
    with pv.trace() as tr2:
        jitted(*args).block_until_ready()
        jitted(*args).block_until_ready()
    assert len(tr2.kernels) == 2 and {e.kernel for e in tr2.events} == {0, 1}


def test_nested_trace_is_refused():
    with pv.trace():
        with pytest.raises(pv.TraceActiveError):
            with pv.trace():
                pass
    assert not adapter.hooks_installed()


def _root_lines(tr) -> list[tuple]:
    return [(f.kind, f.severity, f.source.line if f.source else None, f.message)
            for f in tr.findings]


def test_a_yielding_trace_steps_aside_for_one_nested_in_it():
    """The pytest plugin's trace (`_yield_to_nested`): a trace the code inside starts, in
    the same thread, records its own kernels; the outer one records those before and
    after it, counts what it left out, and is left with no hook either way."""
    buggy, bargs = ex.collective_in_branch()
    clean, cargs = ex.hoisted_collective()
    with pv.trace(raise_errors=False) as alone:
        buggy(*bargs)
    expected = _root_lines(alone)
    assert [r[:2] for r in expected] == [("partial_collective", "error")]
    for _ in range(3):  # which thread creates and which joins varies between runs
        outer = pv.trace(raise_errors=False)
        outer._yield_to_nested = True
        with outer as to:
            clean(*cargs)
            with pv.trace(raise_errors=False) as ti:
                assert adapter.hooks_installed()
                buggy(*bargs)
                buggy(*bargs)
            assert adapter.hooks_installed()  # the outer trace's, back
            buggy(*bargs)
        assert not adapter.hooks_installed()
        assert _root_lines(ti) == expected * 2
        assert len(ti.kernels) == 2
        # the outer trace: the clean run before and the buggy one after, not the inner's
        assert len(to.kernels) == 2 and _root_lines(to) == expected
        assert {f.kernel for f in to.findings} == {1}
        assert (to.meta["nested_traces"], to.meta["nested_trace_kernels"]) == (1, 2)
    # a nested trace that outlives the yielding one (a fixture's trace, opened in pytest's
    # setup phase and closed in its teardown): the ended one is not resumed
    outer = pv.trace(raise_errors=False)
    outer._yield_to_nested = True
    outer.__enter__()
    inner = pv.trace(raise_errors=False)
    ti = inner.__enter__()
    outer.__exit__(None, None, None)
    buggy(*bargs)
    inner.__exit__(None, None, None)
    assert not adapter.hooks_installed()
    assert _root_lines(ti) == expected and len(outer.trace.kernels) == 0
    with pv.trace(raise_errors=False) as after:  # the slot is free
        buggy(*bargs)
    assert _root_lines(after) == expected
    # a trace that does not yield still refuses one nested in it
    with pv.trace():
        with pytest.raises(pv.TraceActiveError):
            with pv.trace():
                pass
    assert not adapter.hooks_installed()


def test_json_round_trip(tmp_path, example_traces):
    for name in ("collective_in_branch", "barrier_in_branch", "missing_collective_axes"):
        tr = example_traces[name]
        path = tmp_path / f"{name}.json"
        tr.save(path)
        back = pv.load(path)
        assert back.findings == tr.findings
        assert back.failure == tr.failure
        assert back.kernels == tr.kernels
        assert list(back.events) == list(tr.events)
        assert back.summary() == tr.summary()


def test_summary_reads_like_a_diagnostic(example_traces):
    text = example_traces["collective_in_branch"].summary()
    line = _line_of("pl.run_scoped", ex.collective_in_branch)
    assert "error[partial_collective]" in text
    assert f"kernels.py:{line}:" in text
    assert "^" in text
    assert "blocks (0..1), t 0..1" in text
    assert "= help:" in text
    assert "threads part here:" in text and "@pl.when(t == 0)" in text
    assert "1 error(s), 0 warning(s)" in text
    assert "SMEM 2 buffer(s) 8.0 KiB" in text
    # the root is quoted once; its consequences take one line each
    assert text.count(f"{line} | pl.run_scoped(") == 1
    assert "2 consequence(s) of this root cause:" in text
    assert f"- warning[leak] at pallas_viz/examples/kernels.py:{line}:13" in text  # (col from 1)


def test_no_kernel_trace():
    with pv.trace() as tr:
        pass
    assert not tr.ran_kernels
    assert "no Pallas GPU kernel ran" in tr.summary()


def test_version_gate_names_supported_versions():
    assert adapter.check_supported() == jax.__version__
    assert "0.12" in adapter.SUPPORTED and "0.11" in adapter.SUPPORTED


def test_aliasing_after_divergent_branch_points_at_the_branch():
    from pallas_viz.examples.kernels import aliased_after_branch

    fn, args = aliased_after_branch()
    with pv.trace(raise_errors=False) as tr:
        fn(*args)
    branch_line = _line_of("pl.run_scoped(scratch", aliased_after_branch)
    handshake_line = _line_of("pl.run_scoped(handshake", aliased_after_branch)
    (root,) = tr.findings  # the scratch allocation in the branch explains everything
    assert root.kind == "partial_collective" and root.source.line == branch_line
    assert root.branch.code.strip() == "@pl.when(t == 0)"
    err = next(c for c in root.consequences if c.kind == "interpreter_error")
    # which thread trips first varies: thread 0 writes into what is a barrier for
    # thread 1, or thread 1 waits on what is a buffer for thread 0
    assert err.kind == "interpreter_error"
    assert "is not a `Buffer`" in err.message or "is not a `Barrier`" in err.message
    assert err.source is not None and len(err.cells) == 1
    assert err.source.code.strip() in ("buf[...] = x_ref[...] + 1.0",
                                       "plgpu.barrier_wait(bar)")
    assert handshake_line in [r.line for r in err.related] + [err.source.line]
    div = next(f for f in root.consequences if f.kind == "sequence_divergence")
    assert div.source.line == branch_line  # the extra allocation, not the one it displaced
    assert [r.line for r in div.related] == [handshake_line]
    mm = next(f for f in root.consequences if f.kind == "collective_mismatch")
    assert {mm.source.line, *(r.line for r in mm.related)} == {branch_line, handshake_line}


# -- the trace-time errors of the notes' catalogue, each pinned to its `run_scoped` line

SHAPE = (8, 128)


def _two_thread(body, **kw):
    from jax.experimental.pallas import mosaic_gpu as plgpu

    mesh = dict(grid=(1,), grid_names=("g",), num_threads=2, thread_name="t")
    mesh.update(kw)
    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(SHAPE, jax.numpy.float32),
                        interpret=plgpu.InterpretGPUParams(), **mesh)


def _trace_error_cases():
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu

    def copy(buf, x_ref, o_ref):
        buf[...] = x_ref[...]
        o_ref[...] = buf[...]

    def cluster_axis(x_ref, o_ref):
        pl.run_scoped(lambda b: copy(b, x_ref, o_ref), plgpu.SMEM(SHAPE, jnp.float32),
                      collective_axes=("t", "c"))  # line: cluster

    def regs_collective(x_ref, o_ref):
        pl.run_scoped(lambda acc: copy(o_ref, x_ref, o_ref), plgpu.ACC((64, 64), jnp.float32),
                      collective_axes="t")  # line: regs

    def regs_mixed(x_ref, o_ref):
        pl.run_scoped(lambda acc, b: copy(b, x_ref, o_ref), plgpu.ACC((64, 64), jnp.float32),
                      plgpu.SMEM(SHAPE, jnp.float32), collective_axes="t")  # line: mixed

    def unknown_axis(x_ref, o_ref):
        pl.run_scoped(lambda b: copy(b, x_ref, o_ref), plgpu.SMEM(SHAPE, jnp.float32),
                      collective_axes="zz")  # line: typo

    return {
        "cluster": (_two_thread(cluster_axis, cluster=(2,), cluster_names=("c",)),
                    "Collective allocations along cluster axes", "cluster barriers or GMEM"),
        "regs": (_two_thread(regs_collective), "REGS cannot be collective",
                 "without `collective_axes`"),
        "mixed": (_two_thread(regs_mixed), "cannot be mixed", "Split the scope"),
        "typo": (_two_thread(unknown_axis), "Collective axis `zz` not found",
                 "names the kernel's thread axis (`t` here), and `zz` is not it"),
        "no_thread_name": (_two_thread(unknown_axis, num_threads=None, thread_name=None),
                           "Collective axis `zz` not found",
                           "`zz` is not an axis an allocation can be collective over, and the "
                           "kernel has no named thread axis"),
    }


@pytest.mark.parametrize("case", ["cluster", "regs", "mixed", "typo", "no_thread_name"])
def test_trace_time_errors_point_at_the_run_scoped_line(case):
    kernel, message, hint = _trace_error_cases()[case]
    with pytest.raises(pv.KernelError) as info:
        with pv.trace() as tr:
            kernel(jax.numpy.ones(SHAPE, jax.numpy.float32))
    (f,) = tr.findings
    assert f.kind == "trace_error" and message in f.message
    assert hint in f.suggestion
    assert f.source.file == __file__
    assert f.source.function.rsplit(".", 1)[-1] in {
        "cluster_axis", "regs_collective", "regs_mixed", "unknown_axis"}
    assert "pl.run_scoped(" in f.source.code
    assert f"test_api.py:{f.source.line}" in str(info.value)
    assert not adapter.hooks_installed()


def test_a_kernel_without_interpret_mode_gets_the_fix_at_its_call():
    import jax.numpy as jnp
    from jax.experimental.pallas import mosaic_gpu as plgpu

    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    k = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(SHAPE, jnp.float32), num_threads=1,
                     thread_name="t")  # no interpret=: this CPU-only machine refuses it
    x = jnp.ones(SHAPE, jnp.float32)
    with pytest.raises(pv.KernelError):
        with pv.trace() as tr:
            print(k(x).sum())  # the call: inside another call on its line
    (f,) = tr.findings
    assert f.kind == "trace_error" and "Only interpret mode is supported" in f.message
    assert "Pass `interpret=plgpu.InterpretGPUParams()` to `plgpu.kernel`" in f.suggestion
    # the caret goes under the kernel's call, not under `print`
    assert f.source.code.strip() == "print(k(x).sum())  # the call: inside another call on its line"
    assert f.source.code[f.source.column:].startswith("k(x)")


def test_a_kernel_in_generic_interpret_mode_gets_the_gpu_interpret_params():
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu

    def body(x_ref, o_ref):
        def scoped(buf):
            buf[...] = x_ref[...]
            o_ref[...] = buf[...]

        pl.run_scoped(scoped, plgpu.SMEM(SHAPE, jnp.float32), collective_axes="t")

    # interpret=True: JAX's generic interpreter, which has no Mosaic GPU threads
    k = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(SHAPE, jnp.float32), num_threads=2,
                     thread_name="t", interpret=True)
    with pytest.raises(pv.KernelError):
        with pv.trace() as tr:
            k(jnp.ones(SHAPE, jnp.float32))
    (f,) = tr.findings
    assert f.kind == "trace_error" and "does not support collective axes" in f.message
    assert f.suggestion.startswith("The kernel is in JAX's generic interpret mode "
                                   "(`interpret=True`)")
    assert "`interpret=plgpu.InterpretGPUParams()`" in f.suggestion


def test_views_of_an_empty_trace_say_so(tmp_path):
    with pv.trace() as tr:
        pass
    for view in (tr.plot, lambda: tr.to_html(tmp_path / "t.html"), lambda: pv.TraceWidget(tr)):
        with pytest.raises(pv.EmptyTraceError, match="no Pallas GPU kernel ran"):
            view()
    assert not (tmp_path / "t.html").exists()
    data = tr._repr_mimebundle_()
    data = data[0] if isinstance(data, tuple) else data
    assert set(data) == {"text/plain"} and "no Pallas GPU kernel ran" in data["text/plain"]


def test_a_kernel_that_is_not_a_pallas_gpu_kernel_is_named_as_such():
    from jax.experimental import pallas as pl

    def add_one(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    x = jax.numpy.zeros((8, 128), jax.numpy.float32)
    generic = pl.pallas_call(add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                             interpret=True)  # the generic interpreter, not GPU interpret mode
    with pv.trace() as tr:
        y = generic(x)
        z = jax.numpy.sin(x)
    assert float(y[0, 0]) == 1.0 and float(z[0, 0]) == 0.0
    assert not tr.ran_kernels and len(tr.events) == 0
    assert "no Pallas GPU kernel ran in interpret mode" in tr.summary()


def test_summary_of_a_kernel_whose_blocks_allocate_nothing():
    from pallas_viz.examples import shapes

    # a grid-(2,) pallas_call copying its operand: every request is the interpreter's
    # own, for the whole device; "0 block(s) x 1 thread" would misreport its grid
    fn, args = shapes.launch(shapes.plain_copy, "pallas_call")
    with pv.trace() as tr:
        fn(*args)
    assert tr.findings == [] and tr.events
    assert all(e.block is None for e in tr.events)
    text = tr.summary()
    assert "events, all kernel-level (operands: its blocks requested nothing); GMEM" in text
    assert "0 block(s)" not in text


def test_summary_of_a_kernel_cut_short_counts_only_the_blocks_that_ran(tmp_path):
    from pallas_viz.render.payload import build_state

    # grid (3,): block 0's threads put different shapes in one collective buffer and the
    # interpreter fails there; blocks 1 and 2 never run
    fn, args = ex.mismatched_collective_shapes(grid=(3,))
    with pv.trace(raise_errors=False) as tr:
        fn(*args)
    assert tr.failure is not None
    (s,) = tr.stats()
    assert s.blocks == 1 and s.cut_short
    line = "1 block(s) x 2 t (the run stopped: only the blocks that ran are counted)"
    assert line in tr.summary()
    path = tmp_path / "t.json"
    tr.save(path)
    assert line in pv.load(path).summary()
    assert build_state(tr)["meta"]["stats"][0]["cut_short"] is True
    # the same grid, run to its end: every block counted, nothing said of a stop
    fn, args = ex.clean_collective(grid=(3,))
    with pv.trace() as tr:
        fn(*args)
    (s,) = tr.stats()
    assert s.blocks == 3 and not s.cut_short
    assert "3 block(s) x 2 t;" in tr.summary() and "the run stopped" not in tr.summary()


def test_a_kernel_stopped_by_the_interpreters_own_race_raises_kernel_error():
    from pallas_viz.examples import corpus

    fn, args = corpus.CLEAN_KERNELS["pallas_call_scratch"]()
    raised = None
    try:
        with pv.trace(detect_races=True) as tr:
            fn(*args)
    except pv.KernelError as e:
        raised = e
    (f,) = tr.findings
    assert f.kind == "race" and f.severity == "warning" and not tr.errors
    if tr.failure is None:  # JAX 0.11 logs the race and goes on
        assert raised is None and "stopped the run" not in f.message
    else:  # JAX 0.12 stops the run: the warning explains the kernel's failure
        assert raised is not None and raised.finding.message == f.message
        assert "warning[race]" in str(raised) and "stopped the run there" in str(raised)


def test_a_pallas_call_with_tiling_block_specs_is_explained():
    # GPU interpret mode asserts whole-array blocks with a bare `assert` (no message)
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu

    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    f = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((32, 128), jax.numpy.float32),
                       grid=(4,), in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                       out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                       interpret=plgpu.InterpretGPUParams())
    with pytest.raises(pv.KernelError), pv.trace() as tr:
        f(jax.numpy.ones((32, 128), jax.numpy.float32))
    (finding,) = tr.findings
    assert finding.kind == "trace_error"
    assert "AssertionError: (no message) raised at interpret_pallas_call.py:" in finding.message
    assert "block (8, 128) of (32, 128)" in finding.message
    assert "only with whole-array blocks" in finding.suggestion
    assert finding.source is not None and finding.source.file == __file__


def test_a_kernel_run_in_a_loop_shows_its_root_cause_once():
    from pallas_viz.analysis.repeats import repeated_roots
    from pallas_viz.examples import shapes as sh

    fn, args = sh.launch(sh.collective_in_branch, "grid3")
    good, good_args = sh.launch(sh.hoisted_collective, "grid3")
    with pv.trace(raise_errors=False) as tr:
        for _ in range(3):
            jax.block_until_ready(fn(*args))
        jax.block_until_ready(good(*good_args))
    assert [f.kernel for f in tr.findings] == [0, 1, 2]  # each run analysed on its own
    assert [(f.kind, runs) for f, runs in repeated_roots(tr.findings, tr.kernels)] == [
        ("partial_collective", [0, 1, 2])]
    text = tr.summary()
    assert text.count("error[partial_collective]") == 1, text
    assert "error[partial_collective] in kernel runs 0..2 (collective_in_branch):" in text
    # the three runs' lines read the same: printed once; the other kernel's on its own
    assert "\n  kernels 0..2 (3 runs, each) collective_in_branch launched at " in text, text
    assert "\n  kernel 3 hoisted_collective launched at " in text
    assert "kernel 1 collective_in_branch" not in text
    assert ("3 error(s), 0 warning(s) in 4 kernel run(s)" in text
            and "(3 root cause(s), 1 distinct: the same root cause in several runs of a "
                "kernel is shown once)" in text)
    # two different kernels with a root each are not one
    other, other_args = sh.launch(sh.mismatched_shapes, "grid3")
    with pv.trace(raise_errors=False) as tr2:
        jax.block_until_ready(fn(*args))
        try:
            jax.block_until_ready(other(*other_args))
        except jax.errors.JaxRuntimeError:
            pass
    assert len(repeated_roots(tr2.findings, tr2.kernels)) == len(tr2.findings) >= 2
    assert "distinct" not in tr2.summary()
