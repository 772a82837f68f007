"""The recorder: the only object the runtime hooks write into.

A hook appends one tuple per allocation request and does nothing else; turning
those tuples into a columnar `EventTable` happens once, after the run.
"""

from __future__ import annotations

import itertools
import threading


class Recorder:
    """Collects raw allocation records, kernel starts and interpreter failures."""

    def __init__(self):
        self.records: list[tuple] = []
        self.kernels: list[dict] = []
        self.failures: list[dict] = []
        self.deadlocks: list[dict] = []  # one per kernel stopped by the watchdog
        self.races: list[dict] = []  # JAX race reports, structured
        self._live: dict[tuple, int] = {}
        self._alloc_ids = itertools.count()
        self._lock = threading.Lock()

    def begin_kernel(self, **info) -> int:
        with self._lock:
            index = len(self.kernels)
            self.kernels.append(dict(info, index=index))
            return index

    def record(self, kernel, op, resource, memory_space, device, block, thread, warp,
               key, ref_count, shape, dtype, nbytes, source):
        """Append one request. Called with the interpreter's memory lock held.

        `dtype` may be a numpy dtype (named after the run) or its name.
        """
        live_key = (kernel, resource, key)
        if op == "create":
            alloc = next(self._alloc_ids)
            self._live[live_key] = alloc
        elif op == "free":
            alloc = self._live.pop(live_key, -1)
        else:
            alloc = self._live.get(live_key, -1)
        # key = (memory_space_id, device_id, block_id, thread_id, initial_ref_count, buffer_id)
        self.records.append((
            kernel, op, resource, memory_space, device, block, thread, warp,
            key[5], key[3], key[2], key[4], ref_count, shape, dtype, nbytes, source, alloc,
        ))

    def fail(self, kernel: int | None, info: dict) -> None:
        with self._lock:
            self.failures.append(dict(info, kernel=kernel))

    def live_allocation(self, kernel: int, resource: str, key: tuple) -> int:
        """The allocation id currently live under `key` (-1 if none)."""
        return self._live.get((kernel, resource, key), -1)

    def deadlock(self, kernel: int, info: dict) -> None:
        with self._lock:
            self.deadlocks.append(dict(info, kernel=kernel))

    def race(self, kernel: int, info: dict) -> None:
        with self._lock:
            self.races.append(dict(info, kernel=kernel))
