"""The reference interpreter: defines what a tile program means.

Runs every program instance of the grid in order with numpy. Buffers are
numpy arrays (bf16 buffers as uint16 bit patterns); outputs are written in
place. Loads outside their buffer with the mask on raise IndexError.
"""

from __future__ import annotations

import math

import numpy as np

from .nodes import For, Op, Program
from .numerics import bf16_bits_to_f32, f32_to_bf16_bits, round_to

_NP_INT = {"i32": np.int32, "u32": np.uint32, "u8": np.uint8, "bool": np.bool_}
_BITS = {"u32": np.uint32, "f32": np.float32}


def _as_dtype(x, dtype: str) -> np.ndarray:
    if dtype in _NP_INT:
        return np.asarray(x).astype(_NP_INT[dtype])
    return round_to(np.asarray(x, dtype=np.float32), dtype)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(np.float32)


def _unary(op: str, x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(over="ignore"):
        if op == "neg":
            return -x
        if op == "exp":
            return np.exp(x)
        if op == "tanh":
            return np.tanh(x)
        if op == "erf":
            return _erf(x)
        if op == "sigmoid":
            return 1.0 / (1.0 + np.exp(-x))
        if op == "silu":
            return x / (1.0 + np.exp(-x))
        if op == "gelu":
            return 0.5 * x * (1.0 + _erf(x * np.float32(0.70710678118654752)))
        if op == "gelu_approx":
            return 0.5 * x * (1.0 + np.tanh(np.float32(0.79788456080286536) * (x + np.float32(0.044715) * x * x * x)))
    raise ValueError(op)


def _binary(op: str, a, b, dtype: str):
    if dtype in ("f32", "f16", "bf16") and op not in ("lt", "le", "gt", "ge", "eq"):
        a = np.asarray(a, dtype=np.float32)
        b = np.asarray(b, dtype=np.float32)
    ops = {
        "add": lambda: a + b,
        "sub": lambda: a - b,
        "mul": lambda: a * b,
        "div": lambda: a / b,
        "floordiv": lambda: np.floor_divide(a, b),
        "mod": lambda: np.mod(a, b),
        "max": lambda: np.maximum(a, b),
        "min": lambda: np.minimum(a, b),
        "shr": lambda: np.right_shift(a, b),
        "shl": lambda: np.left_shift(a, b),
        "bitand": lambda: np.bitwise_and(a, b),
        "lt": lambda: a < b,
        "le": lambda: a <= b,
        "gt": lambda: a > b,
        "ge": lambda: a >= b,
        "eq": lambda: a == b,
        "and": lambda: np.logical_and(a, b),
        "or": lambda: np.logical_or(a, b),
    }
    with np.errstate(over="ignore", invalid="ignore"):  # IEEE results: inf, NaN
        return ops[op]()


def interpret(program: Program, grid: tuple[int, ...], buffers: dict[str, np.ndarray], scalars: dict[str, int]) -> None:
    flat = {}
    for p in program.buffers:
        if p.name not in buffers:
            raise ValueError(f"interpret: buffer {p.name!r} not given")
        arr = buffers[p.name]
        if not arr.flags.c_contiguous:
            raise ValueError(f"interpret: buffer {p.name!r} must be C-contiguous")
        flat[p.name] = arr.reshape(-1)
    grid = tuple(grid) + (1,) * (program.grid_rank - len(grid))
    for pid in np.ndindex(*grid):
        env = {program.param_values[s.name].id: np.int32(scalars[s.name]) for s in program.scalars}
        _run(program, program.body, env, flat, pid)


def _read(buf: np.ndarray, dtype: str, idx: np.ndarray) -> np.ndarray:
    data = buf[idx]
    if dtype == "bf16":
        return bf16_bits_to_f32(data)
    if dtype in ("f16", "f32"):
        return np.asarray(data, dtype=np.float32)
    return data


def _run(program: Program, body, env: dict, flat: dict, pid) -> None:
    for n in body:
        if isinstance(n, For):
            carried = [env[v.id] for v in n.init]
            start, stop, step = (int(env[v.id]) for v in (n.start, n.stop, n.step))
            for k in range(start, stop, step):
                env[n.iv.id] = np.int32(k)
                for c, val in zip(n.carried, carried):
                    env[c.id] = val
                _run(program, n.body, env, flat, pid)
                carried = [env[y.id] for y in n.yields]
            for r, val in zip(n.results, carried):
                env[r.id] = val
            continue
        _op(program, n, env, flat, pid)


def _op(program: Program, n: Op, env: dict, flat: dict, pid) -> None:
    a = [env[v.id] for v in n.args]
    dtype = n.result.type.dtype if n.result is not None else None
    k = n.kind
    if k == "const":
        r = _as_dtype(n.attrs["value"], dtype)
    elif k == "program_id":
        r = np.int32(pid[n.attrs["axis"]])
    elif k == "arange":
        r = np.arange(n.attrs["n"], dtype=np.int32)
    elif k == "full":
        r = _as_dtype(np.full(n.attrs["shape"], n.attrs["value"]), dtype)
    elif k == "binary":
        r = _as_dtype(_binary(n.attrs["op"], a[0], a[1], dtype), dtype)
    elif k == "unary":
        r = _as_dtype(_unary(n.attrs["op"], a[0]), dtype)
    elif k == "select":
        r = _as_dtype(np.where(a[0], a[1], a[2]), dtype)
    elif k == "cast":
        src = n.args[0].type.dtype
        x = a[0]
        if dtype in _NP_INT and src in ("f32", "f16", "bf16"):
            x = np.trunc(x)
        r = _as_dtype(x, dtype)
    elif k == "bitcast":
        r = np.ascontiguousarray(a[0], dtype=_BITS[n.args[0].type.dtype]).view(_BITS[dtype])
    elif k == "expand_dims":
        r = np.expand_dims(a[0], n.attrs["axis"])
    elif k == "trans":
        r = np.ascontiguousarray(a[0].T)
    elif k == "reduce":
        fn = {"sum": np.sum, "max": np.max, "min": np.min}[n.attrs["op"]]
        x = a[0] if dtype in _NP_INT else np.asarray(a[0], np.float32)
        r = _as_dtype(fn(x, axis=n.attrs["axis"]), dtype)
    elif k == "dot":
        prod = np.asarray(a[0], np.float32) @ np.asarray(a[1], np.float32)
        r = (np.asarray(a[2], np.float32) + prod).astype(np.float32)
    elif k == "load":
        p = program.param(n.attrs["buffer"])
        buf = flat[p.name]
        offsets = np.asarray(a[0], dtype=np.int64)
        mask = np.broadcast_to(a[1], offsets.shape) if len(a) > 1 else np.ones(offsets.shape, bool)
        live = offsets[mask]
        if live.size and (live.min() < 0 or live.max() >= buf.size):
            raise IndexError(
                f"load from {p.name!r} at offset {int(live.max() if live.max() >= buf.size else live.min())} "
                f"outside its {buf.size} elements"
            )
        vals = _read(buf, p.dtype, np.where(mask, offsets, 0))
        r = _as_dtype(np.where(mask, vals, n.attrs["other"]), dtype)
    elif k == "store":
        p = program.param(n.attrs["buffer"])
        buf = flat[p.name]
        offsets = np.asarray(a[0], dtype=np.int64)
        value = np.broadcast_to(a[1], offsets.shape)
        mask = np.broadcast_to(a[2], offsets.shape) if len(a) > 2 else np.ones(offsets.shape, bool)
        live = offsets[mask]
        if live.size and (live.min() < 0 or live.max() >= buf.size):
            raise IndexError(f"store to {p.name!r} outside its {buf.size} elements")
        vals = value[mask]
        if p.dtype == "bf16":
            buf[live] = f32_to_bf16_bits(np.asarray(vals, np.float32))
        elif p.dtype in ("f16", "f32"):
            buf[live] = np.asarray(round_to(vals, p.dtype), dtype=buf.dtype)
        else:
            buf[live] = vals
        return
    else:
        raise ValueError(f"interpret: unknown op {k!r}")
    env[n.result.id] = r
