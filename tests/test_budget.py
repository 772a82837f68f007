"""Memory budget: peak SMEM / TMEM per block of real kernels, against device presets.

Every kernel here runs in GPU interpret mode and is recorded by `pv.trace()`. Where it
can, a test also lowers the same kernel for CUDA (no GPU needed: lowering is Python)
and checks our count against Mosaic GPU's own: with its SMEM limit set to 0 bytes
(`artificial_shared_memory_limit`, a JAX test hook), Mosaic GPU reports the bytes it
would ask for in "kernel exceeds available shared memory: smem_bytes=...".
"""

from __future__ import annotations

import base64
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_viz as pv
from pallas_viz import devices
from pallas_viz.analysis.budget import (
    block_budgets,
    budget_findings,
    budget_line,
    fits_for_sure,
    kernel_budgets,
    peak_text,
)
from pallas_viz.examples import budget as ex
from pallas_viz.examples import ops
from pallas_viz.store import EventTable

KiB = 1024
H100_LIMIT = 227 * KiB  # 232448


def traced(builder, *a, **kw):
    fn, args = builder(*a, **kw)
    with pv.trace() as tr:
        fn(*args)
    return tr


def budgets(tr, device="h100", **kw):
    return block_budgets(tr.events, tr.kernels, device, **kw)


def grid_blocks(bs):
    """Budgets of grid blocks (every kernel here has a grid)."""
    out = [b for b in bs if b.block]
    assert out
    return out


def mosaic_smem_bytes(fn, args, kind=ops.H100) -> int:
    """The SMEM bytes Mosaic GPU asks for when it compiles the kernel for `kind`."""
    from jax.experimental.mosaic.gpu import core as mgpu_core

    with ops._gpu_device(kind), mgpu_core.artificial_shared_memory_limit(0):
        with pytest.raises(ValueError, match=r"exceeds available shared memory") as e:
            jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",))
    return int(re.search(r"smem_bytes=(\d+)", str(e.value)).group(1))


def mosaic_accepts(fn, args, kind=ops.H100) -> bool:
    with ops._gpu_device(kind):
        try:
            jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",))
        except ValueError as e:
            if re.search(r"exceeds available shared memory|exceeding the limit of 512",
                         str(e)):
                return False
            raise
    return True


# -- presets

def test_presets():
    h100 = devices.get_device("h100")
    assert h100.smem_per_block == 232448 and h100.smem_per_sm == 228 * KiB
    assert h100.smem_granularity == 1024 and h100.tmem_columns == 0
    assert devices.get_device("H200").smem_per_block == 232448
    b200 = devices.get_device("b200")
    assert b200.smem_per_block == 232448 and b200.tmem_columns == 512
    assert b200.tmem_bytes == 256 * KiB
    assert [b200.tmem_allocated(c) for c in (0, 1, 32, 33, 256, 352, 512)] == [
        0, 32, 32, 64, 256, 512, 512]
    sm120 = devices.get_device("sm120")
    assert sm120.smem_per_block == 99 * KiB and not sm120.has_tmem
    assert devices.get_device(h100) is h100
    with pytest.raises(ValueError, match="unknown device 'a100'.*h100, h200, b200, sm120"):
        devices.get_device("a100")
    with pytest.raises(AttributeError):
        h100.smem_per_block = 1  # frozen


# -- the real Hopper matmul

