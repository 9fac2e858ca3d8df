"""CUDA source -> cubin / PTX with NVRTC, through ctypes: the compiler that
MLX's CUDA wheel already brings (`mlx-cuda-13` depends on `nvidia-cuda-nvrtc`
and `nvidia-cuda-runtime`, whose `nvidia/cu13/include` has cuda_fp16.h and
cuda_bf16.h), so the CUDA path needs no CUDA toolkit on the machine.

MLX_METILE_NVRTC names the library explicitly; MLX_METILE_CUDA_INCLUDE adds a
header directory."""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
from functools import lru_cache

from ..settings import current


class NvrtcError(RuntimeError):
    pass


def _site_dirs() -> list[str]:
    return [p for p in sys.path if p and os.path.isdir(os.path.join(p, "nvidia"))]


def find_nvrtc() -> str | None:
    """MLX_METILE_NVRTC, else the libnvrtc of a pip `nvidia-*` package, else the system's."""
    return current().nvrtc or _found_nvrtc()


@lru_cache(maxsize=1)
def _found_nvrtc() -> str | None:
    for site in _site_dirs():
        found = sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib", "libnvrtc.so*")))
        found = [f for f in found if "builtins" not in f]
        if found:
            return found[-1]
    return ctypes.util.find_library("nvrtc")


def include_dirs() -> list[str]:
    """Directories holding cuda_fp16.h / cuda_bf16.h: the pip CUDA runtime's, then a toolkit's."""
    cfg = current()
    dirs = [cfg.cuda_include] if cfg.cuda_include else []
    for site in _site_dirs():
        dirs += sorted(
            os.path.dirname(h) for h in glob.glob(os.path.join(site, "nvidia", "*", "include", "cuda_fp16.h"))
        )
    for root in (cfg.cuda_home, "/usr/local/cuda"):
        if root and os.path.exists(os.path.join(root, "include", "cuda_fp16.h")):
            dirs.append(os.path.join(root, "include"))
    return dirs


def _library() -> ctypes.CDLL:
    path = find_nvrtc()
    if path is None:
        raise NvrtcError("NVRTC not found: pip install nvidia-cuda-nvrtc, or set MLX_METILE_NVRTC")
    return _loaded(path)


@lru_cache(maxsize=4)
def _loaded(path: str) -> ctypes.CDLL:
    return ctypes.CDLL(path)


def _check(lib: ctypes.CDLL, code: int, what: str) -> None:
    if code != 0:
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        raise NvrtcError(f"{what}: {lib.nvrtcGetErrorString(code).decode()}")


def compile_cuda(source: str, name: str, arch: str) -> bytes:
    """A cubin for an `sm_NN` arch, PTX for a `compute_NN` one."""
    lib = _library()
    prog = ctypes.c_void_p()
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), f"{name}.cu".encode(), 0, None, None), name)
    try:
        opts = [f"--gpu-architecture={arch}", "-std=c++17", "-diag-suppress=177"]
        opts += [f"-I{d}" for d in include_dirs()]
        raw = [o.encode() for o in opts]
        code = lib.nvrtcCompileProgram(prog, len(raw), (ctypes.c_char_p * len(raw))(*raw))
        if code != 0:
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, log)
            raise NvrtcError(f"NVRTC failed on {name} ({' '.join(opts)}):\n{log.value.decode(errors='replace')}")
        kind = "CUBIN" if arch.startswith("sm_") else "PTX"
        size = ctypes.c_size_t()
        _check(lib, getattr(lib, f"nvrtcGet{kind}Size")(prog, ctypes.byref(size)), name)
        out = ctypes.create_string_buffer(size.value)
        _check(lib, getattr(lib, f"nvrtcGet{kind}")(prog, out), name)
        return out.raw.rstrip(b"\0") if kind == "PTX" else out.raw  # PTX as text, as nvcc writes it
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
