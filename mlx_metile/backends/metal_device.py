"""The Metal device as the C++ core reads it (src/metal/metal_device.cpp, macOS builds only): the
GPU architecture and generation as MLX reads them, the macOS version and build, and whether MLX
itself would run its NAX kernels here (MLX 0.32.4's `is_nax_available()`, which libmlx does not
export, recomputed on the same device object: macOS >= 26.2 and generation >= 17, 18 on phones).

`metal_target()` is the MetalTarget the dispatch builds Metal kernels for. Nothing here has run
on macOS: the binding is compiled only there."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..targets import MetalTarget
from .extension import has_metal, require


@dataclass(frozen=True)
class MetalDevice:
    architecture: str  # e.g. "applegpu_g17s"
    generation: int
    macos: tuple[int, int, int]
    os_version: str  # NSProcessInfo's text, e.g. "Version 26.2 (Build 25C56)": the Metal compiler's identity
    nax: bool  # MLX's own verdict (the C++ core's)

    def target(self) -> MetalTarget:
        return MetalTarget("msl", generation=self.generation, macos=self.macos[:2])


@lru_cache(maxsize=1)
def device() -> MetalDevice:
    """The default GPU; RuntimeError where this build has no Metal path."""
    if not has_metal():
        raise RuntimeError("mlx_metile: this build has no Metal path (the Metal host code is built on macOS only)")
    arch, generation, macos, os_version, nax = require().metal_device_info()
    return MetalDevice(str(arch), int(generation), tuple(int(v) for v in macos), str(os_version), bool(nax))


@lru_cache(maxsize=1)
def metal_target() -> MetalTarget:
    """The target Metal kernels are built for (once per process: the dispatch asks on every call)."""
    return device().target()


def nax_available() -> bool:
    """Whether NAX artifacts may be dispatched here: MLX's verdict, and the target's rule agreeing."""
    d = device()
    return d.nax and d.target().nax
