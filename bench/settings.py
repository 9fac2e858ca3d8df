"""Kernel settings for tuning runs, given as text: "VAR=v;VAR=v", or "default"."""

from __future__ import annotations

import os

from mlx_metile import ops
from mlx_metile.runtime import compile_projection

KEPT = ("MLX_METILE_CUDA_ARCH",)  # the build target stays as the caller set it


def apply_cuda_settings(text: str) -> None:
    """Makes these assignments the only MLX_METILE_CUDA_* settings (besides KEPT), and
    clears the kernel caches, which are keyed by spec, not by setting."""
    for var in [v for v in os.environ if v.startswith("MLX_METILE_CUDA_") and v not in KEPT]:
        del os.environ[var]
    for assignment in filter(None, "" if text == "default" else text.split(";")):
        var, _, value = assignment.partition("=")
        os.environ[var] = value
    ops.clear_kernel_caches()
    compile_projection.cache_clear()
