"""The `mma` schedule with staged weights (the CUDA default for 4/8-bit and dense weights).

Same math as lower_mma (exact integer MMAs per group, the affine scaling in
f32 per group, the same lane <-> k mapping), but the weights, scales and biases
reach the lanes through shared memory:

    global --cp.async--> a ring of S stages per warp --shared loads--> lanes

A stage is G groups of the warp's K range for the block's 16 T columns of each
accumulator (T column tiles: 2 for wide and deep products where the rings fit,
so that each x value loaded serves both tiles; see column_layout). The copies read each column's stage as one contiguous run
(64-256 bytes, 16 bytes a lane), so a warp-wide copy touches 4-8 cache lines;
the lanes' direct loads of lower_mma touch 16 lines per 256 bytes. An H200
probe of the two access patterns alone (bench/cuda_probe/int4_loads.cu,
2026-11-29) read 3.4-3.6 TB/s with whole-column runs against 2.2-2.3 TB/s with
the lanes' pattern. In flight, the copies hold shared memory instead of
registers: S - 1 stages per warp while it computes one.

Rows of the ring are padded (row_pad) so that the rows a shared load serves at
once start on disjoint banks: by 32 bytes for 8-byte lane loads, 64 for dense
weights' 16-byte ones, else 16; 8-bit group 64's 16-byte loads get there by
swizzling unpadded rows instead (width_swizzle). Until the fourteenth session every format had 16,
which put neighbouring rows' 8- and 16-byte loads on shared banks (Nsight Compute:
2.7-way conflicts on the 16-row 4-bit group-64 kernel's shared loads).
The reduction buffer of the warps' partial sums reuses the ring after the loop.
The K split (whole stages per warp) depends on the spec alone, so rows stay
invariant across row buckets as in lower_mma; tiles move loads only.
"""

from __future__ import annotations

import os

from ..codegen.ast import KernelDef, Raw
from ..cuda_arch import shared_memory
from ..spec import ProjectionSpec, WeightFormat
from .lower import LowerError
from .lower_mma import (
    SMEM_LIMIT,
    TILE,
    Load,
    MMALowering,
    chunk_k,
    dense_mode,
    mma_override,
    mma_setting,
    sector_layout,
    wide,
)

PAD = 16  # bytes after each ring row: the rows of a shared load on distinct banks


