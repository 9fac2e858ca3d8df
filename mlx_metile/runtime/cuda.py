"""CUDA artifacts: PTX from the generated source (nvcc), cached on disk, and
the launch through MLX's precompiled-CUDA-kernel op, which passes inputs,
outputs, then scalars - the order the CUDA renderer declares them in."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

from ..emu.toolchain import cache_root
from .artifact import Artifact

DEFAULT_ARCH = "sm_90"


class CudaCompileError(RuntimeError):
    pass


def find_nvcc() -> str | None:
    explicit = os.environ.get("MLX_METILE_NVCC")
    if explicit:
        return explicit
    found = shutil.which("nvcc")
    if found:
        return found
    for root in ("/usr/local/cuda/bin/nvcc",):
        if os.path.exists(root):
            return root
    return None


def cuda_arch() -> str:
    """MLX_METILE_CUDA_ARCH (e.g. sm_90, sm_80, compute_75), default sm_90."""
    return os.environ.get("MLX_METILE_CUDA_ARCH", DEFAULT_ARCH)


@lru_cache(maxsize=512)
def ptx(artifact: Artifact, arch: str | None = None) -> bytes:
    """Machine code of a CUDA artifact: a cubin for an `sm_NN` arch, PTX for a
    `compute_NN` one (portable, JIT-compiled by the driver); cached on disk by
    source hash."""
    if artifact.target != "cuda":
        raise ValueError(f"artifact: expected a cuda artifact, got {artifact.target}")
    arch = arch or cuda_arch()
    nvcc = find_nvcc()
    if nvcc is None:
        raise CudaCompileError("nvcc not found: install the CUDA toolkit or set MLX_METILE_NVCC")
    key = hashlib.sha256(f"{artifact.source}\0{arch}\0{nvcc}".encode()).hexdigest()[:24]
    kind = "ptx" if arch.startswith("compute_") else "cubin"
    out = cache_root("cuda") / f"{artifact.entry}-{key}.{kind}"
    if out.exists():
        return out.read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / f"{artifact.entry}.cu"
        src.write_text(artifact.source)
        dst = Path(tmp) / f"k.{kind}"
        res = subprocess.run(
            [nvcc, f"-{kind}", f"-arch={arch}", "-O3", "-std=c++17", str(src), "-o", str(dst)],
            capture_output=True,
            text=True,
            check=False,
        )
        if res.returncode != 0:
            raise CudaCompileError(f"nvcc failed on {artifact.entry}:\n{res.stderr}")
        data = dst.read_bytes()
    tmp_out = out.with_suffix(f".{os.getpid()}.tmp")
    tmp_out.write_bytes(data)
    os.replace(tmp_out, out)
    return data
