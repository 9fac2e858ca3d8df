"""Rows of x holding an Inf or a NaN on the CPU path and the emulated MSL: each output in the class
of float64 over the dequantized weights (both dequantize each weight before its product; the CUDA
tensor-core kernels' recomputation of such rows is tests/cudaemu/test_nonfinite.py's)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

import mlx_metile as mt
from mlx_metile.formats import dequantize_exact

from ..conftest import requires_emulator
from ..helpers import f64, rand

PATHS = [("cpu", None), pytest.param("emulator", "1", marks=requires_emulator)]


def _classes(v: np.ndarray) -> np.ndarray:
    return np.select([np.isnan(v), np.isposinf(v), np.isneginf(v)], [1, 2, 3], 0)


@pytest.mark.parametrize("backend,emulate", PATHS, ids=["cpu", "emulated_msl"])
@pytest.mark.parametrize("bits", [4, 8])
def test_rows_with_inf_get_the_float64_class(env, backend, emulate, bits):
    """Row 0 +Inf where column 3's weight is exactly 0 (NaN there), row 1 both infinities, row 2
    a NaN, row 4 -Inf; int4 / int8 group 64, bf16."""
    if emulate:
        env.set("MLX_METILE_EMULATE", emulate)
    K, N = 256, 40
    wq, s, b = mx.quantize(rand((N, K), mx.bfloat16, 3, 0.05), group_size=64, bits=bits)
    w = np.array(wq)
    w[3, 5 * bits // 32] &= np.uint32(~(((1 << bits) - 1) << (5 * bits % 32)) & 0xFFFFFFFF)
    wq = mx.array(w)
    b = mx.where(mx.arange(b.size).reshape(b.shape) == b.shape[1] * 3, mx.zeros_like(b), b)
    x = np.array(rand((6, K), mx.float32, 4))
    x[0, 5] = x[1, 7] = np.inf
    x[1, 200] = x[4, K - 1] = -np.inf
    x[2, 9] = np.nan
    xb = mx.array(x).astype(mx.bfloat16)
    with mt.trace() as t:
        y = f64(mt.quantized_linear(xb, wq, s, b, group_size=64, bits=bits))
    assert {r.backend for r in t.records} == {backend}
    wd, x64 = dequantize_exact(wq, s, b, 64, bits), f64(xb)
    with np.errstate(all="ignore"):
        want = (x64[:, None, :] * wd[None]).sum(-1)
    assert np.isnan(want[0, 3]) and np.isinf(want[0]).any() and np.isfinite(want[3]).all()
    wrong = np.argwhere(_classes(y) != _classes(want))
    assert not len(wrong), f"{len(wrong)} outputs of the wrong class, first {wrong[0].tolist()}"
