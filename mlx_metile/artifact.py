"""A compiled kernel as the primitive holds it: target, source, entry point, launch rule, the
order of its arguments, and its route - how the Metal path loads it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property

from .codegen.ast import KernelParam
from .schedule import Schedule

# How a Metal kernel is loaded (src/metal/eval_metal.cpp): "msl" its source, compiled by Metal;
# "metallib" `library`, an AIR metallib's bytes (mlx_metile.air); "archive" `archive`, a patched
# binary archive holding the pipeline of `library`'s entry (mlx_metile.native). Other targets' route
# is their source's language.
METAL_ROUTES = ("msl", "metallib", "archive")


@dataclass(frozen=True, eq=False)
class Artifact:
    target: str
    source: str
    entry: str
    schedule: Schedule
    params: tuple[KernelParam, ...]  # buffer slots in order: buffers and i32 scalars
    dynamic_shared: int = 0  # CUDA: bytes of dynamic shared memory per block, given at launch
    route: str = ""  # "" the source's language (the target); "metallib" or "archive" (METAL_ROUTES)
    library: bytes = b""  # routes metallib and archive: the metallib
    archive: bytes = b""  # route archive: the binary archive

    def __post_init__(self):
        if not self.route:
            object.__setattr__(self, "route", self.target)
        if self.route == "metallib" and not self.library:
            raise ValueError(f"{self.entry}: route metallib without a metallib")
        if self.route == "archive" and not (self.library and self.archive):
            raise ValueError(f"{self.entry}: route archive needs the archive and the metallib it belongs to")

    @cached_property
    def key(self) -> str:
        h = hashlib.sha256(f"{self.target}\0{self.entry}\0{self.source}".encode())
        if self.route != self.target:  # (source artifacts keep the keys they always had)
            h.update(f"\0{self.route}\0".encode() + hashlib.sha256(self.library).digest())
            h.update(hashlib.sha256(self.archive).digest())
        return h.hexdigest()[:24]

    @property
    def threads_per_group(self) -> tuple[int, int, int]:
        return (self.schedule.threads, 1, 1)

    def grid(self, rows: int, cols: int) -> tuple[int, int, int]:
        return self.schedule.grid(rows, cols)
