"""A call site under tuning: the weights, biases, epilogue and residual of a projection, the dtype
of its activations, and where the dispatch would look up its decisions (backend, target, spec,
shape). Its rows vary: the tuner decides per row bucket."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

import mlx.core as mx
import numpy as np

from .. import dispatch, formats
from ..call import Call, check
from ..reference import fused_reference
from ..schedule import Shape
from ..spec import ProjectionSpec
from ..targets import Target


@dataclass(eq=False)
class Site:
    weights: tuple
    biases: tuple
    epilogue: str | None
    residual: bool
    x_dtype: mx.Dtype
    out_dtype: mx.Dtype  # the kernel's (x promoted with the dense weights): what its outputs are rounded to
    residual_dtype: mx.Dtype | None
    K: int
    Ns: tuple[int, ...]
    backend: str  # the dispatch's backend for the default device ("cpu", "cuda", ...; "mlx": none)
    target: Target | None
    spec: ProjectionSpec | None
    shape: Shape | None
    _w64: list = field(default_factory=list, repr=False)

    @classmethod
    def of_call(cls, call: Call, stream=None) -> Site:
        where = dispatch.tuning_site(call, stream)
        backend, target, spec, shape = where if where is not None else ("mlx", None, None, None)
        residual_dtype = None if call.residual is None else call.residual.dtype
        return cls(
            tuple(call.weights), tuple(call.biases), call.epilogue, call.residual is not None, call.x.dtype,
            call.out_dtype, residual_dtype, call.K, tuple(call.Ns), backend, target, spec, shape,
        )  # fmt: skip

    @classmethod
    def of(
        cls,
        x: mx.array,
        weights: Sequence,
        biases: Sequence | None = None,
        epilogue: str | None = None,
        residual: mx.array | None = None,
    ) -> Site:
        """The site of fused_linear(x, weights, biases=..., epilogue=..., residual=...), its arguments checked."""
        if not isinstance(weights, (list, tuple)):
            raise TypeError("weights: expected a list or tuple of arrays / QuantizedWeight")
        biases = [None] * len(weights) if biases is None else list(biases)
        return cls.of_call(check("fused_linear", x, list(weights), biases, epilogue, residual))

    @property
    def single(self) -> bool:
        return self.epilogue == "swiglu" or len(self.weights) == 1

    @property
    def out_ns(self) -> list[int]:
        return [self.Ns[0]] if self.single else list(self.Ns)

    @property
    def columns(self) -> int:
        return self.Ns[0] if self.epilogue == "swiglu" else sum(self.Ns)

    def describe(self) -> str:
        names = "+".join(formats.format_of(w, b, i).short() for i, (w, b) in enumerate(zip(self.weights, self.biases)))
        tail = (f" {self.epilogue}" if self.epilogue else "") + (" +residual" if self.residual else "")
        dtype = str(self.x_dtype).split(".")[-1]
        return f"{names} K={self.K} N={','.join(map(str, self.Ns))} x {dtype}{tail}"

    def signature(self) -> dict:
        """The site as a decision's key holds it (no array values)."""
        fmts = [repr(formats.format_of(w, b, i)) for i, (w, b) in enumerate(zip(self.weights, self.biases))]
        return {
            "spec": repr(self.spec),
            "formats": fmts,
            "epilogue": self.epilogue,
            "residual": self.residual,
            "x_dtype": str(self.x_dtype),
            "residual_dtype": str(self.residual_dtype),
            "K": self.K,
            "Ns": list(self.Ns),
            "shape": None if self.shape is None else [self.shape.K, self.shape.columns],
        }

    def weight_bytes(self) -> int:
        arrays = [a for w in self.weights for a in formats.inputs(w)] + [b for b in self.biases if b is not None]
        return sum(a.nbytes for a in arrays)

    def pool(self, pool_bytes: int) -> list[Site]:
        """This site and copies of it over fresh copies of its weights and biases (same formats,
        values and shapes, other buffers), together at least `pool_bytes` of weights."""
        count = max(1, -(-pool_bytes // max(self.weight_bytes(), 1))) if pool_bytes else 1
        out = [self]
        for _ in range(count - 1):
            ws = tuple(_copy(w) for w in self.weights)
            bs = tuple(None if b is None else b * 1 for b in self.biases)
            mx.eval([a for w in ws for a in formats.inputs(w)] + [b for b in bs if b is not None])
            out.append(replace(self, weights=ws, biases=bs, _w64=[]))
        return out

    # -- what candidates are compared with ---------------------------------------------------
    def stock(self, x: mx.array, residual: mx.array | None) -> list[mx.array]:
        """The stock MLX composition (the native candidate)."""
        return fused_reference(x, list(self.weights), list(self.biases), self.epilogue, residual)

    @cached_property
    def weights64(self) -> list[np.ndarray]:
        """Each weight as float64 [N, K] (quantized ones dequantized exactly)."""
        return [formats.reference(w) for w in self.weights]

    @cached_property
    def biases64(self) -> list[np.ndarray | None]:
        return [None if b is None else _f64(b) for b in self.biases]

    def draw(self, rows: int, rng: np.random.Generator, scale: float = 1.0) -> tuple[mx.array, mx.array | None]:
        """Fresh x (and residual) of `rows` rows: normal values times `scale`, in the call's dtypes."""
        x = mx.array((rng.standard_normal((rows, self.K)) * scale).astype(np.float32)).astype(self.x_dtype)
        residual = None
        if self.residual:
            r = rng.standard_normal((rows, self.Ns[0])).astype(np.float32)
            residual = mx.array(r).astype(self.residual_dtype)
        return x, residual


def _copy(w):
    """The weight over new buffers (x * 1 keeps every dtype and value)."""
    if isinstance(w, formats.QuantizedWeight):
        return w.with_arrays([a * 1 for a in w.arrays()])
    return w * 1


def _f64(a: mx.array) -> np.ndarray:
    return np.array(a.astype(mx.float32), dtype=np.float64)
