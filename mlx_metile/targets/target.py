"""The target of a build: the language its kernels are written in and the machine's limits."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """A machine kernels are built for. `language` names the renderer ("msl", "cuda")."""

    language: str
    simd_width: int = 32  # threads of a SIMD group / warp
    max_threads_per_group: int = 1024


# The CPU paths run the C++ implementation, or the MSL through the emulator: MSL's facts.
CPU = Target("msl")
