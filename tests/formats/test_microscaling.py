"""mlx_metile.formats.microscaling: MLX's mxfp4, mxfp8 and nvfp4 weights - the code and scale
decoders against MLX's own (every code, every scale byte), the float64 reference against
mx.dequantize, the argument checks, the stock product and the tile IR's dequantisation (run by the
IR interpreter) against the reference."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from mlx_metile import formats
from mlx_metile.formats import QuantizedWeight, WeightFormat, microscaling
from mlx_metile.ir.builder import Builder
from mlx_metile.ir.interpret import interpret

from ..helpers import rand

MODES = list(microscaling.MODES)


def _quantized(mode: str, n: int = 8, k: int = 128, dtype=mx.bfloat16, seed: int = 1) -> QuantizedWeight:
    w, s = mx.quantize(rand((n, k), dtype, seed, 0.1), mode=mode)
    return QuantizedWeight(w, s, mode=mode)


def _synthetic(mode: str, seed: int = 0) -> QuantizedWeight:
    """Random code words with every scale byte 0..255 (NaN codes, inf and subnormal scales
    included): 16 rows of 16 groups."""
    group, nbits, _ = microscaling.MODES[mode]
    rng = np.random.default_rng(seed)
    scales = np.arange(256, dtype=np.uint8).reshape(16, 16)
    words = rng.integers(0, 2**32, size=(16, 16 * group * nbits // 32), dtype=np.uint64).astype(np.uint32)
    return QuantizedWeight(mx.array(words), mx.array(scales), None, group, nbits, mode)


def test_e2m1_codes_are_mlx_fp4_values():
    # one row of K = 32 (mxfp4): word j holds codes 8j..8j+7; scale byte 127 is 2**0
    words = mx.array([[0x76543210, 0xFEDCBA98, 0x0, 0x0]], dtype=mx.uint32)
    scales = mx.array([[127]], dtype=mx.uint8)
    stock = np.array(mx.dequantize(words, scales, mode="mxfp4", dtype=mx.float32), np.float64)[0]
    want = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6] + [0] * 16
    np.testing.assert_array_equal(stock, want)
    np.testing.assert_array_equal(microscaling.decode_e2m1(np.arange(16)), want[:16])
    np.testing.assert_array_equal(np.signbit(microscaling.decode_e2m1(np.arange(16))), np.arange(16) >= 8)


def test_e4m3_codes_are_mlx_fp8_values():
    codes = mx.arange(256).astype(mx.uint8)
    stock = np.array(mx.from_fp8(codes, dtype=mx.float32), np.float64)
    ours = microscaling.decode_e4m3(np.arange(256))
    np.testing.assert_array_equal(ours, stock)  # NaN at 0x7F / 0xFF on both
    assert np.isnan(ours[[0x7F, 0xFF]]).all() and ours[0x7E] == 448 and ours[1] == 2.0**-9


@pytest.mark.parametrize("mode", MODES)
def test_reference_is_mlx_dequantize_for_every_scale_byte(mode):
    q = _synthetic(mode)
    ref = formats.reference(q)
    # In float32 mx.dequantize is exact here: a code value has at most 4 significant bits and a
    # scale one (e8m0) or 4 (e4m3), products stay inside f32's range down to 2**-136; byte 255 of
    # e8m0 is inf, so a zero code there gives NaN on both sides.
    stock = mx.dequantize(q.w, q.scales, None, q.group_size, q.bits, mode=mode, dtype=mx.float32)
    np.testing.assert_array_equal(ref, np.array(stock, np.float64))
    if microscaling.MODES[mode][2] == "e8m0":
        assert np.isinf(ref[15, -q.group_size :]).any()  # byte 255: inf
        first = np.abs(ref[0, : q.group_size])  # byte 0: 2**-127, no zero
        assert first[first != 0].min() >= 2.0**-136 and (first != 0).any()


@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16])
@pytest.mark.parametrize("mode", MODES)
def test_reference_of_quantized_data_and_its_format(mode, dtype):
    q = _quantized(mode, dtype=dtype, seed=3)
    stock = mx.dequantize(q.w, q.scales, None, q.group_size, q.bits, mode=mode, dtype=mx.float32)
    np.testing.assert_array_equal(formats.reference(q), np.array(stock, np.float64))
    wf = formats.format_of(q, None, 0)
    assert (wf.mode, wf.dtype, wf.bits, wf.group_size) == (mode, "u8", q.bits, q.group_size)
    assert wf.name() == f"{mode}g{q.group_size}" and wf.short() == wf.name()
    assert [a is b for a, b in zip(formats.inputs(q), (q.w, q.scales))] == [True, True]
    assert len(formats.inputs(q)) == 2 and q.arrays() == formats.inputs(q)


@pytest.mark.parametrize("mode", MODES)
def test_stock_product_is_quantized_matmul_of_the_mode(mode):
    q = _quantized(mode, n=24, k=256)
    x = rand((3, 256), mx.bfloat16, 5)
    ours = formats.product(x, q)
    stock = mx.quantized_matmul(x, q.w, q.scales, None, transpose=True, group_size=q.group_size, bits=q.bits, mode=mode)
    assert ours.dtype == mx.bfloat16
    np.testing.assert_array_equal(np.array(ours.astype(mx.float32)), np.array(stock.astype(mx.float32)))


def test_checks_name_the_argument():
    w, s = mx.quantize(rand((8, 128), mx.float32, 1), mode="mxfp4")
    cases = [
        (dict(biases=s), ValueError, "biases: must be None for mode 'mxfp4'"),
        (dict(group_size=64), ValueError, "group_size: mode 'mxfp4' has groups of 32, got 64"),
        (dict(bits=8), ValueError, "bits: mode 'mxfp4' has 4-bit values, got 8"),
        (
            dict(scales=s.astype(mx.float16)),
            TypeError,
            "scales: mode 'mxfp4' stores uint8 scales, got mlx.core.float16",
        ),
        (dict(scales=s[:, :2]), ValueError, r"scales: expected shape \(8, 4\) for N=8, K=128, group_size=32"),
        (dict(w=w.astype(mx.int32)), ValueError, "w: expected a 2-D uint32 array of packed values"),
        (dict(w=w[:, :3]), ValueError, "w: K=24 .* is not a multiple of 32"),
        (dict(scales=None), TypeError, "scales: expected an mlx.core.array, got NoneType"),
    ]
    for change, exc, message in cases:
        args = dict(w=w, scales=s, biases=None, group_size=None, bits=None, mode="mxfp4") | change
        with pytest.raises(exc, match=message):
            QuantizedWeight(**args)
    w8, s8 = mx.quantize(rand((8, 128), mx.float32, 1), mode="nvfp4")
    with pytest.raises(ValueError, match="group_size: mode 'nvfp4' has groups of 16, got 32"):
        QuantizedWeight(w8, s8, group_size=32, mode="nvfp4")


@pytest.mark.parametrize("mode", MODES)
def test_defaults_and_layers_follow_mlx(mode):
    q = _quantized(mode)
    assert (q.group_size, q.bits) == microscaling.MODES[mode][:2]
    layer = nn.QuantizedLinear(64, 8, bias=True, mode=mode)
    from_layer = QuantizedWeight.from_quantized_linear(layer)
    assert from_layer.mode == mode and from_layer.biases is None and from_layer.w is layer.weight
    assert formats.supported(mode, layer.bits, layer.group_size)
    assert not formats.supported(mode, layer.bits, 64) and not formats.supported("fp4", 4, 32)


@pytest.mark.parametrize("mode", MODES)
def test_tile_ir_dequantises_as_the_reference(mode):
    """The format's tile IR, run by the IR interpreter over every scale byte and random codes,
    gives the reference's values (NaN where it has NaN)."""
    q = _synthetic(mode, seed=7)
    n, k = q.N, q.K
    wf = WeightFormat("u8", q.bits, q.group_size, mode=mode)
    b = Builder("dequantize", grid_rank=1)
    microscaling.declare(b, 0, wf)
    b.buffer("out", "f32", output=True)
    cols, ks = b.arange(n), b.arange(k)
    value = microscaling.tile(b, 0, wf, cols, cols < n, ks, ks < k, b.lift(k))
    b.store("out", cols[:, None] * k + ks[None, :], value)
    out = np.zeros((n, k), np.float32)
    interpret(b.build(), (1,), {"w0": np.array(q.w), "scales0": np.array(q.scales), "out": out}, {})
    np.testing.assert_array_equal(out.astype(np.float64), formats.reference(q))
