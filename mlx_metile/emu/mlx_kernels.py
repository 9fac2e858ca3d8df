"""MLX's own Metal kernels in the emulator, launched as MLX's host code launches them.

For a few of the kernels in the mlx-metal wheel's headers (`mlx/include/mlx/backend/metal/kernels`):
the .metal text that instantiates the kernel template as MLX's .metal files do (its
`instantiate_kernel` macro, its kernel names), the parameter structs, and the buffers, function
constants and grid of MLX's matmul.cpp / quantized.cpp (mlx v0.32.4). Also affine quantisation
packed as MLX packs it. Code nobody here wrote, on which the emulator (and its MPP subset) is
proven; and the stock side of byte-count comparisons.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import settings
from .kernel import DispatchStats, Kernel

KERNELS = "mlx/backend/metal/kernels"

# steel/gemm/params.h
GEMM_PARAMS = np.dtype(
    [
        ("M", "i4"),
        ("N", "i4"),
        ("K", "i4"),
        ("lda", "i4"),
        ("ldb", "i4"),
        ("ldd", "i4"),
        ("tiles_n", "i4"),
        ("tiles_m", "i4"),
        ("batch_stride_a", "i8"),
        ("batch_stride_b", "i8"),
        ("batch_stride_d", "i8"),
        ("swizzle_log", "i4"),
        ("gemm_k_iterations_aligned", "i4"),
        ("batch_ndim", "i4"),
    ],
    align=True,
)
GEMM_ADDMM_PARAMS = np.dtype(
    [("ldc", "i4"), ("fdc", "i4"), ("batch_stride_c", "i8"), ("alpha", "f4"), ("beta", "f4")], align=True
)

TYPE_NAMES = {"float16": "half", "bfloat16": "bfloat"}  # MLX's type_to_name -> the MSL type
UNBOUND = np.zeros(4, np.int64)  # what MLX leaves unbound (batch shapes and strides of an unbatched call)


MLX_METAL = "0.32.4"


class WheelUnavailable(RuntimeError):
    """pip could not fetch the mlx-metal wheel; the message has pip's words."""


def wheel(cache: Path | None = None) -> Path:
    """MLX's macOS wheel, mlx-metal 0.32.4, unpacked under the package cache (fetched once with
    pip's ordinary client: `pip download --no-deps --only-binary=:all: --platform macosx_14_0_arm64`;
    it installs nothing). Returns the directory holding `mlx/`."""
    base = (cache or settings.current().cache_root) / f"mlx-metal-{MLX_METAL}"
    root = base / "wheel"
    if (root / "mlx" / "include" / KERNELS / "quantized.h").is_file():
        return root
    base.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base) as work:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q"]
        command += ["--platform", "macosx_14_0_arm64", f"mlx-metal=={MLX_METAL}", "-d", work]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        wheels = sorted(Path(work).glob(f"mlx_metal-{MLX_METAL}-*.whl"))
        if done.returncode != 0 or not wheels:
            raise WheelUnavailable(f"pip download mlx-metal=={MLX_METAL}: {(done.stdout + done.stderr).strip()[-600:]}")
        unpacked = Path(work) / "wheel"
        with zipfile.ZipFile(wheels[0]) as archive:
            archive.extractall(unpacked)
        try:
            os.replace(unpacked, root)  # a concurrent fetch that finished first wins
        except OSError:
            if not (root / "mlx").is_dir():
                raise
    return root


def include_dir(wheel: Path) -> Path:
    """The include directory of an unpacked mlx-metal wheel (MLX's kernels: include_dir / KERNELS)."""
    return Path(wheel) / "mlx" / "include"


def source(includes: list[str], instantiations: list[str]) -> str:
    lines = ["#include <metal_stdlib>"] + [f'#include "{KERNELS}/{h}"' for h in includes]
    return "\n".join(lines + instantiations) + "\n"


# -- arrays in the kernels' element types -----------------------------------------------------
def to_device(x: np.ndarray, dtype: str) -> np.ndarray:
    """float values as the kernel's element type: float16, or bfloat16 as its bits (round to
    nearest even)."""
    if dtype == "float16":
        return x.astype(np.float16)
    if dtype != "bfloat16":
        raise ValueError(f"dtype must be 'float16' or 'bfloat16', got {dtype!r}")
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_device(x: np.ndarray, dtype: str) -> np.ndarray:
    """The kernel's element values as float64."""
    if dtype == "float16":
        return x.astype(np.float64)
    return (np.asarray(x, dtype=np.uint32) << 16).view(np.float32).astype(np.float64)


