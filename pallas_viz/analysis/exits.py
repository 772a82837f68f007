"""Which threads finished the kernel body, in the kernels cut short (a failure, a deadlock,
an interrupt): read from `Trace.meta["thread_exits"]` (`Recorder.thread_exits_json`)."""

from __future__ import annotations

import collections

import numpy as np


def _block(b):
    return None if b is None else tuple(int(x) for x in b)


class ThreadExits:
    """The threads that finished the kernel body, of the kernels cut short
    (`ctx.thread_exits`); `done(kernel, device, block, thread)`.

    Every exit pallas_viz records now names its block. A trace file recorded before
    that can hold exits without one (the thread finished before its block's first
    barrier operation): such an exit could be any block's, so it counts only in a
    kernel that ran one block on that device (no other block named by its events,
    barrier operations or exits, and that thread's only exit there). Never a thread of
    another block: a grid step's early exit would make a later block's wait look
    certain to hang while its thread still runs.
    """

    def __init__(self, ctx, ops: list[dict]):
        self._ctx, self._ops = ctx, ops
        self.exact: set[tuple] = set()
        self._blockless: set[tuple] = set()  # (kernel, device, thread) of exits without block
        self._count: collections.Counter = collections.Counter()  # (kernel, device, thread)
        self._blocks: dict[tuple, set] | None = None  # (kernel, device) -> blocks named
        for o in getattr(ctx, "thread_exits", None) or []:
            k, d, b, t = o["kernel"], int(o["device"]), _block(o.get("block")), int(o["thread"])
            self._count[(k, d, t)] += 1
            if b is None:
                self._blockless.add((k, d, t))
            else:
                self.exact.add((k, d, b, t))

    def done(self, kernel, device: int, block, thread: int) -> bool:
        if (kernel, device, block, thread) in self.exact:
            return True
        if (kernel, device, thread) not in self._blockless:
            return False
        return self._count[(kernel, device, thread)] == 1 and self._one_block(
            kernel, device, block)

    def block_done(self, kernel, device: int, block) -> bool:
        """Whether every thread of `block` (a tuple) finished the kernel body (so what its
        threads did not do, they never do)."""
        kernels = self._ctx.kernels
        if not 0 <= kernel < len(kernels):
            return False
        return all(self.done(kernel, device, block, t)
                   for t in range(kernels[kernel].threads_per_block))

    def _one_block(self, kernel, device: int, block) -> bool:
        """Whether `block` is the only block the trace names for `kernel` on `device`."""
        if self._blocks is None:
            named: dict[tuple, set] = collections.defaultdict(set)
            for o in self._ops:
                for b in (o.get("block"), o.get("target_block")):
                    if b is not None and o.get("device") is not None:
                        named[(o.get("kernel"), int(o["device"]))].add(_block(b))
            for (k, d, b, _t) in self.exact:
                named[(k, d)].add(b)
            t = getattr(self._ctx, "table", None)
            if t is not None and len(t):
                c = t.columns
                keys = np.unique(np.stack([c["kernel"], c["device"], c["block"]], axis=1),
                                 axis=0)
                for k, d, b in keys.tolist():
                    if b >= 0:
                        named[(k, d)].add(t.block(b))
            self._blocks = named
        return self._blocks.get((kernel, device), set()) <= {block}
