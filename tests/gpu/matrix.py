"""The GPU correctness matrix: every op variant against a float64 reference, and every row of a
call against the same row computed alone (row invariance). Plain functions of a `Matrix`, which
counts the cases and collects the failures, so that tests/gpu/test_cuda_gpu.py can run each
section as a test and tools/h200/precompile.py can compile the kernels it asks for.

Tolerance of each output element (Matrix.check): one rounding of the output to its dtype, plus
the f32 accumulation bound (K + 2) * 2**-24 * sum |x||w| (any summation order meets it), plus a
section's own slack where the epilogue adds error (silu, erf, rsqrtf). Row invariance is bit
for bit: a row's sum order depends on the spec, never on how many rows share the call.

Calls of more than 32 rows run stock MLX on CUDA by default: the tests lift that limit to
MAX_ROWS_CHECKED (MLX_METILE_CUDA_MAX_ROWS) so that the tiled kernel is checked too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import contextmanager
from functools import partial

import mlx.core as mx
import numpy as np

import mlx_metile as mt
from mlx_metile import formats, settings
from mlx_metile.backends.cuda_device import build_target
from mlx_metile.reference import dequantize_exact
from mlx_metile.schedule.cuda_layouts import (
    ONE_TILE_WIDE,
    ONE_WAVE,
    SHORT_K,
    SPREAD_K,
    column_layout,
    narrow_columns,
)

MAX_ROWS_CHECKED = 100  # correctness and row invariance up to here (> 32: the tiled schedule)
ULP = {mx.float32: 2.0**-24, mx.float16: 2.0**-11, mx.bfloat16: 2.0**-8}


def f64(a) -> np.ndarray:
    return np.array(a.astype(mx.float32), dtype=np.float64)


def f32(a) -> np.ndarray:
    return np.array(a.astype(mx.float32))


class Matrix:
    """Random inputs of one seed, the case count and the failures of a run."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.cases = 0
        self.failures: list[str] = []

    def arr(self, shape, dtype, scale: float = 1.0) -> mx.array:
        return mx.array((self.rng.standard_normal(shape) * scale).astype(np.float32)).astype(dtype)

    def check(self, name: str, got, exact, x64, w64, dtype, slack=0.0) -> None:
        """got against float64 `exact`, within the tolerance of the module docstring."""
        self.cases += 1
        k = x64.shape[-1]
        tol = ULP[dtype] * np.abs(exact) + (k + 2) * 2.0**-24 * (np.abs(x64) @ np.abs(w64).T) + slack
        err = np.abs(f64(got) - exact)
        if (err > tol).any():
            self.failures.append(f"{name}: max err {err.max():.3g} (tol at worst {tol[err > tol].min():.3g})")

    def invariant(self, label: str, y, alone: list, rows: int) -> None:
        """The rows of y against the same rows computed alone (1-row float32 arrays), bit for bit."""
        yy = f32(y)
        bad = [r for r in range(yy.shape[0]) if not np.array_equal(yy[r], alone[r][0])]
        if bad:
            self.failures.append(f"row invariance: {label} rows {bad[:5]} of {rows}")


@contextmanager
def tensor_cores_off():
    """The SIMT schedules (MLX_METILE_CUDA_MMA=0): the split-K kernels, whose sum order the
    tiled kernel (> 32 rows) reproduces bit for bit."""
    with settings.override(MLX_METILE_CUDA_MMA="0"):
        yield


def alone_both(fn, x) -> dict:
    """Each row of x computed alone: with the default kernels (rows 1..32) and with the
    tensor-core schedule off (the reference of rows > 32)."""

    def rows():
        return [f32(fn(x[r : r + 1])) for r in range(x.shape[0])]

    default = rows()
    with tensor_cores_off():
        simt = rows()
    return {"default": default, "simt": simt}


def alone_of(both: dict, rows: int) -> list:
    return both["default"] if rows <= 32 else both["simt"]


def quantized(x, wq, s, bq, group, bits):
    return mt.quantized_linear(x, wq, s, bq, group_size=group, bits=bits)


def sms() -> int:
    return build_target().layout_sms


def quantized_rows(m: Matrix, K: int, N: int, dtype, bits: int, rows_list, label: str, group: int = 64) -> None:
    """One int`bits` weight [N, K] of `group`: each row count against float64, and every row
    against the same row alone."""
    wq, s, bq = mx.quantize(m.arr((N, K), dtype, 0.05), group_size=group, bits=bits)
    wd = dequantize_exact(wq, s, bq, group, bits)
    x = m.arr((32, K), dtype)
    alone = [f32(quantized(x[r : r + 1], wq, s, bq, group, bits)) for r in range(32)]
    for rows in rows_list:
        y = quantized(x[:rows], wq, s, bq, group, bits)
        name = f"int{bits} g{group} {label} {dtype} rows={rows}"
        m.check(name, y, f64(x[:rows]) @ wd.T, f64(x[:rows]), wd, dtype)
        m.invariant(name, y, alone, rows)


