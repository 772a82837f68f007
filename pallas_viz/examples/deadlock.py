"""Kernels that deadlock or misuse barriers in GPU interpret mode.

The deadlocks (`barrier_handshake_in_branch`, `num_arrivals_too_high`,
`crossed_waits`, `ping_pong(waits=3)`, `missing_arrival`, `wait_behind_a_wait`) are
stopped the moment they happen by pallas_viz's wait-for check: every thread has
finished or waits on a barrier no running thread can complete. `spin_on_flag`
deadlocks in a way the check cannot see (one thread polls memory instead of waiting
on a barrier): only `pv.trace(timeout_s=...)` or Ctrl-C stops it. The misuses
(`arrive_without_wait`, `arrive_ahead_of_waiter`, `unobserved_phase`,
`arrive_after_block_exit`) are not deadlocks; the `barrier_misuse` findings name the
lines.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from .kernels import SHAPE, _kernel, _x


def barrier_handshake_in_branch(grid=(1,)):
    """A handshake barrier allocated in thread 0's branch: thread 0 waits forever.

    Thread 0 allocates the barrier inside `pl.when(t == 0)` and waits for thread 1
    to arrive; thread 1 never allocates it, so it can never arrive. Without
    pallas_viz the interpreter hangs; under `pv.trace()` the wait-for check stops
    the run as soon as thread 1 has finished. Thread 1 finished without requesting
    the barrier, so the allocation in thread 0's branch is the root cause (a
    `partial_collective` at the `pl.run_scoped` line, with the branch); the `deadlock`
    under it names the waiting thread, its line and the thread that should have arrived.
    """

    def body(x_ref, o_ref):
        t = jax.lax.axis_index("t")

        @pl.when(t == 0)
        def _():
            def scoped(bar):
                plgpu.barrier_wait(bar)  # waits for thread 1's arrival, which never comes
                o_ref[...] = x_ref[...]

            pl.run_scoped(scoped, plgpu.Barrier(num_arrivals=1), collective_axes="t")

        @pl.when(t == 1)
        def _():
            o_ref[...] = x_ref[...] + jnp.zeros(SHAPE, jnp.float32)  # "signals" nothing

    return _kernel(body, grid=grid), _x()


def num_arrivals_too_high(grid=(1,)):
    """The barrier expects 2 arrivals per phase, but only thread 1 arrives, once.

    Thread 1 publishes a buffer and arrives; thread 0 waits for phase 0, which needs
    a second arrival that no thread makes.
    """

    def body(x_ref, o_ref):
        t = jax.lax.axis_index("t")

        def scoped(buf, bar):
            @pl.when(t == 1)
            def _():
                buf[...] = x_ref[...] * 2.0
                plgpu.barrier_arrive(bar)  # the only arrival

            @pl.when(t == 0)
            def _():
                plgpu.barrier_wait(bar)  # phase 0 needs 2 arrivals
                o_ref[...] = buf[...]

        pl.run_scoped(scoped, plgpu.SMEM(SHAPE, jnp.float32),
                      plgpu.Barrier(num_arrivals=2), collective_axes="t")

    return _kernel(body, grid=grid), _x()


def crossed_waits(grid=(1,)):
    """Each thread waits for the other's arrival before making its own: a cycle."""

    def body(x_ref, o_ref):
        t = jax.lax.axis_index("t")

        def scoped(to_0, to_1):
            @pl.when(t == 0)
            def _():
                plgpu.barrier_wait(to_0)  # waits for thread 1 ...
                plgpu.barrier_arrive(to_1)
                o_ref[...] = x_ref[...]

            @pl.when(t == 1)
            def _():
                plgpu.barrier_wait(to_1)  # ... which waits for thread 0
                plgpu.barrier_arrive(to_0)

        pl.run_scoped(scoped, plgpu.Barrier(num_arrivals=1), plgpu.Barrier(num_arrivals=1),
                      collective_axes="t")

    return _kernel(body, grid=grid), _x()


