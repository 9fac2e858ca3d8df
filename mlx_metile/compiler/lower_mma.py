"""The `mma` schedule (CUDA, sm_80+, 1..32 rows): tensor-core split-K.

A block of W warps owns T tiles of 16 output columns; warp w takes a contiguous
range of K chunks (a quantization group, or 32 k of a dense weight), and each
chunk is one or more `mma.sync.m16n8k16` (f32 accumulate) per tile:

    A (16 x 16): 16 columns x 16 k of the weight - for quantized weights the
                 integers q themselves, exact in bf16/f16 (never s*q+b rounded);
    B (16 x 8):  the same 16 k of 8 rows of x;
    C (16 x 8):  f32, per chunk; then acc += scale * C + bias * sum(x over the group)

so the affine dequantisation is applied per group in f32, after exact integer
products: y = sum_g s_g * sum_k q_k x_k + b_g * sum_k x_k. The group sums of x
come from the tensor cores too (A = ones), shared by every tile and weight.
Lane (g, t) of a warp loads words of columns n0+g and n0+g+8 covering a quarter
of the group; the k order inside a chunk is free (A and B use the same one),
and is chosen so that a packed word unpacks into register pairs with two bit
operations (nibbles j and j+4 of a word form one bf16x2/f16x2 pair).

Loads: each iteration issues the loads of a batch of chunks before their math;
with a batch of 2 or 4 on an aligned K split, each column's scales and biases
for the batch come in one 4 or 8-byte load. The first H200 profile (2026-11-29)
showed L1/TEX at 72% of its throughput: every warp-wide load touches one line
per column (16), so a 2-byte scale load cost as much L1 work as a weight load.
(A cp.async ring per warp, and register double-buffering one batch ahead, were
tried and measured slower: bench/results/h200-sweep-mma2-2026-11-29.json.)

The W warps' partial sums are added in warp order through shared memory, and
warp 0 runs the program's epilogue (bias, SwiGLU, residual, ...) through the
generic element rendering. A row's value depends only on its own x row, the
fixed K split and the fixed order, so row invariance holds for 1..32 rows;
batch and tiles change where loads are issued, not the order of any sum.

Accepted: bf16 or f16 activations; a single projection, SwiGLU's gate and up,
or weights concatenated into one accumulator (fused q/k/v), all of
one format: 4-bit, 8-bit, or (see dense_mma) dense weights of the
activation dtype with K a multiple of 32. Other specs use `simd_splitk`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..codegen.ast import Barrier, Decl, If, KernelDef, Raw
from ..spec import ProjectionSpec
from .lower import LowerError, _Lowering, _Scope
from .poly import Poly

TILE = 16  # output columns per m16 tile
SMEM_LIMIT = 48 * 1024  # static shared memory of one block (the warps' partial sums)
MAX_PARTIALS = 8  # accumulator tiles (x 4 floats) one lane may hold: tiles x row tiles x weights

# Settings of every row bucket alike, being part of a row's sum order (row
# invariance): warps splitting K, and `wide` chunks. Per row bucket (8, 16, 32
# rows): chunks per load batch and 16-column tiles per block, which only move
# loads. Overridable for tuning runs with MLX_METILE_CUDA_MMA_{WARPS,WIDE,BATCH,TILES}.
# From the H200 sweeps of 2026-11-29 (bench/results/h200-sweep-mma2-2026-11-29.json).
SHARED = {"warps": 4, "wide": 0}
# `minblocks` (staged schedule only): blocks per SM the compiler must fit, capping
# registers - 4 at <= 8 rows (+1-13% on the H200 for 4-bit weights), none at 16, where
# caps of 3-4 spill (bench/results/h200-ab-2026-11-29-session4.json), 2 at 32 rows: the
# uncapped kernels there already hold 191-255 registers (2 blocks per SM), yet ptxas's
# code for (threads, 2) ran 2-22% faster on every 4/8-bit shape but two (-1%) and
# within 1% for dense weights (bench/results/h200-ab-2026-11-29-session6.json).
# `tiles` 2: on the staged ring where it fits and the output is wide enough
# (lower_mma_staged.staged_max_tiles), +3-39% on the H200 at 1-32 rows for 4096 -> 14336
# (bench/results/h200-ab-2026-11-29-session5.json, call 13); 1 elsewhere.
# `strided` (staged schedule only; lower_mma_staged.strided): the ring's copies addressed from
# one pointer per accumulator - at 32 rows, where the kernels spill: H200, kernel alone
# (bench/results/h200-ab-2026-11-29-session10.json, calls 6-7), 1.03-1.11x for 4-bit weights,
# 0.98-1.07x 8-bit, 0.99-1.02x dense; at 1-16 rows 0.80-1.04x, so off there.
DEFAULTS = {
    8: {"batch": 2, "tiles": 2, "minblocks": 4, "strided": 0},
    16: {"batch": 1, "tiles": 2, "minblocks": 0, "strided": 0},
    32: {"batch": 1, "tiles": 2, "minblocks": 2, "strided": 1},
}
ALLOWED = {
    "warps": (1, 2, 4, 8, 16),
    "batch": (1, 2, 4),
    "tiles": (1, 2, 4),
    "wide": (0, 1),
    "minblocks": tuple(range(9)),
    # staged schedule (lower_mma_staged.py), defaults derived from the spec there
    "groups": (2, 4, 8),
    "stages": (2, 3, 4, 5, 6, 7, 8),
    "smem": tuple(range(48, 228)),  # KB of shared memory a block's staged rings may take
    "q8split": (0, 1),
    "xsector": (0, 1),
    "strided": (0, 1),
    "interleave": (0, 1),
    "swizzle": (0, 1, 2),
    "late": (0, 1, 2, 3),
    "bankpad": (0, 1),
    "xshare": (0, 2, 4, 8),  # lower_mma_xshare: warps per block sharing x, at 16-32 rows
    "layout": (0, 1, 2, 3, 4, 5),  # lower_mma_staged.column_layout's LAYOUTS, forced for every product
}
SPLIT_ALIGN = 4  # chunks: each warp's range starts at a multiple of this where K allows


def mma_override(name: str) -> int | None:
    """MLX_METILE_CUDA_MMA_<NAME> checked against ALLOWED, or None when unset."""
    var = f"MLX_METILE_CUDA_MMA_{name.upper()}"
    value = os.environ.get(var)
    if value is None:
        return None
    if not value.isdigit() or int(value) not in ALLOWED[name]:
        raise ValueError(f"{var}: expected one of {', '.join(map(str, ALLOWED[name]))}, got {value!r}")
    return int(value)


def mma_setting(name: str, rows_bucket: int = 8) -> int:
    """A setting (SHARED, or DEFAULTS' for a row bucket), or MLX_METILE_CUDA_MMA_<NAME>."""
    value = mma_override(name)
    if value is None:
        return SHARED[name] if name in SHARED else DEFAULTS[min(b for b in DEFAULTS if b >= rows_bucket)][name]
    return value


def mma_shape(
    rows_bucket: int, accumulators: int, warps: int | None = None, max_tiles: int = 4, splits: int = 0
) -> tuple[int, int]:
    """(warps, column tiles) per block: the settings (warps: the spec's, see
    lower_mma_staged.mma_warps; tiles at most `max_tiles`, what the staged rings
    fit), tiles then warps halved while the partial sums of the K ranges (`splits`,
    else one per warp) would overflow static shared memory, or the partial sums a
    lane's registers. Warps of several K ranges each are never halved (the ranges
    are the sum order)."""
    warps = warps or mma_setting("warps")
    tiles, rt = min(mma_setting("tiles", rows_bucket), max_tiles), rows_bucket // 8
    several = splits > warps  # warps of several K ranges each

    def partial_bytes() -> int:
        return (splits if several else warps) * accumulators * tiles * rt * 4 * 32 * 4

    while tiles > 1 and (partial_bytes() > SMEM_LIMIT or tiles * rt * accumulators > MAX_PARTIALS):
        tiles //= 2
    while warps > 1 and not several and partial_bytes() > SMEM_LIMIT:
        warps //= 2
    return warps, tiles


def mma_supported(spec: ProjectionSpec) -> bool:
    if spec.act_dtype not in ("bf16", "f16"):
        return False
    if len(spec.weights) != 1 and spec.epilogue != "swiglu" and not fused_mma():
        return False  # several weights concatenated into one accumulator (see fused_mma)
    formats = {(w.bits, w.group_size, w.dtype if not w.quantized else "") for w in spec.weights}
    if len(formats) != 1:
        return False
    for w in spec.weights:
        if w.quantized and w.bits not in (4, 8):
            return False
        if not w.quantized and (w.dtype != spec.act_dtype or spec.k_divisor % 32 or not dense_mma(spec)):
            return False
    return True


def dense_mode() -> str:
    """MLX_METILE_CUDA_MMA_DENSE: "staged" (default), "1" or "0" - see dense_mma."""
    var = "MLX_METILE_CUDA_MMA_DENSE"
    value = os.environ.get(var, "staged")
    if value not in ("0", "1", "staged"):
        raise ValueError(f"{var}: expected 0, 1 or staged, got {value!r}")
    return value


def dense_mma(spec: ProjectionSpec) -> bool:
    """Whether dense weights take the tensor-core schedule: by default through the
    staged ring of lower_mma_staged where K holds whole stages (64 k), else split-K;
    MLX_METILE_CUDA_MMA_DENSE=1 forces the direct loads, =0 split-K. H200, kernel
    alone (bench/results/h200-ab-2026-11-29-session5.json): staged 1.4-3.4 TB/s at
    1-32 rows on the benchmark's bf16 shapes against split-K's 0.28-3.6 (split-K wins
    only 1-2 rows of the widest shapes, by 6-14%); the direct loads lost to both. One spec
    keeps one schedule for all of 1..32 rows so that its rows stay invariant."""
    mode = dense_mode()
    if mode == "staged":
        from .lower_mma_staged import DENSE_STAGE_K

        return spec.k_divisor % DENSE_STAGE_K == 0
    return mode == "1"


def fused_mma() -> bool:
    """Several weights concatenated into one accumulator (fused q/k/v) take the
    tensor-core schedule unless MLX_METILE_CUDA_MMA_FUSED=0 (checked on the H200
    with quantized q/k/v whose member boundaries fall inside 16-column tiles)."""
    return os.environ.get("MLX_METILE_CUDA_MMA_FUSED", "1") != "0"


def wide(spec: ProjectionSpec) -> bool:
    """MLX_METILE_CUDA_MMA_WIDE=1 (a tuning knob, all row buckets alike: it is part
    of the sum order): a chunk is a pair of groups, and lane t loads half a group -
    16 contiguous bytes of 4-bit weights at group 64 - so a warp-wide load touches
    8 lines per 512 bytes instead of 16 per 256. Each MMA then runs twice, with x
    zeroed on the other group's lanes. Needs 16-bit scales and an even group count."""
    w = spec.weights[0]
    return (
        mma_setting("wide") == 1
        and w.quantized
        and w.dtype != "f32"
        and spec.k_divisor % (2 * w.group_size) == 0
        and (w.group_size // 2) * w.bits // 32 <= 16
    )


# Chunks of at least this many 16-byte x slices per lane (group 128) take the sector layout
# (sector_layout). H200, kernel alone (bench/results/h200-ab-2026-11-29-session10.json,
# calls 3-4): group 128, 4- and 8-bit, 1.00-1.32x at 8-32 rows and 0.97-1.09x at 1-4 over
# seven shapes; group 64 (2 slices) mixed, 0.88-1.05x.
SECTOR_SLICES = 4


def sector_layout(spec: ProjectionSpec) -> bool:
    """Whether lane t's k of a chunk lie at t * 8 + 32 s (x slice s: 8 k, one 16-byte load)
    rather than at t * quarter + 8 s. Then each warp-wide x load reads 64 contiguous bytes
    of each of its 8 rows - whole 32-byte sectors, where the other layout reads half of
    every sector it touches, twice - and each lane's words of a slice move with its k.
    Part of every row's sum order (which k share an MMA), so a property of the spec:
    MLX_METILE_CUDA_MMA_XSECTOR=0|1, else chunks of SECTOR_SLICES slices or more."""
    w = spec.weights[0]
    slices = chunk_k(spec) // 32
    if not w.quantized or wide(spec) or slices < 2:
        return False
    value = mma_override("xsector")
    return slices >= SECTOR_SLICES if value is None else value == 1


def chunk_k(spec: ProjectionSpec) -> int:
    """k per chunk: the group (one scale per column), two groups when `wide`, or
    32 for dense weights."""
    w = spec.weights[0]
    if not w.quantized:
        return 32
    return 2 * w.group_size if wide(spec) else w.group_size


# What the integer helpers (codegen/cuda.py metile_q*_*) add to each q: the
# mantissa trick's base (128 for bf16, 1024 for f16); int8 as bf16 has none.
Q_OFFSET = {(4, "bf16"): 128, (4, "f16"): 1024, (8, "f16"): 1024}

# With q8_split: the low nibble enters as 128 + l, the high one as 2048 + 16 h
Q8_SPLIT_OFFSET = 2048 + 128


def q8_split(spec: ProjectionSpec) -> bool:
    """8-bit weights with bf16 activations unpacked nibble by nibble, two MMAs per
    word into one accumulator (codegen/cuda.py Q8_SPLIT_HELPERS) - fewer
    instructions than the exact f32 conversion per pair. On by default
    (MLX_METILE_CUDA_MMA_Q8SPLIT=0 turns it off): on the H200, kernel alone, +4-12%
    at 1-16 rows on every measured shape, 3-19% slower at 32 (one setting for all
    row buckets: it changes a row's rounding)."""
    w = spec.weights[0]
    return mma_override("q8split") != 0 and w.quantized and w.bits == 8 and spec.act_dtype == "bf16"


# bf16 / f16 pairs of 1.0: the A operand that turns an MMA into sums of x
ONES = {"bf16": "0x3F803F80u", "f16": "0x3C003C00u"}
ZERO = {"unsigned": "0u", "uint2": "make_uint2(0u, 0u)", "uint4": "make_uint4(0u, 0u, 0u, 0u)"}
ZERO.update({"unsigned short": "(unsigned short)0", "float": "0.0f"})


@dataclass(frozen=True)
class Load:
    """One lane's load: `typ name = cond ? *(typ*)addr : 0`."""

    typ: str
    name: str
    cond: str
    addr: str

    def value(self) -> str:
        return f"({self.cond}) ? *reinterpret_cast<const {self.typ}*>({self.addr}) : {ZERO[self.typ]}"


@dataclass(frozen=True)
class Derived:
    """A value computed from loads, declared among them: `typ name = expr`."""

    typ: str
    name: str
    expr: str

    def value(self) -> str:
        return self.expr


class MMALowering(_Lowering):
    def __init__(self, program, schedule, divisors, vector_buffers, spec: ProjectionSpec):
        super().__init__(program, schedule, divisors, vector_buffers)
        self.spec = spec
        # RMSNorm of x (spec.norm_eps): x times the norm weight in each lane's x load, the rows'
        # sums of squares beside it (codegen/cuda.py NORM_HELPERS), 1 / rms applied to the sums
        self.norm = spec.norm_eps is not None
        self.batch = mma_setting("batch", schedule.BM)
        self.wide = wide(spec)
        self.q8_split = q8_split(spec)
        # 16-column tiles per K-range warp group; with xshare (lower_mma_xshare) per warp
        self.tiles = schedule.BN // TILE // (schedule.SG if schedule.xshare else 1)
        # K ranges (the sum order) and how many each warp takes, one after the other
        self.splits = schedule.splits or schedule.SG
        self.per_warp = 1 if schedule.xshare else self.splits // schedule.SG
        self.rt = schedule.BM // 8  # row tiles of 8
        self.ck = chunk_k(spec)
        self.quarter = self.ck // 4  # k per lane per chunk
        self.slices = self.quarter // 8  # 16-byte slices of x per lane per chunk
        w = spec.weights[0]
        self.words = self.quarter * w.bits // 32 if w.quantized else 0  # packed words per lane and column
        # the lane's words are consecutive and aligned to their count: loaded 1, 2 or 4 at a time
        self.word_width = min(self.words, 4)
        self.word_vector = {1: "unsigned", 2: "uint2", 4: "uint4"}.get(self.word_width)
        self.sector = sector_layout(spec)
        if self.sector:  # a slice's 8 k: 1 word (4-bit) or 2 (8-bit), loaded together
            self.word_width = w.bits // 4
            self.word_vector = {1: "unsigned", 2: "uint2"}[self.word_width]
        # the K split: warps' chunk ranges start at multiples of SPLIT_ALIGN when K
        # holds whole multiples of it - a property of the spec alone, so every row
        # bucket splits K alike (a row's sum order must not depend on the row count)
        self.align = SPLIT_ALIGN if w.quantized and spec.k_divisor % (SPLIT_ALIGN * self.ck) == 0 else 1
        # then a batch's 16-bit scales (and biases) of one column come in one 4 or 8-byte load
        # (wide chunks load their two groups' as a 4-byte pair instead)
        self.scale_vector = self.align == SPLIT_ALIGN and w.dtype != "f32" and self.batch in (2, 4) and not self.wide

    # -- the weights feeding each accumulator ---------------------------------
    def members(self, j: int) -> list[int]:
        """SwiGLU's gate or up, one projection, or a concatenation."""
        spec = self.spec
        return [j] if spec.epilogue == "swiglu" or len(spec.weights) == 1 else list(range(len(spec.weights)))

    def column_setup(self, nacc: int) -> list[str]:
        """Per tile and half (columns g and g+8): the column, and per member weight
        its local column and whether this lane's column lies in it."""
        lines = []
        for tile in range(self.tiles):
            for h in "ab":
                col = f"n{tile}{h}"
                lines.append(f"const int {col} = {self.col_base()} + {TILE * tile} + g{' + 8' if h == 'b' else ''};")
        seen: set[tuple[int, int, str]] = set()
        for j in range(nacc):
            members = self.members(j)
            for tile in range(self.tiles):
                for h in "ab":
                    col, base = f"n{tile}{h}", "0"
                    for i in members:
                        if (i, tile, h) in seen:
                            continue
                        seen.add((i, tile, h))
                        if len(members) == 1:
                            lines.append(f"const bool ok{tile}{h}_{i} = {col} < N{i};")
                            lines.append(f"const int {col}_{i} = {col};")
                        else:
                            lines.append(f"const int {col}_{i} = {col} - ({base});")
                            lines.append(f"const bool ok{tile}{h}_{i} = {col}_{i} >= 0 && {col}_{i} < N{i};")
                        base = f"{base} + N{i}"
        return lines

    def col_base(self) -> str:
        """The first output column of this lane's tiles (a C expression)."""
        return f"pid0 * {self.s.BN}"

    def select(self, j: int, tile: int, h: str, addr, live: str | None) -> tuple[str, str]:
        """(condition, address) of a load from the member weight this lane's
        column belongs to; the condition is false outside every member."""
        members = self.members(j)
        oks = [f"ok{tile}{h}_{i}" for i in members]
        cond = oks[0] if len(oks) == 1 else "(" + " || ".join(oks) + ")"
        at = addr(members[-1], f"n{tile}{h}_{members[-1]}")
        for i in reversed(members[:-1]):
            at = f"(ok{tile}{h}_{i} ? {addr(i, f'n{tile}{h}_{i}')} : {at})"
        return (cond if live is None else f"{live} && {cond}"), at

    # -- one chunk's loads ------------------------------------------------------
    def chunk_loads(self, b: int, ch: str, live: str | None, nacc: int) -> list[Load]:
        """Every load of chunk `ch` (a C expression) of a batch, zero where its
        condition is false."""
        return self.x_loads(b, ch, live) + self.weight_loads(b, ch, live, nacc)

    def slice_k(self, ch: str, sl: int) -> str:
        """The first k of the lane's x slice `sl` of chunk `ch` (see sector_layout)."""
        if self.sector:
            return f"({ch}) * {self.ck} + {32 * sl} + t * 8"
        return f"({ch}) * {self.ck} + t * {self.quarter} + {8 * sl}"

    def x_loads(self, b: int, ch: str, live: str | None) -> list[Load | Derived]:
        """The lane's x: per row tile, its quarter of the chunk in 16-byte slices (with a fused
        RMSNorm: times the norm weight's slices, loaded first, their squares summed per row)."""
        out: list[Load | Derived] = []
        if self.norm:
            for sl in range(self.slices):
                out.append(Load("uint4", f"gv{sl}_{b}", live or "true", f"norm + {self.slice_k(ch, sl)}"))
        for r in range(self.rt):
            cond = f"xok{r}" if live is None else f"{live} && xok{r}"
            for sl in range(self.slices):
                x = Load("uint4", f"xv{r}_{sl}_{b}", cond, f"x + xrow{r} * K + {self.slice_k(ch, sl)}")
                if self.norm:
                    x = Derived("uint4", x.name, f"metile_norm_bf16({x.value()}, gv{sl}_{b}, sq{r})")
                out.append(x)
        return out

    def sq_bytes(self) -> int:
        """Shared memory of the warps' sums of squares of their rows (a fused RMSNorm)."""
        return self.s.SG * self.s.BM * 4 if self.norm else 0

    def sq_declaration(self) -> str:
        return f"__shared__ float metile_sq[{self.s.SG}][{self.s.BM}];"

    def norm_lines(self) -> tuple[list[str], list[str]]:
        """A fused RMSNorm's lines after the K loop (each warp's sums of squares of its rows into
        shared memory) and in the finishing warp (1 / rms per row of the lane's sums, the warps'
        parts added in warp order, so a row's value depends on K's split alone)."""
        if not self.norm:
            return [], []
        s, rt = self.s, self.rt
        after = [self.sq_declaration()]
        after += [f"if (t == (g >> 1)) metile_sq[warp][{8 * r} + g] = sq{r}[g & 1];" for r in range(rt)]
        finish = []
        for r in range(rt):
            for h in range(2):
                row = f"2 * t + {8 * r + h}"
                total = " + ".join(f"metile_sq[{w}][{row}]" for w in range(s.SG))
                finish.append(f"const float inv{r}_{h} = rsqrtf(({total}) / (float)K + {self.spec.norm_eps:.9g}f);")
        return after, finish

    def sector_word(self, v0: int, bits: int) -> int:
        """With sector_layout: the first of the lane's words v0.. among its chunk's words at t = 0
        (slice v0 / width of the 4 lanes' 32 k; the lane's own 8 k are t * 8 on)."""
        return v0 // self.word_width * bits

    def weight_loads(self, b: int, ch: str, live: str | None, nacc: int) -> list[Load]:
        """The lane's weights (and scales, biases) of chunk `ch`, from global memory."""
        spec, ck, quarter = self.spec, self.ck, self.quarter
        kq = f"({ch}) * {ck} + t * {quarter}"
        out = []
        w = spec.weights[0]
        for j in range(nacc):
            for tile in range(self.tiles):
                for h in "ab":
                    if not w.quantized:

                        def dense(i, local):
                            return f"w{i} + {local} * K + {kq}"

                        out.append(Load("uint4", f"w{j}_{tile}{h}_{b}", *self.select(j, tile, h, dense, live)))
                        continue
                    vec = self.word_vector
                    for v0 in range(0, self.words, self.word_width):

                        def packed(i, local, v0=v0, words_row=f"(K / {32 // w.bits})"):
                            if self.sector:
                                at = (
                                    f"({ch}) * {ck * w.bits // 32} + {self.sector_word(v0, w.bits)} + t * {w.bits // 4}"
                                )
                                return f"w{i} + {local} * {words_row} + {at}"
                            return f"w{i} + {local} * {words_row} + ({kq}) / {32 // w.bits} + {v0}"

                        name = f"w{j}_{tile}{h}v{v0}_{b}"
                        out.append(Load(vec, name, *self.select(j, tile, h, packed, live)))
                    # scales and biases as raw bits, converted where they are used; with
                    # scale_vector, chunk 0 of a batch loads the whole batch's
                    if self.scale_vector and b:
                        continue
                    typ = "float" if w.dtype == "f32" else "unsigned short"
                    if self.scale_vector:
                        typ = {2: "unsigned", 4: "uint2"}[self.batch]
                    if self.wide:
                        typ = "unsigned"
                    group = f"2 * ({ch})" if self.wide else f"({ch})"
                    for name, letter in (("scales", "s"), ("biases", "z")):

                        def param(i, local, name=name, typ=typ, group=group):
                            at = f"{local} * (K / {w.group_size}) + {group}"
                            if typ == "float":
                                return f"{name}{i} + {at}"
                            if typ == "unsigned short":
                                return f"reinterpret_cast<const unsigned short*>({name}{i}) + {at}"
                            return f"reinterpret_cast<const {typ}*>(reinterpret_cast<const unsigned short*>({name}{i}) + {at})"

                        name_ = f"{letter}{j}_{tile}{h}_{b}"
                        out.append(Load(typ, name_, *self.select(j, tile, h, param, live)))
        return out

    # -- one chunk's math -------------------------------------------------------
    def chunk_math(self, b: int, nacc: int, mma: str) -> list[str]:
        """The MMAs and the affine scaling of chunk b of a batch from its loaded values."""
        spec, rt = self.spec, self.rt
        act = spec.act_dtype
        w = spec.weights[0]
        out = ["{"]
        if not w.quantized:
            for j in range(nacc):
                for tile in range(self.tiles):
                    wa, wb = f"w{j}_{tile}a_{b}", f"w{j}_{tile}b_{b}"
                    out.append(f"  float c{j}_{tile}[{rt}][4] = {{}};")
                    # 8 consecutive k per lane: slots (2t, 2t+1) and (2t+8, 2t+9) take pairs 0,1 then 2,3
                    for p0, p1 in (("x", "y"), ("z", "w")):
                        for r in range(rt):
                            xv = f"xv{r}_0_{b}"
                            out.append(
                                f"  {mma}(c{j}_{tile}[{r}], {wa}.{p0}, {wb}.{p0}, {wa}.{p1}, {wb}.{p1}, {xv}.{p0}, {xv}.{p1});"
                            )
                    for r in range(rt):
                        for e in range(4):
                            out.append(f"  part{j}[{tile}][{r}][{e}] += c{j}_{tile}[{r}][{e}];")
            out.append("}")
            return out
        # sums of x over the group, rows 2t and 2t+1 of each tile: an MMA with A = ones
        # (the k order does not matter for a sum, so the x words go in as loaded)
        # wide: rows 0-7 of A are ones on group A's lanes (t < 2), rows 8-15 on group B's,
        # so C rows g hold group A's sums and rows g+8 group B's
        ones = "oA, oB, oA, oB" if self.wide else ", ".join([ONES[act]] * 4)
        for r in range(rt):
            out.append(f"  float cx{r}[4] = {{}};")
            for sl in range(self.slices):
                xv = f"xv{r}_{sl}_{b}"
                out.append(f"  {mma}(cx{r}, {ones}, {xv}.x, {xv}.y);")
                out.append(f"  {mma}(cx{r}, {ones}, {xv}.z, {xv}.w);")
        groups = ("A", "B") if self.wide else ("",)
        # B registers, shared by every tile and weight: per word and pair slot
        k_per_word = 32 // w.bits
        pairs = 4 if w.bits == 4 else 2
        for r in range(rt):
            for i in range(self.words):
                sl, off = divmod(i * k_per_word, 8)  # which 16-byte x slice, and where in it
                for p in range(0, pairs, 2):
                    b0, b1 = self.x_pairs(f"xv{r}_{sl}_{b}", off, w.bits, p)
                    out.append(f"  const unsigned xb{r}_{i}_{p}_0 = {b0}, xb{r}_{i}_{p}_1 = {b1};")
                    for grp in groups if self.wide else ():  # x on this group's lanes only
                        xb = f"xb{r}_{i}_{p}"
                        out.append(f"  const unsigned {xb}{grp}_0 = {xb}_0 & m{grp}, {xb}{grp}_1 = {xb}_1 & m{grp};")
        to_float = {"bf16": "__uint_as_float((unsigned){} << 16)", "f16": "__half2float(__ushort_as_half({}))"}

        def half(part: str, high: bool) -> dict[str, str]:
            bits = f"({{}}{part} >> 16)" if high else f"({{}}{part} & 0xFFFFu)"
            return {
                "bf16": f"__uint_as_float({bits} << 16)",
                "f16": f"__half2float(__ushort_as_half((unsigned short){bits}))",
            }

        offset = Q8_SPLIT_OFFSET if self.q8_split else Q_OFFSET.get((w.bits, act), 0)
        unpack = ["metile_q8lo_bf16", "metile_q8hi_bf16"] if self.q8_split else [f"metile_q{w.bits}_{act}"]
        convs = {"": to_float.get(w.dtype, "{}")}
        if self.scale_vector:  # chunk b's 16-bit half of the batch's vector
            convs = {"": half("" if self.batch == 2 else "." + "xyzw"[b // 2], b % 2 == 1)[w.dtype]}
        if self.wide:  # the pair's groups: low half, high half
            convs = {"A": half("", False)[w.dtype], "B": half("", True)[w.dtype]}
        for j in range(nacc):
            for tile in range(self.tiles):
                c = f"c{j}_{tile}"
                for grp in groups:
                    out.append(f"  float {c}{grp}[{rt}][4] = {{}};")
                for h in "ab":
                    for i in range(self.words):
                        v0 = i - i % self.word_width
                        comp = "" if self.word_width == 1 else "." + "xyzw"[i - v0]
                        out.append(f"  const unsigned w{h}{j}_{tile}_{i} = w{j}_{tile}{h}v{v0}_{b}{comp};")
                # per word: int4 -> 8 k (2 MMAs of 4 slots per row); int8 -> 4 k (1 MMA, or 2 split
                # by nibbles, both against the same x)
                for i in range(self.words):
                    for p in range(0, pairs, 2):
                        for fn in unpack:
                            # A regs: (row g, slots 2t..), (row g+8, slots 2t..), (row g, slots 2t+8..), (row g+8, ...)
                            a = [f"{fn}(w{h}{j}_{tile}_{i}, {q})" for q in (p, p + 1) for h in "ab"]
                            for r in range(rt):
                                for grp in groups:
                                    xb = f"xb{r}_{i}_{p}{grp}"
                                    out.append(f"  {mma}({c}{grp}[{r}], {', '.join(a)}, {xb}_0, {xb}_1);")
                for grp in groups:
                    for h in "ab":
                        at = 0 if self.scale_vector else b
                        sv, zv = f"s{j}_{tile}{h}_{at}", f"z{j}_{tile}{h}_{at}"
                        out.append(f"  const float sc{j}_{tile}{h}{grp} = {convs[grp].format(sv)};")
                        bias = convs[grp].format(zv)
                        if offset:  # the A operand held offset + q: take offset * s off the bias
                            bias = f"fmaf({-float(offset)}f, sc{j}_{tile}{h}{grp}, {bias})"
                        out.append(f"  const float bi{j}_{tile}{h}{grp} = {bias};")
                    for r in range(rt):
                        for e in range(4):
                            h = f"{j}_{tile}{'a' if e < 2 else 'b'}{grp}"
                            acc = f"part{j}[{tile}][{r}][{e}]"
                            # wide: C rows g / g+8 of the ones-MMA hold group A / B sums
                            xs = f"cx{r}[{(e & 1) + (2 if grp == 'B' else 0)}]"
                            out.append(f"  {acc} = fmaf(sc{h}, {c}{grp}[{r}][{e}], fmaf(bi{h}, {xs}, {acc}));")
        out.append("}")
        return out

    def x_pairs(self, v: str, off: int, bits: int, p: int) -> tuple[str, str]:
        """B registers for pair slots p, p+1 of a word whose k start at `off`
        inside x slice `v`: the x values at the same k the A pairs hold."""
        comps = "xyzw"
        # a pair holds the values `gap` apart in the word (nibbles q, q+4; bytes q, q+2):
        # x[off + q] and x[off + q + gap], both low or both high halves of their u32
        gap = 4 if bits == 4 else 2

        def pair(q: int) -> str:
            lo, hi = comps[(off + q) // 2], comps[(off + q + gap) // 2]
            sel = "0x5410" if q % 2 == 0 else "0x7632"
            return f"__byte_perm({v}.{lo}, {v}.{hi}, {sel})"

        return pair(p), pair(p + 1)

    # -- the K loop ---------------------------------------------------------------
    def k_loop(self, nacc: int, mma: str) -> list[str]:
        """Each iteration: a batch's loads, then its math. With scale_vector the
        warps' chunk ranges are whole batches, so no batch is partly past the end."""
        batch, loop = self.batch, []
        for b in range(batch):
            ch = f"ch0 + {b}"
            live = None if b == 0 or self.scale_vector else f"{ch} < c_end"
            for ld in self.chunk_loads(b, ch, live, nacc):
                loop.append(f"const {ld.typ} {ld.name} = {ld.value()};")
        for b in range(batch):
            loop += self.chunk_math(b, nacc, mma)
        return (
            ["#pragma unroll 1", f"for (int ch0 = c_begin; ch0 < c_end; ch0 += {batch}) {{"]
            + ["  " + ln for ln in loop]
            + ["}"]
        )

    def k_split(self) -> list[str]:
        """C lines giving this warp's chunks [c_begin, c_end): contiguous ranges of
        equal length (a multiple of `align`), the last ones shorter or empty."""
        v, p = self.splits, self.per_warp  # per_warp: chunks of one K range
        return [
            f"const int chunks = K / {self.ck};",
            f"const int per_warp = (chunks + {v * self.align - 1}) / {v * self.align} * {self.align};",
            f"const int c_begin = warp * {p} * per_warp;" if p > 1 else "const int c_begin = warp * per_warp;",
            f"const int c_end = min(chunks, c_begin + {p} * per_warp);"
            if p > 1
            else "const int c_end = min(chunks, c_begin + per_warp);",
        ]

    def partials(self, nacc: int) -> list[tuple[str, str]]:
        """(a lane's running sum, its index in a [acc][tile][row tile][element][lane] array)
        for every partial sum the lane keeps."""
        return [
            (f"part{j}[{tile}][{r}][{e}]", f"[{j}][{tile}][{r}][{e}][threadIdx.x & 31]")
            for j in range(nacc)
            for tile in range(self.tiles)
            for r in range(self.rt)
            for e in range(4)
        ]

    def store_partials(self, nacc: int) -> list[str]:
        """The warp's partial sums into `red` (one K range per warp here; see the staged ring)."""
        if self.per_warp != 1:
            raise LowerError(f"{self.p.name}: several K ranges per warp need the staged ring")
        return [f"red[warp]{at} = {run};" for run, at in self.partials(nacc)]

    def reduction_buffer(self, body: list, nacc: int) -> None:
        """`red[range][acc][tile][row tile][element][lane]`: the K ranges' partial sums."""
        body.append(Decl("f32", "red", None, dims=(self.splits, nacc, self.tiles, self.rt, 4, 32), shared=True))

    # -- the kernel -------------------------------------------------------------
    def begin(self, body: list, root: _Scope) -> tuple[int, str, list[str]]:
        """The prologue into `body`; (accumulators, the MMA helper's name, the first lines of the
        kernel: the warp, the lane's g and t, and the K split)."""
        spec = self.spec
        nacc = self.nacc = len(self.prologue(body, root))
        if nacc != (2 if spec.epilogue == "swiglu" else 1):
            raise LowerError(f"{self.p.name}: unexpected accumulators for the mma schedule")
        self.use_helper("cuda_mma")
        if self.q8_split:
            self.use_helper("cuda_q8split")
        lines = [
            "const int warp = threadIdx.x >> 5;",
            "const int g = (threadIdx.x & 31) >> 2;",
            "const int t = threadIdx.x & 3;",
            *self.k_split(),
        ]
        return nacc, "metile_mma_bf16" if spec.act_dtype == "bf16" else "metile_mma_f16", lines

    def lower(self) -> KernelDef:
        s, spec = self.s, self.spec
        body: list = []
        root = _Scope(body)
        nacc, mma, lines = self.begin(body, root)
        rt, tiles = self.rt, self.tiles
        for r in range(rt):
            lines.append(f"const int xrow{r} = pid1 * {s.BM} + {8 * r} + g;")
            lines.append(f"const bool xok{r} = xrow{r} < M;")
        lines += self.column_setup(nacc)
        if self.wide:  # group A on lanes t < 2, group B on t >= 2
            one = ONES[spec.act_dtype]
            lines.append("const unsigned mA = t < 2 ? 0xFFFFFFFFu : 0u, mB = ~mA;")
            lines.append(f"const unsigned oA = {one} & mA, oB = {one} & mB;")
        for j in range(nacc):
            lines.append(f"float part{j}[{tiles}][{rt}][4] = {{}};")
        if self.norm:
            if spec.act_dtype != "bf16" or self.per_warp != 1:
                raise LowerError(f"{self.p.name}: a fused RMSNorm needs bf16 activations and a warp per K range")
            self.use_helper("cuda_norm")
            lines += [f"float sq{r}[4] = {{}};" for r in range(rt)]
        norm_after, norm_finish = self.norm_lines()

        lines += self.k_loop(nacc, mma)
        body.append(Raw(lines))

        # the K ranges' partial sums, added in range order; warp 0 finishes
        self.reduction_buffer(body, nacc)
        body.append(Raw(self.store_partials(nacc) + norm_after))
        body.append(Barrier())
        finish = If("warp == 0")
        fscope = _Scope(finish.body, root, fence=True)
        sums = []
        for j in range(nacc):
            sums.append(f"float fin{j}[{tiles}][{rt}][4];")
            for tile in range(tiles):
                for r in range(rt):
                    for e in range(4):
                        at = f"[{j}][{tile}][{r}][{e}][threadIdx.x & 31]"
                        sums.append(
                            f"fin{j}[{tile}][{r}][{e}] = "
                            + " + ".join(f"red[{w}]{at}" for w in range(self.splits))
                            + ";"
                        )
        if self.norm:  # the sums of the normalised rows: times 1 / rms of their row
            sums += norm_finish
            sums += [
                f"fin{j}[{tile}][{r}][{e}] *= inv{r}_{e & 1};"
                for j in range(nacc)
                for tile in range(tiles)
                for r in range(rt)
                for e in range(4)
            ]
        finish.body.append(Raw(sums))
        for tile in range(tiles):
            for r in range(rt):
                for e in range(4):
                    row = Poly.sym("t") * 2 + (8 * r + (e & 1))
                    col = Poly.sym("g") + (TILE * tile + 8 * (e >> 1))
                    self.render_stores(
                        finish.body, fscope, row, col, lambda j, tile=tile, r=r, e=e: f"fin{j}[{tile}][{r}][{e}]"
                    )
        body.append(finish)
        return self.kernel(body)


def lower_mma(program, schedule, divisors, vector_buffers, spec: ProjectionSpec) -> KernelDef:
    if not mma_supported(spec):
        raise LowerError(f"{program.name}: not supported by the mma schedule")
    from .lower_mma_staged import StagedMMALowering, staged

    if schedule.xshare:
        from .lower_mma_xshare import SharedXLowering

        return SharedXLowering(program, schedule, divisors, vector_buffers, spec).lower()
    cls = StagedMMALowering if staged(spec, schedule) else MMALowering
    return cls(program, schedule, divisors, vector_buffers, spec).lower()