def dense_rows(m: Matrix, K: int, N: int, rows_list, label: str) -> None:
    """One bf16 weight [N, K]: each row count against float64, and every row against the same
    row alone."""
    w = m.arr((N, K), mx.bfloat16, 0.05)
    xs = m.arr((MAX_ROWS_CHECKED, K), mx.bfloat16)
    alone = alone_both(lambda x: mt.linear(x, w), xs)
    for rows in rows_list:
        y = mt.linear(xs[:rows], w)
        name = f"linear {label} bf16 rows={rows}"
        m.check(name, y, f64(xs[:rows]) @ f64(w).T, f64(xs[:rows]), f64(w), mx.bfloat16)
        m.invariant(name, y, alone_of(alone, rows), rows)


def swiglu_reference(xr, dg, du):
    """silu(x dg^T) * (x du^T) in float64, and its slack: the f32 accumulation error of gate
    and up, carried through silu(g) * u."""
    K = xr.shape[1]
    zg, zu = xr @ dg.T, xr @ du.T
    acc_g = (K + 2) * 2.0**-24 * (np.abs(xr) @ np.abs(dg).T)
    acc_u = (K + 2) * 2.0**-24 * (np.abs(xr) @ np.abs(du).T)
    silu = zg / (1 + np.exp(-zg))
    exact = silu * zu
    return exact, 1.1 * np.abs(zu) * acc_g + np.abs(silu) * acc_u + 2.0**-20 * np.abs(exact)


# ------------------------------------------------------------------------------ sections --
def linear(m: Matrix, quick: bool) -> None:
    """Dense weights in f32, f16 and bf16 over K = 1000 (tails in K and N) with a bias, at 1-100
    rows; over K = 1024 (a multiple of 32: the tensor-core schedule) for f16 and bf16."""
    for dtype in (mx.float32, mx.float16, mx.bfloat16):
        K, N = 1000, 300
        w, b = m.arr((N, K), dtype, 0.05), m.arr((N,), dtype)
        xs = m.arr((MAX_ROWS_CHECKED, K), dtype)
        alone = alone_both(lambda x, w=w, b=b: mt.linear(x, w, b), xs)
        for rows in (1, 2, 5, 17, 33, 64, 100) if quick else [*range(1, 34), 64, 65, 100]:
            y = mt.linear(xs[:rows], w, b)
            m.check(f"linear {dtype} rows={rows}", y, f64(xs[:rows]) @ f64(w).T + f64(b), f64(xs[:rows]), f64(w), dtype)
            m.invariant(f"linear {dtype}", y, alone_of(alone, rows), rows)
        if dtype == mx.float32:
            continue
        K3 = 1024
        w3 = m.arr((N, K3), dtype, 0.05)
        x3 = m.arr((MAX_ROWS_CHECKED, K3), dtype)
        alone3 = alone_both(lambda x, w3=w3: mt.linear(x, w3), x3)
        for rows in (1, 5, 8, 9, 17, 32, 33) if quick else range(1, 34):
            y = mt.linear(x3[:rows], w3)
            m.check(f"linear K=1024 {dtype} rows={rows}", y, f64(x3[:rows]) @ f64(w3).T, f64(x3[:rows]), f64(w3), dtype)
            m.invariant(f"linear K=1024 {dtype}", y, alone_of(alone3, rows), rows)


def _one_quantized_weight(m: Matrix, quick: bool, dtype, bits: int, group: int) -> None:
    """A 300 x 1024 weight of `bits` and `group` at 1-100 rows, against float64 and row invariance."""
    N, K = 300, 1024
    wq, s, bq = mx.quantize(m.arr((N, K), dtype, 0.05), group_size=group, bits=bits)
    wd = dequantize_exact(wq, s, bq, group, bits)
    x = m.arr((MAX_ROWS_CHECKED, K), dtype)
    alone = alone_both(lambda x, q=(wq, s, bq, group, bits): quantized(x, *q), x)
    for rows in (1, 3, 17, 33, 100) if quick else (1, 2, 3, 5, 8, 16, 32, 33, 64, 100):
        y = quantized(x[:rows], wq, s, bq, group, bits)
        m.check(f"int{bits} g{group} {dtype} rows={rows}", y, f64(x[:rows]) @ wd.T, f64(x[:rows]), wd, dtype)
        m.invariant(f"int{bits} g{group} {dtype}", y, alone_of(alone, rows), rows)


def quantized_formats(m: Matrix, quick: bool) -> None:
    """4/8-bit weights of groups 32/64/128 with f16 and bf16 scales (and f32 in the full matrix)
    over K = 1024, at 1-100 rows."""
    for dtype in (mx.float16, mx.bfloat16) if quick else (mx.float32, mx.float16, mx.bfloat16):
        for bits in (4, 8):
            for group in (32, 64, 128):
                if quick and (bits == 8 or dtype == mx.float16) and group != 64:
                    continue
                _one_quantized_weight(m, quick, dtype, bits, group)


