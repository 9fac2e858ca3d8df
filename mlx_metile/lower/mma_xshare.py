"""The staged `mma` schedule with x shared by a block's warps (CUDA, 16-32 rows): by default only
for the SwiGLU gate/up of 4-bit group-64/128 weights at 32 rows (Schedule.xshare warps).

In the K-split kernel (mma_staged.py) every warp of a block takes its own K range of the block's
columns, so each warp loads its own x - 16-32 rows of it per chunk, into registers held through
a stage - and x is read once per block of 16-32 columns. Here each of the C warps owns its own T
16-column tiles over the whole of K, the block copies each stage of x once into shared memory
(cp.async, beside the warps' weight rings, one barrier a stage), and the warps read a chunk's x
from there just before its math: x is read from global memory once per C x 16 T columns, its
latency hidden by the ring, its registers one chunk's. What it costs: one warp per 16 T columns
over all of K, so a grid has a quarter of the K-split kernel's warps - it pays where the K-split
kernel spills (docs/SCHEDULES.md, "mma shared x").

The sum order is the K-split kernel's, bit for bit: a warp walks the spec's K ranges (the warps'
ranges of the K-split kernel) in order with the same per-chunk math, and at the end of each
range folds its running sums into a total - the first range's sums become the total, each later
range's are added to it - which is the K-split kernel's reduction, red[0] + red[1] + ... left to
right, with empty ranges adding +0. So rows stay invariant across row buckets, and the outputs
equal the K-split kernel's.
"""

from __future__ import annotations

from ..codegen.ast import (
    ZERO_INIT,
    Assign,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Barrier,
    Call,
    Cast,
    Const,
    Decl,
    Decls,
    Expr,
    If,
    Increment,
    KernelDef,
    Line,
    Load,
    Loop,
    Paren,
    PtrCast,
    PtrType,
    Var,
    select,
)
from ..schedule import Schedule
from ..schedule.geometry import TILE
from ..spec import ProjectionSpec
from .base import LowerError, Scope
from .mma_staged import BYTE_PTR, CONST_BYTES, StagedMMALowering, ring_declaration
from .poly import Poly

V, P = Var, Paren


