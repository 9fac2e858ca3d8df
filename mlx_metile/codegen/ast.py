"""The thread-level program every renderer prints: C-like statements whose
expressions are text in a neutral notation. Target-specific pieces are calls
written `@name(...)` (math, conversions, SIMD-group reductions, thread
indices) that each dialect maps through a table."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class KernelParam:
    name: str
    kind: str  # "buffer" | "scalar"
    dtype: str  # IR dtype of the elements (scalars: i32)
    output: bool = False


@dataclass
class Decl:
    dtype: str  # IR dtype, or "int"
    name: str
    init: str | None = None
    dims: tuple[int, ...] = ()
    const: bool = False
    shared: bool = False  # threadgroup (MSL) / __shared__ (CUDA) storage


@dataclass
class Assign:
    target: str
    value: str


@dataclass
class Loop:
    var: str
    start: str
    cond: str  # loop continues while this holds
    step: str
    body: list = field(default_factory=list)
    unroll: bool = False


@dataclass
class If:
    cond: str
    body: list = field(default_factory=list)


@dataclass
class Comment:
    text: str


@dataclass
class Barrier:
    """Every thread of the threadgroup arrives before any continues; their
    threadgroup-memory writes are visible after it."""


@dataclass
class Raw:
    """Target-specific statements written out by a target-specific lowering
    (the CUDA tensor-core mainloop); rendered verbatim, line by line."""

    lines: list[str]


Stmt = Decl | Assign | Loop | If | Comment | Barrier | Raw


@dataclass
class KernelDef:
    name: str
    params: list[KernelParam]
    body: list[Stmt]
    helpers: list[str]  # names of preamble helpers used (e.g. "erf", "silu")
    threads_per_group: int
    notes: list[str] = field(default_factory=list)  # schedule summary for the header comment
    min_groups: int = 0  # CUDA: blocks per SM to fit (caps registers), 0 for none
    dynamic_shared: int = 0  # CUDA: bytes of dynamic shared memory each block is launched with