# ops.hopper_matmul's TuningConfig: tile_m=128, tile_n=128, tile_k=64,
# max_concurrent_steps=2, epi_tile_m=epi_tile_n=64, wg_dimension=M, f16 operands.
STAGES, TILE_M, TILE_N, TILE_K, EPI_M, EPI_N, F16 = 2, 128, 128, 64, 64, 64, 2
COMPUTE_WGS = 2  # two compute warpgroups, stacked along M (wg_dimension=M)
# What the kernel allocates in its one run_scoped (hopper_matmul_mgpu.py line 141):
# - the pipeline's A buffers: STAGES x (cta_tile_m x tile_k), where the block's M tile is
#   COMPUTE_WGS x tile_m = 256 (not tile_m: each warpgroup takes 128 rows): (2, 256, 64)
# - the pipeline's B buffers: STAGES x (tile_k x tile_n): (2, 64, 128)
# - the epilogue tile, one per compute warpgroup and 2 output slots: (2, 2, 64, 64)
# - the pipeline's barriers: one "TMA landed" and one "consumed" per stage: 4 x 8 bytes
# All three buffers are multiples of 1024 bytes, so alignment adds nothing.
HAND_A = STAGES * (COMPUTE_WGS * TILE_M) * TILE_K * F16  # 64 KiB
HAND_B = STAGES * TILE_K * TILE_N * F16  # 32 KiB
HAND_EPI = COMPUTE_WGS * 2 * EPI_M * EPI_N * F16  # 32 KiB
HAND_BARRIERS = 2 * STAGES * 8
HAND_SMEM = HAND_A + HAND_B + HAND_EPI + HAND_BARRIERS  # 131104 = 128 KiB + 32 B


def test_hopper_matmul_peak_smem_is_the_tuning_config_count(hopper):
    assert HAND_SMEM == 131104
    blocks = grid_blocks(budgets(hopper))
    assert len(blocks) == 8  # the kernel's grid is one block per SM (8 pretend SMs)
    for b in blocks:
        assert b.smem.peak == HAND_SMEM
        shapes = sorted(x.shape for x in b.smem.live if x.resource == "buffer")
        assert shapes == [(2, 2, 64, 64), (2, 64, 128), (2, 256, 64)]
        assert sum(x.resource == "barrier" for x in b.smem.live) == 2 * STAGES
        assert {x.source.line for x in b.smem.live} == {141}
        assert all(x.source.file.endswith("hopper_matmul_mgpu.py") for x in b.smem.live)
        assert hopper.events[b.smem.step].op == "create"
        assert b.tmem.peak == 0
        assert {c[2] for c in b.cells} == {0, 1, 2}  # 2 compute + 1 memory warpgroup
    # two blocks compute the two 256x128 output tiles; each holds one f32 128x128
    # accumulator per compute warpgroup in registers
    regs = sorted(b.regs.peak for b in blocks)
    assert regs == [0] * 6 + [COMPUTE_WGS * TILE_M * TILE_N * 4] * 2
    assert budget_findings(budgets(hopper)) == []


def test_hopper_matmul_agrees_with_mosaic_gpu():
    from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hm

    config = hm.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2,
                             epi_tile_m=64, epi_tile_n=64,
                             wg_dimension=hm.MatmulDimension.M)
    a = jnp.ones((256, 256), jnp.float16)
    assert mosaic_smem_bytes(lambda a, b: hm.matmul(a, b, None, config), (a, a)) == HAND_SMEM


