"""MLX dtypes as the tile IR names them, and the argument checks every format shares."""

from __future__ import annotations

import mlx.core as mx

DTYPES = {mx.float32: "f32", mx.float16: "f16", mx.bfloat16: "bf16"}


def require_array(a, what: str) -> mx.array:
    if not isinstance(a, mx.array):
        raise TypeError(f"{what}: expected an mlx.core.array, got {type(a).__name__}")
    return a


def float_dtype(a: mx.array, what: str) -> str:
    if a.dtype not in DTYPES:
        raise TypeError(f"{what}: dtype {a.dtype} is not supported; use float32, float16 or bfloat16")
    return DTYPES[a.dtype]
