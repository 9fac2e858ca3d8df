"""The CUDA architecture kernels are built for: MLX_METILE_CUDA_ARCH (sm_NN for machine code,
compute_NN for portable PTX the driver compiles), else the architecture of MLX's default CUDA
device as `mx.device_info` reports it, else sm_90 (what builds get on a machine without a GPU,
such as the tests' compile checks). Its facts (shared memory, tensor cores) are mlx_metile.targets'.
"""

from __future__ import annotations

from functools import lru_cache

from ..settings import Settings, current
from ..targets.cuda import ARCH_PATTERN, DEFAULT_ARCH, CudaTarget, cuda_target


def cuda_arch(cfg: Settings | None = None) -> str:
    cfg = cfg or current()
    return cfg.cuda_arch or device_arch() or DEFAULT_ARCH


def build_target(cfg: Settings | None = None) -> CudaTarget:
    """The CUDA target builds are for now."""
    return cuda_target(cuda_arch(cfg))


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
    match = ARCH_PATTERN.fullmatch(arch)
    return arch if match and match.group(1) == "sm" else None