def affine_widths(m: Matrix, quick: bool) -> None:
    """2, 3, 5 and 6-bit weights (3, 5 and 6-bit values straddle words) over K = 1024 at 1-100
    rows: the tensor-core direct loads up to 32 rows at every group - a lane's quarter of a group
    whole words (2 bits at groups 64 / 128, 3 and 5 at 128, 6 at 64 / 128), or starting or ending
    inside a word (2/32, 3/32, 3/64, 5/32, 5/64, 6/32) - and the SIMT kernel past 32 rows."""
    quick_combos = ((2, 32), (2, 64), (3, 32), (3, 128), (5, 64), (5, 128), (6, 64))
    for dtype in (mx.bfloat16,) if quick else (mx.float16, mx.bfloat16):
        for bits, group in quick_combos if quick else [(b, g) for b in (2, 3, 5, 6) for g in (32, 64, 128)]:
            _one_quantized_weight(m, quick, dtype, bits, group)


def microscaling(m: Matrix, quick: bool) -> None:
    """MLX's mxfp4, mxfp8 and nvfp4 weights (uint8 scales, no biases) over K = 1024 at 1-100 rows:
    with f16 and bf16 x the tensor-core direct loads up to 32 rows (f32 x: the SIMT kernel); and
    the three modes with an affine weight in one fused q/k/v call (mixed formats: SIMT)."""
    N, K = 300, 1024
    rows_list = (1, 3, 17, 33, 100) if quick else (1, 2, 3, 5, 8, 16, 32, 33, 64, 100)
    for dtype in (mx.float16, mx.bfloat16) if quick else (mx.float32, mx.float16, mx.bfloat16):
        for mode in ("mxfp4", "mxfp8", "nvfp4"):
            qw = mt.QuantizedWeight(*mx.quantize(m.arr((N, K), dtype, 0.05), mode=mode), mode=mode)
            wd = formats.reference(qw)
            x = m.arr((MAX_ROWS_CHECKED, K), dtype)
            alone = alone_both(lambda x, qw=qw: mt.quantized_linear(x, qw.w, qw.scales, mode=qw.mode), x)
            for rows in rows_list:
                y = mt.quantized_linear(x[:rows], qw.w, qw.scales, mode=mode)
                m.check(f"{mode} {dtype} rows={rows}", y, f64(x[:rows]) @ wd.T, f64(x[:rows]), wd, dtype)
                m.invariant(f"{mode} {dtype}", y, alone_of(alone, rows), rows)
    dtype = mx.bfloat16
    ws = [
        mt.QuantizedWeight(*mx.quantize(m.arr((n, K), dtype, 0.05), mode=md), mode=md)
        for n, md in ((256, "mxfp4"), (64, "mxfp8"), (64, "nvfp4"))
    ]
    ws.append(mt.QuantizedWeight(*mx.quantize(m.arr((64, K), dtype, 0.05), group_size=64, bits=4), 64, 4))
    x = m.arr((MAX_ROWS_CHECKED, K), dtype)
    for rows in (1, 8, 33) if quick else rows_list:
        outs = mt.fused_linear(x[:rows], ws)
        for w, y in zip(ws, outs):
            wd = formats.reference(w)
            m.check(f"fused {w.mode} {dtype} rows={rows}", y, f64(x[:rows]) @ wd.T, f64(x[:rows]), wd, dtype)


def format_fusions(m: Matrix, quick: bool) -> None:
    """mxfp4, mxfp8, nvfp4 and affine 3-bit group 128 and 6-bit group 64 on the tensor cores
    with epilogues - the SwiGLU gate/up, a bias with GELU - over K = 512 into 200 columns (a
    partial column tile), f16 and bf16, at 1, 5, 16 and 32 rows: against float64, and row by row
    against rows alone."""
    K, N = 512, 200
    for dtype in (mx.bfloat16, mx.float16):
        for mode, bits, group in (
            ("mxfp4", 4, 32),
            ("mxfp8", 8, 32),
            ("nvfp4", 4, 16),
            ("affine", 3, 128),
            ("affine", 6, 64),
        ):
            x = m.arr((32, K), dtype)

            def weight(mode=mode, bits=bits, group=group, dtype=dtype):
                q = mx.quantize(m.arr((N, K), dtype, 0.05), group_size=group, bits=bits, mode=mode)
                return mt.QuantizedWeight(*q, group_size=group, bits=bits, mode=mode)

            wg, wu = weight(), weight()
            dg, du = formats.reference(wg), formats.reference(wu)
            bias = m.arr((N,), dtype)
            calls: dict[str, Callable] = {
                "swiglu": lambda xr, wg=wg, wu=wu: mt.fused_linear(xr, [wg, wu], epilogue="swiglu"),
                "bias_gelu": lambda xr, wg=wg, b=bias: mt.fused_linear(xr, [wg], biases=[b], epilogue="gelu"),
            }
            for name, fn in calls.items():
                alone = [f32(fn(x[r : r + 1])) for r in range(32)]
                for rows in (1, 5, 16, 32):
                    xr = f64(x[:rows])
                    if name == "swiglu":
                        exact, slack = swiglu_reference(xr, dg, du)
                    else:
                        z = xr @ dg.T + f64(bias)
                        exact = 0.5 * z * (1 + np.vectorize(math.erf)(z / np.sqrt(2)))
                        slack = 1e-6 * (np.abs(z) + 1)  # erff's error
                    y = fn(x[:rows])
                    m.check(f"{name} {mode} {dtype} rows={rows}", y, exact, xr, dg, dtype, slack=slack)
                    m.invariant(f"{name} {mode} {dtype}", y, alone, rows)


