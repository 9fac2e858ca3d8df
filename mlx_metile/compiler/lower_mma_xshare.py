"""The staged `mma` schedule with x shared by a block's warps (CUDA, 16-32 rows): by default
only for the SwiGLU gate/up of 4-bit group-64/128 weights at 32 rows; MLX_METILE_CUDA_MMA_XSHARE=C (2, 4 or 8
warps per block; 0 off) for any wide product at 16-32 rows.

In the K-split kernel (lower_mma_staged) every warp of a block takes its own K range of the
block's columns, so each warp loads its own x - 16-32 rows of it per chunk, from global memory,
into registers held through a stage (64 of a lane's registers for a 4-bit product at 16 rows;
178 in all, 2 blocks per SM on the H200) - and x is read once per block of 16-32 columns. Here
each of the C warps owns its own T 16-column tiles over the whole of K, the block copies each
stage of x once into shared memory (cp.async, beside the warps' weight rings, one barrier a
stage), and the warps read a chunk's x from there just before its math: x is read from global
memory once per C x 16 T columns, its latency hidden by the ring, its registers one chunk's.
What it costs: one warp per 16 T columns over all of K, so a grid has a quarter of the K-split
kernel's warps; on 4-bit 4096 -> 14336 at 16 rows its 104 registers would let 4 blocks share
an SM, but the 224 blocks are 0.42 waves (Nsight Compute, bench/results/ncu/
h200-2026-11-30-session14-*), and it ran 0.84x. It pays for the 4-bit gate/up at 32 rows,
whose K-split kernel spills at 255 registers.

The sum order is the K-split kernel's, bit for bit: a warp walks the spec's K ranges (the
warps' ranges of the K-split kernel) in order with the same per-chunk math, and at the end of
each range folds its running sums into a total - the first range's sums become the total, each
later range's are added to it - which is the K-split kernel's reduction, red[0] + red[1] + ...
left to right, with empty ranges adding +0. So rows stay invariant across row buckets, and the
outputs equal the K-split kernel's (tests/emu/test_cuda_on_cpu.py).
"""

from __future__ import annotations

from ..codegen.ast import KernelDef, Raw
from ..cuda_arch import shared_memory
from ..spec import ProjectionSpec
from .lower import LowerError, _Scope
from .lower_mma import TILE, mma_override, mma_setting
from .lower_mma_staged import (
    ONE_TILE_WIDE,
    TILES,
    StagedMMALowering,
    interleaved,
    ring_declaration,
    stageable,
)
from .poly import Poly

MIN_ROWS = 16  # row buckets that may share x (below, x is a few registers a chunk)
STAGES = 2  # stages of the rings (x and weights) by default; MLX_METILE_CUDA_MMA_STAGES overrides
# The default: 4 warps, 2 stages, for the SwiGLU gate/up of 4-bit weights at 32 rows. H200, kernel
# alone (bench/results/h200-ab-2026-11-30-session14.json, two calls): 1.12x / 1.12x (group 64) and
# 1.14x / 1.09x (group 128) on 4096 -> 2 x 14336 at 32 rows; at 16 rows, for single products and
# for 8-bit weights 0.63-1.05x over every setting tried, so not there. Through MLX, the Llama
# gate/up+SwiGLU at 32 rows 1.11-1.17x the K-split kernel (2.14-2.27x stock, call 3).
# The same in ONE_TILE_WIDE (one tile per block otherwise, 512 blocks: Llama-3.2-1B/3B's gate/up, 2048 /
# 3072 -> 2 x 8192), where it is TILES's kernel: 1.08x / 1.11x (group 64) and 1.17x / 1.20x (group 128)
# at 32 rows against the K-split kernel of one tile (h200-ab-2026-11-30-session16.json, call 15).
DEFAULT_WARPS = 4
DEFAULT_ROWS = 32


def xshare_default(spec: ProjectionSpec, rows_bucket: int) -> bool:
    """The 4-bit SwiGLU gate/up at 32 rows, of the group sizes measured (64, 128)."""
    w = spec.weights[0]
    measured = w.quantized and w.bits == 4 and w.group_size in (64, 128)
    return rows_bucket == DEFAULT_ROWS and spec.epilogue == "swiglu" and measured


def xshare_warps(spec: ProjectionSpec, layout: int, rows_bucket: int) -> int:
    """Warps per block of the shared-x kernel, or 0 for the K-split one: MLX_METILE_CUDA_MMA_XSHARE
    (0: off), else DEFAULT_WARPS where xshare_default holds; only at MIN_ROWS rows or more, for
    wide products (the TILES layout; by default also ONE_TILE_WIDE, see there) on the staged ring."""
    value = mma_override("xshare")
    layouts = (TILES,)
    if value is None:  # (interleaved K stages are a sum order these warps cannot walk)
        value = DEFAULT_WARPS if xshare_default(spec, rows_bucket) and not interleaved() else 0
        layouts = (TILES, ONE_TILE_WIDE)
    if not value or rows_bucket < MIN_ROWS or layout not in layouts or not stageable(spec):
        return 0
    if spec.norm_eps is not None:  # the fused RMSNorm is the K-split kernel's (same sums: rows stay invariant)
        return 0
    return value


