"""Happens-before between barrier operations: did an arrival wait for a phase's waiters?

A barrier's next phase may only complete after every thread that waits for the
current phase has observed it (JAX's interpreter fails the run when it sees one
complete too early; on a GPU a parity wait then misses the phase). Whether that
happened in one run depends on how the interpreter's threads interleaved; whether
the kernel *guarantees* it does not: `PhaseOrder` answers that from the recorded
operations with vector clocks, the only synchronisation being the barriers
themselves (an arrival publishes its thread's clock to its phase; a wait that ends,
or finds its phase complete, takes that phase's clock). In warp-level code each warp
is a thread of its own, and record order stands in for each thread's program order.
"""

from __future__ import annotations

_BARRIER_OPS = frozenset(("arrive", "wait", "waited"))


def _join(into: dict, other: dict) -> None:
    for t, n in other.items():
        if into.get(t, 0) < n:
            into[t] = n


class PhaseOrder:
    """Vector clocks of one kernel's barrier operations, computed on first use.

    `ops`: the trace's operations in record order (those of `kernel` count); `key(o)`:
    which barrier an operation is on; `thread(o)`: its thread, as (device, block,
    thread, warp).
    """

    def __init__(self, ops: list[dict], kernel, key, thread):
        self._ops, self._kernel, self._key, self._thread = ops, kernel, key, thread
        self._at: dict[int, tuple] | None = None  # id(arrival) -> (its thread, its clock)
        self._seen: dict[int, tuple] = {}  # id(observing wait op) -> (thread, own count)

    def _compute(self) -> None:
        clocks: dict[tuple, dict] = {}
        phases: dict[tuple, dict] = {}
        at = self._at = {}
        seen = self._seen
        kernel, key, thread = self._kernel, self._key, self._thread
        for o in self._ops:
            op = o.get("op")
            if op not in _BARRIER_OPS or o.get("kernel") != kernel:
                continue
            t = thread(o)
            c = clocks.get(t)
            if c is None:
                c = clocks[t] = {}
            c[t] = c.get(t, 0) + 1
            where = (key(o), o.get("part"), int(o["phase"]))
            if op == "arrive":
                p = phases.get(where)
                if p is None:
                    phases[where] = dict(c)
                else:
                    _join(p, c)
                at[id(o)] = (t, dict(c))
            elif op == "waited" or not o.get("completes"):  # the wait saw its phase complete
                p = phases.get(where)
                if p is not None:
                    _join(c, p)
                seen[id(o)] = (t, c[t])

    def unordered_waiters(self, waits: list[dict], arrivals: list[dict],
                          pos: dict[int, int]) -> set[tuple]:
        """The threads of `waits` (the operations waiting for one phase) that no arrival
        in `arrivals` (the next phase's) is ordered after: threads the kernel does not
        guarantee to have observed the phase when it can complete again. `pos`: each
        operation's index in record order."""
        thread = self._thread
        observed: dict[tuple, dict | None] = {}  # thread -> its first observing op
        for o in waits:
            t = thread(o)
            if observed.get(t) is None:
                observed[t] = o if o["op"] == "waited" or not o.get("completes") else None
        # the common case, without clocks: the waiter itself arrives for the next phase
        # after it observed this one (a copy it issued; a barrier every thread arrives at)
        own: dict[tuple, list[int]] = {}
        for a in arrivals:
            own.setdefault(thread(a), []).append(pos[id(a)])
        pending = {t for t, o in observed.items()
                   if o is None or not any(i > pos[id(o)] for i in own.get(t, ()))}
        if not pending:
            return set()
        if self._at is None:
            self._compute()
        out = set()
        for t in pending:
            o = observed[t]
            n = None if o is None else self._seen.get(id(o), (None, None))[1]
            if n is None or not any(self._at[id(a)][1].get(t, 0) >= n for a in arrivals):
                out.add(t)
        return out

    def after_any(self, arrival: dict, observers: list[dict]) -> bool:
        """Whether `arrival` is ordered after one of `observers` (operations that observed
        a phase: a wait that ended, or found its phase complete)."""
        if self._at is None:
            self._compute()
        clock = self._at[id(arrival)][1]
        for o in observers:
            t, n = self._seen.get(id(o), (None, None))
            if n is not None and clock.get(t, 0) >= n:
                return True
        return False
