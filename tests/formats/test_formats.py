"""mlx_metile.formats: WeightFormat, the dense and affine formats' argument checks, their float64
references and their stock MLX products."""

from __future__ import annotations

import dataclasses

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from mlx_metile import formats
from mlx_metile.formats import QuantizedWeight, WeightFormat, dense

from ..helpers import bits, f64, rand

FLOATS = [mx.float32, mx.float16, mx.bfloat16]


def _quantized(n: int, k: int, group: int, nbits: int, dtype=mx.bfloat16, seed: int = 1) -> QuantizedWeight:
    return QuantizedWeight(*mx.quantize(rand((n, k), dtype, seed, 0.1), group_size=group, bits=nbits), group, nbits)


# -- WeightFormat ------------------------------------------------------------------------------


def test_mode_is_derived_from_bits():
    assert WeightFormat("bf16").mode == "dense" and not WeightFormat("bf16").quantized
    assert WeightFormat("f16", 4, 64).mode == "affine" and WeightFormat("f16", 4, 64).quantized
    assert WeightFormat("f16", 8, 32, mode="affine") == WeightFormat("f16", 8, 32)
    assert WeightFormat("f32", mode="dense") == WeightFormat("f32")
    assert hash(WeightFormat("bf16", 4, 64, True, "bf16")) == hash(WeightFormat("bf16", 4, 64, True, "bf16"))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(bits=4, group_size=64, mode="dense"), "mode: 'dense' with bits=4"),
        (dict(mode="affine"), "mode: 'affine' with bits=0"),
        (dict(bits=4, group_size=64, mode="gptq"), "mode: 'gptq' is not one of"),
    ],
)
def test_contradictory_modes_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WeightFormat("bf16", **kwargs)


def test_a_format_is_frozen():
    wf = WeightFormat("bf16", 4, 64)
    with pytest.raises(dataclasses.FrozenInstanceError):
        wf.bits = 8


@pytest.mark.parametrize(
    "wf,name,short",
    [
        (WeightFormat("bf16"), "bf16", "bf16"),
        (WeightFormat("f32", has_bias=True), "f32b", "f32"),
        (WeightFormat("bf16", 4, 64), "q4g64bf16", "q4g64"),
        (WeightFormat("f16", 8, 32, True, "f16"), "q8g32f16b", "q8g32"),
        (WeightFormat("f32", 4, 128, True, "f32"), "q4g128f32b", "q4g128"),
    ],
)
def test_names(wf, name, short):
    assert wf.name() == name and wf.short() == short


def test_format_of_a_weight_and_its_bias():
    w = rand((8, 64), mx.float16, 1)
    assert formats.format_of(w, None, 0) == WeightFormat("f16")
    assert formats.format_of(w, rand((8,), mx.bfloat16, 2), 0) == WeightFormat("f16", has_bias=True, bias_dtype="bf16")
    q = _quantized(8, 64, 32, 8, mx.float16)
    assert formats.format_of(q, None, 1) == WeightFormat("f16", 8, 32)
    assert formats.format_of(q, rand((8,), mx.float32, 3), 1) == WeightFormat("f16", 8, 32, True, "f32")
    with pytest.raises(TypeError, match=r"biases\[2\]: dtype mlx.core.int32 is not supported"):
        formats.format_of(w, mx.zeros((8,), mx.int32), 2)


# -- dense ---------------------------------------------------------------------------------------


def test_dense_checks_name_the_argument():
    w = rand((8, 16), mx.float32, 1)
    assert dense.check(w, "weights[0]", 16) == (8, 16)
    assert dense.check(w, "weight") == (8, 16)
    with pytest.raises(TypeError, match=r"weights\[0\]: expected an mlx.core.array, got ndarray"):
        dense.check(np.zeros((8, 16), np.float32), "weights[0]")
    with pytest.raises(TypeError, match=r"weights\[1\]: dtype mlx.core.int32 is not supported"):
        dense.check(mx.zeros((8, 16), mx.int32), "weights[1]")
    with pytest.raises(ValueError, match=r"weight: expected a 2-D \[N, K\] array, got shape \(8, 16, 1\)"):
        dense.check(w.reshape(8, 16, 1), "weight")
    with pytest.raises(ValueError, match=r"weights\[2\]: K=16 does not match x's last dimension 12"):
        dense.check(w, "weights[2]", 12)


