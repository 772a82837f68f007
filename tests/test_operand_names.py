"""The names of a `pl.run_scoped` call's operands, read from the kernel's source.

A message about one of several barriers a scope allocates names it as the scoped
function does (`empty`, `bars[1]`). The names are read from the source at record time
(`kernel_source.scoped_operands`), so a kernel jit-cached before the trace gets them
too; here they are checked against JAX's own names for the operands (the scope's
`debug_info.arg_names`), seen while JAX traces the kernel, for every way of writing
the operands.
"""

from __future__ import annotations

import functools
import json

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from test_deadlock_advice import _arrives_at_the_other_barrier

import pallas_viz as pv
from pallas_viz import kernel_source
from pallas_viz.errors import TraceFileError
from pallas_viz.examples import shapes as sh

S = functools.partial(plgpu.SMEM, (8, 128), jnp.float32)
B = plgpu.Barrier


def _many_forms(x_ref, o_ref):
    def scoped(buf, ready, empty):
        buf[...] = x_ref[...]
        o_ref[...] = buf[...]

    pl.run_scoped(scoped, S(), B(num_arrivals=1), B(num_arrivals=2), collective_axes="t")

    def by_keyword(a, bars):
        pass

    pl.run_scoped(by_keyword, S(), bars=(B(), B()), collective_axes="t")
    pl.run_scoped(lambda p, q: None, B(num_barriers=3), B(), collective_axes="t")
    pl.run_scoped(lambda *bs: None, B(), B(), collective_axes="t")

    def nested(x, *rest, zz, aa):
        pass

    pl.run_scoped(nested, S(), B(), (B(), [B(), B()]), zz=B(),
                  aa={"k": B(), "a": (B(), S())}, collective_axes="t")

    @functools.partial(pl.run_scoped, q=S(), p=B(), collective_axes="t")
    def _(q, p):
        pass

    def scoped(inner_a, inner_b):  # noqa: F811 - a second `scoped`: the nearest one counts
        pass

    pl.run_scoped(scoped, B(), B(), collective_axes="t")


def _jax_names(body) -> dict[int, tuple[str, ...]]:
    """line -> JAX's names of the operands of the `run_scoped` on it, as JAX traces it."""
    from jax._src.pallas.mosaic_gpu.interpret import jaxpr_interpret as jxi

    seen: dict[int, tuple[str, ...]] = {}
    orig = jxi.JaxprInterpreter._interpret_run_scoped_p

    def spy(interp, eqn, *args, **kwargs):
        info = eqn.params["jaxpr"].debug_info
        frames = [f for f in eqn.source_info.traceback.frames if f.file_name == __file__]
        if frames and info is not None and info.arg_names:
            seen[frames[0].line_num] = tuple(info.arg_names)
        return orig(interp, eqn, *args, **kwargs)

    jxi.JaxprInterpreter._interpret_run_scoped_p = spy
    try:
        k = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                         num_threads=2, thread_name="t", interpret=plgpu.InterpretGPUParams())
        jax.block_until_ready(k(jnp.ones((8, 128), jnp.float32)))
    finally:
        jxi.JaxprInterpreter._interpret_run_scoped_p = orig
    return seen


def test_the_names_are_jaxs_own_for_every_form():
    jax_names = _jax_names(_many_forms)
    assert len(jax_names) == 7, jax_names
    for line, names in jax_names.items():
        # (a barrier array's slots are named apart, `p.at[0]`: JAX names its operand once)
        ours = kernel_source.scoped_operands(__file__, line)
        assert tuple(dict.fromkeys(n.split(".at[")[0] for n in ours)) == names, line
    slots = [kernel_source.scoped_operands(__file__, line) for line in jax_names]
    assert ("p.at[0]", "p.at[1]", "p.at[2]", "q") in slots, slots
    assert ("x", "rest[0]", "rest[1][0]", "rest[1][1][0]", "rest[1][1][1]", "aa['a'][0]",
            "aa['a'][1]", "aa['k']", "zz") in jax_names.values()


def test_no_names_where_the_source_cannot_say():
    named = sh.marked_line(_unknowable, "ALLOC")
    for line in range(named - 7, named - 1):
        assert kernel_source.scoped_operands(__file__, line) == (), line


def _unknowable(x_ref, o_ref, types=()):
    pl.run_scoped(lambda *bs: None, *types, collective_axes="t")
    pl.run_scoped(lambda a: None, **{"a": B()}, collective_axes="t")
    pl.run_scoped(lambda a: None, {1: B()}, collective_axes="t")
    pl.run_scoped(undefined_function, B(), collective_axes="t")  # noqa: F821
    pl.run_scoped(lambda a: None, B(), collective_axes="t"); pl.run_scoped(lambda b: None, B())  # noqa: E702
    pl.run_scoped(lambda: None, B(), collective_axes="t")
    # the next one has a name
    pl.run_scoped(lambda a: None, B(), collective_axes="t")  # ALLOC


def test_the_last_line_of_the_unknowable_ones_is_named():
    line = sh.marked_line(_unknowable, "ALLOC")
    assert kernel_source.scoped_operands(__file__, line) == ("a",)


# thread 0 arrives at `empty`, thread 1 waits on `full`: both from one run_scoped
_wait_on_full_arrive_on_empty = _arrives_at_the_other_barrier


