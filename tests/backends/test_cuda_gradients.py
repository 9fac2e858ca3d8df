"""Gradients on the CUDA path come from `gradients.differentiable`: the kernel's
values forward, the stock composition's derivatives backward. The kernel is
not available here, so the CPU kernel stands in for it; what is checked is the
plumbing: values are the kernel's, and the vjp equals the stock composition's
for x, quantization scales and biases, dense weights, biases and residual."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

import mlx_metile as mt
from mlx_metile.dispatch import reference_of_flat
from mlx_metile.gradients import differentiable

from ..helpers import rand


def _setup():
    k, n = 128, 24
    x = rand((3, k), mx.float32, 1)
    g = mt.QuantizedWeight(*mx.quantize(rand((n, k), mx.float32, 2, 0.1), group_size=64, bits=4), 64, 4)
    u = rand((n, k), mx.float32, 3, 0.1)
    bias_u = rand((n,), mx.float32, 4)
    res = rand((3, n), mx.float32, 5)
    weights, biases = [g, u], [None, bias_u]
    flat = [x, g.w, g.scales, g.biases, u, bias_u, res]

    def kernel(arrays):  # stands in for the CUDA launch: another implementation of the same op
        xs, gw, gs, gb, uw, ub, rr = arrays
        qw = mt.QuantizedWeight(gw, gs, gb, 64, 4)
        return [mt.fused_linear(xs, [qw, uw], biases=[None, ub], epilogue="swiglu", residual=rr)]

    def reference(arrays):
        return reference_of_flat(arrays, weights, biases, "swiglu", True)

    return flat, kernel, reference


FLOAT_ARGS = (0, 2, 3, 4, 5, 6)  # x, scales, biases, dense weight, its bias, residual


def test_forward_values_are_the_kernels():
    flat, kernel, reference = _setup()
    out = differentiable(kernel, reference, flat)[0]
    np.testing.assert_array_equal(np.array(out), np.array(kernel(flat)[0]))


def test_vjp_follows_the_stock_composition():
    flat, kernel, reference = _setup()
    cot = rand((3, 24), mx.float32, 9)

    def ours(*a):
        return (differentiable(kernel, reference, list(a))[0] * cot).sum()

    def stock(*a):
        return (reference(list(a))[0] * cot).sum()

    got = mx.grad(ours, argnums=FLOAT_ARGS)(*flat)
    want = mx.grad(stock, argnums=FLOAT_ARGS)(*flat)
    for i, g, w in zip(FLOAT_ARGS, got, want):
        assert float(mx.abs(w).max()) > 0, f"argument {i}: the reference gradient is zero, the check is vacuous"
        np.testing.assert_allclose(np.array(g), np.array(w), rtol=1e-6, atol=1e-6, err_msg=f"argument {i}")