@pytest.mark.parametrize("dtype", FLOATS)
def test_dense_reference_is_the_weight_in_float64(dtype):
    w = rand((5, 7), dtype, 2)
    ref = formats.reference(w)
    assert ref.dtype == np.float64 and ref.shape == (5, 7)
    np.testing.assert_array_equal(ref, np.array(w.astype(mx.float32)).astype(np.float64))  # widening is exact
    assert formats.inputs(w)[0] is w and len(formats.inputs(w)) == 1


# -- affine --------------------------------------------------------------------------------------


def test_quantized_weight_checks_name_the_argument():
    w, s, b = mx.quantize(rand((8, 128), mx.float32, 1), group_size=64, bits=4)
    cases = [
        (dict(bits=7), ValueError, r"bits: 7 is not supported; use one of \(2, 3, 4, 5, 6, 8\)"),
        (dict(bits=1), ValueError, "bits: 1 is not supported"),
        (dict(bits=3), ValueError, "w: 16 words per row do not hold whole 3-bit values"),
        (dict(group_size=16), ValueError, r"group_size: 16 is not supported; use one of \(32, 64, 128\)"),
        (dict(w=w.astype(mx.int32)), ValueError, "w: expected a 2-D uint32 array of packed values"),
        (dict(w=w.reshape(-1)), ValueError, "w: expected a 2-D uint32 array"),
        (dict(w=np.array(w)), TypeError, "w: expected an mlx.core.array, got ndarray"),
        (dict(scales=s[:, :1]), ValueError, r"scales: expected shape \(8, 2\) for N=8, K=128, group_size=64"),
        (dict(biases=b[:4]), ValueError, r"biases: expected shape \(8, 2\)"),
        (dict(scales=s.astype(mx.int32), biases=b.astype(mx.int32)), TypeError, "scales: dtype mlx.core.int32"),
        (dict(biases=b.astype(mx.float16)), ValueError, "biases: dtype mlx.core.float16 differs from scales'"),
        (dict(scales=None), TypeError, "scales: expected an mlx.core.array, got NoneType"),
        (dict(biases=None), ValueError, "biases: mode 'affine' needs biases"),
        (dict(mode="mxfp4"), ValueError, r"biases: must be None for mode 'mxfp4'"),
        (dict(mode="MXFP4"), ValueError, r"mode: 'MXFP4' is not a quantization mode of MLX"),
        (dict(mode="fp4"), ValueError, r"mode: 'fp4' is not a quantization mode of MLX; expected one of"),
    ]
    for change, exc, message in cases:
        args = dict(w=w, scales=s, biases=b, group_size=64, bits=4) | change
        with pytest.raises(exc, match=message):
            QuantizedWeight(**args)
    w6, s6, b6 = mx.quantize(rand((8, 96), mx.float32, 3), group_size=32, bits=4)
    with pytest.raises(ValueError, match=r"group_size: K=96 \(from w's 12 words per row at bits=4\) is not a multiple"):
        QuantizedWeight(w6, s6[:, :1], b6[:, :1], group_size=64, bits=4)


def test_quantized_weight_shape_and_immutability():
    q = _quantized(24, 256, 64, 8)
    assert (q.N, q.K, q.mode) == (24, 256, "affine")
    assert repr(q) == "QuantizedWeight(N=24, K=256, bits=8, group_size=64, mode='affine')"
    assert [a is b for a, b in zip(formats.inputs(q), (q.w, q.scales, q.biases))] == [True] * 3
    with pytest.raises(AttributeError, match="immutable"):
        q.bits = 4


def test_from_quantized_linear():
    layer = nn.QuantizedLinear(128, 16, bias=False, group_size=32, bits=8)
    q = QuantizedWeight.from_quantized_linear(layer)
    assert q.w is layer.weight and q.scales is layer.scales and q.biases is layer.biases
    assert (q.group_size, q.bits, q.N, q.K) == (32, 8, 16, 128)
    other = {"weight": layer.weight, "scales": layer.scales * 2, "biases": layer.biases}
    assert QuantizedWeight.from_quantized_linear(layer, other).scales is other["scales"]
    fp4 = nn.QuantizedLinear(128, 16, bias=False, mode="mxfp4")
    q = QuantizedWeight.from_quantized_linear(fp4)
    assert q.w is fp4.weight and q.scales is fp4.scales and q.biases is None
    assert (q.mode, q.group_size, q.bits, q.N, q.K) == ("mxfp4", 32, 4, 16, 128)


