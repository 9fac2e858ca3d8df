"""Arguments as stock MLX ops take them, the limits a user could meet, and output dtypes: each
against the stock composition (or float64) on the CPU path."""

from __future__ import annotations

import copy
import pickle

import mlx.core as mx
import numpy as np
import pytest

import mlx_metile as mt
from mlx_metile.formats import dequantize_exact

from ..helpers import f64, rand

K, N = 128, 48


def _q(seed=0, dtype=mx.float32):
    return mx.quantize(rand((N, K), dtype, seed, 0.1), group_size=64, bits=4)


def test_numpy_integers_for_bits_and_group_size():
    x, q = rand((3, K), mx.float32, 1), _q()
    want = mt.quantized_linear(x, *q, group_size=64, bits=4)
    got = mt.quantized_linear(x, *q, group_size=np.int32(64), bits=np.int64(4))
    assert np.array_equal(np.array(got), np.array(want))
    qw = mt.QuantizedWeight(*q, np.int64(64), np.int8(4))
    assert (qw.group_size, qw.bits) == (64, 4) and type(qw.bits) is int


@pytest.mark.parametrize("arg", ["bits", "group_size"])
@pytest.mark.parametrize("value", [4.0, "4", True])
def test_non_integer_bits_or_group_size_is_a_type_error_naming_it(arg, value):
    x, q = rand((3, K), mx.float32, 1), _q()
    kwargs = {"bits": 4, "group_size": 64, arg: value}
    with pytest.raises(TypeError, match=rf"^{arg}: expected an integer"):
        mt.quantized_linear(x, *q, **kwargs)


def test_mode_as_stock_quantized_matmul_takes_it():
    x, q = rand((3, K), mx.float32, 1), _q()
    want = f64(x) @ dequantize_exact(*q, 64, 4).T  # float64 on the dequantized weights
    got = mt.quantized_linear(x, *q, group_size=64, bits=4, mode="affine")
    np.testing.assert_allclose(f64(got), want, rtol=0, atol=1e-5 * float(np.abs(want).max()))  # f32 sums
    w, s = mx.quantize(rand((N, K), mx.float32, 3), group_size=32, bits=4, mode="mxfp4")
    want = f64(x) @ np.array(mx.dequantize(w, s, mode="mxfp4", dtype=mx.float32), np.float64).T  # exact in f32
    got = mt.quantized_linear(x, w, s, None, group_size=32, bits=4, mode="mxfp4")
    np.testing.assert_allclose(f64(got), want, rtol=0, atol=1e-5 * float(np.abs(want).max()))  # f32 sums
    with pytest.raises(ValueError, match=r"^biases: must be None for mode 'mxfp4'"):
        mt.quantized_linear(x, w, s, s, mode="mxfp4")  # (MLX: biases must be null for mxfp4)
    with pytest.raises(ValueError, match=r"^biases: mode 'affine' needs biases"):
        mt.quantized_linear(x, q[0], q[1], None)
    with pytest.raises(ValueError, match=r"^mode: 'fp8' is not a quantization mode of MLX"):
        mt.quantized_linear(x, w, s, mode="fp8")


def test_bad_biases_and_norm_are_refused_naming_them():
    x, q, w = rand((3, K), mx.float32, 1), _q(), rand((N, K), mx.float32, 2)
    with pytest.raises(TypeError, match=r"^bias: expected an mlx.core.array"):
        mt.quantized_linear(x, *q, bias=[0.0] * N)  # the output bias, not the quantization's biases
    with pytest.raises(TypeError, match=r"^biases: expected a list or tuple"):
        mt.fused_linear(x, [w], biases=mx.zeros((1, N)))  # an array is not one bias per weight
    g = mx.ones((K,))
    for bad, kind, text in (
        ((g, True), TypeError, r"^norm\[1\]: expected a number"),
        ((g, 1e-5, "x"), TypeError, r"^norm: expected \(weight, eps\)"),
        ([g, 1e-5], TypeError, r"^norm: expected \(weight, eps\)"),
        ((g, -1.0), ValueError, r"^norm\[1\]: expected a positive finite eps"),
    ):
        with pytest.raises(kind, match=text):
            mt.fused_linear(x, [w], norm=bad)
        with pytest.raises(kind, match=text):
            mt.Projection([w], norm=bad)(x)


def test_numpy_eps_for_the_norm():
    x, w, g = rand((2, K), mx.float32, 1), rand((N, K), mx.float32, 2, 0.1), rand((K,), mx.float32, 3)
    want = mx.fast.rms_norm(x, g, 1e-5) @ w.T
    for eps in (np.float32(1e-5), np.float64(1e-5)):
        got = mt.fused_linear(x, [w], norm=(g, eps))
        # the norm is stock's op here (CPU); the product rounds in f32: a few f32 ulps of |x||w|
        tol = 8 * 2.0**-24 * (np.abs(f64(mx.fast.rms_norm(x, g, 1e-5))) @ np.abs(f64(w)).T) + 1e-7
        assert (np.abs(f64(got) - f64(want)) <= tol).all()
    with pytest.raises(TypeError, match=r"^norm\[1\]"):
        mt.fused_linear(x, [w], norm=(g, "1e-5"))


@pytest.mark.parametrize("stream", [mx.cpu, mx.Device(mx.cpu), mx.default_stream(mx.cpu), None])
def test_stream_as_stock_ops_take_it(stream):
    x, w = rand((2, K), mx.float32, 1), rand((N, K), mx.float32, 2, 0.1)
    got = mt.linear(x, w, stream=stream)
    stock = mx.matmul(x, w.T, stream=stream)
    assert np.allclose(np.array(got), np.array(stock), rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError, match="^stream:"):
        mt.linear(x, w, stream="cpu")


