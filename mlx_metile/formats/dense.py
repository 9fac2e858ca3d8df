"""Dense weights: [N, K] float32 / float16 / bfloat16, as `nn.Linear` stores them."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from ..ir.builder import Builder, T
from .dtypes import float_dtype, require_array
from .format import WeightFormat

MODE = "dense"


def check(w, what: str, K: int | None = None) -> tuple[int, int]:
    """(N, K) of a dense weight; TypeError / ValueError naming `what`."""
    w = require_array(w, what)
    float_dtype(w, what)
    if w.ndim != 2:
        raise ValueError(f"{what}: expected a 2-D [N, K] array, got shape {tuple(w.shape)}")
    if K is not None and w.shape[1] != K:
        raise ValueError(f"{what}: K={w.shape[1]} does not match x's last dimension {K}")
    return w.shape[0], w.shape[1]


def declare(b: Builder, i: int, wf: WeightFormat) -> None:
    b.buffer(f"w{i}", wf.dtype)


def tile(b: Builder, i: int, wf: WeightFormat, local_cols: T, col_ok: T, ks: T, k_ok: T, K: T) -> T:
    """Element (n, k) of weight i as f32, zero where masked: a [BN, BK] tile."""
    mask = col_ok[:, None] & k_ok[None, :]
    return b.load(f"w{i}", local_cols[:, None] * K + ks[None, :], mask).to("f32")


def inputs(w: mx.array) -> list[mx.array]:
    return [w]


def product(x: mx.array, w: mx.array) -> mx.array:
    """The stock MLX product x @ w.T."""
    return x @ w.T


def reference(w: mx.array) -> np.ndarray:
    """The weight as float64."""
    return np.array(w.astype(mx.float32), np.float64)