@pytest.mark.parametrize("scale_dtype", FLOATS)
@pytest.mark.parametrize("group", [32, 64, 128])
@pytest.mark.parametrize("nbits", [2, 3, 4, 5, 6, 8])
def test_affine_reference_is_mlx_dequantize_in_float64(nbits, group, scale_dtype):
    q = _quantized(12, 384, group, nbits, scale_dtype, seed=nbits * group)
    ref = formats.reference(q)
    assert ref.dtype == np.float64 and ref.shape == (12, 384)
    # MLX's dequantize on float64 scales and biases: scale * q is exact in float64 (at most 24 + 8
    # significant bits), so both round only the sum, once: equal
    stock = mx.dequantize(
        q.w, q.scales.astype(mx.float64), q.biases.astype(mx.float64), group_size=group, bits=nbits, stream=mx.cpu
    )
    np.testing.assert_array_equal(ref, np.array(stock))
    np.testing.assert_array_equal(ref, formats.dequantize_exact(q.w, q.scales, q.biases, group, nbits))


def test_three_bit_values_straddle_words_as_mlx_packs_them():
    # K = 32 at 3 bits is 3 words of one bit stream: value 10 is bits 30-31 of word 0 and bit 0 of
    # word 1, value 21 bit 31 of word 1 and bits 0-1 of word 2
    words = mx.array([[0b11 << 30, (1 << 31) | 1, 0b11]], dtype=mx.uint32)
    q = QuantizedWeight(words, mx.ones((1, 1)), mx.zeros((1, 1)), group_size=32, bits=3)
    want = [0.0] * 32
    want[10], want[21] = 7.0, 7.0
    np.testing.assert_array_equal(formats.reference(q)[0], want)
    stock = mx.dequantize(words, mx.ones((1, 1)), mx.zeros((1, 1)), group_size=32, bits=3, stream=mx.cpu)
    np.testing.assert_array_equal(np.array(stock)[0], want)


def test_affine_reference_unpacks_least_significant_bits_first():
    # one row, K = 32 at 4 bits: word 0 holds k = 0..7, word 1..3 the rest; scale 1, bias 0
    words = mx.array([[0x76543210, 0xFEDCBA98, 0x0, 0x11111111]], dtype=mx.uint32)
    q = QuantizedWeight(words, mx.ones((1, 1)), mx.zeros((1, 1)), group_size=32, bits=4)
    np.testing.assert_array_equal(formats.reference(q)[0], list(range(16)) + [0] * 8 + [1] * 8)


# -- stock products ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
def test_dense_product_is_stock_matmul(dtype):
    x = rand((2, 3, 48), dtype, 1)
    w = rand((20, 48), dtype, 2)
    np.testing.assert_array_equal(bits(formats.product(x, w)), bits(x @ w.T))


@pytest.mark.parametrize("nbits,group", [(4, 32), (4, 64), (8, 128)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_affine_product_is_stock_quantized_matmul(nbits, group, dtype):
    x = rand((5, 256), dtype, 3)
    q = _quantized(24, 256, group, nbits, dtype, seed=4)
    stock = mx.quantized_matmul(x, q.w, q.scales, q.biases, transpose=True, group_size=group, bits=nbits)
    got = formats.product(x, q)
    assert got.dtype == stock.dtype and got.shape == (5, 24)
    np.testing.assert_array_equal(bits(got), bits(stock))
    if dtype == mx.float32:
        # the product of the reference, which tells a misread weight (off by O(1)) from rounding:
        # f32 accumulation over K=256 and the f32 dequantized weights, one output rounding
        ref = formats.reference(q)
        exact = f64(x) @ ref.T
        tol = 258 * 2.0**-24 * (np.abs(f64(x)) @ np.abs(ref).T) + 2.0**-24 * np.abs(exact)
        assert (np.abs(f64(got) - exact) <= tol).all()