def odd_group_count(m: Matrix, quick: bool) -> None:
    """K = 17 groups of 64: no 4-byte scale pairs, so the tensor-core schedule loads through
    registers instead of its cp.async ring."""
    K = 17 * 64
    for dtype in (mx.bfloat16, mx.float16):
        for bits in (4, 8):
            quantized_rows(m, K, 136, dtype, bits, (1, 8, 17, 32), f"K={K}")


def wide_outputs(m: Matrix, quick: bool) -> None:
    """Outputs of narrow_columns columns or more (plus a tail of 40) over K = SHORT_K: 2 column
    tiles per block on the staged ring, at every row bucket (8-bit group 128: at 32 rows, in
    dynamic shared memory); over K = 1536 (the ONE_WAVE layout: 5 blocks per SM at 1-8 rows); over
    K = 3584, 10600 columns (single 4/8-bit products: TILES); over K = 2048, 6008 columns
    (ONE_TILE_WIDE: TILES for single 4/8-bit products, cuda_layouts.bucket_layout)."""
    N, rows_list = narrow_columns(sms()) + 40, (1, 3, 8, 9, 16, 17, 32)
    for K in (SHORT_K, 1536):
        group32 = ((4, 32), (8, 32)) if K == 1536 else ()  # the ONE_WAVE stage table's entries for them
        for bits, group in ((4, 64), (8, 64), (4, 128), (8, 128), *group32):
            if K == SHORT_K and group == 128 and bits == 4:
                continue
            quantized_rows(m, K, N, mx.bfloat16, bits, rows_list, f"N={N} K={K}", group)
    # over QUANTIZED_SHORT_K <= K < SHORT_K, one-tile grids of more than 5 blocks per SM: TILES
    # (K = 3584: 14 stages of 256 over 4 warps, uneven ranges)
    N, K = 10600, 3584
    for bits, group in ((4, 64), (8, 64), (4, 128)):
        quantized_rows(m, K, N, mx.bfloat16, bits, (1, 3, 8, 17, 32), f"N={N} K={K}", group)
    # one-tile grids of 2-4 blocks per SM over such K (ONE_TILE_WIDE) take TILES in every row bucket
    # (group 64) or from 8 rows (8-bit group 128) - as ONE_WAVE's 8-bit group-64 products over
    # K = 1536 above from 8 rows
    N, K = 6008, 2048
    for bits, group in ((4, 64), (8, 64), (8, 128)):
        quantized_rows(m, K, N, mx.bfloat16, bits, (1, 4, 5, 8, 17, 32), f"N={N} K={K}", group)


def one_tile_dense(m: Matrix, quick: bool) -> None:
    """Dense products of the one-tile layouts with their own dense rules, at row buckets on both
    sides of them: 6008 columns (a tail of 8) over K = 2048, ONE_TILE_WIDE, whose 1-4 row kernels
    keep the 48 KB ring where ONE_TILE's take the deep one and whose 16-32 row kernels are TILES's
    (bucket_layout); 8488 columns over K = 1536, ONE_WAVE, which splits K over 2 warps in every
    row bucket."""
    for N, K, layout in ((6008, 2048, ONE_TILE_WIDE), (8488, 1536, ONE_WAVE)):
        assert column_layout(N, K, False, sms(), settings.current()) == layout, (N, K)
        dense_rows(m, K, N, (1, 3, 4, 5, 8, 17, 32), f"N={N} K={K}")


def narrow_deep_outputs(m: Matrix, quick: bool) -> None:
    """1000 output columns (at most spread_columns, with a tail) over K = SPREAD_K (the SPREAD
    layout: K over 8 or 16 warps) and K = SHORT_K (DEEP: 8-bit weights in 8 K ranges, two per warp
    at 16-32 rows), at every row bucket."""
    N, rows_list = 1000, (1, 3, 8, 9, 16, 17, 32)
    for K in (SPREAD_K, SHORT_K):
        for bits in (4, 8):
            quantized_rows(m, K, N, mx.bfloat16, bits, rows_list, f"K={K}")
    dense_rows(m, SPREAD_K, N, rows_list, f"K={SPREAD_K}")


def qkv_rows(m: Matrix, x, Ns: tuple, bits: int, group: int, rows_list, label: str) -> None:
    """q/k/v: three int`bits` weights of Ns columns over x's K, with biases, concatenated into
    one call: each output against float64 and its rows against the same rows alone."""
    K, dtype = x.shape[1], x.dtype
    qkv = [
        mt.QuantizedWeight(*mx.quantize(m.arr((n, K), dtype, 0.05), group_size=group, bits=bits), group, bits)
        for n in Ns
    ]
    qkv_bias = [m.arr((n,), dtype) for n in Ns]
    alone = [[f32(o) for o in mt.fused_linear(x[r : r + 1], qkv, biases=qkv_bias)] for r in range(max(rows_list))]
    for rows in rows_list:
        outs = mt.fused_linear(x[:rows], qkv, biases=qkv_bias)
        xr = f64(x[:rows])
        for i, (y, qw, b) in enumerate(zip(outs, qkv, qkv_bias)):
            d = dequantize_exact(qw.w, qw.scales, qw.biases, group, bits)
            name = f"qkv[{i}] int{bits} g{group}{label} {dtype}"
            m.check(f"{name} rows={rows}", y, xr @ d.T + f64(b), xr, d, dtype)
            m.invariant(name, y, [a[i] for a in alone[:rows]], rows)


