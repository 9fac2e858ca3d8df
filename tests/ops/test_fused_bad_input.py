"""Bad input to the quantized and fused ops: a ValueError / TypeError naming the argument."""

import weakref

import mlx.core as mx
import numpy as np
import pytest

import mlx_metile as mt

from ..helpers import rand


def _q(n=8, k=128, group=64, bits=4):
    return mx.quantize(rand((n, k), mx.float32, 1), group_size=group, bits=bits)


def test_quantized_argument_errors():
    x = rand((2, 128), mx.float32, 2)
    w, s, b = _q()
    with pytest.raises(ValueError, match=r"bits: 7 is not supported; use one of \(2, 3, 4, 5, 6, 8\)"):
        mt.quantized_linear(x, w, s, b, bits=7)
    with pytest.raises(ValueError, match="w: 16 words per row do not hold whole 3-bit values"):
        mt.quantized_linear(x, w, s, b, bits=3)  # 4-bit words read as 3-bit ones
    with pytest.raises(ValueError, match="group_size: 16 is not supported"):
        mt.quantized_linear(x, w, s, b, group_size=16)
    with pytest.raises(ValueError, match=r"scales: expected shape \(8, 2\)"):
        mt.quantized_linear(x, w, s[:, :1], b)
    with pytest.raises(ValueError, match=r"biases: dtype mlx.core.float16 differs from scales' mlx.core.float32"):
        mt.quantized_linear(x, w, s, b.astype(mx.float16))
    with pytest.raises(TypeError, match=r"scales: dtype mlx.core.int32 is not supported"):
        mt.quantized_linear(x, w, s.astype(mx.int32), b.astype(mx.int32))
    with pytest.raises(ValueError, match=r"w: expected a 2-D uint32 array"):
        mt.quantized_linear(x, w.astype(mx.int32), s, b)
    with pytest.raises(ValueError, match=r"w: K=128 does not match x's last dimension 96"):
        mt.quantized_linear(x[:, :96], w, s, b)
    w6, s6, b6 = mx.quantize(rand((8, 96), mx.float32, 3), group_size=32, bits=4)
    with pytest.raises(ValueError, match=r"group_size: K=96 .* is not a multiple of 64"):
        mt.QuantizedWeight(w6, s6[:, :1], b6[:, :1], group_size=64, bits=4)


def test_validation_is_skipped_only_for_the_same_live_arrays(monkeypatch):
    """QuantizedWeight validates a given (w, scales, biases, group, bits) once: a
    repeat with the same objects skips it, anything else - other arrays, other
    settings, or an id reused by a new object after the old one died - validates."""
    from mlx_metile.formats import quantized

    monkeypatch.setattr(quantized, "_VALIDATED", {})
    w, s, b = _q()
    mt.QuantizedWeight(w, s, b)
    assert len(quantized._VALIDATED) == 1
    mt.QuantizedWeight(w, s, b)  # same objects: no new entry
    assert len(quantized._VALIDATED) == 1
    with pytest.raises(ValueError, match="group_size: K=128 .* is not a multiple of 128|scales: expected shape"):
        mt.QuantizedWeight(w, s, b, group_size=128)
    with pytest.raises(ValueError, match=r"scales: expected shape \(8, 2\)"):
        mt.QuantizedWeight(w, s[:, :1], b)
    # an entry under these ids whose referents are other objects (as after an id is
    # reused): not trusted
    bad = s[:, :1]
    other = mx.zeros((1,))
    signature = quantized._VALIDATED[(id(w), id(s), id(b), 64, 4, "affine")][3]
    quantized._VALIDATED[(id(w), id(bad), id(b), 64, 4, "affine")] = (
        *(weakref.ref(other) for _ in range(3)),
        signature,
    )
    with pytest.raises(ValueError, match=r"scales: expected shape \(8, 2\)"):
        mt.QuantizedWeight(w, bad, b)


def test_fused_argument_errors():
    x = rand((3, 32), mx.float32, 1)
    a, b, c = rand((8, 32), mx.float32, 2), rand((8, 32), mx.float32, 3), rand((6, 32), mx.float32, 4)
    with pytest.raises(ValueError, match="epilogue: 'swiglu' takes exactly two weights"):
        mt.fused_linear(x, [a, b, c], epilogue="swiglu")
    with pytest.raises(ValueError, match="weights: gate and up must have the same N"):
        mt.fused_linear(x, [a, c], epilogue="swiglu")
    with pytest.raises(ValueError, match="epilogue: 'relu' is not one of"):
        mt.fused_linear(x, [a], epilogue="relu")
    with pytest.raises(ValueError, match=r"weights\[1\]: K=16 does not match x's last dimension 32"):
        mt.fused_linear(x, [a, rand((8, 16), mx.float32, 5)])
    with pytest.raises(ValueError, match=r"residual: expected shape \(3, 8\), got \(3, 7\)"):
        mt.fused_linear(x, [a], residual=rand((3, 7), mx.float32, 6))
    with pytest.raises(ValueError, match="residual: a residual is added to a single output"):
        mt.fused_linear(x, [a, b], residual=rand((3, 8), mx.float32, 6))
    with pytest.raises(ValueError, match=r"biases: expected 2 entries"):
        mt.fused_linear(x, [a, b], biases=[None])
    with pytest.raises(TypeError, match="weights: expected a list or tuple"):
        mt.fused_linear(x, a)


def test_rms_norm_arguments_are_checked_by_name():
    x = rand((2, 64), mx.float32, 1)
    w = rand((16, 64), mx.float32, 2)
    g = rand((64,), mx.float32, 3)
    with pytest.raises(ValueError, match=r"norm\[0\]: expected the RMSNorm weight of shape \(64,\)"):
        mt.fused_linear(x, [w], norm=(g[:8], 1e-5))
    with pytest.raises(ValueError, match=r"norm\[1\]: expected a positive finite eps"):
        mt.fused_linear(x, [w], norm=(g, 0.0))
    with pytest.raises(TypeError, match="norm: expected"):
        mt.fused_linear(x, [w], norm=g)
    # off CUDA the norm is mx.fast.rms_norm, then the projection: the same bits
    got = mt.fused_linear(x, [w], norm=(g, 1e-5))
    want = mt.fused_linear(mx.fast.rms_norm(x, g, 1e-5), [w])
    assert np.array_equal(np.array(got), np.array(want))
