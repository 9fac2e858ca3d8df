"""Schedule choice: how a projection tile program maps onto threads.

`simd_splitk` (rows 1..32): each threadgroup owns BN = SG*NC
output columns and BM rows. Each SIMD group owns NC columns; its 32 lanes
split K, lane l taking VK consecutive k per step (k = 32*VK*kb + VK*l + v), and
every lane keeps BM x NC f32 accumulators in registers, so each weight element
it loads serves all BM rows. A `simd_sum` per accumulator ends the K loop; lane
c then finishes column c for every row, so per-column data (a bias) is read
once.

Row invariance: a row's sum order depends only on VK (fixed per weight format)
and the fixed `simd_sum` tree, never on BM or NC, so a row's bits do not depend
on how many rows share the call.

`tiled` (more than 32 rows, GEMM-shaped): a threadgroup of 256 threads owns a
64 x 32 output tile; x and the dequantised weights are staged through
threadgroup memory, so each weight element is loaded from device memory once
per 64 rows (and each x element once per 32 columns); every thread computes a
TM x TN block of outputs from the staged tiles. Each output is summed in
exactly the order `simd_splitk` uses - 32 partial sums over the same k
positions the 32 lanes would own, combined in the xor-butterfly tree of the
SIMD-group sum - so a row's bits are the same under both schedules, and row
invariance holds across the 32-row boundary (lower_tiled.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ROW_BUCKETS = (1, 2, 4, 8, 16, 32)
MAX_ROWS_PER_PROGRAM = 32
TILED_BUCKET = 64  # more than 32 rows: the tiled schedule, 64 rows per threadgroup
# f32 values one lane keeps live in the inner loop (accumulators and weights);
# a GPU thread has about 128 32-bit registers before it spills.
REGISTER_BUDGET = 96
MAX_COLUMNS = 8  # columns per SIMD group: more amortise the x loads over more weights
SIMD_WIDTH = 32


@dataclass(frozen=True)
class Schedule:
    kind: str
    BM: int  # rows per program instance (registers)
    NC: int  # output columns per SIMD group
    SG: int  # SIMD groups per threadgroup
    VK: int  # consecutive k per lane per step
    U: int  # of those, how many are unrolled together (16 bytes of the widest-packed weight)
    C: int  # of those, how many share one row loop (16 bytes of x)
    TM: int = 0  # tiled: rows per thread
    TN: int = 0  # tiled: columns per thread
    S: int = 0  # tiled: k positions staged per barrier
    splits: int = 0  # mma: K ranges (the sum order), a multiple of SG; 0 for SG (one per warp)
    blocks: int = 0  # mma: blocks per SM to ask for (caps registers); 0 for the row bucket's setting
    xshare: int = 0  # mma: warps that each own NC columns over all of K, sharing x (lower_mma_xshare); 0: K-split warps
    ring_kb: int = 0  # mma, staged: KB of shared memory the rings may take (lower_mma_staged.ring_rule); 0 default
    ring_stages: int = 0  # mma, staged: stages of the rings (the same); 0 as many as fit

    @property
    def BN(self) -> int:
        return self.SG * self.NC

    @property
    def BK(self) -> int:
        return SIMD_WIDTH * self.VK

    @property
    def threads(self) -> int:
        return SIMD_WIDTH * self.SG

    def meta(self) -> dict[str, int]:
        return {"BM": self.BM, "BN": self.BN, "BK": self.BK}

    def grid(self, rows: int, cols: int) -> tuple[int, int, int]:
        return (-(-cols // self.BN), -(-rows // self.BM), 1)

    def describe(self) -> str:
        if self.kind == "mma" and self.xshare:
            return (
                f"schedule mma, x shared: {self.BN} columns x {self.BM} rows per block of {self.SG} warps, "
                f"{self.NC} columns each over all of K in chunks of {self.BK} k ({self.splits} K ranges folded in "
                "order), mma.sync m16n8k16 with f32 accumulation"
            )
        if self.kind == "mma":
            ranges = f" ({self.splits} K ranges, {self.splits // self.SG} per warp)" if self.splits > self.SG else ""
            return (
                f"schedule mma: {self.BN} columns x {self.BM} rows per block of {self.SG} warps splitting K{ranges} in "
                f"chunks of {self.BK} k, mma.sync m16n8k16 with f32 accumulation"
            )
        if self.kind == "tiled":
            return (
                f"schedule tiled: BM={self.BM} x BN={self.BN} per threadgroup of {self.threads} threads, "
                f"TM={self.TM} x TN={self.TN} per thread, partial sums in the order of VK={self.VK} k per lane "
                f"(BK={self.BK}), S={self.S} k staged per barrier"
            )
        return (
            f"schedule {self.kind}: BM={self.BM} rows, SG={self.SG} simdgroups x NC={self.NC} columns, "
            f"VK={self.VK} k per lane, U={self.U} unrolled in chunks of C={self.C} (BK={self.BK})"
        )


def row_bucket(rows: int) -> int:
    for b in ROW_BUCKETS:
        if rows <= b:
            return b
    return TILED_BUCKET


def values_per_16_bytes(bits: int, dtype: str) -> int:
    if bits:
        return 128 // bits
    return 4 if dtype == "f32" else 8


def k_per_lane(weight_bits: tuple[int, ...], group_sizes: tuple[int, ...], weight_dtypes: tuple[str, ...]) -> int:
    """Consecutive k per lane: a whole quantization group for quantized weights
    (so one lane loads each scale and bias), and at least 16 bytes of every
    weight (one vector load). One value for all weights of a fused call, so
    they share the x loads."""
    vk = 1
    for bits, group, dtype in zip(weight_bits, group_sizes, weight_dtypes):
        vk = max(vk, values_per_16_bytes(bits, dtype), group if bits else 1)
    return vk


def choose(
    rows: int,
    accumulators: int,
    weight_bits: tuple[int, ...],
    group_sizes: tuple[int, ...],
    weight_dtypes: tuple[str, ...],
    act_dtype: str = "bf16",
    target: str = "msl",
    mma_chunk: int = 0,
    mma_warps: int = 0,
    mma_max_tiles: int = 4,
    mma_splits: int = 0,
    mma_blocks: int = 0,
    mma_xshare: int = 0,
    mma_ring: tuple[int, int] = (0, 0),
) -> Schedule:
    """`mma_chunk` (CUDA, sm_80+, a spec lower_mma accepts): the k per tensor-core
    chunk; then rows 1..32 take the `mma` schedule, with `mma_warps` warps per
    block (0: lower_mma's setting) and at most `mma_max_tiles` 16-column tiles;
    `mma_splits` K ranges (0: one per warp; else a multiple of the warps); `mma_blocks`
    blocks per SM to ask for (0: the row bucket's setting); `mma_xshare` warps per block that
    each own their columns over all of K and share x (lower_mma_xshare; 0: K-split warps); `mma_ring` the staged rings' (KB, stages), (0, 0) for
    the defaults (lower_mma_staged.ring_rule)."""
    vk = k_per_lane(weight_bits, group_sizes, weight_dtypes)
    if mma_chunk and rows <= MAX_ROWS_PER_PROGRAM:
        # W warps splitting K over T tiles of 16 columns; 8-row tiles of x (so 1..8 rows share one kernel)
        from .lower_mma import TILE, mma_shape

        bm = max(8, row_bucket(rows))
        if mma_xshare:  # warps of their own columns over all of K (lower_mma_xshare sizes its rings)
            from .lower_mma import MAX_PARTIALS
            from .lower_mma_xshare import xshare_tiles

            sg, nc = mma_xshare, TILE * xshare_tiles(bm, accumulators, MAX_PARTIALS)
            splits, ring = mma_splits or mma_warps, (0, 0)
        else:
            splits = mma_splits if mma_warps and mma_splits > mma_warps else 0  # else one K range per warp
            sg, tiles = mma_shape(bm, accumulators, mma_warps, mma_max_tiles, splits)
            nc, ring = TILE * tiles // sg, mma_ring
        return Schedule(
            "mma",
            BM=bm,
            NC=nc,
            SG=sg,
            VK=mma_chunk // 32,
            U=1,
            C=1,
            splits=splits,
            blocks=mma_blocks,
            xshare=mma_xshare,
            ring_kb=ring[0],
            ring_stages=ring[1],
        )
    if rows > MAX_ROWS_PER_PROGRAM:
        # 256 threads as 16 x 16, each 4 rows x 2 columns of a 64 x 32 tile
        return Schedule("tiled", BM=TILED_BUCKET, NC=4, SG=8, VK=vk, U=1, C=1, TM=4, TN=2, S=min(vk, 32))
    bm = row_bucket(rows)
    # unroll one 16-byte vector of the widest-packed weight at a time ...
    u = min(vk, max(values_per_16_bytes(b, d) for b, d in zip(weight_bits, weight_dtypes)))
    # ... in chunks of one 16-byte vector of x
    c = min(u, values_per_16_bytes(0, act_dtype))
    sg, budget, max_nc = 2, REGISTER_BUDGET, MAX_COLUMNS
    if target == "cuda":
        sg, budget, max_nc = cuda_tuning(bm)
    # registers per lane: accumulators BM*NC*acc, live weights C*NC*acc, x C
    nc = max(1, min(max_nc, budget // ((bm + c) * accumulators)))
    return Schedule("simd_splitk", BM=bm, NC=nc, SG=sg, VK=vk, U=u, C=c)


# CUDA, measured on the H200 (bench/results/h200-sweep-*.json): up to 4 rows,
# 4 warps per block with fewer live values per thread keep more warps resident;
# from 8 rows the Metal setting (2 warps, 8 columns) was faster. Neither
# changes a row's sum order.
CUDA_SMALL_ROWS = 4
CUDA_SMALL = {"sg": 4, "budget": 48, "nc": 4}
CUDA_LARGE = {"sg": 2, "budget": REGISTER_BUDGET, "nc": MAX_COLUMNS}


def cuda_tuning(rows_bucket: int) -> tuple[int, int, int]:
    """(warps per block, register budget, max columns per warp); overridable for
    tuning runs with MLX_METILE_CUDA_TUNE="sg=4,budget=48,nc=4"."""
    values = dict(CUDA_SMALL if rows_bucket <= CUDA_SMALL_ROWS else CUDA_LARGE)
    for item in filter(None, os.environ.get("MLX_METILE_CUDA_TUNE", "").split(",")):
        key, _, value = item.partition("=")
        if key.strip() not in values or not value.strip().isdigit() or int(value) < 1:
            raise ValueError(f"MLX_METILE_CUDA_TUNE: cannot use {item!r}; expected e.g. sg=4,budget=48,nc=4")
        values[key.strip()] = int(value)
    if values["sg"] > 32:
        raise ValueError("MLX_METILE_CUDA_TUNE: sg must be at most 32 (1024 threads per block)")
    return values["sg"], values["budget"], values["nc"]
