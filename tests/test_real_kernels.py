"""The real kernels of jax.experimental.pallas.ops.gpu come out clean, fully recorded."""

from __future__ import annotations

import collections

import pytest
from jax_log_count import count_jax_log, logging_params

import pallas_viz as pv
from pallas_viz.examples import ops

pytestmark = pytest.mark.slow


def assert_every_allocation_ends(tr):
    """Each allocation is one create, then joins and releases, then one free (last), with as
    many releases + the free as requests (create + joins); only the kernel's GMEM operands,
    allocated for the whole kernel, are never freed."""
    events = collections.defaultdict(list)
    for e in tr.events:
        events[e.allocation].append(e)
    operands = 0
    for allocation, evs in events.items():
        ops_ = [e.op for e in evs]
        assert allocation >= 0 and set(ops_) <= {"create", "join", "release", "free"}, ops_
        assert ops_[0] == "create" and ops_.count("create") == 1, ops_
        if "free" not in ops_:
            first = evs[0]
            assert first.memory_space == "GMEM" and first.block is None, first  # kernel-level
            assert set(ops_) <= {"create", "join"}, ops_  # never released either
            operands += 1
            continue
        assert ops_[-1] == "free" and ops_.count("free") == 1, ops_
        assert ops_.count("release") + 1 == ops_.count("create") + ops_.count("join"), ops_
    assert operands >= 1


@pytest.mark.parametrize("name", sorted(ops.ALL))
def test_real_kernel_is_clean_and_fully_recorded(name):
    params = logging_params(inline_mgpu="ignore") if name == "blackwell_matmul" else (
        logging_params())
    fn, args = ops.ALL[name](interpret_params=params)
    with count_jax_log() as jax_counts, pv.trace() as tr:
        fn(*args)
    assert tr.findings == [], tr.summary()
    assert tr.failure is None
    assert len(tr.kernels) == 1
    ops_count = collections.Counter(e.op for e in tr.events)
    # JAX logs each creation and each final free: our create/free events match it exactly.
    assert jax_counts["create"] > 0
    assert ops_count["create"] == jax_counts["create"]
    assert ops_count["free"] == jax_counts["free"]
    # every request is a create or a join; every buffer and barrier a block got is freed
    assert_every_allocation_ends(tr)
    spaces = {e.memory_space for e in tr.events if e.resource == "buffer"}
    assert {"GMEM", "SMEM"} <= spaces
    stats = tr.stats()[0]
    assert stats.events == len(tr.events)
    assert stats.blocks >= 1


def test_hopper_cluster_records_cluster_barriers():
    fn, args = ops.hopper_matmul(cluster=True)
    with pv.trace() as tr:
        fn(*args)
    kinds = collections.Counter((e.resource, e.op) for e in tr.events)
    assert kinds[("cluster_barrier", "create")] > 0
    assert kinds[("cluster_barrier", "free")] == kinds[("cluster_barrier", "create")]
    assert_every_allocation_ends(tr)
    assert tr.findings == []


def test_blackwell_records_tmem():
    fn, args = ops.blackwell_matmul()
    with pv.trace() as tr:
        fn(*args)
    assert any(e.memory_space == "TMEM" for e in tr.events)
    tmem = {e.allocation for e in tr.events if e.memory_space == "TMEM"}
    freed = {e.allocation for e in tr.events if e.op == "free"}
    assert tmem <= freed
    assert_every_allocation_ends(tr)
    assert tr.findings == []
