"""The standing kernel-alone A/B suites: each writes MLX-free harnesses (generated_harness.py) that
time a default rule of the CUDA schedules against the alternatives it was chosen over, into a
folder to carry to the GPU machine and run with run_ab.sh:

    python tools/cuda_probe/suite.py OUTDIR SUITE        # SUITE: a key of SUITES (--help lists them)
    # on the GPU machine, carrying OUTDIR:  bash tools/cuda_probe/run_ab.sh $OUT OUTDIR/*.cu

The first variant of a file is its reference for rel_diff: the defaults of the checkout. Variant
names: wN = WARPS=N, sN = STAGES=N (and SMEM=KB where the ring needs it), tN = TILES=N, mbN =
MINBLOCKS=N, gN = GROUPS=N, xsN = XSHARE=N, HACK=... = diagnostics.py's rewrites, BUCKET=b = row
bucket b's kernel over several row blocks, `again` = the default once more (the run's noise),
`cublas` = cuBLAS on the same pool. Each suite names the result file (bench/results/) that holds
its answer and docs/SCHEDULES.md the rule it set.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HARNESS = Path(__file__).with_name("generated_harness.py")
E = "MLX_METILE_CUDA_MMA_"
LLAMA_SHAPES = ((4096, 14336), (14336, 4096), (4096, 4096))


def shape(fmt: str, k: int, n: int, pool: int) -> list[str]:
    return ["--format", fmt, "--epilogue", "none", "--k", str(k), "--n", str(n), "--pool", str(pool)]


def pool_by_size(k: int, n: int) -> int:
    return 32 if k * n < 2**25 else 8


def gate_up(fmt: str, k: int, n: int, pool: int) -> list[str]:
    """Harness arguments of a SwiGLU gate/up of two k -> n weights at 1-32 rows."""
    return ["--format", fmt, "--k", str(k), "--n", str(n), "--pool", str(pool), "--rows", "1,4,8,16,32"]


def layout_pair(name: str, args: list[str], tag: str) -> dict:
    """One product in the op's column layout and in TILES (--layout 0), each in its own file with
    the default settings: <name>_<tag> and <name>_tiles_<tag>, compared across files."""
    return {
        f"{name}{part}_{tag}": ([*args, *extra], ["default="])
        for part, extra in (("", []), ("_tiles", ["--layout", "0"]))
    }


def format_suite(tag: str, variants: list[str], fmts, shapes, rows: str, pool=pool_by_size) -> dict:
    """Each format's fused gate/up (quantized formats) and its products of `shapes` ((K, N)),
    at `rows`, named <format>_<shape>_<tag>."""
    suite = {}
    for fmt in fmts:
        if fmt != "bf16":
            suite[f"{fmt}_gateup_fused_{tag}"] = (["--format", fmt, "--pool", "4", "--rows", rows], variants)
        for k, n in shapes:
            suite[f"{fmt}_{k}x{n}_{tag}"] = ([*shape(fmt, k, n, pool(k, n)), "--rows", rows], variants)
    return suite


def fused(fmt: str, rows: str, pool: int = 4, *extra: str) -> list[str]:
    """Harness arguments of the Llama gate/up with SwiGLU (4096 -> 2 x 14336, the harness's default)."""
    return ["--format", fmt, "--pool", str(pool), "--rows", rows, *extra]


# name: (harness arguments, variants) per file; the first variant is each file's default and reference.
SUITES: dict[str, dict[str, tuple[list[str], list[str]]]] = {}

# swizzle: swizzled ring rows (SWIZZLE=1, unpadded) and with them 3 stages in 55 KB (4 blocks of
# 4 warps an SM) or 4 stages at 3 blocks an SM; h200-kernel-ab-2026-11-29-swizzle-tiles.json
SWIZZLE = [
    "default=",
    f"sw={E}SWIZZLE=1",
    f"sw3={E}SWIZZLE=1;{E}STAGES=3;{E}SMEM=55",
    f"sw3_nomath={E}SWIZZLE=1;{E}STAGES=3;{E}SMEM=55;HACK=nomath",
    "nomath=HACK=nomath",
    f"sw4mb3={E}SWIZZLE=1;{E}STAGES=4;{E}SMEM=73;{E}MINBLOCKS=3",
]
SUITES["swizzle"] = {}
for fmt, pool in (("q4g64", 32), ("q8g64", 16)):
    SUITES["swizzle"][f"{fmt}_gateup_fused"] = (fused(fmt, "1,8,16,32", pool // 4), SWIZZLE)
    for k, n in LLAMA_SHAPES:
        args = shape(fmt, k, n, pool * (4 if k * n < 2**25 else 1))
        SUITES["swizzle"][f"{fmt}_{k}x{n}"] = ([*args, "--rows", "1,8,16,32"], SWIZZLE)
# tiles4: at 16 rows x's loads take about a fifth of a 4-bit kernel's time (nox); 4 tiles per
# block halve x's loads per weight byte, in 80 KB rings; h200-kernel-ab-2026-11-29-swizzle-tiles.json
TILES4 = ["default=", f"t4={E}TILES=4;{E}SMEM=96", f"t4mb2={E}TILES=4;{E}SMEM=96;{E}MINBLOCKS=2", "nox=HACK=nox"]
SUITES["tiles4"] = {
    f"{fmt}_4096x14336_t4": ([*shape(fmt, 4096, 14336, pool), "--rows", "16"], TILES4)
    for fmt, pool in (("q4g64", 32), ("q8g64", 16))
}
# tiles1: one tile per block at 16-32 rows (fewer registers, 3-4 blocks an SM) against two;
# h200-kernel-ab-2026-11-29-swizzle-tiles.json
TILES1 = ["default=", f"t1={E}TILES=1", f"t1mb3={E}TILES=1;{E}MINBLOCKS=3", f"t1mb4={E}TILES=1;{E}MINBLOCKS=4"]
SUITES["tiles1"] = {
    f"{fmt}_4096x14336_t1": ([*shape(fmt, 4096, 14336, pool), "--rows", "16,32"], TILES1)
    for fmt, pool in (("q4g64", 32), ("q8g64", 16))
}
SUITES["tiles1"] |= {
    f"{fmt}_gateup_fused_t1": (fused(fmt, "16,32", pool // 4), TILES1) for fmt, pool in (("q4g64", 32), ("q8g64", 16))
}
# sector: the sector layout of group 128 (schedule.cuda_mma: group 128 takes it, group 64 not)
# against the other layout; h200-kernel-ab-2026-11-29-sector-strided.json
SUITES["sector"] = {}
for fmt, flip in (("q4g64", 1), ("q8g64", 1), ("q4g128", 0), ("q8g128", 0)):
    variants = ["default=", f"flip={E}XSECTOR={flip}"]
    SUITES["sector"][f"{fmt}_gateup_fused_sector"] = (fused(fmt, "1,4,8,16,32"), variants)
    for k, n in ((4096, 14336), (14336, 4096), (1536, 8960), (8960, 1536)):
        args = shape(fmt, k, n, 16 if k * n < 2**25 else 8)
        SUITES["sector"][f"{fmt}_{k}x{n}_sector"] = ([*args, "--rows", "1,4,8,16,32"], variants)
# strided: the strided ring copies (at 32 rows, and at 3 blocks an SM for the 16-row 4-bit
# group-64 gate/up) against a pointer per piece; h200-kernel-ab-2026-11-29-sector-strided.json
STRIDED = ["default=", f"per_piece={E}STRIDED=0", f"strided={E}STRIDED=1"]
SUITES["strided"] = {
    f"{fmt}_gateup_fused_strided": (fused(fmt, "1,8,16,32"), STRIDED) for fmt in ("q4g64", "q8g64", "q4g128")
}
for fmt in ("q4g64", "q8g64", "bf16"):
    for k, n in ((4096, 14336), (14336, 4096), (1536, 8960)):
        args = shape(fmt, k, n, 16 if k * n < 2**25 else 8)
        SUITES["strided"][f"{fmt}_{k}x{n}_strided"] = ([*args, "--rows", "1,8,16,32"], STRIDED)
# row-blocks: at 16-32 rows, a smaller row bucket's kernel (fewer registers, more blocks an SM)
# over several row blocks (rows keep their bits: the K split is the spec's), its grid in the
# default order or with a weight tile's row blocks adjacent (rowsfirst: the second reads the tile
# from L2); h200-kernel-ab-2026-11-29-one-wave-wide-ring.json
ROWBLOCKS = ["default=", "b8=BUCKET=8", "b8r=BUCKET=8;HACK=rowsfirst", "b16=BUCKET=16", "b16r=BUCKET=16;HACK=rowsfirst"]
SUITES["row-blocks"] = {}
for fmt in ("q4g64", "q8g64", "q4g128", "q8g128"):
    for k, n in ((4096, 14336), (14336, 4096)):
        SUITES["row-blocks"][f"{fmt}_{k}x{n}_rowblocks"] = ([*shape(fmt, k, n, 8), "--rows", "16,32"], ROWBLOCKS)
    SUITES["row-blocks"][f"{fmt}_gateup_fused_rowblocks"] = (fused(fmt, "16,32"), ROWBLOCKS)
# waves: grids just over 4 blocks an SM at 1-8 rows (1536 -> 8960: 560 blocks for 528 places) at
# 5 blocks an SM (the ONE_WAVE layout); 8-bit group 128 (a stage of 256 bytes a column leaves one
# tile in 48 KB) with 2 tiles in dynamic shared memory or 3 stages;
# h200-kernel-ab-2026-11-29-one-wave-wide-ring.json
WAVES = ["default=", f"mb5={E}MINBLOCKS=5"]
Q8G128 = [
    "default=",
    f"t2={E}TILES=2;{E}SMEM=72",
    f"t2mb3={E}TILES=2;{E}SMEM=72;{E}MINBLOCKS=3",
    f"s3={E}STAGES=3;{E}SMEM=54",
]
SUITES["waves"] = {}
for fmt in ("q4g64", "q8g64", "q4g128", "q8g128"):
    SUITES["waves"][f"{fmt}_1536x8960_waves"] = ([*shape(fmt, 1536, 8960, 16), "--rows", "1,4,8"], WAVES)
    SUITES["waves"][f"{fmt}_gateup1536_fused_waves"] = (fused(fmt, "1,4,8", 8, "--k", "1536", "--n", "8960"), WAVES)
for k, n in ((4096, 14336), (1536, 8960), (14336, 4096)):
    args = [*shape("q8g128", k, n, 16 if k * n < 2**25 else 8), "--rows", "1,8,16,32"]
    SUITES["waves"][f"q8g128_{k}x{n}_tiles"] = (args, Q8G128)
SUITES["waves"]["q8g128_gateup_fused_tiles"] = (fused("q8g128", "1,8,16,32"), Q8G128)
# late: where in a stage the loads are issued (LATE=1: each chunk's shared loads just before its
# math; 2: also half the stage's x loads after the first chunks' math), alone and with strided
# copies or 3 blocks an SM; h200-kernel-ab-2026-11-29-one-wave-wide-ring.json
LATE = [
    "default=",
    f"late1={E}LATE=1",
    f"late2={E}LATE=2",
    f"late2s={E}LATE=2;{E}STRIDED=1",
    f"late2mb3={E}LATE=2;{E}MINBLOCKS=3",
]
SUITES["late"] = {}
for fmt in ("q4g64", "q8g64", "q4g128", "q8g128"):
    for k, n in LLAMA_SHAPES:
        args = shape(fmt, k, n, 16 if k * n < 2**25 else 8)
        SUITES["late"][f"{fmt}_{k}x{n}_late"] = ([*args, "--rows", "1,8,16,32"], LATE)
for fmt in ("q4g64", "q8g64"):
    SUITES["late"][f"{fmt}_gateup_fused_late"] = (fused(fmt, "1,8,16,32"), LATE)
# xshare: at 16-32 rows, the shared-x kernel (lower/mma_xshare.py: C warps a block, each owning
# its columns over all of K, x staged once a block; the K-split kernel's bits) with 2, 4 or 8
# warps, 2-4 stages, 2 tiles a warp, register caps; xshare-stages: 2 stages and 2 tiles a warp;
# h200-kernel-ab-2026-11-30-xshare-row-pad.json
XSHARE = [
    "default=",
    f"xs2={E}XSHARE=2",
    f"xs4={E}XSHARE=4",
    f"xs8={E}XSHARE=8",
    f"xs4s2={E}XSHARE=4;{E}STAGES=2",
    f"xs4s4={E}XSHARE=4;{E}STAGES=4",
    f"xs4t2={E}XSHARE=4;{E}TILES=2",
    f"xs4mb3={E}XSHARE=4;{E}MINBLOCKS=3",
    f"xs2mb4={E}XSHARE=2;{E}MINBLOCKS=4",
]
SUITES["xshare"] = format_suite(
    "xshare", XSHARE, ("q4g64", "q8g64", "q4g128"), ((4096, 14336),), "16,32", lambda k, n: 8
)
XSHARE2 = [
    "default=",
    f"xs4s2={E}XSHARE=4;{E}STAGES=2",
    f"xs2t2={E}XSHARE=2;{E}TILES=2",
    f"xs2t2s2={E}XSHARE=2;{E}TILES=2;{E}STAGES=2",
    f"xs4t2s2={E}XSHARE=4;{E}TILES=2;{E}STAGES=2",
    f"xs8s2={E}XSHARE=8;{E}STAGES=2",
]
SUITES["xshare-stages"] = format_suite(
    "xshare2", XSHARE2, ("q4g64", "q8g64", "q4g128", "q8g128"), ((4096, 14336),), "16,32", lambda k, n: 8
)
# row-pad: ring rows padded by the load width (schedule.cuda_mma row_pad: 32 bytes for 8-byte
# loads, 64 dense; bank conflicts of 16-byte padding) against 16 bytes (BANKPAD=0) and the
# lanes' bytes (BANKPAD=1); h200-kernel-ab-2026-11-30-xshare-row-pad.json
SUITES["row-pad"] = format_suite(
    "bankpad",
    ["default=", f"bankpad={E}BANKPAD=1"],
    ("q4g64", "q8g64", "q4g128", "q8g128", "bf16"),
    LLAMA_SHAPES,
    "1,4,8,16,32",
)
SUITES["row-pad"] |= format_suite(
    "pad",
    ["default=", f"pad16={E}BANKPAD=0"],
    ("q4g64", "q8g64", "q4g128", "q8g128", "bf16"),
    (*LLAMA_SHAPES, (1536, 8960), (8960, 1536)),
    "1,4,8,16,32",
)
# retune: with padded rows, the dense ring's depth and blocks an SM (3-4 stages in dynamic shared
# memory, 16 warps) and, for 4-bit at 16-32 rows, LATE=2 and 3 blocks an SM;
# h200-kernel-ab-2026-11-30-xshare-row-pad.json
RETUNE_DENSE = [
    "default=",
    f"s3={E}STAGES=3;{E}SMEM=80",
    f"s4={E}STAGES=4;{E}SMEM=100",
    f"w16={E}WARPS=16;{E}SMEM=100",
    f"mb2={E}MINBLOCKS=2",
]
RETUNE_Q4 = ["default=", f"late2={E}LATE=2", f"mb3={E}MINBLOCKS=3", f"late2mb3={E}LATE=2;{E}MINBLOCKS=3"]
SUITES["retune"] = {}
for k, n in LLAMA_SHAPES:
    args = shape("bf16", k, n, 4 if k * n > 2**25 else 16)
    SUITES["retune"][f"bf16_{k}x{n}_retune"] = ([*args, "--rows", "1,4,8,16,32"], RETUNE_DENSE)
for fmt in ("q4g64", "q8g128"):
    SUITES["retune"][f"{fmt}_4096x14336_retune"] = ([*shape(fmt, 4096, 14336, 8), "--rows", "16,32"], RETUNE_Q4)
    SUITES["retune"][f"{fmt}_gateup_fused_retune"] = (fused(fmt, "16"), RETUNE_Q4)
# dense-ring: the dense rings of the ring rule (schedule.cuda_mma ring_rule) against the 48 KB
# ring; h200-kernel-ab-2026-11-30-xshare-row-pad.json
SUITES["dense-ring"] = format_suite(
    "ring",
    ["default=", f"ring48={E}SMEM=48"],
    ("bf16",),
    LLAMA_SHAPES,
    "1,2,4,8,16,32",
    lambda k, n: 4 if k * n > 2**25 else 16,
)
# q8-pad: 8-bit group 64 with rows padded by its 16-byte loads' 64 bytes, given the shared memory
# that keeps its stages; h200-kernel-ab-2026-11-30-xshare-row-pad.json
Q8PAD = [
    "default=",
    f"bp1={E}BANKPAD=1",
    f"bp1s64={E}BANKPAD=1;{E}SMEM=64",
    f"bp1s80={E}BANKPAD=1;{E}SMEM=80",
    f"s64={E}SMEM=64",
]
SUITES["q8-pad"] = format_suite(
    "q8pad", Q8PAD, ("q8g64",), LLAMA_SHAPES, "1,4,8,16,32", lambda k, n: 16 if k * n < 2**25 else 8
)
# small-rows: 1-8 rows of 4/8-bit group 64: stages of 8 groups, 3-4 stages in dynamic shared
# memory, 5 blocks an SM, one tile; h200-kernel-ab-2026-11-30-xshare-row-pad.json
SMALL = [
    "default=",
    f"g8={E}GROUPS=8",
    f"s3={E}STAGES=3;{E}SMEM=64",
    f"s4={E}STAGES=4;{E}SMEM=80",
    f"mb5={E}MINBLOCKS=5",
    f"t1={E}TILES=1",
]
SUITES["small-rows"] = format_suite("small", SMALL, ("q4g64", "q8g64"), LLAMA_SHAPES[:2], "1,4,8", lambda k, n: 8)
# width-swizzle: unpadded ring rows with the pieces swizzled by load width (SWIZZLE=2):
# conflict-free 8- and 16-byte loads without the padding's bytes;
# h200-kernel-ab-2026-11-30-xshare-row-pad.json
SUITES["width-swizzle"] = format_suite(
    "swz2", ["default=", f"swz2={E}SWIZZLE=2"], ("q4g64", "q8g64", "q8g128", "bf16"), LLAMA_SHAPES, "1,4,8,16,32"
)
# q4-one-tile-stages: 4-bit one-tile products at 1-8 rows with rings of 3 stages in 64 KB;
# h200-kernel-ab-2026-11-30-q4-stages-q8g128-swiglu.json
SMALL3 = ["default=", f"s3={E}STAGES=3;{E}SMEM=64", "again="]
SUITES["q4-one-tile-stages"] = {
    name: spec
    for name, spec in format_suite(
        "small3", SMALL3, ("q4g64", "q4g128"), ((14336, 4096), (4096, 4096), (8960, 1536)), "1,2,4,8"
    ).items()
    if "fused" not in name
}
# dense-swiglu-ring: the dense rings of the ring rule (measured on single products) on the bf16
# SwiGLU gate/up against the 48 KB ring; dense-swiglu-parts: which of the dense rules (the 100 KB
# ring, the 64-byte row padding, unpadded swizzled rows) costs it at 16-32 rows;
# h200-kernel-ab-2026-11-30-q4-stages-q8g128-swiglu.json
DENSE_SWIGLU = ["default=", f"smem48={E}SMEM=48", "again="]
SUITES["dense-swiglu-ring"] = {
    "bf16_gateup_fused_dswiglu": (fused("bf16", "1,4,8,16,32"), DENSE_SWIGLU),
    "bf16_qwen_gateup_fused_dswiglu": (fused("bf16", "1,4,8,16,32", 8, "--k", "1536", "--n", "8960"), DENSE_SWIGLU),
    "bf16_4096x14336_dswiglu": ([*shape("bf16", 4096, 14336, 8), "--rows", "16,32"], DENSE_SWIGLU),
}
DENSE_SWIGLU2 = [
    "default=",
    f"smem48={E}SMEM=48",
    f"pad16={E}BANKPAD=0",
    f"smem48pad16={E}SMEM=48;{E}BANKPAD=0",
    f"swz2={E}SWIZZLE=2",
    f"smem48swz2={E}SMEM=48;{E}SWIZZLE=2",
]
SUITES["dense-swiglu-parts"] = {"bf16_gateup_fused_dswiglu2": (fused("bf16", "8,16,32"), DENSE_SWIGLU2)}
# q8-deep-rings: 8-bit weights at 1-8 rows, whose ring copies bound them (Nsight Compute: 22.2 us
# with the math, 21.9 with the copies alone, ncu/h200-2026-11-30-q8g64-r1-4096x14336*.txt): deeper
# rings, and K over 8 warps (another sum order); h200-kernel-ab-2026-11-30-q4-stages-q8g128-swiglu.json
Q8DEEP = [
    "default=",
    f"s3={E}STAGES=3;{E}SMEM=64",
    f"s4={E}STAGES=4;{E}SMEM=80",
    f"w8={E}WARPS=8;{E}MINBLOCKS=2",
    f"w8s3={E}WARPS=8;{E}STAGES=3;{E}SMEM=110;{E}MINBLOCKS=2",
    "again=",
]
SUITES["q8-deep-rings"] = format_suite("q8deep", Q8DEEP, ("q8g64", "q8g128"), ((4096, 14336), (4096, 4096)), "1,4,8")
# q8g128-swiglu-ring: the 8-bit group-128 SwiGLU gate/up on a staged ring in dynamic shared memory
# (its 2-stage rings exceed 48 KB) against the direct loads;
# h200-kernel-ab-2026-11-30-q4-stages-q8g128-swiglu.json
Q8G128_SWIGLU = ["default=", f"smem76={E}SMEM=76", f"smem80={E}SMEM=80", f"smem100={E}SMEM=100", "again="]
SUITES["q8g128-swiglu-ring"] = {
    "q8g128_gateup_fused_q8sw": (fused("q8g128", "1,4,8,16,32"), Q8G128_SWIGLU),
    "q8g128_qwen_gateup_fused_q8sw": (fused("q8g128", "1,4,8,16,32", 8, "--k", "1536", "--n", "8960"), Q8G128_SWIGLU),
}
# q8-groups: 8-bit weights at 1-8 rows with longer contiguous runs a stage (GROUPS=4) in the
# shared memory that keeps their tiles and stages, and the warps taking K in interleaved stages
# (INTERLEAVE=1; another sum order); h200-kernel-ab-2026-11-30-one-tile-wide-short-k.json
Q8GROUPS = [
    "default=",
    f"g4={E}GROUPS=4",
    f"g4s64={E}GROUPS=4;{E}SMEM=64",
    f"g4s80={E}GROUPS=4;{E}SMEM=80",
    f"il={E}INTERLEAVE=1",
    f"ilg4s80={E}INTERLEAVE=1;{E}GROUPS=4;{E}SMEM=80",
    "again=",
]
SUITES["q8-groups"] = format_suite("q8groups", Q8GROUPS, ("q8g64", "q8g128"), LLAMA_SHAPES, "1,4,8")
# cublas: the dense kernels against cuBLAS's cublasGemmEx (what PyTorch's F.linear calls) in the
# same harness, every benchmark shape at 1-32 rows; h200-kernel-ab-2026-11-30-one-tile-wide-short-k.json
CUBLAS = ["default=", "cublas=", "again="]
SUITES["cublas"] = {
    f"bf16_{k}x{n}_cublas": ([*shape("bf16", k, n, 4 if k * n > 2**25 else 16), "--rows", "1,2,4,8,16,32"], CUBLAS)
    for k, n in (*LLAMA_SHAPES, (1536, 8960), (8960, 1536))
}
# qwen-dense: the bf16 Qwen gate/up (1536 -> 8960, ONE_WAVE) with fewer warps a block (a longer K
# range each; another sum order), a deeper ring, and the TILES layout in its own file;
# shallow-dense: 2 warps a block on other dense products over a short K (ONE_TILE) and the SwiGLU
# form; h200-kernel-ab-2026-11-30-one-tile-wide-short-k.json
QWEN_DENSE = [
    "default=",
    f"w4={E}WARPS=4",
    f"w2={E}WARPS=2",
    f"w4s3={E}WARPS=4;{E}STAGES=3;{E}SMEM=80",
    f"w2s4={E}WARPS=2;{E}STAGES=4;{E}SMEM=80",
    "cublas=",
    "again=",
]
QWEN_ARGS = [*shape("bf16", 1536, 8960, 16), "--rows", "1,2,4,8,16,32"]
SUITES["qwen-dense"] = {
    "bf16_1536x8960_qwendense": (QWEN_ARGS, QWEN_DENSE),
    "bf16_1536x8960_tiles_qwendense": ([*QWEN_ARGS, "--layout", "0"], ["default=", f"w4={E}WARPS=4", "cublas="]),
}
SHALLOW = ["default=", f"w2={E}WARPS=2", f"w4s3={E}WARPS=4;{E}STAGES=3;{E}SMEM=80", "cublas="]
SUITES["shallow-dense"] = {
    "bf16_qwen_gateup_fused_shallow": (fused("bf16", "1,2,4,8,16,32", 8, "--k", "1536", "--n", "8960"), SHALLOW[:-1]),
    **{
        f"bf16_{k}x{n}_shallow": ([*shape("bf16", k, n, pool_by_size(k, n)), "--rows", "1,2,4,8,16,32"], SHALLOW)
        for k, n in ((2048, 8192), (3072, 8192), (1536, 1536), (2048, 2048))
    },
}
# deep-ring: the dense deep ring (3 stages in 80 KB at 1-4 rows in ONE_TILE and DEEP: 2 blocks an
# SM) against the 48 KB ring on one-tile grids of 512-1184 blocks, and on the 256-block grids it
# was chosen on; h200-kernel-ab-2026-11-30-one-tile-wide-short-k.json
DEEPRING = ["default=", f"smem48={E}SMEM=48", "again="]
SUITES["deep-ring"] = {
    f"bf16_{k}x{n}_deepring": ([*shape("bf16", k, n, pool_by_size(k, n)), "--rows", "1,2,4,8"], DEEPRING)
    for k, n in ((2048, 8192), (3072, 8192), (2048, 11008), (3584, 18944), (4096, 4096), (14336, 4096))
}
# dense-wide-blocks: wide dense products at 16-32 rows, where each block of 16-32 columns reads
# all of x again: 4 tiles in 200 KB, 2 tiles with more stages, 14336 -> 4096 in TILES beside its
# DEEP layout; h200-kernel-ab-2026-11-30-one-tile-wide-short-k.json
DENSE32 = ["default=", f"t4s200={E}TILES=4;{E}SMEM=200", f"s160={E}SMEM=160", f"s200={E}SMEM=200", "again="]
SUITES["dense-wide-blocks"] = {
    "bf16_4096x14336_dense32": ([*shape("bf16", 4096, 14336, 4), "--rows", "16,32"], DENSE32),
    "bf16_14336x4096_dense32": ([*shape("bf16", 14336, 4096, 4), "--rows", "16,32"], DENSE32),
    "bf16_14336x4096_tiles_dense32": ([*shape("bf16", 14336, 4096, 4), "--rows", "16,32", "--layout", "0"], DENSE32),
}
# shapes: the quantized kernels on other models' shapes (Llama-3.2-1B/3B, Qwen2.5-3B/7B gate/up and
# down: ONE_TILE_WIDE, ONE_TILE over many blocks, DEEP, SPREAD), and the 4-bit one-tile stages
# against 4; h200-kernel-ab-2026-11-30-one-tile-wide-short-k.json
SHAPES_Q = ["default=", f"s4={E}STAGES=4", "again="]
OTHER_SHAPES = ((2048, 8192), (8192, 2048), (3072, 8192), (8192, 3072), (2048, 11008), (3584, 18944), (18944, 3584))
SUITES["shapes"] = {
    f"{fmt}_{k}x{n}_shapes": ([*shape(fmt, k, n, pool_by_size(k, n)), "--rows", "1,4,8,16,32"], SHAPES_Q)
    for fmt in ("q4g64", "q8g64")
    for k, n in OTHER_SHAPES
}
# short-k: single products over a K just short of SHORT_K with wide outputs in the op's layout and
# in TILES (2 tiles a block, the same K split), files per layout; short-k-swiglu: the same for
# groups 128 and the SwiGLU gate/up (QUANTIZED_SHORT_K); h200-kernel-ab-2026-11-30-one-tile-wide-short-k.json
SUITES["short-k"] = {}
for fmt in ("q4g64", "q8g64", "bf16"):
    for k, n in ((3584, 18944), (3072, 8192 + 4096), (2048, 11008)):
        SUITES["short-k"] |= layout_pair(
            f"{fmt}_{k}x{n}", [*shape(fmt, k, n, pool_by_size(k, n)), "--rows", "1,4,8,16,32"], "shortk"
        )
SUITES["short-k-swiglu"] = {}
for fmt in ("q4g64", "q8g64", "q4g128", "q8g128"):
    for k, n in ((2048, 11008), (3584, 18944)):
        pool = 4 if k * n > 2**25 else 8
        SUITES["short-k-swiglu"] |= layout_pair(f"{fmt}_{k}x{n}_swiglu", gate_up(fmt, k, n, pool), "shortk2")
        if fmt.endswith("g128"):
            args = [*shape(fmt, k, n, pool_by_size(k, n)), "--rows", "1,4,8,16,32"]
            SUITES["short-k-swiglu"] |= layout_pair(f"{fmt}_{k}x{n}", args, "shortk2")
# gateup-layout: the SwiGLU gate/up of Llama-3.2-1B/3B (2048 / 3072 -> 2 x 8192, ONE_TILE_WIDE: one
# tile, 512 blocks) against TILES, files per layout; h200-kernel-ab-2026-11-30-one-tile-wide-short-k.json
SUITES["gateup-layout"] = {}
for fmt in ("q4g64", "q8g64", "q4g128", "bf16"):
    for k in (2048, 3072):
        SUITES["gateup-layout"] |= layout_pair(f"{fmt}_{k}x8192_swiglu", gate_up(fmt, k, 8192, 8), "gateup")
# balance: at 1-8 rows the Llama gate/up product (TILES: 448 blocks of 2 tiles, 4 an SM) gives 52
# SMs 4 blocks and 80 SMs 3; controls over 16896 columns (4 on every SM) and 12672 (3 on every SM),
# candidates one tile a block with 7-8 blocks an SM; at 16-32 rows what the MMAs summing x per group
# cost (noxsum) beside nox / nomath; h200-kernel-ab-2026-11-30-bucket-layout.json
BALANCE = ["default=", "again="]
TILE1 = ["default=", *(f"mb{b}s{s}={E}MINBLOCKS={b};{E}STAGES={s}" for s in (2, 3) for b in (7, 8))]
SUITES["balance"] = {}
for fmt in ("q8g64", "q4g64"):
    args = [*shape(fmt, 4096, 14336, 8), "--rows", "1,8"]
    SUITES["balance"][f"{fmt}_4096x14336_balance"] = (args, BALANCE)
    SUITES["balance"][f"{fmt}_4096x14336_tile1_balance"] = ([*args, "--layout", "1"], TILE1)
    for n in (16896, 12672):
        SUITES["balance"][f"{fmt}_4096x{n}_balance"] = ([*shape(fmt, 4096, n, 8), "--rows", "1,8"], BALANCE)
    SUITES["balance"][f"{fmt}_4096x14336_xsum"] = (
        [*shape(fmt, 4096, 14336, 8), "--rows", "16,32"],
        ["default=", "noxsum=HACK=noxsum", "nox=HACK=nox", "nomath=HACK=nomath"],
    )
# k-half: blocks of half a column block's K (896 blocks, 6-7 an SM), timed without the fix-up that
# would add the halves; h200-kernel-ab-2026-11-30-bucket-layout.json
KHALF = ["default=", "khalf=HACK=khalf", "again="]
SUITES["k-half"] = {
    f"{fmt}_4096x14336_khalf": ([*shape(fmt, 4096, 14336, 8), "--rows", "1,8,16,32"], KHALF)
    for fmt in ("q4g64", "q8g64", "q4g128", "bf16")
}
SUITES["k-half"] |= {f"{fmt}_gateup_fused_khalf": (fused(fmt, "1,8,16"), KHALF) for fmt in ("q4g64", "q8g64")}
# small-tiles: TILES (two tiles a block, the same K ranges, so the same sums) against each one-tile
# layout on small single products, files per layout, at 8-32 rows; small-tiles-rows: the same at
# 1-4 rows and for the dense products of those shapes (cuda_layouts.bucket_layout);
# h200-kernel-ab-2026-11-30-bucket-layout.json
SUITES["small-tiles"] = {}
for fmt in ("q8g64", "q4g64", "q8g128"):
    for k, n in ((3072, 8192), (2048, 8192), (1536, 8960), (4096, 4096)):
        args = [*shape(fmt, k, n, pool_by_size(k, n)), "--rows", "8,16,32"]
        SUITES["small-tiles"] |= layout_pair(f"{fmt}_{k}x{n}", args, "smalltiles")
SUITES["small-tiles-rows"] = {}
for fmt, rows in (("q8g64", "1,2,4"), ("q4g64", "1,2,4"), ("bf16", "1,4,8,16,32")):
    for k, n in ((3072, 8192), (2048, 8192)):
        args = [*shape(fmt, k, n, pool_by_size(k, n)), "--rows", rows]
        SUITES["small-tiles-rows"] |= layout_pair(f"{fmt}_{k}x{n}", args, "smalltiles2")
# row-blocks-32: at 32 rows x's loads take half of the 4-bit kernel's time (each of the 448 blocks
# loads all 32 rows of x for its 32 columns); blocks of 64 columns and 16 rows (the 16-row kernel
# with 4 tiles over 2 row blocks) halve them and load each weight twice, rowsfirst putting a
# weight's two row blocks side by side (the second finds it in L2);
# h200-kernel-ab-2026-11-30-bucket-layout.json
ROWBLOCKS32 = [
    "default=",
    f"b16t4={E}TILES=4;{E}SMEM=100;BUCKET=16",
    f"b16t4rf={E}TILES=4;{E}SMEM=100;BUCKET=16;HACK=rowsfirst",
    f"b16t4s64rf={E}TILES=4;{E}SMEM=64;BUCKET=16;HACK=rowsfirst",
    "again=",
]
SUITES["row-blocks-32"] = {
    f"{fmt}_4096x14336_rowblocks": ([*shape(fmt, 4096, 14336, 8), "--rows", "32"], ROWBLOCKS32)
    for fmt in ("q4g64", "q8g64", "bf16")
}
# dense-xshare: bf16 at 16-32 rows of the wide products, where each block of 32 columns reads all of
# x again: the shared-x kernel reads x once a block of C x 16 T columns, with the K-split kernel's
# sums; h200-kernel-ab-2026-11-30-dense-xshare-groups2.json
DENSE_XSHARE = [
    "default=",
    f"xs4={E}XSHARE=4",
    f"xs4s2={E}XSHARE=4;{E}STAGES=2",
    f"xs8s2={E}XSHARE=8;{E}STAGES=2",
    f"xs4t2s2={E}XSHARE=4;{E}TILES=2;{E}STAGES=2",
    f"xs8t2s2={E}XSHARE=8;{E}TILES=2;{E}STAGES=2",
    "cublas=",
    "again=",
]
SUITES["dense-xshare"] = {
    f"bf16_{k}x{n}_densexshare": ([*shape("bf16", k, n, 4), "--rows", "16,32"], DENSE_XSHARE) for k, n in LLAMA_SHAPES
}
# groups2: at 16-32 rows the staged kernels hold x for a whole stage in registers (the 4-bit
# group-64 kernel: 178 registers at 16 rows, 255 at 32); stages of 2 groups (127 / 202 registers,
# the same sums) with 2-4 stages; h200-kernel-ab-2026-11-30-dense-xshare-groups2.json
GROUPS2 = ["default=", f"g2={E}GROUPS=2", f"g2s3={E}GROUPS=2;{E}STAGES=3", f"g2s4={E}GROUPS=2;{E}STAGES=4", "again="]
SUITES["groups2"] = format_suite("groups2", GROUPS2, ("q4g64", "q8g64", "q4g128", "q8g128"), LLAMA_SHAPES, "16,32")

# staged-lowbit: the staged ring of the 2, 3, 5 and 6-bit weights (STAGED_LOWBIT=1, opt-in) against
# the direct loads the rules take for them, groups 32 and 64 (group 128 never stages in real calls);
# staged-mx: the microscaled modes' staged ring (the rules' default) against their direct loads
# (STAGED=0); h200-kernel-ab-2026-12-02-staged-lowbit-mx.json
SUITES["staged-lowbit"] = format_suite(
    "lowbit",
    ["default=", f"lowbit={E}STAGED_LOWBIT=1", "again="],
    tuple(f"q{b}g{g}" for b in (2, 3, 5, 6) for g in (64, 32)),
    LLAMA_SHAPES,
    "1,4,8,16,32",
)
SUITES["staged-mx"] = format_suite(
    "mxring", ["default=", f"direct={E}STAGED=0", "again="], ("mxfp4", "mxfp8", "nvfp4"), LLAMA_SHAPES, "1,4,8,16,32"
)


def write(out: Path, suite: str) -> list[Path]:
    """The suite's harness files in `out` (one generated_harness.py run each)."""
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for name, (args, variants) in SUITES[suite].items():
        path = out / f"{name}.cu"
        cmd = [sys.executable, str(HARNESS), str(path), *args]
        for v in variants:
            cmd += ["--variant", v]
        print(name, flush=True)
        subprocess.run(cmd, check=True)
        files.append(path)
    return files


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the folder to write the .cu files into")
    ap.add_argument("suite", choices=list(SUITES))
    args = ap.parse_args()
    write(args.out, args.suite)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
