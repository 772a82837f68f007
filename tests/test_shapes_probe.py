"""The launch-shape harness (`examples.shapes`) and the clean corpus (`examples.corpus`) run.

(a) every clean corpus kernel runs under `pv.trace()` and records events (no assertion on
findings here: the zero-findings test builds on this corpus); (b) every buggy (body, shape)
pair runs or fails the way `shapes.EXPECTED` documents. "two_devices" kernels run in one
subprocess with 2 CPU devices (`shapes.TWO_DEVICES_ENV`), unless this process has them.
"""

from __future__ import annotations

import json
import linecache
import os
import subprocess
import sys

import jax
import pytest

import pallas_viz as pv
from pallas_viz.examples import corpus, shapes

TWO_DEVICES_HERE = jax.device_count() >= 2
IN_PROCESS_CLEAN = [n for n in corpus.CLEAN_KERNELS if n not in corpus.NEEDS_TWO_DEVICES]
PAIRS = sorted(shapes.EXPECTED)
IN_PROCESS_PAIRS = [p for p in PAIRS if p[1] != "two_devices"]
TWO_DEVICE_PAIRS = [p for p in PAIRS if p[1] == "two_devices"]


def _clean_param(name):
    marks = [pytest.mark.slow] if name in corpus.SLOW else []
    return pytest.param(name, marks=marks, id=name)


# --------------------------------------------------------------------------- the harness


def test_tables_cover_every_pair():
    assert shapes.SHAPES == ("no_grid", "grid1", "grid3", "core_map", "core_map_grid",
                             "cluster2", "warp_mesh", "tmem", "pallas_call", "two_devices")
    pairs = {(b, s) for b in shapes.BUGGY for s in shapes.SHAPES}
    assert set(shapes.SUPPORTED) == pairs == set(shapes.EXPECTED)
    for pair, why in shapes.SUPPORTED.items():
        assert why is True or (isinstance(why, str) and why), pair
    assert all(shapes.SUPPORTED[(b, "pallas_call")] is not True for b in shapes.BUGGY)


@pytest.mark.parametrize("name", sorted(shapes.BUGGY))
def test_alloc_and_branch_lines(name):
    lines = shapes.lines(name)
    assert lines.alloc and lines.branch
    assert shapes.ALLOC_LINE[name] == lines.alloc[0]
    assert shapes.BRANCH_LINE[name] == lines.branch[0]
    for n in lines.alloc:
        assert "pl.run_scoped(" in linecache.getline(lines.file, n)
    for n in lines.branch:
        text = linecache.getline(lines.file, n)
        assert ("pl.when(ctx.thread ==" in text or "jax.lax.cond(ctx.thread ==" in text
                or "jax.lax.fori_loop(0, trips," in text)
    # every allocation sits after (inside) a branch
    assert min(lines.alloc) > min(lines.branch) or name in ("collective_in_cond",
                                                             "collective_in_loop")
    if name == "mismatched_shapes":
        assert len(lines.alloc) == len(lines.branch) == 2


def test_two_devices_without_devices_says_how():
    if TWO_DEVICES_HERE:
        pytest.skip("this process has 2 devices")
    fn, args = shapes.launch(shapes.hoisted_collective, "two_devices")
    with pytest.raises(RuntimeError, match="xla_force_host_platform_device_count=2"):
        fn(*args)


# --------------------------------------------------------------------------- (a) clean corpus


def test_corpus_size():
    assert len(corpus.CLEAN_KERNELS) >= 30
    for shape in shapes.SHAPES:  # every launch shape has a clean kernel
        assert any(n.endswith(shape) for n in corpus.CLEAN_KERNELS), shape


@pytest.mark.parametrize("name", [_clean_param(n) for n in IN_PROCESS_CLEAN])
def test_clean_kernel_runs(name):
    fn, args = corpus.CLEAN_KERNELS[name]()
    shapes.drain_effects()
    with pv.trace(timeout_s=30) as tr:
        jax.block_until_ready(fn(*args))
    assert len(tr.events) > 0
    assert tr.failure is None and not tr.meta.get("deadlocks")
    # a clean kernel must stay clean: a false positive is as bad as a miss
    assert tr.findings == [] and tr.unplaced_events() == 0, tr.summary()
    assert "clean: no findings" in tr.summary()


# --------------------------------------------------------------------------- (b) buggy pairs


@pytest.mark.parametrize("body,shape", IN_PROCESS_PAIRS,
                         ids=[f"{b}-{s}" for b, s in IN_PROCESS_PAIRS])
def test_buggy_pair_behaves_as_documented(body, shape):
    result = shapes.run_pair(body, shape, timeout_s=10)
    assert result["events"] > 0
    assert shapes.matches_expected(shapes.EXPECTED[(body, shape)], result), result


# --------------------------------------------------------------------------- two devices

_TWO_DEVICE_SCRIPT = """
import json, sys
import jax
assert jax.device_count() >= 2, jax.devices()
from pallas_viz.examples import corpus, shapes
for name in sys.argv[1].split(","):
    fn, args = corpus.CLEAN_KERNELS[name]()
    tr, _ = shapes.run_traced(fn, args)
    print(json.dumps({"clean": name, **shapes.outcome(tr)}), flush=True)
for pair in sys.argv[2].split(","):
    body, shape = pair.split(":")
    print(json.dumps({"pair": [body, shape], **shapes.run_pair(body, shape)}), flush=True)
# A failed two-device run leaves its error in JAX's ordered-effect tokens, re-raised by the
# next effectful call or at exit (shapes.drain_effects): drop it, the rows say what ran.
shapes.drain_effects()
print(json.dumps({"done": True}), flush=True)
"""


@pytest.fixture(scope="module")
def two_device_results():
    clean = sorted(corpus.NEEDS_TWO_DEVICES)
    pairs = ",".join(f"{b}:{s}" for b, s in TWO_DEVICE_PAIRS)
    env = dict(os.environ, **shapes.TWO_DEVICES_ENV)
    proc = subprocess.run([sys.executable, "-c", _TWO_DEVICE_SCRIPT, ",".join(clean), pairs],
                          env=env, capture_output=True, text=True, timeout=300)
    rows = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    # every row printed and the script reached its end (the exit code can carry a
    # documented failure's leftover from JAX's effect tokens, so it is not the verdict)
    assert rows and rows[-1] == {"done": True}, proc.stderr[-3000:]
    return rows[:-1]


def test_two_devices_clean_kernels_run(two_device_results):
    clean = {r["clean"]: r for r in two_device_results if "clean" in r}
    assert set(clean) == set(corpus.NEEDS_TWO_DEVICES)
    for name, r in clean.items():
        assert r["outcome"] == "runs" and r["events"] > 0, (name, r)
        assert r["findings"] == [], (name, r)


def test_two_devices_buggy_pairs_behave_as_documented(two_device_results):
    got = {tuple(r["pair"]): r for r in two_device_results if "pair" in r}
    assert set(got) == set(TWO_DEVICE_PAIRS)
    for pair, r in got.items():
        assert r["events"] > 0, (pair, r)
        assert shapes.matches_expected(shapes.EXPECTED[pair], r), (pair, r)
