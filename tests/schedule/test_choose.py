"""Schedule choice: row buckets, the tiled schedule past 32 rows, which specs take CUDA's
tensor-core schedule, and the SIMT tuning override."""

from __future__ import annotations

import pytest

from mlx_metile import settings
from mlx_metile.backends.cuda_device import build_target
from mlx_metile.dispatch import cuda_max_rows
from mlx_metile.schedule import TILED_BUCKET, Shape, choose, row_bucket
from mlx_metile.schedule.simt import cuda_tuning, k_per_lane
from mlx_metile.spec import ProjectionSpec, WeightFormat
from mlx_metile.targets import CPU, cuda_target

Q4 = WeightFormat("bf16", 4, 64)
SHAPE = Shape(4096, 14336)  # (the TILES layout: several column tiles per block)


def simt(bits: int, group: int, act: str = "bf16") -> ProjectionSpec:
    return ProjectionSpec(act, (WeightFormat(act, bits, group),), k_multiple=64)


def test_buckets_and_schedule_kinds():
    assert [row_bucket(r) for r in (1, 2, 3, 5, 9, 17, 32, 33, 500)] == [1, 2, 4, 8, 16, 32, 32, 64, 64]
    spec = simt(4, 64)
    for rows in (1, 8, 32):
        assert choose(spec, rows, CPU, SHAPE).kind == "simd_splitk"
    tiled = choose(spec, TILED_BUCKET, CPU, SHAPE)
    assert tiled.kind == "tiled" and tiled.BM == 64 and tiled.threads == 256


def test_cuda_and_metal_keep_the_same_k_split():
    """VK fixes the SIMT sum order: it must not depend on the target, or rows computed by
    different schedules would differ in their bits."""
    for bits, group in ((0, 0), (4, 32), (8, 128)):
        for rows in (1, 4, 16, 32, 64):
            msl = choose(simt(bits, group), rows, CPU, SHAPE)
            cuda = choose(simt(bits, group), rows, cuda_target("compute_75"), SHAPE)
            assert msl.kind == cuda.kind != "mma" and msl.VK == cuda.VK


def test_cuda_tuning_override(env):
    env.set("MLX_METILE_CUDA_TUNE", "sg=8,nc=2")
    sg, _, nc = cuda_tuning(1, settings.current())
    assert (sg, nc) == (8, 2)
    s = choose(simt(4, 64), 1, cuda_target("compute_75"), SHAPE)
    assert s.SG == 8 and s.NC <= 2
    with pytest.raises(ValueError, match="MLX_METILE_CUDA_TUNE"):
        env.set("MLX_METILE_CUDA_TUNE", "warps=8")
    with pytest.raises(ValueError, match="at most 32"):
        env.set("MLX_METILE_CUDA_TUNE", "sg=64")


def test_cuda_max_rows(env):
    env.unset("MLX_METILE_CUDA_MAX_ROWS")
    assert cuda_max_rows() == 32
    with pytest.raises(ValueError, match="MLX_METILE_CUDA_MAX_ROWS"):
        env.set("MLX_METILE_CUDA_MAX_ROWS", "many")


def kind(spec: ProjectionSpec, rows: int = 4) -> str:
    return choose(spec, rows, build_target(), SHAPE).kind


def test_cuda_tensor_core_schedule_selection(env):
    env.set("MLX_METILE_CUDA_ARCH", "sm_90")
    assert kind(ProjectionSpec("bf16", (Q4,), k_multiple=64)) == "mma"
    assert kind(ProjectionSpec("f16", (WeightFormat("f16", 8, 128),), k_multiple=64), rows=32) == "mma"
    assert kind(ProjectionSpec("bf16", (Q4, Q4), "swiglu", k_multiple=64)) == "mma"
    assert kind(ProjectionSpec("bf16", (Q4,), None, True, k_multiple=64)) == "mma"
    assert kind(ProjectionSpec("bf16", (Q4,), k_multiple=64), rows=33) == "tiled"
    assert kind(ProjectionSpec("bf16", (Q4, Q4, Q4), k_multiple=64)) == "mma"  # concatenated q/k/v
    # dense weights: the staged ring where K holds whole stages of 64 k, else split-K
    assert kind(ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=64)) == "mma"
    assert kind(ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=32)) == "simd_splitk"
    # not taken: f32 activations, mixed formats
    assert kind(ProjectionSpec("f32", (WeightFormat("f32", 4, 64),), k_multiple=64)) == "simd_splitk"
    assert kind(ProjectionSpec("f32", (WeightFormat("f32"),), k_multiple=64)) == "simd_splitk"
    assert kind(ProjectionSpec("bf16", (Q4, WeightFormat("bf16", 8, 64)), "swiglu", k_multiple=64)) == "simd_splitk"
    env.set("MLX_METILE_CUDA_MMA_DENSE", "0")
    assert kind(ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=64)) == "simd_splitk"
    env.set("MLX_METILE_CUDA_MMA_DENSE", "1")  # direct loads: K % 32 suffices
    assert kind(ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=32)) == "mma"
    assert kind(ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=16)) == "simd_splitk"  # K % 32
    env.set("MLX_METILE_CUDA_MMA", "0")
    assert kind(ProjectionSpec("bf16", (Q4,), k_multiple=64)) == "simd_splitk"
    env.set("MLX_METILE_CUDA_MMA", "1")
    env.set("MLX_METILE_CUDA_ARCH", "compute_75")  # no mma.sync m16n8k16 before sm_80
    assert kind(ProjectionSpec("bf16", (Q4,), k_multiple=64)) == "simd_splitk"