def test_hopper_matmul_buffers_at_the_peak_add_up(hopper):
    """What the widget lists under each block's peak (`payload.peak_state`): the budget's
    live buffers, largest first, adding up to the peak, with the peak in words."""
    from pallas_viz.render import payload

    for b in grid_blocks(budgets(hopper)):
        sp = b.smem
        assert sum(x.charge for x in sp.live) + sp.overhead == sp.peak == HAND_SMEM
        assert [x.charge for x in sp.live] == sorted((x.charge for x in sp.live), reverse=True)
        assert peak_text(sp, b.target) == "SMEM peak 128.0 KiB / 227 KiB (56 %) at line 141"
        assert [x.size_text() for x in sp.live] == ["64.0 KiB", "32.0 KiB", "32.0 KiB"] + [
            "8 B"] * 4
        if b.block not in ((0, 0), (1, 0)):  # 2 output tiles: blocks 2..7 compute nothing
            assert b.regs.peak == 0 and b.regs.live == ()
            continue
        # each of the 2 compute warpgroups (along M) holds a (tile_m, tile_n) float32
        # accumulator in registers
        assert b.regs.peak == 2 * 128 * 128 * 4
        assert [(x.shape, x.size_text()) for x in b.regs.live] == [((128, 128), "64.0 KiB")] * 2
        assert peak_text(b.regs, b.target) == "REGS peak 128.0 KiB / 256 KiB (50 %) at line 180"
    index = payload.CellIndex(hopper)
    pk = payload.peak_state(hopper, index, "h100")
    assert pk["texts"][0] == "SMEM peak 128.0 KiB / 227 KiB (56 %) at line 141"
    assert pk["texts"][1] == "REGS peak 128.0 KiB / 256 KiB (50 %) at line 180"
    working = [hopper.events.blocks[bi] in ((0, 0), (1, 0)) for _, _, bi in index.rows]
    assert list(unpack(pk["REGS"]["text"])) == [1 if w else -1 for w in working]
    assert list(unpack(pk["REGS"]["offsets"])) == [0, *np.cumsum([2 * w for w in working])]
    smem = {k: unpack(v) for k, v in pk["SMEM"].items()}
    assert list(smem["offsets"]) == [7 * r for r in range(len(index.rows) + 1)]
    assert (smem["text"] == 0).all() and (unpack(pk["TMEM"]["text"]) == -1).all()
    by_key = {(b.kernel, b.device, b.block): b for b in budgets(hopper)}
    for r, (k, d, bi) in enumerate(index.rows):
        rows = range(smem["offsets"][r], smem["offsets"][r + 1])
        live = by_key[(k, d, hopper.events.blocks[bi])].smem.live
        assert [int(smem["event"][i]) for i in rows] == [x.event for x in live]
        kinds = [pk["kinds"][smem["kind"][i]] for i in rows]
        assert sum(x["charge"] for x in kinds) == HAND_SMEM
        assert [x["shape"] for x in kinds[:3]] == ["(2, 256, 64)", "(2, 2, 64, 64)",
                                                  "(2, 64, 128)"]
        assert {x["source"]["line"] for x in kinds} == {141}


@pytest.mark.parametrize("builder, device, space", [
    (ex.smem_over_budget, "h100", "SMEM"),
    (ex.sequential_scopes, "h100", "SMEM"),
    (ex.pallas_call_scratch, "h100", "SMEM"),
    (ops.blackwell_matmul, "b200", "SMEM"),
    (ops.blackwell_matmul, "b200", "TMEM"),
])
def test_buffers_at_the_peak_add_up_to_the_peak(builder, device, space):
    tr = traced(builder)
    bs = budgets(tr, device)
    assert bs
    for b in bs:
        sp = b.space(space)
        assert sp.peak > 0
        assert sum(x.charge for x in sp.live) + sp.overhead == sp.peak
        text = peak_text(sp, b.target)
        limit = "512" if space == "TMEM" else "227"
        assert text.startswith(f"{space} peak ") and f" / {limit}" in text


def unpack(spec):
    return np.frombuffer(base64.b64decode(spec[1]), spec[0])


def test_hopper_matmul_budget_line(hopper):
    (kb,) = kernel_budgets(budgets(hopper))
    assert budget_line(kb) == "SMEM peak 128.0 KiB / 227 KiB (56 %) at line 141"
    assert budget_line(kb.blocks) == budget_line(kb)


def test_hopper_matmul_is_over_budget_on_sm120(hopper):
    bs = budgets(hopper, "sm120")
    findings = budget_findings(bs)
    assert [(f.kind, f.severity) for f in findings] == [("smem_over_budget", "error")]
    (f,) = findings
    # all 8 blocks hold the same buffers at their peak: one finding, every cell
    assert len({c[1] for c in f.cells}) == 8 and len(f.cells) == 8 * 3
    assert f.kernel == 0
    assert "131104 bytes" in f.message and "99 KiB (101376 bytes)" in f.message
    assert "by 29.0 KiB" in f.message and "in 8 block(s)" in f.message
    assert "(2, 256, 64) float16 64.0 KiB" in f.message and "4 barriers 32 B" in f.message
    assert f.source.line == 141 and f.source.file.endswith("hopper_matmul_mgpu.py")
    assert "pipeline stages" in f.suggestion and "smaller tiles" in f.suggestion
    # the same budgets against H100 limits: fine
    assert budget_findings(bs, "h100") == []
    (kb,) = kernel_budgets(bs)
    assert budget_line(kb) == "SMEM peak 128.0 KiB / 99 KiB (129 %) at line 141"


