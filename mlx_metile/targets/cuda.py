"""NVIDIA GPUs: shared memory per block and per SM by compute capability, tensor cores.

Shared memory is the CUDA C++ Programming Guide's table of technical specifications (the
opt-in maximum per block, and per SM). Unlisted capabilities take the smallest of the sm_80
family's (99 KB a block, 100 an SM), so a kernel never asks a newer part for more than it
gives. `layout_sms` is the SM count the schedule's column layouts divide the grid by: the
H200's 132 for every architecture, since no other GPU has measured them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .target import Target

DEFAULT_ARCH = "sm_90"  # what builds get without a device or a setting (the H200's)
ARCH_PATTERN = re.compile(r"^(sm|compute)_(\d+)[a-z]?$")

# compute capability -> KB of shared memory (per block, per SM)
SHARED_KB = {
    70: (96, 96),
    72: (96, 96),
    75: (64, 64),
    80: (163, 164),
    86: (99, 100),
    87: (163, 164),
    89: (99, 100),
    90: (227, 228),
    100: (227, 228),
    103: (227, 228),
    120: (99, 100),
    121: (99, 100),
}
UNLISTED_KB = (99, 100)
STATIC_SHARED_BYTES = 48 * 1024  # what a kernel may declare statically; more is dynamic, sized at launch
DRIVER_SHARED_PER_BLOCK = 1024  # bytes of an SM's shared memory the driver keeps per resident block
TENSOR_CORES_FROM = 80  # mma.sync m16n8k16 with bf16 / f16 operands and f32 accumulation
LAYOUT_SMS = 132  # the H200's SMs: the grid size the column layouts were measured against


def arch_number(arch: str) -> int:
    """NN of sm_NN / compute_NN."""
    match = ARCH_PATTERN.fullmatch(arch)
    if not match:
        raise ValueError(f"CUDA architecture: expected sm_NN or compute_NN, got {arch!r}")
    return int(match.group(2))


@dataclass(frozen=True)
class CudaTarget(Target):
    arch: str = DEFAULT_ARCH
    smem_block: int = 227 * 1024  # bytes of shared memory a block may take
    smem_sm: int = 228 * 1024  # bytes of shared memory of one SM
    layout_sms: int = LAYOUT_SMS

    @property
    def tensor_cores(self) -> bool:
        return arch_number(self.arch) >= TENSOR_CORES_FROM


def cuda_target(arch: str = DEFAULT_ARCH) -> CudaTarget:
    """The facts of `arch` (sm_NN builds machine code, compute_NN portable PTX)."""
    block_kb, sm_kb = SHARED_KB.get(arch_number(arch), UNLISTED_KB)
    return CudaTarget("cuda", arch=arch, smem_block=block_kb * 1024, smem_sm=sm_kb * 1024)
