"""Apple GPUs: the Metal GPU families and where the neural accelerators (NAX) are.

MLX enables its NAX kernels (MetalPerformancePrimitives' `matmul2d`) only on GPU generation 17
and later (the M5 family) with macOS 26.2 or later; on earlier GPUs the fixed lane-to-element
map of its cooperative tensors computes wrong values. Nothing here has run on an Apple GPU.

`EMULATOR` is the Metal-on-CPU emulator's target (mlx_metile.emu): it implements the MPP subset
with that lane map (docs/NAX.md), so it counts as a NAX target of generation 17 and macOS 26.2.
"""

from __future__ import annotations

from dataclasses import dataclass

from .target import Target

# Metal GPU family -> (chip generation, example chips)
APPLE_FAMILIES = {
    "apple7": (13, "M1, A14"),
    "apple8": (14, "M2, A15, A16"),
    "apple9": (15, "M3, M4, A17, A18"),
    "apple10": (17, "M5"),
}
NAX_MIN_GENERATION = 17
NAX_MIN_MACOS = (26, 2)
THREADGROUP_MEMORY = 32 * 1024  # bytes a threadgroup may allocate on every family above
MAX_BUFFERS = 31  # buffer argument slots 0..30


@dataclass(frozen=True)
class MetalTarget(Target):
    generation: int = 0  # 0: unknown (the emulator, or a device that did not say)
    macos: tuple[int, int] = (0, 0)
    threadgroup_memory: int = THREADGROUP_MEMORY
    max_buffers: int = MAX_BUFFERS
    emulated: bool = False  # the Metal-on-CPU emulator, not a device

    @property
    def nax(self) -> bool:
        return nax_available(self.generation, self.macos)


def nax_available(generation: int, macos: tuple[int, int]) -> bool:
    """Whether MLX would run NAX kernels here: GPU generation >= 17 and macOS >= 26.2."""
    return generation >= NAX_MIN_GENERATION and tuple(macos) >= NAX_MIN_MACOS


# The emulator runs the MPP subset with MLX's lane map: it is a NAX target, like an M5 on macOS 26.2.
EMULATOR = MetalTarget("msl", generation=NAX_MIN_GENERATION, macos=NAX_MIN_MACOS, emulated=True)
