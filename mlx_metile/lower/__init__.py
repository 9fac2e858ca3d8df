"""The lowering room: (bound tile program, Schedule) -> the thread-level AST of a kernel.

One file per schedule, each a subclass of the public `Lowering` base (base.py): `simd_splitk`,
`tiled`, and the tensor-core family - `mma` (direct loads), `mma_staged` (a cp.async ring),
`mma_xshare` (x shared by a block's warps) - and the NAX pair on Metal's neural accelerators,
`nax_direct` (weights straight into matmul2d's fragments) and `nax_staged` (through threadgroup
memory). A lowering decides nothing: every choice is a field
of the Schedule; it checks the schedule is legal for the program (LowerError otherwise).
"""

from __future__ import annotations

from ..codegen.ast import KernelDef
from ..ir.nodes import Program
from ..schedule import Schedule
from ..spec import ProjectionSpec
from .base import LowerError, Lowering, Scope
from .mma import MMALowering
from .mma_staged import StagedMMALowering
from .mma_xshare import SharedXLowering
from .nax_direct import NaxDirectLowering
from .nax_staged import NaxStagedLowering
from .simd_splitk import SplitKLowering
from .tiled import TiledLowering

__all__ = ["LowerError", "Lowering", "Scope", "lower", "lowering_for"]


def lowering_for(schedule: Schedule) -> type[Lowering]:
    if schedule.kind == "simd_splitk":
        return SplitKLowering
    if schedule.kind == "tiled":
        return TiledLowering
    if schedule.kind == "mma":
        if schedule.xshare:
            return SharedXLowering
        return StagedMMALowering if schedule.staged else MMALowering
    if schedule.kind == "nax_direct":
        return NaxDirectLowering
    if schedule.kind == "nax_staged":
        return NaxStagedLowering
    raise LowerError(f"unknown schedule {schedule.kind!r}")


def lower(program: Program, schedule: Schedule, spec: ProjectionSpec) -> KernelDef:
    """The thread-level kernel of `program` (meta-parameters bound) under `schedule`."""
    return lowering_for(schedule)(program, schedule, spec).lower()
