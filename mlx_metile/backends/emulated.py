"""The MSL artifact built for the Metal-on-CPU emulator: the object the C++ primitive dispatches."""

from __future__ import annotations

from functools import lru_cache

from ..artifact import Artifact
from ..emu.build import build_kernel
from ..emu.translate import translate


@lru_cache(maxsize=512)
def emulator_object(artifact: Artifact) -> str:
    """Build the MSL artifact for the CPU emulator; the path of its object."""
    return str(build_kernel(translate(artifact.source, artifact.entry)))
