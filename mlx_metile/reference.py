"""The stock MLX composition each mlx_metile op replaces. Used as the fallback
where no kernel path exists for a device, and as the baseline in benchmarks."""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

from . import formats
from .formats import dequantize_exact

__all__ = ["EPILOGUE_FNS", "dequantize_exact", "finish", "fused_reference"]


def _silu(v: mx.array) -> mx.array:
    return v * mx.sigmoid(v)


def _gelu(v: mx.array) -> mx.array:
    return 0.5 * v * (1.0 + mx.erf(v * 0.70710678118654752))


def _gelu_approx(v: mx.array) -> mx.array:
    return 0.5 * v * (1.0 + mx.tanh(0.79788456080286536 * (v + 0.044715 * v * v * v)))


EPILOGUE_FNS = {"silu": _silu, "gelu": _gelu, "gelu_approx": _gelu_approx}


def fused_reference(
    x: mx.array,
    weights: Sequence,
    biases: Sequence[mx.array | None],
    epilogue: str | None,
    residual: mx.array | None,
) -> list[mx.array]:
    """Separate projections, then the epilogue, in the output dtype as MLX users write it."""
    zs = [formats.product(x, w) for w in weights]  # x @ W.T as stock MLX computes it
    return finish(zs, biases, epilogue, residual)


def finish(
    zs: Sequence[mx.array], biases: Sequence[mx.array | None], epilogue: str | None, residual: mx.array | None
) -> list[mx.array]:
    """The products' biases, epilogue and residual, as the stock composition applies them."""
    zs = [z + b if b is not None else z for z, b in zip(zs, biases)]
    if epilogue == "swiglu":
        outs = [_silu(zs[0]) * zs[1]]
    elif epilogue is not None:
        outs = [EPILOGUE_FNS[epilogue](z) for z in zs]
    else:
        outs = list(zs)
    if residual is not None:
        outs = [outs[0] + residual]
    return outs
