"""The SIMT schedules: `simd_splitk` (1..32 rows, every target) and `tiled` (more than 32 rows).

VK, the k a lane owns per step, is fixed per weight format and the same on every target (it is
part of a row's sum order); the columns per SIMD group follow a register budget.
"""

from __future__ import annotations

import math

from ..settings import Settings
from ..spec import ProjectionSpec
from .buckets import MAX_ROWS_PER_PROGRAM, TILED_BUCKET, row_bucket
from .schedule import Schedule
from .tables import cuda_tables

# f32 values one lane keeps live in the inner loop (accumulators and weights); a GPU thread
# has about 128 32-bit registers before it spills.
REGISTER_BUDGET = 96
MAX_COLUMNS = 8  # columns per SIMD group: more amortise the x loads over more weights
METAL_SIMD_GROUPS = 2


def values_per_16_bytes(bits: int, dtype: str) -> int:
    """Values in 16 bytes of a weight (or x); for 3, 5 and 6-bit values, which straddle words,
    the fewest that fill whole words instead (32, 32, 16: 12, 20 and 12 bytes), so that a lane's
    unrolled values start at a word and each word is read once."""
    if bits:
        return 128 // bits if 32 % bits == 0 else 32 // math.gcd(bits, 32)
    return 4 if dtype == "f32" else 8


def k_per_lane(spec: ProjectionSpec) -> int:
    """Consecutive k per lane: a whole quantization group for quantized weights (so one lane
    loads each scale and bias), and at least 16 bytes of every weight (one vector load). One
    value for all weights of a fused call, so they share the x loads."""
    vk = 1
    for w in spec.weights:
        vk = max(vk, values_per_16_bytes(w.bits, w.dtype), w.group_size if w.bits else 1)
    return vk


def whole_groups(spec: ProjectionSpec, vk: int, u: int) -> int:
    """`u` raised to a multiple of every quantization group smaller than VK (groups, U and VK are
    powers of two, so the result still divides VK). A group of VK k is one load per K step
    whatever U is; a smaller one is exact in the lowering's index `(vw U + u) / g` only where U
    k are whole groups (`vw U / g + u / g`, one load per group): else the index is rendered per k
    and the group's scale and bias are reloaded for every k (an mxfp8 group 32 fused with an
    8-bit group 64, VK 64, U 16: the scales read 32x their size). U never changes a row's sum
    order, which is k ascending within a lane's VK."""
    for w in spec.weights:
        if w.quantized and w.group_size < vk:
            u = math.lcm(u, w.group_size)
    return u


def cuda_tuning(rows_bucket: int, cfg: Settings) -> tuple[int, int, int]:
    """(warps per block, register budget, max columns per warp) of the CUDA SIMT kernels: the
    tuned table's by row bucket, overridden by MLX_METILE_CUDA_TUNE."""
    t = cuda_tables()
    values = dict(t.simt_small if rows_bucket <= t.simt_small_rows else t.simt_large)
    values.update(cfg.cuda_tune)
    return values["sg"], values["budget"], values["nc"]


def simt_schedule(spec: ProjectionSpec, rows_bucket: int, language: str, cfg: Settings) -> Schedule:
    vk = k_per_lane(spec)
    if rows_bucket > MAX_ROWS_PER_PROGRAM:
        # 256 threads as 16 x 16, each 4 rows x 2 columns of a 64 x 32 tile
        return Schedule("tiled", BM=TILED_BUCKET, NC=4, SG=8, VK=vk, U=1, C=1, TM=4, TN=2, S=min(vk, 32))
    bm = row_bucket(rows_bucket)
    # unroll one 16-byte vector of the widest-packed weight at a time, and whole groups where a
    # group is smaller than VK (one load of its scale and bias per group) ...
    u = whole_groups(spec, vk, min(vk, max(values_per_16_bytes(w.bits, w.dtype) for w in spec.weights)))
    # ... in chunks of one 16-byte vector of x
    c = min(u, values_per_16_bytes(0, spec.act_dtype))
    sg, budget, max_nc = METAL_SIMD_GROUPS, REGISTER_BUDGET, MAX_COLUMNS
    if language == "cuda":
        sg, budget, max_nc = cuda_tuning(bm, cfg)
    # registers per lane within the budget: accumulators BM*NC*acc and live weights C*NC*acc
    # (x's C registers are left out of the count)
    nc = max(1, min(max_nc, budget // ((bm + c) * spec.accumulators)))
    return Schedule("simd_splitk", BM=bm, NC=nc, SG=sg, VK=vk, U=u, C=c)