def spin_on_flag(grid=(1,)):
    """Thread 1 polls a flag in SMEM that thread 0 sets only after thread 1 arrived.

    The wait-for check cannot call this a deadlock: thread 1 keeps running (reading
    memory), it never waits on a barrier. `pv.trace(timeout_s=...)` stops it after
    that long without progress; Ctrl-C aborts it.
    """

    def body(x_ref, o_ref):
        t = jax.lax.axis_index("t")

        def scoped(flag, bar):
            @pl.when(t == 0)
            def _():
                plgpu.barrier_wait(bar)  # thread 1 arrives only once the flag is set ...
                flag[...] = jnp.ones(SHAPE, jnp.float32)
                o_ref[...] = x_ref[...]

            @pl.when(t == 1)
            def _():
                flag[...] = jnp.zeros(SHAPE, jnp.float32)
                jax.lax.while_loop(lambda i: flag[0, 0] == 0.0, lambda i: i + 1, 0)  # ... set
                plgpu.barrier_arrive(bar)

        pl.run_scoped(scoped, plgpu.SMEM(SHAPE, jnp.float32), plgpu.Barrier(num_arrivals=1),
                      collective_axes="t")

    return _kernel(body, grid=grid), _x()


def missing_arrival(grid=(1,)):
    """Every thread allocates the barrier; thread 1 publishes a buffer and never arrives.

    Unlike `barrier_handshake_in_branch`, the barrier exists for both threads: the
    mistake is the missing `plgpu.barrier_arrive(bar)` after thread 1's write. The
    wait-for check stops the run once thread 1 has finished.
    """

    def body(x_ref, o_ref):
        t = jax.lax.axis_index("t")

        def scoped(buf, bar):
            @pl.when(t == 1)
            def _():
                buf[...] = x_ref[...] * 2.0  # no plgpu.barrier_arrive(bar) after it

            @pl.when(t == 0)
            def _():
                plgpu.barrier_wait(bar)  # waits for an arrival thread 1 never makes
                o_ref[...] = buf[...]

        pl.run_scoped(scoped, plgpu.SMEM(SHAPE, jnp.float32), plgpu.Barrier(num_arrivals=1),
                      collective_axes="t")

    return _kernel(body, grid=grid), _x()


def wait_behind_a_wait(grid=(1,)):
    """Three threads: thread 0 waits on `a`, which thread 1 arrives at only after its own
    wait on `b`; thread 2 should arrive at `b` but finishes without arriving.

    Not a cycle: the chain ends at thread 2's missing arrival (it could as well have been
    meant to come from thread 0, which itself waits).
    """

    def body(x_ref, o_ref):
        t = jax.lax.axis_index("t")

        def scoped(a, b):
            @pl.when(t == 0)
            def _():
                plgpu.barrier_wait(a)  # thread 1 arrives only after its own wait ...
                o_ref[...] = x_ref[...]

            @pl.when(t == 1)
            def _():
                plgpu.barrier_wait(b)  # ... for thread 2, which never arrives
                plgpu.barrier_arrive(a)

            @pl.when(t == 2)
            def _():
                o_ref[...] = x_ref[...] + jnp.zeros(SHAPE, jnp.float32)  # no arrival at b

        pl.run_scoped(scoped, plgpu.Barrier(num_arrivals=1), plgpu.Barrier(num_arrivals=1),
                      collective_axes="t")

    return _kernel(body, grid=grid, num_threads=3), _x()


# Thread exits and their blocks. These two are thread bodies for the launch-shape harness
# (`pallas_viz.examples.shapes.launch(body, shape)`: "no_grid", "grid3", "cluster2",
# "core_map", "core_map_grid"); `ctx.thread` is the thread index, `ctx.axis` the thread axis.

# `late_tail_arrival`'s thread 1 reads this many values before it arrives: far longer
# than `timeout_s=1` on any machine, far shorter than forever.
TAIL_SPIN = 100_000


def forgotten_arrive(ctx, x_ref, o_ref):
    """Thread 1 writes the buffer and forgets to arrive; thread 0 waits for it forever.

    Thread 1 finishes at once, usually before thread 0 makes its block's first barrier
    operation (its wait). The wait-for check stops the kernel; the `deadlock` root has a
    `barrier_misuse` consequence: the wait can never end, every thread that holds the
    barrier has finished. (While exits were recorded without a block when their thread
    finished before its block's first barrier operation, that consequence came and went
    from run to run.)
    """

    def scoped(buf, bar):
        @pl.when(ctx.thread == 1)
        def _():
            ctx.store(buf, x_ref[...] * 2.0)  # no plgpu.barrier_arrive(bar) after it

        @pl.when(ctx.thread == 0)
        def _():
            @pl.loop(0, 4)
            def _(i):
                ctx.store(buf, x_ref[...])

            plgpu.barrier_wait(bar)  # waits for the arrival thread 1 forgot
            o_ref[...] = ctx.load(buf, SHAPE[0])

    pl.run_scoped(scoped, ctx.smem(SHAPE, jnp.float32), plgpu.Barrier(num_arrivals=1),
                  collective_axes=ctx.axis)


