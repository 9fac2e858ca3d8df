"""CUDA artifacts compiled: a fatbin, cubin or PTX from the generated source (nvcc, or NVRTC),
cached in memory per (artifact, arch, compiler, kind) and on disk by source hash and compiler."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

from .. import cache
from ..artifact import Artifact
from ..settings import current
from .cuda_device import cuda_arch
from .nvrtc import NvrtcError, compile_cuda, find_nvrtc


class CudaCompileError(RuntimeError):
    pass


def find_nvcc() -> str | None:
    explicit = current().nvcc
    if explicit:
        return explicit
    found = shutil.which("nvcc")
    if found:
        return found
    for root in ("/usr/local/cuda/bin/nvcc",):
        if os.path.exists(root):
            return root
    return None


def compiler(want: str | None = None) -> tuple[str, str]:
    """("nvcc", path) or ("nvrtc", library): `want` (a tuned decision's) or
    MLX_METILE_CUDA_COMPILER=nvcc|nvrtc picks one; by default nvcc where installed (what
    ran on the H200), else the NVRTC that MLX's CUDA wheel brings."""
    want = want or current().cuda_compiler or ""
    nvcc = find_nvcc() if want != "nvrtc" else None
    if nvcc is not None:
        return "nvcc", nvcc
    nvrtc = find_nvrtc() if want != "nvcc" else None
    if nvrtc is not None:
        return "nvrtc", nvrtc
    raise CudaCompileError(
        "no CUDA compiler: install the CUDA toolkit (nvcc) or pip install nvidia-cuda-nvrtc nvidia-cuda-runtime"
    )


def binary_kind(arch: str, tool: str) -> str:
    """What `ptx` hands MLX: PTX for a `compute_NN` arch; for `sm_NN` a compressed
    fatbin of the machine code alone when nvcc builds it, a cubin from NVRTC or with
    MLX_METILE_CUDA_BINARY=cubin. Why a fatbin: MLX hashes the whole binary at every
    launch of a precompiled kernel (mlx/backend/cuda/custom_kernel.cpp, to name its
    module), and compression makes that 3x shorter (25 KB -> 9 KB for the int4 gate/up
    kernel; 9 us -> 1.8 us of std::hash on this project's CPU). Fatbins load and pass the
    correctness matrix on the H200 (docs/BENCHMARKS.md, "Correctness on the H200")."""
    if arch.startswith("compute_"):
        return "ptx"
    want = current().cuda_binary
    return "fatbin" if want == "fatbin" and tool == "nvcc" else "cubin"


MAGIC = {"cubin": b"\x7fELF", "fatbin": b"\x50\xed\x55\xba"}  # the fatbin's, 0xBA55ED50 little-endian


def ptx(artifact: Artifact, arch: str | None = None, tool: str | None = None) -> bytes:
    """Machine code of a CUDA artifact: a compressed fatbin or a cubin for an
    `sm_NN` arch (see binary_kind), PTX for a `compute_NN` one (portable,
    JIT-compiled by the driver); the arch, compiler and kind as the settings give them now
    (`tool`: the compiler a tuned decision names)."""
    if artifact.target != "cuda":
        raise ValueError(f"artifact: expected a cuda artifact, got {artifact.target}")
    arch = arch or cuda_arch()
    tool, path = compiler(tool)
    return _compiled(artifact, arch, tool, path, binary_kind(arch, tool))


@lru_cache(maxsize=512)
def _compiled(artifact: Artifact, arch: str, tool: str, path: str, kind: str) -> bytes:
    key = hashlib.sha256(f"{artifact.source}\0{arch}\0{path}".encode()).hexdigest()[:24]
    out = cache.root("cuda") / f"{artifact.entry}-{key}.{kind}"
    cached = cache.load(out, key)
    if cached is not None:
        return cached
    if tool == "nvrtc":
        try:
            data = compile_cuda(artifact.source, artifact.entry, arch)
        except NvrtcError as e:
            raise CudaCompileError(f"{e}\n{_arch_hint(arch)}") from None
        cache.store(out, data, key)
        return data
    nvcc = path
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / f"{artifact.entry}.cu"
        src.write_text(artifact.source)
        dst = Path(tmp) / f"k.{kind}"
        target = [f"-arch={arch}"]
        if kind == "fatbin":  # the sm_NN machine code alone (no PTX), compressed
            target = [f"-gencode=arch=compute_{arch[3:]},code={arch}", "-Xfatbin=-compress-all"]
        res = subprocess.run(
            [nvcc, f"-{kind}", *target, "-O3", "-std=c++17", str(src), "-o", str(dst)],
            capture_output=True,
            text=True,
            check=False,
        )
        if res.returncode != 0:
            raise CudaCompileError(f"nvcc failed on {artifact.entry}:\n{res.stderr}\n{_arch_hint(arch)}")
        data = dst.read_bytes()
    cache.store(out, data, key)
    return data


def forget() -> None:
    """Drop the binaries held in memory (the disk cache stays)."""
    _compiled.cache_clear()


def _arch_hint(arch: str) -> str:
    return (
        f"(built for {arch}, the CUDA device's architecture or MLX_METILE_CUDA_ARCH; a compiler too old for "
        "it fails so: MLX_METILE_CUDA_ARCH=compute_NN builds portable PTX that the driver compiles)"
    )
