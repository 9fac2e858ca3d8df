"""The public ops: projections computed by compiled tile kernels.

Every op checks its arguments (TypeError / ValueError naming the argument; mlx_metile.call) and
hands the checked call to the dispatch, which picks the backend of the stream's device and builds
one MLX array node; evaluation happens lazily like any MLX op. A call whose shapes, dtypes and
settings repeat one already planned (the CUDA path) is replayed without the checks.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

from . import dispatch
from .call import Norm, check, norm_argument, weight_lists
from .dispatch import StreamLike
from .formats import QuantizedWeight, Weight

__all__ = ["fused_linear", "linear", "matmul", "project", "quantized_linear"]

_FLOATS = (mx.float32, mx.float16, mx.bfloat16)


def project(
    op: str,
    x: mx.array,
    weights: Sequence[Weight],
    biases: Sequence[mx.array | None],
    epilogue: str | None,
    residual: mx.array | None,
    stream: StreamLike,
    norm: Norm | None = None,
) -> list[mx.array]:
    """Every output of a projection call (the ops' common path; Projection calls it too)."""
    outs = dispatch.replay(op, x, weights, biases, epilogue, residual, stream, norm)
    if outs is not None:
        return outs
    return dispatch.run(check(op, x, weights, biases, epilogue, residual, norm), stream)


def linear(x: mx.array, weight: mx.array, bias: mx.array | None = None, *, stream: StreamLike = None) -> mx.array:
    """`x @ weight.T + bias` with weight [N, K] as `nn.Linear` stores it; x is [..., K]."""
    try:
        return project("linear", x, [weight], [bias], None, None, stream)[0]
    except ValueError as e:
        raise ValueError(str(e).replace("weights[0]", "weight").replace("biases[0]", "bias")) from None
    except TypeError as e:
        raise TypeError(str(e).replace("weights[0]", "weight").replace("biases[0]", "bias")) from None


def quantized_linear(
    x: mx.array,
    w: mx.array,
    scales: mx.array,
    biases: mx.array | None = None,
    *,
    group_size: int | None = None,
    bits: int | None = None,
    mode: str = "affine",
    bias: mx.array | None = None,
    stream: StreamLike = None,
) -> mx.array:
    """`mx.quantized_matmul(x, w, scales, biases, transpose=True, group_size, bits, mode)` (+ bias)
    in every mode of MLX (see QuantizedWeight): biases for "affine", None for "mxfp4", "mxfp8"
    and "nvfp4"; group_size and bits default to the mode's."""
    qw = QuantizedWeight(w, scales, biases, group_size, bits, mode)
    try:
        return project("quantized_linear", x, [qw], [bias], None, None, stream)[0]
    except (ValueError, TypeError) as e:
        raise type(e)(str(e).replace("weights[0]", "w").replace("biases[0]", "bias")) from None


def fused_linear(
    x: mx.array,
    weights: Sequence[Weight],
    *,
    biases: Sequence[mx.array | None] | None = None,
    epilogue: str | None = None,
    residual: mx.array | None = None,
    norm: Norm | None = None,
    stream: StreamLike = None,
) -> mx.array | list[mx.array]:
    """Several projections of one x, reading x once.

    - epilogue=None: one output per weight (q/k/v);
    - "swiglu": two weights (gate, up) -> silu(x@W0.T) * (x@W1.T);
    - "gelu" / "gelu_approx" / "silu": applied to each output;
    - residual: added to the single output (down projection + residual);
    - norm=(weight, eps): x goes through an RMSNorm first, `mx.fast.rms_norm(x, weight, eps)`; on
      CUDA with bf16 activations, where it measured faster (no SwiGLU, at most
      mlx_metile.schedule.NORM_FUSED_MAX_COLUMNS outputs, i.e. q/k/v), inside the projection's
      kernel (x * weight rounded once to bf16, each row's sums scaled by 1 / rms in f32 - one op
      fewer), elsewhere as that op.
    Biases, epilogue and residual are applied in f32 and rounded once.
    Returns a list when there are several outputs, else one array."""
    ws, bs = weight_lists(weights, biases)
    outs = project("fused_linear", x, ws, bs, epilogue, residual, stream, norm_argument(norm))
    return outs[0] if len(outs) == 1 and (epilogue == "swiglu" or residual is not None or len(weights) == 1) else outs


def matmul(a: mx.array, b: mx.array, *, stream: StreamLike = None) -> mx.array:
    """`mx.matmul(a, b)` exactly - batch broadcasting, 1-D operands, dtypes, errors - with the
    projection-shaped products (b a 2-D [K, N] float weight, a float [..., K]) on the kernels as
    `linear(a, b.T)`; everything else goes to mx.matmul itself. Models' `x @ w.T` passes the
    transposed view of w, whose transpose is w again: no copy."""
    projection = (
        isinstance(a, mx.array)
        and isinstance(b, mx.array)
        and b.ndim == 2
        and a.ndim >= 1
        and a.dtype in _FLOATS
        and b.dtype in _FLOATS
        and a.shape[-1] == b.shape[0]
    )
    if not projection:
        return mx.matmul(a, b, stream=stream)
    return linear(a, b.T, stream=stream)
