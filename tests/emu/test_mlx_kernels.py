"""MLX's own Metal kernels - its steel NAX GEMM, its affine quantized NAX matmul and its affine qmv -
compiled unmodified from the mlx-metal wheel's headers and instantiated as MLX's .metal files do,
run in the emulator against numpy float64.

Every kernel is compiled once per module (a fixture per instantiation); the shapes are small but
cover each tile's edges: M, N and K that are not multiples of the tile."""

import numpy as np
import pytest

from mlx_metile.emu import Kernel
from mlx_metile.emu import mlx_kernels as H


def bound(ref: np.ndarray, mag: np.ndarray, dtype: str, k: int) -> np.ndarray:
    """|result - ref| allowed: one rounding to the output type (half an ulp, 2^-p relative) plus
    f32 accumulation of k products (k * 2^-24 of the sum of their magnitudes, with margin 4)."""
    return 2.0 ** -H.significand_bits(dtype) * np.abs(ref) + 4 * k * 2.0**-24 * mag


# ---------------------------------------------------------------- steel NAX GEMM (gemm_nax.h)
# (transposes, dtype, tile, m, n, k): tiles MLX instantiates (steel_gemm_fused_nax.metal);
# shapes aligned, with tails in M / N / K, and with a swizzled grid (more than 3 row tiles).
GEMMS = [
    ((False, False), "float16", H.GemmTile(64, 64, 256, 2, 2), 128, 64, 512),
    ((False, False), "float16", H.GemmTile(64, 64, 256, 2, 2), 100, 70, 300),
    ((False, True), "bfloat16", H.GemmTile(64, 128, 64, 2, 4), 70, 150, 128),
    ((True, False), "bfloat16", H.GemmTile(64, 64, 256, 2, 2), 260, 40, 200),
    ((True, True), "float16", H.GemmTile(128, 128, 64, 4, 4), 136, 130, 96),
]


GEMM_AXPBY = ((False, False), "float16", H.GemmTile(64, 64, 256, 2, 2), 64, 96, 256)


def _gemm_id(case) -> str:
    (ta, tb), dtype, t, m, n, k = case
    return f"{'t' if ta else 'n'}{'t' if tb else 'n'}-{dtype}-bm{t.bm}bn{t.bn}bk{t.bk}-{m}x{n}x{k}"


@pytest.fixture(scope="module")
def gemm_kernels(mlx_metal):
    include = H.include_dir(mlx_metal)
    kernels = {}
    for case in GEMMS + [GEMM_AXPBY]:
        (ta, tb), dtype, t, m, n, k = case
        consts = H.gemm_constants(m, n, k, t, case is GEMM_AXPBY)
        kernels[_gemm_id(case)] = Kernel(
            H.gemm_source(ta, tb, dtype, t),
            H.gemm_name(ta, tb, dtype, t),
            include_dirs=[include],
            function_constants=consts,
        )
    return kernels


def _operands(rng, ta, tb, dtype, m, n, k):
    a = H.to_device(rng.standard_normal((k, m) if ta else (m, k)), dtype)
    b = H.to_device(rng.standard_normal((n, k) if tb else (k, n)), dtype)
    af, bf = H.from_device(a, dtype), H.from_device(b, dtype)
    return a, b, (af.T if ta else af), (bf.T if tb else bf)


@pytest.mark.parametrize("case", GEMMS, ids=[_gemm_id(c) for c in GEMMS])
def test_steel_nax_gemm(gemm_kernels, case, rng):
    (ta, tb), dtype, t, m, n, k = case
    a, b, a64, b64 = _operands(rng, ta, tb, dtype, m, n, k)
    d = H.to_device(np.full((m, n), np.nan), dtype)
    stats = H.run_gemm(gemm_kernels[_gemm_id(case)], a, b, d, m, n, k, ta, tb, t)
    ref = a64 @ b64
    err = np.abs(H.from_device(d, dtype) - ref)
    assert (err <= bound(ref, np.abs(a64) @ np.abs(b64), dtype, k)).all(), f"worst error {err.max():.3g}"
    assert stats.bytes_written[3] == d.nbytes  # every output element stored once, nothing past the edges


