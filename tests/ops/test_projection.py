"""mlx_metile.Projection: fused_linear with its weights bound. On the CPU it must compute
exactly what fused_linear computes; on the CUDA path (launch recorded, no GPU here) a call
of shapes already planned launches that plan without the op's checks, and every change
that could make the plan wrong sends the call back through the full path."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

import mlx_metile as mt
from mlx_metile import dispatch
from mlx_metile import projection as projection_module

from ..helpers import assert_close, bits, f64, projection_tolerance, rand


def _quantized(n: int, k: int, seed: int) -> mt.QuantizedWeight:
    return mt.QuantizedWeight(*mx.quantize(rand((n, k), mx.bfloat16, seed, 0.1), group_size=64, bits=4), 64, 4)


def test_projection_on_the_cpu_is_fused_linear():
    k = 128
    x = rand((2, 3, k), mx.bfloat16, 1)
    ws = [rand((n, k), mx.bfloat16, 2 + n, 0.1) for n in (64, 32, 32)]
    bs = [rand((64,), mx.bfloat16, 9), None, rand((32,), mx.bfloat16, 10)]
    qkv = mt.Projection(ws, biases=bs)
    got = qkv(x)
    want = mt.fused_linear(x, ws, biases=bs)
    assert isinstance(got, list) and len(got) == 3
    for g, w_, b, ref in zip(got, ws, bs, want):
        assert g.shape == (2, 3, w_.shape[0])
        np.testing.assert_array_equal(bits(g), bits(ref))
        x2, wf = f64(x).reshape(6, k), f64(w_)
        bias = f64(b) if b is not None else None
        exact = x2 @ wf.T + (bias if bias is not None else 0)
        tol = projection_tolerance(x2, wf, mx.bfloat16, roundings=1, bias=bias)
        assert_close(g.reshape(6, -1), exact, tol, "Projection q/k/v")
    gate, up, down = _quantized(192, k, 11), _quantized(192, k, 12), _quantized(k, 192, 13)
    h = mt.Projection([gate, up], epilogue="swiglu")(x)
    np.testing.assert_array_equal(bits(h), bits(mt.fused_linear(x, [gate, up], epilogue="swiglu")))
    out = mt.Projection([down])(h, x)
    np.testing.assert_array_equal(bits(out), bits(mt.fused_linear(h, [down], residual=x)))


def test_projection_argument_errors():
    w = rand((8, 16), mx.float32, 1)
    with pytest.raises(TypeError, match="weights: expected a list"):
        mt.Projection(w)
    with pytest.raises(ValueError, match="biases: expected 1 entries"):
        mt.Projection([w], biases=[None, None])
    with pytest.raises(ValueError, match=r"weights\[0\]: K=16 does not match"):
        mt.Projection([w])(rand((2, 12), mx.float32, 2))


def test_planned_calls_launch_without_the_full_path(fake_cuda, monkeypatch, env):
    k, n = 256, 48
    gate, up = _quantized(n, k, 2), _quantized(n, k, 3)
    swiglu = mt.Projection([gate, up], epilogue="swiglu")
    full = []
    project = projection_module.project  # the checked path a Projection call takes without a plan
    monkeypatch.setattr(projection_module, "project", lambda *a: full.append(a[1].shape) or project(*a))
    xs = [rand((2, 3, k), mx.bfloat16, s) for s in (4, 5, 6)]
    outs = [swiglu(x) for x in xs]
    assert full == [(2, 3, k)] and len(fake_cuda) == 3  # one checked call, then its plan
    first, *rest = fake_cuda
    for kw, x in zip(rest, xs[1:]):
        assert {a: v for a, v in kw.items() if a != "inputs"} == {a: v for a, v in first.items() if a != "inputs"}
        assert kw["stream"] is None  # the default stream, as the checked call had
        assert all(a is b for a, b in zip(kw["inputs"][1:], (gate.w, gate.scales, gate.biases, up.w, up.scales)))
        assert kw["inputs"][0] is x  # as given, leading dimensions and all
    assert all(o.shape == (2, 3, n) for o in outs)

    swiglu(rand((1, k), mx.bfloat16, 7))  # a new shape: checked, then planned
    assert full[-1] == (1, k)
    with mt.trace() as t:  # traced calls take the full path, which records them
        swiglu(xs[0])
    assert [r.backend for r in t.records] == ["cuda"] and len(full) == 3
    swiglu(xs[0], stream=mx.default_stream(mx.default_device()))  # an explicit stream: full path
    assert len(full) == 4
    dispatch.clear_kernel_caches()  # plans are dropped with the kernels
    swiglu(xs[0])
    assert len(full) == 5
    env.set("MLX_METILE_CUDA_MAX_ROWS", "4")  # a settings change reaches planned shapes too
    launches = len(fake_cuda)
    swiglu(xs[0])
    assert len(full) == 6 and len(fake_cuda) == launches  # 6 rows > 4: stock MLX


def test_planned_calls_still_check_residuals_and_casts(fake_cuda):
    k, n = 128, 32
    w = rand((n, k), mx.float16, 2, 0.1)
    down = mt.Projection([w])
    x, res = rand((3, k), mx.float16, 3), rand((3, n), mx.float16, 4)
    for _ in range(2):
        down(x, res)
    assert fake_cuda[-1]["inputs"][-1] is res
    with pytest.raises(ValueError, match="residual: expected shape"):
        down(x, res[:, :-1])
    with pytest.raises(TypeError, match="residual"):
        down(x, np.zeros((3, n), np.float16))
    for _ in range(2):  # f32 x with f16 weights: MLX's promotion, x cast by the plan too
        y = down(x.astype(mx.float32))
    assert y.dtype == mx.float32 and fake_cuda[-1]["inputs"][0].dtype == mx.float32


def test_microscaled_weights_in_projection_and_nn_modules():
    """Projection and mt.nn.QuantizedLinear take MLX's microscaled layers as they are; on the CPU
    path each output is within one output rounding plus f32 accumulation of float64."""
    import mlx.nn as nn

    from mlx_metile.formats import reference

    k = 128
    x = rand((5, k), mx.float32, 3)
    layers = [nn.QuantizedLinear(k, n, bias=False, mode=m) for n, m in ((48, "mxfp4"), (16, "mxfp8"), (16, "nvfp4"))]
    ws = [mt.QuantizedWeight.from_quantized_linear(layer) for layer in layers]
    outs = mt.Projection(ws)(x)
    for layer, w, y in zip(layers, ws, outs):
        exact = f64(x) @ reference(w).T
        np.testing.assert_allclose(
            f64(y), exact, rtol=0, atol=float(projection_tolerance(f64(x), reference(w), mx.float32).max())
        )
        module = mt.nn.QuantizedLinear.from_quantized_linear(layer)
        assert module.mode == layer.mode and "biases" not in module
        np.testing.assert_array_equal(bits(module(x)), bits(mt.quantized_linear(x, w.w, w.scales, mode=w.mode)))
        np.testing.assert_array_equal(bits(module(x)), bits(y))  # one weight alone: the same bits as fused
