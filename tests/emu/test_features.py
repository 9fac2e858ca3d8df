"""The emulator runs hand-written MSL kernels and matches numpy."""

import numpy as np
import pytest

from mlx_metile.emu import Kernel

from . import kernels_src as K
from .bits import bfloat16_to_float, round_bf16, to_bfloat16_bits


@pytest.mark.parametrize("m,n,k", [(16, 16, 16), (17, 33, 45), (1, 5, 3)])
@pytest.mark.parametrize("order", ["forward", "reversed", "shuffled"])
def test_tiled_gemm_with_threadgroup_memory_and_tails(m, n, k, order, rng):
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.full((m, n), np.nan, np.float32)
    kern = Kernel(K.TILED_GEMM, "tiled_gemm")
    stats = kern.dispatch_threadgroups(
        (-(-n // 16), -(-m // 16)), (16, 16), [a, b, c, np.array([m, n, k, 0], np.uint32)], order=order
    )
    # f32 FMA accumulation in k order vs numpy's float64 reference: 1e-5 relative to sqrt(k)-scaled sums
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5 * np.sqrt(k))
    assert stats.bytes_written[2] == c.nbytes
    assert stats.bytes_written[0] == 0 and stats.bytes_read[0] > 0


def test_gemm_256_after_a_first_dispatch_of_one_threadgroup(rng):
    """A 256^3 GEMM on 256 threadgroups, after a dispatch of one threadgroup made the fiber pool:
    a second dispatch of the same kernel reuses it and still computes every tile."""
    n = 256
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.zeros((n, n), np.float32)
    kern = Kernel(K.TILED_GEMM, "tiled_gemm")
    mnk = np.array([n, n, n, 0], np.uint32)
    kern.dispatch_threadgroups((1, 1), (16, 16), [a, b, c, mnk])
    np.testing.assert_allclose(c[:16, :16], a[:16].astype(np.float64) @ b[:, :16], rtol=1e-4, atol=1e-4)
    assert not c[16:].any() and not c[:, 16:].any()  # one threadgroup writes its tile alone
    kern.dispatch_threadgroups((n // 16, n // 16), (16, 16), [a, b, c, mnk])
    # f32 FMA accumulation over K=256 against numpy's float64 product
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype,kernel", [(np.float32, "sg_gemm_f32"), (np.float16, "sg_gemm_f16")])
def test_simdgroup_matrix_gemm(dtype, kernel, rng):
    m, n, k = 16, 24, 32
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    c = np.zeros((m, n), np.float32)
    Kernel(K.SIMDGROUP_GEMM, kernel).dispatch_threadgroups((n // 8, m // 8), 32, [a, b, c, np.array([n, k], np.uint32)])
    # inputs are exact in f32; products accumulate in f32
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_simdgroup_load_transposed(rng):
    a = rng.standard_normal((8, 8), dtype=np.float32)
    c = np.zeros((8, 8), np.float32)
    Kernel(K.SIMDGROUP_GEMM, "sg_transpose_load").dispatch_threadgroups(1, 32, [a, c])
    np.testing.assert_array_equal(c, a.T)


@pytest.mark.parametrize("threads", [32, 45, 96, 7])
def test_row_reduction_with_partial_last_simdgroup(threads, rng):
    rows, n = 5, 300
    x = rng.standard_normal((rows, n), dtype=np.float32)
    sums = np.zeros(rows, np.float32)
    maxes = np.zeros(rows, np.float32)
    Kernel(K.ROW_REDUCE, "row_reduce").dispatch_threadgroups(rows, threads, [x, sums, maxes, n])
    np.testing.assert_array_equal(maxes, x.max(axis=1))
    np.testing.assert_allclose(sums, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-4)


def test_simd_shuffles_and_broadcast():
    x = np.arange(64, dtype=np.int32) * 3 - 50
    out = np.zeros((64, 6), np.int32)
    Kernel(K.SHUFFLES, "shuffles").dispatch_threadgroups(1, 64, [x, out])
    lanes = np.arange(32)
    for g in range(2):
        v = x[g * 32 : (g + 1) * 32]
        o = out[g * 32 : (g + 1) * 32]
        np.testing.assert_array_equal(o[:, 0], v[(lanes * 7) % 32])
        np.testing.assert_array_equal(o[:, 1], np.where(lanes + 3 < 32, v[np.minimum(lanes + 3, 31)], v))
        np.testing.assert_array_equal(o[:, 2], np.where(lanes >= 5, v[np.maximum(lanes - 5, 0)], v))
        np.testing.assert_array_equal(o[:, 3], v[lanes ^ 9])
        np.testing.assert_array_equal(o[:, 4], np.full(32, v[4]))
        np.testing.assert_array_equal(o[:, 5], np.full(32, v.min()))


def test_half_and_bfloat_round_after_every_operation_bit_exactly(rng):
    n = 4096
    a = (rng.standard_normal(n) * 4).astype(np.float16)
    b = (rng.standard_normal(n) * 4).astype(np.float16)
    c_bits = to_bfloat16_bits(rng.standard_normal(n).astype(np.float32) * 100)
    d_bits = to_bfloat16_bits(rng.standard_normal(n).astype(np.float32) * 100)
    h_out = np.zeros((n, 3), np.float16)
    b_out = np.zeros((n, 3), np.uint16)
    f_out = np.zeros(n, np.float32)
    Kernel(K.HALF_BFLOAT_OPS, "low_precision").dispatch_threads(n, 256, [a, b, h_out, c_bits, d_bits, b_out, f_out])
    # numpy float16 ops round each result to float16
    np.testing.assert_array_equal(h_out[:, 0].view(np.uint16), (a * b + a).view(np.uint16))
    np.testing.assert_array_equal(h_out[:, 1].view(np.uint16), ((a - b) * (a + b)).view(np.uint16))
    np.testing.assert_array_equal(h_out[:, 2], (a.astype(np.float32) * 3).astype(np.float16))
    u, v = bfloat16_to_float(c_bits), bfloat16_to_float(d_bits)
    np.testing.assert_array_equal(b_out[:, 0], to_bfloat16_bits(round_bf16(u * v) + u))
    np.testing.assert_array_equal(b_out[:, 1], to_bfloat16_bits(round_bf16(u - v) * round_bf16(u + v)))
    np.testing.assert_array_equal(b_out[:, 2], to_bfloat16_bits(u / np.float32(3)))
    h4x, h4w = a * b, b * b
    np.testing.assert_array_equal(f_out, (h4x + h4w).astype(np.float32))


def test_vectors_swizzles_constructors_and_math(rng):
    a = rng.standard_normal((6, 4), dtype=np.float32)
    a[0, 0] = 150.0
    out = np.zeros((6, 4), np.float32)
    pos = np.zeros((6, 2), np.uint32)
    Kernel(K.VECTORS, "vectors").dispatch_threads((3, 2), (2, 2), [a, out, pos])
    s = np.stack([a[:, 0] + 1, a[:, 1] + 1, a[:, 2] + 1], axis=1)
    expect = np.stack(
        [s[:, 2] + 1, s[:, 1] + 0.5, s[:, 0], (a[:, 0] * a[:, 2] + a[:, 1] * a[:, 3]) + np.clip(a[:, 3], 0, 1)], 1
    )
    expect[a[:, 0] > 100, 3] = -1
    np.testing.assert_allclose(out, expect, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(pos, [[x, y] for y in range(2) for x in range(3)])


def test_dispatch_threads_reports_partial_threadgroup_size():
    src = """
    kernel void sizes(device uint* out [[buffer(0)]], uint2 gid [[thread_position_in_grid]],
                      uint2 tpt [[threads_per_threadgroup]], uint2 grid [[threads_per_grid]]) {
      out[(gid.y * grid.x + gid.x) * 2 + 0] = tpt.x;
      out[(gid.y * grid.x + gid.x) * 2 + 1] = tpt.y;
    }"""
    out = np.zeros((5, 7, 2), np.uint32)
    stats = Kernel(src, "sizes").dispatch_threads((7, 5), (4, 4), [out])
    assert stats.threads == 35
    np.testing.assert_array_equal(out[:, :4, 0], 4)
    np.testing.assert_array_equal(out[:, 4:, 0], 3)
    np.testing.assert_array_equal(out[:4, :, 1], 4)
    np.testing.assert_array_equal(out[4:, :, 1], 1)


def test_dynamic_threadgroup_memory_and_missing_barrier_shows_with_reversed_order():
    src = """
    kernel void rev(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                    threadgroup float* tmp [[threadgroup(0)]], uint i [[thread_position_in_threadgroup]],
                    uint n [[threads_per_threadgroup]]) {
      tmp[i] = x[i];
      BARRIER
      y[i] = tmp[n - 1 - i];
    }"""
    x = np.arange(64, dtype=np.float32)
    good = Kernel(src.replace("BARRIER", "threadgroup_barrier(mem_flags::mem_threadgroup);"), "rev")
    for order in ["forward", "reversed", "shuffled"]:
        y = np.zeros(64, np.float32)
        good.dispatch_threadgroups(1, 64, [x, y], [64 * 4], order=order)
        np.testing.assert_array_equal(y, x[::-1])
    # Without the barrier, running the threads in reversed order reads memory not yet written.
    from mlx_metile.emu import KernelFault

    bad = Kernel(src.replace("BARRIER", ""), "rev")
    with pytest.raises(KernelFault, match="never written"):
        bad.dispatch_threadgroups(1, 64, [x, np.zeros(64, np.float32)], [64 * 4], order="reversed")


FMAX_FMIN = """
#include <metal_stdlib>
using namespace metal;
kernel void fmax_fmin(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
                      device float* out [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  out[2 * i] = fmax(a[i], b[i]);
  out[2 * i + 1] = fmin(a[i], b[i]);
}
"""


def test_fmax_and_fmin_return_the_other_argument_of_a_nan():
    """Metal's fmax / fmin: where one argument is a NaN, the other; both NaN, a NaN (numpy's fmax)."""
    a = np.array([np.nan, 1.0, np.nan, -2.0, 3.0], np.float32)
    b = np.array([1.0, np.nan, np.nan, 5.0, -4.0], np.float32)
    out = np.zeros(10, np.float32)
    Kernel(FMAX_FMIN, "fmax_fmin").dispatch_threadgroups(1, 5, [a, b, out])
    np.testing.assert_array_equal(out[0::2], np.fmax(a, b))
    np.testing.assert_array_equal(out[1::2], np.fmin(a, b))
