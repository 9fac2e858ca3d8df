"""MLX modules backed by mlx_metile ops, built from existing MLX modules."""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
import mlx.nn as mlx_nn

from .formats import QuantizedWeight, Weight
from .ops import fused_linear, linear, quantized_linear


class Linear(mlx_nn.Module):
    """Drop-in for `mlx.nn.Linear`: same parameters (weight [N, K], optional bias)."""

    def __init__(self, input_dims: int, output_dims: int, bias: bool = True):
        super().__init__()
        scale = (1.0 / input_dims) ** 0.5
        self.weight = mx.random.uniform(-scale, scale, (output_dims, input_dims))
        if bias:
            self.bias = mx.random.uniform(-scale, scale, (output_dims,))

    @classmethod
    def from_linear(cls, layer: mlx_nn.Linear) -> Linear:
        """Share `layer`'s parameters (no copy)."""
        if not isinstance(layer, mlx_nn.Linear):
            raise TypeError(f"layer: expected mlx.nn.Linear, got {type(layer).__name__}")
        out = cls.__new__(cls)
        mlx_nn.Module.__init__(out)
        out.weight = layer.weight
        if "bias" in layer:
            out.bias = layer.bias
        return out

    def __call__(self, x: mx.array) -> mx.array:
        return linear(x, self.weight, self.get("bias"))

    def _extra_repr(self) -> str:
        n, k = self.weight.shape
        return f"input_dims={k}, output_dims={n}, bias={'bias' in self}"


class QuantizedLinear(mlx_nn.Module):
    """Drop-in for `mlx.nn.QuantizedLinear` in any of its modes, weights used as stored."""

    @classmethod
    def from_quantized_linear(cls, layer: mlx_nn.QuantizedLinear) -> QuantizedLinear:
        if not isinstance(layer, mlx_nn.QuantizedLinear):
            raise TypeError(f"layer: expected mlx.nn.QuantizedLinear, got {type(layer).__name__}")
        QuantizedWeight.from_quantized_linear(layer)  # validates the format
        out = cls.__new__(cls)
        mlx_nn.Module.__init__(out)
        out.weight, out.scales = layer.weight, layer.scales
        if "biases" in layer:
            out.biases = layer.biases
        if "bias" in layer:
            out.bias = layer.bias
        out.group_size, out.bits, out.mode = layer.group_size, layer.bits, getattr(layer, "mode", "affine")
        return out

    def __call__(self, x: mx.array) -> mx.array:
        return quantized_linear(
            x,
            self.weight,
            self.scales,
            self.get("biases"),
            group_size=self.group_size,
            bits=self.bits,
            mode=self.mode,
            bias=self.get("bias"),
        )


def _as_weight(layer) -> tuple[Weight, mx.array | None]:
    if isinstance(layer, mlx_nn.QuantizedLinear):
        return QuantizedWeight.from_quantized_linear(layer), layer.get("bias")
    if isinstance(layer, mlx_nn.Linear):
        return layer.weight, layer.get("bias")
    raise TypeError(f"layers: expected mlx.nn.Linear or QuantizedLinear, got {type(layer).__name__}")


class FusedLinear(mlx_nn.Module):
    """Several Linear / QuantizedLinear layers of one input, evaluated as one
    fused projection (q/k/v; gate/up with epilogue='swiglu'; a down projection
    with the residual passed at call time)."""

    def __init__(self, layers: Sequence[mlx_nn.Module], epilogue: str | None = None):
        super().__init__()
        if not layers:
            raise ValueError("layers: at least one layer is needed")
        self.layers = list(layers)
        self.epilogue = epilogue

    @classmethod
    def from_linears(cls, layers: Sequence[mlx_nn.Module], epilogue: str | None = None) -> FusedLinear:
        for layer in layers:
            _as_weight(layer)
        return cls(layers, epilogue)

    def __call__(self, x: mx.array, residual: mx.array | None = None):
        pairs = [_as_weight(layer) for layer in self.layers]
        return fused_linear(
            x, [w for w, _ in pairs], biases=[b for _, b in pairs], epilogue=self.epilogue, residual=residual
        )
