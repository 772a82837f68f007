"""Property test: random small kernels, checked against invariants of the trace.

Each generated program has 1-4 threads, 1-3 grid points and a sequence of scoped
allocations: collective SMEM buffers and barriers (`collective_axes="t"`), and
per-thread REGS accumulators (`plgpu.ACC`, never collective), each either made by
every thread or inside `pl.when(t == k)`. The expected requests are counted from
the program alone: threads x grid points x allocations reached.

Reproducible: the examples are drawn from a fixed seed (hypothesis `derandomize`), so a
failure comes back on every run. Run longer, or explore other programs, with e.g.
``PALLAS_VIZ_FUZZ_EXAMPLES=300 PALLAS_VIZ_FUZZ_SEED=7 pytest tests/test_fuzz.py``
(hypothesis prints the falsifying program; the same seed and count reproduce it).
"""

from __future__ import annotations

import collections
import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

import pallas_viz as pv
from pallas_viz import _jax as adapter

EXAMPLES = int(os.environ.get("PALLAS_VIZ_FUZZ_EXAMPLES", "15"))
# Unset: hypothesis' own fixed seed for this test (derandomize=True). Set: that seed.
SEED = os.environ.get("PALLAS_VIZ_FUZZ_SEED")
OUT = (8, 128)


@dataclasses.dataclass(frozen=True)
class Op:
    kind: str  # "smem" | "barrier" | "acc"
    shape: tuple[int, ...]
    guard: int | None  # only thread `guard` makes it; None: every thread

    @property
    def collective(self) -> bool:
        return self.kind != "acc"


@dataclasses.dataclass(frozen=True)
class Program:
    threads: int
    grid: int
    ops: tuple[Op, ...]

    def reaches(self, op: Op, thread: int) -> bool:
        return op.guard is None or op.guard == thread

    def expected_requests(self) -> collections.Counter:
        """(block, thread, memory space or resource) -> number of requests."""
        out = collections.Counter()
        for b in range(self.grid):
            for t in range(self.threads):
                for op in self.ops:
                    if self.reaches(op, t):
                        what = {"smem": "SMEM", "acc": "REGS", "barrier": "barrier"}[op.kind]
                        out[((b,), t, what)] += 1
        return out

    @property
    def divergent_collective(self) -> bool:
        return any(op.collective and op.guard is not None for op in self.ops)


@st.composite
def programs(draw):
    threads = draw(st.integers(1, 4))
    grid = draw(st.integers(1, 3))
    shape = st.sampled_from([(8, 128), (16, 128), (4, 256), (128,)])
    guard = st.one_of(st.none(), st.integers(0, threads - 1)) if threads > 1 else st.none()
    op = st.one_of(
        st.builds(Op, st.just("smem"), shape, guard),
        st.builds(Op, st.just("barrier"), st.just(()), guard),
        st.builds(Op, st.just("acc"), st.just((64, 128)), guard),
    )
    ops = draw(st.lists(op, min_size=1, max_size=5))
    return Program(threads, grid, tuple(ops))


def build(program: Program):
    """The kernel of `program`: scopes one after another, each writing its buffer."""

    def body(x_ref, o_ref):
        t = jax.lax.axis_index("t")
        for i, op in enumerate(program.ops):
            def scoped(ref, op=op, i=i):
                if op.kind == "smem":
                    ref[...] = jnp.full(op.shape, float(i), jnp.float32)

            if op.kind == "smem":
                spec, kw = plgpu.SMEM(op.shape, jnp.float32), {"collective_axes": "t"}
            elif op.kind == "barrier":
                spec, kw = plgpu.Barrier(num_arrivals=1), {"collective_axes": "t"}
            else:
                spec, kw = plgpu.ACC(op.shape, jnp.float32), {}

            def run(spec=spec, kw=kw, scoped=scoped):
                pl.run_scoped(scoped, spec, **kw)

            if op.guard is None:
                run()
            else:
                pl.when(t == op.guard)(run)

        @pl.when(t == 0)
        def _():
            o_ref[...] = x_ref[...]

    fn = plgpu.kernel(
        body, out_type=jax.ShapeDtypeStruct(OUT, jnp.float32), grid=(program.grid,),
        grid_names=("g",), num_threads=program.threads, thread_name="t",
        interpret=plgpu.InterpretGPUParams())
    return fn, (jnp.ones(OUT, jnp.float32),)


def _requests(tr) -> collections.Counter:
    out = collections.Counter()
    for e in tr.events:
        if e.block is not None and e.op in ("create", "join"):  # None: kernel-level
            out[(e.block, e.thread, e.memory_space if e.resource == "buffer" else e.resource)] += 1
    return out


def _seeded(test):
    return test if SEED is None else seed(int(SEED))(test)


@_seeded
@settings(max_examples=EXAMPLES, deadline=None, derandomize=SEED is None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(program=programs())
def test_random_kernels_keep_the_invariants(program, tmp_path_factory):
    fn, args = build(program)
    with pv.trace(raise_errors=False, timeout_s=60) as tr:
        fn(*args)
    assert not adapter.hooks_installed()
    assert len(tr.kernels) == 1 or tr.failure is not None
    errors = [f for f in tr.findings if f.severity == "error"]
    if tr.failure is not None or "deadlocks" in tr.meta:
        # an interpreter failure is always explained by an error finding
        assert errors, f"unexplained failure {tr.failure}"
    else:
        # every request recorded exactly once (threads x grid points x allocations reached)
        assert _requests(tr) == program.expected_requests()
        np.testing.assert_array_equal(np.asarray(fn(*args)), np.asarray(args[0]))
    # every allocation made in a block is freed, or reported as a leak (or the kernel failed)
    c = tr.events.columns
    created = {int(a) for a, op, b in zip(c["allocation"], c["op"], c["block"])
               if op == 0 and b >= 0 and a >= 0}  # block -1: a kernel-level request
    freed = {int(a) for a, op in zip(c["allocation"], c["op"]) if op == 3}
    reported = {tr.events[i].allocation for f in tr.findings if f.kind == "leak"
                for i in f.events}
    if tr.failure is None:
        assert created - freed <= reported
    # kernels whose threads all make the same collective allocations are clean
    # (a divergent program may still be clean: e.g. thread 0 and thread 1 each allocate
    # one barrier in their own branch, at the same line here, and the two requests
    # merge into one barrier that is freed)
    if not program.divergent_collective:
        assert tr.findings == [], tr.summary()
    # the JSON round trip keeps every finding
    path = tmp_path_factory.mktemp("fuzz") / "t.json"
    tr.save(path)
    back = pv.load(path)
    assert back.findings == tr.findings
    assert len(back.events) == len(tr.events)