def significand_bits(dtype: str) -> int:
    return 11 if dtype == "float16" else 8


# -- steel NAX GEMM (matmul.cpp: steel_matmul_regular_axpby_nax) --------------------------------
@dataclass(frozen=True)
class GemmTile:
    bm: int
    bn: int
    bk: int
    wm: int
    wn: int


def gemm_name(ta: bool, tb: bool, dtype: str, t: GemmTile) -> str:
    return (
        f"steel_gemm_fused_nax_{'t' if ta else 'n'}{'t' if tb else 'n'}_{dtype}_{dtype}"
        f"_bm{t.bm}_bn{t.bn}_bk{t.bk}_wm{t.wm}_wn{t.wn}"
    )


def gemm_source(ta: bool, tb: bool, dtype: str, t: GemmTile) -> str:
    msl = TYPE_NAMES[dtype]
    inst = (
        f'instantiate_kernel("{gemm_name(ta, tb, dtype, t)}", gemm, {msl}, {t.bm}, {t.bn}, {t.bk}, {t.wm}, {t.wn}, '
        f"{str(ta).lower()}, {str(tb).lower()}, float)"
    )
    return source(["utils.h", "steel/gemm/gemm_nax.h", "steel/gemm/kernels/steel_gemm_fused_nax.h"], [inst])


def gemm_constants(m: int, n: int, k: int, t: GemmTile, axpby: bool) -> dict[int, bool]:
    return {
        10: False,  # has_batch
        100: axpby,  # use_out_source
        110: axpby,  # do_axpby
        200: m % t.bm == 0,
        201: n % t.bn == 0,
        202: k % t.bk == 0,
    }


