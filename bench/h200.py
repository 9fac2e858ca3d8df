"""Plain-script entry for the lent GPU machine (MLX's CUDA backend):

    python bench/h200.py --out results.json [--quick] [--correctness full|quick|grad|none]
        [--shapes ...] [--formats ...] [--rows ...] [--fused-rows ...] [--modes ...]

1. correctness of every op variant on mx.gpu against a float64 reference and
   stock MLX, including row invariance (row r alone == row r inside 2..33 rows);
2. effective weight bandwidth of mlx_metile and stock MLX (and PyTorch where
   installed) for rows x {bf16, int4, int8} x model shapes, each timed product
   using the next weight of a pool several times the 60 MB L2, with the copy
   roofline measured in the same run, and (compiled timing) the read floor of each
   weight: a kernel that only reads its bytes, launched the same way (bench/read_floor.py).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

import mlx.core as mx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/read_floor.py
import mlx_metile as mt  # noqa: E402
from mlx_metile.reference import dequantize_exact  # noqa: E402

SHAPES = {
    "llama8b_qkvo_4096x4096": (4096, 4096),
    "llama8b_gateup_4096x14336": (4096, 14336),
    "llama8b_down_14336x4096": (14336, 4096),
    "qwen1.5b_gateup_1536x8960": (1536, 8960),
    "qwen1.5b_down_8960x1536": (8960, 1536),
    # beyond the list: shapes of the sixteenth session's layout rules (one-tile dense grids of
    # 2-4 blocks per SM; 4/8-bit products over 2048 <= K < 4096 with wide outputs)
    "llama3b_gateup_3072x8192": (3072, 8192),
    "qwen7b_gateup_3584x18944": (3584, 18944),
}
# Fused products, timed like the single ones: one mlx-metile kernel per product against stock
# MLX's separate products (then SwiGLU, as mlx-lm computes it) in the same compiled loop.
# K, the weights' output widths, the epilogue; N below is their sum.
FUSED_SHAPES = {
    "llama8b_gateup_swiglu_fused_4096x2x14336": (4096, (14336, 14336), "swiglu"),
    "llama8b_qkv_fused_4096x6144": (4096, (4096, 1024, 1024), None),
    "llama3b_gateup_swiglu_fused_3072x2x8192": (3072, (8192, 8192), "swiglu"),  # x shared at 32 rows
}
ROWS = [1, 2, 3, 4, 8, 16, 32]
MAX_ROWS_CHECKED = 100  # correctness and row invariance up to here (>32: the tiled schedule)
POOL_BYTES = 480 << 20  # 8x the H200's 60 MB L2
PRODUCTS_PER_EVAL = 64
MODES = ["eager", "compiled", "chained"]  # eager: the graph built in Python per evaluation; compiled: mx.compile;
# chained: compiled, each product taking the previous one's output (see chain), as a model's layers do
DEFAULT_MODES = ["eager", "compiled"]


def f64(a):
    return np.array(a.astype(mx.float32), dtype=np.float64)


# ---------------------------------------------------------------- correctness --
def correctness(quick: bool = False) -> dict:
    # past 32 rows ops run stock MLX on CUDA by default: lift that to check the tiled kernel
    os.environ["MLX_METILE_CUDA_MAX_ROWS"] = str(MAX_ROWS_CHECKED)
    try:
        return _correctness(quick)
    finally:
        del os.environ["MLX_METILE_CUDA_MAX_ROWS"]


@contextlib.contextmanager
def _tensor_cores_off():
    os.environ["MLX_METILE_CUDA_MMA"] = "0"
    _clear_kernel_caches()
    try:
        yield
    finally:
        del os.environ["MLX_METILE_CUDA_MMA"]
        _clear_kernel_caches()


def _clear_kernel_caches():
    from mlx_metile import ops
    from mlx_metile.runtime import compile_projection

    ops.clear_kernel_caches()
    compile_projection.cache_clear()


def _alone(fn, x) -> dict:
    """Each row of x computed alone: with the default kernels (rows 1..32), and
    with the tensor-core schedule off - the split-K kernels, whose sum order the
    tiled kernel (> 32 rows) reproduces bit for bit."""

    def rows():
        return [np.array(fn(x[r : r + 1]).astype(mx.float32)) for r in range(x.shape[0])]

    default = rows()
    with _tensor_cores_off():
        simt = rows()
    return {"default": default, "simt": simt}


def _quantized(x, wq, s, bq, group, bits):
    return mt.quantized_linear(x, wq, s, bq, group_size=group, bits=bits)


def _rows_differing(y, alone: list) -> list[int]:
    """Rows of y whose bits differ from the same row computed alone (1-row float32 arrays)."""
    yy = np.array(y.astype(mx.float32))
    return [r for r in range(yy.shape[0]) if not np.array_equal(yy[r], alone[r][0])]


def _invariance(results: dict, label: str, bad: list[int], rows: int) -> None:
    """Records a row-invariance failure: `bad` rows of a `rows`-row call differed from the rows alone."""
    if bad:
        results["failures"].append(f"row invariance: {label} rows {bad[:5]} of {rows}")


def _not_invariant(y, alone: dict, rows: int) -> list[int]:
    return _rows_differing(y, alone["default"] if rows <= 32 else alone["simt"])


def _quantized_rows(
    arr, check, results, K: int, N: int, dtype, bits: int, rows_list, label: str, group: int = 64
) -> None:
    """One int`bits` weight [N, K] of `group`: each row count against float64, and every row
    against the same row alone (row invariance)."""
    wq, s, bq = mx.quantize(arr((N, K), dtype, 0.05), group_size=group, bits=bits)
    wd = dequantize_exact(wq, s, bq, group, bits)
    x = arr((32, K), dtype)
    alone = [np.array(_quantized(x[r : r + 1], wq, s, bq, group, bits).astype(mx.float32)) for r in range(32)]
    for rows in rows_list:
        y = _quantized(x[:rows], wq, s, bq, group, bits)
        name = f"int{bits} g{group} {label} {dtype} rows={rows}"
        check(name, y, f64(x[:rows]) @ wd.T, f64(x[:rows]), wd, dtype)
        _invariance(results, name, _rows_differing(y, alone), rows)


def _dense_rows(arr, check, results, K: int, N: int, rows_list, label: str) -> None:
    """One bf16 weight [N, K]: each row count against float64, and every row against the same row
    alone (row invariance, up to MAX_ROWS_CHECKED rows)."""
    w = arr((N, K), mx.bfloat16, 0.05)
    xs = arr((MAX_ROWS_CHECKED, K), mx.bfloat16)
    alone = _alone(lambda x: mt.linear(x, w), xs)
    for rows in rows_list:
        y = mt.linear(xs[:rows], w)
        name = f"linear {label} bf16 rows={rows}"
        check(name, y, f64(xs[:rows]) @ f64(w).T, f64(xs[:rows]), f64(w), mx.bfloat16)
        _invariance(results, name, _not_invariant(y, alone, rows), rows)


def _odd_group_count(arr, check, results) -> None:
    """K = 17 groups of 64: no 4-byte scale pairs, so the tensor-core schedule
    loads through registers instead of its cp.async ring."""
    K = 17 * 64
    for dtype in (mx.bfloat16, mx.float16):
        for bits in (4, 8):
            _quantized_rows(arr, check, results, K, 136, dtype, bits, (1, 8, 17, 32), f"K={K}")


def _wide_outputs(arr, check, results) -> None:
    """Outputs of NARROW_COLUMNS columns or more (plus a tail of 40) over K = SHORT_K:
    2 column tiles per block on the staged ring on CUDA, at every row bucket (8-bit group
    128: at 32 rows, in dynamic shared memory); over K = 1536 (the ONE_WAVE layout: 5 blocks
    per SM at 1-8 rows); over K = 3584, 10600 columns (single 4/8-bit products: TILES); over K = 2048,
    6008 columns (ONE_TILE_WIDE: TILES for single 4/8-bit products, see bucket_layout)."""
    from mlx_metile.compiler.lower_mma_staged import NARROW_COLUMNS, SHORT_K

    N, rows_list = NARROW_COLUMNS + 40, (1, 3, 8, 9, 16, 17, 32)
    for K in (SHORT_K, 1536):
        group32 = ((4, 32), (8, 32)) if K == 1536 else ()  # ONE_WAVE_STAGES's entries for them
        for bits, group in ((4, 64), (8, 64), (4, 128), (8, 128), *group32):
            if K == SHORT_K and group == 128 and bits == 4:
                continue
            _quantized_rows(arr, check, results, K, N, mx.bfloat16, bits, rows_list, f"N={N} K={K}", group)
    # over QUANTIZED_SHORT_K <= K < SHORT_K, one-tile grids of more than 5 blocks per SM: TILES (K = 3584:
    # 14 stages of 256 over 4 warps, uneven ranges)
    N, K = 10600, 3584
    for bits, group in ((4, 64), (8, 64), (4, 128)):
        _quantized_rows(arr, check, results, K, N, mx.bfloat16, bits, (1, 3, 8, 17, 32), f"N={N} K={K}", group)
    # one-tile grids of 2-4 blocks per SM over such K (ONE_TILE_WIDE) take TILES in every row bucket
    # (group 64) or from 8 rows (8-bit group 128) - lower_mma_staged.bucket_layout, as ONE_WAVE's
    # 8-bit group-64 products over K = 1536 above from 8 rows
    N, K = 6008, 2048
    for bits, group in ((4, 64), (8, 64), (8, 128)):
        _quantized_rows(arr, check, results, K, N, mx.bfloat16, bits, (1, 4, 5, 8, 17, 32), f"N={N} K={K}", group)


def _one_tile_dense(arr, check, results) -> None:
    """Dense products of one-tile layouts with their own dense rules on CUDA, at row buckets on both
    sides of them: 6008 columns (a tail of 8) over K = 2048, ONE_TILE_WIDE (one-tile grids of 2-4
    blocks per SM), whose 1-4 row kernels keep the 48 KB ring where ONE_TILE's take the deep one
    and whose 16-32 row kernels are TILES's (bucket_layout);
    8488 columns over K = 1536, ONE_WAVE, which splits K over 2 warps in every row bucket."""
    from mlx_metile.compiler.lower_mma_staged import ONE_TILE_WIDE, ONE_WAVE, column_layout

    for N, K, layout in ((6008, 2048, ONE_TILE_WIDE), (8488, 1536, ONE_WAVE)):
        assert column_layout(N, K) == layout
        _dense_rows(arr, check, results, K, N, (1, 3, 4, 5, 8, 17, 32), f"N={N} K={K}")


def _narrow_deep_outputs(arr, check, results) -> None:
    """1000 output columns (at most SPREAD_COLUMNS, with a tail) over K = SPREAD_K (the SPREAD
    layout on CUDA: K over 8 or 16 warps) and K = SHORT_K (DEEP: 8-bit weights in 8 K ranges,
    two per warp at 16-32 rows), at every row bucket."""
    from mlx_metile.compiler.lower_mma_staged import SHORT_K, SPREAD_K

    N, rows_list = 1000, (1, 3, 8, 9, 16, 17, 32)
    for K in (SPREAD_K, SHORT_K):
        for bits in (4, 8):
            _quantized_rows(arr, check, results, K, N, mx.bfloat16, bits, rows_list, f"K={K}")
    _dense_rows(arr, check, results, SPREAD_K, N, rows_list, f"K={SPREAD_K}")


def _qkv_rows(arr, check, results, x, Ns: tuple, bits: int, group: int, rows_list, label: str) -> None:
    """q/k/v: three int`bits` weights of Ns columns over x's K, with biases, concatenated into
    one call: each output against float64 and its rows against the same rows alone."""
    K, dtype = x.shape[1], x.dtype
    qkv = [
        mt.QuantizedWeight(*mx.quantize(arr((n, K), dtype, 0.05), group_size=group, bits=bits), group, bits) for n in Ns
    ]
    qkv_bias = [arr((n,), dtype) for n in Ns]
    alone = [
        [np.array(o.astype(mx.float32)) for o in mt.fused_linear(x[r : r + 1], qkv, biases=qkv_bias)]
        for r in range(max(rows_list))
    ]
    for rows in rows_list:
        outs = mt.fused_linear(x[:rows], qkv, biases=qkv_bias)
        xr = f64(x[:rows])
        for i, (y, qw, b) in enumerate(zip(outs, qkv, qkv_bias)):
            d = dequantize_exact(qw.w, qw.scales, qw.biases, group, bits)
            name = f"qkv[{i}] int{bits} g{group}{label} {dtype}"
            check(f"{name} rows={rows}", y, xr @ d.T + f64(b), xr, d, dtype)
            _invariance(results, name, _rows_differing(y, [a[i] for a in alone[:rows]]), rows)


def _wide_qkv(arr, check, results, quick: bool) -> None:
    """q/k/v whose concatenated columns make a one-tile grid of 2-4 blocks per SM (ONE_TILE_WIDE:
    Llama-3.1-8B's 4096 -> 4096 + 1024 + 1024), whose rings take lower_mma_staged.CONCAT_STAGES's
    stages, at row buckets on both sides of them."""
    from mlx_metile.compiler.lower_mma_staged import ONE_TILE_WIDE, column_layout

    K, Ns = 4096, (4096, 1024, 1024)
    assert column_layout(sum(Ns), K) == ONE_TILE_WIDE
    x = arr((32, K), mx.bfloat16)
    formats = ((4, 64), (8, 32)) if quick else ((4, 32), (4, 64), (4, 128), (8, 32), (8, 64), (8, 128))
    for bits, group in formats:
        _qkv_rows(arr, check, results, x, Ns, bits, group, (1, 5, 8, 9, 16, 17, 32), f" K={K}")


def _quantized_fusions(arr, check, results, quick: bool) -> None:
    """Epilogues on quantized weights (the tensor-core schedule on CUDA): SwiGLU,
    residual, bias + GELU, against float64 and row by row against rows alone."""
    K, N = 512, 200
    for dtype in (mx.bfloat16, mx.float16):
        for bits, group in ((4, 64), (8, 32)) if quick else ((4, 32), (4, 64), (4, 128), (8, 32), (8, 64), (8, 128)):
            x = arr((32, K), dtype)
            qg = mx.quantize(arr((N, K), dtype, 0.05), group_size=group, bits=bits)
            qu = mx.quantize(arr((N, K), dtype, 0.05), group_size=group, bits=bits)
            wg, wu = (mt.QuantizedWeight(*q, group, bits) for q in (qg, qu))
            dg, du = (dequantize_exact(*q, group, bits) for q in (qg, qu))
            res = arr((32, N), dtype)
            bias = arr((N,), dtype)
            calls = {
                "swiglu": lambda xr, rr, wg=wg, wu=wu: mt.fused_linear(xr, [wg, wu], epilogue="swiglu"),
                "residual": lambda xr, rr, wg=wg: mt.fused_linear(xr, [wg], residual=rr),
                "bias_gelu": lambda xr, rr, wg=wg, b=bias: mt.fused_linear(xr, [wg], biases=[b], epilogue="gelu"),
            }
            # q/k/v: three weights concatenated, their boundaries inside 16-column blocks
            _qkv_rows(arr, check, results, x, (40, 24, 24), bits, group, (1, 5, 8, 17, 32), "")
            for name, fn in calls.items():
                alone = [np.array(fn(x[r : r + 1], res[r : r + 1]).astype(mx.float32)) for r in range(32)]
                for rows in (1, 5, 8, 17, 32):
                    xr = f64(x[:rows])
                    zg = xr @ dg.T
                    if name == "swiglu":
                        exact, slack = _swiglu_reference(xr, dg, du)
                    elif name == "residual":
                        exact, slack = zg + f64(res[:rows]), 0.0
                    else:
                        z = zg + f64(bias)
                        exact = 0.5 * z * (1 + np.vectorize(math.erf)(z / np.sqrt(2)))
                        slack = 1e-6 * (np.abs(z) + 1)
                    y = fn(x[:rows], res[:rows])
                    check(f"{name} int{bits} g{group} {dtype} rows={rows}", y, exact, xr, dg, dtype, slack=slack)
                    _invariance(results, f"{name} int{bits} g{group} {dtype}", _rows_differing(y, alone), rows)


def _rms_norm_fusions(arr, check, results) -> None:
    """RMSNorm fused into the projection (fused_linear(norm=)): a single 4-bit, 8-bit and dense
    product, the 4-bit SwiGLU gate/up and q/k/v, at 1-32 rows, against float64 of the kernel's
    formula - (bf16(x * g) @ W.T) / sqrt(mean(x^2) + eps), x * g rounded once as the kernel does
    (MLX's bf16 product) - with 1e-4 more for the f32 sums of squares and rsqrtf, and row by row
    against rows alone. Where ops composes the norm instead (ops.norm_pays: before SwiGLU),
    seen in the trace, against float64 of the product of stock's normalised x."""
    K, N, eps = 1024, 200, 1e-5
    x = arr((32, K), mx.bfloat16) * 3
    g = (arr((K,), mx.float32, 0.3) + 1).astype(mx.bfloat16)
    xg = f64(x * g)
    inv = 1.0 / np.sqrt((f64(x) ** 2).mean(axis=1, keepdims=True) + eps)
    quants = {bits: [mx.quantize(arr((N, K), mx.bfloat16, 0.05), group_size=64, bits=bits) for _ in range(3)]
              for bits in (4, 8)}  # fmt: skip
    deq = {bits: [dequantize_exact(*q, 64, bits) for q in qs] for bits, qs in quants.items()}
    wq = {bits: [mt.QuantizedWeight(*q, 64, bits) for q in qs] for bits, qs in quants.items()}
    dense = arr((N, K), mx.bfloat16, 0.05)
    cases = {  # name: (call, [(output index, float64 reference of rows before 1/rms, weight64)])
        "int4": (lambda xr: [mt.fused_linear(xr, wq[4][:1], norm=(g, eps))], [(deq[4][0],)]),
        "int8": (lambda xr: [mt.fused_linear(xr, wq[8][:1], norm=(g, eps))], [(deq[8][0],)]),
        "bf16": (lambda xr: [mt.fused_linear(xr, [dense], norm=(g, eps))], [(f64(dense),)]),
        "qkv int4": (lambda xr: mt.fused_linear(xr, wq[4], norm=(g, eps)), [(d,) for d in deq[4]]),
    }

    def normed(fn, rows):
        """(fn's outputs on `rows` rows, the float64 normalised x they were computed from)."""
        with mt.trace() as t:
            outs = fn(x[:rows])
        if any("_rms" in (r.kernel or "") for r in t.records):
            return outs, xg[:rows] * inv[:rows]
        return outs, f64(mx.fast.rms_norm(x[:rows], g, eps))

    for name, (fn, refs) in cases.items():
        alone = [[np.array(o.astype(mx.float32)) for o in fn(x[r : r + 1])] for r in range(32)]
        for rows in (1, 5, 8, 17, 32):
            outs, xs = normed(fn, rows)
            for i, (y, (w64,)) in enumerate(zip(outs, refs)):
                exact = xs @ w64.T
                check(f"rms_norm {name}[{i}] rows={rows}", y, exact, xs, w64, mx.bfloat16, slack=1e-4 * np.abs(exact))
                _invariance(results, f"rms_norm {name}[{i}]", _rows_differing(y, [a[i] for a in alone]), rows)
    gate_up = lambda xr: mt.fused_linear(xr, wq[4][:2], epilogue="swiglu", norm=(g, eps))  # noqa: E731
    alone = [np.array(gate_up(x[r : r + 1]).astype(mx.float32)) for r in range(32)]
    for rows in (1, 5, 8, 17, 32):
        y, xs = normed(gate_up, rows)
        exact, slack = _swiglu_reference(xs, deq[4][0], deq[4][1])
        check(
            f"rms_norm swiglu int4 rows={rows}",
            y,
            exact,
            xs,
            deq[4][0],
            mx.bfloat16,
            slack=slack + 1e-4 * np.abs(exact),
        )
        _invariance(results, "rms_norm swiglu int4", _rows_differing(y, alone), rows)


def _swiglu_reference(xr, dg, du):
    """silu(x dg^T) * (x du^T) in float64, and its slack: the f32 accumulation error of gate
    and up, carried through silu(g) * u."""
    K = xr.shape[1]
    zg, zu = xr @ dg.T, xr @ du.T
    acc_g = (K + 2) * 2.0**-24 * (np.abs(xr) @ np.abs(dg).T)
    acc_u = (K + 2) * 2.0**-24 * (np.abs(xr) @ np.abs(du).T)
    silu = zg / (1 + np.exp(-zg))
    exact = silu * zu
    return exact, 1.1 * np.abs(zu) * acc_g + np.abs(silu) * acc_u + 2.0**-20 * np.abs(exact)


def _wide_swiglu(arr, check, results) -> None:
    """The SwiGLU gate/up over an output wide and deep enough for the several-tile layout (4-bit
    groups 64/128, whose 32-row kernel shares x between warps, lower_mma_xshare; 8-bit group 128,
    whose rings take dynamic shared memory at every row bucket, lower_mma_staged.ring_rule), and
    4-bit group 64 over 6008 columns and K = 2048 (ONE_TILE_WIDE, shared x at 32 rows too): against
    float64, and row by row against rows alone."""
    from mlx_metile.compiler.lower_mma_staged import NARROW_COLUMNS, SHORT_K

    K, N = SHORT_K, NARROW_COLUMNS + 16  # the several-tile layout, and a partial block of columns
    cases = [(K, N, 4, 64), (K, N, 4, 128), (K, N, 8, 128)]
    cases.append((2048, 6008, 4, 64))  # ONE_TILE_WIDE: one tile per block, shared x at 32 rows
    for K, N, bits, group in cases:
        x = arr((32, K), mx.bfloat16)
        qg, qu = (mx.quantize(arr((N, K), mx.bfloat16, 0.05), group_size=group, bits=bits) for _ in range(2))
        wg, wu = (mt.QuantizedWeight(*q, group, bits) for q in (qg, qu))
        dg, du = (dequantize_exact(*q, group, bits) for q in (qg, qu))
        alone = [
            np.array(mt.fused_linear(x[r : r + 1], [wg, wu], epilogue="swiglu").astype(mx.float32)) for r in range(32)
        ]
        for rows in (5, 16, 17, 32):
            xr = f64(x[:rows])
            exact, slack = _swiglu_reference(xr, dg, du)
            y = mt.fused_linear(x[:rows], [wg, wu], epilogue="swiglu")
            label = f"swiglu wide N={N} K={K} int{bits} g{group}"
            check(f"{label} rows={rows}", y, exact, xr, dg, mx.bfloat16, slack=slack)
            _invariance(results, label, _rows_differing(y, alone), rows)


def gradients_check() -> dict:
    """mx.grad through the CUDA path (custom vjp: the stock composition's) against
    mx.grad of the stock composition itself, on mx.gpu. The opt-in is set for
    this check only: the benchmarks after it time the default path."""
    os.environ["MLX_METILE_CUDA_GRADIENTS"] = "1"
    try:
        return _gradients_check()
    finally:
        del os.environ["MLX_METILE_CUDA_GRADIENTS"]


def _gradients_check() -> dict:
    rng = np.random.default_rng(1)
    out = {"cases": 0, "failures": []}

    def arr(shape, scale=1.0):
        return mx.array((rng.standard_normal(shape) * scale).astype(np.float32))

    K, N, rows = 256, 96, 5
    x, res, cot = arr((rows, K)), arr((rows, N)), arr((rows, N))
    g = mt.QuantizedWeight(*mx.quantize(arr((N, K), 0.05), group_size=64, bits=4), 64, 4)
    u, b = arr((N, K), 0.05), arr((N,))

    def ours(x, s, u, b, res):
        qg = mt.QuantizedWeight(g.w, s, g.biases, 64, 4)
        y = mt.fused_linear(x, [qg, u], biases=[None, b], epilogue="swiglu", residual=res)
        return (y * cot).sum()

    def stock(x, s, u, b, res):
        zg = mx.quantized_matmul(x, g.w, s, g.biases, transpose=True, group_size=64, bits=4)
        zu = x @ u.T + b
        return ((zg * mx.sigmoid(zg) * zu + res) * cot).sum()

    args = (x, g.scales, u, b, res)
    with mt.trace() as t:
        got = mx.grad(ours, argnums=tuple(range(5)))(*args)
    want = mx.grad(stock, argnums=tuple(range(5)))(*args)
    for name, a, w in zip(("x", "scales", "dense weight", "bias", "residual"), got, want):
        out["cases"] += 1
        err = float(mx.abs(a - w).max())
        scale = float(mx.abs(w).max())
        if not err <= 1e-4 * scale:
            out["failures"].append(f"grad wrt {name}: max err {err:.3g} of max {scale:.3g}")
    out["backends"] = sorted({r.backend for r in t.records})
    return out


def _correctness(quick: bool) -> dict:
    rng = np.random.default_rng(0)
    results = {"cases": 0, "failures": []}

    def arr(shape, dtype, scale=1.0):
        return mx.array((rng.standard_normal(shape) * scale).astype(np.float32)).astype(dtype)

    ulp = {mx.float32: 2.0**-24, mx.float16: 2.0**-11, mx.bfloat16: 2.0**-8}

    def check(name, got, exact, x64, w64, dtype, slack=0.0):
        results["cases"] += 1
        k = x64.shape[-1]
        tol = ulp[dtype] * np.abs(exact) + (k + 2) * 2.0**-24 * (np.abs(x64) @ np.abs(w64).T) + slack
        err = np.abs(f64(got) - exact)
        if (err > tol).any():
            results["failures"].append(f"{name}: max err {err.max():.3g} (tol at worst {tol[err > tol].min():.3g})")

    for dtype in (mx.float32, mx.float16, mx.bfloat16):
        K, N = 1000, 300  # tails in K and N
        w = arr((N, K), dtype, 0.05)
        b = arr((N,), dtype)
        xs = arr((MAX_ROWS_CHECKED, K), dtype)
        alone = _alone(lambda x, w=w, b=b: mt.linear(x, w, b), xs)
        for rows in (1, 2, 5, 17, 33, 64, 100) if quick else [*range(1, 34), 64, 65, 100]:
            y = mt.linear(xs[:rows], w, b)
            check(f"linear {dtype} rows={rows}", y, f64(xs[:rows]) @ f64(w).T + f64(b), f64(xs[:rows]), f64(w), dtype)
            _invariance(results, f"linear {dtype}", _not_invariant(y, alone, rows), rows)
        if dtype != mx.float32:  # K a multiple of 32: the tensor-core schedule for dense weights
            K3 = 1024
            w3 = arr((N, K3), dtype, 0.05)
            x3 = arr((MAX_ROWS_CHECKED, K3), dtype)
            alone3 = _alone(lambda x, w3=w3: mt.linear(x, w3), x3)
            for rows in (1, 5, 8, 9, 17, 32, 33) if quick else range(1, 34):
                y = mt.linear(x3[:rows], w3)
                check(
                    f"linear K=1024 {dtype} rows={rows}", y, f64(x3[:rows]) @ f64(w3).T, f64(x3[:rows]), f64(w3), dtype
                )
                _invariance(results, f"linear K=1024 {dtype}", _not_invariant(y, alone3, rows), rows)
        if quick and dtype == mx.float32:
            continue
        for bits in (4, 8):
            for group in (32, 64, 128):
                if quick and (bits == 8 or dtype == mx.float16) and group != 64:
                    continue
                K2 = 1024
                wq, s, bq = mx.quantize(arr((N, K2), dtype, 0.05), group_size=group, bits=bits)
                wd = dequantize_exact(wq, s, bq, group, bits)
                x = arr((MAX_ROWS_CHECKED, K2), dtype)
                alone = _alone(lambda x, q=(wq, s, bq, group, bits): _quantized(x, *q), x)
                for rows in (1, 3, 17, 33, 100) if quick else (1, 2, 3, 5, 8, 16, 32, 33, 64, 100):
                    y = mt.quantized_linear(x[:rows], wq, s, bq, group_size=group, bits=bits)
                    check(f"int{bits} g{group} {dtype} rows={rows}", y, f64(x[:rows]) @ wd.T, f64(x[:rows]), wd, dtype)
                    _invariance(results, f"int{bits} g{group} {dtype}", _not_invariant(y, alone, rows), rows)
    _odd_group_count(arr, check, results)
    _wide_outputs(arr, check, results)
    _one_tile_dense(arr, check, results)
    _narrow_deep_outputs(arr, check, results)
    _quantized_fusions(arr, check, results, quick)
    _wide_qkv(arr, check, results, quick)
    _rms_norm_fusions(arr, check, results)
    _wide_swiglu(arr, check, results)
    # fused variants, bf16
    dtype = mx.bfloat16
    K = 512
    x = arr((70, K), dtype)
    g, u = arr((200, K), dtype, 0.05), arr((200, K), dtype, 0.05)
    for rows in (1, 4, 17, 70):
        got = mt.fused_linear(x[:rows], [g, u], epilogue="swiglu")
        zg, zu = f64(x[:rows]) @ f64(g).T, f64(x[:rows]) @ f64(u).T
        check(
            f"swiglu rows={rows}",
            got,
            zg / (1 + np.exp(-zg)) * zu,
            f64(x[:rows]),
            f64(g),
            dtype,
            slack=1e-2 * np.abs(zg * zu).max(),
        )
        q, k, v = mt.fused_linear(x[:rows], [g, u[:64], u[64:128]])
        for name, out, w in (("q", q, g), ("k", k, u[:64]), ("v", v, u[64:128])):
            check(f"qkv.{name} rows={rows}", out, f64(x[:rows]) @ f64(w).T, f64(x[:rows]), f64(w), dtype)
        res = arr((rows, 200), dtype)
        got = mt.fused_linear(x[:rows], [g], residual=res)
        check(f"residual rows={rows}", got, f64(x[:rows]) @ f64(g).T + f64(res), f64(x[:rows]), f64(g), dtype)
    # q/k/v of a 3-D x (the outputs sliced straight to [batch, rows, N]): the 2-D call's bits
    results["cases"] += 1
    x3 = x[:12].reshape(2, 6, K)
    flat = mt.fused_linear(x[:12], [g, u[:64], u[64:128]])
    for name, a, b in zip("qkv", mt.fused_linear(x3, [g, u[:64], u[64:128]]), flat):
        if a.shape != (2, 6, b.shape[-1]) or not mx.array_equal(a.reshape(b.shape), b).item():
            results["failures"].append(f"qkv.{name} of a 3-D x: shape {a.shape}, not the 2-D call's values")
    return results


# ---------------------------------------------------------------- benchmark --
def timed(fn, repeat=7) -> float:
    return timed_with_host(fn, repeat)[0]


def timed_with_host(fn, repeat=7) -> tuple[float, float]:
    """(median time of a whole evaluation, median time until `mx.async_eval` returned - the
    host's part: building and submitting the work, which the GPU runs behind, plus any wait MLX
    makes for the GPU while too many command buffers are in flight). Where the two are close,
    the host is the limit only if the GPU's own time is known to be shorter (bench/host_bound.py)."""
    mx.eval(fn())
    mx.synchronize()
    total, host = [], []
    for _ in range(repeat):
        mx.synchronize()
        t0 = time.perf_counter()
        mx.async_eval(fn())
        t1 = time.perf_counter()
        mx.synchronize()
        total.append(time.perf_counter() - t0)
        host.append(t1 - t0)
    return statistics.median(total), statistics.median(host)


def timed_pair(fa, fb, repeat=15) -> tuple[float, float]:
    """Median times of whole evaluations of fa and of fb, alternating between them, so that both
    see the same drift of the machine (clocks, other work) - for ratios of two ways to do one job."""
    for fn in (fa, fb):
        mx.eval(fn())
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for fn, out in zip((fa, fb), times):
            mx.synchronize()
            t0 = time.perf_counter()
            mx.eval(fn())
            out.append(time.perf_counter() - t0)
    return statistics.median(times[0]), statistics.median(times[1])


def copy_roofline() -> tuple[float, str]:
    """(bytes read + written per second of a large device copy, how it was taken):
    PyTorch's copy_ between two preallocated 1 GiB buffers where PyTorch has CUDA
    (the method of ../shared/DEVICE.md), else MLX's `a + 1` - which also allocates
    its 1 GiB output each time and measured 2.4-3.1 TB/s against PyTorch's 4.26."""
    try:
        import torch

        if torch.cuda.is_available():
            src = torch.empty(256 << 20, dtype=torch.float32, device="cuda")
            dst = torch.empty_like(src)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            samples = []
            for _ in range(8):
                start.record()
                dst.copy_(src)
                end.record()
                torch.cuda.synchronize()
                samples.append(start.elapsed_time(end) / 1e3)
            del src, dst
            return 2 * (1 << 30) / statistics.median(samples[1:]), "torch copy_, 1 GiB, CUDA events"
    except ImportError:
        pass
    a = mx.zeros((256 << 20,), dtype=mx.float32)  # 1 GiB
    mx.eval(a)
    t = timed(lambda: [a + 1.0])
    return 2 * a.nbytes / t, "mlx a + 1, 1 GiB"


# benchmark formats: (bits, group size) of MLX's affine quantization; bf16 dense
FORMATS = {
    "bf16": (16, 0),
    "int4": (4, 64),
    "int8": (8, 64),
    "int4g32": (4, 32),
    "int4g128": (4, 128),
    "int8g32": (8, 32),
    "int8g128": (8, 128),
}


def make_weight(fmt: str, K: int, N: int, seed: int) -> tuple:
    """(w,) for bf16, else MLX's (packed, scales, biases) in that format."""
    w = (mx.random.normal((N, K), key=mx.random.key(seed)) * K**-0.5).astype(mx.bfloat16)
    bits, group = FORMATS[fmt]
    return (w,) if fmt == "bf16" else tuple(mx.quantize(w, group_size=group, bits=bits))


def make_pool(fmt: str, K: int, N: int, widths: tuple[int, ...] = ()):
    """Weights of one product each, enough to fill POOL_BYTES; with `widths` (a fused
    product), each entry is a tuple of one weight per width. Returns (pool, bytes per entry)."""
    one = K * N * FORMATS[fmt][0] / 8
    count = max(4, int(POOL_BYTES // one) + 1)
    pool = []
    for i in range(count):
        if widths:
            pool.append(tuple(make_weight(fmt, K, n, i * len(widths) + j) for j, n in enumerate(widths)))
        else:
            pool.append(make_weight(fmt, K, N, i))
        mx.eval(pool[-1])
    nbytes = sum(a.nbytes for a in flat(pool[0]))
    return pool, nbytes


def flat(entry: tuple) -> tuple:
    """The arrays of a pool entry (a fused entry holds one tuple per weight)."""
    return tuple(a for part in entry for a in (part if isinstance(part, tuple) else (part,)))


def torch_graph_timing(torch, pool: list, product, rows: int, K: int, nbytes: int, timing: str) -> dict:
    """Products over a pool of PyTorch weights captured once in a CUDA graph (so
    Python launch overhead is not timed, as mx.compile removes MLX's), replays
    timed with CUDA events; `nbytes` is one weight's bytes."""
    count = len(pool)
    x = torch.randn(rows, K, device="cuda", dtype=torch.bfloat16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up outside the capture, as CUDA graphs need
        for i in range(count):
            product(x, pool[i])
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [product(x, pool[i % count]) for i in range(PRODUCTS_PER_EVAL)]
    samples = []
    for rep in range(8):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        torch.cuda.synchronize()
        if rep:  # the first is warm-up
            samples.append(start.elapsed_time(stop) / 1e3 / PRODUCTS_PER_EVAL)
    del outs, graph
    t = statistics.median(samples)
    return {"t": t, "gbs": nbytes / t / 1e9, "timing": timing}


_torch_pools: dict = {}


def _torch_pool(key: tuple, make) -> list:
    """One PyTorch weight pool kept across row counts (one at a time: each is ~480 MB)."""
    if key not in _torch_pools:
        _torch_pools.clear()
        _torch_pools[key] = make()
    return _torch_pools[key]


def torch_linear(torch, K, N, rows, nbytes) -> dict:
    """PyTorch F.linear (cuBLAS) on bf16 weights from a pool of the same size."""
    count = max(4, int(POOL_BYTES // nbytes) + 1)
    pool = _torch_pool(
        ("bf16", K, N),
        lambda: [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) * K**-0.5 for _ in range(count)],
    )
    return torch_graph_timing(torch, pool, torch.nn.functional.linear, rows, K, nbytes, "F.linear, CUDA graph replay")


def torch_int4(torch, K, N, rows) -> dict:
    """PyTorch's int4 kernel (`_weight_int4pack_mm`, group 64, bf16 activations,
    the kernel of ../shared/DEVICE.md) on random 4-bit weights; bytes are the packed
    weights plus its bf16 scales and zeros."""
    group = 64
    nbytes = N * K // 2 + (K // group) * N * 2 * 2
    count = max(4, int(POOL_BYTES // nbytes) + 1)

    def make() -> list:
        pool = []
        for _ in range(count):
            q = torch.randint(0, 16, (N, K), dtype=torch.int32, device="cuda")
            packed = ((q[:, ::2] << 4) | q[:, 1::2]).to(torch.uint8)  # [N, K/2], as the op takes it
            scales_zeros = torch.randn(K // group, N, 2, device="cuda", dtype=torch.bfloat16) * 0.01
            pool.append((torch._convert_weight_to_int4pack(packed, 8), scales_zeros))
            del q, packed
        return pool

    pool = _torch_pool(("int4", K, N), make)

    def product(x, p):
        return torch._weight_int4pack_mm(x, p[0], group, p[1])

    return torch_graph_timing(torch, pool, product, rows, K, nbytes, "_weight_int4pack_mm, CUDA graph replay")


def product(impl: str, fmt: str, x, p):
    """One projection of x by pool entry p: mlx_metile's op or stock MLX's."""
    bits, group = FORMATS[fmt]
    if impl == "mlx_metile":
        return mt.linear(x, p[0]) if fmt == "bf16" else mt.quantized_linear(x, *p, group_size=group, bits=bits)
    return x @ p[0].T if fmt == "bf16" else mx.quantized_matmul(x, *p, transpose=True, group_size=group, bits=bits)


def fused_product(impl: str, fmt: str, x, entry: tuple, epilogue: str | None) -> list:
    """One fused product of x by a pool entry (a weight per output): mlx_metile's one kernel,
    or stock MLX's products and then SwiGLU (silu(gate) * up, as mlx-lm's MLP)."""
    if impl == "mlx_metile":
        bits, group = FORMATS[fmt]
        ws = [p[0] if fmt == "bf16" else mt.QuantizedWeight(*p, group, bits) for p in entry]
        out = mt.fused_linear(x, ws, epilogue=epilogue)
        return out if isinstance(out, list) else [out]
    outs = [product("stock", fmt, x, p) for p in entry]
    if epilogue == "swiglu":
        gate, up = outs
        return [gate * mx.sigmoid(gate) * up]
    return outs


def product_step(impl: str, fmt: str, fused: str | None | bool = False):
    """(x, pool entry) -> the list of one product's outputs, `impl`'s way; `fused`: False for a
    single product, else the fused product's epilogue."""
    if fused is False:
        return lambda x, entry: [product(impl, fmt, x, entry)]
    return lambda x, entry: fused_product(impl, fmt, x, entry, fused)


def products(fmt: str, pool: list, fused: str | None | bool = False):
    """(mlx_metile, stock) functions of x computing PRODUCTS_PER_EVAL products, each with the
    pool's next weight; `fused`: False for single products, else the fused products' epilogue."""

    def over_pool(impl):
        one = product_step(impl, fmt, fused)

        # fused products take a list of one x per product: with a single x, stock MLX's
        # products followed by SwiGLU measured 2 x 117 MB of bf16 weights in 8 us - not all
        # computed, presumably mx.compile merging the repeats (same x, same pool entry) - so
        # each product gets its own x
        def x_of(x, i):
            return x[i] if fused is not False else x

        return lambda x: [y for i in range(PRODUCTS_PER_EVAL) for y in one(x_of(x, i), pool[i % len(pool)])]

    return over_pool("mlx_metile"), over_pool("stock")


IMPLS = ("mlx_metile", "stock")
FLOOR_KEY = {"compiled": "read_floor", "chained": "read_floor_chained"}  # where each mode's read floor goes


def chain(step, pool: list):
    """x -> the outputs of PRODUCTS_PER_EVAL products step(x, entry) (a list of outputs each), each
    x made from the previous product's output (x + 0 * its first element: one small elementwise
    kernel, the same for every side), so that the products run one after another as a model's
    projections do. Without it the products of an evaluation are independent and MLX lets their
    kernels run side by side: a grid that leaves SMs idle (stock MLX's 32-row kernels: 112 blocks
    of 128 columns on 132 SMs) is then filled by the next products' blocks, which a model's
    dependent chain does not allow."""

    def run(x):
        outs = []
        for i in range(PRODUCTS_PER_EVAL):
            ys = step(x, pool[i % len(pool)])
            outs += ys
            x = x + 0 * ys[0].reshape(-1)[:1].astype(x.dtype)
        return outs

    return run


def bench_case(fmt, K, N, rows, pool, nbytes, torch_mod=None, fused: str | None | bool = False):
    x = mx.random.normal((rows, K)).astype(mx.bfloat16)
    if fused is not False:  # one x per product (see products)
        x = [
            mx.random.normal((rows, K), key=mx.random.key(1000 + i)).astype(mx.bfloat16)
            for i in range(PRODUCTS_PER_EVAL)
        ]
        mx.eval(x)
    r = {}
    ours, stock = products(fmt, pool, fused)

    if fused is not False:
        torch_mod = None  # PyTorch is compared on single products only
    if torch_mod is not None and fmt == "bf16":
        r["torch"] = torch_linear(torch_mod, K, N, rows, nbytes)
    if torch_mod is not None and fmt == "int4":
        try:
            r["torch"] = torch_int4(torch_mod, K, N, rows)
        except Exception as e:  # a private PyTorch op: its signature has changed between releases
            r["torch_error"] = repr(e)
    # eager: the graph is built in Python for every evaluation (host overhead included);
    # compiled: mx.compile replays it, so the time is the kernels'; chained: compiled, products in turn
    for mode in MODES:
        if mode == "chained":
            fo, fs = (mx.compile(chain(product_step(impl, fmt, fused), pool)) for impl in IMPLS)
            x_in = x[0] if fused is not False else x  # a chain makes its own x per product
        else:
            wrap = mx.compile if mode == "compiled" else (lambda f: f)
            fo, fs = wrap(ours), wrap(stock)
            x_in = x
        t_ours, h_ours = (t / PRODUCTS_PER_EVAL for t in timed_with_host(lambda fo=fo, x_in=x_in: fo(x_in)))
        t_stock, h_stock = (t / PRODUCTS_PER_EVAL for t in timed_with_host(lambda fs=fs, x_in=x_in: fs(x_in)))
        r[mode] = {
            "t_ours": t_ours,
            "t_stock": t_stock,
            "host_ours": h_ours,  # of t_ours, the host's part (see timed_with_host)
            "host_stock": h_stock,
            "gbs_ours": nbytes / t_ours / 1e9,
            "gbs_stock": nbytes / t_stock / 1e9,
            "speedup": t_stock / t_ours,
        }
        if mode in ("compiled", "chained"):
            key = (fmt, K, N, mode)  # the floor does not depend on the rows: once per pool
            if key not in _floors:
                _floors[key] = read_floor_case(pool, x_in, nbytes, chained=mode == "chained")
            r[FLOOR_KEY[mode]] = _floors[key]
    return r


_floors: dict = {}


def read_floor_case(pool: list, x, nbytes: int, chained: bool = False) -> dict:
    """The same compiled loop over the same pool with each product replaced by a kernel that
    only reads the weight's bytes (bench/read_floor.py): what one kernel launched through
    MLX costs for these bytes. `chained`: as the chained mode's products (see chain), each
    kernel also reading its x."""
    try:
        from read_floor import MAX_BUFFERS, read_all

        if chained:
            if len(flat(pool[0])) >= MAX_BUFFERS:  # no room for x, so nothing to chain on (q/k/v's 9 arrays)
                return {"error": f"a chained floor reads x beside the weights' arrays: at most {MAX_BUFFERS - 1}"}
            floor = mx.compile(chain(lambda x, p: [read_all((*flat(p), x))], pool))
        else:
            floor = mx.compile(lambda x: [read_all(flat(pool[i % len(pool)])) for i in range(PRODUCTS_PER_EVAL)])
        t, host = (t / PRODUCTS_PER_EVAL for t in timed_with_host(lambda: floor(x)))
    except Exception as e:  # no nvcc on the machine: the column stays empty
        return {"error": repr(e)}
    return {"t": t, "gbs": nbytes / t / 1e9, "host": host}


def bench_fused(K, N_q, N_kv, N_ff, rows):
    """q/k/v and gate/up+SwiGLU fused vs the same projections called separately through mlx_metile
    (eager: 32 calls per evaluation, the two ways alternated over 15 evaluations, medians)."""
    out = {}
    count = 8
    x = mx.random.normal((rows, K)).astype(mx.bfloat16)
    qkv = [
        tuple((mx.random.normal((n, K)) * K**-0.5).astype(mx.bfloat16) for n in (N_q, N_kv, N_kv)) for _ in range(count)
    ]
    gu = [
        tuple(
            mx.quantize((mx.random.normal((N_ff, K)) * K**-0.5).astype(mx.bfloat16), group_size=64, bits=4)
            for _ in range(2)
        )
        for _ in range(count)
    ]
    mx.eval(qkv, gu)
    reps = 32
    t_f, t_s = timed_pair(
        lambda: [mt.fused_linear(x, list(qkv[i % count])) for i in range(reps)],
        lambda: [mt.linear(x, w) for i in range(reps) for w in qkv[i % count]],
    )
    t_f, t_s = t_f / reps, t_s / reps
    out["qkv_bf16"] = {"t_fused": t_f, "t_separate": t_s, "speedup": t_s / t_f}

    def fused():
        return [
            mt.fused_linear(x, [mt.QuantizedWeight(*g, 64, 4), mt.QuantizedWeight(*u, 64, 4)], epilogue="swiglu")
            for g, u in (gu[i % count] for i in range(reps))
        ]

    def separate():
        outs = []
        for i in range(reps):
            g, u = gu[i % count]
            a = mt.quantized_linear(x, *g, group_size=64, bits=4)
            b = mt.quantized_linear(x, *u, group_size=64, bits=4)
            outs.append(a * mx.sigmoid(a) * b)
        return outs

    t_f, t_s = (t / reps for t in timed_pair(fused, separate))
    out["gate_up_swiglu_int4"] = {"t_fused": t_f, "t_separate": t_s, "speedup": t_s / t_f}
    return out


def main() -> int:
    global PRODUCTS_PER_EVAL
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--correctness", choices=["full", "quick", "grad", "none"], default="full")
    ap.add_argument("--shapes", nargs="*", default=[*SHAPES, *FUSED_SHAPES], choices=[*SHAPES, *FUSED_SHAPES])
    ap.add_argument("--formats", nargs="*", default=["bf16", "int4", "int8"], choices=list(FORMATS))
    ap.add_argument(
        "--products-per-eval",
        type=int,
        default=PRODUCTS_PER_EVAL,
        help="products per mx.eval (a model's decode step evaluates a few hundred projections at once)",
    )
    ap.add_argument("--modes", nargs="*", default=DEFAULT_MODES, choices=list(MODES))
    ap.add_argument(
        "--rows", nargs="*", type=int, default=None, help="row counts (default: 1-32, or 1, 4, 16 with --quick)"
    )
    ap.add_argument(
        "--fused-rows",
        nargs="*",
        type=int,
        default=[1, 4, 16],
        help="row counts of the eager fused-against-separate comparison (none: skip it)",
    )
    args = ap.parse_args()
    if any(r < 1 for r in args.fused_rows):
        ap.error(f"--fused-rows: expected positive row counts, got {args.fused_rows}")
    if args.rows is not None and any(r < 1 for r in args.rows):
        ap.error(f"--rows: expected positive row counts, got {args.rows}")
    PRODUCTS_PER_EVAL = args.products_per_eval
    MODES[:] = [m for m in MODES if m in args.modes]
    mx.set_default_device(mx.gpu)
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mlx": mx.__version__,
        "mlx_metile": mt.__version__,
        "device": str(mx.default_device()),
        "device_info": {k: str(v) for k, v in mx.device_info().items()},
        "platform": platform.platform(),
        # settings that change the generated CUDA (none: the defaults), e.g. MLX_METILE_CUDA_MMA_DENSE=1
        "cuda_settings": {k: v for k, v in sorted(os.environ.items()) if k.startswith("MLX_METILE_CUDA_")},
        "products_per_eval": PRODUCTS_PER_EVAL,
        "python": sys.version.split()[0],
        "cuda_launch": mt.ops.cuda_launch_kind(),  # primitive | native (MLX's op from C++) | python
    }
    if args.correctness != "none":
        report["gradients"] = gradients_check()
        print("gradients", json.dumps(report["gradients"]), flush=True)
    if args.correctness == "grad":
        Path(args.out).write_text(json.dumps(report, indent=1))
        return 0
    if args.correctness != "none":
        t0 = time.time()
        try:
            report["correctness"] = correctness(quick=args.correctness == "quick")
            report["correctness"]["matrix"] = args.correctness
        except Exception:
            report["correctness"] = {"error": traceback.format_exc()}
        print("correctness", json.dumps(report["correctness"])[:2000], f"{time.time() - t0:.0f}s", flush=True)
    report["copy_roofline_bytes_per_s"], report["copy_roofline_method"] = copy_roofline()
    print(f"copy roofline {report['copy_roofline_bytes_per_s'] / 1e12:.2f} TB/s", flush=True)
    rows_list = args.rows or ([1, 4, 16] if args.quick else ROWS)
    try:
        import torch as torch_mod

        if not torch_mod.cuda.is_available():
            torch_mod = None
    except ImportError:
        torch_mod = None
    report["torch"] = torch_mod.__version__ if torch_mod is not None else None
    report["cases"] = []
    for shape_name in args.shapes:
        if shape_name in FUSED_SHAPES:
            K, widths, fused = FUSED_SHAPES[shape_name]
            N = sum(widths)
        else:
            (K, N), widths, fused = SHAPES[shape_name], (), False
        for fmt in args.formats:
            pool, nbytes = make_pool(fmt, K, N, widths)
            for rows in rows_list:
                try:
                    r = bench_case(fmt, K, N, rows, pool, nbytes, torch_mod, fused)
                except Exception as e:
                    r = {"error": repr(e)}
                r.update({"shape": shape_name, "K": K, "N": N, "format": fmt, "rows": rows, "weight_bytes": nbytes})
                report["cases"].append(r)
                print(json.dumps(r), flush=True)
                Path(args.out).write_text(json.dumps(report, indent=1))  # keep what finished
            del pool
    try:
        report["fused"] = {rows: bench_fused(4096, 4096, 1024, 14336, rows) for rows in args.fused_rows}
    except Exception:
        report["fused"] = {"error": traceback.format_exc()}
    print(json.dumps(report.get("fused"))[:3000], flush=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
