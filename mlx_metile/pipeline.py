"""The compiler pipeline: spec + Schedule -> tile program -> thread-level AST -> source -> Artifact.

Each stage is a plain function of the last one's value; the whole is cached per (spec, schedule,
target language), the Schedule holding every choice (mlx_metile.schedule.choose makes it) and the
target's limits. MLX_METILE_DEBUG=ir,schedule,msl,cuda,air prints the stages to stderr.
"""

from __future__ import annotations

import sys
from functools import lru_cache

from .artifact import Artifact
from .codegen import RENDERERS
from .codegen.ast import KernelDef
from .ir import bind_meta, format_program, verify
from .kernels import projection_program
from .lower import lower
from .schedule import Schedule
from .settings import current
from .spec import ProjectionSpec


def dump(stage: str, title: str, text: str) -> None:
    if current().debugging(stage):
        print(f"=== mlx_metile {stage}: {title} ===\n{text}", file=sys.stderr)


def lower_projection(spec: ProjectionSpec, schedule: Schedule) -> KernelDef:
    """The thread-level kernel of `spec` under `schedule` (tile program, bound, verified, lowered)."""
    program = projection_program(spec)
    bound = bind_meta(program, schedule.meta())
    verify(bound)
    dump("ir", spec.name(), format_program(bound))
    dump("schedule", spec.name(), schedule.describe())
    kernel = lower(bound, schedule, spec)
    kind = f"_{schedule.kind}" if schedule.nax else ""  # the simdgroup kernels' names stay as they were
    kernel.name = f"{spec.name()}{kind}_m{schedule.BM}"
    return kernel


@lru_cache(maxsize=512)
def compile_projection(spec: ProjectionSpec, schedule: Schedule, target: str = "msl") -> Artifact:
    """The kernel of `spec` under `schedule` in `target`'s language ("msl", "cuda", "air": LLVM assembly)."""
    if target not in RENDERERS:
        raise ValueError(f"unknown target {target!r}; known: {sorted(RENDERERS)}")
    kernel = lower_projection(spec, schedule)
    source = RENDERERS[target]().render(kernel)
    dump(target, kernel.name, source)
    return Artifact(target, source, kernel.name, schedule, tuple(kernel.params), kernel.dynamic_shared)
