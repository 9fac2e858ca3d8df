"""`WeightFormat`: one weight as MLX stores it, the part of the spec that names its format."""

from __future__ import annotations

from dataclasses import dataclass

MODES = ("dense", "affine")


@dataclass(frozen=True)
class WeightFormat:
    """A weight of `mode`: "dense" [N, K] of `dtype`; "affine" quantized (uint32-packed
    `bits`-bit values, scales and biases of `dtype` per `group_size` columns). `mode` left empty
    is derived: affine where bits are given, else dense."""

    dtype: str  # element dtype (dense) or scales/biases dtype (quantized)
    bits: int = 0  # 0 = dense
    group_size: int = 0
    has_bias: bool = False
    bias_dtype: str = "f32"
    mode: str = ""

    def __post_init__(self) -> None:
        if not self.mode:
            object.__setattr__(self, "mode", "affine" if self.bits else "dense")
        if self.mode not in MODES:
            raise ValueError(f"mode: {self.mode!r} is not one of {MODES}")
        if (self.mode == "dense") != (self.bits == 0):
            raise ValueError(f"mode: {self.mode!r} with bits={self.bits}")

    @property
    def quantized(self) -> bool:
        return self.mode != "dense"

    def name(self) -> str:
        """The format in a kernel's name: `bf16`, `q4g64bf16` (+ `b` with a bias)."""
        text = f"q{self.bits}g{self.group_size}{self.dtype}" if self.quantized else self.dtype
        return text + ("b" if self.has_bias else "")

    def short(self) -> str:
        """The format in a trace record: `bf16`, `q4g64`."""
        return f"q{self.bits}g{self.group_size}" if self.quantized else self.dtype