# -- kernels sized around 227 KiB

def only_peak(tr, device="h100", **kw):
    peaks = {b.smem.peak for b in grid_blocks(budgets(tr, device, **kw))}
    assert len(peaks) == 1
    return peaks.pop()


@pytest.mark.parametrize("builder, peak, mosaic_ok", [
    (ex.smem_over_budget, 228 * KiB, False),
    (ex.smem_at_budget, 227 * KiB, True),
    (ex.smem_near_budget, 226 * KiB, True),
    (ex.smem_within_budget, 200 * KiB, True),
    (ex.smem_over_by_alignment, 2 * 114 * KiB, False),  # 2 x 113.5 KiB, aligned
    (ex.smem_over_by_barrier, 227 * KiB + 8, False),
    (ex.sequential_scopes, 192 * KiB, True),
])
def test_smem_peak_matches_mosaic_gpu(builder, peak, mosaic_ok):
    assert only_peak(traced(builder)) == peak
    fn, args = builder(interpret=False)
    assert mosaic_smem_bytes(fn, args) == peak
    assert mosaic_accepts(fn, args) == mosaic_ok
    assert (peak > H100_LIMIT) == (not mosaic_ok)


def test_just_over_227_kib_is_an_error():
    tr = traced(ex.smem_over_budget)
    for device in ("h100", "h200", "b200"):
        findings = budget_findings(budgets(tr, device))
        assert [(f.kind, f.severity) for f in findings] == [("smem_over_budget", "error")]
    (f,) = budget_findings(budgets(tr))
    assert f.cells == [(0, (0,), 0), (0, (0,), 1), (0, (1,), 0), (0, (1,), 1)]
    assert f.message.startswith(
        "SMEM peak 228.0 KiB (233472 bytes) exceeds the 227 KiB (232448 bytes) per block "
        "of h100 (sm_90) by 1.0 KiB, in 2 block(s) at line ")
    # where the peak is reached: a line of the kernel, never an internal event index
    assert f"in 2 block(s) at line {f.source.line};" in f.message
    assert "event" not in f.message
    assert "(128, 256) float32 128.0 KiB" in f.message
    assert f.message.index("(128, 256)") < f.message.index("(100, 256)")  # by size
    assert f.source.file.endswith("examples/budget.py")
    assert f.source.code.strip().startswith("pl.run_scoped(")
    assert set(f.events) == {e.seq for e in tr.events
                             if e.op == "create" and e.memory_space == "SMEM"}


def test_just_under_227_kib_is_a_warning_or_nothing():
    (f,) = budget_findings(budgets(traced(ex.smem_near_budget)))
    assert (f.kind, f.severity) == ("smem_over_budget", "warning")
    assert "226.0 KiB (231424 bytes) is 99.6 % of the 227 KiB" in f.message
    assert "(warning above 90 %)" in f.message  # spaced as every other percentage
    (f,) = budget_findings(budgets(traced(ex.smem_at_budget)))
    assert f.severity == "warning"  # exactly the limit fits
    tr = traced(ex.smem_within_budget)  # 200 KiB = 88 %
    assert budget_findings(budgets(tr)) == []
    assert [f.severity for f in budget_findings(budgets(tr), warn_fraction=0.8)] == [
        "warning"]


