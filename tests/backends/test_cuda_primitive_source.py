"""The CUDA launch primitive (src/cuda/) is built only against MLX's CUDA wheel, which CI does not
install; its C++ still compiles here - syntax and types, no link - against the installed MLX's
headers (the CPU wheel ships the same CUDA-backend headers) and a CUDA toolkit's, so that an edit
that breaks it fails in CI, not first on the GPU machine."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import mlx
import pytest

from mlx_metile.backends.nvrtc import include_dirs

ROOT = Path(__file__).resolve().parents[2]
MLX_INCLUDE = Path(list(mlx.__path__)[0]) / "include"


def _cuda_include() -> str | None:
    """A CUDA toolkit's include directory (the pip runtime's lacks crt/host_config.h)."""
    for d in include_dirs():
        if os.path.exists(os.path.join(d, "crt", "host_config.h")) and os.path.exists(os.path.join(d, "cuda.h")):
            return d
    return None


def _compiler() -> str | None:
    return next((c for c in ("c++", "g++", "clang++-19", "clang++") if shutil.which(c)), None)


@pytest.mark.skipif(_cuda_include() is None, reason="no CUDA toolkit headers (crt/host_config.h, cuda.h)")
@pytest.mark.skipif(_compiler() is None, reason="no C++ compiler")
@pytest.mark.skipif(
    not (MLX_INCLUDE / "mlx" / "backend" / "cuda" / "device.h").exists(),
    reason="the installed MLX ships no CUDA-backend headers",
)
def test_the_cuda_launch_primitive_compiles_against_mlx_cuda_headers():
    cmd = [
        _compiler(),
        "-std=c++20",
        "-fsyntax-only",
        "-DMETILE_CUDA_PRIMITIVE=1",
        f"-I{MLX_INCLUDE}",
        f"-I{_cuda_include()}",
        f"-I{ROOT / 'src'}",
        f"-I{ROOT / 'src' / 'cuda' / 'shim'}",
        str(ROOT / "src" / "cuda" / "cuda_kernel.cpp"),
        str(ROOT / "src" / "cuda_launch.cpp"),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
