"""The weight-format room: one file per format family (its argument checks, its dequantisation in
tile IR, its kernel inputs, its stock MLX product and its float64 reference): dense, affine and
microscaling (mxfp4, mxfp8, nvfp4); `QuantizedWeight` holds a quantized weight of any mode;
`WeightFormat` names a weight's format in the spec."""

from __future__ import annotations

import mlx.core as mx

from . import affine, dense, microscaling
from .affine import dequantize_exact
from .dtypes import DTYPES, float_dtype, require_array
from .format import MICROSCALING_MODES, MODES, WeightFormat
from .quantized import QuantizedWeight, supported

FORMATS = {dense.MODE: dense, affine.MODE: affine, **{mode: microscaling for mode in MICROSCALING_MODES}}
Weight = mx.array | QuantizedWeight


def module_of(wf: WeightFormat):
    return FORMATS[wf.mode]


def format_of(w: Weight, bias: mx.array | None, i: int) -> WeightFormat:
    """The format of weight i (already checked) with its bias."""
    bias_dtype = float_dtype(bias, f"biases[{i}]") if bias is not None else "f32"
    if isinstance(w, QuantizedWeight):
        scales = DTYPES[w.scales.dtype] if w.mode == affine.MODE else "u8"
        return WeightFormat(scales, w.bits, w.group_size, bias is not None, bias_dtype, w.mode)
    return WeightFormat(float_dtype(w, f"weights[{i}]"), 0, 0, bias is not None, bias_dtype, dense.MODE)


def mode_of(w: Weight) -> str:
    return w.mode if isinstance(w, QuantizedWeight) else dense.MODE


def inputs(w: Weight) -> list[mx.array]:
    """The kernel inputs of a weight, in the order the tile program declares them."""
    return FORMATS[mode_of(w)].inputs(w)


def partner_dtype(w: Weight) -> mx.Dtype | None:
    """The dtype MLX promotes x with in the stock product: a dense weight's, affine scales', or
    None (microscaled products are of x's dtype)."""
    if not isinstance(w, QuantizedWeight):
        return w.dtype
    return w.scales.dtype if w.mode == affine.MODE else None


def product(x: mx.array, w: Weight) -> mx.array:
    """x @ w.T as stock MLX computes it."""
    return FORMATS[mode_of(w)].product(x, w)


def reference(w: Weight):
    """The weight as a float64 numpy array [N, K], exactly."""
    return FORMATS[mode_of(w)].reference(w)


__all__ = [
    "DTYPES",
    "FORMATS",
    "MICROSCALING_MODES",
    "MODES",
    "QuantizedWeight",
    "Weight",
    "WeightFormat",
    "dequantize_exact",
    "float_dtype",
    "format_of",
    "inputs",
    "module_of",
    "partner_dtype",
    "product",
    "reference",
    "require_array",
    "supported",
]
