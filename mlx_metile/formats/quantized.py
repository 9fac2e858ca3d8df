"""`QuantizedWeight`: a weight in one of MLX's quantized formats, as MLX stores it (no repacking)."""

from __future__ import annotations

import numbers
import weakref

import mlx.core as mx
import mlx.nn as nn

from . import affine, microscaling

# mode -> (default group size, default bits), as mx.quantize has them
DEFAULTS = {"affine": (64, 4), **{mode: spec[:2] for mode, spec in microscaling.MODES.items()}}

_VALIDATED: dict[tuple, tuple] = {}  # (ids, settings) -> weak references to the arrays validated, signature
_VALIDATED_LIMIT = 4096


def check_mode(mode: object) -> str:
    if mode not in DEFAULTS:
        raise ValueError(f"mode: {mode!r} is not a quantization mode of MLX; expected one of {tuple(DEFAULTS)}")
    return mode


def supported(mode: str, bits: int, group_size: int) -> bool:
    """Whether the kernels take a quantized format: every affine width and group of MLX, and each
    microscaling mode at its own group size and width."""
    if mode == affine.MODE:
        return bits in affine.SUPPORTED_BITS and group_size in affine.SUPPORTED_GROUP_SIZES
    return mode in microscaling.MODES and (group_size, bits) == microscaling.MODES[mode][:2]


def integer(value, what: str) -> int:
    """An integer argument as MLX takes it (Python or numpy integers); a TypeError naming it else."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{what}: expected an integer, got {type(value).__name__} {value!r}")
    return int(value)


class QuantizedWeight:
    """A weight in one of MLX's quantized formats, used as stored: `w` uint32 [N, K*bits/32], each
    row's words one bit stream, least-significant bits first; `scales` [N, K/group_size].
    - mode "affine" (bits 2, 3, 4, 5, 6 or 8; groups of 32, 64 or 128; 3, 5 and 6-bit values
      straddle words): scales and `biases` of a float dtype, element (n, k) scales*q + biases;
    - "mxfp4" (4-bit e2m1 values, groups of 32, uint8 e8m0 scales), "mxfp8" (8-bit e4m3 values,
      groups of 32, uint8 e8m0 scales), "nvfp4" (e2m1 values, groups of 16, uint8 e4m3 scales):
      no biases, element (n, k) value * scale.
    group_size and bits default to mx.quantize's for the mode."""

    def __init__(
        self,
        w: mx.array,
        scales: mx.array,
        biases: mx.array | None = None,
        group_size: int | None = None,
        bits: int | None = None,
        mode: str = "affine",
    ):
        check_mode(mode)
        group_size = DEFAULTS[mode][0] if group_size is None else integer(group_size, "group_size")
        bits = DEFAULTS[mode][1] if bits is None else integer(bits, "bits")
        # Arrays never change shape or dtype, so the same arrays (the same objects, checked
        # through weak references: an id alone may be reused) with the same settings need
        # validating once - this runs on every eager call.
        key = (id(w), id(scales), id(biases), group_size, bits, mode)
        entry = _VALIDATED.get(key)
        if entry is None or entry[0]() is not w or entry[1]() is not scales or (entry[2] and entry[2]() is not biases):
            if mode == affine.MODE:
                affine.validate(w, scales, biases, group_size, bits)
            else:
                microscaling.validate(w, scales, biases, group_size, bits, mode)
            if len(_VALIDATED) >= _VALIDATED_LIMIT:
                _VALIDATED.clear()
            q = (w, scales) if biases is None else (w, scales, biases)
            signature = (mode, group_size, bits, *(a.shape for a in q), *(a.dtype for a in q))
            held = None if biases is None else weakref.ref(biases)
            entry = _VALIDATED[key] = (weakref.ref(w), weakref.ref(scales), held, signature)
        # immutable, so that what calls with it are planned by stays true of it:
        # set through its __dict__ (signature: its format and shapes)
        self.__dict__.update(
            w=w, scales=scales, biases=biases, group_size=group_size, bits=bits, mode=mode, signature=entry[3]
        )

    def __setattr__(self, name, value):
        raise AttributeError(f"QuantizedWeight is immutable: make a new one rather than set {name!r}")

    def __reduce__(self):
        # pickling and copy.deepcopy rebuild it from its arrays (MLX pickles arrays itself)
        return (QuantizedWeight, (self.w, self.scales, self.biases, self.group_size, self.bits, self.mode))

    @property
    def N(self) -> int:
        return self.w.shape[0]

    @property
    def K(self) -> int:
        return self.w.shape[1] * 32 // self.bits

    def arrays(self) -> list[mx.array]:
        """Its arrays in the order the kernels take them: w, scales (, biases)."""
        return [self.w, self.scales] if self.biases is None else [self.w, self.scales, self.biases]

    def with_arrays(self, arrays: list[mx.array]) -> QuantizedWeight:
        """The same format over other arrays (as many as `arrays()` gives)."""
        biases = arrays[2] if self.biases is not None else None
        return QuantizedWeight(arrays[0], arrays[1], biases, self.group_size, self.bits, self.mode)

    @classmethod
    def from_quantized_linear(cls, layer: nn.Module, arrays: nn.Module | None = None) -> QuantizedWeight:
        """From an `mlx.nn.QuantizedLinear` in any of MLX's modes; its weight, scales and biases
        read from `arrays` (a module holding them under the same names) where given."""
        mode = getattr(layer, "mode", "affine")
        src = layer if arrays is None else arrays
        biases = src["biases"] if "biases" in src else None
        return cls(src["weight"], src["scales"], biases, layer.group_size, layer.bits, mode)

    def __repr__(self) -> str:
        return f"QuantizedWeight(N={self.N}, K={self.K}, bits={self.bits}, group_size={self.group_size}, mode={self.mode!r})"
