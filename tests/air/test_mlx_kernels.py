"""Apple-compiled MLX kernels (mlx-metal 0.32.4's mlx.metallib) run on the CPU through the AIR
executor, called with the buffers, constants and grids MLX's host code passes them, and compared
with numpy float64 references and with MLX's own CPU results.

Host code read: ml-explore/mlx mlx/backend/metal/quantized.cpp (qmv), matmul.cpp
(steel_matmul_regular_axpby), reduce.cpp (row_reduce_simple). The tag v0.32.4 is not in the mirror
read here (it holds MLX up to 0.32.2-dev), so each kernel's buffer order is also checked against the
argument names the metallib's own metadata gives it, and structs are packed from its layout.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from tests.helpers import SIGNIFICAND, f64, rand

TYPE_STRING = {mx.float32: "float", mx.float16: "float16_t", mx.bfloat16: "bfloat16_t"}  # get_type_string
TYPE_NAME = {mx.float32: "float32", mx.float16: "float16"}  # type_to_name


def host(a: mx.array) -> np.ndarray:
    """An MLX array's bytes as a numpy array (bfloat16 as its uint16 bits)."""
    return np.array(a.view(mx.uint16)) if a.dtype == mx.bfloat16 else np.array(a)


def empty(shape, dtype) -> np.ndarray:
    np_type = {mx.float32: np.float32, mx.float16: np.float16, mx.bfloat16: np.uint16}[dtype]
    return np.zeros(shape, np_type)


