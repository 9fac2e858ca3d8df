"""The generated CUDA compiles - nvcc where installed, else NVRTC (machine code for sm_90, PTX for
compute_NN) - on a machine without a GPU, and its source follows the Schedule it was built from
(the K split, rings, launch bounds, the 8-bit split). Running it needs the GPU machine: tests/gpu/
checks the results there against a float64 reference and stock MLX.

Which kernels are compiled (VARIANTS): one of each distinct kernel kind - each lowering
(simd_splitk, tiled, the tensor-core direct loads, staged ring and shared x), each weight kind
(dense f32 / f16 / bf16, 2- to 8-bit, f32 scales, mxfp4 / mxfp8 / nvfp4), each epilogue, a bias, a residual, concatenated
q/k/v, the fused RMSNorm, and each code path a setting or a column layout opens (8-bit split on
and off, wide chunks, batches of scales, interleaved stages, swizzles, strided copies, late loads,
two K ranges a warp, 16 warps, 64-row rings, dynamic shared memory). The other row buckets and
settings are rendered and checked, not compiled: they give the same kinds of kernel. What
`choose` decides is pinned by tests/schedule/decisions.json, and its properties are
tests/schedule/'s; here the sources are checked against the Schedule they were given.
"""

from __future__ import annotations

import re
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

from mlx_metile import kernels
from mlx_metile.backends.cuda_compile import MAGIC, binary_kind, compiler, find_nvcc, ptx
from mlx_metile.backends.cuda_device import build_target
from mlx_metile.backends.nvrtc import find_nvrtc, include_dirs
from mlx_metile.codegen.cuda import Q8_SPLIT_HELPERS
from mlx_metile.ir import bind_meta
from mlx_metile.lower import lower
from mlx_metile.lower.mma import Q8_SPLIT_OFFSET
from mlx_metile.pipeline import compile_projection
from mlx_metile.schedule import row_bucket
from mlx_metile.schedule.cuda_layouts import DEEP, ONE_TILE, ONE_WAVE, SPREAD, TILES
from mlx_metile.schedule.cuda_mma import MmaRules
from mlx_metile.schedule.geometry import TILE, slot_bytes
from mlx_metile.settings import current
from mlx_metile.spec import ProjectionSpec, WeightFormat
from mlx_metile.targets.cuda import DRIVER_SHARED_PER_BLOCK, STATIC_SHARED_BYTES
from tests.helpers import artifact

# nvcc where installed, else NVRTC (backends.cuda_compile.compiler())
needs_compiler = pytest.mark.skipif(
    find_nvcc() is None and (find_nvrtc() is None or not include_dirs()), reason="neither nvcc nor NVRTC is installed"
)

Q4, Q8 = WeightFormat("bf16", 4, 64), WeightFormat("f16", 8, 32)


def spec(act, weights, epilogue=None, residual=False, k=256, norm=None) -> ProjectionSpec:
    return ProjectionSpec(act, tuple(weights), epilogue, residual, k_multiple=k, norm_eps=norm)


def cuda(s: ProjectionSpec, rows: int, layout: int | None = None):
    """The CUDA kernel for `rows` rows: as the ops build it for a product over K = 4096 into 14336
    columns (the TILES layout), or in column layout `layout`."""
    if layout is None:
        return artifact(s, rows, "cuda", K=4096, columns=14336)
    schedule = MmaRules(s, current(), build_target()).schedule(row_bucket(rows), layout)
    return compile_projection(s, schedule, "cuda")


def kernel_def(s: ProjectionSpec, art):
    """The lowered kernel `art` was rendered from (its launch bound, dynamic shared memory)."""
    return lower(bind_meta(kernels.projection_program(s), art.schedule.meta()), art.schedule, s)


def sm90_code(data: bytes) -> bool:
    """Machine code of the kind this machine's compiler gives for sm_90 (nvcc: a compressed
    fatbin; NVRTC: a cubin)."""
    return data[:4] == MAGIC[binary_kind("sm_90", compiler()[0])]


def k_split(art) -> tuple:
    """What a tensor-core kernel's K split is made of: its K ranges and the lines giving their
    chunks (part of every row's sum order; the shared-x kernel, whose warps walk every range,
    names a range's length per_range)."""
    lines = [ln.strip().replace("per_range", "per_warp") for ln in art.source.splitlines()]
    split = tuple(ln for ln in lines if ln.startswith(("const int chunks", "const int per_warp")))
    assert len(split) == 2, art.entry
    return (art.schedule.splits or art.schedule.SG, *split)


