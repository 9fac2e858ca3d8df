"""A projection call checked: its arguments validated (TypeError / ValueError naming the
argument) and flattened into a `Call` value the dispatch routes. Nothing here chooses a device,
a kernel or a fusion."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import mlx.core as mx

from . import formats
from .formats import DTYPES, QuantizedWeight, Weight, WeightFormat, float_dtype, require_array
from .spec import EPILOGUES

Norm = tuple[mx.array, float]  # an RMSNorm applied to x first: (its weight of shape (K,), eps)


@dataclass(frozen=True, eq=False)
class Call:
    op: str  # "linear" | "quantized_linear" | "fused_linear"
    x: mx.array  # as given (leading dimensions kept)
    weights: tuple
    biases: tuple
    epilogue: str | None
    residual: mx.array | None  # as given
    norm: Norm | None
    lead: tuple[int, ...]  # x's leading dimensions
    K: int
    Ns: tuple[int, ...]
    formats: tuple[WeightFormat, ...]
    out_dtype: mx.Dtype  # the kernel's: MLX's promotion of x with the dense weights
    stock_dtypes: tuple  # each output's dtype as the stock composition promotes it

    @property
    def rows(self) -> int:
        return math.prod(self.lead)

    @property
    def act(self) -> str:
        """The activations' dtype in the kernel (x, outputs, residual): the output dtype."""
        return DTYPES[self.out_dtype]

    @property
    def single(self) -> bool:
        """One output: one weight, or SwiGLU's gate and up."""
        return self.epilogue == "swiglu" or len(self.weights) == 1

    @property
    def columns(self) -> int:
        return self.Ns[0] if self.epilogue == "swiglu" else sum(self.Ns)

    @property
    def out_ns(self) -> list[int]:
        return [self.Ns[0]] if self.single else list(self.Ns)

    @property
    def empty(self) -> bool:
        """No rows, no K or an output of no columns: nothing for a kernel to do."""
        return self.rows == 0 or self.K == 0 or 0 in self.Ns

    def casts(self) -> list:
        """Per output: the dtype to cast the kernel's output to, or None where it has it."""
        return [None if d == self.out_dtype else d for d in self.stock_dtypes]


@lru_cache(maxsize=64)
def _promote(a: mx.Dtype, b: mx.Dtype) -> mx.Dtype:
    return (mx.zeros((1,), a) + mx.zeros((1,), b)).dtype


def weight_lists(
    weights: Sequence[Weight], biases: Sequence[mx.array | None] | None
) -> tuple[list[Weight], list[mx.array | None]]:
    """fused_linear's weights and biases as lists (biases None: one None per weight)."""
    if isinstance(weights, (mx.array, QuantizedWeight)) or not isinstance(weights, (list, tuple)):
        raise TypeError("weights: expected a list or tuple of arrays / QuantizedWeight")
    if biases is None:
        return list(weights), [None] * len(weights)
    if not isinstance(biases, (list, tuple)):
        raise TypeError(f"biases: expected a list or tuple (one array or None per weight), got {type(biases).__name__}")
    return list(weights), list(biases)


def norm_argument(norm) -> Norm | None:
    """`norm` as given to fused_linear or Projection: None, or (weight, eps) with eps a float
    (numpy scalars and ints as MLX takes them); the weight's shape is checked with the call."""
    if norm is None:
        return None
    if not isinstance(norm, tuple) or len(norm) != 2:
        raise TypeError("norm: expected (weight, eps) of an RMSNorm, weight of shape (K,)")
    g, eps = norm
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"norm[1]: expected a number (the RMSNorm's eps), got {type(eps).__name__}")
    return (g, float(eps))


def check_bias_count(weights: Sequence, biases: Sequence) -> None:
    if len(biases) != len(weights):
        raise ValueError(f"biases: expected {len(weights)} entries (one per weight, None for none), got {len(biases)}")


def check_norm(norm, K: int) -> None:
    if not isinstance(norm, tuple) or len(norm) != 2:
        raise TypeError("norm: expected (weight, eps) of an RMSNorm, weight of shape (K,)")
    g, eps = norm
    g = require_array(g, "norm[0]")
    float_dtype(g, "norm[0]")
    if tuple(g.shape) != (K,):
        raise ValueError(f"norm[0]: expected the RMSNorm weight of shape ({K},), got {tuple(g.shape)}")
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"norm[1]: expected a number (the RMSNorm's eps), got {type(eps).__name__}")
    if not math.isfinite(float(eps)) or eps <= 0:
        raise ValueError(f"norm[1]: expected a positive finite eps, got {eps!r}")


