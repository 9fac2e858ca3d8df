"""A projection call checked: its arguments validated (TypeError / ValueError naming the
argument) and flattened into a `Call` value the dispatch routes. Nothing here chooses a device,
a kernel or a fusion."""

from __future__ import annotations

import math
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
    out_dtype: mx.Dtype  # MLX's promotion of x with the dense weights

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


@lru_cache(maxsize=64)
def _promote(a: mx.Dtype, b: mx.Dtype) -> mx.Dtype:
    return (mx.zeros((1,), a) + mx.zeros((1,), b)).dtype


def weight_lists(weights, biases) -> tuple[list[Weight], list[mx.array | None]]:
    """fused_linear's weights and biases as lists (biases None: one None per weight)."""
    if isinstance(weights, (mx.array, QuantizedWeight)) or not isinstance(weights, (list, tuple)):
        raise TypeError("weights: expected a list or tuple of arrays / QuantizedWeight")
    return list(weights), list(biases) if biases is not None else [None] * len(weights)


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
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
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
    rows = math.prod(lead)
    if rows == 0 or K == 0:
        raise ValueError(f"x: empty input of shape {tuple(x.shape)}")
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
    # The output dtype follows MLX's promotion of x with the dense weights.
    out_dtype = x.dtype
    for w in weights:
        if isinstance(w, mx.array):
            out_dtype = _promote(out_dtype, w.dtype)
    fmts = tuple(_format_of(w, b, i) for i, (w, b) in enumerate(zip(weights, biases)))
    return Call(op, x, tuple(weights), tuple(biases), epilogue, residual, norm, lead, K, tuple(Ns), fmts, out_dtype)


_FORMATS: dict[tuple, WeightFormat] = {}


def _format_of(w: Weight, b: mx.array | None, i: int) -> WeightFormat:
    """formats.format_of, one value per distinct format (the spec cache compares them)."""
    wf = formats.format_of(w, b, i)
    return _FORMATS.setdefault(
        (wf.mode, wf.dtype, wf.bits, wf.group_size, wf.has_bias, wf.bias_dtype), wf
    )  # fmt: skip