def late_tail_arrival(ctx, x_ref, o_ref):
    """Only the last block hands a result over, late: a correct kernel, only slow.

    In the last block of the grid (or cluster), thread 1 computes for a long time
    (`TAIL_SPIN` reads) before it enters the barrier's scope and arrives; thread 0
    waits. The other blocks make no barrier operation at all: their threads finish
    first. Under `pv.trace(timeout_s=1)` the watchdog stops the kernel while thread 1
    still computes: a `deadlock` root naming thread 1 as running, and no finding that
    the wait "can never end" (thread 1 would have arrived). While exits of threads that
    finished before their block's first barrier operation were recorded without a
    block, thread 1's exit in an earlier block was taken for the last block's, and the
    analysis claimed the wait could never end.
    """
    b, n = ctx.block()
    tail = jnp.logical_and(ctx.thread == 1, b == n - 1)
    acc = jax.lax.cond(
        tail,
        lambda: jax.lax.fori_loop(0, TAIL_SPIN, lambda i, c: c + x_ref[0, 0],
                                  jnp.float32(0)),  # the slow tail, before the scope
        lambda: jnp.float32(0))

    def scoped(buf, bar):
        @pl.when(tail)
        def _():
            ctx.store(buf, x_ref[...] + acc)
            plgpu.barrier_arrive(bar)

        @pl.when(jnp.logical_and(ctx.thread == 0, b == n - 1))
        def _():
            plgpu.barrier_wait(bar)  # ends once thread 1 arrives, TAIL_SPIN reads later
            o_ref[...] = ctx.load(buf, SHAPE[0])

    pl.run_scoped(scoped, ctx.smem(SHAPE, jnp.float32), plgpu.Barrier(num_arrivals=1),
                  collective_axes=ctx.axis)


def arrive_without_wait(grid=(1,)):
    """Thread 0 publishes a buffer twice, arriving each time; thread 1 never waits.

    The barrier orders nothing: phase 0 completes with no thread waiting for it, then
    phase 1 completes. The interpreter stops the kernel with a bare `ValueError:
    Barrier completed phase 1, but no threads observed phase 0.`
    """

    def body(x_ref, o_ref):
        t = jax.lax.axis_index("t")

        def scoped(buf, bar):
            @pl.when(t == 0)
            def _():
                @pl.loop(0, 2)
                def _(i):
                    buf[...] = x_ref[...] * (i + 1).astype(jnp.float32)
                    plgpu.barrier_arrive(bar)  # signals "buf is ready" ...

            @pl.when(t == 1)
            def _():
                o_ref[...] = buf[...]  # ... to nobody: no plgpu.barrier_wait(bar) here

        pl.run_scoped(scoped, plgpu.SMEM(SHAPE, jnp.float32), plgpu.Barrier(num_arrivals=1),
                      collective_axes="t")

    return _kernel(body, grid=grid), _x()


def arrive_ahead_of_waiter(grid=(1,)):
    """Thread 1 arrives twice in a row; thread 0 waits twice, but nothing holds thread 1 back.

    As many waits as arrivals, and still wrong: thread 1's second arrival may complete
    phase 1 before thread 0 has seen phase 0 (on a GPU its parity wait then misses a
    phase). Whether the interpreter notices depends on how its threads interleave: some
    runs end cleanly, some fail with a bare `ValueError: Barrier completed phase 1, but
    no threads observed phase 0.` The `barrier_misuse` finding does not depend on it:
    nothing in the kernel orders the second arrival after thread 0's first wait.
    """

    def body(x_ref, o_ref):
        t = jax.lax.axis_index("t")

        def scoped(bar):
            @pl.when(t == 1)
            def _():
                @pl.loop(0, 2)
                def _(i):
                    plgpu.barrier_arrive(bar)  # runs ahead: no wait for thread 0 between

            @pl.when(t == 0)
            def _():
                @pl.loop(0, 2)
                def _(i):
                    plgpu.barrier_wait(bar)

                o_ref[...] = x_ref[...]

        pl.run_scoped(scoped, plgpu.Barrier(num_arrivals=1), collective_axes="t")

    return _kernel(body, grid=grid), _x()


