"""mt.matmul against mx.matmul on every shape class: the projection-shaped ones (b a 2-D weight)
run on the kernels and match within f32 accumulation plus one output rounding; the others pass
through to mx.matmul and are bit-identical, errors included."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

import mlx_metile as mt

from ..helpers import SIGNIFICAND, bits, f64, rand


def _close(got: mx.array, a: mx.array, b: mx.array) -> None:
    want = mx.matmul(a, b)
    assert got.shape == want.shape and got.dtype == want.dtype
    exact = f64(a) @ f64(b)
    # one rounding of the output plus f32 accumulation over K
    tol = 2.0 ** -SIGNIFICAND[want.dtype] * np.abs(exact) + a.shape[-1] * 2.0**-24 * (np.abs(f64(a)) @ np.abs(f64(b)))
    assert (np.abs(f64(got) - exact) <= tol + 1e-30).all()


@pytest.mark.parametrize(
    "a_shape,b_shape",
    [((64,), (64, 24)), ((5, 64), (64, 24)), ((2, 3, 64), (64, 24)), ((1, 64), (64, 1))],
)
@pytest.mark.parametrize("dtypes", [(mx.float32, mx.float32), (mx.bfloat16, mx.bfloat16), (mx.float16, mx.float32)])
def test_projection_shapes_run_on_the_kernels(a_shape, b_shape, dtypes):
    a, b = rand(a_shape, dtypes[0], 1), rand(b_shape, dtypes[1], 2, 0.1)
    with mt.trace() as t:
        got = mt.matmul(a, b)
        mx.eval(got)
    assert [r.backend for r in t.records] == ["cpu"]
    _close(got, a, b)


def test_a_transposed_weight_is_the_weight_itself():
    x, w = rand((4, 64), mx.float32, 3), rand((24, 64), mx.float32, 4)
    np.testing.assert_array_equal(bits(mt.matmul(x, w.T)), bits(mt.linear(x, w)))


@pytest.mark.parametrize(
    "a_shape,b_shape",
    [((2, 5, 64), (2, 64, 24)), ((5, 64), (2, 64, 24)), ((64,), (64,)), ((5, 64), (64,)), ((3, 5, 8), (1, 8, 4))],
)
def test_other_shapes_pass_through_to_mx_matmul(a_shape, b_shape):
    a, b = rand(a_shape, mx.float32, 5), rand(b_shape, mx.float32, 6)
    with mt.trace() as t:
        got = mt.matmul(a, b)
    assert not t.records  # mx.matmul itself
    np.testing.assert_array_equal(bits(got), bits(mx.matmul(a, b)))


def test_errors_are_mx_matmul_s():
    a, b = rand((5, 64), mx.float32, 7), rand((32, 24), mx.float32, 8)
    for args in ((a, b), (mx.ones((5, 64), mx.int32), mx.ones((64, 3), mx.int32)), (mx.array(1.0), b)):
        try:
            mx.eval(mx.matmul(*args))
        except Exception as stock:
            with pytest.raises(type(stock), match=None) as ours:
                mx.eval(mt.matmul(*args))
            assert str(ours.value) == str(stock)
        else:
            np.testing.assert_array_equal(bits(mt.matmul(*args)), bits(mx.matmul(*args)))
