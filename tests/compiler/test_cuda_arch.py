"""The CUDA architecture builds are for (mlx_metile.cuda_arch): MLX_METILE_CUDA_ARCH, else MLX's
CUDA device, else sm_90; and the shared memory the schedules' rings may take on it."""

from __future__ import annotations

import mlx.core as mx
import pytest

from mlx_metile import cuda_arch as arch
from mlx_metile.compiler.lower_mma_staged import TILES, ring_budget
from mlx_metile.runtime import compile_projection
from mlx_metile.spec import ProjectionSpec, WeightFormat


@pytest.fixture
def no_arch(monkeypatch):
    monkeypatch.delenv("MLX_METILE_CUDA_ARCH", raising=False)
    arch.device_arch.cache_clear()
    compile_projection.cache_clear()
    yield monkeypatch
    arch.device_arch.cache_clear()
    compile_projection.cache_clear()


def test_the_variable_wins_and_is_validated(no_arch):
    no_arch.setenv("MLX_METILE_CUDA_ARCH", "compute_80")
    assert arch.cuda_arch() == "compute_80"
    no_arch.setenv("MLX_METILE_CUDA_ARCH", "ampere")
    with pytest.raises(ValueError, match="MLX_METILE_CUDA_ARCH"):
        arch.cuda_arch()


def test_the_cuda_device_s_architecture_else_sm_90(no_arch):
    no_arch.setattr(mx.cuda, "is_available", lambda: False)
    assert arch.cuda_arch() == arch.DEFAULT_ARCH == "sm_90"
    arch.device_arch.cache_clear()
    no_arch.setattr(mx.cuda, "is_available", lambda: True)
    no_arch.setattr(mx, "device_info", lambda d=None: {"architecture": "sm_86", "device_name": "RTX 3090"})
    assert arch.cuda_arch() == "sm_86"
    arch.device_arch.cache_clear()
    no_arch.setattr(mx, "device_info", lambda d=None: {"device_name": "unknown"})  # reported none: the default
    assert arch.cuda_arch() == "sm_90"
    arch.device_arch.cache_clear()

    def refuses(d=None):
        raise RuntimeError("no device info")

    no_arch.setattr(mx, "device_info", refuses)
    assert arch.cuda_arch() == "sm_90"


def test_shared_memory_by_compute_capability():
    assert arch.shared_memory("sm_90") == (227 * 1024, 228 * 1024)
    assert arch.shared_memory("compute_80") == (163 * 1024, 164 * 1024)
    assert arch.shared_memory("sm_89") == (99 * 1024, 100 * 1024)
    assert arch.shared_memory("sm_130") == (99 * 1024, 100 * 1024)  # unlisted: the smallest sm_80+ part's
    with pytest.raises(ValueError, match="sm_NN"):
        arch.shared_memory("gfx90a")


@pytest.mark.parametrize("name", ["sm_86", "sm_80"])
def test_rings_fit_what_the_architecture_gives_a_block(no_arch, name):
    """The ring budgets (measured on sm_90) are capped at the architecture's per-block shared
    memory, the SMEM knob's too, so that every kernel launches there."""
    limit = arch.shared_memory(name)[0]
    no_arch.setenv("MLX_METILE_CUDA_ARCH", name)
    no_arch.setenv("MLX_METILE_CUDA_MMA_SMEM", "200")
    assert ring_budget(4) == min(200 * 1024, limit)
    dense = ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=256)
    q8 = ProjectionSpec("bf16", (WeightFormat("bf16", 8, 128),) * 2, "swiglu", k_multiple=256)
    for spec in (dense, q8):
        for bucket in (1, 16, 32):
            art = compile_projection(spec, bucket, "cuda", TILES)
            assert 48 * 1024 < art.dynamic_shared <= limit, (spec.name(), bucket, art.dynamic_shared)
