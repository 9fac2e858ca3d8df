"""spec + Schedule -> tile program -> thread-level kernel -> source: each stage a plain
function, the whole cached per (spec, schedule, target language)."""

from __future__ import annotations

from functools import lru_cache

from ..codegen import RENDERERS
from ..ir import bind_meta, format_program, verify
from ..kernels import projection_program
from ..lower import lower
from ..schedule import Schedule
from ..settings import current
from ..spec import ProjectionSpec
from .artifact import Artifact
from .debug import dump


@lru_cache(maxsize=512)
def compile_projection(spec: ProjectionSpec, schedule: Schedule, target: str = "msl") -> Artifact:
    """The kernel of `spec` under `schedule` (mlx_metile.schedule.choose) in `target`'s language."""
    if target not in RENDERERS:
        raise ValueError(f"unknown target {target!r}; known: {sorted(RENDERERS)}")
    program = projection_program(spec)
    bound = bind_meta(program, schedule.meta())
    verify(bound)
    dump("ir", spec.name(), format_program(bound))
    dump("schedule", spec.name(), schedule.describe())
    kernel = lower(bound, schedule, spec)
    kernel.name = f"{spec.name()}_m{schedule.BM}"
    source = RENDERERS[target]().render(kernel)
    dump(target, kernel.name, source)
    return Artifact(target, source, kernel.name, schedule, tuple(kernel.params), kernel.dynamic_shared)


@lru_cache(maxsize=512)
def emulator_object(artifact: Artifact) -> str:
    """Build the MSL artifact for the CPU emulator; the path of its object."""
    from ..emu.build import build_kernel
    from ..emu.translate import translate

    return str(build_kernel(translate(artifact.source, artifact.entry)))


def emulation_enabled() -> bool:
    return current().emulate
