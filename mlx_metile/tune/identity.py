"""What a decision is keyed by besides its call: the device, the compiler, the versions, the
sources of the lowering and the settings. A decision holds only where all of them are unchanged."""

from __future__ import annotations

import hashlib
import platform
import subprocess
from dataclasses import fields
from functools import lru_cache
from pathlib import Path

import mlx.core as mx

from .. import settings

TUNER_VERSION = 2  # 2: the incumbent rule (protocol, rule 7)

# The package's files whose code makes the kernels or routes a call: a change to any of them
# is a change to what a decision measured.
_SOURCE_DIRS = ("ir", "formats", "schedule", "lower", "codegen", "backends", "emu", "air", "native")
_SOURCE_FILES = ("spec.py", "call.py", "dispatch.py", "pipeline.py", "artifact.py", "reference.py", "ops.py")


@lru_cache(maxsize=1)
def sources_hash() -> str:
    """SHA-256 over the lowering's sources (and their data: the tuned tables), the kernel
    programs and the C++ extension's binary."""
    root = Path(__file__).resolve().parent.parent
    files: list[Path] = []
    for d in _SOURCE_DIRS:
        files += [p for p in (root / d).rglob("*") if p.is_file() and p.suffix in (".py", ".json", ".h", ".cpp")]
    files += [root / f for f in _SOURCE_FILES]
    try:
        from .. import kernels

        files += sorted(Path(kernels.__file__).resolve().parent.rglob("*.py"))
    except ImportError:  # pragma: no cover - kernels/ is installed with the package
        pass
    ext = extension_path()
    if ext is not None:
        files.append(ext)
    h = hashlib.sha256()
    for path in sorted(set(files)):
        h.update(str(path.name).encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()[:24]


def extension_path() -> Path | None:
    from ..backends import extension

    ext = extension._ext
    return None if ext is None else Path(ext.__file__).resolve()


@lru_cache(maxsize=8)
def device_identity(backend: str) -> dict:
    """The machine a decision was measured on: the device MLX names, the OS build, the CPU."""
    device = mx.default_device()
    try:
        info = {k: str(v) for k, v in mx.device_info(device).items()}
    except (RuntimeError, ValueError, TypeError):
        info = {}
    for key in ("memory_size", "max_recommended_working_set_size", "max_buffer_length"):
        info.pop(key, None)  # (sizes that vary with the machine's load, not its kind)
    out = {
        "backend": backend,
        "device": str(device),
        "device_info": info,
        "os": platform.platform(),
        "os_build": platform.version(),
        "machine": platform.machine(),
        "cpu": _cpu_name(),
    }
    if backend == "metal":  # the GPU architecture and generation, macOS with its build, NAX (the C++ core's)
        from ..backends.metal_device import device as metal_device

        d = metal_device()
        out["metal"] = {
            "architecture": d.architecture,
            "generation": d.generation,
            "macos": list(d.macos),
            "os_build": d.os_version,
            "nax": d.nax,
        }
    return out


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


@lru_cache(maxsize=8)
def compiler_identity(backend: str) -> dict:
    """The toolchain that built what runs: the C++ extension (the CPU path, and the emulator's
    bridge), clang (the emulator), LLVM 14 (our AIR), the Metal compiler (the macOS build), nvcc /
    NVRTC and the CUDA architecture."""
    ext = extension_path()
    out: dict = {"extension": None if ext is None else hashlib.sha256(ext.read_bytes()).hexdigest()[:24]}
    if backend == "emulator":
        from ..emu.toolchain import find_clang

        try:
            out["clang"] = _version_line([find_clang(), "--version"])
        except Exception as e:  # (no clang: the emulator candidate fails its gate, with the reason)
            out["clang"] = f"unavailable ({type(e).__name__})"
    if backend in ("metal", "emulator"):  # our AIR builds: LLVM 14 assembles them
        from ..air import llvm14

        out["llvm14"] = llvm14.version()
    if backend == "metal":  # the Metal compiler is the OS's: its build names it
        from ..backends.metal_device import device as metal_device

        out["metal"] = metal_device().os_version
    if backend == "cuda":
        from ..backends.cuda_compile import find_nvcc
        from ..backends.cuda_device import cuda_arch
        from ..backends.nvrtc import find_nvrtc

        nvcc = find_nvcc()
        out["nvcc"] = None if nvcc is None else _version_line([nvcc, "--version"], last=True)
        out["nvrtc"] = find_nvrtc()
        out["arch"] = cuda_arch()
    return out


def _version_line(cmd: list[str], last: bool = False) -> str:
    try:
        text = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"unavailable ({type(e).__name__})"
    lines = text.splitlines() or [""]
    return lines[-1] if last else lines[0]


# Settings that change neither a kernel nor its route (where caches go, what is printed)
_NOT_KEYED = {
    "debug",
    "cache",
    "xdg_cache_home",
    "cuda_home",
    "tune_store",
    "clang",
    "nvcc",
    "nvrtc",
    "cuda_include",
    "verify_record",
}


def keyed_settings() -> dict[str, str]:
    """The settings not at their defaults that change what runs."""
    now, default = settings.current(), settings.Settings()
    return {
        f.name: str(getattr(now, f.name))
        for f in fields(now)
        if f.name not in _NOT_KEYED and getattr(now, f.name) != getattr(default, f.name)
    }


def versions() -> dict:
    return {"mlx": mx.__version__, "mlx_metile": _package_version(), "tuner": TUNER_VERSION}


@lru_cache(maxsize=1)
def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mlx-metile")
    except PackageNotFoundError:  # pragma: no cover - a checkout on sys.path, not installed
        return "unknown"
