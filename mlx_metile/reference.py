"""The stock MLX composition each mlx_metile op replaces. Used as the fallback
where no kernel path exists for a device, and as the baseline in benchmarks."""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

from . import formats
from .formats import dequantize_exact

__all__ = ["EPILOGUE_FNS", "StockPlan", "dequantize_exact", "finish", "fused_reference"]


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


class StockPlan:
    """A call shape a tuned decision sends to the stock composition, kept by the dispatch as a
    launch plan is (CUDA), so that the next such call replays it without mlx-metile's checks -
    as stock MLX would run it. x and the residual are cast to the output dtype first, as the
    checked path casts them."""

    def __init__(self, weights: Sequence, biases: Sequence[mx.array | None], epilogue: str | None, out_dtype):
        self.epilogue, self.out_dtype = epilogue, out_dtype
        # per weight: how many arrays it has among the flat inputs, whether a bias follows, and a
        # weight of the same format to rebuild from them
        self.layout = [(len(formats.inputs(w)), b is not None, w) for w, b in zip(weights, biases)]

    def run(self, x, weights, biases, residual, stream=None, norm=None) -> list[mx.array]:
        if x.dtype != self.out_dtype:
            x = x.astype(self.out_dtype)
        if residual is not None and residual.dtype != self.out_dtype:
            residual = residual.astype(self.out_dtype)
        return fused_reference(x, weights, biases, self.epilogue, residual)

    def run_with(self, x, weight_arrays: list[mx.array], residual, stream=None) -> list[mx.array]:
        """weight_arrays: the weights' arrays and biases in kernel-input order (weight_inputs)."""
        weights, biases, i = [], [], 0
        for n, has_bias, like in self.layout:
            arrays = weight_arrays[i : i + n]
            weights.append(like.with_arrays(arrays) if isinstance(like, formats.QuantizedWeight) else arrays[0])
            i += n
            biases.append(weight_arrays[i] if has_bias else None)
            i += has_bias
        return self.run(x, weights, biases, residual)
