"""Generate the standing set of MLX-free A/B harnesses (bench/cuda_probe/generated_harness.py)
into a folder git ignores, to carry to the GPU machine and run with run_ab.sh:

    python bench/cuda_probe/suite.py bench/cuda_probe/ab [CALL]   # CALL: a key of SUITES (8, ..., s10-strided), default the last
    # device, carrying bench/cuda_probe/ab:  bash bench/cuda_probe/run_ab.sh $OUT bench/cuda_probe/ab/*.cu

Each file compares the default kernels of one shape and format with alternatives
(candidates, or the settings the defaults replaced); the first variant of a file is
its reference for rel_diff.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HARNESS = Path(__file__).with_name("generated_harness.py")
E = "MLX_METILE_CUDA_MMA_"


def shape(fmt: str, k: int, n: int, pool: int) -> list[str]:
    return ["--format", fmt, "--epilogue", "none", "--k", str(k), "--n", str(n), "--pool", str(pool)]


def pool_by_size(k: int, n: int) -> int:
    return 32 if k * n < 2**25 else 8


def gate_up(fmt: str, k: int, n: int, pool: int) -> list[str]:
    """Harness arguments of a SwiGLU gate/up of two k -> n weights at 1-32 rows."""
    return ["--format", fmt, "--k", str(k), "--n", str(n), "--pool", str(pool), "--rows", "1,4,8,16,32"]


def layout_pair(name: str, args: list[str], call: str) -> dict:
    """One product in the op's column layout and in TILES (--layout 0), each in its own file with
    the default settings: <name>_<call> and <name>_tiles_<call>, compared across files."""
    return {
        f"{name}{tag}_{call}": ([*args, *extra], ["default="])
        for tag, extra in (("", []), ("_tiles", ["--layout", "0"]))
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


# name: (harness arguments, variants); the first variant is each file's default and reference.
# The questions of session 7, answered in bench/results/h200-ab-2026-11-29-session7.json (earlier
# sessions' suites and answers: the other h200-ab-*.json). SUITES holds calls 8-10 (below); the
# variant lists of calls 3-7 are kept for re-running them. Call 1: where a staged kernel's
# time goes (diagnostics.py: nox = x never loaded, nomath = the ring's copies alone), and whether
# loading x a stage ahead pays (a knob removed after it). Call 2: deeper rings with fewer warps
# per block or one column tile. Call 3: on narrow products, whose grids leave an SM 2 blocks,
# more warps per block splitting K (w8, w16; MINBLOCKS so their registers are not capped for 4
# blocks per SM), with 2 or 4 stages.
WIDE_K = [
    "default=",
    "nomath=HACK=nomath",
    f"w8={E}WARPS=8;{E}MINBLOCKS=2",
    f"w8s4={E}WARPS=8;{E}STAGES=4;{E}SMEM=84;{E}MINBLOCKS=2",
    f"w16={E}WARPS=16;{E}SMEM=84;{E}MINBLOCKS=1",
]
# Call 4: the same at 16 and 32 rows, where the kernels hold 150-255 registers (w8mb1: no cap)
WIDE_K_ROWS = ["default=", f"w8={E}WARPS=8;{E}MINBLOCKS=2", f"w8mb1={E}WARPS=8;{E}MINBLOCKS=1", WIDE_K[-1]]
# Call 5: the SPREAD layout these answers led to (lower_mma_staged.column_layout), as the new
# default, against the warps it replaced (4 for 4/8-bit weights, 8 dense) on 8960 -> 1536.
SPREAD = ["default=", f"w4={E}WARPS=4", f"w8={E}WARPS=8"]
# Call 6: the fused gate/up kernels fill 896 blocks of 4 warps (1.7 waves of 4 blocks per SM):
# 2 warps per block with 2-3 stages (one wave), and 3 blocks per SM at 16 rows (mb3).
GATEUP = [
    "default=",
    f"w2s2={E}WARPS=2;{E}TILES=1;{E}STAGES=2",
    f"w2s3={E}WARPS=2;{E}TILES=1;{E}STAGES=3",
    f"mb3={E}MINBLOCKS=3",
]
# Call 7: the DEEP layout (lower_mma_staged.column_layout: K in 8 ranges, 8 warps at up to 8
# rows, 4 warps of two ranges each above) as the new default, against the 4 warps it replaced.
DEEP = ["default=", f"w4={E}WARPS=4"]
# Calls 8-10 are answered in bench/results/h200-ab-2026-11-29-session8.json.
# Call 8: swizzled rings (SWIZZLE=1, rows unpadded) and with them 3 stages in 55 KB, which
# still lets 4 blocks of 4 warps share an SM, or 4 stages with 3 blocks per SM.
SWIZZLE = [
    "default=",
    f"sw={E}SWIZZLE=1",
    f"sw3={E}SWIZZLE=1;{E}STAGES=3;{E}SMEM=55",
    f"sw3_nomath={E}SWIZZLE=1;{E}STAGES=3;{E}SMEM=55;HACK=nomath",
    "nomath=HACK=nomath",
    f"sw4mb3={E}SWIZZLE=1;{E}STAGES=4;{E}SMEM=73;{E}MINBLOCKS=3",
]
# Call 9: at 16 rows, x (loaded per warp from L1/L2, 2x the weight bytes at 16 rows) took about
# 5 of 25 us on 4-bit 4096 -> 14336 (call 1, nox): 4 tiles per block halve x's loads per weight
# byte; their rings need 80 KB (SMEM=96, dynamic).
TILES4 = ["default=", f"t4={E}TILES=4;{E}SMEM=96", f"t4mb2={E}TILES=4;{E}SMEM=96;{E}MINBLOCKS=2", "nox=HACK=nox"]
SUITE_TILES4 = {
    f"{fmt}_4096x14336_t4": ([*shape(fmt, 4096, 14336, pool), "--rows", "16"], TILES4)
    for fmt, pool in (("q4g64", 32), ("q8g64", 16))
}
# Call 10: at 16 rows the two-tile kernels hold 163-178 registers (2 blocks, 8 warps per SM; Nsight
# Compute, session 7: issue slots 27% busy, DRAM 29%, L2 34% - latency-bound). One tile per block
# (tiles move loads only, so a row bucket may differ) holds fewer, letting 3-4 blocks share an SM.
TILES1 = [
    "default=",
    f"t1={E}TILES=1",
    f"t1mb3={E}TILES=1;{E}MINBLOCKS=3",
    f"t1mb4={E}TILES=1;{E}MINBLOCKS=4",
]
SUITE_TILES1 = {
    f"{fmt}_4096x14336_t1": ([*shape(fmt, 4096, 14336, pool), "--rows", "16,32"], TILES1)
    for fmt, pool in (("q4g64", 32), ("q8g64", 16))
}
SUITE_TILES1.update(
    {
        f"{fmt}_gateup_fused_t1": (["--format", fmt, "--pool", str(pool // 4), "--rows", "16,32"], TILES1)
        for fmt, pool in (("q4g64", 32), ("q8g64", 16))
    }
)
SUITE_SWIZZLE = {}
for fmt, pool in (("q4g64", 32), ("q8g64", 16)):
    SUITE_SWIZZLE[f"{fmt}_gateup_fused"] = (["--format", fmt, "--pool", str(pool // 4), "--rows", "1,8,16,32"], SWIZZLE)
    for k, n in ((4096, 4096), (4096, 14336), (14336, 4096)):
        args = shape(fmt, k, n, pool * (4 if k * n < 2**25 else 1))
        SUITE_SWIZZLE[f"{fmt}_{k}x{n}"] = ([*args, "--rows", "1,8,16,32"], SWIZZLE)
# Calls 11-20 (session 9, bench/results/h200-ab-2026-11-29-session9.json) tried knobs that were
# removed after them: call 11 is SUITES[11] at commit 69aa49b; calls 12-20 were generated_harness.py
# command lines, named in that file's notes.
# Session 10 (bench/results/h200-ab-2026-11-29-session10.json): calls 1-2 and 5 tried knobs that were
# removed (commits named there); calls 3-4 and 6-7 chose two rules that remain overridable, and
# these suites re-run them against the defaults they set. s10-sector: the sector layout
# (lower_mma.sector_layout: group 128 takes it, group 64 not) against the other layout.
SUITE_SECTOR = {}
for fmt, flip in (("q4g64", 1), ("q8g64", 1), ("q4g128", 0), ("q8g128", 0)):
    variants = ["default=", f"flip={E}XSECTOR={flip}"]
    SUITE_SECTOR[f"{fmt}_gateup_fused_sector"] = (["--format", fmt, "--pool", "4", "--rows", "1,4,8,16,32"], variants)
    for k, n in ((4096, 14336), (14336, 4096), (1536, 8960), (8960, 1536)):
        args = shape(fmt, k, n, 16 if k * n < 2**25 else 8)
        SUITE_SECTOR[f"{fmt}_{k}x{n}_sector"] = ([*args, "--rows", "1,4,8,16,32"], variants)
# s10-strided: the strided ring copies (lower_mma_staged.strided: at 32 rows, and with 3 blocks per
# SM for the 16-row 4-bit group-64 gate/up) against a pointer per piece (STRIDED=0).
STRIDED = ["default=", f"per_piece={E}STRIDED=0", f"strided={E}STRIDED=1"]
SUITE_STRIDED = {
    f"{fmt}_gateup_fused_strided": (["--format", fmt, "--pool", "4", "--rows", "1,8,16,32"], STRIDED)
    for fmt in ("q4g64", "q8g64", "q4g128")
}
for fmt in ("q4g64", "q8g64", "bf16"):
    for k, n in ((4096, 14336), (14336, 4096), (1536, 8960)):
        args = shape(fmt, k, n, 16 if k * n < 2**25 else 8)
        SUITE_STRIDED[f"{fmt}_{k}x{n}_strided"] = ([*args, "--rows", "1,8,16,32"], STRIDED)
# Session 11. s11-rowblocks: at 16-32 rows, a smaller row bucket's kernel (fewer registers, more
# blocks per SM) launched over several row blocks (BUCKET=b; rows keep their bits: the K split is the
# spec's), with its grid in the default order or with the row blocks of a weight tile adjacent
# (HACK=rowsfirst), so that the second reads the tile from L2.
ROWBLOCKS = [
    "default=",
    "b8=BUCKET=8",
    "b8r=BUCKET=8;HACK=rowsfirst",
    "b16=BUCKET=16",
    "b16r=BUCKET=16;HACK=rowsfirst",
]
SUITE_ROWBLOCKS = {}
for fmt in ("q4g64", "q8g64", "q4g128", "q8g128"):
    for k, n in ((4096, 14336), (14336, 4096)):
        args = shape(fmt, k, n, 8)
        SUITE_ROWBLOCKS[f"{fmt}_{k}x{n}_rowblocks"] = ([*args, "--rows", "16,32"], ROWBLOCKS)
    SUITE_ROWBLOCKS[f"{fmt}_gateup_fused_rowblocks"] = (["--format", fmt, "--pool", "4", "--rows", "16,32"], ROWBLOCKS)
# s11-waves: grids just over 4 blocks per SM at 1-8 rows (1536 -> 8960: 560 blocks against 528 places)
# with 5 blocks per SM (96 registers); and for 8-bit group 128, whose stage of 256 bytes a column
# leaves one tile in 48 KB: 2 tiles in dynamic shared memory, or 3 stages.
WAVES = ["default=", f"mb5={E}MINBLOCKS=5"]
SUITE_WAVES = {}
for fmt in ("q4g64", "q8g64", "q4g128", "q8g128"):
    SUITE_WAVES[f"{fmt}_1536x8960_waves"] = ([*shape(fmt, 1536, 8960, 16), "--rows", "1,4,8"], WAVES)
    fused = ["--format", fmt, "--k", "1536", "--n", "8960", "--pool", "8", "--rows", "1,4,8"]
    SUITE_WAVES[f"{fmt}_gateup1536_fused_waves"] = (fused, WAVES)
Q8G128 = [
    "default=",
    f"t2={E}TILES=2;{E}SMEM=72",
    f"t2mb3={E}TILES=2;{E}SMEM=72;{E}MINBLOCKS=3",
    f"s3={E}STAGES=3;{E}SMEM=54",
]
for k, n in ((4096, 14336), (1536, 8960), (14336, 4096)):
    SUITE_WAVES[f"q8g128_{k}x{n}_tiles"] = (
        [*shape("q8g128", k, n, 16 if k * n < 2**25 else 8), "--rows", "1,8,16,32"],
        Q8G128,
    )
SUITE_WAVES["q8g128_gateup_fused_tiles"] = (["--format", "q8g128", "--pool", "4", "--rows", "1,8,16,32"], Q8G128)
# s11-late: where in a stage the loads are issued (MLX_METILE_CUDA_MMA_LATE): 1 each chunk's shared
# loads just before its math; 2 also half the stage's x loads after the first chunks' math (ptxas:
# 4-bit group 64 at 16 rows 178 -> 168 registers, 3 blocks per SM), alone and with strided copies.
LATE = [
    "default=",
    f"late1={E}LATE=1",
    f"late2={E}LATE=2",
    f"late2s={E}LATE=2;{E}STRIDED=1",
    f"late2mb3={E}LATE=2;{E}MINBLOCKS=3",
]
SUITE_LATE = {}
for fmt in ("q4g64", "q8g64", "q4g128", "q8g128"):
    for k, n in ((4096, 14336), (14336, 4096), (4096, 4096)):
        args = shape(fmt, k, n, 16 if k * n < 2**25 else 8)
        SUITE_LATE[f"{fmt}_{k}x{n}_late"] = ([*args, "--rows", "1,8,16,32"], LATE)
for fmt in ("q4g64", "q8g64"):
    SUITE_LATE[f"{fmt}_gateup_fused_late"] = (["--format", fmt, "--pool", "4", "--rows", "1,8,16,32"], LATE)
# Session 14. s14-xshare: at 16-32 rows, the shared-x kernel (lower_mma_xshare: C warps per block
# each owning its columns over all of K, x staged once per block in shared memory; bit-identical to
# the K-split kernel) with 2, 4 or 8 warps, 2-4 stages, 2 tiles per warp, and register caps.
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
SUITE_XSHARE = format_suite(
    "xshare", XSHARE, ("q4g64", "q8g64", "q4g128"), ((4096, 14336),), "16,32", pool=lambda k, n: 8
)
# s14-xshare2: two stages and two tiles per warp (the x sums and x pairs, which every warp
# computes, then serve 32 columns), the first call's best (xs4s2) again.
XSHARE2 = [
    "default=",
    f"xs4s2={E}XSHARE=4;{E}STAGES=2",
    f"xs2t2={E}XSHARE=2;{E}TILES=2",
    f"xs2t2s2={E}XSHARE=2;{E}TILES=2;{E}STAGES=2",
    f"xs4t2s2={E}XSHARE=4;{E}TILES=2;{E}STAGES=2",
    f"xs8s2={E}XSHARE=8;{E}STAGES=2",
]
SUITE_XSHARE2 = format_suite(
    "xshare2", XSHARE2, ("q4g64", "q8g64", "q4g128", "q8g128"), ((4096, 14336),), "16,32", pool=lambda k, n: 8
)
# s14-bankpad: ring rows padded by the 4 lanes' bytes of a row (lower_mma_staged.row_pad; Nsight
# Compute counted 2.7-way bank conflicts on the 16-row 4-bit kernel's shared loads) against 16 bytes.
BANKPAD = ["default=", f"bankpad={E}BANKPAD=1"]
LLAMA_SHAPES = ((4096, 14336), (14336, 4096), (4096, 4096))
SUITE_BANKPAD = format_suite(
    "bankpad", BANKPAD, ("q4g64", "q8g64", "q4g128", "q8g128", "bf16"), LLAMA_SHAPES, "1,4,8,16,32"
)
# s14-bankpad2: the adopted row_pad (32 bytes for 8-byte loads, 64 dense) against 16 bytes everywhere
# (BANKPAD=0), with Qwen's shapes (whose SPREAD and ONE_WAVE layouts size rings differently).
PAD16 = ["default=", f"pad16={E}BANKPAD=0"]
SUITE_BANKPAD2 = format_suite(
    "pad",
    PAD16,
    ("q4g64", "q8g64", "q4g128", "q8g128", "bf16"),
    (*LLAMA_SHAPES, (1536, 8960), (8960, 1536)),
    "1,4,8,16,32",
)
# s14-retune: with the rows padded by load width, the ring's depth and blocks per SM again (dense:
# 3-4 stages in dynamic shared memory, 16 warps; 4-bit at 16-32 rows: LATE=2 and 3 blocks per SM).
RETUNE_DENSE = [
    "default=",
    f"s3={E}STAGES=3;{E}SMEM=80",
    f"s4={E}STAGES=4;{E}SMEM=100",
    f"w16={E}WARPS=16;{E}SMEM=100",
    f"mb2={E}MINBLOCKS=2",
]
RETUNE_Q4 = ["default=", f"late2={E}LATE=2", f"mb3={E}MINBLOCKS=3", f"late2mb3={E}LATE=2;{E}MINBLOCKS=3"]
SUITE_RETUNE = {}
for k, n in ((4096, 14336), (14336, 4096), (4096, 4096)):
    args = shape("bf16", k, n, 4 if k * n > 2**25 else 16)
    SUITE_RETUNE[f"bf16_{k}x{n}_retune"] = ([*args, "--rows", "1,4,8,16,32"], RETUNE_DENSE)
for fmt in ("q4g64", "q8g128"):
    SUITE_RETUNE[f"{fmt}_4096x14336_retune"] = ([*shape(fmt, 4096, 14336, 8), "--rows", "16,32"], RETUNE_Q4)
    SUITE_RETUNE[f"{fmt}_gateup_fused_retune"] = (["--format", fmt, "--pool", "4", "--rows", "16"], RETUNE_Q4)
# s14-densering: the adopted dense rings (lower_mma_staged.dense_ring, now ring_rule) against the 48 KB default.
OLD_RING = ["default=", f"ring48={E}SMEM=48"]
SUITE_DENSERING = format_suite(
    "ring", OLD_RING, ("bf16",), LLAMA_SHAPES, "1,2,4,8,16,32", pool=lambda k, n: 4 if k * n > 2**25 else 16
)
# s14-q8pad: 8-bit group 64 with rows padded by 64 bytes (its 16-byte loads), given the shared
# memory that keeps its stages (call 6: 0.55-1.07x within 48 KB).
Q8PAD = [
    "default=",
    f"bp1={E}BANKPAD=1",
    f"bp1s64={E}BANKPAD=1;{E}SMEM=64",
    f"bp1s80={E}BANKPAD=1;{E}SMEM=80",
    f"s64={E}SMEM=64",
]
SUITE_Q8PAD = format_suite(
    "q8pad", Q8PAD, ("q8g64",), LLAMA_SHAPES, "1,4,8,16,32", pool=lambda k, n: 16 if k * n < 2**25 else 8
)
# s14-small: 1-8 rows of 4-bit and 8-bit group 64 with the new padding: bigger stages (GROUPS=8),
# deeper rings (3-4 stages in dynamic shared memory), 5 blocks per SM, one tile.
SMALL = [
    "default=",
    f"g8={E}GROUPS=8",
    f"s3={E}STAGES=3;{E}SMEM=64",
    f"s4={E}STAGES=4;{E}SMEM=80",
    f"mb5={E}MINBLOCKS=5",
    f"t1={E}TILES=1",
]
SUITE_SMALL = format_suite("small", SMALL, ("q4g64", "q8g64"), LLAMA_SHAPES[:2], "1,4,8", pool=lambda k, n: 8)
# s14-swizzle2: ring rows unpadded with the pieces swizzled by load width (SWIZZLE=2,
# lower_mma_staged.width_swizzle): conflict-free 8- and 16-byte loads without the padding's bytes.
SWZ2 = ["default=", f"swz2={E}SWIZZLE=2"]
SUITE_SWZ2 = format_suite("swz2", SWZ2, ("q4g64", "q8g64", "q8g128", "bf16"), LLAMA_SHAPES, "1,4,8,16,32")
# s15-small3: the fourteenth session's candidate again - 4-bit one-tile products at 1-8 rows with
# rings of 3 stages in 64 KB of dynamic shared memory - over both group sizes and three shapes.
SMALL3 = ["default=", f"s3={E}STAGES=3;{E}SMEM=64", "again="]
SUITE_SMALL3 = {
    name: spec
    for name, spec in format_suite(
        "small3", SMALL3, ("q4g64", "q4g128"), ((14336, 4096), (4096, 4096), (8960, 1536)), "1,2,4,8"
    ).items()
    if "fused" not in name
}
# s15-xring (the XRING knob exists at commit d6f5f28 only; 0.54-0.95x, removed): each warp's x
# through its own ring in shared memory (MLX_METILE_CUDA_MMA_XRING:
# cp.async beside the weights, a stage ahead, instead of x loaded from global memory into
# registers held through a stage), at 8-32 rows; 2 copies through L1 (.ca), s2 rings of 2 stages.
XRING = [
    "default=",
    f"xr1={E}XRING=1",
    f"xr2={E}XRING=2",
    f"xr1s2={E}XRING=1;{E}STAGES=2",
    f"xr2s2={E}XRING=2;{E}STAGES=2",
]
SUITE_XRING = format_suite("xring", XRING, ("q4g64", "q8g64", "q4g128", "q8g128", "bf16"), LLAMA_SHAPES, "8,16,32")
# s15-denseswiglu: the dense rings of ring_rule (measured on single products) on bf16 SwiGLU
# gate/up, which the full run of session 15 showed 0.76x stock at 32 rows (84.6 us, 68.8 in the
# ninth session): against the 48 KB ring (SMEM=48).
DENSE_SWIGLU = ["default=", f"smem48={E}SMEM=48", "again="]
SUITE_DENSE_SWIGLU = {
    "bf16_gateup_fused_dswiglu": (["--format", "bf16", "--pool", "4", "--rows", "1,4,8,16,32"], DENSE_SWIGLU),
    "bf16_qwen_gateup_fused_dswiglu": (
        ["--format", "bf16", "--k", "1536", "--n", "8960", "--pool", "8", "--rows", "1,4,8,16,32"],
        DENSE_SWIGLU,
    ),
    "bf16_4096x14336_dswiglu": ([*shape("bf16", 4096, 14336, 8), "--rows", "16,32"], DENSE_SWIGLU),
}
# s15-denseswiglu2: which of the fourteenth session's dense changes cost the bf16 SwiGLU gate/up at
# 16-32 rows: the 100 KB ring (smem48), the 64-byte row padding (BANKPAD=0: 16 bytes), both, or
# unpadded swizzled rows (SWIZZLE=2).
DENSE_SWIGLU2 = [
    "default=",
    f"smem48={E}SMEM=48",
    f"pad16={E}BANKPAD=0",
    f"smem48pad16={E}SMEM=48;{E}BANKPAD=0",
    f"swz2={E}SWIZZLE=2",
    f"smem48swz2={E}SMEM=48;{E}SWIZZLE=2",
]
SUITE_DENSE_SWIGLU2 = {
    "bf16_gateup_fused_dswiglu2": (["--format", "bf16", "--pool", "4", "--rows", "8,16,32"], DENSE_SWIGLU2),
}
# s15-q8deep: Nsight Compute (bench/results/ncu/h200-2026-11-30-session15-q8g64_1_*) put 8-bit
# group 64 at 1 row at 22.2 us with its math and 21.9 us with the ring's copies alone (HACK=nomath):
# the copies bound it. Deeper rings (3-4 stages in dynamic shared memory) and K over 8 warps (twice
# the stages in flight per column; another sum order), at 1-8 rows.
Q8DEEP = [
    "default=",
    f"s3={E}STAGES=3;{E}SMEM=64",
    f"s4={E}STAGES=4;{E}SMEM=80",
    f"w8={E}WARPS=8;{E}MINBLOCKS=2",
    f"w8s3={E}WARPS=8;{E}STAGES=3;{E}SMEM=110;{E}MINBLOCKS=2",
    "again=",
]
SUITE_Q8DEEP = format_suite("q8deep", Q8DEEP, ("q8g64", "q8g128"), ((4096, 14336), (4096, 4096)), "1,4,8")
# s15-q8g128swiglu: the 8-bit group-128 SwiGLU gate/up, whose staged rings of 2 stages exceed
# 48 KB so that it takes the direct loads, on a staged ring in dynamic shared memory (s15-q8deep's
# s4 = SMEM=80: 1.09-1.19x at 1-8 rows), at 1-32 rows of the Llama and Qwen shapes.
Q8G128_SWIGLU = ["default=", f"smem76={E}SMEM=76", f"smem80={E}SMEM=80", f"smem100={E}SMEM=100", "again="]
SUITE_Q8G128_SWIGLU = {
    "q8g128_gateup_fused_q8sw": (["--format", "q8g128", "--pool", "4", "--rows", "1,4,8,16,32"], Q8G128_SWIGLU),
    "q8g128_qwen_gateup_fused_q8sw": (
        ["--format", "q8g128", "--k", "1536", "--n", "8960", "--pool", "8", "--rows", "1,4,8,16,32"],
        Q8G128_SWIGLU,
    ),
}
# s16-q8groups: 8-bit weights at 1-8 rows, whose ring copies bound them (s15-q8deep): longer
# contiguous runs of each column per stage (GROUPS=4: 256 bytes of group-64 weights, 512 of group
# 128, instead of 128 / 256), given the shared memory that keeps their tiles and stages (64-80 KB),
# and the warps taking K in interleaved stages (INTERLEAVE=1: adjacent runs of each column in
# flight at once; another sum order) with the current padding and swizzle.
Q8GROUPS = [
    "default=",
    f"g4={E}GROUPS=4",
    f"g4s64={E}GROUPS=4;{E}SMEM=64",
    f"g4s80={E}GROUPS=4;{E}SMEM=80",
    f"il={E}INTERLEAVE=1",
    f"ilg4s80={E}INTERLEAVE=1;{E}GROUPS=4;{E}SMEM=80",
    "again=",
]
SUITE_Q8GROUPS = format_suite("q8groups", Q8GROUPS, ("q8g64", "q8g128"), LLAMA_SHAPES, "1,4,8")
# s16-cublas: the dense kernels against cuBLAS's cublasGemmEx (what PyTorch's F.linear calls) in the
# same harness - the same pool, launches and CUDA events - for every shape of the issue at 1-32 rows.
CUBLAS = ["default=", "cublas=", "again="]
SUITE_CUBLAS = {
    f"bf16_{k}x{n}_cublas": ([*shape("bf16", k, n, 4 if k * n > 2**25 else 16), "--rows", "1,2,4,8,16,32"], CUBLAS)
    for k, n in (*LLAMA_SHAPES, (1536, 8960), (8960, 1536))
}
# s16-qwendense: s16-cublas had our bf16 Qwen gate/up (1536 -> 8960, K too short for 8 warps' rings
# of 2 stages: 3 stages of 64 each) at 0.97-0.71x cuBLAS at 2-32 rows. Fewer warps per block (a
# longer K range each; another sum order), 2 tiles, a deeper ring; the TILES layout in its own file.
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
SUITE_QWEN_DENSE = {
    "bf16_1536x8960_qwendense": (QWEN_ARGS, QWEN_DENSE),
    "bf16_1536x8960_tiles_qwendense": ([*QWEN_ARGS, "--layout", "0"], ["default=", f"w4={E}WARPS=4", "cublas="]),
}
# s16-shallow: s16-qwendense had 2 warps per block (w2) 1.07-1.17x at 1-32 rows on the bf16 Qwen
# gate/up (the ONE_WAVE layout). Whether that carries to its SwiGLU form and to other dense products
# over a short K (one tile per block, ONE_TILE): Llama-3.2-1B/3B's gate/up and square projections.
SHALLOW = ["default=", f"w2={E}WARPS=2", f"w4s3={E}WARPS=4;{E}STAGES=3;{E}SMEM=80", "cublas="]
SUITE_SHALLOW = {
    "bf16_qwen_gateup_fused_shallow": (
        ["--format", "bf16", "--k", "1536", "--n", "8960", "--pool", "8", "--rows", "1,2,4,8,16,32"],
        SHALLOW[:-1],
    ),
    **{
        f"bf16_{k}x{n}_shallow": ([*shape("bf16", k, n, pool_by_size(k, n)), "--rows", "1,2,4,8,16,32"], SHALLOW)
        for k, n in ((2048, 8192), (3072, 8192), (1536, 1536), (2048, 2048))
    },
}
# s16-deepring: s16-shallow's default took 14.0-14.4 us at 1-4 rows of bf16 2048 -> 8192 and 12.6 at 8:
# the dense deep ring (lower_mma_staged.DENSE_DEEP_RING, 3 stages in 80 KB at 1-4 rows in ONE_TILE and
# DEEP) leaves an SM 2 blocks, and these one-tile grids have more (512-1184 blocks). The 48 KB ring
# (SMEM=48) against it on such grids, and on the grids it was measured on (256 blocks) as controls.
DEEPRING = ["default=", f"smem48={E}SMEM=48", "again="]
SUITE_DEEPRING = {
    f"bf16_{k}x{n}_deepring": ([*shape("bf16", k, n, pool_by_size(k, n)), "--rows", "1,2,4,8"], DEEPRING)
    for k, n in ((2048, 8192), (3072, 8192), (2048, 11008), (3584, 18944), (4096, 4096), (14336, 4096))
}
# s16-dense32: s16-cublas had the wide dense products at 0.875-0.95x cuBLAS at 16-32 rows, where each
# block of 16-32 columns reads all of x again (32 rows of 14336 -> 4096: 235 MB of x from L2 for 117 MB
# of weights). Wider blocks: 4 tiles in 200 KB, 2 tiles with more stages, and 14336 -> 4096 in the TILES
# layout (2 tiles per block, 128 blocks; the same 8 K ranges) beside its DEEP layout (one tile).
DENSE32 = [
    "default=",
    f"t4s200={E}TILES=4;{E}SMEM=200",
    f"s160={E}SMEM=160",
    f"s200={E}SMEM=200",
    "again=",
]
SUITE_DENSE32 = {
    "bf16_4096x14336_dense32": ([*shape("bf16", 4096, 14336, 4), "--rows", "16,32"], DENSE32),
    "bf16_14336x4096_dense32": ([*shape("bf16", 14336, 4096, 4), "--rows", "16,32"], DENSE32),
    "bf16_14336x4096_tiles_dense32": ([*shape("bf16", 14336, 4096, 4), "--rows", "16,32", "--layout", "0"], DENSE32),
}
# s16-shapes: the quantized kernels on other models' shapes (Llama-3.2-1B/3B, Qwen2.5-3B/7B gate/up and
# down), whose layouts (ONE_TILE_WIDE, ONE_TILE over many blocks, DEEP, SPREAD) the rules were not measured
# on: the defaults' GB/s, and the 4-bit one-tile rule's 3 stages against 4 (STAGES=4).
SHAPES_Q = ["default=", f"s4={E}STAGES=4", "again="]
OTHER_SHAPES = ((2048, 8192), (8192, 2048), (3072, 8192), (8192, 3072), (2048, 11008), (3584, 18944), (18944, 3584))
SUITE_SHAPES = {
    f"{fmt}_{k}x{n}_shapes": ([*shape(fmt, k, n, pool_by_size(k, n)), "--rows", "1,4,8,16,32"], SHAPES_Q)
    for fmt in ("q4g64", "q8g64")
    for k, n in OTHER_SHAPES
}
# s16-shortk: s16-shapes had 3584 -> 18944 (ONE_TILE over 1184 blocks, since K < SHORT_K) at 32 rows take
# 1.9x its 16-row time (8-bit 63 against 34 us): the TILES layout (2 tiles per block, the same K split) in
# its own file beside the default, for the products over a K just short of SHORT_K and wide outputs.
SUITE_SHORTK = {}
for fmt in ("q4g64", "q8g64", "bf16"):
    for k, n in ((3584, 18944), (3072, 8192 + 4096), (2048, 11008)):
        args = [*shape(fmt, k, n, pool_by_size(k, n)), "--rows", "1,4,8,16,32"]
        SUITE_SHORTK |= layout_pair(f"{fmt}_{k}x{n}", args, "shortk")
# s16-shortk2: s16-shortk had TILES 1.11-1.45x over ONE_TILE for 4/8-bit group-64 single products over
# K = 2048-3584 at most row counts (dense: 0.92-1.04x). The same for groups 128 and for the SwiGLU gate/up.
SUITE_SHORTK2 = {}
for fmt in ("q4g64", "q8g64", "q4g128", "q8g128"):
    for k, n in ((2048, 11008), (3584, 18944)):
        pool = 4 if k * n > 2**25 else 8
        SUITE_SHORTK2 |= layout_pair(f"{fmt}_{k}x{n}_swiglu", gate_up(fmt, k, n, pool), "shortk2")
        if fmt.endswith("g128"):
            args = [*shape(fmt, k, n, pool_by_size(k, n)), "--rows", "1,4,8,16,32"]
            SUITE_SHORTK2 |= layout_pair(f"{fmt}_{k}x{n}", args, "shortk2")
# s16-gateup: the SwiGLU gate/up of Llama-3.2-1B/3B (2048 / 3072 -> 2 x 8192, ONE_TILE_WIDE: one tile,
# 512 blocks) against TILES (2 tiles per block), files per layout.
SUITE_GATEUP = {}
for fmt in ("q4g64", "q8g64", "q4g128", "bf16"):
    for k in (2048, 3072):
        SUITE_GATEUP |= layout_pair(f"{fmt}_{k}x8192_swiglu", gate_up(fmt, k, 8192, 8), "gateup")
# s17-balance: at 1-8 rows the Llama gate/up product (4096 -> 14336, TILES: 448 blocks of 2 tiles, 4 per SM)
# puts 4 blocks on 52 SMs and 3 on the other 80, if every block is one SM's share of the time then 85% of
# a balanced grid's. Controls: the default over 16896 columns (528 blocks, 4 on every SM) and 12672 (396,
# 3 on every SM); candidates: one tile per block (896 blocks) with 7 or 8 blocks per SM (one wave of
# 6-7 blocks each: `mb<blocks>s<stages>`). And at 16-32 rows, what the MMAs that sum x per group cost (noxsum), beside nox / nomath.
BALANCE = ["default=", "again="]
# (one tile's rings hold 3-4 stages by default, 34 KB, which 6 blocks fill; 2 stages as TILES has, or 3)
TILE1 = ["default=", *(f"mb{b}s{s}={E}MINBLOCKS={b};{E}STAGES={s}" for s in (2, 3) for b in (7, 8))]
SUITE_BALANCE = {}
for fmt in ("q8g64", "q4g64"):
    args = [*shape(fmt, 4096, 14336, 8), "--rows", "1,8"]
    SUITE_BALANCE[f"{fmt}_4096x14336_balance"] = (args, BALANCE)
    SUITE_BALANCE[f"{fmt}_4096x14336_tile1_balance"] = ([*args, "--layout", "1"], TILE1)
    for n in (16896, 12672):
        SUITE_BALANCE[f"{fmt}_4096x{n}_balance"] = ([*shape(fmt, 4096, n, 8), "--rows", "1,8"], BALANCE)
    SUITE_BALANCE[f"{fmt}_4096x14336_xsum"] = (
        [*shape(fmt, 4096, 14336, 8), "--rows", "16,32"],
        ["default=", "noxsum=HACK=noxsum", "nox=HACK=nox", "nomath=HACK=nomath"],
    )
# s17-khalf: s17-balance had the default over 14336 columns take about as long as over 16896 (the SMs with
# 4 blocks set the time) and 12672 (3 on every SM) 16-17% less. Would blocks of half a column block's K
# (896 blocks, 6-7 per SM over the kernel) pay? Timed without the fix-up that would add the halves.
KHALF = ["default=", "khalf=HACK=khalf", "again="]
SUITE_KHALF = {
    f"{fmt}_4096x14336_khalf": ([*shape(fmt, 4096, 14336, 8), "--rows", "1,8,16,32"], KHALF)
    for fmt in ("q4g64", "q8g64", "q4g128", "bf16")
}
SUITE_KHALF |= {
    f"{fmt}_gateup_fused_khalf": (["--format", fmt, "--pool", "4", "--rows", "1,8,16"], KHALF)
    for fmt in ("q4g64", "q8g64")
}
# s17-smalltiles: through MLX (session 17) the single 8-bit product of Llama-3.2-3B's gate/up (3072 -> 8192,
# ONE_TILE_WIDE: 512 one-tile blocks, two waves at 16-32 rows' 2 blocks per SM) ran 1.00x / 0.81x stock at
# 16 / 32 rows. TILES (two tiles a block, the same K ranges, so the same sums) against each one-tile layout
# on small single products, files per layout, at 8-32 rows.
SUITE_SMALLTILES = {}
for fmt in ("q8g64", "q4g64", "q8g128"):
    for k, n in ((3072, 8192), (2048, 8192), (1536, 8960), (4096, 4096)):
        args = [*shape(fmt, k, n, pool_by_size(k, n)), "--rows", "8,16,32"]
        SUITE_SMALLTILES |= layout_pair(f"{fmt}_{k}x{n}", args, "smalltiles")
# s17-smalltiles2: s17-smalltiles had TILES 1.07-1.38x over ONE_TILE_WIDE for 4/8-bit group-64 single
# products at 8-32 rows. The same at 1-4 rows (buckets 1, 2, 4: is it a rule for every bucket?), and the
# dense bf16 products of those shapes at 1-32 rows (their TILES split K as ONE_TILE_WIDE does).
SUITE_SMALLTILES2 = {}
for fmt, rows in (("q8g64", "1,2,4"), ("q4g64", "1,2,4"), ("bf16", "1,4,8,16,32")):
    for k, n in ((3072, 8192), (2048, 8192)):
        args = [*shape(fmt, k, n, pool_by_size(k, n)), "--rows", rows]
        SUITE_SMALLTILES2 |= layout_pair(f"{fmt}_{k}x{n}", args, "smalltiles2")
# s17-rowblocks: s17-balance had x's loads take half of the 4-bit kernel's time at 32 rows (each of the
# 448 blocks loads all 32 rows of x for its 32 columns: 117 MB against 33 MB of weights). Blocks of 64
# columns and 16 rows (the 16-row kernel with 4 tiles, over 2 row blocks) halve x's loads and load each
# weight twice; the grid in row-block-first order (rowsfirst) puts a weight's two row blocks side by
# side, so the second finds it in L2. Rings in 64-100 KB of dynamic shared memory.
ROWBLOCKS = [
    "default=",
    f"b16t4={E}TILES=4;{E}SMEM=100;BUCKET=16",
    f"b16t4rf={E}TILES=4;{E}SMEM=100;BUCKET=16;HACK=rowsfirst",
    f"b16t4s64rf={E}TILES=4;{E}SMEM=64;BUCKET=16;HACK=rowsfirst",
    "again=",
]
SUITE_ROWBLOCKS17 = {
    f"{fmt}_4096x14336_rowblocks": ([*shape(fmt, 4096, 14336, 8), "--rows", "32"], ROWBLOCKS)
    for fmt in ("q4g64", "q8g64", "bf16")
}
# s19-densexshare: bf16 against cuBLAS at 16-32 rows of the wide products (0.93-0.95x through MLX in the
# seventeenth session; 0.875-0.95x kernel alone, s16-cublas), where each block of 32 columns reads all of
# x again: the shared-x kernel (lower_mma_xshare, never measured on dense weights) reads x once per
# block of C x 16 T columns, with the K-split kernel's sums. Not adopted (0.51-1.01x,
# h200-ab-2026-11-30-session19.json).
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
SUITE_DENSE_XSHARE = {
    f"bf16_{k}x{n}_densexshare": ([*shape("bf16", k, n, 4), "--rows", "16,32"], DENSE_XSHARE)
    for k, n in ((4096, 14336), (14336, 4096), (4096, 4096))
}
# s19-groups2: at 16-32 rows the staged kernels hold x for a whole stage in registers (4 groups of
# 16-32 rows: 64-128 a lane); the 4-bit group-64 kernel holds 178 registers at 16 rows (2 blocks per
# SM) and spills at 32 (255, Nsight Compute h200-2026-11-30-session19-*). Stages of 2 groups (127 /
# 202 registers there, no spill; the same sums), with 2-4 stages. Measured in the sixth session
# against the kernels of then (0.99-1.13x at 16-32 rows) and not adopted; nor now (0.82-1.06x,
# h200-ab-2026-11-30-session19.json).
GROUPS2 = [
    "default=",
    f"g2={E}GROUPS=2",
    f"g2s3={E}GROUPS=2;{E}STAGES=3",
    f"g2s4={E}GROUPS=2;{E}STAGES=4",
    "again=",
]
SUITE_GROUPS2 = format_suite("groups2", GROUPS2, ("q4g64", "q8g64", "q4g128", "q8g128"), LLAMA_SHAPES, "16,32")
# by call name; the last is generated unless another is named
SUITES = {
    "8": SUITE_SWIZZLE,
    "9": SUITE_TILES4,
    "10": SUITE_TILES1,
    "s10-sector": SUITE_SECTOR,
    "s10-strided": SUITE_STRIDED,
    "s11-rowblocks": SUITE_ROWBLOCKS,
    "s11-waves": SUITE_WAVES,
    "s11-late": SUITE_LATE,
    "s14-xshare": SUITE_XSHARE,
    "s14-xshare2": SUITE_XSHARE2,
    "s14-bankpad": SUITE_BANKPAD,
    "s14-bankpad2": SUITE_BANKPAD2,
    "s14-retune": SUITE_RETUNE,
    "s14-densering": SUITE_DENSERING,
    "s14-q8pad": SUITE_Q8PAD,
    "s14-small": SUITE_SMALL,
    "s14-swizzle2": SUITE_SWZ2,
    "s15-small3": SUITE_SMALL3,
    "s15-xring": SUITE_XRING,
    "s15-denseswiglu": SUITE_DENSE_SWIGLU,
    "s15-denseswiglu2": SUITE_DENSE_SWIGLU2,
    "s15-q8deep": SUITE_Q8DEEP,
    "s15-q8g128swiglu": SUITE_Q8G128_SWIGLU,
    "s16-q8groups": SUITE_Q8GROUPS,
    "s16-cublas": SUITE_CUBLAS,
    "s16-qwendense": SUITE_QWEN_DENSE,
    "s16-shallow": SUITE_SHALLOW,
    "s16-deepring": SUITE_DEEPRING,
    "s16-dense32": SUITE_DENSE32,
    "s16-shapes": SUITE_SHAPES,
    "s16-shortk": SUITE_SHORTK,
    "s16-shortk2": SUITE_SHORTK2,
    "s16-gateup": SUITE_GATEUP,
    "s17-balance": SUITE_BALANCE,
    "s17-khalf": SUITE_KHALF,
    "s17-smalltiles": SUITE_SMALLTILES,
    "s17-smalltiles2": SUITE_SMALLTILES2,
    "s17-rowblocks": SUITE_ROWBLOCKS17,
    "s19-densexshare": SUITE_DENSE_XSHARE,
    "s19-groups2": SUITE_GROUPS2,
}


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/cuda_probe/ab")
    call = sys.argv[2] if len(sys.argv) > 2 else list(SUITES)[-1]
    if call not in SUITES:
        raise SystemExit(f"call: expected one of {', '.join(SUITES)}, got {call}")
    out.mkdir(parents=True, exist_ok=True)
    for name, (args, variants) in SUITES[call].items():
        cmd = [sys.executable, str(HARNESS), str(out / f"{name}.cu"), *args]
        for v in variants:
            cmd += ["--variant", v]
        print(name, flush=True)
        subprocess.run(cmd, check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