def check(
    op: str,
    x,
    weights: Sequence[Weight],
    biases: Sequence[mx.array | None],
    epilogue: str | None,
    residual,
    norm: Norm | None = None,
) -> Call:
    """Every argument of a projection call checked; the Call it describes."""
    x = require_array(x, "x")
    float_dtype(x, "x")
    if x.ndim < 1:
        raise ValueError("x: expected at least one dimension (..., K)")
    K = x.shape[-1]
    lead = tuple(x.shape[:-1])
    if not weights:
        raise ValueError("weights: at least one weight is needed")
    Ns = []
    for i, w in enumerate(weights):
        if isinstance(w, QuantizedWeight):
            if w.K != K:
                raise ValueError(f"weights[{i}]: K={w.K} does not match x's last dimension {K}")
            Ns.append(w.N)
        else:
            Ns.append(formats.dense.check(w, f"weights[{i}]", K)[0])
    check_bias_count(weights, biases)
    for i, (b, n) in enumerate(zip(biases, Ns)):
        if b is None:
            continue
        b = require_array(b, f"biases[{i}]")
        float_dtype(b, f"biases[{i}]")
        if tuple(b.shape) != (n,):
            raise ValueError(f"biases[{i}]: expected shape ({n},), got {tuple(b.shape)}")
    if epilogue not in EPILOGUES:
        raise ValueError(f"epilogue: {epilogue!r} is not one of {EPILOGUES}")
    if epilogue == "swiglu":
        if len(weights) != 2:
            raise ValueError(f"epilogue: 'swiglu' takes exactly two weights (gate, up), got {len(weights)}")
        if Ns[0] != Ns[1]:
            raise ValueError(f"weights: gate and up must have the same N for 'swiglu', got {Ns[0]} and {Ns[1]}")
    single = epilogue == "swiglu" or len(weights) == 1
    if residual is not None:
        residual = require_array(residual, "residual")
        if not single:
            raise ValueError("residual: a residual is added to a single output; it needs one weight or 'swiglu'")
        if tuple(residual.shape) != lead + (Ns[0],):
            raise ValueError(f"residual: expected shape {lead + (Ns[0],)}, got {tuple(residual.shape)}")
        float_dtype(residual, "residual")
    if norm is not None:
        check_norm(norm, K)
    # The kernel's activations follow MLX's promotion of x with the dense weights.
    out_dtype = x.dtype
    for w in weights:
        if isinstance(w, mx.array):
            out_dtype = _promote(out_dtype, w.dtype)
    fmts = tuple(_format_of(w, b, i) for i, (w, b) in enumerate(zip(weights, biases)))
    stock = stock_dtypes(x.dtype, weights, biases, epilogue, residual)
    return Call(
        op, x, tuple(weights), tuple(biases), epilogue, residual, norm, lead, K, tuple(Ns), fmts, out_dtype, stock
    )


def product_dtypes(x_dtype: mx.Dtype, weights) -> list:
    """Each stock product's dtype: x promoted with a dense weight, or with affine scales; x's
    own with a microscaled weight."""
    out = []
    for w in weights:
        partner = formats.partner_dtype(w)
        out.append(x_dtype if partner is None else _promote(x_dtype, partner))
    return out


def stock_dtypes(x_dtype: mx.Dtype, weights, biases, epilogue: str | None, residual) -> tuple:
    """Each output's dtype under the stock composition: the product promotes x with a dense
    weight or affine scales (microscaled: x's dtype), then with its bias; SwiGLU multiplies the two;
    a residual promotes the single output."""
    zs = []
    for d, b in zip(product_dtypes(x_dtype, weights), biases):
        zs.append(d if b is None else _promote(d, b.dtype))
    outs = [_promote(zs[0], zs[1])] if epilogue == "swiglu" else zs
    if residual is not None:
        outs = [_promote(outs[0], residual.dtype)]
    return tuple(outs)


_FORMATS: dict[tuple, WeightFormat] = {}


def _format_of(w: Weight, b: mx.array | None, i: int) -> WeightFormat:
    """formats.format_of, one value per distinct format (the spec cache compares them)."""
    wf = formats.format_of(w, b, i)
    return _FORMATS.setdefault(
        (wf.mode, wf.dtype, wf.bits, wf.group_size, wf.has_bias, wf.bias_dtype), wf
    )  # fmt: skip
