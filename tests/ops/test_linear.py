"""mlx_metile.linear: CPU path, emulated MSL path, transforms, bad input."""

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

import mlx_metile as mt
from mlx_metile.dispatch import _compiled
from mlx_metile.pipeline import compile_projection

from ..conftest import requires_emulator
from ..helpers import SIGNIFICAND, assert_close, bits, f64, projection_tolerance, rand

DTYPES = [mx.float32, mx.float16, mx.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("rows", [1, 5, 33])
def test_cpu_path_matches_mlx(dtype, with_bias, rows):
    x = rand((rows, 100), dtype, 1)
    w = rand((70, 100), dtype, 2, 0.1)
    b = rand((70,), dtype, 3) if with_bias else None
    y = mt.linear(x, w, b)
    ref = x @ w.T + b if with_bias else x @ w.T
    assert y.dtype == ref.dtype and y.shape == ref.shape
    exact = f64(x) @ f64(w).T + (f64(b) if with_bias else 0)
    # ours: f32 accumulation, bias in f32, one rounding of the output
    tol = projection_tolerance(f64(x), f64(w), dtype, roundings=1, bias=f64(b) if with_bias else None)
    assert_close(y, exact, tol, "mlx_metile.linear")
    # stock MLX also rounds x @ w.T before adding the bias: one more rounding of |x @ w.T|
    ulp = 2.0 ** -SIGNIFICAND[dtype]
    assert_close(y, f64(ref), tol + ulp * (np.abs(f64(x) @ f64(w).T) + np.abs(exact)), "vs stock MLX")


@requires_emulator
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_emulated_msl_every_row_count(dtype, with_bias, env):
    """The generated MSL, run by the emulator through the primitive, for rows 1..33
    with K and N not multiples of any tile size."""
    env.set("MLX_METILE_EMULATE", "1")
    K, N = 67, 37
    w = rand((N, K), dtype, 5, 0.2)
    b = rand((N,), dtype, 6) if with_bias else None
    xs = rand((33, K), dtype, 7)
    for rows in range(1, 34):
        x = xs[:rows]
        y = mt.linear(x, w, b)
        exact = f64(x) @ f64(w).T + (f64(b) if with_bias else 0)
        tol = projection_tolerance(f64(x), f64(w), dtype, roundings=1, bias=f64(b) if with_bias else None)
        assert_close(y, exact, tol, f"emulated MSL rows={rows}")


def test_leading_dims_and_non_contiguous_inputs():
    x = rand((2, 3, 40), mx.float32, 1)
    wt = rand((40, 24), mx.float32, 2)  # w = wt.T is a transposed view
    y = mt.linear(x, wt.T)
    assert y.shape == (2, 3, 24)
    np.testing.assert_allclose(f64(y), f64(x) @ f64(wt), rtol=1e-5, atol=1e-5)
    xt = rand((40, 6), mx.float32, 3).T  # non-contiguous x
    np.testing.assert_allclose(f64(mt.linear(xt, wt.T)), f64(xt) @ f64(wt), rtol=1e-5, atol=1e-5)


def test_mixed_dtypes_follow_mlx_promotion():
    x = rand((3, 16), mx.bfloat16, 1)
    w = rand((8, 16), mx.float32, 2)
    y = mt.linear(x, w)
    assert y.dtype == (x @ w.T).dtype == mx.float32
    np.testing.assert_allclose(f64(y), f64(x) @ f64(w).T, rtol=1e-5, atol=1e-5)


def test_compile_and_grad_through_the_op():
    x = rand((4, 32), mx.float32, 1)
    w = rand((12, 32), mx.float32, 2)
    b = rand((12,), mx.float32, 3)

    def loss(x, w, b):
        return (mt.linear(x, w, b) ** 2).sum()

    def ref_loss(x, w, b):
        return ((x @ w.T + b) ** 2).sum()

    gx, gw, gb = mx.grad(loss, argnums=(0, 1, 2))(x, w, b)
    rx, rw, rb = mx.grad(ref_loss, argnums=(0, 1, 2))(x, w, b)
    for g, r in ((gx, rx), (gw, rw), (gb, rb)):
        np.testing.assert_allclose(f64(g), f64(r), rtol=1e-4, atol=1e-4)
    compiled = mx.compile(lambda x: mt.linear(x, w, b))
    np.testing.assert_allclose(f64(compiled(x)), f64(x @ w.T + b), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(f64(compiled(x * 2)), f64((x * 2) @ w.T + b), rtol=1e-5, atol=1e-5)


def test_the_cpu_path_lowers_nothing():
    """The C++ CPU path computes from the call's description: no kernel is lowered for it."""
    before = compile_projection.cache_info()
    mx.eval(mt.linear(rand((3, 48), mx.float16, 1), rand((16, 48), mx.float16, 2)))
    after = compile_projection.cache_info()
    assert (after.hits, after.misses) == (before.hits, before.misses)


@requires_emulator
def test_lazy_evaluation_and_artifact_cache(env):
    env.set("MLX_METILE_EMULATE", "1")  # (the emulator runs compiled kernels)
    x = rand((3, 64), mx.float16, 1)
    w = rand((16, 64), mx.float16, 2)
    mt.linear(x, w)
    before, compiles = _compiled.cache_info(), compile_projection.cache_info()
    y = mt.linear(x, w)  # same spec and row bucket: a cache hit, no compilation
    after = _compiled.cache_info()
    assert after.hits == before.hits + 1 and after.misses == before.misses
    assert compile_projection.cache_info().misses == compiles.misses
    mx.eval(y)


def test_nn_linear_from_linear():
    layer = nn.Linear(32, 20)
    fast = mt.nn.Linear.from_linear(layer)
    x = rand((5, 32), mx.float32, 1)
    np.testing.assert_allclose(f64(fast(x)), f64(layer(x)), rtol=1e-5, atol=1e-5)
    assert fast.weight is layer.weight
    nobias = mt.nn.Linear.from_linear(nn.Linear(32, 20, bias=False))
    assert "bias" not in nobias
    with pytest.raises(TypeError, match="layer: expected mlx.nn.Linear"):
        mt.nn.Linear.from_linear(nn.ReLU())


def test_rows_are_invariant_to_batch_size():
    """A row's bits do not depend on how many rows share the call."""
    x = rand((33, 96), mx.bfloat16, 1)
    w = rand((40, 96), mx.bfloat16, 2)
    alone = [bits(mt.linear(x[r : r + 1], w)) for r in range(33)]
    for rows in (2, 7, 17, 33):
        y = bits(mt.linear(x[:rows], w))
        for r in range(rows):
            np.testing.assert_array_equal(y[r], alone[r][0])


@pytest.mark.parametrize(
    "args,exc,message",
    [
        (
            lambda: (rand((3, 8), mx.float32, 1), rand((4, 9), mx.float32, 2)),
            ValueError,
            r"weight: K=9 does not match x's last dimension 8",
        ),
        (
            lambda: (rand((3, 8), mx.float32, 1), rand((4, 8, 1), mx.float32, 2)),
            ValueError,
            r"weight: expected a 2-D \[N, K\] array",
        ),
        (
            lambda: (mx.ones((3, 8), mx.int32), rand((4, 8), mx.float32, 2)),
            TypeError,
            r"x: dtype mlx.core.int32 is not supported",
        ),
        (lambda: (rand((3, 8), mx.float32, 1), mx.ones((4, 8), mx.int32)), TypeError, r"weight: dtype mlx.core.int32"),
        (lambda: (mx.array(1.0), rand((4, 8), mx.float32, 2)), ValueError, r"x: expected at least one dimension"),
        (
            lambda: (np.ones((3, 8), np.float32), rand((4, 8), mx.float32, 2)),
            TypeError,
            r"x: expected an mlx.core.array",
        ),
    ],
)
def test_bad_input_is_named(args, exc, message):
    x, w = args()
    with pytest.raises(exc, match=message):
        mt.linear(x, w)


def test_bad_bias_and_float64():
    x = rand((3, 8), mx.float32, 1)
    w = rand((4, 8), mx.float32, 2)
    with pytest.raises(ValueError, match=r"bias: expected shape \(4,\), got \(5,\)"):
        mt.linear(x, w, rand((5,), mx.float32, 3))
    with pytest.raises(TypeError, match=r"x: dtype mlx.core.float64 is not supported"):
        mt.linear(x.astype(mx.float64, stream=mx.cpu), w)
    with pytest.raises(TypeError, match="stream: expected an mlx Stream, Device, DeviceType or None"):
        mt.linear(x, w, stream="gpu")


def test_operands_beyond_int32_indexing_take_the_stock_path(monkeypatch):
    from mlx_metile import dispatch

    monkeypatch.setattr(dispatch, "INDEX_LIMIT", 100)  # as if the operands were > 2**31 elements
    x = rand((3, 16), mx.float32, 1)
    w = rand((8, 16), mx.float32, 2)
    with mt.trace() as t:
        y = mt.linear(x, w)
    assert [r.backend for r in t] == ["mlx"]
    np.testing.assert_allclose(f64(y), f64(x) @ f64(w).T, rtol=1e-5, atol=1e-5)