def _deadlock(tr):
    return next(f for f in tr.findings if f.kind == "deadlock")


def test_the_names_travel_in_the_trace_file(tmp_path):
    fn, args = sh.launch(_wait_on_full_arrive_on_empty, "no_grid")
    tr, _ = sh.run_traced(fn, args)
    assert "`full`, operand 2 of 3" in _deadlock(tr).message
    path = tmp_path / "t.json"
    tr.save(path)
    loaded = pv.load(path)
    assert _deadlock(loaded).message == _deadlock(tr).message
    # a file without them (an older pallas_viz's) still loads: operands by number only
    d = json.loads(path.read_text())
    for s in d["events"]["sources"]:
        s.pop("operands", None)
    path.write_text(json.dumps(d))
    message = _deadlock(pv.load(path)).message
    assert "(operand 2 of 3 of its `pl.run_scoped`)" in message and "`full`" not in message


def _saved_with_operands(tmp_path, operands):
    """The deadlock's trace saved, its one named `run_scoped` line given `operands`."""
    fn, args = sh.launch(_wait_on_full_arrive_on_empty, "no_grid")
    tr, _ = sh.run_traced(fn, args)
    path = tmp_path / "t.json"
    tr.save(path)
    d = json.loads(path.read_text())
    (named,) = [s for s in d["events"]["sources"] if s.get("operands")]
    named["operands"] = operands
    path.write_text(json.dumps(d))
    return path


@pytest.mark.parametrize("bad", [["a", 3], "full", [None], ["x" * 5000], {"0": "a"}])
def test_corrupt_operand_names_are_refused(tmp_path, bad):
    path = _saved_with_operands(tmp_path, bad)
    with pytest.raises(TraceFileError, match="operands"):
        pv.load(path)


def test_names_that_do_not_count_the_requests_are_not_shown(tmp_path):
    # a file whose names for the line are fewer than the requests it made: none shown
    path = _saved_with_operands(tmp_path, ["buf", "full"])
    message = _deadlock(pv.load(path)).message
    assert "(operand 2 of 3 of its `pl.run_scoped`)" in message and "`full`" not in message


def _waits_on_the_other_slot(x_ref, o_ref):
    """Thread 0 arrives at slot 0 of a 2-barrier array, thread 1 waits on slot 1."""
    t = jax.lax.axis_index("t")

    def body(buf, full):
        @pl.when(t == 0)
        def _():
            buf[...] = x_ref[...]
            plgpu.barrier_arrive(full.at[0])

        @pl.when(t == 1)
        def _():
            plgpu.barrier_wait(full.at[1])
            o_ref[...] = buf[...]

    pl.run_scoped(body, S(), B(num_arrivals=1, num_barriers=2), collective_axes="t")


@pytest.mark.parametrize("grid", [None, (2,)])
def test_a_barrier_arrays_slots_are_named_as_the_code_writes_them(grid):
    # (review K2: "a barrier allocated at line 18 (operand 3 of 3 of its pl.run_scoped) ...
    # it arrived at operand 2 of that pl.run_scoped instead" of a scope of 2 operands)
    mesh = {} if grid is None else {"grid": grid, "grid_names": ("g",)}
    k = plgpu.kernel(_waits_on_the_other_slot, out_type=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                     num_threads=2, thread_name="t", interpret=plgpu.InterpretGPUParams(), **mesh)
    for _ in range(2):
        tr, _ = sh.run_traced(k, (jnp.ones((8, 128), jnp.float32),))
        message = _deadlock(tr).message
        assert "(`full.at[1]` of its `pl.run_scoped`)" in message, message
        assert "it arrived at `full.at[0]` instead" in message, message
        assert "operand 3" not in message


def test_a_scope_s_barrier_is_named_when_its_creator_s_requests_were_cut_short():
    """A run that fails while a thread is still requesting a scope's operands cuts that
    thread's run of requests short; which thread that is varies by run. The barrier is
    named from another thread's complete run of the same allocation (a pipeline's root
    named `full` in some runs only). The cut is made in a real trace's file: the creating
    thread's next request there loses its line."""
    import test_pipeline_barriers as pipe

    from pallas_viz.analysis import AnalysisContext
    from pallas_viz.analysis.frame import CREATE, JOIN

    fn, args = sh.launch(pipe.pipeline, "no_grid")
    tr, _ = sh.run_traced(fn, args)
    c = tr.events.columns
    scope = [i for i in range(len(tr.events)) if tr.events.source_of(i) is not None
             and tr.events.source_of(i).line == pipe.SCOPE and c["op"][i] in (CREATE, JOIN)]
    creates = [i for i in scope if c["op"][i] == CREATE and c["resource"][i] == c["resource"][
        scope[-1]]]
    full = min(creates, key=lambda i: int(c["allocation"][i]))  # the scope's first barrier
    mine = [i for i in scope if c["thread"][i] == c["thread"][full]]
    d = tr.to_dict()
    d["events"]["columns"]["source"][mine[-1]] = -1  # its last operand request: no line
    cut = pv.Trace.from_dict(d)
    ctx = AnalysisContext(table=cut.events, kernels=cut.kernels)
    assert len(ctx._operand_runs()[full][1]) == 2  # its own run: cut short
    assert ctx.operand(full) == " (`full`, operand 2 of 3 of its `pl.run_scoped`)"
