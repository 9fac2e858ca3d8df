"""MLX's affine quantization: uint32 words packing `bits`-bit values least-significant first,
with scales and biases per `group_size` columns; element (n, k) is scale * q + bias."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from ..ir.builder import Builder, T
from .dtypes import float_dtype, require_array
from .format import WeightFormat

MODE = "affine"
SUPPORTED_BITS = (2, 3, 4, 5, 6, 8)
SUPPORTED_GROUP_SIZES = (32, 64, 128)


def validate(w, scales, biases, group_size: int, bits: int) -> None:
    w = require_array(w, "w")
    scales = require_array(scales, "scales")
    if biases is None:
        raise ValueError("biases: mode 'affine' needs biases (one per group, like its scales)")
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


def inputs(w) -> list[mx.array]:
    return [w.w, w.scales, w.biases]


def product(x: mx.array, w) -> mx.array:
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


def reference(w) -> np.ndarray:
    """The weight as float64, exactly."""
    return dequantize_exact(w.w, w.scales, w.biases, w.group_size, w.bits)