def value(y: np.ndarray, dtype) -> np.ndarray:
    if dtype == mx.bfloat16:
        return (y.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return y.astype(np.float64)


def buffer_names(fn) -> list[tuple[int, str]]:
    return [(p.index, p.name) for p in fn.buffers]


# --------------------------------------------------------------------- qmv --
def _quantized(n: int, k: int, dtype, seed: int):
    w = rand((n, k), mx.float32, seed).astype(dtype)
    wq, scales, biases = mx.quantize(w, group_size=64, bits=4)
    q = np.stack([(np.array(wq) >> (4 * i)) & 15 for i in range(8)], -1).reshape(n, k)  # 8 nibbles per uint32
    s, b = f64(scales).repeat(64, 1), f64(biases).repeat(64, 1)
    return wq, scales, biases, q.astype(np.float64), s, b


def _qmv_bound(x: np.ndarray, q, s, b, exact, dtype) -> np.ndarray:
    # MLX's qmv sums s * (x . q) + b * sum(x) per group in f32: K roundings of terms of |x| (|s q| + |b|),
    # then one rounding of the output to its dtype
    k = x.shape[-1]
    mag = np.abs(x) @ (np.abs(s * q) + np.abs(b)).T
    return k * 2.0**-24 * mag + 2.0 ** -SIGNIFICAND[dtype] * np.abs(exact) + 1e-30


@pytest.mark.parametrize(
    "dtype, variant, n, k",
    [
        (mx.float32, "fast", 64, 1024),
        (mx.float16, "fast", 64, 1024),
        (mx.bfloat16, "fast", 64, 1024),
        (mx.float16, "plain", 60, 320),  # N % 8 and K % 512: the plain qmv
        (mx.float16, "quad", 128, 128),  # K of 64 or 128: qmv_quad (quad-group sums)
    ],
    ids=["f32-fast", "f16-fast", "bf16-fast", "f16-ragged", "f16-quad"],
)
def test_affine_qmv_4bit_group64(mlx_library, dtype, variant, n, k):
    m = 3  # rows of x: qmv's grid.x (qmv_wide takes M >= 2 only on gen-15+ devices)
    t = TYPE_STRING[dtype]
    if variant == "quad":
        name, bn, threadgroup = f"affine_qmv_quad_{t}_gs_64_b_4_d_{k}_batch_0", 64, (32, 1, 1)  # 8 quads x 8 results
    else:
        fast = "_fast" if variant == "fast" else ""
        name, bn, threadgroup = f"affine_qmv{fast}_{t}_gs_64_b_4_batch_0_pr_0_hgs_0_r_4", 8, (32, 2, 1)  # 2 x 4 results
    fn = mlx_library.function(name)
    assert buffer_names(fn)[:7] == [
        (0, "w"),
        (1, "scales"),
        (2, "biases"),
        (3, "x"),
        (4, "y"),
        (5, "in_vec_size"),
        (6, "out_vec_size"),
    ]
    wq, scales, biases, q, s, b = _quantized(n, k, dtype, seed=1)
    x = rand((m, k), dtype, seed=2)
    y = empty((m, n), dtype)
    fn.dispatch_threadgroups(
        grid=(m, (n + bn - 1) // bn, 1),
        threadgroup=threadgroup,
        buffers=[host(wq), host(scales), host(biases), host(x), y, np.int32(k), np.int32(n)],
    )
    got = value(y, dtype)
    xs = f64(x)
    exact = xs @ (s * q + b).T
    bound = _qmv_bound(xs, q, s, b, exact, dtype)
    assert np.all(np.abs(got - exact) <= bound), np.abs(got - exact).max()
    # MLX's CPU op on the same values in float32 (its half paths accumulate in the half type)
    f32 = [a.astype(mx.float32) for a in (x, scales, biases)]
    stock = f64(mx.quantized_matmul(f32[0], wq, f32[1], f32[2], transpose=True, group_size=64, bits=4))
    stock_bound = _qmv_bound(xs, q, s, b, exact, mx.float32)
    assert np.all(np.abs(got - stock) <= bound + stock_bound)


# -------------------------------------------------------------------- GEMM --
def _gemm(mlx_library, dtype, transpose_b, batch, m, n, k, tile):
    bm, bn, bk, wm, wn = tile
    trans = "n" + ("t" if transpose_b else "n")
    name = f"steel_gemm_fused_{trans}_{TYPE_NAME[dtype]}_{TYPE_NAME[dtype]}_bm{bm}_bn{bn}_bk{bk}_wm{wm}_wn{wn}"
    constants = {
        "has_batch": False,  # batch_shape has one dimension
        "use_out_source": False,
        "do_axpby": False,
        "align_M": m % bm == 0,
        "align_N": n % bn == 0,
        "align_K": k % bk == 0,
    }
    fn = mlx_library.function(name, constants)
    assert buffer_names(fn) == [
        (0, "A"),
        (1, "B"),
        (2, "C"),
        (3, "D"),
        (4, "params"),
        (5, "addmm_params"),
        (6, "batch_shape"),
        (7, "batch_strides"),
    ]
    a = rand((batch, m, k), dtype, seed=3)
    b = rand((batch, n, k) if transpose_b else (batch, k, n), dtype, seed=4)
    d = empty((batch, m, n), dtype)
    tn, tm = (n + bn - 1) // bn, (m + bm - 1) // bm
    params = fn.pack(
        4,
        M=m,
        N=n,
        K=k,
        lda=k,
        ldb=k if transpose_b else n,
        ldd=n,
        tiles_n=tn,
        tiles_m=tm,
        batch_stride_a=m * k,
        batch_stride_b=n * k,
        batch_stride_d=m * n,
        swizzle_log=0,
        gemm_k_iterations_aligned=k // bk,
        batch_ndim=1,
    )
    fn.dispatch_threadgroups(
        grid=(tn, tm, batch), threadgroup=(32, wn, wm), buffers=[host(a), host(b), None, d, params]
    )
    bt = mx.swapaxes(b, -1, -2) if transpose_b else b
    exact = f64(a) @ f64(bt)
    # f32 accumulation over K (K * 2**-24 * sum |a||b|) and one rounding of the output
    accumulation = k * 2.0**-24 * (np.abs(f64(a)) @ np.abs(f64(bt)))
    bound = accumulation + 2.0 ** -SIGNIFICAND[dtype] * np.abs(exact) + 1e-30
    got = value(d, dtype)
    assert np.all(np.abs(got - exact) <= bound), np.abs(got - exact).max()
    stock = f64(mx.matmul(a.astype(mx.float32), bt.astype(mx.float32)))  # MLX's CPU matmul, same values
    assert np.all(np.abs(got - stock) <= bound + accumulation)


@pytest.mark.parametrize("m, n, k, batch", [(70, 90, 40, 1), (64, 128, 32, 2)], ids=["ragged", "aligned-batched"])
def test_steel_gemm_f32_nn(mlx_library, m, n, k, batch):
    # a small device ('g'/'p'), float32 nn: the default tile 64x64x16, 2x2 simdgroups
    _gemm(mlx_library, mx.float32, False, batch, m, n, k, (64, 64, 16, 2, 2))


def test_steel_gemm_f16_nt(mlx_library):
    # a small device, nt: 64x32x32, 2x2 simdgroups
    _gemm(mlx_library, mx.float16, True, 1, 70, 90, 40, (64, 32, 32, 2, 2))


# --------------------------------------------------------------- reduction --
@pytest.mark.parametrize("rows, row_size", [(40, 300), (36, 1000)], ids=["one-simdgroup", "four-simdgroups"])
def test_row_reduce_simple_sum_f32(mlx_library, rows, row_size):
    fn = mlx_library.function("row_reduce_simple_sumfloat32")
    assert buffer_names(fn) == [
        (0, "in"),
        (1, "out"),
        (2, "reduction_size"),
        (3, "out_size"),
    ]
    x = rand((rows, row_size), mx.float32, seed=5)
    out = np.zeros(rows, np.float32)
    tg = 32 if row_size <= 512 else 128  # threadgroup_size_from_row_size
    writes = 4  # REDUCE_N_WRITES
    fn.dispatch_threads(
        grid=(tg, (rows + writes - 1) // writes, 1),
        threadgroup=(tg, 1, 1),
        buffers=[host(x), out, np.uint64(row_size), np.int64(rows)],
    )
    xs = f64(x)
    exact = xs.sum(1)
    bound = row_size * 2.0**-24 * np.abs(xs).sum(1)  # f32 sums of row_size terms
    assert np.all(np.abs(out - exact) <= bound)
    stock = f64(mx.sum(x, axis=1))  # MLX's CPU reduction
    assert np.all(np.abs(out - stock) <= 2 * bound)
