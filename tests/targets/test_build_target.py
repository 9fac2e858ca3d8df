"""The CUDA architecture builds are for (mlx_metile.backends.cuda_device): MLX_METILE_CUDA_ARCH,
else MLX's CUDA device, else sm_90; and the target of that architecture."""

from __future__ import annotations

import mlx.core as mx
import pytest

from mlx_metile.backends import cuda_device
from mlx_metile.targets import cuda_target
from mlx_metile.targets.cuda import DEFAULT_ARCH


@pytest.fixture
def no_arch(env, monkeypatch):
    env.unset("MLX_METILE_CUDA_ARCH")
    cuda_device.device_arch.cache_clear()
    yield monkeypatch
    monkeypatch.undo()
    cuda_device.device_arch.cache_clear()


def test_the_variable_wins_and_is_validated(env, no_arch):
    env.set("MLX_METILE_CUDA_ARCH", "compute_80")
    assert cuda_device.cuda_arch() == "compute_80"
    assert cuda_device.build_target() == cuda_target("compute_80")
    with pytest.raises(ValueError, match="MLX_METILE_CUDA_ARCH"):
        env.set("MLX_METILE_CUDA_ARCH", "ampere")


def test_the_cuda_device_s_architecture_else_sm_90(no_arch):
    no_arch.setattr(mx.cuda, "is_available", lambda: False)
    assert cuda_device.cuda_arch() == DEFAULT_ARCH == "sm_90"
    cuda_device.device_arch.cache_clear()
    no_arch.setattr(mx.cuda, "is_available", lambda: True)
    no_arch.setattr(mx, "device_info", lambda d=None: {"architecture": "sm_86", "device_name": "RTX 3090"})
    assert cuda_device.cuda_arch() == "sm_86"
    assert cuda_device.build_target().smem_block == 99 * 1024
    cuda_device.device_arch.cache_clear()
    no_arch.setattr(mx, "device_info", lambda d=None: {"device_name": "unknown"})  # reported none: the default
    assert cuda_device.cuda_arch() == "sm_90"
    cuda_device.device_arch.cache_clear()
    no_arch.setattr(mx, "device_info", lambda d=None: {"architecture": "compute_86"})  # not a device's: the default
    assert cuda_device.cuda_arch() == "sm_90"
    cuda_device.device_arch.cache_clear()

    def refuses(d=None):
        raise RuntimeError("no device info")

    no_arch.setattr(mx, "device_info", refuses)
    assert cuda_device.cuda_arch() == "sm_90"
