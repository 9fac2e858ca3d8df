"""Writing tile programs in Python: `Builder` records ops, `T` wraps values
so that `a + b`, `rows[:, None] < M` and friends read like the math."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager

from .nodes import (
    BITCASTS,
    COMPARISONS,
    FLOAT_DTYPES,
    LOGICAL,
    UNARY_OPS,
    Dim,
    For,
    Op,
    Param,
    Program,
    TileType,
    Value,
    broadcast_shapes,
)


def _promote(a: str, b: str) -> str:
    if a == b:
        return a
    if "f32" in (a, b):
        return "f32"
    for f in FLOAT_DTYPES:
        if f in (a, b):
            return f
    if "u32" in (a, b):
        return "u32"
    return "i32"


class Meta(str):
    """A meta-parameter's name; usable as a tile size and as an i32 value."""


class T:
    """A value being built; operators append ops to the builder."""

    def __init__(self, b: Builder, v: Value):
        self.b = b
        self.v = v

    @property
    def type(self) -> TileType:
        return self.v.type

    @property
    def shape(self) -> tuple[Dim, ...]:
        return self.v.type.shape

    @property
    def dtype(self) -> str:
        return self.v.type.dtype

    def _bin(self, op: str, other, swap: bool = False) -> T:
        o = self.b.lift(other, self.dtype)
        a, c = (o, self) if swap else (self, o)
        return self.b.binary(op, a, c)

    def __add__(self, o):
        return self._bin("add", o)

    def __radd__(self, o):
        return self._bin("add", o, True)

    def __sub__(self, o):
        return self._bin("sub", o)

    def __rsub__(self, o):
        return self._bin("sub", o, True)

    def __mul__(self, o):
        return self._bin("mul", o)

    def __rmul__(self, o):
        return self._bin("mul", o, True)

    def __truediv__(self, o):
        return self._bin("div", o)

    def __floordiv__(self, o):
        return self._bin("floordiv", o)

    def __mod__(self, o):
        return self._bin("mod", o)

    def __rshift__(self, o):
        return self._bin("shr", o)

    def __lshift__(self, o):
        return self._bin("shl", o)

    def __and__(self, o):
        return self._bin("and" if self.dtype == "bool" else "bitand", o)

    def __or__(self, o):
        return self._bin("or", o)

    def __lt__(self, o):
        return self._bin("lt", o)

    def __le__(self, o):
        return self._bin("le", o)

    def __gt__(self, o):
        return self._bin("gt", o)

    def __ge__(self, o):
        return self._bin("ge", o)

    def __neg__(self):
        return self.b.unary("neg", self)

    def __getitem__(self, index) -> T:
        """Only `[:, None]` / `[None, :]` style axis insertion."""
        index = index if isinstance(index, tuple) else (index,)
        out, axis = self, 0
        for item in index:
            if item is None:
                out = self.b.expand_dims(out, axis)
            elif item != slice(None):
                raise TypeError("tile indexing supports only ':' and None")
            axis += 1
        return out

    @property
    def T(self) -> T:
        return self.b.trans(self)

    def to(self, dtype: str) -> T:
        return self.b.cast(self, dtype)