def wide_qkv(m: Matrix, quick: bool) -> None:
    """q/k/v whose concatenated columns make a one-tile grid of 2-4 blocks per SM (ONE_TILE_WIDE:
    Llama-3.1-8B's 4096 -> 4096 + 1024 + 1024), whose rings take the concatenated products' stage
    table, at row buckets on both sides of them."""
    K, Ns = 4096, (4096, 1024, 1024)
    assert column_layout(sum(Ns), K, False, sms(), settings.current()) == ONE_TILE_WIDE
    x = m.arr((32, K), mx.bfloat16)
    formats = ((4, 64), (8, 32)) if quick else ((4, 32), (4, 64), (4, 128), (8, 32), (8, 64), (8, 128))
    for bits, group in formats:
        qkv_rows(m, x, Ns, bits, group, (1, 5, 8, 9, 16, 17, 32), f" K={K}")


def quantized_fusions(m: Matrix, quick: bool) -> None:
    """Epilogues on quantized weights (the tensor-core schedule): SwiGLU, residual, bias + GELU
    and q/k/v (their boundaries inside 16-column blocks), against float64 and row by row against
    rows alone."""
    K, N = 512, 200
    for dtype in (mx.bfloat16, mx.float16):
        for bits, group in ((4, 64), (8, 32)) if quick else ((4, 32), (4, 64), (4, 128), (8, 32), (8, 64), (8, 128)):
            x = m.arr((32, K), dtype)
            qg = mx.quantize(m.arr((N, K), dtype, 0.05), group_size=group, bits=bits)
            qu = mx.quantize(m.arr((N, K), dtype, 0.05), group_size=group, bits=bits)
            wg, wu = (mt.QuantizedWeight(*q, group, bits) for q in (qg, qu))
            dg, du = (dequantize_exact(*q, group, bits) for q in (qg, qu))
            res = m.arr((32, N), dtype)
            bias = m.arr((N,), dtype)
            calls: dict[str, Callable] = {
                "swiglu": lambda xr, rr, wg=wg, wu=wu: mt.fused_linear(xr, [wg, wu], epilogue="swiglu"),
                "residual": lambda xr, rr, wg=wg: mt.fused_linear(xr, [wg], residual=rr),
                "bias_gelu": lambda xr, rr, wg=wg, b=bias: mt.fused_linear(xr, [wg], biases=[b], epilogue="gelu"),
            }
            qkv_rows(m, x, (40, 24, 24), bits, group, (1, 5, 8, 17, 32), "")
            for name, fn in calls.items():
                alone = [f32(fn(x[r : r + 1], res[r : r + 1])) for r in range(32)]
                for rows in (1, 5, 8, 17, 32):
                    xr = f64(x[:rows])
                    zg = xr @ dg.T
                    if name == "swiglu":
                        exact, slack = swiglu_reference(xr, dg, du)
                    elif name == "residual":
                        exact, slack = zg + f64(res[:rows]), 0.0
                    else:
                        z = zg + f64(bias)
                        exact = 0.5 * z * (1 + np.vectorize(math.erf)(z / np.sqrt(2)))
                        slack = 1e-6 * (np.abs(z) + 1)  # erff's error
                    y = fn(x[:rows], res[:rows])
                    m.check(f"{name} int{bits} g{group} {dtype} rows={rows}", y, exact, xr, dg, dtype, slack=slack)
                    m.invariant(f"{name} int{bits} g{group} {dtype}", y, alone, rows)


