"""Our projection kernels as AIR candidates: the schedule's thread-level AST printed by the AIR
dialect (mlx_metile.codegen.air) in one of its forms, assembled by LLVM 14 and run on the CPU
through this room's executor - the same kernel, schedule and launch as the MSL artifact of the
schedule, so the two are compared bit for bit."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

from ..codegen.air import AIR_VERSION, LANGUAGE_VERSION, AirForm, AIRRenderer
from ..codegen.ast import KernelParam
from ..pipeline import dump, lower_projection
from ..schedule import Schedule
from ..spec import ProjectionSpec
from .library import Function, Library
from .llvm14 import assemble
from .metallib import Metallib


@dataclass(frozen=True, eq=False)
class AirCandidate:
    """One projection kernel as an AIR module: its assembly, bitcode, entry and launch rule."""

    spec: ProjectionSpec
    schedule: Schedule
    form: AirForm
    entry: str
    text: str  # LLVM 14 assembly
    params: tuple[KernelParam, ...]

    @cached_property
    def bitcode(self) -> bytes:
        return assemble(self.text, self.entry)

    @cached_property
    def function(self) -> Function:
        """The kernel compiled for the CPU (the AIR executor), dispatched as the MSL artifact is."""
        return Library.of_modules([self.bitcode]).function(self.entry)

    def metallib(self) -> Metallib:
        """A metallib holding this kernel, versions as its module declares them."""
        return Metallib.of_bitcode(
            [(self.entry, self.bitcode)], air_version=AIR_VERSION[:2], language=LANGUAGE_VERSION[1:3]
        )

    @property
    def threads_per_group(self) -> tuple[int, int, int]:
        return (self.schedule.threads, 1, 1)

    def grid(self, rows: int, cols: int) -> tuple[int, int, int]:
        return self.schedule.grid(rows, cols)


# The AIR variants that enter a tournament (mlx_metile.tune), by name: the MSL's spelling, then each
# permission or spelling the seed asks to compare (docs/AIR.md's forms table says what each changes).
FORMS: dict[str, AirForm] = {
    "air": AirForm(),
    "air:contract": AirForm(fast_math="contract"),
    "air:fast": AirForm(fast_math="fast"),
    "air:align-element": AirForm(align="element"),
    "air:load-metadata": AirForm(load_metadata=True),
    "air:unpack-vector": AirForm(unpack="vector"),
    "air:convert-llvm": AirForm(convert="llvm"),
    "air:convert-bits": AirForm(convert="bits"),
}


def form_named(name: str) -> AirForm:
    if name not in FORMS:
        raise ValueError(f"unknown AIR form {name!r}; known: {', '.join(FORMS)}")
    return FORMS[name]


def distinct_forms(spec: ProjectionSpec, schedule: Schedule) -> list[str]:
    """The names of FORMS whose AIR of (spec, schedule) differs from every earlier one's (a dense
    kernel's unpack and convert forms print the same module as the plain one)."""
    seen: set[str] = set()
    out = []
    for name, form in FORMS.items():
        text = air_candidate(spec, schedule, form).text
        if text not in seen:
            seen.add(text)
            out.append(name)
    return out


@lru_cache(maxsize=128)
def air_candidate(spec: ProjectionSpec, schedule: Schedule, form: AirForm | None = None) -> AirCandidate:
    """The kernel of `spec` under `schedule` as AIR in `form` (default: the MSL's spelling)."""
    form = form or AirForm()
    kernel = lower_projection(spec, schedule)
    text = AIRRenderer(form).render(kernel)
    dump("air", kernel.name, text)
    return AirCandidate(spec, schedule, form, kernel.name, text, tuple(kernel.params))
