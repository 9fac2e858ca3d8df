"""The stock MLX composition each mlx_metile op replaces. Used as the fallback
where no kernel path exists for a device, and as the baseline in benchmarks."""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
import numpy as np


def _silu(v: mx.array) -> mx.array:
    return v * mx.sigmoid(v)


def _gelu(v: mx.array) -> mx.array:
    return 0.5 * v * (1.0 + mx.erf(v * 0.70710678118654752))


def _gelu_approx(v: mx.array) -> mx.array:
    return 0.5 * v * (1.0 + mx.tanh(0.79788456080286536 * (v + 0.044715 * v * v * v)))


EPILOGUE_FNS = {"silu": _silu, "gelu": _gelu, "gelu_approx": _gelu_approx}


def project(x: mx.array, weight) -> mx.array:
    """x @ W.T for a dense array or a QuantizedWeight."""
    if isinstance(weight, mx.array):
        return x @ weight.T
    return mx.quantized_matmul(
        x, weight.w, weight.scales, weight.biases, transpose=True, group_size=weight.group_size, bits=weight.bits
    )


def fused_reference(
    x: mx.array,
    weights: Sequence,
    biases: Sequence[mx.array | None],
    epilogue: str | None,
    residual: mx.array | None,
) -> list[mx.array]:
    """Separate projections, then the epilogue, in the output dtype as MLX users write it."""
    zs = []
    for w, b in zip(weights, biases):
        z = project(x, w)
        zs.append(z + b if b is not None else z)
    if epilogue == "swiglu":
        outs = [_silu(zs[0]) * zs[1]]
    elif epilogue is not None:
        outs = [EPILOGUE_FNS[epilogue](z) for z in zs]
    else:
        outs = zs
    if residual is not None:
        outs = [outs[0] + residual]
    return outs


def dequantize_exact(w: mx.array, scales: mx.array, biases: mx.array, group_size: int, bits: int) -> np.ndarray:
    """MLX affine-quantized weights as float64: scales * q + biases, without rounding."""
    words = np.array(w).astype(np.uint64)
    per_word = 32 // bits
    shifts = (np.arange(per_word, dtype=np.uint64) * bits)[None, None, :]
    q = ((words[:, :, None] >> shifts) & ((1 << bits) - 1)).reshape(words.shape[0], -1).astype(np.float64)
    s = np.repeat(np.array(scales.astype(mx.float32), np.float64), group_size, axis=1)
    b = np.repeat(np.array(biases.astype(mx.float32), np.float64), group_size, axis=1)
    return s * q + b