def rms_norm_fusions(m: Matrix, quick: bool) -> None:
    """RMSNorm fused into the projection (fused_linear(norm=)): a single 4-bit, 8-bit and dense
    product, the 4-bit SwiGLU gate/up and q/k/v, at 1-32 rows, against float64 of the kernel's
    formula - (bf16(x * g) @ W.T) / sqrt(mean(x^2) + eps), x * g rounded once as the kernel does
    (MLX's bf16 product) - with 1e-4 more for the f32 sums of squares and rsqrtf, and row by row
    against rows alone. Where the dispatch composes the norm instead (schedule.norm_pays: before
    SwiGLU), seen in the trace, against float64 of the product of stock's normalised x."""
    K, N, eps = 1024, 200, 1e-5
    x = m.arr((32, K), mx.bfloat16) * 3
    g = (m.arr((K,), mx.float32, 0.3) + 1).astype(mx.bfloat16)
    xg = f64(x * g)
    inv = 1.0 / np.sqrt((f64(x) ** 2).mean(axis=1, keepdims=True) + eps)
    quants = {bits: [mx.quantize(m.arr((N, K), mx.bfloat16, 0.05), group_size=64, bits=bits) for _ in range(3)]
              for bits in (4, 8)}  # fmt: skip
    deq = {bits: [dequantize_exact(*q, 64, bits) for q in qs] for bits, qs in quants.items()}
    wq = {bits: [mt.QuantizedWeight(*q, 64, bits) for q in qs] for bits, qs in quants.items()}
    dense = m.arr((N, K), mx.bfloat16, 0.05)
    cases = {  # name: (call, [float64 weight of each output])
        "int4": (lambda xr: [mt.fused_linear(xr, wq[4][:1], norm=(g, eps))], [deq[4][0]]),
        "int8": (lambda xr: [mt.fused_linear(xr, wq[8][:1], norm=(g, eps))], [deq[8][0]]),
        "bf16": (lambda xr: [mt.fused_linear(xr, [dense], norm=(g, eps))], [f64(dense)]),
        "qkv int4": (lambda xr: mt.fused_linear(xr, wq[4], norm=(g, eps)), deq[4]),
    }

    def normed(fn, rows):
        """(fn's outputs on `rows` rows, the float64 normalised x they were computed from)."""
        with mt.trace() as t:
            outs = fn(x[:rows])
        if any("_rms" in (r.kernel or "") for r in t.records):
            return outs, xg[:rows] * inv[:rows]
        return outs, f64(mx.fast.rms_norm(x[:rows], g, eps))

    for name, (fn, refs) in cases.items():
        alone = [[f32(o) for o in fn(x[r : r + 1])] for r in range(32)]
        for rows in (1, 5, 8, 17, 32):
            outs, xs = normed(fn, rows)
            for i, (y, w64) in enumerate(zip(outs, refs)):
                exact = xs @ w64.T
                m.check(f"rms_norm {name}[{i}] rows={rows}", y, exact, xs, w64, mx.bfloat16, slack=1e-4 * np.abs(exact))
                m.invariant(f"rms_norm {name}[{i}]", y, [a[i] for a in alone], rows)

    def gate_up(xr):
        return mt.fused_linear(xr, wq[4][:2], epilogue="swiglu", norm=(g, eps))

    alone = [f32(gate_up(x[r : r + 1])) for r in range(32)]
    for rows in (1, 5, 8, 17, 32):
        y, xs = normed(gate_up, rows)
        exact, slack = swiglu_reference(xs, deq[4][0], deq[4][1])
        m.check(
            f"rms_norm swiglu int4 rows={rows}",
            y,
            exact,
            xs,
            deq[4][0],
            mx.bfloat16,
            slack=slack + 1e-4 * np.abs(exact),
        )
        m.invariant("rms_norm swiglu int4", y, alone, rows)


def wide_swiglu(m: Matrix, quick: bool) -> None:
    """The SwiGLU gate/up over an output wide and deep enough for the several-tile layout (4-bit
    groups 64/128, whose 32-row kernel shares x between warps, lower/mma_xshare.py; 8-bit group
    128, whose rings take dynamic shared memory at every row bucket), and 4-bit group 64 over 6008
    columns and K = 2048 (ONE_TILE_WIDE, shared x at 32 rows too): against float64, and row by row
    against rows alone."""
    K, N = SHORT_K, narrow_columns(sms()) + 16  # the several-tile layout, and a partial block of columns
    cases = [(K, N, 4, 64), (K, N, 4, 128), (K, N, 8, 128), (2048, 6008, 4, 64)]
    for K, N, bits, group in cases:
        x = m.arr((32, K), mx.bfloat16)
        qg, qu = (mx.quantize(m.arr((N, K), mx.bfloat16, 0.05), group_size=group, bits=bits) for _ in range(2))
        wg, wu = (mt.QuantizedWeight(*q, group, bits) for q in (qg, qu))
        dg, du = (dequantize_exact(*q, group, bits) for q in (qg, qu))
        alone = [f32(mt.fused_linear(x[r : r + 1], [wg, wu], epilogue="swiglu")) for r in range(32)]
        for rows in (5, 16, 17, 32):
            xr = f64(x[:rows])
            exact, slack = swiglu_reference(xr, dg, du)
            y = mt.fused_linear(x[:rows], [wg, wu], epilogue="swiglu")
            label = f"swiglu wide N={N} K={K} int{bits} g{group}"
            m.check(f"{label} rows={rows}", y, exact, xr, dg, mx.bfloat16, slack=slack)
            m.invariant(label, y, alone, rows)