def width_swizzle(spec: ProjectionSpec) -> tuple[int, int]:
    """(mask, multiplier) of the swizzle by load width: piece p of ring row r is stored at
    p ^ ((r & mask) * multiplier). A shared load of w bytes a lane serves 32 / w rows at a time,
    each row's 4 lanes reading 4 w contiguous bytes (w / 4 pieces); rows r & mask = 0 .. 32 / w - 1
    then take disjoint pieces - disjoint banks, since unpadded rows of a multiple of 128 bytes all
    start on bank 0 - where the legacy swizzle (=1) maps row 1's 8- and 16-byte loads onto row 0's
    pieces. By default for quantized weights whose lanes load 16 bytes (8-bit group 64), which
    row_pad leaves at 16 bytes of padding: H200, kernel alone (bench/results/
    h200-ab-2026-11-30-session14.json, call 12) 1.01-1.05x on every shape and row count measured;
    for other formats against their padding 0.80-1.05x. MLX_METILE_CUDA_MMA_SWIZZLE=2 takes it for
    every format, =0 (or MLX_METILE_CUDA_MMA_BANKPAD set) none. Needs rows of 128 bytes or more;
    (0, 0): no swizzle."""
    w, setting = lane_load_bytes(spec), mma_override("swizzle")
    default = setting is None and mma_override("bankpad") is None and spec.weights[0].quantized and w == 16
    if not (setting == 2 or default) or stage_groups(spec) * chunk_bytes(spec) < 128:
        return (0, 0)
    return (32 // w - 1, w // 4)


def ring_swizzle(spec: ProjectionSpec) -> tuple[int, int]:
    """(mask, multiplier) of the ring's swizzle, rows then unpadded (row_pad); (0, 0) for none.
    MLX_METILE_CUDA_MMA_SWIZZLE=1: each row's 16-byte pieces at piece ^ (row mod 8) (at most the
    row's pieces), which spreads a 4-byte shared load's 8 rows over the banks as 16 bytes of
    padding do, in 512 fewer bytes per 32-row stage (so that, with STAGES=3 and SMEM=55, 4 warps'
    rings of 3 stages still let 4 blocks share an SM); =2 or by default: width_swizzle. Moves
    bytes only: no sum changes."""
    if mma_override("swizzle") == 1:
        return min(stage_groups(spec) * chunk_bytes(spec) // 16, 8) - 1, 1
    return width_swizzle(spec)


def lane_load_bytes(spec: ProjectionSpec) -> int:
    """Bytes a lane reads from a ring row in one shared load of its weight words (lower_mma:
    16 dense; else its words of a chunk, at most 4, or one slice's with the sector layout)."""
    w = spec.weights[0]
    if not w.quantized:
        return 16
    if sector_layout(spec):
        return w.bits // 4 * 4
    return min(chunk_k(spec) // 4 * w.bits // 32, 4) * 4


def row_pad(spec: ProjectionSpec) -> int:
    """Bytes after each ring row. A shared load of w bytes a lane is served 128 / w lanes - 32 / w
    rows of 4 lanes - at a time, and rows whose starts differ by 4 w bytes (modulo 128) put
    those on disjoint banks; rows 16 bytes apart (PAD) do that for 4-byte loads only, and made
    Nsight Compute count 2.7-way bank conflicts on the 16-row 4-bit group-64 kernel's 8-byte
    loads. By default 32 bytes for 8-byte loads (4-bit group 64, 8-bit group 32, 8-bit group 128's
    sector layout) and 64 for dense weights' 16-byte loads; 8-bit group 64's 16-byte loads take
    no padding but the swizzle by load width (width_swizzle; 64 bytes of padding measured slower,
    its rings then holding fewer stages). H200, kernel alone
    (bench/results/h200-ab-2026-11-30-session14.json, call 6): dense 1.01-1.11x, 4-bit group 64
    1.00-1.04x, 8-bit group 128 1.02-1.07x; 8-bit group 64 at 64 bytes 0.55-1.07x.
    MLX_METILE_CUDA_MMA_BANKPAD=0 keeps PAD everywhere, =1 pads every format by 4 w; swizzled
    rings have none."""
    if ring_swizzle(spec)[1]:
        return 0
    setting = mma_override("bankpad")
    if setting == 0:
        return PAD
    w = lane_load_bytes(spec)
    if setting == 1 or w == 8 or not spec.weights[0].quantized:
        return 4 * w % 128 or PAD
    return PAD


MAX_STAGES = 4
DENSE_STAGE_K = 64  # k of a dense column per stage by default: 2 chunks of 32, 128 bytes
DENSE_WARPS = 8


def interleaved() -> bool:
    """MLX_METILE_CUDA_MMA_INTERLEAVE=1: the warps of a block take K in interleaved
    stages (warp w: stages w, w + W, ...), so that at any time they copy adjacent runs
    of each column (W x 64-256 bytes) rather than runs K / W apart. Part of every
    row's sum order (which chunks each warp adds), so one setting for all row buckets."""
    return mma_override("interleave") == 1


def chunk_bytes(spec: ProjectionSpec) -> int:
    """Bytes of one column per chunk (chunk_k of a quantized weight, or of a 2-byte dense one)."""
    w = spec.weights[0]
    return chunk_k(spec) * (w.bits if w.quantized else 16) // 8


def scale_bytes_of(spec: ProjectionSpec) -> int:
    """Bytes of one column's scales (and again of its biases) per chunk; dense: none."""
    w = spec.weights[0]
    return 0 if not w.quantized else 4 if w.dtype == "f32" else 2


def stage_groups(spec: ProjectionSpec) -> int:
    """Groups per stage (MLX_METILE_CUDA_MMA_GROUPS: 2, 4 or 8). By default
    128 bytes of each column (the H200 A/B runs: 4-bit group 64 read 2.2 TB/s
    with 4 groups against 1.76 with 2), at least 2 groups so that a column's
    scales of a stage are one copy of 4-16 bytes, and fewer while K would not
    hold whole stages."""
    value = mma_override("groups")
    if value is not None:
        return value
    groups = max(2, min(8, 128 // chunk_bytes(spec)))
    if spec.weights[0].dtype == "f32":
        groups = min(groups, 4)  # f32 scales: at most 16 bytes a column
    while groups > 2 and spec.k_divisor % (groups * chunk_k(spec)):
        groups //= 2
    return groups


def ring_rows(spec: ProjectionSpec, tiles: int = 1) -> int:
    """Rows of a stage: 16 columns per tile and accumulator, ordered (accumulator, tile, column)."""
    return TILE * tiles * (2 if spec.epilogue == "swiglu" else 1)


def slot_bytes(spec: ProjectionSpec, tiles: int = 1) -> int:
    """One stage of one warp: the weight rows (padded), then scales, then biases."""
    groups = stage_groups(spec)
    return ring_rows(spec, tiles) * (groups * chunk_bytes(spec) + row_pad(spec) + 2 * groups * scale_bytes_of(spec))


def ring_budget(warps: int) -> int:
    """Bytes of shared memory a block's rings may take: MLX_METILE_CUDA_MMA_SMEM (KB, 48-227),
    else the 48 KB a kernel may declare statically, or SPREAD_SMEM for blocks of more than
    8 warps (the spread layout). Rings over 48 KB are dynamic shared memory, given at
    launch (MLX raises the kernel's limit at its first launch)."""
    kb = mma_override("smem") or (SPREAD_SMEM if warps > DENSE_WARPS else SMEM_LIMIT // 1024)
    return capped(kb * 1024)


def capped(ring_bytes: int) -> int:
    """`ring_bytes`, or what the build's architecture gives a block if less (cuda_arch: the
    budgets here were measured on the H200, sm_90, whose 227 KB cap none of them)."""
    return min(ring_bytes, shared_memory()[0])


# At 32 rows, 2 tiles whose rings of 2 stages exceed 48 KB but fit this many KB take them in
# dynamic shared memory (8-bit group 128, 256 bytes a column per stage: 70 KB). H200, kernel
# alone (h200-ab-2026-11-29-session11.json, call 1): 4096 -> 14336 1.19x at 32 rows against
# one tile, but 0.72-0.99x at 1-16 rows, so only at 32.
WIDE_RING_ROWS = 32
WIDE_RING_KB = 76  # (72 before the rows were padded by 32 bytes)


def ring_stages(
    spec: ProjectionSpec, warps: int, tiles: int = 1, rows_bucket: int = 0, ring: tuple[int, int] = (0, 0)
) -> int:
    """MLX_METILE_CUDA_MMA_STAGES (2..8), else `ring`'s stages (ring_rule), else MAX_STAGES; fewer
    while the block's rings exceed `ring`'s KB, else ring_budget(warps), or WIDE_RING_KB for 2
    tiles at WIDE_RING_ROWS rows."""
    stages = mma_override("stages") or ring[1] or MAX_STAGES
    budget = ring[0] * 1024 or ring_budget(warps)
    wide_ring = tiles == 2 and rows_bucket >= WIDE_RING_ROWS and spec.weights[0].quantized  # (dense: unmeasured)
    # only where 2 stages do not fit the usual budget (elsewhere the stages stay as they were)
    if (
        wide_ring
        and mma_override("smem") is None
        and budget < warps * 2 * slot_bytes(spec, tiles) <= WIDE_RING_KB * 1024
    ):
        budget = WIDE_RING_KB * 1024
    budget = capped(budget)
    while stages > 1 and warps * stages * slot_bytes(spec, tiles) > budget:
        stages -= 1
    return stages


# The staged rings' size per column layout and row bucket, where a measured rule departs from
# the defaults (they move loads only). H200, kernel alone:
# - dense weights (bench/results/h200-ab-2026-11-30-session14.json, call 8): in TILES at 16-32
#   rows, a 100 KB budget (two tiles of 2 stages: x loaded once for 32 columns) 1.11-1.19x on
#   bf16 4096 -> 14336 (0.97x at 1-8 rows); one tile (ONE_TILE, and DEEP, which for dense
#   weights differs only in name) at 1-4 rows, 3 stages in 80 KB: 1.04-1.07x on 14336 -> 4096
#   and 1.02-1.03x on 4096 -> 4096 (0.92-0.99x at 16-32 rows). Single products only: the bf16
#   SwiGLU gate/up 4096 -> 2 x 14336, whose two accumulators got one tile of 4 stages in the 100 KB
#   instead, ran 0.89x / 0.96x at 32 / 16 rows against the 48 KB ring (h200-ab-2026-11-30-session15.json,
#   calls 4-5; through MLX 0.76x stock at 32 rows in that session's full run).
#   The deep ring not in ONE_TILE_WIDE, whose grids (2-4 blocks per SM) run as one wave at the 48 KB
#   ring's 4 blocks per SM and as two at the deep ring's 2: 48 KB there 1.13-1.15x on bf16 2048 -> 8192
#   and 1.09-1.13x on 3072 -> 8192 at 1-4 rows (bench/results/h200-ab-2026-11-30-session16.json, call 7,
#   bit-identical); the deep ring stays where it was measured and on grids of more than 4 blocks per
#   SM (48 KB: 2048 -> 11008 0.99-1.01x, 3584 -> 18944 0.96-0.99x; 4096 -> 4096 0.96-0.98x).
# - single products of 4-bit weights (groups 64 and 128) in one tile (ONE_TILE, and DEEP, which
#   for 4-bit weights is the same kernel) at 1-8 rows: 3 stages instead of 4 (34 KB
#   of rings a block instead of 45, leaving the SM's L1 more room for x): 1.02-1.05x on
#   14336 -> 4096 and 4096 -> 4096, groups 64 and 128 (bench/results/h200-ab-2026-11-30-session15.json,
#   call 1, with a repeat of the default within 1%; call 11 of session 14 the same on 14336 ->
#   4096). SPREAD (8960 -> 1536) measured 0.98-1.00x, 8-bit weights' DEEP 0.95-0.98x: not there.
# - single quantized products in ONE_TILE and ONE_TILE_WIDE (one kernel), by format and row
#   bucket (ONE_TILE_STAGES; 8-bit group 128 keeps its stages): 2-3 stages instead of the 4 that
#   fit its 48 KB, leaving more of the SM to L1 for x. Kernel alone, bit-identical, each against
#   the default and a repeat of it, two rounds on 4096 -> 4096, 3072 -> 3072, 3584 -> 3584 and
#   5120 -> 5120 (bench/results/h200-ab-2026-11-30-session21.json, calls 6 and 9-12; the table in
#   docs/CUDA_MEASUREMENTS.md): 1.01-1.12x wherever the stages change, but 4-bit group 128's 2
#   at 32 rows on 5120 -> 5120 (0.99x). Kept: 4-bit group 32 at 32 rows (2 stages 0.81-0.98x),
#   4-bit group 128 at 1-8 (3, as the rule above; 2 0.99-1.04x). Not DEEP at 1-8 rows (4-bit
#   group 32 on 4096 -> 1024 0.97-1.00x; 8-bit group 64 0.97-0.99x) nor TILES (4096 -> 14336:
#   1.00x). DEEP at 16-32 rows, where its warps are 4 (DEEP_STAGES): 2 stages
#   on 14336 -> 4096, 4096 -> 2048 and 4096 -> 1024 (calls 10-11, 16) 1.01-1.06x for 4-bit
#   groups 32 (at 16 rows; 0.92-0.97x at 32: kept) and 64, 8-bit groups 32 and 64, and 4-bit
#   group 128 at 32 rows (at 16 0.97-1.03x: kept). ONE_WAVE, ONE_TILE's kernel at 5 blocks an SM,
#   whose 4-stage rings leave L1 almost nothing (ONE_WAVE_STAGES; 1536 -> 8960, call 22): 2 stages
#   1.04-1.14x at 1-16 rows for every 4/8-bit format but 8-bit group 128 (8-bit group 64: at 1-4
#   rows, TILES from 8), 1.02-1.06x at 32 (4-bit group 32 0.95x there: kept).
# - fused products of 4/8-bit weights concatenated into one accumulator (q/k/v) in ONE_TILE_WIDE
#   (CONCAT_STAGES; session 22, call 4, bench/results/h200-ab-2026-11-30-session22.json): 4096 ->
#   4096 + 1024 + 1024, 3072 -> 3072 + 2 x 1024, 3584 -> 3584 + 2 x 512 and 5120 -> 5120 + 2 x 1024,
#   two rounds, bit-identical: 2 stages 1.03-1.16x at 1-16 rows for every 4-bit group and both
#   8-bit groups at 16, 3 for 8-bit weights at 1-8 rows (1.02-1.08x), at 32 rows 2 for 4-bit group
#   128 (1.02-1.09x) and 3 for 8-bit group 32 (1.01-1.02x); kept at 32 rows for 4-bit groups 32 and
#   64 (2 stages 0.82-1.01x) and 8-bit group 64 (0.97-1.02x). Qwen2.5-1.5B's 1536 -> 1536 + 2 x 256
#   (ONE_TILE, 128 blocks) moved within the noise either way: its layout keeps its stages. The
#   SwiGLU gate/up needs no table: two weights a stage already leave it 2 stages in 48 KB.
# - the SwiGLU gate/up of 8-bit group-128 weights in TILES, whose one-tile rings of 2 stages
#   (2 x 256 bytes a column per stage) exceed 48 KB, so that it took the direct loads: the staged
#   ring in 80 KB of dynamic shared memory, at every row bucket (staged and direct loads may
#   split K differently - a sum order - so one layout keeps one of them for all its row buckets):
#   kernel alone 4096 -> 2 x 14336 1.10x / 1.19x / 1.19x / 0.92x / 1.08x at 1 / 4 / 8 / 16 / 32 rows,
#   bit-identical (session 15, calls 8-9); through MLX 1.20x / 1.19x / 1.15x / 0.97x / 1.06-1.10x
#   against the direct loads (call 10).
DENSE_WIDE_RING = (100, 0)  # (KB, stages: 0 as many as fit)
DENSE_DEEP_RING = (80, 3)
Q4_ONE_TILE_RING = (0, 3)  # (KB: 0 the default budget, stages)
# (bits, group) -> stages at 1-8, 16 and 32 rows of single quantized products, by layout; 0: as the
# rules below / the default
ONE_TILE_STAGES = {(4, 32): (2, 2, 0), (4, 64): (2, 2, 2), (4, 128): (3, 2, 2), (8, 32): (3, 2, 2), (8, 64): (3, 3, 2)}
DEEP_STAGES = {(4, 32): (0, 2, 0), (4, 64): (0, 2, 2), (4, 128): (0, 0, 2), (8, 32): (0, 2, 2), (8, 64): (0, 2, 2)}
ONE_WAVE_STAGES = {(4, 32): (2, 2, 0), (4, 64): (2, 2, 2), (4, 128): (2, 2, 2), (8, 32): (2, 2, 2), (8, 64): (2, 0, 0)}
CONCAT_STAGES = {(4, 32): (2, 2, 0), (4, 64): (2, 2, 0), (4, 128): (2, 2, 2), (8, 32): (3, 2, 3), (8, 64): (3, 2, 0)}
Q8G128_SWIGLU_RING = (80, 0)


def ring_rule(spec: ProjectionSpec, layout: int, rows_bucket: int) -> tuple[int, int]:
    """(KB, stages) of the staged rings where a rule above applies, else (0, 0): the defaults
    (also off the staged ring). MLX_METILE_CUDA_MMA_SMEM or _STAGES set: (0, 0), the knobs rule."""
    knobs = mma_override("smem") is not None or mma_override("stages") is not None
    if knobs or not stageable(spec):
        return (0, 0)
    w = spec.weights[0]
    q8g128 = w.quantized and w.bits == 8 and w.group_size == 128
    if q8g128 and spec.epilogue == "swiglu" and layout == TILES:
        return Q8G128_SWIGLU_RING
    if len(spec.weights) != 1:  # the rules below: single products, what was measured; and q/k/v
        concat = w.quantized and spec.accumulators == 1 and layout == ONE_TILE_WIDE
        return table_stages(CONCAT_STAGES, w, rows_bucket) if concat else (0, 0)
    if w.quantized:
        stages = table_stages(STAGE_TABLES.get(layout, {}), w, rows_bucket)
        if stages != (0, 0):
            return stages
        single_q4 = w.bits == 4 and w.group_size in (64, 128)
        one_tile = layout in (ONE_TILE, ONE_TILE_WIDE, DEEP)  # (DEEP: ONE_TILE's kernel for 4-bit weights)
        return Q4_ONE_TILE_RING if single_q4 and one_tile and rows_bucket <= 8 else (0, 0)
    if layout == TILES and rows_bucket >= 16:
        return DENSE_WIDE_RING
    if layout in (ONE_TILE, DEEP) and rows_bucket <= 4:
        return DENSE_DEEP_RING
    return (0, 0)


def table_stages(table: dict, w: WeightFormat, rows_bucket: int) -> tuple[int, int]:
    """(0, stages) of a stage table's entry for the weight's format and row bucket, else (0, 0)."""
    by_rows = table.get((w.bits, w.group_size))
    if not by_rows or rows_bucket > 32:
        return (0, 0)
    stages = by_rows[0 if rows_bucket <= 8 else 1 if rows_bucket <= 16 else 2]
    return (0, stages) if stages else (0, 0)


# Several tiles per block only for products at least this wide and deep. Narrower outputs:
# with 2 tiles their blocks would not fill two per SM of the H200 (132 SMs); measured
# there (bench/results/h200-ab-2026-11-29-session5.json, call 13), 2 tiles lost 3-25% on
# 14336 -> 4096 and were within 3% on 4096 -> 4096. Shorter K: on 1536 -> 8960 the kernel
# alone was -7..+16% and the MLX benchmark -12..-20% at 1-8 rows (+29% at 32).
NARROW_COLUMNS = 2 * TILE * 2 * 132
SHORT_K = 4096


# Column layouts of a product (one per weight shape, so for all its row buckets, but where bucket_layout
# gives some single products TILES in some row buckets):
# TILES: several tiles per block where the rings fit; ONE_TILE: narrow or shallow
# products; SPREAD: outputs so narrow that the grid gives an SM at most one block, over a
# long K: one tile, and K split over twice the warps (8 for 4/8-bit weights, 16
# dense). H200, kernel alone (bench/results/h200-ab-2026-11-29-session7.json,
# call 5), 8960 -> 1536 (96 blocks) against the warps it replaced: 1.08x (4-bit), 1.19-1.21x
# (8-bit), 1.29-1.32x (dense) at 1-8 rows, 1.01-1.25x at 16 and 1.01-1.16x at 32 rows, with
# the blocks per SM of MINBLOCKS scaled down to the warps.
# DEEP: outputs that give an SM at most 2 blocks, with K >= 8192 or at most SPREAD_COLUMNS
# columns, and 8-bit weights: K in 8 ranges (the sum order), taken by 8 warps at up to 8 rows
# and by 4 warps of two ranges each at 16-32 rows, where 8 warps' registers would not let the
# grid fit the GPU at once (calls 3-4: 8 warps 0.51-0.94x at 32 rows). Call 7, against the 4
# warps it replaced: 8-bit 14336 -> 4096 and 4096 -> 1024 1.10-1.23x at 1-8 rows, 0.95-0.97x
# at 16-32; 4-bit weights and 4096 -> 4096 gained about as much at 1-8 rows as they lost at
# 16-32 (1.03-1.06x against 0.92-0.97x), so they keep 4 warps (ONE_TILE).
# ONE_WAVE: ONE_TILE for grids of more than 4 and at most 5 blocks per SM (1536 -> 8960: 560 blocks
# against 528 places at 4 per SM); at 1-8 rows their single products of 4/8-bit weights ask for 5
# blocks per SM (96 registers, wave_blocks), so that the grid runs as one wave. Call 1 of
# h200-ab-2026-11-29-session11.json, 1536 -> 8960 at 1-8 rows: 1.03-1.07x (4-bit group 64), 1.03-1.06x
# (8-bit group 64), 1.09-1.12x (4-bit group 128), 1.12-1.17x (8-bit group 128); the SwiGLU gate/up
# there spills at 96 registers (0.94-1.01x for group 64 and 8-bit group 128), so it keeps 4.
# ONE_TILE_WIDE: ONE_TILE for grids of more than 2 and at most 4 blocks per SM (4225-8448 columns), which
# run as one wave at 4 blocks per SM: the same kernels but for dense weights at 1-4 rows, which keep
# the 48 KB ring there instead of the deep ring's 80 KB (2 blocks per SM; see ring_rule).
TILES, ONE_TILE, SPREAD, DEEP, ONE_WAVE, ONE_TILE_WIDE = LAYOUTS = (0, 1, 2, 3, 4, 5)
# ring_rule's stage tables by layout (ONE_TILE_WIDE's one-tile kernels are ONE_TILE's)
STAGE_TABLES = {ONE_TILE: ONE_TILE_STAGES, ONE_TILE_WIDE: ONE_TILE_STAGES, DEEP: DEEP_STAGES, ONE_WAVE: ONE_WAVE_STAGES}
WAVE_BLOCKS = 5
SMS = 132  # SMs of the H200
SPREAD_COLUMNS = SMS * TILE
SPREAD_K = 8192
SPREAD_WARPS = 8
SPREAD_SMEM = 96  # KB: 16 dense warps' rings of 2 stages (rows padded by 64 bytes), in dynamic shared memory
DEEP_COLUMNS = 2 * SMS * TILE
DEEP_ROWS = 8  # the largest row bucket whose blocks have a warp per K range


# Single products of 4/8-bit weights over a K from QUANTIZED_SHORT_K up to SHORT_K whose grids of one
# tile would exceed 5 blocks per SM take TILES: H200, kernel alone (bench/results/h200-ab-2026-11-30-session16.json,
# calls 12-13), against ONE_TILE, group 64 on 2048 -> 11008, 3072 -> 12288 and 3584 -> 18944: 4-bit
# 1.02-1.16x at 1-8 rows, 0.97-1.12x at 16-32; 8-bit 0.99-1.17x at 1-8, 1.10-1.45x at 16-32; group 128
# 4-bit 1.00-1.40x, 8-bit 1.00-1.01x at 1-16 and 1.18-1.23x at 32. Not dense weights (0.92-1.04x) nor
# the SwiGLU gate/up (0.99-1.04x for group 64, 0.82-1.12x for 8-bit group 128), nor K = 1536 (the
# SHORT_K measurements above), nor ONE_WAVE's grids (unmeasured).
QUANTIZED_SHORT_K = 2048


def column_layout(columns: int, k: int, quantized_single: bool = False) -> int:
    """The layout (TILES, ONE_TILE, SPREAD, DEEP, ONE_WAVE or ONE_TILE_WIDE) of a product of `columns`
    output columns over `k`; `quantized_single`: one weight of 4/8 bits, no SwiGLU (QUANTIZED_SHORT_K).
    MLX_METILE_CUDA_MMA_LAYOUT=0..5 forces one for every product (tuning runs: the rules' A/B
    through MLX)."""
    forced = mma_override("layout")
    if forced is not None:
        return forced
    if columns <= SPREAD_COLUMNS and k >= SPREAD_K:
        return SPREAD
    if columns <= DEEP_COLUMNS and k >= SHORT_K and (k >= SPREAD_K or columns <= SPREAD_COLUMNS):
        return DEEP
    blocks = -(-columns // TILE)
    if quantized_single and QUANTIZED_SHORT_K <= k < SHORT_K and blocks > WAVE_BLOCKS * SMS:
        return TILES
    if columns < NARROW_COLUMNS or k < SHORT_K:
        if 4 * SMS < blocks <= WAVE_BLOCKS * SMS:
            return ONE_WAVE
        return ONE_TILE_WIDE if 2 * SMS < blocks <= 4 * SMS else ONE_TILE
    return TILES


# Single products whose one-tile grids take 2-5 blocks per SM: two tiles a block (TILES) where
# measured faster. H200, kernel alone (bench/results/h200-ab-2026-11-30-session17.json, calls 7 and
# 10), TILES's time against the one-tile layout's, ONE_TILE_WIDE over 2048 <= K < 4096 (2048 / 3072 ->
# 8192): 4-bit group 64 1.07-1.11x at 1-8 rows, 1.26-1.34x at 16, 1.18-1.24x at 32; 8-bit group 64
# 1.13-1.16x at 1-8, 1.16-1.21x at 16, 1.34-1.38x at 32; 8-bit group 128 0.99-1.00x at 8-16 rows,
# 1.15-1.18x at 32 (so from 8 rows; 1-4 rows and other groups unmeasured); bf16 0.99-1.02x at 1-8 rows,
# 1.17-1.19x at 16, 1.11-1.13x at 32. ONE_WAVE (1536 -> 8960) 8-bit group 64 1.11x / 1.10x / 1.20x at 8
# / 16 / 32 rows, but 4-bit group 64 0.93-1.00x and 8-bit group 128 0.91-1.05x, which keep it (dense
# ONE_WAVE splits K otherwise). TILES and these one-tile layouts split K alike (the sums of one tile,
# tests/emu/test_cuda_on_cpu.py), so a row's bits do not depend on which row bucket computed it.
TILES_FROM_ROWS = 8  # the smallest row bucket of the rules measured from 8 rows
DENSE_TILES_FROM_ROWS = 16  # dense weights: 0.98-1.02x below


def bucket_layout(layout: int, k: int, rows_bucket: int, weight: WeightFormat) -> int:
    """The layout of one row bucket's kernel of a single product (one weight, no SwiGLU) of
    `weight`: column_layout's, or TILES where the measurements above say so. Not where
    MLX_METILE_CUDA_MMA_LAYOUT forces one."""
    if mma_override("layout") is not None:
        return layout
    bits, group = weight.bits, weight.group_size
    if layout == ONE_TILE_WIDE and QUANTIZED_SHORT_K <= k < SHORT_K:
        if bits and (group == 64 or (bits == 8 and group == 128 and rows_bucket >= TILES_FROM_ROWS)):
            return TILES
        if not bits and weight.dtype in ("bf16", "f16") and rows_bucket >= DENSE_TILES_FROM_ROWS:
            return TILES
    if layout == ONE_WAVE and bits == 8 and group == 64 and rows_bucket >= TILES_FROM_ROWS:
        return TILES
    return layout


def wave_blocks(spec: ProjectionSpec, layout: int, rows_bucket: int) -> int:
    """Blocks per SM a kernel asks for beyond its row bucket's setting: WAVE_BLOCKS for the
    single products of 4/8-bit weights (one weight: what was measured) in the ONE_WAVE layout
    at 1-8 rows, else 0 (the setting)."""
    w = spec.weights[0]
    if layout != ONE_WAVE or rows_bucket > 8 or not w.quantized or len(spec.weights) != 1:
        return 0
    return 0 if mma_override("minblocks") is not None else WAVE_BLOCKS


def staged_max_tiles(spec: ProjectionSpec, warps: int, layout: int = TILES, rows_bucket: int = 0) -> int:
    """The most 16-column tiles per block: 1 in every layout but TILES; on the staged
    ring, the most whose rings still fit 2 stages (ring_stages at the row bucket); 1 on the
    direct loads (4 when MLX_METILE_CUDA_MMA_TILES is set: the direct loads' tuning knob)."""
    if not stageable(spec):
        return 4 if mma_override("tiles") is not None else 1
    if layout != TILES:
        return 1
    tiles, ring = 4, ring_rule(spec, layout, rows_bucket)
    while tiles > 1 and ring_stages(spec, warps, tiles, rows_bucket, ring) < 2:
        tiles //= 2
    return tiles


# Single dense products in ONE_WAVE (Qwen2.5-1.5B's gate/up, 1536 -> 8960: 8 warps would take 3 stages
# of 64 each) split K over 2 warps: H200, kernel alone (bench/results/h200-ab-2026-11-30-session16.json,
# call 5), bf16 1.07x / 1.12x / 1.16x / 1.16x / 1.12x / 1.17x at 1 / 2 / 4 / 8 / 16 / 32 rows against 8
# warps (4 warps 0.87-0.97x). Not for its SwiGLU form (0.74-1.00x) nor for one-tile layouts of other
# short-K products (0.64-1.08x, call 6). Another K split: one setting for all the layout's row buckets.
ONE_WAVE_DENSE_WARPS = 2


def mma_warps(spec: ProjectionSpec, layout: int = TILES) -> int:
    """K ranges per block, one warp each unless block_warps says otherwise (a property of
    the spec and layout: part of every row's sum order):
    MLX_METILE_CUDA_MMA_WARPS, else 8 for dense weights on the staged ring
    where 8 rings of 2 stages fit shared memory, else lower_mma's 4. H200, kernel
    alone (bench/results/h200-ab-2026-11-29-session5.json): 8 warps beat 4 by 2-30%
    on bf16 4096->4096, 4096->14336, 14336->4096 and 8960->1536 at 1-16 rows, lost
    7-10% on 1536->8960 (K too short for 8 warps' rings, won at 32 rows); for 4-bit
    weights 8 warps measured slower on every shape tried. The SPREAD layout (see
    column_layout) doubles them where the staged rings of 2 stages still fit; DEEP
    gives 8-bit weights 8. Single 2-byte dense products in ONE_WAVE (a short K over 8449-10560
    columns) take ONE_WAVE_DENSE_WARPS (see there)."""
    value = mma_override("warps")
    if value is not None:
        return value
    dense_staged = not spec.weights[0].quantized and dense_mode() == "staged"
    two_byte = spec.weights[0].dtype in ("bf16", "f16")
    if dense_staged and two_byte and layout == ONE_WAVE and len(spec.weights) == 1 and stageable(spec):
        return ONE_WAVE_DENSE_WARPS
    warps = mma_setting("warps")
    if dense_staged and DENSE_WARPS * 2 * slot_bytes(spec) <= ring_budget(DENSE_WARPS):
        warps = DENSE_WARPS
    wider = 2 * warps if dense_staged else SPREAD_WARPS
    spread = layout == SPREAD or (layout == DEEP and spec.weights[0].bits == 8)
    if spread and stageable(spec) and wider * 2 * slot_bytes(spec) <= ring_budget(wider):
        return wider
    return warps


def block_warps(spec: ProjectionSpec, layout: int, rows_bucket: int, ranges: int) -> int:
    """Warps per block for `ranges` K ranges (mma_warps): one per range, except in the DEEP
    layout above DEEP_ROWS rows, where each of the usual warps takes two."""
    if layout == DEEP and rows_bucket > DEEP_ROWS and mma_override("warps") is None:
        usual = mma_warps(spec)
        if ranges == 2 * usual:
            return usual
    return ranges


def stageable(spec: ProjectionSpec) -> bool:
    """K a whole number of stages, a column's stage at most 512 bytes (one warp-wide
    copy) with its scales in one copy of at most 16 bytes; MLX_METILE_CUDA_MMA_STAGED=0
    turns the ring off (the direct loads of lower_mma), as does `wide`."""
    w = spec.weights[0]
    if os.environ.get("MLX_METILE_CUDA_MMA_STAGED", "1") == "0" or wide(spec):
        return False
    if not w.quantized and dense_mode() != "staged":
        return False  # dense weights: the direct loads with MLX_METILE_CUDA_MMA_DENSE=1
    groups = stage_groups(spec)
    return (
        spec.k_divisor % (groups * chunk_k(spec)) == 0
        and groups * chunk_bytes(spec) <= 512
        and groups * scale_bytes_of(spec) <= 16
    )


def staged(spec: ProjectionSpec, schedule) -> bool:
    """A stageable spec whose block's rings (warps x tiles) fit two or more stages."""
    ring = (schedule.ring_kb, schedule.ring_stages)
    return stageable(spec) and ring_stages(spec, schedule.SG, schedule.BN // TILE, schedule.BM, ring) >= 2


def gate_up_16(spec: ProjectionSpec, rows_bucket: int) -> bool:
    """The 16-row SwiGLU gate/up of 4-bit group-64 weights, unless MLX_METILE_CUDA_MMA_STRIDED
    or _MINBLOCKS is set: strided copies and 3 blocks per SM (168 registers, no spill, against
    178 and 2 blocks). H200, kernel alone (h200-ab-2026-11-29-session10.json, calls 6-7):
    1.15x on 4096 -> 2 x 14336, 1.18x on 1536 -> 2 x 8960; the same for 8-bit or group-128
    weights, whose kernels already fit 3 blocks, 0.80-0.99x."""
    w = spec.weights[0]
    untuned = mma_override("strided") is None and mma_override("minblocks") is None
    return (
        untuned
        and rows_bucket == 16
        and spec.epilogue == "swiglu"
        and w.quantized
        and w.bits == 4
        and chunk_k(spec) == 64
    )


def ring_declaration(ring_bytes: int) -> str:
    """`metile_ring`, the block's shared memory for its rings: static up to what a kernel may
    declare (48 KB), else dynamic, sized at launch (the kernel's dynamic_shared)."""
    if ring_bytes > SMEM_LIMIT:
        return "extern __shared__ __align__(16) unsigned char metile_ring[];"
    return f"__shared__ __align__(16) unsigned char metile_ring[{ring_bytes}];"


class StagedMMALowering(MMALowering):
    def __init__(self, program, schedule, divisors, vector_buffers, spec: ProjectionSpec):
        super().__init__(program, schedule, divisors, vector_buffers, spec)
        w = spec.weights[0]
        self.groups = stage_groups(spec)
        self.align = self.batch = self.groups  # whole stages per warp; a stage is one batch
        # a column's 16-bit scales of a stage: one word
        self.scale_vector = w.quantized and w.dtype != "f32"
        self.group_bytes = chunk_bytes(spec)  # one chunk of a column: a group, or 32 dense k
        self.row_bytes = self.groups * self.group_bytes
        self.stride = self.row_bytes + row_pad(spec)
        # swizzled rows: piece q of row r at q ^ ((r & mask) * mult); r & mask is the lane's
        # g & mask in every load (rows are 8-aligned bands plus g)
        self.swizzle_mask, self.swizzle_mult = ring_swizzle(spec)
        self.scale_bytes = self.groups * scale_bytes_of(spec)
        self.nrows = ring_rows(spec, self.tiles)
        self.scales_at = self.nrows * self.stride
        self.biases_at = self.scales_at + self.nrows * self.scale_bytes
        self.slot = slot_bytes(spec, self.tiles)
        self.stages = ring_stages(spec, schedule.SG, self.tiles, schedule.BM, (schedule.ring_kb, schedule.ring_stages))
        if self.stages < 2 and not schedule.xshare:  # (shared x sizes its own rings)
            raise LowerError(f"{program.name}: the staged rings of {self.tiles} tiles do not fit 2 stages")
        self.pieces = self.nrows * self.row_bytes // 16 // 32  # 16-byte copies per lane per stage
        self.scale_passes = -(-self.nrows // 32)  # warp-wide passes copying a stage's scales
        self.interleave = interleaved()
        if self.per_warp not in (1, 2) or (self.per_warp > 1 and self.interleave):
            raise LowerError(f"{program.name}: {self.per_warp} K ranges per warp (1 or 2, not interleaved)")

    # -- the K split ---------------------------------------------------------------
    def k_split(self) -> list[str]:
        """Interleaved (see interleaved()): warp w takes stages w, w + W, w + 2W, ...
        of the K range (`nst` of them); else lower_mma's contiguous ranges."""
        if not self.interleave:
            return super().k_split()
        sg = self.s.SG
        return [
            f"const int k_stages = K / {self.ck * self.groups};",
            f"const int nst = warp < k_stages ? (k_stages - 1 - warp) / {sg} + 1 : 0;",
        ]

    def stage_chunk(self, stage: str) -> str:
        """The first chunk of this warp's stage `stage` (a C expression)."""
        if self.interleave:
            return f"((({stage}) * {self.s.SG} + warp) * {self.groups})"
        return f"(c_begin + ({stage}) * {self.groups})"

    # -- shared -> lanes ---------------------------------------------------------
    def weight_loads(self, b: int, ch: str, live: str | None, nacc: int) -> list[Load]:
        """Chunk b of the stage in `slot`: the lane's words of columns g and g+8
        (at the same k as its x quarter), and the stage's scales and biases."""
        words = self.words
        out = []
        for j in range(nacc):
            for tile in range(self.tiles):
                for h in "ab":
                    row = f"{TILE * (j * self.tiles + tile) + (8 if h == 'b' else 0)} + g"
                    if not self.spec.weights[0].quantized:  # 8 consecutive k: the lane's quarter of 32
                        at = f"slot + ({row}) * {self.stride} + {self.piece(f'{b * self.group_bytes} + t * 16')}"
                        out.append(Load("uint4", f"w{j}_{tile}{h}_{b}", "true", at))
                        continue
                    for v0 in range(0, words, self.word_width):
                        within = f"t * {4 * words} + {4 * v0}"
                        if self.sector:
                            bits = self.spec.weights[0].bits
                            within = f"{4 * self.sector_word(v0, bits)} + t * {bits}"
                        at = f"slot + ({row}) * {self.stride} + {self.piece(f'{b * self.group_bytes} + {within}')}"
                        out.append(Load(self.word_vector, f"w{j}_{tile}{h}v{v0}_{b}", "true", at))
                    if self.scale_vector and b:
                        continue
                    typ = {2: "unsigned", 4: "uint2", 8: "uint4"}[self.groups] if self.scale_vector else "float"
                    extra = "" if self.scale_vector else f" + {4 * b}"
                    for letter, base in (("s", self.scales_at), ("z", self.biases_at)):
                        at = f"slot + {base} + ({row}) * {self.scale_bytes}{extra}"
                        out.append(Load(typ, f"{letter}{j}_{tile}{h}_{b}", "true", at))
        return out

    def piece(self, offset: str) -> str:
        """Where a lane's bytes at `offset` (a C expression) within its ring row lie: there,
        or in the swizzled piece (see swizzled)."""
        if not self.swizzle_mask:
            return offset
        return f"(((({offset}) >> 4) ^ {self.swizzled_piece('g')}) << 4 | (({offset}) & 15))"

    def swizzled_piece(self, row: str) -> str:
        """What a row's pieces are XOR-ed with (row: a C expression)."""
        masked = f"({row} & {self.swizzle_mask})" if row.isidentifier() else f"(({row}) & {self.swizzle_mask})"
        return f"({masked} * {self.swizzle_mult})" if self.swizzle_mult > 1 else masked

    # -- global -> shared --------------------------------------------------------
    def source(self, j: int, col: str, addr) -> list[str]:
        """C statements setting `src` and `ok` for column `col` of accumulator j:
        the member weight holding it, and whether any does."""
        members = self.members(j)
        lines = ["const char* src = nullptr;", "bool ok = false;"]
        base = "0"
        for n, i in enumerate(members):
            local = f"({col} - ({base}))"
            cond = f"{local} >= 0 && {local} < N{i}" if len(members) > 1 else f"{col} < N{i}"
            lines.append(f"{'else ' if n else ''}if ({cond}) {{ src = {addr(i, local)}; ok = true; }}")
            base = f"{base} + N{i}"
        lines.append(f"if (!ok) src = {addr(members[0], '0')};  // a valid address; nothing is read")
        return lines

    def strided(self, nacc: int) -> bool:
        """Each accumulator's copy pieces from one base pointer and the row stride (a column's
        bytes), their destinations constant offsets from one - instead of a pointer, flag and
        offset per piece held in registers through the loop (pieces past the last column
        copy 0 bytes from an address past it). Where every accumulator reads one weight, on
        padded rings: at 32 rows (lower_mma.DEFAULTS), for gate_up_16 (below), or as
        MLX_METILE_CUDA_MMA_STRIDED says."""
        one_each = all(len(self.members(j)) == 1 for j in range(nacc))
        wanted = mma_setting("strided", self.s.BM) == 1 or gate_up_16(self.spec, self.s.BM)
        # swizzled: only where a lane's rows (rows_per_copy apart) share their swizzle
        rows_per_copy = 32 // (self.row_bytes // 16)
        same_swizzle = not self.swizzle_mask or rows_per_copy % (self.swizzle_mask + 1) == 0
        return wanted and one_each and same_swizzle

    def copy_piece(self, row: str, per_row: int) -> str:
        """The piece of ring row `row` a lane's 16-byte copy fills: its own, or swizzled."""
        piece = f"(lane % {per_row})"
        return f"({piece} ^ {self.swizzled_piece(row)})" if self.swizzle_mask else piece

    def copy_setup(self, nacc: int) -> list[str]:
        """Per lane, before the loop: its copy pieces' sources (at stage 0 of K)
        and destinations within a slot."""
        w = self.spec.weights[0]
        per_row = self.row_bytes // 16  # 16-byte pieces of a ring row
        rows_per_copy = 32 // per_row
        row_bytes = f"(size_t)K * {w.bits} / 8" if w.quantized else "(size_t)K * 2"
        lines: list[str] = []  # `lane` comes from the prologue
        strided = self.strided(nacc)
        if strided:
            lines += [
                f"const size_t cw_row = {row_bytes};",
                f"const int cwd = (lane / {per_row}) * {self.stride} + {self.copy_piece(f'lane / {per_row}', per_row)} * 16;",
            ]
            for j in range(nacc):
                m, col = self.members(j)[0], f"{self.col_base()} + lane / {per_row}"
                lines += [  # columns left from the lane's first; the base may lie past the end
                    f"const int cwn{j} = N{m} - ({col});",
                    f"const char* const cwb{j} = reinterpret_cast<const char*>(w{m}) + (size_t)({col}) * cw_row + (lane % {per_row}) * 16;",
                ]
        for i in range(0 if strided else self.pieces):  # else a pointer, flag and offset per piece
            first = i * rows_per_copy  # the piece's rows lie in one 16-row band: (accumulator, tile)
            j, tile = divmod(first // TILE, self.tiles)
            col = f"({self.col_base()} + {TILE * tile + first % TILE} + lane / {per_row})"

            def weight(m, local):
                return f"reinterpret_cast<const char*>(w{m}) + (size_t){local} * {row_bytes} + (lane % {per_row}) * 16"

            lines.append("{")
            lines += ["  " + ln for ln in self.source(j, col, weight)]
            lines.append(f"  cw{i} = src; cwok{i} = ok;")
            lines.append("}")
            piece = self.copy_piece(f"{first} + lane / {per_row}", per_row)
            lines.append(f"const int cwd{i} = ({first} + lane / {per_row}) * {self.stride} + {piece} * 16;")
        declared = [f"const char* cw{i}; bool cwok{i};" for i in range(0 if strided else self.pieces)]
        if not w.quantized:
            return declared + lines
        # scales and biases: in pass p, lane r < rows - 32 p copies ring row 32 p + r's
        size = scale_bytes_of(self.spec)

        def param(name):
            def at(m, local):
                return f"reinterpret_cast<const char*>({name}{m}) + (size_t){local} * (K / {w.group_size}) * {size}"

            return at

        for pas in range(self.scale_passes):
            lines.append(f"const char* cs{pas} = nullptr; const char* cz{pas} = nullptr; bool csok{pas} = false;")
            for band in range(2 * pas, min(2 * pas + 2, self.nrows // TILE)):  # 16-row bands of this pass
                j, tile = divmod(band, self.tiles)
                lo = TILE * band - 32 * pas
                col = f"({self.col_base()} + {TILE * tile} + lane - {lo})"
                lines.append(f"if (lane >= {lo} && lane < {lo + TILE}) {{")
                for name, var in (("scales", "cs"), ("biases", "cz")):
                    lines.append("  {")
                    lines += ["    " + ln for ln in self.source(j, col, param(name))]
                    lines.append(f"    {var}{pas} = src; csok{pas} = ok;")
                    lines.append("  }")
                lines.append("}")
        return declared + lines

    def copy_stage(self, stage: str, slot: str) -> list[str]:
        """Statements issuing the copies of stage `stage` into ring slot `slot`."""
        w = self.spec.weights[0]
        chunk0 = self.stage_chunk(stage)
        lines = [f"unsigned char* const dst = ring + ({slot}) * {self.slot};"]
        lines.append(f"const size_t wo = (size_t){chunk0} * {self.group_bytes};")
        nacc = self.nrows // (TILE * self.tiles)
        strided, rows_per_copy = self.strided(nacc), 32 // (self.row_bytes // 16)
        for i in range(self.pieces):
            if not strided:
                lines.append(f"metile_cp16(dst + cwd{i}, cw{i} + wo, cwok{i});")
                continue
            j, p = divmod(i, self.pieces // nacc)  # accumulator j's piece p
            k = p * rows_per_copy  # columns past the lane's first (past the last: copies 0 bytes)
            src = f"cwb{j} + (size_t){k} * cw_row + wo"
            lines.append(f"metile_cp16(dst + cwd + {i * rows_per_copy * self.stride}, {src}, {k} < cwn{j});")
        if not w.quantized:
            return lines
        lines.append(f"const size_t so = (size_t){chunk0} * {scale_bytes_of(self.spec)};")
        for pas in range(self.scale_passes):
            lines.append(f"if (lane < {min(32, self.nrows - 32 * pas)}) {{")
            for var, base in (("cs", self.scales_at), ("cz", self.biases_at)):
                dst = f"dst + {base} + ({32 * pas} + lane) * {self.scale_bytes}"
                if self.scale_bytes == 16:
                    lines.append(f"  metile_cp16({dst}, {var}{pas} + so, csok{pas});")
                else:
                    lines.append(f"  metile_cp_small<{self.scale_bytes}>({dst}, {var}{pas} + so, csok{pas});")
            lines.append("}")
        return lines

    # -- the K loop ----------------------------------------------------------------
    def k_loop(self, nacc: int, mma: str) -> list[str]:
        """Prologue: stages 0..S-2 in flight. Each iteration: x loads of stage st,
        wait for stage st, issue stage st+S-1 into the slot freed by st-1, then
        the shared loads and the math of stage st; a warp of two K ranges moves its
        sums to `early` after the first range's last stage."""
        self.use_helper("cuda_cp_async")
        s, stages, groups = self.s, self.stages, self.groups
        # after the loop the ring holds the K ranges' partial sums, then a fused RMSNorm's sums of squares
        ring_bytes = max(s.SG * stages * self.slot, self.red_bytes(nacc) + self.sq_bytes())
        # two K ranges per warp: the first range's partial sums wait after the ring
        early_at = ring_bytes
        ring_bytes = self.ring_bytes = ring_bytes + (self.red_bytes(nacc) // 2 if self.per_warp > 1 else 0)
        lines = [
            ring_declaration(ring_bytes),
            f"unsigned char* const ring = metile_ring + warp * {stages * self.slot};",
        ]
        if self.per_warp > 1:
            dims = self.partial_dims(nacc)
            lines.append(f"float (*const early){dims} = reinterpret_cast<float (*){dims}>(metile_ring + {early_at});")
        if not self.interleave:  # else k_split gave nst
            lines.append(f"const int nst = max(c_end - c_begin, 0) / {groups};")
        lines += self.copy_setup(nacc)
        for st in range(stages - 1):
            lines.append(f"if ({st} < nst) {{")
            lines += ["  " + ln for ln in self.copy_stage(str(st), str(st))]
            lines.append("}")
            lines.append("metile_cp_commit();")
        late = mma_override("late") or 0
        # late 2: half of the stage's x first, the rest after the first chunks' math; 3: x one chunk ahead
        early_x = groups // 2 if late == 2 else 1 if late == 3 else groups

        def x_loads(b: int) -> list[str]:
            return [f"const {ld.typ} {ld.name} = {ld.value()};" for ld in self.x_loads(b, f"ch0 + {b}", None)]

        def weight_loads(b: int) -> list[str]:
            loads = self.weight_loads(b, f"ch0 + {b}", None, nacc)
            return [f"const {ld.typ} {ld.name} = *reinterpret_cast<const {ld.typ}*>({ld.addr});" for ld in loads]

        body = []
        for b in range(early_x):
            body += x_loads(b)
        body.append(f"metile_cp_wait<{stages - 2}>();")
        body.append("__syncwarp();")
        body.append(f"if (st + {stages - 1} < nst) {{")
        body += ["  " + ln for ln in self.copy_stage(f"st + {stages - 1}", "wr")]
        body.append("}")
        body.append("metile_cp_commit();")
        body.append(f"const unsigned char* const slot = ring + rd * {self.slot};")
        if not late:  # every load of the stage first (ptxas orders them within its register budget)
            for b in range(groups):
                body += weight_loads(b)
        for b in range(groups):
            if late:  # MLX_METILE_CUDA_MMA_LATE: each chunk's shared loads just before its math
                body += weight_loads(b)
            body += self.chunk_math(b, nacc, mma)
            if b + early_x < groups:  # late 2 / 3: chunk b + early_x's x after chunk b's math
                body += x_loads(b + early_x)
        if self.per_warp > 1:  # the end of the warp's first K range
            body.append(f"if (st + 1 == per_warp / {groups}) {{")
            body += ["  " + ln for ln in self.move_partials("early[warp]", nacc)]
            body.append("}")
        body.append(f"rd = rd + 1 == {stages} ? 0 : rd + 1;")
        body.append(f"wr = wr + 1 == {stages} ? 0 : wr + 1;")
        return (
            lines
            + [f"int rd = 0, wr = {stages - 1};", "#pragma unroll 1", "for (int st = 0; st < nst; ++st) {"]
            + [f"  const int ch0 = {self.stage_chunk('st')};"]
            + ["  " + ln for ln in body]
            + ["}", "metile_cp_wait<0>();", "__syncthreads();  // the ring becomes the reduction buffer"]
        )

    def lower(self):
        kernel = super().lower()
        blocks = 3 if gate_up_16(self.spec, self.s.BM) else self.s.blocks or mma_setting("minblocks", self.s.BM)
        usual = mma_warps(self.spec)
        if self.s.SG > usual and blocks:  # more warps (SPREAD, DEEP): as many warps per SM, not blocks
            blocks = max(1, blocks * usual // self.s.SG)
        return self.bound(kernel, blocks)

    def bound(self, kernel: KernelDef, blocks: int) -> KernelDef:
        """`blocks` per SM asked for (capping registers; 0: none), but no more than the rings let
        share one; rings over 48 KB sized at launch."""
        fit = max(1, shared_memory()[1] // (self.ring_bytes + 1024))  # the driver keeps 1 KB a block
        kernel.min_groups = min(blocks, fit)
        kernel.dynamic_shared = self.ring_bytes if self.ring_bytes > SMEM_LIMIT else 0
        return kernel

    def red_bytes(self, nacc: int) -> int:
        return self.splits * nacc * self.tiles * self.rt * 4 * 32 * 4

    def sq_declaration(self) -> str:
        """The sums of squares in the ring, after the partial sums (k_loop sized it for both)."""
        at, bm = self.red_bytes(self.nacc), self.s.BM
        return f"float (*const metile_sq)[{bm}] = reinterpret_cast<float (*)[{bm}]>(metile_ring + {at});"

    def partial_dims(self, nacc: int) -> str:
        return f"[{nacc}][{self.tiles}][{self.rt}][4][32]"

    def move_partials(self, dst: str, nacc: int) -> list[str]:
        """The lane's partial sums into `dst` (a [acc][tile][row tile][element][lane] array), then zeroed."""
        return [f"{dst}{at} = {run}; {run} = 0.0f;" for run, at in self.partials(nacc)]

    def store_partials(self, nacc: int) -> list[str]:
        """Two K ranges per warp: ranges 2w and 2w + 1 into `red` - the first from `early`
        where the warp's range reached its end, else the running sums and then zeros."""
        if self.per_warp == 1:
            return super().store_partials(nacc)
        out = [f"const bool crossed = nst >= per_warp / {self.groups};"]
        for run, at in self.partials(nacc):
            out.append(f"red[2 * warp]{at} = crossed ? early[warp]{at} : {run};")
            out.append(f"red[2 * warp + 1]{at} = crossed ? {run} : 0.0f;")
        return out

    def reduction_buffer(self, body: list, nacc: int) -> None:
        """The ring, reused: every copy has landed and every warp left the loop."""
        dims = self.partial_dims(nacc)
        body.append(Raw([f"float (*const red){dims} = reinterpret_cast<float (*){dims}>(metile_ring);"]))