def test_mma_warps_override(env):
    spec = ProjectionSpec("bf16", (Q4,), k_multiple=64)
    env.set("MLX_METILE_CUDA_ARCH", "sm_90")
    for warps in ("4", "16"):
        env.set("MLX_METILE_CUDA_MMA_WARPS", warps)
        s = choose(spec, 4, build_target(), SHAPE)
        assert s.SG == int(warps) and s.BN == 16
    with pytest.raises(ValueError, match="MLX_METILE_CUDA_MMA_WARPS"):
        env.set("MLX_METILE_CUDA_MMA_WARPS", "3")


def test_fused_mma_can_be_turned_off(env):
    spec = ProjectionSpec("bf16", (Q4,) * 3, k_multiple=64)
    env.set("MLX_METILE_CUDA_ARCH", "sm_90")
    assert kind(spec) == "mma"
    env.set("MLX_METILE_CUDA_MMA_FUSED", "0")
    assert kind(spec) == "simd_splitk"


def test_a_fused_norm_needs_the_tensor_core_schedule():
    spec = ProjectionSpec("f32", (WeightFormat("f32", 4, 64),), k_multiple=64, norm_eps=1e-5)
    with pytest.raises(ValueError, match="RMSNorm needs CUDA's tensor-core schedule"):
        choose(spec, 1, cuda_target("sm_90"), SHAPE)


SMALL_GROUPS = {  # a quantization group smaller than VK (the widest group or 16 bytes of a weight)
    "qkv_mxfp8_q8g64_dense": (
        WeightFormat("u8", 8, 32, mode="mxfp8"),
        WeightFormat("bf16", 8, 64),
        WeightFormat("bf16"),
    ),
    "nvfp4": (WeightFormat("u8", 4, 16, mode="nvfp4"),),
    "nvfp4_q4g64": (WeightFormat("u8", 4, 16, mode="nvfp4"), WeightFormat("bf16", 4, 64)),
    "q4g64_q4g128": (WeightFormat("bf16", 4, 64), WeightFormat("bf16", 4, 128)),
    "q2g32": (WeightFormat("bf16", 2, 32),),
    "q3g32_q8g128": (WeightFormat("bf16", 3, 32), WeightFormat("bf16", 8, 128)),
}


@pytest.mark.parametrize("name", list(SMALL_GROUPS))
@pytest.mark.parametrize("target", [CPU, cuda_target("compute_75")], ids=["msl", "cuda_simt"])
def test_split_k_unrolls_whole_groups(name, target):
    """simd_splitk's U (the k unrolled together) is a multiple of every group smaller than VK,
    so a group's scale and bias index is exact, one load per group (the emulator's byte counts:
    tests/kernels/test_weight_reuse.py); U still divides VK, which alone fixes a row's sum order."""
    spec = ProjectionSpec("bf16", SMALL_GROUPS[name], k_multiple=64)
    small = [w.group_size for w in spec.weights if w.quantized and w.group_size < k_per_lane(spec)]
    for rows in (1, 17, 32):
        s = choose(spec, rows, target, SHAPE)
        assert s.kind == "simd_splitk" and s.VK == k_per_lane(spec), s.describe()
        assert small and all(s.U % g == 0 for g in small), (s.VK, s.U, small)
        assert s.U <= s.VK and s.VK % s.U == 0 and s.U % s.C == 0, (s.VK, s.U, s.C)
