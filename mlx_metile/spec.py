"""What a projection call computes, independent of any target: the value the
whole pipeline is keyed by (spec -> tile program -> schedule -> artifact)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .formats.format import WeightFormat

EPILOGUES = (None, "swiglu", "gelu", "gelu_approx", "silu")
EPILOGUE_CODES = {None: 0, "swiglu": 1, "gelu": 2, "gelu_approx": 3, "silu": 4}


@dataclass(frozen=True)
class ProjectionSpec:
    act_dtype: str  # x, outputs and residual
    weights: tuple[WeightFormat, ...]
    epilogue: str | None = None
    has_residual: bool = False
    k_multiple: int = 1  # a power of two known to divide K (lets K-rows be loaded 16 bytes at a time)
    # RMSNorm of x before the product: x * g / sqrt(mean(x^2) + norm_eps), g a `norm` buffer of
    # K act_dtype values (CUDA tensor-core kernels only; see lower/mma.py)
    norm_eps: float | None = None

    def __post_init__(self) -> None:
        if not self.weights:
            raise ValueError("ProjectionSpec: weights: at least one weight format is needed")
        if self.epilogue not in EPILOGUES:
            raise ValueError(f"ProjectionSpec: epilogue: {self.epilogue!r} is not one of {EPILOGUES}")
        if self.epilogue == "swiglu" and len(self.weights) != 2:
            raise ValueError(f"ProjectionSpec: 'swiglu' takes two weights (gate, up), got {len(self.weights)}")

    @property
    def outputs(self) -> int:
        return 1 if self.epilogue == "swiglu" or self.has_residual else len(self.weights)

    @property
    def accumulators(self) -> int:
        """Column sets accumulated separately: two for SwiGLU (gate, up),
        else one over the weights' concatenated columns."""
        return 2 if self.epilogue == "swiglu" else 1

    @property
    def k_divisor(self) -> int:
        """A divisor of K: every quantized weight's group size, and k_multiple."""
        d = self.k_multiple
        for w in self.weights:
            if w.quantized:
                d = max(d, w.group_size)
        return d

    def vector_buffers(self) -> frozenset[str]:
        """Buffers whose rows run along K and may be loaded 16 bytes at a time: x, when K is a
        multiple of 8, and each weight whose 16 bytes hold whole K_divisor-value pieces of a row.
        A lowering masks k < K per piece of k_divisor values, so then one mask covers a vector
        and a vector never crosses a row. A weight whose 16 bytes span two pieces (nvfp4's 32
        values where K is known a multiple of 16 only; 2-bit's 64 at a multiple of 32) is loaded
        a word at a time instead: a vector would be loaded once under each piece's mask (twice),
        and where K ends in its first piece it would read into the next row, past the buffer's
        end on the last one."""
        d = self.k_divisor
        if d % 8:
            return frozenset()
        ws = [f"w{i}" for i, w in enumerate(self.weights) if not w.quantized or (d * w.bits) % 128 == 0]
        return frozenset(["x"] + ws)

    def name(self) -> str:
        parts = [w.name() for w in self.weights]
        tail = f"_{self.epilogue}" if self.epilogue else ""
        tail += "_res" if self.has_residual else ""
        tail += f"_k{self.k_multiple}" if self.k_multiple > 1 else ""
        if self.norm_eps is not None:  # eps's f32 bits: exact, and a C identifier
            tail += f"_rms{struct.unpack('<I', struct.pack('<f', self.norm_eps))[0]:08x}"
        return f"proj_{self.act_dtype}_{'_'.join(parts)}{tail}"
