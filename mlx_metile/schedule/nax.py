"""The NAX schedules' rules: `nax_direct` and `nax_staged` on a Metal target with neural
accelerators, taken only when asked (MLX_METILE_METAL_SCHEDULE or a tuned decision): neither has
run on an Apple GPU, so neither is measured (docs/NAX.md, docs/SCHEDULES.md).

Sizes shared with the lowerings (lower/nax_direct.py, lower/nax_staged.py) are here, so that the
rules and the lowerings count threadgroup memory alike.
"""

from __future__ import annotations

import math

from ..spec import ProjectionSpec
from ..targets import MetalTarget, Target
from .buckets import MAX_ROWS_PER_PROGRAM
from .schedule import NAX_COLUMN_GROUPS, NAX_KINDS, Schedule
from .simt import k_per_lane, values_per_16_bytes, whole_groups

FRAGMENT_M, FRAGMENT_N, FRAGMENT_K = 16, 32, 16  # MLX's matmul2d descriptor (16, 32, 16)
OPERAND_DTYPES = ("bf16", "f16")  # what the lowering feeds matmul2d (x's dtype)
SIMD_GROUPS = 4  # per threadgroup: 128 columns (the staged rule halves it to fit its memory)
GEMM_ROWS = 64  # rows per threadgroup above 32 rows (4 row fragments)
ROW_PAD = 16  # bytes after each staged weight row, as MLX's quantized NAX GEMM pads them
OPERAND_BYTES = 2  # bf16 / f16


def unsupported(spec: ProjectionSpec) -> str | None:
    """Why the NAX lowerings cannot compute `spec`, or None where they can."""
    if spec.act_dtype not in OPERAND_DTYPES:
        return (
            f"{spec.act_dtype} activations are declined: matmul2d's operands here are bf16 or f16 "
            "(convert x to bf16 / f16, or use the simdgroup schedule)"
        )
    if spec.norm_eps is not None:
        return "a fused RMSNorm is not taken (as on the simdgroup schedule: normalise x first)"
    return None


def nax_rows(bucket: int) -> int:
    """Rows per threadgroup: one or two row fragments up to 32 rows (all of a call's rows, so
    each weight is read once per call), GEMM_ROWS above."""
    if bucket <= FRAGMENT_M:
        return FRAGMENT_M
    return 2 * FRAGMENT_M if bucket <= MAX_ROWS_PER_PROGRAM else GEMM_ROWS


def word_unit(bits: int) -> int:
    """The fewest consecutive k of one column filling whole 32-bit words (at least the 4 k a
    lane's fragment slots take): dense 4; 4-bit 8, 8-bit 4, 2-bit 16, 3/5-bit 32, 6-bit 16."""
    if not bits:
        return 4
    return max(4, 32 // math.gcd(bits, 32))


def staged_bytes(spec: ProjectionSpec, SG: int, NC: int, U: int, row_pad: int) -> int:
    """Threadgroup memory of the staged weights: per accumulator, BN rows of one stage's 4 U k
    (the four column groups' U k each) in the operand dtype, each row padded by row_pad bytes."""
    return spec.accumulators * SG * NC * (NAX_COLUMN_GROUPS * U * OPERAND_BYTES + row_pad)


def has_nax(target: Target) -> bool:
    return isinstance(target, MetalTarget) and target.nax


def require_nax(kind: str, target: Target, spec: ProjectionSpec, why: str) -> None:
    """ValueError unless `target` has NAX and the lowerings take `spec`."""
    if not has_nax(target):
        raise ValueError(
            f"{why}: the target {target!r} has no neural accelerators (NAX needs an Apple GPU of "
            "generation >= 17 with macOS >= 26.2, or the emulator's target mlx_metile.targets.EMULATOR)"
        )
    reason = unsupported(spec)
    if reason is not None:
        raise ValueError(f"{why}: {spec.name()} cannot take {kind}: {reason}")


def nax_schedule(spec: ProjectionSpec, bucket: int, kind: str, target: Target) -> Schedule:
    """The `kind` schedule of `spec` at row bucket `bucket` on a NAX target."""
    if kind not in NAX_KINDS:
        raise ValueError(f"NAX schedule kind: expected one of {NAX_KINDS}, got {kind!r}")
    require_nax(kind, target, spec, f"MLX_METILE_METAL_SCHEDULE={kind}")
    vk = k_per_lane(spec)  # whole groups (one scale per column group) and whole 16 bytes
    if kind == "nax_direct":
        # a lane's U k of a column at a time: 16 bytes of the widest-packed weight
        u = whole_groups(spec, vk, min(vk, max(values_per_16_bytes(w.bits, w.dtype) for w in spec.weights)))
        sg, pad = SIMD_GROUPS, 0
    else:
        # a stage holds each column group's fewest whole words (and whole groups, where smaller
        # than VK), keeping threadgroup memory small
        u = whole_groups(spec, vk, max(word_unit(w.bits) for w in spec.weights))
        sg, pad = SIMD_GROUPS, ROW_PAD
        while sg > 1 and staged_bytes(spec, sg, FRAGMENT_N, u, pad) > target.threadgroup_memory:
            sg //= 2
    return Schedule(
        kind,
        BM=nax_rows(bucket),
        NC=FRAGMENT_N,
        SG=sg,
        VK=vk,
        U=u,
        C=4,  # (unused by the NAX lowerings: the consecutive k of a lane's slot row)
        row_pad=pad,
        smem_block=target.threadgroup_memory,
    )
