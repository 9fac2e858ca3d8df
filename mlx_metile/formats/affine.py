"""MLX's affine quantization: uint32 words packing `bits`-bit values least-significant first,
with scales and biases per `group_size` columns; element (n, k) is scale * q + bias."""

from __future__ import annotations

import numbers
import weakref

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ..ir.builder import Builder, T
from .dtypes import float_dtype, require_array
from .format import WeightFormat

MODE = "affine"
MLX_OTHER_MODES = ("mxfp4", "mxfp8", "nvfp4")  # MLX's microscaling modes, which the kernels do not take
SUPPORTED_BITS = (2, 3, 4, 5, 6, 8)
SUPPORTED_GROUP_SIZES = (32, 64, 128)

_VALIDATED: dict[tuple, tuple] = {}  # (ids, settings) -> weak references to the arrays validated, signature
_VALIDATED_LIMIT = 4096


class QuantizedWeight:
    """A weight in MLX's affine quantized format (bits 2, 3, 4, 5, 6 or 8), used as stored (no
    repacking): `w` uint32 [N, K*bits/32], each row's words one bit stream, least-significant bits
    first (3, 5 and 6-bit values straddle words); `scales` and `biases` [N, K/group_size]; element
    (n, k) is scales*q + biases. `mode` is "affine" (MLX's other modes are refused by name)."""

    def __init__(
        self,
        w: mx.array,
        scales: mx.array,
        biases: mx.array,
        group_size: int = 64,
        bits: int = 4,
        mode: str = "affine",
    ):
        check_mode(mode)
        group_size, bits = integer(group_size, "group_size"), integer(bits, "bits")
        # Arrays never change shape or dtype, so the same three arrays (the same
        # objects, checked through weak references: an id alone may be reused)
        # with the same settings need validating once - this runs on every eager call.
        key = (id(w), id(scales), id(biases), group_size, bits)
        entry = _VALIDATED.get(key)
        if entry is None or entry[0]() is not w or entry[1]() is not scales or entry[2]() is not biases:
            self._validate(w, scales, biases, group_size, bits)
            if len(_VALIDATED) >= _VALIDATED_LIMIT:
                _VALIDATED.clear()
            q = (w, scales, biases)
            signature = (group_size, bits, *(a.shape for a in q), *(a.dtype for a in q))
            entry = _VALIDATED[key] = (weakref.ref(w), weakref.ref(scales), weakref.ref(biases), signature)
        # immutable, so that what calls with it are planned by stays true of it:
        # set through its __dict__ (signature: its format and shapes)
        self.__dict__.update(w=w, scales=scales, biases=biases, group_size=group_size, bits=bits, signature=entry[3])

    def __setattr__(self, name, value):
        raise AttributeError(f"QuantizedWeight is immutable: make a new one rather than set {name!r}")

    def __reduce__(self):
        # pickling and copy.deepcopy rebuild it from its arrays (MLX pickles arrays itself)
        return (QuantizedWeight, (self.w, self.scales, self.biases, self.group_size, self.bits))

    @staticmethod
    def _validate(w, scales, biases, group_size: int, bits: int) -> None:
        w = require_array(w, "w")
        scales = require_array(scales, "scales")
        biases = require_array(biases, "biases")
        if bits not in SUPPORTED_BITS:
            raise ValueError(f"bits: {bits} is not supported; use one of {SUPPORTED_BITS}")
        if group_size not in SUPPORTED_GROUP_SIZES:
            raise ValueError(f"group_size: {group_size} is not supported; use one of {SUPPORTED_GROUP_SIZES}")
        if w.dtype != mx.uint32 or w.ndim != 2:
            raise ValueError(f"w: expected a 2-D uint32 array of packed values, got {w.dtype} with shape {w.shape}")
        n, words = w.shape
        if words * 32 % bits:
            raise ValueError(f"w: {words} words per row do not hold whole {bits}-bit values")
        k = words * 32 // bits
        if k % group_size:
            raise ValueError(
                f"group_size: K={k} (from w's {words} words per row at bits={bits}) is not a multiple of {group_size}"
            )
        expect = (n, k // group_size)
        for name, a in (("scales", scales), ("biases", biases)):
            if tuple(a.shape) != expect:
                raise ValueError(
                    f"{name}: expected shape {expect} for N={n}, K={k}, group_size={group_size}, got {a.shape}"
                )
            float_dtype(a, name)
        if scales.dtype != biases.dtype:
            raise ValueError(f"biases: dtype {biases.dtype} differs from scales' {scales.dtype}")

    @property
    def mode(self) -> str:
        return MODE

    @property
    def N(self) -> int:
        return self.w.shape[0]

    @property
    def K(self) -> int:
        return self.w.shape[1] * 32 // self.bits

    @classmethod
    def from_quantized_linear(cls, layer: nn.Module, arrays: nn.Module | None = None) -> QuantizedWeight:
        """From an `mlx.nn.QuantizedLinear` (affine mode); its weight, scales and biases read from
        `arrays` (a module holding them under the same names) where given."""
        mode = getattr(layer, "mode", "affine")
        if mode != MODE:
            raise ValueError(f"layer: quantization mode {mode!r} is not supported; only 'affine'")
        src = layer if arrays is None else arrays
        return cls(src["weight"], src["scales"], src["biases"], layer.group_size, layer.bits)

    def __repr__(self) -> str:
        return f"QuantizedWeight(N={self.N}, K={self.K}, bits={self.bits}, group_size={self.group_size})"


def check_mode(mode: object) -> None:
    """Only MLX's affine mode is taken; its microscaling modes are refused by name."""
    if mode == MODE:
        return
    if mode in MLX_OTHER_MODES:
        raise ValueError(f"mode: {mode!r} is not supported; only 'affine' (MLX's mxfp4, mxfp8 and nvfp4 are not)")
    raise ValueError(f"mode: {mode!r} is not a quantization mode of MLX; expected 'affine'")


def integer(value, what: str) -> int:
    """An integer argument as MLX takes it (Python or numpy integers); a TypeError naming it else."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{what}: expected an integer, got {type(value).__name__} {value!r}")
    return int(value)


def declare(b: Builder, i: int, wf: WeightFormat) -> None:
    b.buffer(f"w{i}", "u32")
    b.buffer(f"scales{i}", wf.dtype)
    b.buffer(f"biases{i}", wf.dtype)


def tile(b: Builder, i: int, wf: WeightFormat, local_cols: T, col_ok: T, ks: T, k_ok: T, K: T) -> T:
    """Element (n, k) of weight i as f32 - scale * q + bias - zero where masked: a [BN, BK] tile."""
    mask = col_ok[:, None] & k_ok[None, :]
    words_per_row = K * wf.bits // 32
    if 32 % wf.bits == 0:  # whole values per word
        per_word = 32 // wf.bits
        word = b.load(f"w{i}", local_cols[:, None] * words_per_row + (ks // per_word)[None, :], mask)
        shift = ((ks % per_word) * wf.bits)[None, :]
        q = ((word >> shift) & ((1 << wf.bits) - 1)).to("f32")
    else:  # 3, 5, 6 bits: a row is one bit stream, a value may continue in the next word
        bit = ks * wf.bits
        row = local_cols[:, None] * words_per_row
        shift = (bit % 32)[None, :]
        lo = b.load(f"w{i}", row + (bit // 32)[None, :], mask)
        # the word of the value's last bit: the next one where it straddles, else the same - a
        # word another value loads too, so each word is loaded once
        hi = b.load(f"w{i}", row + ((bit + (wf.bits - 1)) // 32)[None, :], mask)
        # hi's low bits go above lo's (shifted in two steps: never by 32); the two parts' bits
        # are disjoint, so + joins them, and where hi is lo again its copy lies above the mask
        q = (((lo >> shift) + ((hi << 1) << (31 - shift))) & ((1 << wf.bits) - 1)).to("f32")
    groups = K // wf.group_size
    g_off = local_cols[:, None] * groups + (ks // wf.group_size)[None, :]
    scale = b.load(f"scales{i}", g_off, mask).to("f32")
    bias = b.load(f"biases{i}", g_off, mask).to("f32")
    return q * scale + bias


def inputs(w: QuantizedWeight) -> list[mx.array]:
    return [w.w, w.scales, w.biases]


def product(x: mx.array, w: QuantizedWeight) -> mx.array:
    """The stock MLX product of x with the quantized weight (transposed)."""
    return mx.quantized_matmul(x, w.w, w.scales, w.biases, transpose=True, group_size=w.group_size, bits=w.bits)


def dequantize_exact(w: mx.array, scales: mx.array, biases: mx.array, group_size: int, bits: int) -> np.ndarray:
    """Affine-quantized weights as float64: scales * q + biases, without rounding."""
    words = np.ascontiguousarray(np.array(w), dtype="<u4")  # a row's words: one bit stream, LSB first
    stream = np.unpackbits(words.view(np.uint8), axis=1, bitorder="little")
    values = stream.reshape(words.shape[0], -1, bits).astype(np.uint32)
    q = (values << np.arange(bits, dtype=np.uint32)).sum(axis=2).astype(np.float64)
    s = np.repeat(np.array(scales.astype(mx.float32), np.float64), group_size, axis=1)
    b = np.repeat(np.array(biases.astype(mx.float32), np.float64), group_size, axis=1)
    return s * q + b


def reference(w: QuantizedWeight) -> np.ndarray:
    """The weight as float64, exactly."""
    return dequantize_exact(w.w, w.scales, w.biases, w.group_size, w.bits)
