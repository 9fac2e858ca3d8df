"""Affine 2, 3, 5 and 6-bit weights through the staged ring (lower/mma_staged.py) on the CPU:
within the float64 tolerance of the exact dequantisation (itself checked against mx.dequantize),
rows invariant bit for bit, and every output the bits of the direct-load kernel
(MLX_METILE_CUDA_MMA_STAGED=0). The ring copies each column's packed bit stream as the direct
loads read it (a group of g values of b bits: g * b / 8 bytes; 3, 5 and 6 bits in runs of
schedule.geometry.copy_run copies, 3 and 5 bits at group 32 in copies of 8 bytes), the lanes extract their values (straddling words included)
with the direct loads' code, and stages of schedule.cuda_mma.MICRO_GROUPS chunks keep the direct
loads' K ranges, so every sum runs in the same order. The ring takes these widths unless
MLX_METILE_CUDA_MMA_STAGED_LOWBIT=0 (set to 1 for every test here)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from mlx_metile.schedule.cuda_layouts import ONE_TILE, TILES
from mlx_metile.spec import ProjectionSpec, WeightFormat

from .cases import (
    ULP,
    Case,
    direct,
    kernel,
    ring_rows_match_direct,
    ring_sums_in_direct_order,
    rules,
    same,
    set_knobs,
    shared_x_matches_direct,
)


@pytest.fixture(autouse=True)
def lowbit_ring(env):
    """The ring for these widths (the default; MLX_METILE_CUDA_MMA_STAGED_LOWBIT=0 turns it off), set
    explicitly so that the tests hold whatever the default."""
    env.set("MLX_METILE_CUDA_MMA_STAGED_LOWBIT", "1")


def affine(bits_: int, group: int, dtype: str = "bf16", bias: bool = False) -> WeightFormat:
    return WeightFormat(dtype, bits_, group, bias, dtype)


STAGED = [  # (spec, K, N)
    (ProjectionSpec("bf16", (affine(2, 64),), k_multiple=256), 512, 37),  # odd N
    (ProjectionSpec("f16", (affine(2, 32, "f16"),), k_multiple=128), 384, 24),  # 3 stages over 4 warps
    (ProjectionSpec("bf16", (affine(3, 64),), k_multiple=256), 1280, 41),  # 5 stages: uneven K ranges
    (ProjectionSpec("f16", (affine(3, 128, "f16", bias=True),), k_multiple=512), 1536, 24),  # bias
    (ProjectionSpec("bf16", (affine(5, 64),), k_multiple=256), 768, 37),
    (ProjectionSpec("bf16", (affine(5, 128, bias=True),), k_multiple=512), 1024, 24),
    (ProjectionSpec("f16", (affine(6, 64, "f16"),), k_multiple=256), 1280, 24),
    (ProjectionSpec("bf16", (affine(6, 32),), k_multiple=128), 640, 41),
    (ProjectionSpec("bf16", (affine(3, 64),) * 2, "swiglu", k_multiple=256), 512, 24),
    (ProjectionSpec("bf16", (affine(5, 64),) * 3, k_multiple=256), 512, (40, 16, 24)),  # q/k/v
    (ProjectionSpec("f16", (affine(6, 32, "f16"),) * 2, "swiglu", k_multiple=128), 768, 24),
    (ProjectionSpec("bf16", (affine(2, 128),) * 2, "swiglu", k_multiple=512), 1024, 24),
    (ProjectionSpec("bf16", (affine(2, 128),) * 3, k_multiple=512), 1024, (40, 16, 24)),
    (ProjectionSpec("bf16", (affine(3, 32),), k_multiple=128), 640, 37),  # 8-byte copies; lanes past their bits
    (ProjectionSpec("f16", (affine(5, 32, "f16", bias=True),) * 2, "swiglu", k_multiple=128), 384, 24),
]


def reference_is_mlx(case: Case) -> None:
    """The float64 weights the tolerance is taken around are MLX's dequantisation (which rounds s * q
    and s * q + b to the scales' dtype: within two roundings of the largest s * q and b; a value
    unpacked from the wrong bits would be off by a multiple of s)."""
    for i, f in enumerate(case.spec.weights):
        view = {"bf16": np.uint16, "f16": np.uint16}[f.dtype]
        dt = {"bf16": mx.bfloat16, "f16": mx.float16}[f.dtype]
        s = mx.array(case.buffers[f"scales{i}"].view(view)).view(dt)
        b = mx.array(case.buffers[f"biases{i}"].view(view)).view(dt)
        w = mx.array(case.buffers[f"w{i}"])
        got = np.array(mx.dequantize(w, s, b, group_size=f.group_size, bits=f.bits).astype(mx.float32), np.float64)
        s64, b64 = (np.abs(np.array(v.astype(mx.float32), np.float64)).max() for v in (s, b))
        tol = 2 * ULP[f.dtype] * (s64 * (2**f.bits - 1) + b64)
        assert (np.abs(got - case.w[i]) <= tol).all(), f"weight {i}: not MLX's dequantisation"


@pytest.mark.parametrize("spec,K,N", STAGED, ids=[c[0].name() for c in STAGED])
def test_staged_affine_widths_match_float64_the_direct_loads_and_are_row_invariant(env, spec, K, N):
    """At 1, 4, 16 and 32 rows (each row bucket's kernel; 32 rows also in the several-tile
    layout): within tolerance, the bits of the direct-load kernel, and the first, middle and last
    rows the bits of that row computed alone (the 1-row kernel)."""
    assert rules(spec).stageable
    case = Case(spec, K, N, rows=32)
    reference_is_mlx(case)
    ring_rows_match_direct(env, case, 8)  # a column's 4 scales of a stage: one copy


@pytest.mark.parametrize("bits_,group", [(2, 64), (3, 64), (5, 64), (6, 32), (3, 32)])
def test_staged_affine_width_sums_run_in_the_direct_loads_order(env, bits_, group):
    """The ring's K ranges are the direct loads' (cases.ring_sums_in_direct_order; at group 64 GROUPS=8
    makes 40 chunks ranges of 16, not 12)."""
    ring_sums_in_direct_order(env, ProjectionSpec("bf16", (affine(bits_, group),), k_multiple=512), 2560)


@pytest.mark.parametrize("bits_", [3, 6])
def test_shared_x_over_affine_width_weights_gives_the_direct_loads_bits(env, bits_):
    """Shared x over these weights gives the direct loads' bits (cases.shared_x_matches_direct)."""
    shared_x_matches_direct(
        env,
        ProjectionSpec("bf16", (affine(bits_, 64 if bits_ == 3 else 32),) * 2, "swiglu", k_multiple=256),
        f"q{bits_}",
    )


@pytest.mark.parametrize("bits_,group", [(3, 64), (5, 32)])
def test_strided_copies_of_affine_width_stages_give_the_direct_loads_bits(env, bits_, group):
    """MLX_METILE_CUDA_MMA_STRIDED=1 (one base pointer per accumulator, the runs of a stage at
    constant offsets from it; 5 bits at group 32 in 8-byte copies) on a SwiGLU at 16 and 32 rows:
    within tolerance and the direct loads' bits."""
    spec = ProjectionSpec("bf16", (affine(bits_, group),) * 2, "swiglu", k_multiple=256)
    case = Case(spec, 768, 40, rows=32)
    set_knobs(env, {"STRIDED": "1"})
    for bucket, layout in ((16, ONE_TILE), (32, TILES)):
        art = kernel(spec, bucket, layout)
        assert art.schedule.staged and art.schedule.strided, art.schedule.describe()
        got = case.run_kernel(art, bucket)
        case.check(got, bucket, f"{spec.name()} strided rows={bucket}")
        assert same(got, direct(env, case, bucket, bucket, layout))
