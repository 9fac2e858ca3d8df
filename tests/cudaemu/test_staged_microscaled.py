"""mxfp4, mxfp8 and nvfp4 through the staged ring (lower/mma_staged.py) on the CPU: within the
float64 tolerance of the exact dequantisation, rows invariant bit for bit, and every output the
bits of the direct-load kernel (MLX_METILE_CUDA_MMA_STAGED=0): the ring moves bytes only, and its
stages of schedule.cuda_mma.MICRO_GROUPS chunks keep the direct loads' K ranges, so every sum
runs in the same order."""

from __future__ import annotations

import pytest

from mlx_metile.spec import ProjectionSpec, WeightFormat

from .cases import (
    Case,
    ring_rows_match_direct,
    ring_sums_in_direct_order,
    rules,
    shared_x_matches_direct,
)


@pytest.fixture(autouse=True)
def ring_everywhere(env):
    """Stages of MICRO_GROUPS (the rules' own) set explicitly: a ring setting turns the tables'
    direct_loads off, so every bucket here takes the ring (mxfp8 at 32 rows would keep the direct loads)."""
    env.set("MLX_METILE_CUDA_MMA_GROUPS", "4")


def mx_format(mode: str, bias: str = "") -> WeightFormat:
    group, bits = {"mxfp4": (32, 4), "mxfp8": (32, 8), "nvfp4": (16, 4)}[mode]
    return WeightFormat("u8", bits, group, bool(bias), bias or "f32", mode)


STAGED = [  # (spec, K, N)
    (ProjectionSpec("bf16", (mx_format("mxfp4"),), k_multiple=256), 512, 37),  # odd N
    (ProjectionSpec("f16", (mx_format("mxfp4", "f16"),), k_multiple=128), 384, 24),  # 3 stages over 4 warps
    (ProjectionSpec("bf16", (mx_format("mxfp8", "bf16"),), k_multiple=256), 512, 24),
    (ProjectionSpec("f16", (mx_format("mxfp8"),), k_multiple=128), 640, 41),  # 5 stages: uneven K ranges
    (ProjectionSpec("bf16", (mx_format("mxfp4"),) * 2, "swiglu", k_multiple=256), 512, 24),
    (ProjectionSpec("bf16", (mx_format("mxfp8"),) * 3, k_multiple=256), 512, (40, 16, 24)),  # q/k/v
    (ProjectionSpec("bf16", (mx_format("nvfp4"),), k_multiple=256), 512, 37),  # e4m3 scales folded into A
    (ProjectionSpec("f16", (mx_format("nvfp4", "f16"),), k_multiple=128), 640, 24),
    (ProjectionSpec("bf16", (mx_format("nvfp4"),) * 2, "swiglu", k_multiple=256), 512, 24),
]


@pytest.mark.parametrize("spec,K,N", STAGED, ids=[c[0].name() for c in STAGED])
def test_staged_microscaled_kernels_match_float64_the_direct_loads_and_are_row_invariant(env, spec, K, N):
    """At 1, 4, 16 and 32 rows (each row bucket's kernel; 32 rows also in the several-tile
    layout): within tolerance, the bits of the direct-load kernel, and the first, middle and last
    rows the bits of that row computed alone (the 1-row kernel)."""
    assert rules(spec).stageable
    case = Case(spec, K, N, rows=32)
    ring_rows_match_direct(env, case, 4 * (32 // spec.weights[0].group_size))  # a stage's scale bytes


@pytest.mark.parametrize("mode", ["mxfp4", "mxfp8", "nvfp4"])
def test_staged_microscaled_sums_run_in_the_direct_loads_order(env, mode):
    """The ring's K ranges are the direct loads' (cases.ring_sums_in_direct_order: over 40 chunks
    GROUPS=8 makes ranges of 16 chunks, not 12)."""
    ring_sums_in_direct_order(env, ProjectionSpec("bf16", (mx_format(mode),), k_multiple=256), 1280)


@pytest.mark.parametrize("mode", ["mxfp4", "mxfp8", "nvfp4"])
def test_shared_x_over_microscaled_weights_gives_the_direct_loads_bits(env, mode):
    """Shared x over these weights gives the direct loads' bits (cases.shared_x_matches_direct)."""
    shared_x_matches_direct(env, ProjectionSpec("bf16", (mx_format(mode),) * 2, "swiglu", k_multiple=256), mode)