def dense_fusions(m: Matrix, quick: bool) -> None:
    """bf16 SwiGLU, q/k/v and residual at 1-70 rows (70: the tiled kernel), against float64."""
    dtype, K = mx.bfloat16, 512
    x = m.arr((70, K), dtype)
    g, u = m.arr((200, K), dtype, 0.05), m.arr((200, K), dtype, 0.05)
    for rows in (1, 4, 17, 70):
        xr = f64(x[:rows])
        got = mt.fused_linear(x[:rows], [g, u], epilogue="swiglu")
        zg, zu = xr @ f64(g).T, xr @ f64(u).T
        # silu(gate) * up carries the gate's and up's errors into the product: 1% of its largest
        m.check(
            f"swiglu rows={rows}",
            got,
            zg / (1 + np.exp(-zg)) * zu,
            xr,
            f64(g),
            dtype,
            slack=1e-2 * np.abs(zg * zu).max(),
        )
        q, k, v = mt.fused_linear(x[:rows], [g, u[:64], u[64:128]])
        for name, out, w in (("q", q, g), ("k", k, u[:64]), ("v", v, u[64:128])):
            m.check(f"qkv.{name} rows={rows}", out, xr @ f64(w).T, xr, f64(w), dtype)
        res = m.arr((rows, 200), dtype)
        got = mt.fused_linear(x[:rows], [g], residual=res)
        m.check(f"residual rows={rows}", got, xr @ f64(g).T + f64(res), xr, f64(g), dtype)


def qkv_3d(m: Matrix, quick: bool) -> None:
    """q/k/v of a 3-D x (the outputs sliced straight to [batch, rows, N]): the 2-D call's bits."""
    K = 512
    x = m.arr((12, K), mx.bfloat16)
    ws = [m.arr((n, K), mx.bfloat16, 0.05) for n in (200, 64, 64)]
    m.cases += 1
    flat = mt.fused_linear(x, ws)
    for name, a, b in zip("qkv", mt.fused_linear(x.reshape(2, 6, K), ws), flat):
        if a.shape != (2, 6, b.shape[-1]) or not np.array_equal(f32(a).reshape(b.shape), f32(b)):
            m.failures.append(f"qkv.{name} of a 3-D x: shape {a.shape}, not the 2-D call's values")


def _classes(v: np.ndarray) -> np.ndarray:
    """0 finite, 1 NaN, 2 +Inf, 3 -Inf."""
    return np.select([np.isnan(v), np.isposinf(v), np.isneginf(v)], [1, 2, 3], 0)