def ping_pong(grid=(1,), waits=2):
    """Thread 1 signals `ready` twice, waiting for thread 0's `ack` after each signal;
    thread 0 waits `waits` times. With `waits=2` it is clean (each arrival is ordered
    after the wait before it); with `waits=3` thread 0 waits for a third signal after
    thread 1 has finished: a deadlock, stopped by the wait-for check.
    """

    def body(x_ref, o_ref):
        t = jax.lax.axis_index("t")

        def scoped(ready, ack):
            @pl.when(t == 1)
            def _():
                @pl.loop(0, 2)
                def _(i):
                    plgpu.barrier_arrive(ready)
                    plgpu.barrier_wait(ack)  # holds thread 1 back until thread 0 saw it

            @pl.when(t == 0)
            def _():
                @pl.loop(0, waits)
                def _(i):
                    plgpu.barrier_wait(ready)  # the third wait (waits=3) never ends
                    plgpu.barrier_arrive(ack)

                o_ref[...] = x_ref[...]

        pl.run_scoped(scoped, plgpu.Barrier(num_arrivals=1), plgpu.Barrier(num_arrivals=1),
                      collective_axes="t")

    return _kernel(body, grid=grid), _x()


def unobserved_phase(grid=(1,)):
    """Thread 0 signals three times; thread 1 waits for the first signal only.

    Phase 1 completes with no thread waiting for it, then phase 2 completes: thread
    1 reads the buffer while thread 0 overwrites it. JAX 0.12 runs this without a
    word (0.11 complains when the barrier is freed, naming no line).
    """

    def body(x_ref, o_ref):
        t = jax.lax.axis_index("t")

        def scoped(buf, ready, ack):
            @pl.when(t == 0)
            def _():
                buf[...] = x_ref[...]
                plgpu.barrier_arrive(ready)  # phase 0: thread 1 waits for this one
                plgpu.barrier_wait(ack)

                @pl.loop(1, 3)
                def _(i):
                    buf[...] = x_ref[...] * (i + 1).astype(jnp.float32)
                    plgpu.barrier_arrive(ready)  # phases 1 and 2: nobody waits

            @pl.when(t == 1)
            def _():
                plgpu.barrier_wait(ready)  # waits once, not once per phase
                plgpu.barrier_arrive(ack)
                o_ref[...] = buf[...]

        pl.run_scoped(scoped, plgpu.SMEM(SHAPE, jnp.float32), plgpu.Barrier(num_arrivals=1),
                      plgpu.Barrier(num_arrivals=1), collective_axes="t")

    return _kernel(body, grid=grid), _x()


def arrive_after_block_exit():
    """Block 1 arrives at a cluster barrier after block 0 left the barrier's scope.

    A cluster barrier has one part in each block's shared memory; block 1's arrival
    also lands in block 0's part. Block 0 arrives, leaves the `run_scoped` of the
    barrier, and only then lets block 1 go on (through `done`): block 1's arrival
    reaches block 0's part after block 0 freed it. The interpreter accepts it; on a
    GPU the arrival writes shared memory that block 0 no longer owns.
    """

    def body(x_ref, o_ref):
        c = jax.lax.axis_index("c")

        def outer(done):
            def inner(bar):
                @pl.when(c == 0)
                def _():
                    plgpu.barrier_arrive(bar)

                @pl.when(c == 1)
                def _():
                    plgpu.barrier_arrive(done)
                    plgpu.barrier_wait(done)  # until block 0 has left this scope
                    plgpu.barrier_arrive(bar)  # lands in block 0's part too: freed
                    plgpu.barrier_wait(bar)

            pl.run_scoped(inner, plgpu.ClusterBarrier(collective_axes=("c",)))

            @pl.when(c == 0)
            def _():
                plgpu.barrier_arrive(done)
                plgpu.barrier_wait(done)
                o_ref[...] = x_ref[...]

        pl.run_scoped(outer, plgpu.ClusterBarrier(collective_axes=("c",)))

    kernel = plgpu.kernel(
        body, out_type=jax.ShapeDtypeStruct(SHAPE, jnp.float32), cluster=(2,),
        cluster_names=("c",), interpret=plgpu.InterpretGPUParams())
    return kernel, _x()