def test_alignment_and_barriers_count():
    (f,) = budget_findings(budgets(traced(ex.smem_over_by_alignment)))
    assert f.severity == "error"
    assert "2 x (454, 128) float16 113.5 KiB (114.0 KiB aligned)" in f.message
    (f,) = budget_findings(budgets(traced(ex.smem_over_by_barrier)))
    assert f.severity == "error" and "by 8 B" in f.message and "barrier 8 B" in f.message


def test_consecutive_scopes_share_smem():
    """320 KiB is allocated in all, 192 KiB at most at once (a 128 KiB scope with a
    nested 64 KiB one): no finding."""
    tr = traced(ex.sequential_scopes)
    total = sum(e.nbytes for e in tr.events if e.op == "create" and e.block == (0,))
    assert total == 320 * KiB
    (b, _) = grid_blocks(budgets(tr))
    assert sorted(x.nbytes for x in b.smem.live) == [64 * KiB, 128 * KiB]
    first = next(e for e in tr.events if e.op == "create" and e.block == (0,))
    assert first.source.line not in {x.source.line for x in b.smem.live}  # scope 1 ended
    assert budget_findings(budgets(tr)) == []
    # counted from create to free instead, a thread still in the first scope can hold
    # it while another is in the second: never less than the stacked peak
    # (how much more varies from run to run and from block to block)
    assert all(b.smem.peak >= 192 * KiB for b in grid_blocks(budgets(tr, span="buffer")))


# -- TMEM

def test_blackwell_matmul_tmem_columns():
    """ops.blackwell_matmul: TuningConfig(tile_m=128, tile_n=128, ...); its accumulator
    is `plgpu.TMEM((block_tile_m, tile_n * 2), float32)`: two 128-column f32 halves,
    256 columns, which tcgen05.alloc takes as is (a power of two)."""
    tr = traced(ops.blackwell_matmul)
    (b,) = grid_blocks(budgets(tr, "b200"))
    assert (b.tmem.peak, b.tmem.allocated, b.tmem.limit) == (256, 256, 512)
    assert [x.shape for x in b.tmem.live] == [(128, 256)]
    # SMEM: 3 x 32 KiB operand/epilogue buffers, a 32-byte buffer aligned to 1 KiB,
    # 12 barriers and the 4-byte TMEM address slot: Mosaic GPU's count
    assert b.smem.peak == 3 * 32 * KiB + KiB + 12 * 8 + 4 == 99428
    assert budget_findings(budgets(tr, "b200")) == []
    (kb,) = kernel_budgets(budgets(tr, "b200"))
    assert re.fullmatch(r"SMEM peak 97\.1 KiB / 227 KiB \(43 %\) at line \d+; "
                        r"TMEM peak 256 / 512 columns \(50 %\)", budget_line(kb))
    # Hopper has no TMEM
    (f,) = budget_findings(budgets(tr, "h100"))
    assert (f.kind, f.severity) == ("tmem_over_budget", "error")
    assert "h100 (sm_90) has no tensor memory" in f.message
    # sm120: no TMEM, and 97.1 KiB of SMEM is 98 % of its 99 KiB
    kinds = {(f.kind, f.severity) for f in budget_findings(budgets(tr, "sm120"))}
    assert kinds == {("tmem_over_budget", "error"), ("smem_over_budget", "warning")}


def test_blackwell_matmul_smem_agrees_with_mosaic_gpu():
    from jax.experimental.pallas.ops.gpu import blackwell_matmul_mgpu as bm

    config = bm.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2,
                             collective=False)
    a = jnp.ones((128, 128), jnp.float16)
    assert mosaic_smem_bytes(lambda a, b: bm.matmul_kernel(a, b, config), (a, a),
                             kind=ops.B200) == 99428


