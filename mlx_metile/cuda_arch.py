"""The CUDA architecture kernels are built for, and the shared memory it gives a block.

MLX_METILE_CUDA_ARCH (sm_NN for machine code, compute_NN for portable PTX that the driver
compiles) wins; else the architecture of MLX's default CUDA device, as `mx.device_info` reports
it; else sm_90 (the H200 every measurement came from; what builds get on a machine without a
GPU, such as the tests' compile checks). The schedules size their shared-memory rings for the
H200 and cap them at what the architecture gives one block, so that a build for another GPU
launches (untimed there: no other GPU has run these kernels).
"""

from __future__ import annotations

import os
import re
from functools import lru_cache

DEFAULT_ARCH = "sm_90"
_ARCH = re.compile(r"^(sm|compute)_(\d+)[a-z]?$")

# KB of shared memory per block (opt-in maximum) and per SM, by compute capability: the CUDA C++
# Programming Guide's technical specifications. Unlisted capabilities take the smallest of the
# sm_80 family's (99 KB a block, 100 an SM), so that a kernel never asks a newer part for more
# than it may give.
SHARED_KB = {
    70: (96, 96),
    72: (96, 96),
    75: (64, 64),
    80: (163, 164),
    86: (99, 100),
    87: (163, 164),
    89: (99, 100),
    90: (227, 228),
    100: (227, 228),
    103: (227, 228),
    120: (99, 100),
    121: (99, 100),
}
UNLISTED_KB = (99, 100)


def cuda_arch() -> str:
    """MLX_METILE_CUDA_ARCH (e.g. sm_90, sm_80, compute_75), else the default CUDA device's
    architecture, else DEFAULT_ARCH."""
    explicit = os.environ.get("MLX_METILE_CUDA_ARCH")
    if explicit:
        if not _ARCH.match(explicit):
            raise ValueError(f"MLX_METILE_CUDA_ARCH: expected sm_NN or compute_NN, got {explicit!r}")
        return explicit
    return device_arch() or DEFAULT_ARCH


@lru_cache(maxsize=1)
def device_arch() -> str | None:
    """The `sm_NN` of MLX's CUDA device, or None where MLX has no CUDA backend (or reports none)."""
    import mlx.core as mx

    if not mx.cuda.is_available():
        return None
    try:
        arch = str(mx.device_info(mx.gpu).get("architecture", ""))
    except (RuntimeError, ValueError, TypeError):  # (an MLX that cannot say: the default)
        return None
    match = _ARCH.match(arch)
    return arch if match and match.group(1) == "sm" else None


def arch_number(arch: str) -> int:
    """NN of sm_NN / compute_NN."""
    match = _ARCH.match(arch)
    if not match:
        raise ValueError(f"CUDA architecture: expected sm_NN or compute_NN, got {arch!r}")
    return int(match.group(2))


def shared_memory(arch: str | None = None) -> tuple[int, int]:
    """(bytes a block may take, bytes of one SM) of shared memory on `arch` (cuda_arch())."""
    block_kb, sm_kb = SHARED_KB.get(arch_number(arch or cuda_arch()), UNLISTED_KB)
    return block_kb * 1024, sm_kb * 1024