def ring_bytes(s: ProjectionSpec, sched) -> int:
    return sched.SG * sched.stages * slot_bytes(s, sched.BN // TILE, sched.groups, sched.row_pad)


@pytest.fixture
def sm90(env):
    env.set("MLX_METILE_CUDA_ARCH", "sm_90")
    return env


# -- compiled: one kernel of each kind ---------------------------------------------------------
def _v(name, s, rows, expect, layout=None, **knobs):
    return pytest.param(s, rows, layout, knobs, expect, id=name)


def simd(a):
    return a.schedule.kind == "simd_splitk"


def tiled(a):
    return a.schedule.kind == "tiled"


def staged(a):
    return a.schedule.kind == "mma" and a.schedule.staged and not a.schedule.xshare


def direct(a):
    return a.schedule.kind == "mma" and not a.schedule.staged


Q4G64B = WeightFormat("bf16", 4, 64, True, "bf16")
Q8G128 = WeightFormat("bf16", 8, 128)
MXFP4 = WeightFormat("u8", 4, 32, mode="mxfp4")
MXFP8 = WeightFormat("u8", 8, 32, mode="mxfp8")
MXFP8B = WeightFormat("u8", 8, 32, True, "bf16", "mxfp8")
NVFP4 = WeightFormat("u8", 4, 16, mode="nvfp4")
VARIANTS = [
    # SIMT: f32 activations, mixed formats, dense K not holding stages, and past 32 rows
    _v("simt-f32-dense-gelu", spec("f32", [WeightFormat("f32")], "gelu"), 4, simd),
    _v("simt-f32-q4g32-bias", spec("f32", [WeightFormat("f32", 4, 32, True, "f32")], k=64), 1, simd),
    _v("simt-f32-q8g128-silu", spec("f32", [WeightFormat("f32", 8, 128)], "silu"), 16, simd),
    _v("simt-bf16-dense-swiglu-k32", spec("bf16", [WeightFormat("bf16")] * 2, "swiglu", k=32), 32, simd),
    _v("simt-mixed-formats-swiglu", spec("bf16", [Q4, WeightFormat("bf16", 8, 64)], "swiglu"), 2, simd),
    _v("tiled-bf16-q4g64-residual", spec("bf16", [Q4], None, True), 33, tiled),
    # affine 2, 3, 5, 6 bits (3, 5, 6-bit values straddle words): the tensor cores' direct loads
    # (where a lane's quarter of a group is not whole words, its covering words funnel-shifted);
    # SIMT past 32 rows and with the tensor cores off
    _v("simt-bf16-q2g32", spec("bf16", [WeightFormat("bf16", 2, 32)]), 1, simd, MMA="0"),
    _v("simt-bf16-q3g32-swiglu", spec("bf16", [WeightFormat("bf16", 3, 32)] * 2, "swiglu"), 8, simd, MMA="0"),
    _v("mma-direct-bf16-q2g32", spec("bf16", [WeightFormat("bf16", 2, 32)]), 1, direct, MMA_STAGED="0"),
    _v("mma-direct-bf16-q3g32-swiglu", spec("bf16", [WeightFormat("bf16", 3, 32)] * 2, "swiglu"), 32, direct,
       MMA_STAGED="0"),
    _v("mma-direct-f16-q5g64-bias", spec("f16", [WeightFormat("f16", 5, 64, True, "f16")]), 16, direct,
       MMA_STAGED="0"),
    _v("mma-direct-bf16-q6g32-qkv", spec("bf16", [WeightFormat("bf16", 6, 32)] * 3), 8, direct, MMA_STAGED="0"),
    _v("tiled-bf16-q6g64", spec("bf16", [WeightFormat("bf16", 6, 64)]), 33, tiled),
    _v("mma-direct-bf16-q2g64", spec("bf16", [WeightFormat("bf16", 2, 64)]), 1, direct, MMA_STAGED="0"),
    _v("mma-direct-bf16-q3g128-swiglu", spec("bf16", [WeightFormat("bf16", 3, 128)] * 2, "swiglu"), 16, direct),
    _v("mma-direct-f16-q5g128-bias", spec("f16", [WeightFormat("f16", 5, 128, True, "f16")]), 32, direct),
    _v("mma-direct-bf16-q6g64", spec("bf16", [WeightFormat("bf16", 6, 64)]), 8, direct, MMA_STAGED="0"),
    # ... and through the staged ring: each column's bit stream copied in 16-byte pieces (3, 5 and
    # 6 bits: in 3 or 5 runs), the lanes' words read from the ring as from global memory
    _v("staged-bf16-q2g64", spec("bf16", [WeightFormat("bf16", 2, 64)]), 1,
       lambda a: staged(a) and "metile_cp_small<8>(" in a.source, MMA_STAGED_LOWBIT="1", MMA_GROUPS="4"),
    _v("staged-bf16-q3g64-swiglu", spec("bf16", [WeightFormat("bf16", 3, 64)] * 2, "swiglu"), 16, staged,
       MMA_STAGED_LOWBIT="1"),
    _v("staged-f16-q5g64-bias-tiles", spec("f16", [WeightFormat("f16", 5, 64, True, "f16")]), 32,
       lambda a: staged(a) and a.schedule.BN > TILE, TILES, MMA_STAGED_LOWBIT="1"),
    _v("staged-bf16-q6g128-k512", spec("bf16", [WeightFormat("bf16", 6, 128)], k=512), 4, staged, MMA_SMEM="96",
       MMA_STAGED_LOWBIT="1"),
    _v("staged-bf16-q5g128-qkv-deep", spec("bf16", [WeightFormat("bf16", 5, 128)] * 3, k=512), 8, staged, DEEP,
       MMA_STAGED_LOWBIT="1"),
    _v("staged-f16-q3g128-one-wave", spec("f16", [WeightFormat("f16", 3, 128)], k=512), 1, staged, ONE_WAVE,
       MMA_STAGED_LOWBIT="1"),
    _v("staged-bf16-q2g32-strided", spec("bf16", [WeightFormat("bf16", 2, 32)] * 2, "swiglu"), 16,
       lambda a: staged(a) and a.schedule.strided, MMA_STRIDED="1", MMA_STAGED_LOWBIT="1"),
    _v("staged-bf16-q6g32-residual", spec("bf16", [WeightFormat("bf16", 6, 32)], None, True), 8, staged,
       MMA_STAGED_LOWBIT="1"),
    _v("staged-bf16-q3g32-8-byte-copies", spec("bf16", [WeightFormat("bf16", 3, 32)]), 4,
       lambda a: staged(a) and "metile_cp16(dst" not in a.source and "metile_cp_small<8>(dst" in a.source,
       MMA_STAGED_LOWBIT="1"),
    _v("staged-f16-q5g32-swiglu", spec("f16", [WeightFormat("f16", 5, 32)] * 2, "swiglu"), 16, staged,
       MMA_STAGED_LOWBIT="1"),
    # MLX's microscaling modes (uint8 scales, e2m1 / e4m3 codes): SIMT for f32 x and past 32 rows
    _v("simt-f32-mxfp4", spec("f32", [WeightFormat("u8", 4, 32, mode="mxfp4")]), 1, simd),
    _v("tiled-bf16-nvfp4-residual", spec("bf16", [WeightFormat("u8", 4, 16, mode="nvfp4")], None, True), 33, tiled),
    _v("tiled-f16-dense-gelu-approx", spec("f16", [WeightFormat("f16")], "gelu_approx"), 64, tiled),
    # tensor cores, the lanes' direct loads
    _v("mma-direct-q4g64-k64", spec("bf16", [Q4], k=64), 1, direct),
    _v("mma-direct-dense-bias-residual", spec("f16", [WeightFormat("f16", has_bias=True, bias_dtype="f16")], None,
       True, k=32), 8, direct, MMA_DENSE="1"),
    _v("mma-direct-batch4-swiglu", spec("bf16", [Q4] * 2, "swiglu"), 32,
       lambda a: direct(a) and "const uint2 s0_0a_0 = " in a.source, MMA_STAGED="0", MMA_BATCH="4"),
    _v("mma-direct-batch2-tiles2-warps8-qkv", spec("bf16", [Q4] * 3), 1,
       lambda a: direct(a) and a.schedule.SG == 8, MMA_STAGED="0", MMA_BATCH="2", MMA_TILES="2", MMA_WARPS="8"),
    _v("mma-direct-q8-gelu-concatenated", spec("f16", [Q8] * 2, "gelu", k=64), 8, direct, MMA_STAGED="0"),
    _v("mma-wide-swiglu", spec("bf16", [Q4] * 2, "swiglu"), 32, lambda a: a.schedule.wide, MMA_WIDE="1"),
    _v("mma-wide-q8g32-residual", spec("f16", [Q8], None, True, k=64), 1, lambda a: a.schedule.wide, MMA_WIDE="1"),
    _v("mma-direct-q8-split", spec("bf16", [WeightFormat("bf16", 8, 64)] * 2, "swiglu"), 16,
       lambda a: direct(a) and a.schedule.q8split, MMA_STAGED="0"),
    # microscaled weights on the direct loads (mx: e8m0 scales in f32; nvfp4: e4m3 scales folded)
    _v("mma-direct-bf16-mxfp4", spec("bf16", [MXFP4]), 1, direct, MMA_STAGED="0"),
    _v("mma-direct-f16-mxfp8-swiglu", spec("f16", [MXFP8] * 2, "swiglu"), 8, direct, MMA_STAGED="0"),
    _v("mma-direct-bf16-mxfp4-k32", spec("bf16", [MXFP4], k=32), 16, direct),  # K may not hold a stage
    _v("mma-direct-f16-nvfp4-bias", spec("f16", [WeightFormat("u8", 4, 16, True, "f16", "nvfp4")]), 32, direct,
       MMA_STAGED="0"),
    _v("mma-direct-bf16-nvfp4-swiglu", spec("bf16", [NVFP4] * 2, "swiglu"), 16, direct, MMA_STAGED="0"),
    _v("mma-direct-bf16-nvfp4-k64", spec("bf16", [NVFP4], k=64), 1, direct),  # K may not hold a stage
    # the staged ring
    _v("staged-q4g64-swiglu-bias-strided", spec("bf16", [Q4G64B] * 2, "swiglu"), 16,
       lambda a: staged(a) and a.schedule.strided),
    _v("staged-q4g32", spec("bf16", [WeightFormat("bf16", 4, 32)]), 1, staged),
    _v("staged-q4g128-residual-sector", spec("f16", [WeightFormat("f16", 4, 128)], None, True), 32,
       lambda a: staged(a) and a.schedule.sector),
    _v("staged-q8g64-swizzled-no-split", spec("bf16", [WeightFormat("bf16", 8, 64)] * 2, "swiglu"), 1,
       lambda a: staged(a) and a.schedule.swizzle_mult and not a.schedule.q8split, MMA_Q8SPLIT="0"),
    _v("staged-f32-scales", spec("f16", [WeightFormat("f32", 4, 32)]), 1, staged),
    _v("staged-qkv", spec("bf16", [Q4] * 3), 8, staged),
    _v("staged-dense", spec("bf16", [WeightFormat("bf16")]), 1, staged),
    _v("staged-dense-f16-gelu-approx", spec("f16", [WeightFormat("f16")], "gelu_approx", k=64), 4, staged),
    _v("staged-q8g128-swiglu-dynamic-shared", spec("bf16", [Q8G128] * 2, "swiglu"), 1,
       lambda a: staged(a) and a.dynamic_shared > STATIC_SHARED_BYTES),
    _v("staged-q8g128-two-tiles-dynamic-shared", spec("bf16", [Q8G128]), 32,
       lambda a: staged(a) and a.schedule.BN == 2 * TILE and "extern __shared__" in a.source, TILES),
    _v("staged-interleaved", spec("bf16", [Q4G64B] * 2, "swiglu"), 16,
       lambda a: staged(a) and a.schedule.interleave, MMA_INTERLEAVE="1"),
    _v("staged-swizzled-rows", spec("bf16", [Q4]), 8, lambda a: staged(a) and a.schedule.swizzle_mult == 1,
       MMA_SWIZZLE="1", MMA_STAGES="3", MMA_SMEM="55"),
    _v("staged-late-1", spec("bf16", [Q4]), 16, lambda a: staged(a) and a.schedule.late == 1, MMA_LATE="1"),
    _v("staged-late-2", spec("bf16", [Q4]), 16, lambda a: staged(a) and a.schedule.late == 2, MMA_LATE="2"),
    _v("staged-late-3", spec("bf16", [Q4]), 16, lambda a: staged(a) and a.schedule.late == 3, MMA_LATE="3"),
    _v("staged-deep-two-ranges-a-warp", spec("bf16", [WeightFormat("bf16", 8, 64)]), 16,
       lambda a: staged(a) and a.schedule.splits == 2 * a.schedule.SG, DEEP),
    _v("staged-spread-16-warps", spec("bf16", [WeightFormat("bf16")]), 8, lambda a: staged(a) and a.schedule.SG == 16,
       SPREAD),
    _v("staged-one-wave", spec("bf16", [Q4]), 1, staged, ONE_WAVE),
    _v("staged-64-row-rings", spec("bf16", [Q4G64B] * 2, "swiglu"), 16,
       lambda a: staged(a) and a.schedule.BN == 2 * TILE and "csok1" in a.source,
       MMA_GROUPS="2", MMA_BANKPAD="0", MMA_TILES="2"),
    _v("shared-x-swiglu", spec("bf16", [Q4] * 2, "swiglu"), 32, lambda a: a.schedule.xshare > 0),
    # microscaled weights through the ring: uint8 scales, no biases (nvfp4: two a chunk)
    _v("staged-bf16-mxfp4", spec("bf16", [MXFP4]), 1, lambda a: staged(a) and "metile_cp_small<4>(" in a.source),
    _v("staged-f16-mxfp8-swiglu", spec("f16", [MXFP8] * 2, "swiglu"), 8, staged),
    _v("staged-bf16-mxfp8-qkv-bias-tiles", spec("bf16", [MXFP8B] * 3), 32,
       lambda a: staged(a) and a.schedule.BN > TILE, TILES),
    _v("staged-bf16-mxfp4-deep", spec("bf16", [MXFP4]), 16, staged, DEEP),
    _v("staged-f16-mxfp8-residual-one-wave", spec("f16", [MXFP8], None, True), 1, staged, ONE_WAVE),
    _v("shared-x-mxfp4-swiglu", spec("bf16", [MXFP4] * 2, "swiglu"), 32, lambda a: a.schedule.xshare > 0,
       MMA_XSHARE="4"),
    _v("staged-bf16-nvfp4", spec("bf16", [NVFP4]), 1, lambda a: staged(a) and "metile_cp_small<8>(" in a.source),
    _v("staged-f16-nvfp4-bias-swiglu-tiles", spec("f16", [WeightFormat("u8", 4, 16, True, "f16", "nvfp4")] * 2,
       "swiglu"), 32, staged, TILES),
    _v("shared-x-nvfp4-swiglu", spec("bf16", [NVFP4] * 2, "swiglu"), 32, lambda a: a.schedule.xshare > 0,
       MMA_XSHARE="4"),
    _v("fused-rmsnorm-mxfp8", spec("bf16", [MXFP8], norm=1e-5), 4, lambda a: staged(a) and "norm" in [p.name for p in a.params]),
    _v("fused-rmsnorm-qkv", spec("bf16", [Q4] * 3, norm=1e-5), 4, lambda a: "norm" in [p.name for p in a.params]),
]  # fmt: skip


@needs_compiler
@pytest.mark.parametrize("s,rows,layout,knobs,expect", VARIANTS)
def test_each_kernel_kind_compiles_for_sm90(sm90, s, rows, layout, knobs, expect):
    for name, value in knobs.items():
        sm90.set(f"MLX_METILE_CUDA_{name}", value)
    art = cuda(s, rows, layout)
    assert expect(art), (s.name(), art.schedule)
    assert sm90_code(ptx(art, "sm_90")), "an sm_90 build is machine code"


@needs_compiler
@pytest.mark.parametrize(
    "s",
    [spec("f32", [WeightFormat("f32")], k=64), spec("f32", [WeightFormat("f32", 4, 32, True, "f32")], k=64)],
    ids=lambda s: s.name(),
)
def test_portable_ptx(s):
    art = cuda(s, 4)
    text = ptx(art, "compute_75").decode()
    assert f".visible .entry {art.entry}(" in text and ".target sm_75" in text


@needs_compiler
def test_portable_ptx_of_the_tensor_core_kernels(sm90):
    sm90.set("MLX_METILE_CUDA_ARCH", "compute_80")
    art = cuda(spec("bf16", [Q4G64B] * 2, "swiglu"), 16)
    assert staged(art) and art.schedule.smem_block == 163 * 1024
    text = ptx(art, "compute_80").decode()
    assert f".visible .entry {art.entry}(" in text and ".target sm_80" in text and "mma.sync.aligned.m16n8k16" in text


@pytest.mark.skipif(find_nvcc() is None, reason="a fatbin needs nvcc (NVRTC gives cubins)")
def test_compressed_fatbin_holds_the_same_kernel_smaller(env):
    """nvcc builds a compressed fatbin (magic 0xBA55ED50) of the sm_90 code alone by default,
    smaller than the cubin (MLX_METILE_CUDA_BINARY=cubin) MLX would otherwise hash at every launch."""
    env.set("MLX_METILE_CUDA_COMPILER", "nvcc")
    art = cuda(spec("bf16", [Q4G64B] * 2, "swiglu"), 1)
    fatbin = ptx(art, "sm_90")
    env.set("MLX_METILE_CUDA_BINARY", "cubin")  # the same artifact, another binary: no stale one
    cubin = ptx(art, "sm_90")
    assert cubin[:4] == b"\x7fELF" and fatbin[:4] == b"\x50\xed\x55\xba"
    assert len(fatbin) < len(cubin) / 2
    with pytest.raises(ValueError, match="MLX_METILE_CUDA_BINARY"):
        env.set("MLX_METILE_CUDA_BINARY", "elf")


def ptxas_usage(art) -> dict[str, int]:
    """Registers and spill-store bytes ptxas reports for `art` on sm_90."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.cu"
        src.write_text(art.source)
        cmd = [find_nvcc(), "-cubin", "-arch=sm_90", "-Xptxas", "-v", "-o", str(Path(tmp) / "k.cubin"), str(src)]
        log = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    return {
        "registers": int(re.search(r"Used (\d+) registers", log).group(1)),
        "spill": int(re.search(r"(\d+) bytes spill stores", log).group(1)),
    }


@pytest.mark.skipif(find_nvcc() is None, reason="ptxas's report needs nvcc")
def test_the_one_wave_launch_bound_holds_without_spilling(sm90):
    """ONE_WAVE asks for 5 blocks of 128 threads per SM (at most 102 registers a thread): the
    4-bit group-64 kernel fits in 96 without spilling."""
    art = cuda(spec("bf16", [Q4]), 8, ONE_WAVE)
    assert "__launch_bounds__(128, 5)" in art.source
    usage = ptxas_usage(art)
    assert usage["registers"] <= 96 and usage["spill"] == 0, usage


# -- rendered: the source follows the Schedule -------------------------------------------------
def launch_bound(s: ProjectionSpec, art) -> str:
    k = kernel_def(s, art)
    return f"__launch_bounds__({art.schedule.threads}, {k.min_groups})" if k.min_groups else "__launch_bounds__(128)"


STAGED_SPECS = [
    spec("bf16", [MXFP4]),
    spec("f16", [MXFP8] * 2, "swiglu"),
    spec("bf16", [NVFP4]),
    spec("bf16", [WeightFormat("bf16", 3, 64)]),  # affine 3, 5, 6 bits: stages in 3 or 5 runs of pieces
    spec("f16", [WeightFormat("f16", 5, 64)] * 2, "swiglu"),
    spec("bf16", [WeightFormat("bf16", 2, 128)], k=512),
    spec("f16", [WeightFormat("f16", 5, 32)], None, True),  # 8-byte copies
    spec("bf16", [Q4G64B] * 2, "swiglu"),
    spec("bf16", [WeightFormat("bf16", 4, 32)]),
    spec("f16", [WeightFormat("f16", 4, 128)], None, True),
    spec("bf16", [WeightFormat("bf16", 8, 64)] * 2, "swiglu"),
    spec("f16", [Q8], k=128),
    spec("f16", [WeightFormat("f32", 4, 32)]),  # f32 scales: 16 bytes a column
    spec("bf16", [Q4] * 3),  # fused q/k/v
    spec("bf16", [WeightFormat("bf16", 4, 32)], k=64),  # fewer groups: K holds 2
    spec("bf16", [Q4], k=64),  # K may not hold a stage: the direct loads
    spec("bf16", [Q8G128] * 2, "swiglu"),  # rings over 48 KB: dynamic shared memory
]


@pytest.mark.parametrize("s", STAGED_SPECS, ids=lambda s: s.name())
def test_staged_sources_follow_the_schedule(sm90, s):
    """The staged ring (cp.async copies) exactly where the Schedule says; whole stages of its
    `groups` per K range; the launch bound its `blocks`, capped where the rings let fewer blocks
    share an SM; one K split for every row bucket."""
    sm90.set("MLX_METILE_CUDA_MMA_STAGED_LOWBIT", "1")  # (affine 2, 3, 5, 6 bits: their ring, the default, explicitly)
    splits = set()
    for bucket in (1, 16, 32):
        art = cuda(s, bucket)
        sched = art.schedule
        assert sched.kind == "mma", s.name()
        assert ("metile_cp16(" in art.source) == sched.staged, s.name()
        if sched.staged and not sched.xshare:
            assert f"const int ch0 = (c_begin + (st) * {sched.groups});" in art.source, s.name()
            assert launch_bound(s, art) in art.source, (s.name(), bucket)
            bound = kernel_def(s, art).min_groups
            if art.dynamic_shared:  # (the ring's size known: as many blocks as fit an SM, at most `blocks`)
                fit = sched.smem_sm // (art.dynamic_shared + DRIVER_SHARED_PER_BLOCK)
                assert bound == min(sched.blocks, max(1, fit)), (s.name(), bucket)
            assert bound <= sched.blocks, (s.name(), bucket)
            assert (art.dynamic_shared > 0) == (ring_bytes(s, sched) > STATIC_SHARED_BYTES), (s.name(), bucket)
        splits.add(k_split(art))
    assert len(splits) == 1, splits
    if s is STAGED_SPECS[-1]:  # (the rings let fewer blocks share an SM than the Schedule asks for)
        art = cuda(s, 1)
        assert art.dynamic_shared > STATIC_SHARED_BYTES and kernel_def(s, art).min_groups < art.schedule.blocks


def test_staged_falls_back_where_the_rings_do_not_fit(sm90):
    """Rings of 2 stages over the shared memory allowed (the 8-bit group-128 SwiGLU's with the
    48 KB budget of MLX_METILE_CUDA_MMA_SMEM=48): the direct loads."""
    sm90.set("MLX_METILE_CUDA_MMA_SMEM", "48")
    art = cuda(STAGED_SPECS[-1], 1)
    assert art.schedule.kind == "mma" and "metile_cp16(" not in art.source and art.dynamic_shared == 0


def test_staged_falls_back_where_a_stage_would_not_fit_one_copy(env):
    """8 groups of f32 scales (32 bytes a column) or of 8-bit group 128 (1 KB a column) take the
    direct loads instead of a copy the ring cannot express."""
    env.set("MLX_METILE_CUDA_MMA_GROUPS", "8")
    env.set("MLX_METILE_CUDA_MMA_WARPS", "1")
    for fmt in (WeightFormat("f32", 4, 32), Q8G128):
        art = cuda(spec("bf16", [fmt], k=1024), 1)
        assert art.schedule.kind == "mma" and "metile_cp16(" not in art.source


def test_interleaved_k_stages_split_alike_in_every_bucket(sm90):
    """MLX_METILE_CUDA_MMA_INTERLEAVE=1: warp w takes stages w, w + W, ... - the same lines in every
    row bucket (the sum order)."""
    sm90.set("MLX_METILE_CUDA_MMA_INTERLEAVE", "1")
    splits = set()
    for bucket in (1, 16, 32):
        art = cuda(STAGED_SPECS[0], bucket)
        lines = [ln.strip() for ln in art.source.splitlines()]
        splits.add(tuple(ln for ln in lines if ln.startswith(("const int k_stages", "const int nst", "const int ch0"))))
        assert "c_begin" not in art.source
    assert len(splits) == 1 and len(next(iter(splits))) == 3, splits


def test_swizzled_rings_are_unpadded(sm90):
    """MLX_METILE_CUDA_MMA_SWIZZLE=1: ring rows lose their padding, piece p of row g stored at
    p ^ (g & 7); with STAGES=3 and SMEM=55 the ring is 3 stages in dynamic shared memory."""
    for name, value in (("SWIZZLE", "1"), ("STAGES", "3"), ("SMEM", "55")):
        sm90.set(f"MLX_METILE_CUDA_MMA_{name}", value)
    s = spec("bf16", [Q4])
    art = cuda(s, 8)
    sched = art.schedule
    assert (sched.row_pad, sched.stages, sched.swizzle_mask, sched.swizzle_mult) == (0, 3, 7, 1)
    assert art.dynamic_shared == ring_bytes(s, sched) <= 55 * 1024
    assert "^ (g & 7)" in art.source and launch_bound(s, art) in art.source


def test_staged_tiles_move_loads_only(sm90):
    """Wide outputs (TILES) take several column tiles a block on the staged ring, ONE_TILE one:
    the K split is the same for every bucket and both layouts."""
    single = spec("bf16", [Q4])
    splits, widths = set(), set()
    for layout in (TILES, ONE_TILE):
        for bucket in (1, 16, 32):
            art = cuda(single, bucket, layout)
            assert "metile_cp16(" in art.source
            assert layout == TILES or art.schedule.BN == TILE
            splits.add(k_split(art))
            widths.add(art.schedule.BN)
    assert len(splits) == 1 and len(widths) > 1, (splits, widths)


MAINLOOPS = [
    {"BATCH": "1"},
    {"BATCH": "2", "TILES": "2", "WARPS": "8"},
    {"BATCH": "4"},
    {"BATCH": "4", "TILES": "4", "WARPS": "16"},
]


@pytest.mark.parametrize("knobs", MAINLOOPS, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_direct_load_mainloops(env, knobs):
    """The direct loads' mainloop under each batch, tiles and warps setting: the K split is aligned
    to 4 chunks exactly when K holds whole multiples of 4 groups (whatever the batch, so that all
    row buckets split K alike), and then a batch of 2 or 4 chunks loads each column's scales in
    one vector."""
    for name, value in knobs.items():
        env.set(f"MLX_METILE_CUDA_MMA_{name}", value)
    env.set("MLX_METILE_CUDA_MMA_DENSE", "1")
    env.set("MLX_METILE_CUDA_MMA_STAGED", "0")
    batch = int(knobs["BATCH"])
    specs = [  # (spec, whether the K split is aligned)
        (spec("bf16", [Q4] * 2, "swiglu"), True),
        (spec("f16", [Q8], None, True, k=128), True),
        (spec("f16", [Q8], None, True, k=64), False),
        (spec("bf16", [Q4] * 3), True),
        (spec("bf16", [WeightFormat("bf16")], k=64), False),
    ]
    scales = {1: "unsigned short", 2: "unsigned", 4: "uint2"}[batch]
    for s, aligned in specs:
        for bucket in (1, 32):
            art = cuda(s, bucket)
            assert art.schedule.kind == "mma" and art.schedule.batch == batch, s.name()
            assert (f"/ {art.schedule.SG * 4} * 4;" in art.source) == aligned, s.name()
            if s.weights[0].quantized:
                want = scales if aligned and batch > 1 else "unsigned short"
                assert f"const {want} s0_0a_0 = " in art.source, s.name()


def test_wide_mma_chunks(env):
    """MLX_METILE_CUDA_MMA_WIDE=1: pairs of groups per chunk, 16-byte weight loads for 4-bit group
    64, x masked per group; not where the group count may be odd."""
    env.set("MLX_METILE_CUDA_MMA_WIDE", "1")
    for s in (spec("bf16", [Q4] * 2, "swiglu"), spec("f16", [Q8], None, True, k=64), spec("bf16", [Q4] * 3)):
        for bucket in (1, 32):
            assert "const unsigned mA = t < 2" in cuda(s, bucket).source, s.name()
    wide = cuda(spec("bf16", [Q4]), 1).source
    assert "const uint4 w0_0av0_0 = " in wide and "2 * (ch0 + 0)" in wide
    odd = cuda(spec("bf16", [Q4], k=64), 1)
    assert not odd.schedule.wide and "mA" not in odd.source


@pytest.mark.parametrize(
    "knobs",
    [{}, {"GROUPS": "8"}, {"STAGED": "0"}, {"STAGED": "0", "BATCH": "4"}, {"WIDE": "1"}, {"BATCH": "2", "TILES": "2"}],
    ids=str,
)
def test_mma_k_split_is_the_same_for_every_row_bucket(env, knobs):
    """Row invariance on CUDA, in the sources: the K split (warps, chunk size, each warp's range)
    is part of a row's sum order, so every row bucket of a spec splits K alike."""
    for name, value in knobs.items():
        env.set(f"MLX_METILE_CUDA_MMA_{name}", value)
    for s in (spec("bf16", [Q4] * 2, "swiglu"), spec("f16", [Q8], None, True, k=64), spec("bf16", [Q4] * 3)):
        splits = {k_split(cuda(s, bucket)) for bucket in (1, 16, 32)}
        assert len(splits) == 1, (s.name(), splits)


def test_dense_weights_modes(env):
    """Dense weights take the staged ring by default (no scales), the direct loads with
    MLX_METILE_CUDA_MMA_DENSE=1 and the SIMT schedule with =0; one K split for every row bucket."""
    env.set("MLX_METILE_CUDA_ARCH", "sm_90")
    specs = [
        spec("bf16", [WeightFormat("bf16")]),
        spec("bf16", [WeightFormat("bf16", has_bias=True, bias_dtype="bf16")] * 2, "swiglu", k=64),
        spec("f16", [WeightFormat("f16")] * 3, k=128),  # fused q/k/v
        spec("f16", [WeightFormat("f16")], None, True, k=64),
    ]
    for mode, ring in ((None, True), ("staged", True), ("1", False)):
        if mode is None:
            env.unset("MLX_METILE_CUDA_MMA_DENSE")
        else:
            env.set("MLX_METILE_CUDA_MMA_DENSE", mode)
        for s in specs:
            splits = set()
            for bucket in (1, 16, 32):
                art = cuda(s, bucket)
                assert art.schedule.kind == "mma" and art.schedule.staged == ring, (mode, s.name())
                assert ("metile_cp16(" in art.source) == ring, (mode, s.name())
                splits.add(k_split(art))
            assert len(splits) == 1, (mode, s.name(), splits)
    env.set("MLX_METILE_CUDA_MMA_DENSE", "0")
    assert cuda(specs[0], 1).schedule.kind == "simd_splitk"


def test_q8_split_is_default_and_its_constants_are_exact(env):
    """By default (MLX_METILE_CUDA_MMA_Q8SPLIT=0 turns it off) 8-bit weights with bf16 activations
    enter the MMA as 128 + low nibble and 2048 + 16 * high nibble (both exact in bf16), two MMAs per
    word into one accumulator, 2176 * scale taken off the bias. The helpers' magic constants decode
    to exactly those values; f16 activations and 4-bit weights are unaffected."""

    def bf16(bits: int) -> float:
        return struct.unpack("<f", struct.pack("<I", bits << 16))[0]

    lo, hi = re.findall(r"0x([0-9A-F]{4})[0-9A-F]{4}u\);", Q8_SPLIT_HELPERS)
    assert [bf16(int(lo, 16) | n) for n in range(16)] == [128.0 + n for n in range(16)]
    assert [bf16(int(hi, 16) | n) for n in range(16)] == [2048.0 + 16 * n for n in range(16)]
    assert Q8_SPLIT_OFFSET == 128 + 2048

    q8 = spec("bf16", [WeightFormat("bf16", 8, 64)] * 2, "swiglu")
    default = {b: cuda(q8, b).source for b in (1, 32)}
    env.set("MLX_METILE_CUDA_MMA_Q8SPLIT", "1")
    for ring in ("1", "0"):
        env.set("MLX_METILE_CUDA_MMA_STAGED", ring)
        for bucket in (1, 16, 32):
            art = cuda(q8, bucket)
            assert "metile_q8hi_bf16(w" in art.source and "metile_q8_bf16(w" not in art.source
            assert "fmaf(-2176.0f, sc" in art.source
    for other in (WeightFormat("f16", 8, 64), WeightFormat("bf16", 4, 64)):
        assert "metile_q8hi" not in cuda(spec(other.dtype, [other]), 1).source
    env.unset("MLX_METILE_CUDA_MMA_STAGED")
    assert {b: cuda(q8, b).source for b in (1, 32)} == default  # on by default
    env.set("MLX_METILE_CUDA_MMA_Q8SPLIT", "0")
    for bucket in (1, 32):
        art = cuda(q8, bucket)
        assert "metile_q8_bf16(w" in art.source and "metile_q8hi" not in art.source


def test_the_layout_field_names_the_rule_not_the_kernel(sm90):
    """Lowerings read a Schedule's fields but `layout` (which rule chose them): Schedules differing
    in the layout alone build the same kernel, so tests/schedule/test_layouts.py's comparisons of
    Schedules are comparisons of kernels."""
    for s in (spec("bf16", [Q4]), spec("bf16", [WeightFormat("bf16")] * 2, "swiglu"), spec("f16", [Q8] * 3)):
        for bucket in (1, 32)[len(s.weights) > 1 :]:  # (one bucket of the fused products)
            art = cuda(s, bucket)
            for layout in (ONE_TILE, DEEP):
                other = compile_projection(s, art.schedule.with_fields(layout=layout), "cuda")
                assert other.source == art.source and other.dynamic_shared == art.dynamic_shared