class SharedXLowering(StagedMMALowering):
    def __init__(self, program, schedule: Schedule, spec: ProjectionSpec):
        super().__init__(program, schedule, spec)
        if self.interleave:
            raise LowerError(f"{program.name}: shared x takes the K ranges in order (not interleaved)")
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

    def col_base(self) -> Expr:
        return P(V("pid0") * self.s.BN + V("warp") * (TILE * self.tiles))

    # -- the K ranges: every warp walks all of them ---------------------------------
    def k_split(self) -> list:
        v, a = self.splits, self.align
        return [
            Decl("int", "chunks", V("K") / self.ck, const=True),
            Decl("int", "per_range", P(V("chunks") + (v * a - 1)) / (v * a) * a, const=True),
            Decls("int", [("c_begin", Const(0)), ("c_end", V("chunks"))], const=True),
        ]

    # -- x: global -> shared (the block) -> lanes ----------------------------------------
    def x_copy_setup(self) -> list:
        per_row, tx = self.x_per_row, Call("thread_x")
        first = PtrCast(CONST_BYTES, V("x") + Cast("size", P(V("pid1") * self.s.BM + V("xr0"))) * V("K"))
        return [
            Line([Decl("int", "xr0", tx / per_row, const=True)], comment="the thread's first row of a stage's x"),
            Decl("int", "xrows", V("M") - V("pid1") * self.s.BM, const=True),
            Decl(PtrType("char", const_elem=True, const=True), "xsrc", first + P(tx % per_row) * 16),
            Decl("int", "xdst", V("xr0") * self.x_stride + P(tx % per_row) * 16, const=True),
        ]

    def x_copy_stage(self, stage: Expr, slot: Expr) -> list:
        """The block's copies of stage `stage` of x into x slot `slot`; rows past M zero-filled."""
        step = self.x_rows_per_pass
        out: list = [
            Decl(BYTE_PTR, "xd", V("xring") + P(slot) * self.x_slot),
            Decl("size", "xo", Cast("size", self.stage_chunk(stage)) * (self.ck * 2), const=True),
        ]
        for p in range(self.x_passes):
            src = V("xsrc") + Cast("size", V("K")) * (2 * p * step) + V("xo")
            copy = AsyncCopy(
                V("xd") + V("xdst") + p * step * self.x_stride, src, 16, (V("xr0") + p * step).lt(V("xrows"))
            )
            if (p + 1) * step <= self.s.BM:
                out.append(copy)
            else:
                out.append(If((V("xr0") + p * step).lt(self.s.BM), [copy], braces=False))
        return out

    def x_loads_shared(self, b: int) -> list:
        """Chunk b of the stage: the lane's x slices from the x slot (same k as the direct loads)."""
        out: list = []
        t = V("t")
        for r in range(self.rt):
            for sl in range(self.slices):
                k = Const(32 * sl) + t * 8 if self.sector else t * self.quarter + 8 * sl
                at = V("xslot") + P(Const(8 * r) + V("g")) * self.x_stride + P(Const(b * self.ck) + k) * 2
                out.append(Decl("bits32x4", f"xv{r}_{sl}_{b}", Load("bits32x4", at), const=True))
        return out

    # -- the K loop ------------------------------------------------------------------------
    def totals(self, nacc: int) -> list[tuple[Expr, Expr]]:
        """(total, running sum) of every partial sum the lane keeps."""
        return [
            (V(f"tot{j}").at(tile, r, e), V(f"part{j}").at(tile, r, e))
            for j in range(nacc)
            for tile in range(self.tiles)
            for r in range(self.rt)
            for e in range(4)
        ]

    def k_loop(self, nacc: int) -> list:
        """Prologue: stages 0..S-2 of x and the weights in flight. Each iteration: wait for
        stage st, a barrier (stage st's x has landed for every warp; every warp is done with
        st - 1's slots), issue stage st+S-1 into st-1's slots, then the shared loads and the
        math of stage st, and at the end of a K range the fold."""
        self.use_helper("cuda_cp_async")
        s, stages, groups = self.s, self.stages, self.groups
        ring_bytes = self.ring_bytes = s.SG * stages * self.slot + stages * self.x_slot
        limit = s.smem_block  # what the build's architecture gives one block
        if ring_bytes > limit:
            raise LowerError(
                f"{self.p.name}: shared x with {s.SG} warps, {self.tiles} tiles and {stages} stages needs "
                f"{ring_bytes} bytes of shared memory, over the {limit} a block may have"
            )
        out: list = [
            ring_declaration(ring_bytes),
            Decl(BYTE_PTR, "ring", V("metile_ring") + V("warp") * (stages * self.slot)),
            Decl(BYTE_PTR, "xring", V("metile_ring") + s.SG * stages * self.slot),
            Decl("int", "nst", V("chunks") / groups, const=True),
        ]
        out += self.copy_setup(nacc) + self.x_copy_setup()
        for st in range(stages - 1):
            stage = Const(st)
            out.append(If(stage.lt(V("nst")), self.copy_stage(stage, stage) + self.x_copy_stage(stage, stage)))
            out.append(AsyncCommit())
        for j in range(nacc):
            out.append(Decl("f32", f"tot{j}", ZERO_INIT, dims=(self.tiles, self.rt, 4)))
        out.append(Decls("int", [("folds", Const(0)), ("rend", Call("min_i32", (V("chunks"), V("per_range"))))]))

        ahead = V("st") + (stages - 1)
        body: list = [Decl("int", "ch0", self.stage_chunk(V("st")), const=True)]
        body += [AsyncWait(stages - 2), Barrier()]
        body.append(If(ahead.lt(V("nst")), self.copy_stage(ahead, V("wr")) + self.x_copy_stage(ahead, V("wr"))))
        body.append(AsyncCommit())
        body.append(Decl(PtrType("u8", const_elem=True, const=True), "slot", V("ring") + V("rd") * self.slot))
        body.append(Decl(PtrType("u8", const_elem=True, const=True), "xslot", V("xring") + V("rd") * self.x_slot))
        for b in range(groups):
            loads = self.weight_loads(b, V("ch0") + b, None, nacc)
            body += [Decl(ld.vtype, ld.name, Load(ld.vtype, ld.addr), const=True) for ld in loads]
        for b in range(groups):
            body += self.x_loads_shared(b)
            body.append(self.chunk_math(b, nacc))
        # the end of a K range: its sums into the totals, in range order
        fold: list = []
        for tot, run in self.totals(nacc):
            fold.append(Line([Assign(tot, select(V("folds"), tot + run, run)), Assign(run, Const(0.0, "f32"))]))
        fold += [Increment(V("folds")), Assign(V("rend"), Call("min_i32", (V("chunks"), V("rend") + V("per_range"))))]
        body.append(If((V("ch0") + groups).eq(V("rend")), fold))
        for ring in ("rd", "wr"):
            r = V(ring)
            body.append(Assign(r, select((r + 1).eq(stages), 0, r + 1)))
        tail = If(V("folds").lt(self.splits), [Assign(tot, tot + Const(0.0, "f32")) for tot, _ in self.totals(nacc)])
        tail.comment = "empty K ranges add +0"
        return out + [
            Decls("int", [("rd", Const(0)), ("wr", Const(stages - 1))]),
            Loop("st", Const(0), V("st").lt(V("nst")), None, body, unroll=1),
            AsyncWait(0),
            tail,
        ]

    # -- the kernel ----------------------------------------------------------------------
    def lower(self) -> KernelDef:
        body: list = []
        root = Scope(body)
        nacc, stmts = self.begin(body, root)
        stmts += self.column_setup(nacc)
        for j in range(nacc):
            stmts.append(Decl("f32", f"part{j}", ZERO_INIT, dims=(self.tiles, self.rt, 4)))
        stmts += self.k_loop(nacc)
        body += stmts + self.exact_rows(lambda j, tile, r, e: V(f"tot{j}").at(tile, r, e))
        # every warp finishes its own columns
        for tile in range(self.tiles):
            for r in range(self.rt):
                for e in range(4):
                    row = Poly.sym("t") * 2 + (8 * r + (e & 1))
                    col = Poly.sym("warp") * (TILE * self.tiles) + Poly.sym("g") + (TILE * tile + 8 * (e >> 1))
                    self.render_stores(body, root, row, col, lambda j, tile=tile, r=r, e=e: V(f"tot{j}").at(tile, r, e))
        return self.bound(self.kernel(body), self.s.blocks)
