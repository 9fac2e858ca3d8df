"""Schedule choice: row buckets, the tiled schedule past 32 rows, and the
CUDA tuning override's validation."""

from __future__ import annotations

import pytest

from mlx_metile.compiler.schedule import TILED_BUCKET, choose, cuda_tuning, row_bucket
from mlx_metile.ops import cuda_max_rows


def test_buckets_and_schedule_kinds():
    assert [row_bucket(r) for r in (1, 2, 3, 5, 9, 17, 32, 33, 500)] == [1, 2, 4, 8, 16, 32, 32, 64, 64]
    for rows in (1, 8, 32):
        assert choose(rows, 1, (4,), (64,), ("bf16",)).kind == "simd_splitk"
    tiled = choose(TILED_BUCKET, 1, (4,), (64,), ("bf16",))
    assert tiled.kind == "tiled" and tiled.BM == 64 and tiled.threads == 256


def test_cuda_and_metal_keep_the_same_k_split():
    """VK fixes the sum order: it must not depend on the target, or rows
    computed by different schedules would differ in their bits."""
    for bits, group in ((0, 0), (4, 32), (8, 128)):
        for rows in (1, 4, 16, 32, 64):
            msl = choose(rows, 1, (bits,), (group,), ("bf16",), "bf16", "msl")
            cuda = choose(rows, 1, (bits,), (group,), ("bf16",), "bf16", "cuda")
            assert msl.VK == cuda.VK


def test_cuda_tuning_override(monkeypatch):
    monkeypatch.setenv("MLX_METILE_CUDA_TUNE", "sg=8,nc=2")
    assert cuda_tuning(1)[0] == 8 and cuda_tuning(1)[2] == 2
    monkeypatch.setenv("MLX_METILE_CUDA_TUNE", "warps=8")
    with pytest.raises(ValueError, match="MLX_METILE_CUDA_TUNE"):
        cuda_tuning(1)
    monkeypatch.setenv("MLX_METILE_CUDA_TUNE", "sg=64")
    with pytest.raises(ValueError, match="at most 32"):
        cuda_tuning(1)


def test_cuda_max_rows(monkeypatch):
    monkeypatch.delenv("MLX_METILE_CUDA_MAX_ROWS", raising=False)
    assert cuda_max_rows() == 32
    monkeypatch.setenv("MLX_METILE_CUDA_MAX_ROWS", "many")
    with pytest.raises(ValueError, match="MLX_METILE_CUDA_MAX_ROWS"):
        cuda_max_rows()


def test_cuda_tensor_core_schedule_selection(monkeypatch):
    from mlx_metile.runtime import compile_projection
    from mlx_metile.spec import ProjectionSpec, WeightFormat

    def kind(spec, rows=4):
        compile_projection.cache_clear()
        return compile_projection(spec, row_bucket(rows), "cuda").schedule.kind

    q4 = WeightFormat("bf16", 4, 64)
    monkeypatch.setenv("MLX_METILE_CUDA_ARCH", "sm_90")
    assert kind(ProjectionSpec("bf16", (q4,), k_multiple=64)) == "mma"
    assert kind(ProjectionSpec("f16", (WeightFormat("f16", 8, 128),), k_multiple=64), rows=32) == "mma"
    assert kind(ProjectionSpec("bf16", (q4, q4), "swiglu", k_multiple=64)) == "mma"
    assert kind(ProjectionSpec("bf16", (q4,), None, True, k_multiple=64)) == "mma"
    assert kind(ProjectionSpec("bf16", (q4,), k_multiple=64), rows=33) == "tiled"
    assert kind(ProjectionSpec("bf16", (q4, q4, q4), k_multiple=64)) == "mma"  # concatenated q/k/v
    # dense weights: the staged ring where K holds whole stages of 64 k, else split-K
    assert kind(ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=64)) == "mma"
    assert kind(ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=32)) == "simd_splitk"
    # not taken: f32 activations, mixed formats
    assert kind(ProjectionSpec("f32", (WeightFormat("f32", 4, 64),), k_multiple=64)) == "simd_splitk"
    assert kind(ProjectionSpec("f32", (WeightFormat("f32"),), k_multiple=64)) == "simd_splitk"
    assert kind(ProjectionSpec("bf16", (q4, WeightFormat("bf16", 8, 64)), "swiglu", k_multiple=64)) == "simd_splitk"
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_DENSE", "0")
    assert kind(ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=64)) == "simd_splitk"
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_DENSE", "1")  # direct loads: K % 32 suffices
    assert kind(ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=32)) == "mma"
    assert kind(ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=16)) == "simd_splitk"  # K % 32
    monkeypatch.setenv("MLX_METILE_CUDA_MMA", "0")
    assert kind(ProjectionSpec("bf16", (q4,), k_multiple=64)) == "simd_splitk"
    monkeypatch.setenv("MLX_METILE_CUDA_MMA", "1")
    monkeypatch.setenv("MLX_METILE_CUDA_ARCH", "compute_75")  # no mma.sync m16n8k16 before sm_80
    assert kind(ProjectionSpec("bf16", (q4,), k_multiple=64)) == "simd_splitk"
    compile_projection.cache_clear()


def test_mma_warps_override(monkeypatch):
    from mlx_metile.runtime import compile_projection
    from mlx_metile.spec import ProjectionSpec, WeightFormat

    spec = ProjectionSpec("bf16", (WeightFormat("bf16", 4, 64),), k_multiple=64)
    monkeypatch.setenv("MLX_METILE_CUDA_ARCH", "sm_90")
    for warps in ("4", "16"):
        monkeypatch.setenv("MLX_METILE_CUDA_MMA_WARPS", warps)
        compile_projection.cache_clear()
        s = compile_projection(spec, 4, "cuda").schedule
        assert s.SG == int(warps) and s.BN == 16
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_WARPS", "3")
    compile_projection.cache_clear()
    with pytest.raises(ValueError, match="MLX_METILE_CUDA_MMA_WARPS"):
        compile_projection(spec, 4, "cuda")
    compile_projection.cache_clear()


def test_fused_mma_can_be_turned_off(monkeypatch):
    from mlx_metile.runtime import compile_projection
    from mlx_metile.spec import ProjectionSpec, WeightFormat

    spec = ProjectionSpec("bf16", tuple(WeightFormat("bf16", 4, 64) for _ in range(3)), k_multiple=64)
    monkeypatch.setenv("MLX_METILE_CUDA_ARCH", "sm_90")
    compile_projection.cache_clear()
    assert compile_projection(spec, 4, "cuda").schedule.kind == "mma"
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_FUSED", "0")
    compile_projection.cache_clear()
    assert compile_projection(spec, 4, "cuda").schedule.kind == "simd_splitk"
    compile_projection.cache_clear()
