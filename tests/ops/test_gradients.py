"""Transforms of the ops on the CPU path and the emulator's: mx.grad and mx.jvp go through
mlx_metile.gradients' custom function, whose forward is the kernel and whose derivatives are
those of the stock MLX composition. Each case is checked against the same transform of the
stock ops written out here, for every floating-point argument (x, dense weights, biases,
residuals, quantization scales and biases, the RMSNorm weight)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx
import numpy as np
import pytest

import mlx_metile as mt

from ..conftest import requires_emulator
from ..helpers import bits, f64, rand

K, N = 64, 24


def _silu(v):
    return v * mx.sigmoid(v)


def _gelu(v):
    return 0.5 * v * (1.0 + mx.erf(v * 0.70710678118654752))


@dataclass
class Case:
    ours: Callable  # (*args) -> array or list of arrays, through mlx_metile
    stock: Callable  # the same with stock MLX ops
    args: list  # the floating-point arguments differentiated
    quantization: tuple[int, ...] = ()  # args that are quantization scales / biases: MLX has no jvp wrt them


def _as_list(o):
    return list(o) if isinstance(o, (list, tuple)) else [o]


def cases(dtype) -> dict[str, Case]:
    x = rand((2, 3, K), dtype, 1)  # leading dimensions: the kernel sees [6, K]
    w, b = rand((N, K), dtype, 2, 0.1), rand((N,), dtype, 3)
    res = rand((2, 3, N), dtype, 4)
    qw, qs, qb = mx.quantize(rand((N, K), dtype, 5, 0.1), group_size=32, bits=4)
    q8w, q8s, q8b = mx.quantize(rand((N, K), dtype, 6, 0.1), group_size=64, bits=8)
    u = rand((N, K), dtype, 7, 0.1)
    wk, wv, bv = rand((8, K), dtype, 8, 0.1), rand((8, K), dtype, 9, 0.1), rand((8,), dtype, 10)
    g = rand((K,), dtype, 11) + 1

    def qmm(x, w, s, bq, group, nbits):
        return mx.quantized_matmul(x, w, s, bq, transpose=True, group_size=group, bits=nbits)

    return {
        "linear_bias": Case(lambda x, w, b: mt.linear(x, w, b), lambda x, w, b: x @ w.T + b, [x, w, b]),
        "quantized_linear_bias": Case(
            lambda x, s, bq, b: mt.quantized_linear(x, q8w, s, bq, group_size=64, bits=8, bias=b),
            lambda x, s, bq, b: qmm(x, q8w, s, bq, 64, 8) + b,
            [x, q8s, q8b, b],
            (1, 2),
        ),
        "swiglu_residual_biases": Case(
            lambda x, s, bq, bg, u, bu, r: mt.fused_linear(
                x, [mt.QuantizedWeight(qw, s, bq, 32, 4), u], biases=[bg, bu], epilogue="swiglu", residual=r
            ),
            lambda x, s, bq, bg, u, bu, r: _silu(qmm(x, qw, s, bq, 32, 4) + bg) * (x @ u.T + bu) + r,
            [x, qs, qb, b, u, b * 0.5, res],
            (1, 2),
        ),
        "qkv_biases": Case(
            lambda x, wq, bq, wk, wv, bv: mt.fused_linear(x, [wq, wk, wv], biases=[bq, None, bv]),
            lambda x, wq, bq, wk, wv, bv: [x @ wq.T + bq, x @ wk.T, x @ wv.T + bv],
            [x, w, b, wk, wv, bv],
        ),
        "gelu_bias_residual": Case(
            lambda x, w, b, r: mt.fused_linear(x, [w], biases=[b], epilogue="gelu", residual=r),
            lambda x, w, b, r: _gelu(x @ w.T + b) + r,
            [x, w, b, res],
        ),
        "rms_norm_first": Case(
            lambda x, g, w: mt.fused_linear(x, [w], norm=(g, 1e-5)),
            lambda x, g, w: mx.fast.rms_norm(x, g, 1e-5) @ w.T,
            [x, g, w],
        ),
    }


def tolerance(dtype, ref: mx.array) -> dict:
    """Both sides differentiate the same stock composition on the same primals: they part only by
    the order of roundings, a few ulp of the dtype relative to the result's largest magnitude."""
    ulp = {mx.float32: 2.0**-24, mx.bfloat16: 2.0**-8}[dtype]
    return dict(rtol=0, atol=8 * ulp * max(float(mx.abs(ref).max()), 1e-30))


