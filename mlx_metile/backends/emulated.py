"""The object the C++ primitive dispatches on the CPU for an artifact: its MSL built for the
Metal-on-CPU emulator, or - route "metallib" - the metallib's AIR retargeted to x86-64 by
mlx_metile.air (the same emulator ABI, emu_abi.h), so that what runs is the metallib's bitcode."""

from __future__ import annotations

from functools import lru_cache

from ..air.library import Library
from ..artifact import Artifact
from ..emu.build import build_kernel
from ..emu.translate import translate


@lru_cache(maxsize=512)
def emulator_object(artifact: Artifact) -> str:
    """Build the artifact for the CPU emulator; the path of its object."""
    if artifact.route == "metallib":
        return str(Library.read(artifact.library).function(artifact.entry).path)
    if artifact.route != "msl":
        raise ValueError(
            f"{artifact.entry}: the emulator runs MSL and metallib artifacts, not route {artifact.route!r}"
        )
    return str(build_kernel(translate(artifact.source, artifact.entry)))
