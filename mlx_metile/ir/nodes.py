"""Tile IR values, operations and programs.

A program is run once per *program instance* (a point of its launch grid,
`program_id(axis)`); its values are tiles - n-dimensional blocks with a dtype
and a static shape - or scalars (shape ()). Shapes may name meta-parameters
(e.g. "BM") until a schedule binds them. Broadcasting follows numpy.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

DTYPES = ("f32", "f16", "bf16", "i32", "u32", "u8", "bool")  # u8: buffer elements, cast on loading
FLOAT_DTYPES = ("f32", "f16", "bf16")

Dim = int | str

BINARY_OPS = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "div": "/",
    "floordiv": "/",  # integers only
    "mod": "%",
    "max": "max",
    "min": "min",
    "shr": ">>",
    "shl": "<<",
    "bitand": "&",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "eq": "==",
    "and": "&&",
    "or": "||",
}
COMPARISONS = {"lt", "le", "gt", "ge", "eq"}
LOGICAL = {"and", "or"}
# bitcast: a value's 32 bits read as another dtype of 32 bits (u32 <-> f32)
BITCASTS = {("u32", "f32"), ("f32", "u32")}
UNARY_OPS = {"neg", "exp", "tanh", "erf", "sigmoid", "silu", "gelu", "gelu_approx"}

_ids = itertools.count()


@dataclass(frozen=True)
class TileType:
    dtype: str
    shape: tuple[Dim, ...] = ()

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}")

    @property
    def is_scalar(self) -> bool:
        return self.shape == ()

    def __str__(self) -> str:
        return self.dtype if self.is_scalar else f"{self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(eq=False)
class Value:
    type: TileType
    name: str = ""
    id: int = field(default_factory=lambda: next(_ids))

    def __repr__(self) -> str:
        return f"%{self.name or self.id}"


@dataclass(frozen=True)
class Param:
    """A kernel argument: a buffer (`dtype` elements) or an i32 scalar."""

    name: str
    dtype: str
    kind: str  # "buffer" | "scalar"
    output: bool = False


@dataclass(eq=False)
class Op:
    kind: str
    args: tuple[Value, ...]
    attrs: dict
    result: Value | None


@dataclass(eq=False)
class For:
    """for iv in range(start, stop, step), carrying `init` values through `carried`.

    The body ends by yielding new carried values; `results` hold the final ones."""

    iv: Value
    start: Value
    stop: Value
    step: Value
    init: tuple[Value, ...]
    carried: tuple[Value, ...]
    body: list[Op | For]
    yields: tuple[Value, ...]
    results: tuple[Value, ...]


@dataclass(eq=False)
class Program:
    name: str
    params: list[Param]
    body: list[Op | For]
    grid_rank: int
    meta: dict[str, int | None]  # meta-parameters; None until bound
    param_values: dict[str, Value]  # scalar params as values

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def buffers(self) -> list[Param]:
        return [p for p in self.params if p.kind == "buffer"]

    @property
    def scalars(self) -> list[Param]:
        return [p for p in self.params if p.kind == "scalar"]


def walk(body: list[Op | For]):
    """Every op of a body, loops included, in program order."""
    for node in body:
        if isinstance(node, For):
            yield node
            yield from walk(node.body)
        else:
            yield node


def broadcast_shapes(a: tuple[Dim, ...], b: tuple[Dim, ...]) -> tuple[Dim, ...]:
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + a
    b = (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise ValueError(f"shapes {a} and {b} do not broadcast")
    return tuple(out)
