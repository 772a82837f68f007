"""Allocations made inside warp-level code ("warp_mesh"): one root, the same every run.

Interpret mode makes each warp's request with its warpgroup's key, so the warps of a
warpgroup free buffers under each other: the interpreter's error (a KeyError at one of
several lines, an out-of-bounds access, a barrier misuse) and the other symptoms vary
from run to run. The diagnosis must not: one `warp_allocation` error at the allocation
line, with everything else folded under it.
"""

from __future__ import annotations

import inspect
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

import pallas_viz as pv
from pallas_viz.errors import KernelError
from pallas_viz.examples import shapes as sh

RUNS = 4
# every body that allocates, buggy or (at warpgroup level) clean
BODIES = {**sh.BUGGY, "hoisted_collective": sh.CLEAN["hoisted_collective"],
          "hoisted_barrier": sh.CLEAN["hoisted_barrier"]}


def _root(body, num_threads: int, warps_in: str = "no_grid"):
    fn, args = sh.launch(body, "warp_mesh", num_threads=num_threads, warps_in=warps_in)
    tr, _ = sh.run_traced(fn, args, timeout_s=10)
    errors = [f for f in tr.findings if f.severity == "error"]
    assert len(errors) == 1 and len(tr.findings) == 1, tr.summary()
    return tr, tr.findings[0]


@pytest.mark.parametrize("num_threads", [2, 1])
@pytest.mark.parametrize("name", list(BODIES))
def test_one_warp_allocation_root_every_run(name, num_threads):
    body = BODIES[name]
    want = sh.lines(body)
    seen = set()
    for _ in range(RUNS):
        tr, root = _root(body, num_threads)
        assert root.kind == "warp_allocation", tr.summary()
        assert root.source.line == want.alloc[0]
        # the kernel's other allocation lines are named with it, not as roots of their own
        assert [r.line for r in root.related] == list(want.alloc[1:])
        if want.branch:  # the branch on the warp index encloses the line
            assert root.branch is not None and root.branch.line == want.branch[0]
        assert all(c.kernel == root.kernel for c in root.consequences)
        assert "out of the `plgpu.WarpMesh`" in root.suggestion
        # (the body is the kernel body: the harness's call of it is no call of the user's)
        assert root.source.via is None and "move the `pl.run_scoped`" in root.suggestion
        text = tr.summary()
        assert "error[warp_allocation]" in text and "clean" not in text
        seen.add((root.kind, root.source.line, root.message))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("warps_in", ["grid3", "cluster2"])
@pytest.mark.parametrize("name", list(BODIES))
def test_warp_code_in_a_grid_or_a_cluster_has_the_same_one_root(name, warps_in):
    """Warp-level code in every block of a grid or a cluster: the same one root as in one
    block, every run."""
    body = BODIES[name]
    want = sh.lines(body)
    seen = set()
    for _ in range(3):
        tr, root = _root(body, 2, warps_in)
        assert root.kind == "warp_allocation", tr.summary()
        assert root.source.line == want.alloc[0]
        assert [r.line for r in root.related] == list(want.alloc[1:])
        blocks = {b for _, b, _ in root.cells}
        if tr.failure is None and not tr.meta.get("deadlocks"):  # it ran to its end (a
            # failure or a wait that cannot end stops it: later blocks do not run)
            assert len(blocks) == (3 if warps_in == "grid3" else 2), root.cells
        seen.add((root.kind, root.source.line, root.message))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("warps_in", ["grid3", "cluster2"])
def test_warp_code_without_allocations_in_a_grid_or_a_cluster_stays_clean(warps_in):
    for _ in range(3):
        fn, args = sh.launch(sh.CLEAN["plain_copy"], "warp_mesh", warps_in=warps_in)
        tr, _ = sh.run_traced(fn, args)
        assert tr.findings == [] and tr.failure is None, tr.summary()
        assert len(tr.events) > 0 and "clean: no findings" in tr.summary()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["collective_in_branch", "barrier_in_branch", "hoisted_barrier",
                                  "plain_copy"])
def test_warp_code_on_two_devices(name):
    """Warp-level code on two devices (shard_map; own processes): the one root at the
    allocation line, the same each run; no allocation, no finding."""
    body = BODIES.get(name) or sh.CLEAN[name]
    roots = set()
    for _ in range(2):
        out = sh.run_isolated(name, "warp_mesh", warps_in="two_devices")
        assert out["events"] > 0, out
        roots.add(tuple(tuple(r) for r in out["roots"]))
    (got,) = roots  # the same roots every run
    if name == "plain_copy":
        assert got == () and out["outcome"] == "runs", out
    else:
        assert [r[:2] for r in got] == [("warp_allocation", sh.lines(body).alloc[0])], got