@pytest.mark.parametrize("shape_x,shape_w", [((0, K), (N, K)), ((3, 0), (N, 0)), ((3, K), (0, K)), ((2, 0, K), (N, K))])
def test_empty_inputs_give_correctly_shaped_results(shape_x, shape_w):
    x = mx.zeros(shape_x, mx.bfloat16)
    w = mx.zeros(shape_w, mx.bfloat16)
    b = mx.ones((shape_w[0],), mx.bfloat16)
    got = mt.linear(x, w, b)
    want = x @ w.T + b  # stock MLX's matmul takes these (its quantized product faults at K = 0)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.array_equal(np.array(got.astype(mx.float32)), np.array(want.astype(mx.float32)))


def test_empty_quantized_and_fused_inputs():
    q = _q()
    x0 = mx.zeros((0, K), mx.float32)
    assert mt.quantized_linear(x0, *q).shape == (0, N)
    outs = mt.fused_linear(x0, [mt.QuantizedWeight(*q), mt.QuantizedWeight(*q)], epilogue="swiglu")
    assert outs.shape == (0, N)
    r = mt.fused_linear(x0, [mt.QuantizedWeight(*q)], residual=mx.zeros((0, N)))
    assert r.shape == (0, N)


def test_fused_calls_with_many_weights_on_the_emulated_metal_path(env):
    """More weights than Metal's 31 buffer slots hold in one kernel (6+ quantized): split into
    several kernels, each output still its weight's product."""
    env.set("MLX_METILE_EMULATE", "1")
    x = rand((2, K), mx.float32, 1)
    qs = [_q(seed) for seed in range(7)]
    outs = mt.fused_linear(x, [mt.QuantizedWeight(*q) for q in qs])
    assert len(outs) == 7
    x64 = f64(x)
    for out, q in zip(outs, qs):
        w64 = dequantize_exact(*q, 64, 4)
        exact = x64 @ w64.T
        tol = 2.0**-24 * np.abs(exact) + K * 2.0**-24 * (np.abs(x64) @ np.abs(w64).T) + 1e-30
        assert (np.abs(f64(out) - exact) <= tol).all()


def test_vmap_matches_the_stock_composition():
    x, w, b = rand((5, 3, K), mx.float32, 1), rand((N, K), mx.float32, 2, 0.1), rand((N,), mx.float32, 3)
    for in_axes in (0, 1):
        got = mx.vmap(lambda x: mt.linear(x, w, b), in_axes=in_axes)(x)
        want = mx.vmap(lambda x: x @ w.T + b, in_axes=in_axes)(x)
        assert got.shape == want.shape
        assert np.allclose(np.array(got), np.array(want), rtol=1e-5, atol=1e-5)
    ws = rand((5, N, K), mx.float32, 4, 0.1)  # a mapped weight: the stock composition, vmapped
    got = mx.vmap(lambda w: mt.linear(x[0], w))(ws)
    assert np.allclose(np.array(got), np.array(x[0] @ mx.swapaxes(ws, 1, 2)), rtol=1e-5, atol=1e-5)
    r = rand((5, 3, N), mx.float32, 5)
    got = mx.vmap(lambda x, r: mt.fused_linear(x, [w], residual=r))(x, r)
    assert np.allclose(np.array(got), np.array(x @ w.T + r), rtol=1e-5, atol=1e-5)


def test_export_function_is_refused_with_mlx_s_error(tmp_path):
    """MLX serializes only its own primitives: a graph with mlx-metile ops cannot be exported
    (documented in the README)."""
    x, w = rand((2, K), mx.float32, 1), rand((N, K), mx.float32, 2, 0.1)
    with pytest.raises(ValueError, match="Unable to serialize primitive"):
        mx.export_function(str(tmp_path / "f.mlxfn"), lambda x: mt.linear(x, w), x)


def test_quantized_weight_copies_and_pickles():
    x, q = rand((2, K), mx.float32, 1), _q()
    qw = mt.QuantizedWeight(*q, 64, 4)
    for other in (copy.copy(qw), copy.deepcopy(qw), pickle.loads(pickle.dumps(qw))):
        assert (other.N, other.K, other.bits, other.group_size) == (qw.N, qw.K, 4, 64)
        assert np.array_equal(np.array(mt.fused_linear(x, [other])), np.array(mt.fused_linear(x, [qw])))


@pytest.mark.parametrize(
    "make",
    [
        lambda x, q, w: (mt.quantized_linear(x, q[0], q[1].astype(mx.float32), q[2].astype(mx.float32)),
                         mx.quantized_matmul(x, q[0], q[1].astype(mx.float32), q[2].astype(mx.float32), transpose=True)),
        lambda x, q, w: (mt.fused_linear(x, [w], residual=mx.zeros((2, N), mx.float32)),
                         x @ w.T + mx.zeros((2, N), mx.float32)),
        lambda x, q, w: (mt.linear(x, w, mx.zeros((N,), mx.float32)), x @ w.T + mx.zeros((N,), mx.float32)),
        lambda x, q, w: (mt.linear(x, w.astype(mx.float32)), x @ w.T.astype(mx.float32)),
    ],
    ids=["f32-scales", "f32-residual", "f32-bias", "f32-weight"],
)  # fmt: skip
def test_output_dtypes_follow_the_stock_composition(make):
    x = rand((2, K), mx.bfloat16, 1)
    w = rand((N, K), mx.bfloat16, 2, 0.1)
    ours, stock = make(x, mx.quantize(w, group_size=64, bits=4), w)
    assert ours.dtype == stock.dtype == mx.float32
