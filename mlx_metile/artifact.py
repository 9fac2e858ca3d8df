"""A compiled kernel as the primitive holds it: target, source, entry point,
launch rule and the order of its arguments."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property

from .codegen.ast import KernelParam
from .schedule import Schedule


@dataclass(frozen=True, eq=False)
class Artifact:
    target: str
    source: str
    entry: str
    schedule: Schedule
    params: tuple[KernelParam, ...]  # buffer slots in order: buffers and i32 scalars
    dynamic_shared: int = 0  # CUDA: bytes of dynamic shared memory per block, given at launch

    @cached_property
    def key(self) -> str:
        return hashlib.sha256(f"{self.target}\0{self.entry}\0{self.source}".encode()).hexdigest()[:24]

    @property
    def threads_per_group(self) -> tuple[int, int, int]:
        return (self.schedule.threads, 1, 1)

    def grid(self, rows: int, cols: int) -> tuple[int, int, int]:
        return self.schedule.grid(rows, cols)