def test_steel_nax_gemm_aligned_reads_each_tile_once_per_simdgroup_column(gemm_kernels, rng):
    """The dense NAX GEMM reads A and B from device memory straight into fragments: each of the WN
    SIMD groups sharing a row of tiles reads its rows of A (and each of the WM sharing a column
    its columns of B), once per tile of output."""
    case = GEMMS[0]
    (ta, tb), dtype, t, m, n, k = case
    a, b, _, _ = _operands(rng, ta, tb, dtype, m, n, k)
    d = H.to_device(np.zeros((m, n)), dtype)
    stats = H.run_gemm(gemm_kernels[_gemm_id(case)], a, b, d, m, n, k, ta, tb, t)
    assert stats.bytes_read[0] == a.nbytes * (n // t.bn) * t.wn
    assert stats.bytes_read[1] == b.nbytes * (m // t.bm) * t.wm


def test_steel_nax_gemm_axpby_epilogue(gemm_kernels, rng):
    """use_out_source / do_axpby: D = alpha * A @ B + beta * C, C read in the epilogue."""
    (ta, tb), dtype, t, m, n, k = GEMM_AXPBY
    a, b, a64, b64 = _operands(rng, ta, tb, dtype, m, n, k)
    c = H.to_device(rng.standard_normal((m, n)), dtype)
    d = H.to_device(np.full((m, n), np.nan), dtype)
    H.run_gemm(gemm_kernels[_gemm_id(GEMM_AXPBY)], a, b, d, m, n, k, ta, tb, t, c=c, alpha=0.5, beta=-2.0)
    ref = 0.5 * (a64 @ b64) - 2.0 * H.from_device(c, dtype)
    mag = 0.5 * (np.abs(a64) @ np.abs(b64)) + 2.0 * np.abs(H.from_device(c, dtype))
    err = np.abs(H.from_device(d, dtype) - ref)
    assert (err <= bound(ref, mag, dtype, k + 2)).all(), f"worst error {err.max():.3g}"


# ------------------------------------------------- affine quantized NAX matmul (quantized_nax.h)
# (bits, dtype, bm, aligned_N, m, n, k): group 64; bm 32 and 64 as qmm_nax picks them (M <= 32);
# aligned_N as MLX sets it (N % 64 == 0); K a multiple of 64 as MLX requires for the NAX path.
QMMS = [
    (4, "float16", 64, True, 100, 128, 256),
    (4, "bfloat16", 32, False, 17, 100, 192),
    (8, "float16", 32, True, 32, 64, 128),
    (8, "bfloat16", 64, False, 65, 90, 320),
]


def _qmm_id(case) -> str:
    bits, dtype, bm, aligned, m, n, k = case
    return f"b{bits}-{dtype}-bm{bm}-alN{aligned}-{m}x{n}x{k}"


@pytest.fixture(scope="module")
def qmm_kernels(mlx_metal):
    include = H.include_dir(mlx_metal)
    out = {}
    for case in QMMS:
        bits, dtype, bm, aligned, *_ = case
        out[_qmm_id(case)] = Kernel(
            H.qmm_t_nax_source(dtype, 64, bits, bm, aligned),
            H.qmm_t_nax_name(dtype, 64, bits, bm, aligned),
            include_dirs=[include],
        )
    return out


@pytest.mark.parametrize("case", QMMS, ids=[_qmm_id(c) for c in QMMS])
def test_affine_qmm_t_nax(qmm_kernels, case, rng):
    bits, dtype, bm, aligned, m, n, k = case
    assert aligned == (n % 64 == 0)
    qw = H.quantize(n, k, bits, 64, dtype, rng)
    x = H.to_device(rng.standard_normal((m, k)), dtype)
    y = H.to_device(np.full((m, n), np.nan), dtype)
    stats = H.run_qmm_t_nax(qmm_kernels[_qmm_id(case)], qw, x, y, bm)
    x64 = H.from_device(x, dtype)
    ref = x64 @ qw.dequantized.T
    # weights are dequantized to the element type in threadgroup memory (one more rounding each)
    mag = np.abs(x64) @ np.abs(qw.dequantized.T)
    tol = bound(ref, mag, dtype, k) + 2.0 ** -H.significand_bits(dtype) * mag
    err = np.abs(H.from_device(y, dtype) - ref)
    assert (err <= tol).all(), f"worst error {err.max():.3g}"
    assert stats.bytes_written[4] == y.nbytes
    # The weights are dequantized into threadgroup memory once per threadgroup: the packed weights
    # are read once per row of tiles. A 4-bit byte counts twice, once per nibble: the emulator's
    # build has one memory, so the store of the first nibble into threadgroup memory may alias the
    # byte and the compiler loads it again (Metal's compiler, knowing device from threadgroup
    # memory, need not).
    row_tiles = -(-m // bm)
    assert stats.bytes_read[0] == qw.w.nbytes * row_tiles * (2 if bits == 4 else 1)


# ------------------------------------------------------------ affine qmv (quantized.h, non-NAX)
# (bits, dtype, fast, m, n, k): qmv_fast where MLX takes it (N % 8 == 0, K % 512 == 0), qmv for tails.
QMVS = [
    (4, "float16", True, 1, 64, 512),
    (8, "bfloat16", True, 3, 32, 1024),
    (4, "bfloat16", False, 2, 37, 320),
]


def _qmv_id(case) -> str:
    bits, dtype, fast, m, n, k = case
    return f"b{bits}-{dtype}-{'fast' if fast else 'tail'}-{m}x{n}x{k}"


@pytest.fixture(scope="module")
def qmv_kernels(mlx_metal):
    include = H.include_dir(mlx_metal)
    return {
        _qmv_id(c): Kernel(H.qmv_source(c[1], 64, c[0], c[2]), H.qmv_name(c[1], 64, c[0], c[2]), include_dirs=[include])
        for c in QMVS
    }


@pytest.mark.parametrize("case", QMVS, ids=[_qmv_id(c) for c in QMVS])
def test_affine_qmv(qmv_kernels, case, rng):
    bits, dtype, fast, m, n, k = case
    qw = H.quantize(n, k, bits, 64, dtype, rng)
    x = H.to_device(rng.standard_normal((m, k)), dtype)
    y = H.to_device(np.full((m, n), np.nan), dtype)
    stats = H.run_qmv(qmv_kernels[_qmv_id(case)], qw, x, y)
    x64 = H.from_device(x, dtype)
    ref = x64 @ qw.dequantized.T
    # qmv dequantizes in f32 (scale * dot(q, x) + bias * sum(x)): f32 rounding only, twice over
    mag = np.abs(x64) @ np.abs(qw.dequantized.T)
    err = np.abs(H.from_device(y, dtype) - ref)
    assert (err <= bound(ref, 2 * mag, dtype, k)).all(), f"worst error {err.max():.3g}"
    # 4 rows per SIMD group, 8 per threadgroup; where N is no multiple of 8, qmv moves the last
    # SIMD group back inside and writes a few rows twice (same values)
    groups = len([r for r in range(0, 8 * -(-n // 8), 4) if r < n])
    assert stats.bytes_written[4] == (y.nbytes if fast else m * groups * 4 * y.itemsize)
    # one pass over the packed weights per row of x (plus the rows the tail reads twice)
    assert stats.bytes_read[0] == qw.w.nbytes * m if fast else stats.bytes_read[0] > qw.w.nbytes * m


# ------------------------------------------------- affine qmm_t (quantized.h, non-NAX, staged)
@pytest.fixture(scope="module")
def qmm_t_kernel(mlx_metal):
    # steel's BlockLoader copies structs from device to threadgroup memory: valid Metal that
    # C++ address spaces reject, so no address-space lint
    return Kernel(
        H.qmm_t_source("float16", 64, 4, False),
        H.qmm_t_name("float16", 64, 4, False),
        include_dirs=[H.include_dir(mlx_metal)],
        address_space_lint=False,
    )


def test_affine_qmm_t(qmm_t_kernel, rng):
    m, n, k = 40, 70, 192
    qw = H.quantize(n, k, 4, 64, "float16", rng)
    x = H.to_device(rng.standard_normal((m, k)), "float16")
    y = H.to_device(np.full((m, n), np.nan), "float16")
    stats = H.run_qmm_t(qmm_t_kernel, qw, x, y)
    x64 = H.from_device(x, "float16")
    ref = x64 @ qw.dequantized.T
    # weights dequantized to half in threadgroup memory, simdgroup-matrix products in f32
    mag = np.abs(x64) @ np.abs(qw.dequantized.T)
    tol = bound(ref, mag, "float16", k) + 2.0**-11 * mag
    err = np.abs(H.from_device(y, "float16") - ref)
    assert (err <= tol).all(), f"worst error {err.max():.3g}"
    assert stats.bytes_written[4] == y.nbytes