def _cotangents(outs, seed):
    return [rand(o.shape, o.dtype, seed + i) for i, o in enumerate(outs)]


def _check_vjp(case: Case, dtype, backend: str) -> None:
    cots = _cotangents(_as_list(case.stock(*case.args)), 50)

    def loss(fn):
        return lambda *a: sum((o.astype(mx.float32) * c).sum() for o, c in zip(_as_list(fn(*a)), cots))

    argnums = tuple(range(len(case.args)))
    with mt.trace() as t:
        got = mx.grad(loss(case.ours), argnums=argnums)(*case.args)
        mx.eval(got)
    assert t.records and {r.backend for r in t.records} == {backend}, t.summary()
    want = mx.grad(loss(case.stock), argnums=argnums)(*case.args)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, i
        assert float(mx.abs(w).max()) > 0, f"argument {i}: the stock gradient is zero, the check is vacuous"
        np.testing.assert_allclose(f64(g), f64(w), err_msg=f"argument {i}", **tolerance(dtype, w))


def _check_jvp(case: Case, dtype, backend: str) -> None:
    """mx.jvp with tangents on every argument but the quantization scales and biases (MLX's
    quantized_matmul has no jvp wrt those: the stock side could not be computed)."""
    moving = [i for i in range(len(case.args)) if i not in case.quantization]

    def along(fn):
        def f(*m):
            args = list(case.args)
            for i, v in zip(moving, m):
                args[i] = v
            return _as_list(fn(*args))

        return f

    primals = [case.args[i] for i in moving]
    tangents = [rand(a.shape, a.dtype, 70 + i, 0.5) for i, a in enumerate(primals)]
    with mt.trace() as t:
        outs, tans = mx.jvp(along(case.ours), primals, tangents)
        mx.eval(outs, tans)
    assert t.records and {r.backend for r in t.records} == {backend}, t.summary()
    _, want = mx.jvp(along(case.stock), primals, tangents)
    direct = _as_list(case.ours(*case.args))
    for i, (o, d) in enumerate(zip(outs, direct)):
        np.testing.assert_array_equal(bits(o), bits(d), err_msg=f"output {i}: the forward is the kernel's")
    for i, (g, w) in enumerate(zip(tans, want)):
        assert g.shape == w.shape, i
        assert float(mx.abs(w).max()) > 0, f"output {i}: the stock tangent is zero, the check is vacuous"
        np.testing.assert_allclose(f64(g), f64(w), err_msg=f"output {i}", **tolerance(dtype, w))


CASES = list(cases(mx.float32))


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("name", CASES)
def test_vjp_on_the_cpu_is_the_stock_compositions(name, dtype):
    _check_vjp(cases(dtype)[name], dtype, "cpu")


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("name", CASES)
def test_jvp_on_the_cpu_is_the_stock_compositions(name, dtype):
    _check_jvp(cases(dtype)[name], dtype, "cpu")


def test_packed_weights_get_a_zero_cotangent():
    """The uint32 packed values are integers: their cotangent is zero, and the float arguments
    beside them still get the stock op's."""
    x = rand((3, K), mx.float32, 1)
    qw, qs, qb = mx.quantize(rand((N, K), mx.float32, 2, 0.1), group_size=64, bits=4)
    cot = rand((3, N), mx.float32, 3)

    def ours(x, w, s):
        return [mt.quantized_linear(x, w, s, qb, group_size=64, bits=4)]

    def stock(x, s):
        return [mx.quantized_matmul(x, qw, s, qb, transpose=True, group_size=64, bits=4)]

    _, (gx, gw, gs) = mx.vjp(ours, [x, qw, qs], [cot])
    _, (wx, ws) = mx.vjp(stock, [x, qs], [cot])
    assert gw.dtype == qw.dtype and gw.shape == qw.shape and not np.array(gw).any()
    for g, w in ((gx, wx), (gs, ws)):  # the same composition on the same primals: rounding order only
        np.testing.assert_allclose(np.array(g), np.array(w), **tolerance(mx.float32, w))


@requires_emulator
@pytest.mark.parametrize("name", ["linear_bias", "swiglu_residual_biases"])
def test_vjp_on_the_emulator_is_the_stock_compositions(name, env):
    env.set("MLX_METILE_EMULATE", "1")
    _check_vjp(cases(mx.float32)[name], mx.float32, "emulator")


@requires_emulator
def test_jvp_on_the_emulator_is_the_stock_compositions(env):
    env.set("MLX_METILE_EMULATE", "1")
    _check_jvp(cases(mx.float32)["gelu_bias_residual"], mx.float32, "emulator")
