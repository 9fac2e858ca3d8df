"""`WeightFormat`: one weight as MLX stores it, the part of the spec that names its format."""

from __future__ import annotations

from dataclasses import dataclass

MICROSCALING_MODES = ("mxfp4", "mxfp8", "nvfp4")
MODES = ("dense", "affine", *MICROSCALING_MODES)


@dataclass(frozen=True)
class WeightFormat:
    """A weight of `mode`: "dense" [N, K] of `dtype`; "affine" quantized (uint32-packed
    `bits`-bit values, scales and biases of `dtype` per `group_size` columns); "mxfp4", "mxfp8"
    or "nvfp4" (uint32-packed fp4 / fp8 codes, one uint8 scale per `group_size` columns, `dtype`
    "u8", no biases). `mode` left empty is derived: affine where bits are given, else dense."""

    dtype: str  # element dtype (dense), scales/biases dtype (affine), "u8" (microscaling scales)
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

    @property
    def affine(self) -> bool:
        return self.mode == "affine"

    def name(self) -> str:
        """The format in a kernel's name: `bf16`, `q4g64bf16`, `mxfp4g32` (+ `b` with a bias)."""
        return self.short() + (self.dtype if self.affine else "") + ("b" if self.has_bias else "")

    def short(self) -> str:
        """The format in a trace record: `bf16`, `q4g64`, `mxfp4g32`."""
        if self.mode == "dense":
            return self.dtype
        return f"{'q' + str(self.bits) if self.affine else self.mode}g{self.group_size}"