def xshare_tiles(rows_bucket: int, accumulators: int, max_partials: int) -> int:
    """16-column tiles per warp: MLX_METILE_CUDA_MMA_TILES, else 1; halved while a lane's
    running sums and totals would exceed `max_partials` tiles of 4 floats each."""
    tiles = mma_override("tiles") or 1
    while tiles > 1 and tiles * (rows_bucket // 8) * accumulators > max_partials:
        tiles //= 2
    return tiles


class SharedXLowering(StagedMMALowering):
    def __init__(self, program, schedule, divisors, vector_buffers, spec: ProjectionSpec):
        super().__init__(program, schedule, divisors, vector_buffers, spec)
        if self.interleave:
            raise LowerError(f"{program.name}: shared x takes the K ranges in order (not interleaved)")
        self.stages = mma_override("stages") or STAGES
        self.x_row_bytes = self.groups * self.ck * 2  # one row of x per stage
        self.x_per_row = self.x_row_bytes // 16  # 16-byte copies per row
        if self.s.threads % self.x_per_row:
            raise LowerError(f"{program.name}: {self.x_per_row} copies a row of x do not divide the block")
        # a 16-byte load serves 2 rows (lanes g) at a time: rows 64 bytes apart modulo 128 where a
        # row's 4 lanes read 64 contiguous bytes (the sector layout; 8 k a lane: group 32, dense),
        # else 16 (group 64: the lanes' 16 bytes 32 apart, which rows 16 apart interleave)
        contiguous = self.sector or self.quarter == 8
        self.x_stride = self.x_row_bytes + (64 if contiguous else 16)
        self.x_slot = self.s.BM * self.x_stride
        self.x_rows_per_pass = self.s.threads // self.x_per_row
        self.x_passes = -(-self.s.BM // self.x_rows_per_pass)

    def col_base(self) -> str:
        return f"(pid0 * {self.s.BN} + warp * {TILE * self.tiles})"

    # -- the K ranges: every warp walks all of them ---------------------------------
    def k_split(self) -> list[str]:
        v, a = self.splits, self.align
        return [
            f"const int chunks = K / {self.ck};",
            f"const int per_range = (chunks + {v * a - 1}) / {v * a} * {a};",
            "const int c_begin = 0, c_end = chunks;",
        ]

    # -- x: global -> shared (the block) -> lanes ----------------------------------------
    def x_copy_setup(self) -> list[str]:
        per_row = self.x_per_row
        return [
            f"const int xr0 = threadIdx.x / {per_row};  // the thread's first row of a stage's x",
            f"const int xrows = M - pid1 * {self.s.BM};",
            f"const char* const xsrc = reinterpret_cast<const char*>(x + (size_t)(pid1 * {self.s.BM} + xr0) * K)"
            f" + (threadIdx.x % {per_row}) * 16;",
            f"const int xdst = xr0 * {self.x_stride} + (threadIdx.x % {per_row}) * 16;",
        ]

    def x_copy_stage(self, stage: str, slot: str) -> list[str]:
        """The block's copies of stage `stage` of x into x slot `slot`; rows past M zero-filled."""
        step = self.x_rows_per_pass
        lines = [
            f"unsigned char* const xd = xring + ({slot}) * {self.x_slot};",
            f"const size_t xo = (size_t){self.stage_chunk(stage)} * {self.ck * 2};",
        ]
        for p in range(self.x_passes):
            copy = (
                f"metile_cp16(xd + xdst + {p * step * self.x_stride}, xsrc + (size_t)K * {2 * p * step} + xo, "
                f"xr0 + {p * step} < xrows);"
            )
            lines.append(copy if (p + 1) * step <= self.s.BM else f"if (xr0 + {p * step} < {self.s.BM}) {copy}")
        return lines

    def x_loads_shared(self, b: int) -> list[str]:
        """Chunk b of the stage: the lane's x slices from the x slot (same k as lower_mma's loads)."""
        out = []
        for r in range(self.rt):
            for sl in range(self.slices):
                k = f"{32 * sl} + t * 8" if self.sector else f"t * {self.quarter} + {8 * sl}"
                at = f"xslot + ({8 * r} + g) * {self.x_stride} + ({b * self.ck} + {k}) * 2"
                out.append(f"const uint4 xv{r}_{sl}_{b} = *reinterpret_cast<const uint4*>({at});")
        return out

    # -- the K loop ------------------------------------------------------------------------
    def totals(self, nacc: int) -> list[tuple[str, str]]:
        """(total, running sum) of every partial sum the lane keeps."""
        return [(run.replace("part", "tot", 1), run) for run, _ in self.partials(nacc)]

    def k_loop(self, nacc: int, mma: str) -> list[str]:
        """Prologue: stages 0..S-2 of x and the weights in flight. Each iteration: wait for
        stage st, a barrier (stage st's x has landed for every warp; every warp is done with
        st - 1's slots), issue stage st+S-1 into st-1's slots, then the shared loads and the
        math of stage st, and at the end of a K range the fold."""
        self.use_helper("cuda_cp_async")
        s, stages, groups = self.s, self.stages, self.groups
        ring_bytes = self.ring_bytes = s.SG * stages * self.slot + stages * self.x_slot
        limit = shared_memory()[0]  # what the build's architecture gives one block
        if ring_bytes > limit:
            raise LowerError(
                f"{self.p.name}: shared x with {s.SG} warps, {self.tiles} tiles and {stages} stages needs "
                f"{ring_bytes} bytes of shared memory, over the {limit} a block may have"
            )
        lines = [
            ring_declaration(ring_bytes),
            f"unsigned char* const ring = metile_ring + warp * {stages * self.slot};",
            f"unsigned char* const xring = metile_ring + {s.SG * stages * self.slot};",
            f"const int nst = chunks / {groups};",
        ]
        lines += self.copy_setup(nacc) + self.x_copy_setup()
        for st in range(stages - 1):
            lines.append(f"if ({st} < nst) {{")
            lines += ["  " + ln for ln in self.copy_stage(str(st), str(st)) + self.x_copy_stage(str(st), str(st))]
            lines.append("}")
            lines.append("metile_cp_commit();")
        for j in range(nacc):
            lines.append(f"float tot{j}[{self.tiles}][{self.rt}][4] = {{}};")
        lines.append("int folds = 0, rend = min(chunks, per_range);")

        body = [f"metile_cp_wait<{stages - 2}>();", "__syncthreads();", f"if (st + {stages - 1} < nst) {{"]
        body += ["  " + ln for ln in self.copy_stage(f"st + {stages - 1}", "wr")]
        body += ["  " + ln for ln in self.x_copy_stage(f"st + {stages - 1}", "wr")]
        body += ["}", "metile_cp_commit();"]
        body.append(f"const unsigned char* const slot = ring + rd * {self.slot};")
        body.append(f"const unsigned char* const xslot = xring + rd * {self.x_slot};")
        for b in range(groups):
            loads = self.weight_loads(b, f"ch0 + {b}", None, nacc)
            body += [f"const {ld.typ} {ld.name} = *reinterpret_cast<const {ld.typ}*>({ld.addr});" for ld in loads]
        for b in range(groups):
            body += self.x_loads_shared(b)
            body += self.chunk_math(b, nacc, mma)
        # the end of a K range: its sums into the totals, in range order
        body.append(f"if (ch0 + {groups} == rend) {{")
        for tot, run in self.totals(nacc):
            body.append(f"  {tot} = folds ? {tot} + {run} : {run}; {run} = 0.0f;")
        body += ["  ++folds;", "  rend = min(chunks, rend + per_range);", "}"]
        body.append(f"rd = rd + 1 == {stages} ? 0 : rd + 1;")
        body.append(f"wr = wr + 1 == {stages} ? 0 : wr + 1;")
        tail = [f"if (folds < {self.splits}) {{  // empty K ranges add +0"]
        tail += [f"  {tot} = {tot} + 0.0f;" for tot, _ in self.totals(nacc)]
        tail.append("}")
        return (
            lines
            + [f"int rd = 0, wr = {stages - 1};", "#pragma unroll 1", "for (int st = 0; st < nst; ++st) {"]
            + [f"  const int ch0 = {self.stage_chunk('st')};"]
            + ["  " + ln for ln in body]
            + ["}", "metile_cp_wait<0>();"]
            + tail
        )

    # -- the kernel ----------------------------------------------------------------------
    def lower(self) -> KernelDef:
        body: list = []
        root = _Scope(body)
        nacc, mma, lines = self.begin(body, root)
        lines += self.column_setup(nacc)
        for j in range(nacc):
            lines.append(f"float part{j}[{self.tiles}][{self.rt}][4] = {{}};")
        lines += self.k_loop(nacc, mma)
        body.append(Raw(lines))
        # every warp finishes its own columns
        for tile in range(self.tiles):
            for r in range(self.rt):
                for e in range(4):
                    row = Poly.sym("t") * 2 + (8 * r + (e & 1))
                    col = Poly.sym("warp") * (TILE * self.tiles) + Poly.sym("g") + (TILE * tile + 8 * (e >> 1))
                    self.render_stores(body, root, row, col, lambda j, tile=tile, r=r, e=e: f"tot{j}[{tile}][{r}][{e}]")
        return self.bound(self.kernel(body), self.s.blocks or mma_setting("minblocks", self.s.BM))
