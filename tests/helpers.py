"""Shared test helpers: random MLX data and tolerance rules with their reasons."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

# Significand bits of each dtype: one rounding of a result costs 2**-bits relative.
SIGNIFICAND = {mx.float32: 24, mx.float16: 11, mx.bfloat16: 8}


def rand(shape, dtype, seed, scale=1.0) -> mx.array:
    rng = np.random.default_rng(seed)
    return mx.array((rng.standard_normal(shape) * scale).astype(np.float32)).astype(dtype)


def f64(a: mx.array) -> np.ndarray:
    return np.array(a.astype(mx.float32), dtype=np.float64)


def projection_tolerance(x: np.ndarray, w: np.ndarray, out_dtype, roundings: int = 1, bias=None) -> np.ndarray:
    """Allowed |result - exact| per element: `roundings` roundings of the output
    to its dtype, plus f32 accumulation error (K * 2**-24 * sum |x||w|)."""
    k = x.shape[-1]
    mag = np.abs(x) @ np.abs(w).T
    exact = x @ w.T + (bias if bias is not None else 0)
    out_ulp = 2.0 ** -SIGNIFICAND[out_dtype]
    return roundings * out_ulp * np.abs(exact) + k * 2.0**-24 * mag + 1e-30


def assert_close(got: mx.array, exact: np.ndarray, tol: np.ndarray, what: str = "") -> None:
    err = np.abs(f64(got) - exact)
    bad = err > tol
    assert not bad.any(), (
        f"{what}: {bad.sum()} elements beyond tolerance; worst error {err.max():.3g} vs tol {tol[bad].min():.3g}"
    )


def bits(a: mx.array) -> np.ndarray:
    """The raw bit patterns of an array (floats as unsigned integers of their width, other
    dtypes as they are), for bit-exact comparisons and for kernel buffers of element bits."""
    if a.dtype not in SIGNIFICAND:
        return np.array(a)
    return np.array(a.view(mx.uint32 if a.dtype == mx.float32 else mx.uint16))


def artifact(spec, rows: int, target="msl", K: int = 4096, columns: int | None = None):
    """The kernel the ops build for `spec` at `rows` rows on `target` ("msl", "cuda" - the CUDA
    build target of the current settings - or a mlx_metile.targets value), for a product over K
    with `columns` output columns (the shape the CUDA layout rules read)."""
    from mlx_metile.backends.cuda_device import build_target
    from mlx_metile.pipeline import compile_projection
    from mlx_metile.schedule import Shape, choose
    from mlx_metile.targets import CPU

    if isinstance(target, str):
        target = build_target() if target == "cuda" else CPU
    shape = Shape(K, columns if columns is not None else 4096)
    return compile_projection(spec, choose(spec, rows, target, shape), target.language)
