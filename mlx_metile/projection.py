"""`Projection`: fused_linear with its weights, biases and epilogue bound once.

Its point is an eager call's host time on MLX's CUDA backend, where decoding one
token of a quantized 8B model builds ~130 projections and the GPU finishes them
sooner than Python builds them: after a call of some shape has been checked and
planned (mlx_metile.dispatch), a call of the same shapes launches that plan at once -
checked are only x's (and the residual's) shape and dtype, the default device,
the settings read per call and clear_kernel_caches(); the weights' arrays were
gathered when the Projection was made. Every other call (another backend, an
explicit stream, a trace open, new shapes) takes fused_linear's full path.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

from . import dispatch, settings
from .backends.cuda_launch import CudaPlan
from .call import Norm, check_bias_count, norm_argument, weight_lists
from .dispatch import StreamLike
from .formats import Weight
from .ops import project
from .trace import tracing

_PLANS_PER_PROJECTION = 64  # distinct call shapes kept (decode, verify and a few prompt lengths)


class Projection:
    """`p(x)` / `p(x, residual)` computes `fused_linear(x, weights, biases=biases,
    epilogue=epilogue, residual=residual, norm=norm)`: one output per weight (a single array for one
    weight or "swiglu", else a list). Weights are fixed: make a new Projection for new arrays."""

    def __init__(
        self,
        weights: Sequence[Weight],
        *,
        biases: Sequence[mx.array | None] | None = None,
        epilogue: str | None = None,
        norm: Norm | None = None,
    ):
        self.weights, self.biases = weight_lists(weights, biases)
        check_bias_count(self.weights, self.biases)
        self.epilogue = epilogue
        self.norm = norm_argument(norm)  # an RMSNorm of x first
        self._single = epilogue == "swiglu" or len(self.weights) == 1
        self._arrays: list[mx.array] | None = None  # the weights' kernel inputs, once a plan needs them
        self._plans: dict[tuple, CudaPlan] = {}

    def __call__(
        self, x: mx.array, residual: mx.array | None = None, *, stream: StreamLike = None
    ) -> mx.array | list[mx.array]:
        if stream is None and type(x) is mx.array and (residual is None or type(residual) is mx.array):
            key = self._key(x, residual)
            plan = self._plans.get(key)
            if plan is not None and not tracing():
                outs = plan.run_with(x, self._arrays, residual)
                return outs[0] if self._single else outs
        else:
            key = None
        outs = project("fused_linear", x, self.weights, self.biases, self.epilogue, residual, stream, self.norm)
        if key is not None and dispatch.has_plans():  # (only the CUDA path makes plans)
            plan = dispatch.planned("fused_linear", x, self.weights, self.biases, self.epilogue, residual, self.norm)
            if plan is not None:
                if len(self._plans) >= _PLANS_PER_PROJECTION:
                    self._plans.clear()
                if self._arrays is None:
                    self._arrays = dispatch.norm_inputs(self.norm) + dispatch.weight_inputs(self.weights, self.biases)
                self._plans[key] = plan
        return outs[0] if self._single else outs

    @staticmethod
    def _key(x: mx.array, residual: mx.array | None) -> tuple:
        return (
            x.shape,
            x.dtype,
            None if residual is None else (residual.shape, residual.dtype),
            mx.default_device().type,
            settings.generation(),
            dispatch.plans_generation(),
        )

    def __repr__(self) -> str:
        norm = "" if self.norm is None else f", norm eps={self.norm[1]:g}"
        return f"Projection({len(self.weights)} weights, epilogue={self.epilogue!r}{norm})"