def _poisoned_x(m: Matrix, K: int, dtype) -> mx.array:
    """32 rows of x: row 0 +Inf at k 5 (where column 3's weight is planted 0), row 1 +Inf and
    -Inf, row 3 a NaN, rows 4 and 20 -Inf, row 31 +Inf; the others finite."""
    x = np.array(m.arr((32, K), dtype).astype(mx.float32))
    x[0, 5] = x[1, 7] = x[31, 300] = np.inf
    x[1, K // 2 + 1] = x[4, K - 1] = x[20, 64] = -np.inf
    x[3, 3] = np.nan
    return mx.array(x).astype(dtype)


def _zero_weight(q: tuple, bits: int) -> tuple:
    """An mx.quantize triple with column 3's weight at k 5 exactly 0 (q = 0 there, its group's bias 0)."""
    wq = np.array(q[0])
    wq[3, 5 * bits // 32] &= np.uint32(~(((1 << bits) - 1) << (5 * bits % 32)) & 0xFFFFFFFF)
    at = mx.arange(q[2].size).reshape(q[2].shape) == q[2].shape[1] * 3
    return mx.array(wq), q[1], mx.where(at, mx.zeros_like(q[2]), q[2])


def nonfinite_rows(m: Matrix, quick: bool) -> None:
    """Rows of x holding a NaN, +Inf or -Inf (one both infinities): every output in the class of
    float64 over the dequantized weights - NaN where a weight is exactly 0 (planted) or
    infinities of both signs meet, else +-Inf by the sign of x * w - the finite rows within the
    tolerance, each row the bits of that row alone: int4 and int8 group 64 at 1, 5, 16 and 32
    rows, and the SwiGLU gate/up with biases at 5 and 32; bf16 (and f16 in the full matrix)."""
    K, N = 512, 200
    for dtype in (mx.bfloat16,) if quick else (mx.bfloat16, mx.float16):
        x = _poisoned_x(m, K, dtype)
        calls = []
        for bits in (4, 8):
            q = _zero_weight(mx.quantize(m.arr((N, K), dtype, 0.05), group_size=64, bits=bits), bits)
            fn = partial(quantized, wq=q[0], s=q[1], bq=q[2], group=64, bits=bits)
            calls.append((f"int{bits} g64", fn, [dequantize_exact(*q, 64, bits)], [0.0], (1, 5, 16, 32)))
        qs = [_zero_weight(mx.quantize(m.arr((N, K), dtype, 0.05), group_size=64, bits=4), 4) for _ in range(2)]
        ws = [mt.QuantizedWeight(*q, 64, 4) for q in qs]
        bs = [m.arr((N,), dtype) for _ in range(2)]
        fn = partial(mt.fused_linear, weights=ws, biases=bs, epilogue="swiglu")
        calls.append(
            ("swiglu+bias int4 g64", fn, [dequantize_exact(*q, 64, 4) for q in qs], [f64(b) for b in bs], (5, 32))
        )
        for label, fn, ws64, bs64, rows_list in calls:
            alone = [f32(fn(x[r : r + 1])).view(np.uint32) for r in range(32)]
            for rows in rows_list:
                m.cases += 1
                name = f"{label} {dtype} rows={rows} with Inf / NaN in x"
                xr = f64(x[:rows])
                with np.errstate(all="ignore"):
                    z = [(xr[:, None, :] * w[None]).sum(-1) + b for w, b in zip(ws64, bs64)]
                    want = z[0] if len(z) == 1 else z[0] * (1.0 / (1.0 + np.exp(-z[0]))) * z[1]
                y = f64(fn(x[:rows]))
                wrong = np.argwhere(_classes(y) != _classes(want))
                if len(wrong):
                    at = tuple(wrong[0])
                    m.failures.append(
                        f"{name}: {len(wrong)} outputs of the wrong class, {list(at)} {y[at]} vs {want[at]}"
                    )
                ok = np.isfinite(xr).all(axis=1)
                if len(z) == 1:
                    tol = ULP[dtype] * np.abs(want[ok]) + (K + 2) * 2.0**-24 * (np.abs(xr[ok]) @ np.abs(ws64[0]).T)
                else:  # swiglu_reference's slack, of the sums with their biases
                    acc = [(K + 2) * 2.0**-24 * (np.abs(xr[ok]) @ np.abs(w).T) for w in ws64]
                    silu = z[0][ok] / (1 + np.exp(-z[0][ok]))
                    slack = 1.1 * np.abs(z[1][ok]) * acc[0] + np.abs(silu) * acc[1] + 2.0**-20 * np.abs(want[ok])
                    tol = ULP[dtype] * np.abs(want[ok]) + slack
                if (np.abs(y[ok] - want[ok]) > tol).any():
                    m.failures.append(f"{name}: a finite row off float64 by {np.abs(y[ok] - want[ok]).max():.3g}")
                bits_ = f32(fn(x[:rows])).view(np.uint32)
                bad = [r for r in range(rows) if not np.array_equal(bits_[r], alone[r][0])]
                if bad:
                    m.failures.append(f"row invariance: {name} rows {bad[:5]}")


SECTIONS: dict[str, Callable[[Matrix, bool], None]] = {
    f.__name__: f
    for f in (
        linear,
        quantized_formats,
        odd_group_count,
        wide_outputs,
        one_tile_dense,
        narrow_deep_outputs,
        quantized_fusions,
        wide_qkv,
        rms_norm_fusions,
        wide_swiglu,
        dense_fusions,
        qkv_3d,
        affine_widths,
        microscaling,
        format_fusions,
        nonfinite_rows,
    )
}


# Cases each section checks (quick, full): what tests/gpu asserts it ran; 627 and 1543 in all.
CASES = {
    "linear": (35, 174),
    "quantized_formats": (30, 180),
    "affine_widths": (35, 240),
    "microscaling": (42, 130),
    "format_fusions": (80, 80),
    "odd_group_count": (16, 16),
    "wide_outputs": (96, 96),
    "one_tile_dense": (14, 14),
    "narrow_deep_outputs": (35, 35),
    "quantized_fusions": (120, 360),
    "wide_qkv": (42, 126),
    "rms_norm_fusions": (35, 35),
    "wide_swiglu": (16, 16),
    "dense_fusions": (20, 20),
    "qkv_3d": (1, 1),
    "nonfinite_rows": (10, 20),
}


def gradients(m: Matrix) -> list[str]:
    """mx.grad through the CUDA path (custom vjp: the stock composition's; needs
    MLX_METILE_CUDA_GRADIENTS=1) against mx.grad of the stock composition itself, with respect to
    x, the scales, a dense weight, a bias and the residual of a SwiGLU gate/up with a residual;
    within 1e-4 of the largest gradient (f32 sums of both sides in other orders)."""
    K, N, rows = 256, 96, 5
    x, res, cot = m.arr((rows, K), mx.float32), m.arr((rows, N), mx.float32), m.arr((rows, N), mx.float32)
    g = mt.QuantizedWeight(*mx.quantize(m.arr((N, K), mx.float32, 0.05), group_size=64, bits=4), 64, 4)
    u, b = m.arr((N, K), mx.float32, 0.05), m.arr((N,), mx.float32)

    def ours(x, s, u, b, res):
        qg = mt.QuantizedWeight(g.w, s, g.biases, 64, 4)
        y = mt.fused_linear(x, [qg, u], biases=[None, b], epilogue="swiglu", residual=res)
        return (y * cot).sum()

    def stock(x, s, u, b, res):
        zg = mx.quantized_matmul(x, g.w, s, g.biases, transpose=True, group_size=64, bits=4)
        zu = x @ u.T + b
        return ((zg * mx.sigmoid(zg) * zu + res) * cot).sum()

    args = (x, g.scales, u, b, res)
    got = mx.grad(ours, argnums=tuple(range(5)))(*args)
    want = mx.grad(stock, argnums=tuple(range(5)))(*args)
    names = ("x", "scales", "dense weight", "bias", "residual")
    for name, a, w in zip(names, got, want):
        m.cases += 1
        err, scale = float(mx.abs(a - w).max()), float(mx.abs(w).max())
        if not err <= 1e-4 * scale:
            m.failures.append(f"grad wrt {name}: max err {err:.3g} of max {scale:.3g}")
    return list(names)
