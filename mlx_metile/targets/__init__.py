"""Hardware facts as data: what a target gives a kernel (threads, shared memory, matrix units).

Nothing here decides anything; the schedule room reads these facts, and the dispatch builds
the target of a call from the device MLX runs on."""

from .apple import APPLE_FAMILIES, EMULATOR, MetalTarget, nax_available
from .cuda import CudaTarget, arch_number, cuda_target
from .target import CPU, Target

__all__ = [
    "APPLE_FAMILIES",
    "CPU",
    "CudaTarget",
    "EMULATOR",
    "MetalTarget",
    "Target",
    "arch_number",
    "cuda_target",
    "nax_available",
]