def test_a_kernel_failure_raises_the_warp_root():
    """Whether the interpreter fails varies from run to run; when it does, the
    `KernelError` raised is the warp root's (whatever the interpreter raised, at whichever
    line), and when it does not, the trace has that same root."""
    messages = set()
    for _ in range(RUNS + 2):
        fn, args = sh.launch(sh.CLEAN["hoisted_collective"], "warp_mesh")
        sh.drain_effects()
        try:
            with pv.trace(timeout_s=10) as tr:
                fn(*args).block_until_ready()
        except KernelError as e:
            assert tr.failure is not None  # the interpreter itself failed
            assert e.finding.kind == "warp_allocation"
            assert str(e).splitlines()[0].startswith("error[warp_allocation]")
            messages.add(e.finding.message)
        else:
            (root,) = tr.findings
            assert root.kind == "warp_allocation"
            messages.add(root.message)
    assert len(messages) == 1, messages


def test_warp_code_without_allocations_stays_clean():
    for _ in range(RUNS):
        fn, args = sh.launch(sh.CLEAN["plain_copy"], "warp_mesh")
        tr, _ = sh.run_traced(fn, args)
        assert tr.findings == [], tr.summary()


_LOOP = """
import sys
from pallas_viz.examples import shapes as sh
for i in range(int(sys.argv[1])):
    fn, args = sh.launch(sh.CLEAN["hoisted_barrier"], "warp_mesh", num_threads=1)
    tr, s = sh.run_traced(fn, args, timeout_s=5)
    assert [f.kind for f in tr.findings] == ["warp_allocation"], tr.summary()
    print(i, round(s, 2), flush=True)
print("done", flush=True)
"""


def test_a_failed_kernel_does_not_hang_on_a_freed_barrier():
    """One warp waits on a barrier another warp freed; when the kernel fails, JAX aborts
    only the barriers still allocated, so that wait never ended (about one run in ten,
    even with `timeout_s`, which stands aside once a kernel failed). pallas_viz aborts it:
    every run ends, within its timeout."""
    proc = subprocess.run([sys.executable, "-c", _LOOP, "20"], capture_output=True,
                          text=True, timeout=240)
    assert proc.stdout.splitlines()[-1:] == ["done"], proc.stdout[-1500:] + proc.stderr[-3000:]
    times = [float(ln.split()[1]) for ln in proc.stdout.splitlines()[:-1]]
    assert len(times) == 20 and max(times) < 5 + 5, times


class _WaitAfterFree:
    """Forces one interleaving of `_others_leave_first` (in warp code, one warpgroup; the
    warps share their warpgroup's key and its ref count of 1, so the first to leave the
    scope frees the allocation, and a warp allocating after that re-creates it): every
    free waits until all `WARPS` warps allocated the barrier; warp 1's look-up of the
    barrier it waits on is held until a warp freed it; a free of a key already gone
    (which fails and ends the kernel) waits until that look-up ran. Each hold at most
    `HOLD_S`. `forced`: the look-up came after the free, the key no longer allocated.
    Patches the interpreter's methods while active, over pallas_viz's hooks (whose
    frees hold the memory's lock: a hold under it would stop every warp)."""

    HOLD_S = 5.0
    WARPS = 4

    def __init__(self):
        import threading

        from jax._src.pallas.mosaic_gpu.interpret import shared_memory as smm

        self.cls = smm.GPUSharedMemory
        self.saved = {name: self.cls.__dict__.get(name) for name in
                      ("get_barrier_and_increment_clock", "allocate_barrier",
                       "deallocate_barrier", "deallocate_buffer")}
        self.lookup, self.allocate = self.cls.get_barrier_and_increment_clock, \
            self.cls.allocate_barrier
        self.free_barrier, self.free_buffer = self.cls.deallocate_barrier, \
            self.cls.deallocate_buffer
        self.allocated, self.freed, self.looked_up = (threading.Event() for _ in range(3))
        self.lock, self.allocations = threading.Lock(), 0
        self.held: list[bool] = []  # whether the held look-up found its key gone

    def _held(self, free):
        def held_free(sm, key, *args, **kwargs):
            self.allocated.wait(self.HOLD_S)
            with self.lock:  # one free at a time: the check below stays true
                if key in sm.mem:
                    return free(sm, key, *args, **kwargs)
            self.looked_up.wait(self.HOLD_S)  # a second free: it fails, after warp 1's
            return free(sm, key, *args, **kwargs)

        return held_free

    def _counted(self, sm, *args, **kwargs):
        try:
            return self.allocate(sm, *args, **kwargs)
        finally:
            with self.lock:
                self.allocations += 1
                if self.allocations == self.WARPS:
                    self.allocated.set()

    def __enter__(self):
        lookup, freed, looked_up, held = self.lookup, self.freed, self.looked_up, self.held
        free_barrier = self._held(self.free_barrier)

        def deallocate_barrier(sm, *args, **kwargs):
            try:
                return free_barrier(sm, *args, **kwargs)
            finally:
                freed.set()

        def get_barrier_and_increment_clock(sm, key, *args, **kwargs):
            if sys._getframe(1).f_code.co_name != "_barrier_wait" or held:
                return lookup(sm, key, *args, **kwargs)
            held.append(freed.wait(self.HOLD_S) and key not in sm.mem)
            try:
                return lookup(sm, key, *args, **kwargs)
            finally:
                looked_up.set()

        self.cls.get_barrier_and_increment_clock = get_barrier_and_increment_clock
        self.cls.deallocate_barrier = deallocate_barrier
        self.cls.deallocate_buffer = self._held(self.free_buffer)
        self.cls.allocate_barrier = lambda sm, *a, **kw: self._counted(sm, *a, **kw)
        return self

    def __exit__(self, *exc):
        for name, saved in self.saved.items():
            if saved is None:
                delattr(self.cls, name)
            else:
                setattr(self.cls, name, saved)

    @property
    def forced(self) -> bool:
        return self.held == [True]


