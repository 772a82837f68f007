"""GPU presets for memory budgets: how much SMEM and TMEM one block may use.

Sources (checked 2026 for the values below):

- [CCTAB] NVIDIA CUDA C++ Programming Guide, "Features and Technical Specifications",
  table "Technical Specifications per Compute Capability"
  https://docs.nvidia.com/cuda/cuda-c-programming-guide/#features-and-technical-specifications-technical-specifications-per-compute-capability
  cc 9.0 and 10.0: 228 KB shared memory per SM, 227 KB per thread block (opt-in, through
  `cudaFuncAttributeMaxDynamicSharedMemorySize`); cc 12.0: 100 KB per SM, 99 KB per block.
  64K 32-bit registers per SM and per block for all of them. The 1 KB difference between
  "per SM" and "per block" is the shared memory the driver reserves for each block
  (`cudaDevAttrReservedSharedMemoryPerBlock` = 1024).
- [HOPPER] NVIDIA Hopper Tuning Guide, "Increased Shared Memory Capacity" (H100: 228 KB
  per SM, at most 227 KB per thread block). H200 is the same GH100 SM (sm_90).
- [BLACKWELL] NVIDIA Blackwell Tuning Guide (sm_100: 228 KB SMEM per SM, 227 KB per block;
  256 KB of Tensor Memory per SM).
- [PTX-TMEM] PTX ISA, "Tensor Memory" and `tcgen05.alloc`: 128 lanes x 512 columns of
  32-bit cells per CTA; `tcgen05.alloc` takes a column count that is a power of two,
  at least 32 and at most 512. Consumer Blackwell (sm_120) has no tcgen05/TMEM.
- [OCC] `cuda_occupancy.h`, `cudaOccSMemAllocationGranularity()`: shared memory is
  allocated to a block in 128-byte units on compute capability 8.x, 9.x, 10.x, 12.x.
- [MOSAIC] JAX, the Mosaic GPU compiler that Pallas `plgpu` kernels go through:
  `jax/_src/pallas/mosaic_gpu/core.py`: `SMEM_ALIGNMENT = 1024` ("We align all our SMEM
  allocations to 1024 bytes. TMA and WGMMA are very sensitive to alignment") and
  `lowering.py` (`Resources`, `scratch_view`) rounds every scoped SMEM buffer up to 1024
  bytes and places the barriers after the scratch bytes, and sizes a kernel's TMEM by
  rounding each TMEM ref up to 8 columns ("TMEM must be allocated in 128x8 chunks");
  `jax/experimental/mosaic/gpu/core.py` adds 8 bytes per mbarrier (`MBARRIER_BYTES`) and
  4 bytes for the TMEM address slot, and rejects a kernel with
  "Mosaic GPU kernel exceeds available shared memory: smem_bytes=... > max_smem_bytes=..."
  when the total exceeds the device's `shared_memory_per_block_optin` (227 KiB by
  default, "the maximum amount of shared memory per thread block available in compute
  capabilities 9.0 and 10.x"). Pallas allocates all of a kernel's TMEM at once with
  `tcgen05.alloc`, rounded up to a power of two >= 32 columns (`tcgen05.tmem_alloc_exact_ncols`),
  and rejects more than 512 ("After rounding up, got 1024 columns, exceeding the limit").

The SMEM granularity: a block's SMEM is counted the way Mosaic GPU lays it out, each
buffer rounded up to `smem_granularity` = 1024 bytes [MOSAIC], plus `barrier_bytes` per
barrier. That is coarser than the hardware's 128-byte allocation unit [OCC] (kept as
`smem_alloc_unit`; 1024 is a multiple of it, and so is every per-block limit below, so
rounding a block's total up to it never changes an over/under-budget verdict), and it is
what decides whether Mosaic GPU accepts the kernel: two 113.5 KiB buffers fit in 227 KiB
byte for byte, but take 2 x 114 KiB = 228 KiB once aligned, and Mosaic rejects them.
"""

from __future__ import annotations

import dataclasses

KiB = 1024


@dataclasses.dataclass(frozen=True)
class Device:
    """Per-block memory limits of one GPU, and how allocations are rounded."""

    name: str
    # dynamic SMEM one block may use (opt-in maximum), in bytes
    smem_per_block: int
    # each SMEM buffer is rounded up to this many bytes (Mosaic GPU's alignment)
    smem_granularity: int
    # TMEM columns (of 128 lanes x 32 bits) one block may allocate; 0: no TMEM
    tmem_columns: int
    arch: str = ""
    smem_per_sm: int = 0
    # hardware shared-memory allocation unit (a block's total is a multiple of it)
    smem_alloc_unit: int = 128
    # SMEM the driver reserves for every block, on top of `smem_per_block`
    smem_reserved_per_block: int = 1 * KiB
    barrier_bytes: int = 8  # one mbarrier
    tmem_address_bytes: int = 4  # SMEM slot where tcgen05.alloc writes the TMEM address
    tmem_lanes: int = 128
    tmem_min_columns: int = 32  # tcgen05.alloc: a power of two in [32, 512]
    tmem_column_alignment: int = 8  # Mosaic GPU counts each TMEM ref in 8-column chunks
    regs_per_block: int = 64 * KiB * 4  # 64K 32-bit registers, in bytes

    @property
    def has_tmem(self) -> bool:
        return self.tmem_columns > 0

    @property
    def tmem_bytes(self) -> int:
        return self.tmem_lanes * self.tmem_columns * 4

    def smem_charge(self, nbytes: int) -> int:
        """Bytes a buffer of `nbytes` takes in SMEM once aligned."""
        g = self.smem_granularity
        return -(-int(nbytes) // g) * g

    def tmem_allocated(self, columns: int) -> int:
        """Columns `tcgen05.alloc` really takes for `columns` (0 stays 0)."""
        if columns <= 0:
            return 0
        return max(self.tmem_min_columns, 1 << (int(columns) - 1).bit_length())


_SM90 = dict(arch="sm_90", smem_per_block=227 * KiB, smem_per_sm=228 * KiB,  # [CCTAB][HOPPER]
             smem_granularity=1024, tmem_columns=0)  # [MOSAIC]; Hopper has no TMEM

DEVICES: dict[str, Device] = {
    "h100": Device(name="h100", **_SM90),
    "h200": Device(name="h200", **_SM90),
    # [CCTAB][BLACKWELL]: 227 KiB per block; [PTX-TMEM]: 128 lanes x 512 columns x 32 bit
    # = 256 KiB of TMEM
    "b200": Device(name="b200", arch="sm_100", smem_per_block=227 * KiB,
                   smem_per_sm=228 * KiB, smem_granularity=1024, tmem_columns=512),
    # [CCTAB] cc 12.0 (RTX 50xx, RTX PRO Blackwell): 99 KiB per block, 100 KiB per SM,
    # no tcgen05 and so no TMEM
    "sm120": Device(name="sm120", arch="sm_120", smem_per_block=99 * KiB,
                    smem_per_sm=100 * KiB, smem_granularity=1024, tmem_columns=0),
}


def get_device(name: str | Device) -> Device:
    """The preset called `name` (case-insensitive); a `Device` is returned as is."""
    if isinstance(name, Device):
        return name
    key = str(name).strip().lower()
    try:
        return DEVICES[key]
    except KeyError:
        raise ValueError(
            f"unknown device {name!r}; known devices: {', '.join(DEVICES)} "
            "(or pass a pallas_viz.devices.Device)") from None


__all__ = ["DEVICES", "Device", "KiB", "get_device"]
