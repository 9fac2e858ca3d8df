"""NVIDIA targets as data: shared memory per block and per SM by compute capability, and where
the tensor cores of mma.sync m16n8k16 begin."""

from __future__ import annotations

import pytest

from mlx_metile.targets import CPU, CudaTarget, arch_number, cuda_target
from mlx_metile.targets.cuda import DEFAULT_ARCH, SHARED_KB, UNLISTED_KB


def test_shared_memory_by_compute_capability():
    # the CUDA C++ Programming Guide's opt-in maximum per block, and per SM
    assert (cuda_target("sm_90").smem_block, cuda_target("sm_90").smem_sm) == (227 * 1024, 228 * 1024)
    assert (cuda_target("compute_80").smem_block, cuda_target("compute_80").smem_sm) == (163 * 1024, 164 * 1024)
    assert (cuda_target("sm_89").smem_block, cuda_target("sm_89").smem_sm) == (99 * 1024, 100 * 1024)
    assert (cuda_target("sm_86").smem_block, cuda_target("sm_86").smem_sm) == (99 * 1024, 100 * 1024)
    assert (cuda_target("sm_75").smem_block, cuda_target("sm_75").smem_sm) == (64 * 1024, 64 * 1024)
    unlisted = cuda_target("sm_130")  # the smallest sm_80+ part's: never more than a newer part gives
    assert (unlisted.smem_block, unlisted.smem_sm) == (99 * 1024, 100 * 1024) == tuple(k * 1024 for k in UNLISTED_KB)
    with pytest.raises(ValueError, match="sm_NN"):
        cuda_target("gfx90a")


def test_a_block_never_gets_more_than_its_sm():
    for cc, (block, sm) in SHARED_KB.items():
        assert block <= sm, cc


def test_architecture_names():
    assert [arch_number(a) for a in ("sm_90", "compute_75", "sm_90a", "sm_100")] == [90, 75, 90, 100]
    for bad in ("sm90", "ampere", "compute_", "sm_x90"):
        with pytest.raises(ValueError, match="sm_NN or compute_NN"):
            arch_number(bad)


def test_tensor_cores_from_sm_80():
    assert [cuda_target(a).tensor_cores for a in ("compute_75", "sm_75", "sm_80", "sm_86", "sm_90")] == [
        False,
        False,
        True,
        True,
        True,
    ]


def test_targets_are_values():
    """Targets key the schedule and compile caches: equal facts are equal, hashable targets."""
    assert cuda_target() == cuda_target(DEFAULT_ARCH) == CudaTarget("cuda", arch="sm_90")
    assert hash(cuda_target("sm_80")) == hash(cuda_target("sm_80")) and cuda_target("sm_80") != cuda_target("sm_86")
    assert CPU.language == "msl" and cuda_target().language == "cuda"
    assert cuda_target().layout_sms == 132  # the H200's SMs, which the column layouts were measured on
