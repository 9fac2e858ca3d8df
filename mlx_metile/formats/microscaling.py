"""MLX's microscaling modes: uint32 words packing 4-bit e2m1 codes (mxfp4, nvfp4) or 8-bit e4m3
codes (mxfp8) least-significant first, one uint8 scale per group and no biases; element (n, k) is
code value * scale. mxfp4 and mxfp8 scales are e8m0 (2**(byte - 127); byte 255 is inf, 0 is
2**-127), nvfp4's e4m3. mx.dequantize and MLX's kernels are the definition (fp4.h, fp8.h,
fp_quantized.h of MLX 0.32.4); nvfp4's optional global scale is no argument of
mx.quantized_matmul, so a weight holds none."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from ..ir.builder import Builder, T
from .dtypes import require_array

# mode -> (group size, bits, scale encoding), as mx.quantize fixes them
MODES = {"mxfp4": (32, 4, "e8m0"), "mxfp8": (32, 8, "e8m0"), "nvfp4": (16, 4, "e4m3")}

# e2m1 codes 0..7 (code 8..15: the same, negative)
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_F32_HALF = 0x3F000000  # 0.5 as f32 bits
_F32_QUIET_NAN = 0x7FC00000
_E4M3_TO_F32_EXPONENT = (127 - 7) << 23  # e4m3's exponent bias 7 moved to f32's 127


def validate(w, scales, biases, group_size: int, bits: int, mode: str) -> None:
    w = require_array(w, "w")
    scales = require_array(scales, "scales")
    group, width, _ = MODES[mode]
    if biases is not None:
        raise ValueError(f"biases: must be None for mode {mode!r} (its groups have scales only)")
    if group_size != group:
        raise ValueError(f"group_size: mode {mode!r} has groups of {group}, got {group_size}")
    if bits != width:
        raise ValueError(f"bits: mode {mode!r} has {width}-bit values, got {bits}")
    if w.dtype != mx.uint32 or w.ndim != 2:
        raise ValueError(f"w: expected a 2-D uint32 array of packed values, got {w.dtype} with shape {w.shape}")
    n, words = w.shape
    k = words * 32 // bits
    if k % group_size:
        raise ValueError(f"w: K={k} (from {words} words per row at bits={bits}) is not a multiple of {group_size}")
    if scales.dtype != mx.uint8:
        raise TypeError(f"scales: mode {mode!r} stores uint8 scales, got {scales.dtype}")
    if tuple(scales.shape) != (n, k // group_size):
        raise ValueError(
            f"scales: expected shape {(n, k // group_size)} for N={n}, K={k}, group_size={group_size}, got {scales.shape}"
        )


def declare(b: Builder, i: int, wf) -> None:
    b.buffer(f"w{i}", "u32")
    b.buffer(f"scales{i}", "u8")


def _eq(b: Builder, a: T, value: int) -> T:
    return b.binary("eq", a, b.lift(value, a.dtype))  # (T has no ==: it would compare identities)


def _e2m1(b: Builder, code: T) -> T:
    """A 4-bit e2m1 code as f32: magnitudes 2**(e-1) * (1 + m/2) for exponent e > 0, m/2 for e = 0
    (code & 7 below 2), the sign in bit 3 - built as f32 bits."""
    low = code & 7
    normal = (low << 22) + (126 << 23)  # exponent e + 126, mantissa m in its top bit
    magnitude = b.select(low < 2, low * _F32_HALF, normal)
    return b.bitcast(magnitude + ((code & 8) << 28), "f32")


def _e4m3(b: Builder, code: T) -> T:
    """An 8-bit e4m3 (OCP e4m3fn) code as f32: bias 7, subnormals m/8 * 2**-6, 0x7F / 0xFF NaN."""
    low = code & 0x7F
    normal = b.bitcast((low << 20) + _E4M3_TO_F32_EXPONENT, "f32")
    subnormal = (low & 7).to("f32") * (2.0**-9)
    magnitude = b.select(low < 8, subnormal, normal)
    magnitude = b.select(_eq(b, low, 0x7F), b.bitcast(b.lift(_F32_QUIET_NAN, "u32"), "f32"), magnitude)
    return b.select((code & 0x80) > 0, -magnitude, magnitude)


def _e8m0(b: Builder, byte: T) -> T:
    """An e8m0 scale: 2**(byte - 127) as f32 bits (byte 255: inf; byte 0: 2**-127, a subnormal)."""
    return b.bitcast(b.select(_eq(b, byte, 0), b.lift(1 << 22, "u32"), byte << 23), "f32")


def tile(b: Builder, i: int, wf, local_cols: T, col_ok: T, ks: T, k_ok: T, K: T) -> T:
    """Element (n, k) of weight i as f32 - code value * scale - zero where masked: a [BN, BK] tile."""
    mask = col_ok[:, None] & k_ok[None, :]
    per_word = 32 // wf.bits
    word = b.load(f"w{i}", local_cols[:, None] * (K // per_word) + (ks // per_word)[None, :], mask)
    code = (word >> ((ks % per_word) * wf.bits)[None, :]) & ((1 << wf.bits) - 1)
    value = _e2m1(b, code) if wf.bits == 4 else _e4m3(b, code)
    g_off = local_cols[:, None] * (K // wf.group_size) + (ks // wf.group_size)[None, :]
    byte = b.load(f"scales{i}", g_off, mask).to("u32")
    scale = _e8m0(b, byte) if MODES[wf.mode][2] == "e8m0" else _e4m3(b, byte)
    return value * scale


def inputs(w) -> list[mx.array]:
    return [w.w, w.scales]


def product(x: mx.array, w) -> mx.array:
    """The stock MLX product of x with the quantized weight (transposed)."""
    return mx.quantized_matmul(
        x, w.w, w.scales, None, transpose=True, group_size=w.group_size, bits=w.bits, mode=w.mode
    )


def decode_e2m1(codes: np.ndarray) -> np.ndarray:
    codes = np.asarray(codes, np.int64)
    return np.where(codes & 8, -1.0, 1.0) * np.asarray(E2M1, np.float64)[codes & 7]


def decode_e4m3(codes: np.ndarray) -> np.ndarray:
    codes = np.asarray(codes, np.int64)
    e, m = (codes >> 3) & 15, (codes & 7).astype(np.float64)
    value = np.where(e == 0, np.ldexp(m / 8, -6), np.ldexp(1 + m / 8, e - 7))
    value = np.where((codes & 0x7F) == 0x7F, np.nan, value)
    return np.where(codes & 0x80, -value, value)


def decode_e8m0(codes: np.ndarray) -> np.ndarray:
    """2**(byte - 127) as MLX computes it in float32 or bfloat16: byte 255 (2**128) overflows to inf."""
    codes = np.asarray(codes, np.int64)
    return np.where(codes == 255, np.inf, np.ldexp(1.0, codes - 127))


def dequantize_exact(w: mx.array, scales: mx.array, group_size: int, bits: int, mode: str) -> np.ndarray:
    """Microscaled weights as float64: exactly the values mx.dequantize gives in float32 (each
    product is exact there, down to 2**-136, and overflows to inf past float32's range)."""
    words = np.ascontiguousarray(np.array(w), dtype="<u4")
    stream = np.unpackbits(words.view(np.uint8), axis=1, bitorder="little")
    codes = (stream.reshape(words.shape[0], -1, bits).astype(np.int64) << np.arange(bits)).sum(axis=2)
    values = decode_e2m1(codes) if bits == 4 else decode_e4m3(codes)
    bytes_ = np.array(scales).astype(np.int64)
    s = decode_e8m0(bytes_) if MODES[mode][2] == "e8m0" else decode_e4m3(bytes_)
    with np.errstate(invalid="ignore"):  # 0 * inf is NaN, as in MLX
        product = values * np.repeat(s, group_size, axis=1)
        # beyond float32's range (e8m0 scales near 2**127) the float32 product is inf
        return np.where(np.abs(product) > np.finfo(np.float32).max, np.copysign(np.inf, product), product)


def reference(w) -> np.ndarray:
    """The weight as float64, exactly."""
    return dequantize_exact(w.w, w.scales, w.group_size, w.bits, w.mode)
