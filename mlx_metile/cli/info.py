"""`mlx-metile info`: versions, the default device and backend, which routes this machine has (and
why not where it has none), and the caches with their sizes."""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0


def human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def nax_route(metal: bool) -> tuple[str, bool, str]:
    """Our NAX schedules: opt-in (MLX_METILE_METAL_SCHEDULE) where MLX itself runs NAX, and in the emulator."""
    opt_in = "MLX_METILE_METAL_SCHEDULE=nax_direct or nax_staged"
    if metal:
        from ..backends import metal_device

        d = metal_device.device()
        if metal_device.nax_available():
            return ("NAX (matmul2d)", True, f"{d.architecture}, macOS {'.'.join(map(str, d.macos))}; opt-in: {opt_in}")
        why = f"{d.architecture} (generation {d.generation}), macOS {'.'.join(map(str, d.macos))}"
        return ("NAX (matmul2d)", False, f"{why}: MLX runs NAX on generation >= 17 with macOS 26.2+")
    return (
        "NAX (matmul2d)",
        False,
        f"needs an Apple GPU of generation >= 17 and macOS 26.2+; in the emulator: MLX_METILE_EMULATE=1 with {opt_in}",
    )


def routes() -> list[tuple[str, bool, str]]:
    """(route, available here, how or why not) for each way mlx-metile runs a kernel."""
    import mlx.core as mx

    from ..backends import cuda_compile, extension, nvrtc
    from ..emu import toolchain

    out = []
    ext = extension._ext
    out.append(("CPU path (C++)", ext is not None, "extension loaded" if ext else f"not built: {extension.ERROR}"))
    try:
        clang = toolchain.find_clang()
        out.append(("Metal emulator (MSL on the CPU)", True, f"{clang}; MLX_METILE_EMULATE=1 routes CPU calls to it"))
    except toolchain.ToolchainError as e:
        out.append(("Metal emulator (MSL on the CPU)", False, str(e)))
    metal = extension.has_metal() and mx.metal.is_available()
    why = (
        "Apple GPU available"
        if metal
        else ("no Metal device" if sys.platform == "darwin" else "needs macOS and an Apple GPU")
    )
    out.append(("Metal (simdgroup MSL)", metal, why))
    out.append(nax_route(metal))
    try:
        from ..air import build, llvm14

        tools = f"{build.tool('llvm-dis')}, {llvm14.tool14('llvm-as')}"
        out.append(("AIR (kernels as Apple IR, run on the CPU)", True, tools))
    except Exception as e:  # a missing LLVM tool: its error says which and how to install it
        out.append(("AIR (kernels as Apple IR, run on the CPU)", False, str(e)))
    from .. import native

    archives = "MLX_METILE_PATCHED_ARCHIVES=1" if native.enabled() else "off (MLX_METILE_PATCHED_ARCHIVES)"
    out.append(("patched binary archives", False, f"{archives}; loading them needs macOS and an Apple GPU"))
    cuda = mx.cuda.is_available()
    nvcc, lib = cuda_compile.find_nvcc(), nvrtc.find_nvrtc()
    compilers = ", ".join(n for n, p in (("nvcc", nvcc), ("NVRTC", lib)) if p) or "no CUDA compiler (nvcc or NVRTC)"
    out.append(
        ("CUDA", cuda and bool(nvcc or lib), f"{'MLX CUDA device' if cuda else 'no MLX CUDA device'}; {compilers}")
    )
    return out


def caches() -> list[tuple[str, Path, int]]:
    from .. import settings

    root = settings.current().cache_root
    found = [("all caches", root, _size(root))]
    if root.is_dir():
        found += [(f"  {p.name}", p, _size(p)) for p in sorted(root.iterdir()) if p.is_dir()]
    return found


def info(args: argparse.Namespace) -> int:
    import mlx.core as mx

    import mlx_metile

    from .. import dispatch

    try:
        from importlib.metadata import version

        lm = version("mlx-lm")
    except Exception:  # not installed
        lm = "not installed"
    print(f"mlx-metile {mlx_metile.__version__}, MLX {mx.__version__}, mlx-lm {lm}, Python {sys.version.split()[0]}")
    print(f"platform {platform.platform()}")
    device = mx.default_device()
    print(f"default device {device}: backend {dispatch.backend_of(mx.default_stream(device))}")
    print("routes:")
    for name, ok, how in routes():
        print(f"  {'yes' if ok else 'no ':3s} {name}: {how}")
    print("caches:")
    for name, path, size in caches():
        print(f"  {name}: {path} ({human(size)})")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("info", help="versions, device, available routes and caches")
    p.set_defaults(func=info)