@pytest.mark.parametrize("columns, packed16, peak, allocated, severity, mosaic_ok", [
    ((256, 60), 64, 256 + 64 + 32, 512, None, True),  # 60 -> 64; packed f16: 64 / 2
    ((504, 8), 0, 512, 512, "warning", True),
    ((508, 4), 0, 512 + 8, 1024, "error", False),  # 4 columns still take 8
])
def test_tmem_columns(columns, packed16, peak, allocated, severity, mosaic_ok):
    tr = traced(ex.tmem_columns, *columns, packed16=packed16)
    for b in grid_blocks(budgets(tr, "b200")):
        assert (b.tmem.peak, b.tmem.allocated) == (peak, allocated)
    findings = budget_findings(budgets(tr, "b200"))
    assert [f.severity for f in findings] == ([severity] if severity else [])
    assert all(f.kind == "tmem_over_budget" for f in findings)
    fn, args = ex.tmem_columns(*columns, packed16=packed16, interpret=False)
    assert mosaic_accepts(fn, args, kind=ops.B200) == mosaic_ok
    if severity == "error":
        assert (f"TMEM peak {peak} columns (tcgen05.alloc rounds it up to 1024) exceeds"
                in findings[0].message)


# -- kernel-level scratch

def test_pallas_call_scratch_counts_for_each_block():
    """A `pallas_call`'s block buffers and scratch are kernel-level requests in interpret
    mode (one per device), but every block holds them on a GPU."""
    f, args = ex.pallas_call_scratch()
    with pv.trace() as tr:
        f(*args)
    bs = budgets(tr)
    assert bs and all(b.smem.peak == 3 * 4 * KiB for b in bs)  # in, out, scratch blocks
    assert all(x.kernel_level for b in bs for x in b.smem.live)


def test_empty_trace():
    assert block_budgets(EventTable.empty(), [], "h100") == []
    assert budget_findings([]) == []
    with pytest.raises(ValueError, match="span"):
        block_budgets(EventTable.empty(), [], "h100", span="nope")


# -- the bound that lets the analysis skip the budgets

BOUND_CASES = [ex.smem_over_budget, ex.smem_at_budget, ex.smem_near_budget,
               ex.smem_within_budget, ex.smem_over_by_alignment, ex.smem_over_by_barrier,
               ex.sequential_scopes, ex.pallas_call_scratch, ops.blackwell_matmul]


@pytest.mark.parametrize("builder", BOUND_CASES, ids=lambda b: b.__name__)
def test_the_bound_never_hides_a_finding(builder):
    """Where `fits_for_sure` says no block can reach 90 % of a limit, the full count
    finds nothing; where the full count finds something, the bound said so too (on every
    device: their limits differ)."""
    tr = traced(builder)
    # the budgets were kept from the analysis only if it had to compute them
    assert bool(tr._budgets) != fits_for_sure(tr.events, tr.kernels, tr.budget()[0].target)
    for device in ("h100", "b200", "sm120"):
        found = budget_findings(budgets(tr, device))
        if fits_for_sure(tr.events, tr.kernels, device):
            assert found == [], (builder.__name__, device)
        else:
            assert found or builder is ex.sequential_scopes, (builder.__name__, device)
    # the trace's own findings are the full count's
    want = budget_findings(budgets(tr, tr.budget()[0].target.name))
    assert [f.message for f in tr.findings if f.kind.endswith("over_budget")] == [
        f.message for f in want]


def test_the_bound_holds_for_the_hopper_matmul(hopper):
    """128 KiB in every block: under 90 % of H100's 227 KiB (no budgets computed while
    recording; a view computes them), over SM120's 99 KiB."""
    assert fits_for_sure(hopper.events, hopper.kernels, "h100")
    assert not fits_for_sure(hopper.events, hopper.kernels, "sm120")
    assert hopper.budget()[0].smem.peak == 128 * KiB + 4 * 8  # and 4 barriers
    assert fits_for_sure(EventTable.empty(), [], "h100")


def test_consecutive_scopes_are_what_the_bound_cannot_prove():
    """320 KiB allocated one scope after another, 192 KiB at once: the sum is over the
    limit, so the full count runs, and it finds nothing."""
    tr = traced(ex.sequential_scopes)
    assert not fits_for_sure(tr.events, tr.kernels, "h100")
    assert budget_findings(budgets(tr)) == []