def _others_leave_first(ctx, x_ref, o_ref):
    """A buffer and a barrier allocated in warp code: warp 1 waits on the barrier; the
    other warps leave the scope at once, and the first of them frees both (their ref
    count is their warpgroup's)."""

    def scoped(buf, bar):
        @pl.when(ctx.thread == 1)
        def _():
            plgpu.barrier_wait(bar)

    pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32), plgpu.Barrier(num_arrivals=1),
                  collective_axes=ctx.axis)


def test_a_wait_on_a_barrier_another_warp_freed_is_recorded():
    """A barrier look-up that fails (its key no longer allocated: a `KeyError`) is
    recorded as that operation, on a freed barrier, at its line and warp, and the root
    stays the one `warp_allocation`. The interleaving is forced (`_WaitAfterFree`) in
    each of three runs."""
    lines, first = inspect.getsourcelines(_others_leave_first)
    wait = ("wait", 0, 1, "thread",
            first + next(i for i, ln in enumerate(lines) if "barrier_wait(bar)" in ln))
    for _ in range(3):
        fn, args = sh.launch(_others_leave_first, "warp_mesh", num_threads=1)
        sh.drain_effects()
        with pv.trace(raise_errors=False, timeout_s=10) as tr, _WaitAfterFree() as forcing:
            jax.block_until_ready(fn(*args))
        assert forcing.forced, forcing.held
        assert [f.kind for f in tr.findings] == ["warp_allocation"], tr.summary()
        ops = [o for o in tr.meta["barrier_ops"] if o["freed"] and o["phase"] == -1]
        got = [(o["op"], o["thread"], o["warp"], o["via"], o["source"]["line"]) for o in ops]
        assert got == [wait], got
        assert ops[0]["num_arrivals"] == 0 and ops[0]["allocation"] >= 0, ops
        assert ops[0]["source"]["code"].strip() == "plgpu.barrier_wait(bar)"
        assert tr.failure is not None and tr.failure.type == "KeyError", tr.failure
        # the first KeyError the interpreter records: warp 1's look-up, or (about one
        # run in thirty) another warp's second free of the scope's buffer, which can
        # fail first once the wait's look-up has failed
        where = (tr.failure.warp, tr.failure.request.get("callback"))
        assert where == (1, "_barrier_wait") or (
            where[0] in (0, 2, 3) and where[1] == "_deallocate_buffer"), where


def non_collective_scope(ctx, x_ref, o_ref):
    """Warp code opening a scope for one thread (no `collective_axes`)."""

    def scoped(buf):
        buf[...] = x_ref[...]
        sh.store_block_rows(ctx, o_ref, buf[...])

    pl.run_scoped(scoped, ctx.smem(sh.SHAPE, jnp.float32))  # ALLOC


def test_a_non_collective_scope_in_warp_code_is_told_to_move_out():
    # JAX rejects it while tracing (no thread axis among its collective axes); passing the
    # thread axis, as for warpgroup code, would make it a warp allocation: the hint says so
    fn, args = sh.launch(non_collective_scope, "warp_mesh")
    tr, _ = sh.run_traced(fn, args, timeout_s=10)
    (root,) = tr.findings
    assert root.kind == "trace_error", tr.summary()
    assert root.source.line == sh.lines(non_collective_scope).alloc[0]
    assert "must have the thread axis in its collective axes" in root.message
    assert "inside warp-level code (a `pl.core_map` over `plgpu.WarpMesh`), move it out" \
        in root.suggestion