class Builder:
    def __init__(self, name: str, grid_rank: int = 2):
        self.name = name
        self.params: list[Param] = []
        self.param_values: dict[str, Value] = {}
        self.meta: dict[str, int | None] = {}
        self.grid_rank = grid_rank
        self._stack: list[list[Op | For]] = [[]]

    # -- declarations ------------------------------------------------------
    def buffer(self, name: str, dtype: str, *, output: bool = False) -> str:
        self.params.append(Param(name, dtype, "buffer", output))
        return name

    def scalar(self, name: str) -> T:
        self.params.append(Param(name, "i32", "scalar"))
        v = Value(TileType("i32"), name)
        self.param_values[name] = v
        return T(self, v)

    def meta_param(self, name: str) -> Meta:
        self.meta[name] = None
        return Meta(name)

    # -- op emission ---------------------------------------------------------
    def _emit(self, kind: str, args: Sequence[T], attrs: dict, rtype: TileType | None, name: str = "") -> T | None:
        result = Value(rtype, name) if rtype is not None else None
        self._stack[-1].append(Op(kind, tuple(a.v for a in args), attrs, result))
        return T(self, result) if result is not None else None

    def lift(self, x, like_dtype: str = "i32") -> T:
        if isinstance(x, T):
            return x
        if isinstance(x, Meta):
            return self._emit("meta", (), {"name": str(x)}, TileType("i32"))
        if isinstance(x, bool):
            return self.const(x, "bool")
        if isinstance(x, int):
            return self.const(x, like_dtype if like_dtype in ("i32", "u32") or like_dtype in FLOAT_DTYPES else "i32")
        if isinstance(x, float):
            return self.const(x, like_dtype if like_dtype in FLOAT_DTYPES else "f32")
        raise TypeError(f"cannot use {type(x).__name__} in a tile expression")

    def const(self, value, dtype: str) -> T:
        return self._emit("const", (), {"value": value}, TileType(dtype))

    def program_id(self, axis: int) -> T:
        if not 0 <= axis < self.grid_rank:
            raise ValueError(f"program_id axis {axis} outside the grid rank {self.grid_rank}")
        return self._emit("program_id", (), {"axis": axis}, TileType("i32"), f"pid{axis}")

    def arange(self, n: Dim) -> T:
        return self._emit("arange", (), {"n": n}, TileType("i32", (n,)))

    def zeros(self, shape: tuple[Dim, ...], dtype: str = "f32") -> T:
        return self._emit("full", (), {"value": 0, "shape": tuple(shape)}, TileType(dtype, tuple(shape)))

    def binary(self, op: str, a: T, b: T) -> T:
        shape = broadcast_shapes(a.shape, b.shape)
        if op in COMPARISONS or op in LOGICAL:
            dtype = "bool"
        else:
            dtype = _promote(a.dtype, b.dtype)
        return self._emit("binary", (a, b), {"op": op}, TileType(dtype, shape))

    def unary(self, op: str, a: T) -> T:
        if op not in UNARY_OPS:
            raise ValueError(f"unknown unary op {op!r}")
        return self._emit("unary", (a,), {"op": op}, a.type)

    def select(self, cond: T, a, b) -> T:
        a, b = self.lift(a), self.lift(b)
        shape = broadcast_shapes(broadcast_shapes(cond.shape, a.shape), b.shape)
        return self._emit("select", (cond, a, b), {}, TileType(_promote(a.dtype, b.dtype), shape))

    def cast(self, a: T, dtype: str) -> T:
        return self._emit("cast", (a,), {"dtype": dtype}, TileType(dtype, a.shape))

    def bitcast(self, a: T, dtype: str) -> T:
        """a's bits as `dtype` (u32 <-> f32): e.g. a float assembled from its fields."""
        if (a.dtype, dtype) not in BITCASTS:
            raise ValueError(f"bitcast: {a.dtype} to {dtype} is not one of {sorted(BITCASTS)}")
        return self._emit("bitcast", (a,), {"dtype": dtype}, TileType(dtype, a.shape))

    def expand_dims(self, a: T, axis: int) -> T:
        shape = list(a.shape)
        shape.insert(axis, 1)
        return self._emit("expand_dims", (a,), {"axis": axis}, TileType(a.dtype, tuple(shape)))

    def trans(self, a: T) -> T:
        if len(a.shape) != 2:
            raise ValueError("trans takes a 2-D tile")
        return self._emit("trans", (a,), {}, TileType(a.dtype, (a.shape[1], a.shape[0])))

    def load(self, buffer: str, offsets: T, mask: T | None = None, other: float | int = 0) -> T:
        p = self._buffer(buffer)
        args = (offsets,) if mask is None else (offsets, mask)
        return self._emit("load", args, {"buffer": buffer, "other": other}, TileType(p.dtype, offsets.shape))

    def store(self, buffer: str, offsets: T, value: T, mask: T | None = None) -> None:
        self._buffer(buffer)
        args = (offsets, value) if mask is None else (offsets, value, mask)
        self._emit("store", args, {"buffer": buffer}, None)

    def reduce(self, op: str, a: T, axis: int) -> T:
        """Sum / max / min of a tile over one axis (the axis is removed)."""
        if op not in ("sum", "max", "min"):
            raise ValueError(f"reduce: op must be sum, max or min, got {op!r}")
        if not 0 <= axis < len(a.shape):
            raise ValueError(f"reduce: axis {axis} outside a rank-{len(a.shape)} tile")
        shape = a.shape[:axis] + a.shape[axis + 1 :]
        return self._emit("reduce", (a,), {"op": op, "axis": axis}, TileType(a.dtype, shape))

    def dot(self, a: T, b: T, acc: T) -> T:
        """acc + a @ b with f32 accumulation; a [M, K], b [K, N], acc [M, N] f32."""
        if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
            raise ValueError(f"dot: shapes {a.shape} and {b.shape} do not multiply")
        if acc.shape != (a.shape[0], b.shape[1]) or acc.dtype != "f32":
            raise ValueError(f"dot: accumulator must be f32[{a.shape[0]}, {b.shape[1]}], got {acc.type}")
        return self._emit("dot", (a, b, acc), {}, acc.type)

    def _buffer(self, name: str) -> Param:
        for p in self.params:
            if p.name == name and p.kind == "buffer":
                return p
        raise KeyError(f"no buffer named {name!r}")

    # -- loops -------------------------------------------------------------
    @contextmanager
    def loop(self, start, stop, step, init: Sequence[T]):
        """with b.loop(0, K, BK, init=[acc]) as lp: ...; lp.yield_(new_acc)"""
        start, stop, step = self.lift(start), self.lift(stop), self.lift(step)
        iv = Value(TileType("i32"), "k0")
        carried = tuple(Value(v.type, f"c{i}") for i, v in enumerate(init))
        loop = _Loop(self, iv, carried)
        self._stack.append([])
        yield loop
        body = self._stack.pop()
        if loop.yielded is None or len(loop.yielded) != len(init):
            raise ValueError("a loop must yield one value per carried value")
        results = tuple(Value(v.type, f"r{i}") for i, v in enumerate(init))
        node = For(
            iv,
            start.v,
            stop.v,
            step.v,
            tuple(v.v for v in init),
            carried,
            body,
            tuple(v.v for v in loop.yielded),
            results,
        )
        self._stack[-1].append(node)
        loop.results = [T(self, r) for r in results]

    def build(self) -> Program:
        if len(self._stack) != 1:
            raise ValueError("unterminated loop")
        return Program(
            self.name, list(self.params), self._stack[0], self.grid_rank, dict(self.meta), dict(self.param_values)
        )


class _Loop:
    def __init__(self, b: Builder, iv: Value, carried: tuple[Value, ...]):
        self.iv = T(b, iv)
        self.carried = [T(b, c) for c in carried]
        self.yielded: list[T] | None = None
        self.results: list[T] = []

    def yield_(self, *values: T) -> None:
        self.yielded = list(values)