def run_gemm(
    kernel: Kernel,
    a: np.ndarray,
    b: np.ndarray,
    d: np.ndarray,
    m: int,
    n: int,
    k: int,
    ta: bool,
    tb: bool,
    t: GemmTile,
    c: np.ndarray | None = None,
    alpha: float = 1.0,
    beta: float = 0.0,
) -> DispatchStats:
    tn, tm = -(-n // t.bn), -(-m // t.bm)
    swizzle_log = 0 if tm <= 3 else 1
    p = np.zeros(1, GEMM_PARAMS)
    p["M"], p["N"], p["K"] = m, n, k
    p["lda"], p["ldb"], p["ldd"] = (m if ta else k), (k if tb else n), n
    p["tiles_n"], p["tiles_m"] = tn, tm
    p["batch_stride_a"], p["batch_stride_b"], p["batch_stride_d"] = m * k, n * k, m * n
    p["swizzle_log"], p["gemm_k_iterations_aligned"], p["batch_ndim"] = swizzle_log, k // t.bk, 1
    tile = 1 << swizzle_log
    grid = (tn * tile, -(-tm // tile), 1)
    buffers: list = [a, b, c, d, p.tobytes()]
    if c is not None:
        q = np.zeros(1, GEMM_ADDMM_PARAMS)
        q["ldc"], q["fdc"], q["batch_stride_c"], q["alpha"], q["beta"] = n, 1, m * n, alpha, beta
        buffers.append(q.tobytes())
    return kernel.dispatch_threadgroups(grid, (32, t.wn, t.wm), buffers)


# -- affine quantisation (mlx/ops.cpp quantize; packed as kernels/quantized.h reads it) ----------
@dataclass
class Quantized:
    w: np.ndarray  # uint32 [n, k * bits / 32]
    scales: np.ndarray  # [n, k / group] in the element type
    biases: np.ndarray
    dequantized: np.ndarray  # float64 [n, k]: scale * q + bias with the stored scale and bias


def quantize(n: int, k: int, bits: int, group: int, dtype: str, rng: np.random.Generator) -> Quantized:
    q = rng.integers(0, 2**bits, size=(n, k), dtype=np.uint32)
    scales = to_device(rng.uniform(0.01, 0.05, (n, k // group)), dtype)
    biases = to_device(rng.uniform(-0.2, 0.2, (n, k // group)), dtype)
    per = 32 // bits
    shifts = (np.arange(per, dtype=np.uint32) * bits)[None, None, :]
    packed = (q.reshape(n, k // per, per) << shifts).sum(axis=2, dtype=np.uint64).astype(np.uint32)
    s = np.repeat(from_device(scales, dtype), group, axis=1)
    b = np.repeat(from_device(biases, dtype), group, axis=1)
    return Quantized(packed, scales, biases, s * q + b)


def qmm_t_nax_name(dtype: str, group: int, bits: int, bm: int, aligned_n: bool) -> str:
    return f"affine_qmm_t_nax_{dtype}_gs_{group}_b_{bits}_bm{bm}_bn64_bk64_wm2_wn2_alN_{str(aligned_n).lower()}_batch_0"


def qmm_t_nax_source(dtype: str, group: int, bits: int, bm: int, aligned_n: bool) -> str:
    # quantized_nax.metal's instantiate_quantized_aligned_batched: ..., aligned, batched, bm, bk, bn, wm, wn
    msl = {"float16": "float16_t", "bfloat16": "bfloat16_t"}[dtype]
    inst = (
        f'instantiate_kernel("{qmm_t_nax_name(dtype, group, bits, bm, aligned_n)}", affine_qmm_t_nax, {msl}, '
        f"{group}, {bits}, {str(aligned_n).lower()}, false, {bm}, 64, 64, 2, 2)"
    )
    includes = ["utils.h", "steel/gemm/gemm.h", "steel/gemm/nax.h", "steel/gemm/loader.h", "quantized_nax.h"]
    return source(includes, [inst])


def run_qmm_t_nax(kernel: Kernel, qw: Quantized, x: np.ndarray, y: np.ndarray, bm: int) -> DispatchStats:
    """quantized.cpp qmm_nax: grid (N / bn, M / bm, B), threadgroup (32, wn, wm)."""
    m, k = x.shape
    n = y.shape[1]
    grid = (-(-n // 64), -(-m // bm), 1)
    buffers = [qw.w, qw.scales, qw.biases, x, y, k, n, m] + [UNBOUND] * 8
    return kernel.dispatch_threadgroups(grid, (32, 2, 2), buffers)


def qmm_t_name(dtype: str, group: int, bits: int, aligned_n: bool) -> str:
    return f"affine_qmm_t_{dtype}_gs_{group}_b_{bits}_alN_{str(aligned_n).lower()}_batch_0"


def qmm_t_source(dtype: str, group: int, bits: int, aligned_n: bool) -> str:
    """The non-NAX affine_qmm_t (quantized.metal's instantiate_quantized_aligned_batched)."""
    msl = {"float16": "float16_t", "bfloat16": "bfloat16_t"}[dtype]
    inst = (
        f'instantiate_kernel("{qmm_t_name(dtype, group, bits, aligned_n)}", affine_qmm_t, {msl}, '
        f"{group}, {bits}, {str(aligned_n).lower()}, false)"
    )
    return source(["utils.h", "steel/gemm/gemm.h", "quantized_utils.h", "quantized.h"], [inst])


def run_qmm_t(kernel: Kernel, qw: Quantized, x: np.ndarray, y: np.ndarray) -> DispatchStats:
    """quantized.cpp qmm: bm = bn = 32, threadgroup (32, wn = 2, wm = 2), grid (N / bn, M / bm, B)."""
    m, k = x.shape
    n = y.shape[1]
    buffers = [qw.w, qw.scales, qw.biases, x, y, k, n, m] + [UNBOUND] * 8
    return kernel.dispatch_threadgroups((-(-n // 32), -(-m // 32), 1), (32, 2, 2), buffers)


def qmv_name(dtype: str, group: int, bits: int, fast: bool) -> str:
    return f"affine_qmv{'_fast' if fast else ''}_{dtype}_gs_{group}_b_{bits}_batch_0"


def qmv_source(dtype: str, group: int, bits: int, fast: bool) -> str:
    msl = {"float16": "float16_t", "bfloat16": "bfloat16_t"}[dtype]
    func = "affine_qmv_fast" if fast else "affine_qmv"
    inst = f'instantiate_kernel("{qmv_name(dtype, group, bits, fast)}", {func}, {msl}, {group}, {bits}, false)'
    return source(["utils.h", "steel/gemm/gemm.h", "quantized_utils.h", "quantized.h"], [inst])


def run_qmv(kernel: Kernel, qw: Quantized, x: np.ndarray, y: np.ndarray) -> DispatchStats:
    """quantized.cpp qmv: bn = 8 rows per threadgroup of (32, 2) threads, grid (M, N / bn, B)."""
    m, k = x.shape
    n = y.shape[1]
    buffers = [qw.w, qw.scales, qw.biases, x, y, k, n] + [UNBOUND] * 8
    return kernel.dispatch_threadgroups((m, -(-n // 8), 1), (32, 2, 1), buffers)
