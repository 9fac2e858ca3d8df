"""The `mma` schedule with staged weights (the CUDA default for affine 2/3/5/6/4/8-bit,
microscaled and dense weights where K holds whole stages).

Same math as the direct loads (mma.py: exact integer MMAs per group, the affine scaling in f32
per group, the same lane <-> k mapping; microscaled weights: the same decoding and scaling per
group), but the weights, scales and biases reach the lanes through shared memory:

    global --cp.async--> a ring of S stages per warp --shared loads--> lanes

A stage is G groups of the warp's K range for the block's 16 T columns of each accumulator. The
copies read each column's stage as one contiguous run (64-256 bytes, 16 bytes a lane), so a
warp-wide copy touches 4-8 cache lines where the lanes' direct loads touch 16 lines per 256
bytes; in flight, the copies hold shared memory instead of registers: S - 1 stages per warp
while it computes one. Rows of the ring are padded (Schedule.row_pad) or swizzled
(Schedule.swizzle_mask / swizzle_mult) so that the rows one shared load serves start on disjoint
banks. The reduction buffer of the warps' partial sums reuses the ring after the loop. The K
split (whole stages per warp) depends on the spec alone, so rows stay invariant across row
buckets; tiles move loads only. docs/SCHEDULES.md, "mma staged", gives the figures.

Affine 2, 3, 5 and 6 bits: a column's packed bits staged as they lie in global memory (g * b / 8
bytes a group), in copies of 16 bytes (8 for 3 and 5 bits at group 32: copy_bytes), a stage of
3 or 5 times a power of two of them copied in 3 or 5 runs of that many (3, 5, 6 bits; copy_run),
each run laid out as a whole row's copies are; the lanes read the words covering their values from the ring and shift them as the
direct loads do (mma.py low_value, stream).
"""

from __future__ import annotations

from ..codegen.ast import (
    FALSE,
    NULL,
    TRUE,
    Assign,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Barrier,
    Block,
    Call,
    Cast,
    Const,
    Decl,
    Decls,
    Expr,
    If,
    KernelDef,
    Line,
    Load,
    Loop,
    Paren,
    PtrCast,
    PtrType,
    SharedBytes,
    Var,
    View,
    select,
)
from ..schedule import Schedule
from ..schedule.geometry import TILE, chunk_bytes, copy_bytes, copy_run, ring_rows, scale_bytes_of, slot_bytes
from ..spec import ProjectionSpec
from ..targets.cuda import DRIVER_SHARED_PER_BLOCK, STATIC_SHARED_BYTES
from .base import LowerError
from .mma import LaneLoad, MMALowering

V, P = Var, Paren
BYTE_PTR = PtrType("u8", const=True)  # unsigned char* const
CONST_BYTES = PtrType("char", const_elem=True)  # const char*


def ring_declaration(ring_bytes: int) -> SharedBytes:
    """`metile_ring`, the block's shared memory for its rings: static up to what a kernel may
    declare (48 KB), else dynamic, sized at launch (the kernel's dynamic_shared)."""
    return SharedBytes("metile_ring", None if ring_bytes > STATIC_SHARED_BYTES else ring_bytes, 16)


class StagedMMALowering(MMALowering):
    def __init__(self, program, schedule: Schedule, spec: ProjectionSpec):
        super().__init__(program, schedule, spec)
        w = spec.weights[0]
        self.groups = schedule.groups
        self.align = self.batch = self.groups  # whole stages per warp; a stage is one batch
        # a column's 16-bit scales of a stage: one word (microscaled: a uint8 load per chunk)
        self.scale_vector = w.affine and w.dtype != "f32"
        self.group_bytes = chunk_bytes(spec)  # one chunk of a column: a group, or 32 dense k
        self.row_bytes = self.groups * self.group_bytes
        self.stride = self.row_bytes + schedule.row_pad
        # swizzled rows: piece q of row r at q ^ ((r & mask) * mult); r & mask is the lane's
        # g & mask in every load (rows are 8-aligned bands plus g)
        self.swizzle_mask, self.swizzle_mult = schedule.swizzle_mask, schedule.swizzle_mult
        self.scale_bytes = self.groups * scale_bytes_of(spec)
        self.nrows = ring_rows(spec, self.tiles)
        self.scales_at = self.nrows * self.stride
        self.biases_at = self.scales_at + self.nrows * self.scale_bytes
        self.slot = slot_bytes(spec, self.tiles, self.groups, schedule.row_pad)
        self.stages = schedule.stages
        if self.stages < 2 and not schedule.xshare:  # (shared x sizes its own rings)
            raise LowerError(f"{program.name}: the staged rings of {self.tiles} tiles do not fit 2 stages")
        # copies of 16 bytes (8: affine 3 and 5 bits at group 32), `pieces` per lane per stage;
        # a column's stage in `runs` runs of `per_row` (one run but for 3, 5 and 6 bits), each
        # run's copies laid out as a whole row's are
        cb = self.copy_bytes = copy_bytes(spec, self.row_bytes)
        self.pieces = self.nrows * self.row_bytes // cb // 32
        self.per_row = copy_run(self.row_bytes, cb)
        self.runs = self.row_bytes // cb // self.per_row if self.per_row else 1
        odd = self.lowbit and (self.row_bytes % cb or self.per_row < 2)
        if odd or ((self.runs > 1 or cb != 16) and self.swizzle_mask):
            raise LowerError(
                f"{program.name}: the staged ring copies a column's stage in unswizzled runs of 2 or more copies,"
                f" not {self.row_bytes} bytes of {w.short()}"
            )
        self.scale_passes = -(-self.nrows // 32)  # warp-wide passes copying a stage's scales
        self.interleave = schedule.interleave
        if self.per_warp not in (1, 2) or (self.per_warp > 1 and self.interleave):
            raise LowerError(f"{program.name}: {self.per_warp} K ranges per warp (1 or 2, not interleaved)")

    # -- the K split ---------------------------------------------------------------
    def k_split(self) -> list:
        """Interleaved: warp w takes stages w, w + W, w + 2W, ... of the K range (`nst` of them);
        else the direct loads' contiguous ranges."""
        if not self.interleave:
            return super().k_split()
        sg, warp = self.s.SG, V("warp")
        stages = V("k_stages")
        return [
            Decl("int", "k_stages", V("K") / (self.ck * self.groups), const=True),
            Decl("int", "nst", select(warp.lt(stages), P(stages - 1 - warp) / sg + 1, 0), const=True),
        ]

    def stage_chunk(self, stage: Expr) -> Expr:
        """The first chunk of this warp's stage `stage`."""
        if self.interleave:
            return P(P(P(stage) * self.s.SG + V("warp")) * self.groups)
        return P(V("c_begin") + P(stage) * self.groups)

    # -- shared -> lanes ---------------------------------------------------------
    def weight_loads(self, b: int, ch: Expr, live: Expr | None, nacc: int) -> list:
        """Chunk b of the stage in `slot`: the lane's words of columns g and g+8
        (at the same k as its x quarter), and the stage's scales and biases."""
        words, t, slot = self.words, V("t"), V("slot")
        out: list = []
        for j in range(nacc):
            for tile in range(self.tiles):
                for h in "ab":
                    row = P(Const(TILE * (j * self.tiles + tile) + (8 if h == "b" else 0)) + V("g"))
                    if not self.spec.weights[0].quantized:  # 8 consecutive k: the lane's quarter of 32
                        at = slot + row * self.stride + self.piece(Const(b * self.group_bytes) + t * 16)
                        out.append(LaneLoad("bits32x4", f"w{j}_{tile}{h}_{b}", TRUE, at))
                        continue
                    for v0 in range(0, words, self.word_width):
                        within = t * (4 * words) + 4 * v0
                        if self.sector:
                            bits = self.spec.weights[0].bits
                            within = Const(4 * self.sector_word(v0, bits)) + t * bits
                        live: Expr = TRUE
                        if self.stream:  # the word holding the lane's first bit, as the direct loads
                            lane_bits = self.quarter * self.spec.weights[0].bits
                            within = P(P(t * lane_bits) >> 5) * 4 + 4 * v0
                            if v0 == words - 1 and self.tail_lanes != 15:
                                live = V("wtail")  # past the lane's bits: zero, as the direct loads'
                        at = slot + row * self.stride + self.piece(Const(b * self.group_bytes) + within)
                        out.append(LaneLoad(self.word_vector, f"w{j}_{tile}{h}v{v0}_{b}", live, at))
                    if self.micro:  # the chunk's uint8 scale (nvfp4: of the lane's group, t / 2); no biases
                        at = slot + self.scales_at + row * self.scale_bytes + b
                        if self.folded:
                            at = slot + self.scales_at + row * self.scale_bytes + P(Const(2 * b) + P(V("t") >> 1))
                        out.append(LaneLoad("u8", f"s{j}_{tile}{h}_{b}", TRUE, at))
                        continue
                    if self.scale_vector and b:
                        continue
                    typ = {2: "bits32", 4: "bits32x2", 8: "bits32x4"}[self.groups] if self.scale_vector else "f32"
                    for letter, base in (("s", self.scales_at), ("z", self.biases_at)):
                        at = slot + base + row * self.scale_bytes
                        if not self.scale_vector:
                            at = at + 4 * b
                        out.append(LaneLoad(typ, f"{letter}{j}_{tile}{h}_{b}", TRUE, at))
        return out

    def piece(self, offset: Expr) -> Expr:
        """Where a lane's bytes at `offset` within its ring row lie: there, or in the swizzled piece."""
        if not self.swizzle_mask:
            return offset
        return P(P(P(P(offset) >> 4) ^ self.swizzled_piece(V("g"))) << 4 | P(P(offset) & 15))

    def swizzled_piece(self, row: Expr) -> Expr:
        """What a row's pieces are XOR-ed with."""
        masked = P((row if isinstance(row, Var) else P(row)) & self.swizzle_mask)
        return P(masked * self.swizzle_mult) if self.swizzle_mult > 1 else masked

    # -- global -> shared --------------------------------------------------------
    def source(self, j: int, col: Expr, addr) -> list:
        """Statements setting `src` and `ok` for column `col` of accumulator j: the member weight
        holding it, and whether any does."""
        members = self.members(j)
        src, ok = V("src"), V("ok")
        out: list = [Decl(CONST_BYTES, "src", NULL), Decl("bool", "ok", FALSE)]
        base: Expr = Const(0)
        chain_head: If | None = None
        for i in members:
            local = P(col - P(base))
            n = V(f"N{i}")
            cond = local.ge(0).and_(local.lt(n)) if len(members) > 1 else col.lt(n)
            branch = If(cond, [Assign(src, addr(i, local)), Assign(ok, TRUE)], inline=True)
            if chain_head is None:
                chain_head = branch
                out.append(branch)
            else:
                tail = chain_head
                while tail.orelse:
                    tail = tail.orelse[0]
                tail.orelse = [branch]
            base = base + n
        fallback = If(ok.not_(), [Assign(src, addr(members[0], Const(0)))], braces=False)
        out.append(Line([fallback], comment="a valid address; nothing is read"))
        return out

    def strided(self, nacc: int) -> bool:
        """Each accumulator's copy pieces from one base pointer and the row stride (a column's
        bytes), their destinations constant offsets from one - instead of a pointer, flag and
        offset per piece held in registers through the loop (pieces past the last column
        copy 0 bytes from an address past it). Legal where every accumulator reads one weight and
        a lane's rows (rows_per_copy apart) share their swizzle."""
        if not self.s.strided:
            return False
        one_each = all(len(self.members(j)) == 1 for j in range(nacc))
        rows_per_copy = 32 // self.per_row
        if not one_each or (self.swizzle_mask and rows_per_copy % (self.swizzle_mask + 1)):
            raise LowerError(f"{self.p.name}: strided copies need one weight per accumulator and rows of one swizzle")
        return True

    def copy_piece(self, row: Expr, per_row: int) -> Expr:
        """The piece of ring row `row` a lane's copy fills: its own, or swizzled."""
        piece = P(V("lane") % per_row)
        return P(piece ^ self.swizzled_piece(row)) if self.swizzle_mask else piece

    def copy_setup(self, nacc: int) -> list:
        """Per lane, before the loop: its copy pieces' sources (at stage 0 of K) and destinations
        within a slot."""
        w = self.spec.weights[0]
        lane = V("lane")  # from the prologue
        per_row, cb = self.per_row, self.copy_bytes  # copies of a run of a ring row, their bytes
        rows_per_copy = 32 // per_row
        k = Cast("size", V("K"))
        row_bytes = k * w.bits / 8 if w.quantized else k * 2

        def rows_in_bytes(rows):  # rows * row_bytes, multiplied before the division (K * bits may be odd)
            return rows * k * w.bits / 8 if w.quantized else rows * k * 2

        out: list = []
        strided = self.strided(nacc)
        if strided:
            out.append(Decl("size", "cw_row", row_bytes, const=True))
            cwd = P(lane / per_row) * self.stride + self.copy_piece(lane / per_row, per_row) * cb
            out.append(Decl("int", "cwd", cwd, const=True))
            for j in range(nacc):
                m = self.members(j)[0]
                col = self.col_base() + lane / per_row
                # columns left from the lane's first; the base may lie past the end
                out.append(Decl("int", f"cwn{j}", V(f"N{m}") - P(col), const=True))
                first = PtrCast(CONST_BYTES, V(f"w{m}")) + Cast("size", P(col)) * V("cw_row") + P(lane % per_row) * cb
                out.append(Decl(PtrType("char", const_elem=True, const=True), f"cwb{j}", first))
        for i in range(0 if strided else self.pieces // self.runs):  # else a pointer, flag and offset per piece
            first_row = i * rows_per_copy  # the piece's rows lie in one 16-row band: (accumulator, tile)
            j, tile = divmod(first_row // TILE, self.tiles)
            col = P(self.col_base() + (TILE * tile + first_row % TILE) + lane / per_row)

            def weight(m, local):
                return PtrCast(CONST_BYTES, V(f"w{m}")) + rows_in_bytes(Cast("size", local)) + P(lane % per_row) * cb

            block = self.source(j, col, weight)
            block.append(Line([Assign(V(f"cw{i}"), V("src")), Assign(V(f"cwok{i}"), V("ok"))]))
            out.append(Block(block))
            piece = self.copy_piece(Const(first_row) + lane / per_row, per_row)
            out.append(
                Decl("int", f"cwd{i}", P(Const(first_row) + lane / per_row) * self.stride + piece * cb, const=True)
            )
        declared = [
            Line([Decl(CONST_BYTES, f"cw{i}"), Decl("bool", f"cwok{i}")])
            for i in range(0 if strided else self.pieces // self.runs)
        ]
        if not w.quantized:
            return declared + out
        # scales and biases: in pass p, lane r < rows - 32 p copies ring row 32 p + r's
        size = 1 if self.micro else scale_bytes_of(self.spec)  # bytes of one scale

        def param(name):
            def at(m, local):
                return PtrCast(CONST_BYTES, V(f"{name}{m}")) + Cast("size", local) * P(V("K") / w.group_size) * size

            return at

        params = self.params()
        for pas in range(self.scale_passes):
            cs, cz, csok = V(f"cs{pas}"), V(f"cz{pas}"), V(f"csok{pas}")
            pointers = [Decl(CONST_BYTES, var.name, NULL) for var in (cs, cz)[: len(params)]]
            out.append(Line([*pointers, Decl("bool", csok.name, FALSE)]))
            for band in range(2 * pas, min(2 * pas + 2, self.nrows // TILE)):  # 16-row bands of this pass
                j, tile = divmod(band, self.tiles)
                lo = TILE * band - 32 * pas
                col = P(self.col_base() + TILE * tile + lane - lo)
                inner: list = []
                for (name, _), var in zip(params, (cs, cz)):
                    block = self.source(j, col, param(name))
                    block.append(Line([Assign(var, V("src")), Assign(csok, V("ok"))]))
                    inner.append(Block(block))
                out.append(If(lane.ge(lo).and_(lane.lt(lo + TILE)), inner))
        return declared + out

    def params(self) -> list[tuple[str, int]]:
        """(buffer, offset in a slot) of the per-group parameters staged: scales and biases, or
        a microscaled weight's scales."""
        both = [("scales", self.scales_at), ("biases", self.biases_at)]
        return both[:1] if self.micro else both

    def copy_stage(self, stage: Expr, slot: Expr) -> list:
        """Statements issuing the copies of stage `stage` into ring slot `slot`."""
        w = self.spec.weights[0]
        chunk0 = self.stage_chunk(stage)
        dst = V("dst")
        out: list = [Decl(BYTE_PTR, "dst", V("ring") + P(slot) * self.slot)]
        out.append(Decl("size", "wo", Cast("size", chunk0) * self.group_bytes, const=True))
        nacc = self.nrows // (TILE * self.tiles)
        strided, rows_per_copy = self.strided(nacc), 32 // self.per_row
        per_run, cb = self.pieces // self.runs, self.copy_bytes
        for u in range(self.runs):  # (run u: its copies' bytes cb * per_row * u on, in both rows)

            def run(at: Expr, u: int = u) -> Expr:
                return at + cb * self.per_row * u if u else at

            for i in range(per_run):
                if not strided:
                    out.append(AsyncCopy(run(dst + V(f"cwd{i}")), run(V(f"cw{i}") + V("wo")), cb, V(f"cwok{i}")))
                    continue
                j, p = divmod(i, per_run // nacc)  # accumulator j's piece p
                k = p * rows_per_copy  # columns past the lane's first (past the last: copies 0 bytes)
                src = run(V(f"cwb{j}") + Cast("size", Const(k)) * V("cw_row") + V("wo"))
                to = run(dst + V("cwd") + i * rows_per_copy * self.stride)
                out.append(AsyncCopy(to, src, cb, Const(k).lt(V(f"cwn{j}"))))
        if not w.quantized:
            return out
        out.append(Decl("size", "so", Cast("size", chunk0) * scale_bytes_of(self.spec), const=True))
        for pas in range(self.scale_passes):
            copies: list = []
            for var, (_, base) in zip(("cs", "cz"), self.params()):
                to = dst + base + P(Const(32 * pas) + V("lane")) * self.scale_bytes
                copies.append(AsyncCopy(to, V(f"{var}{pas}") + V("so"), self.scale_bytes, V(f"csok{pas}")))
            out.append(If(V("lane").lt(min(32, self.nrows - 32 * pas)), copies))
        return out

    # -- the K loop ----------------------------------------------------------------
    def k_loop(self, nacc: int) -> list:
        """Prologue: stages 0..S-2 in flight. Each iteration: x loads of stage st,
        wait for stage st, issue stage st+S-1 into the slot freed by st-1, then
        the shared loads and the math of stage st; a warp of two K ranges moves its
        sums to `early` after the first range's last stage."""
        self.use_helper("cuda_cp_async")
        s, stages, groups = self.s, self.stages, self.groups
        # after the loop the ring holds the K ranges' partial sums, then a fused RMSNorm's sums of squares
        ring_bytes = max(s.SG * stages * self.slot, self.red_bytes(nacc) + self.sq_bytes())
        # two K ranges per warp: the first range's partial sums wait after the ring
        early_at = ring_bytes
        ring_bytes = self.ring_bytes = ring_bytes + (self.red_bytes(nacc) // 2 if self.per_warp > 1 else 0)
        if ring_bytes > s.smem_block:
            raise LowerError(
                f"{self.p.name}: the rings take {ring_bytes} bytes of shared memory, over the {s.smem_block} a block may have"
            )
        out: list = [
            ring_declaration(ring_bytes),
            Decl(BYTE_PTR, "ring", V("metile_ring") + V("warp") * (stages * self.slot)),
        ]
        if self.per_warp > 1:
            out.append(View("early", "f32", self.partial_dims(nacc), V("metile_ring") + early_at))
        if not self.interleave:  # else k_split gave nst
            count = Call("max_i32", (V("c_end") - V("c_begin"), Const(0)))
            out.append(Decl("int", "nst", count / groups, const=True))
        out += self.copy_setup(nacc)
        for st in range(stages - 1):
            out.append(If(Const(st).lt(V("nst")), self.copy_stage(Const(st), Const(st))))
            out.append(AsyncCommit())
        late = self.s.late
        # late 2: half of the stage's x first, the rest after the first chunks' math; 3: x one chunk ahead
        early_x = groups // 2 if late == 2 else 1 if late == 3 else groups

        def x_loads(b: int) -> list:
            return [ld.decl() for ld in self.x_loads(b, V("ch0") + b, None)]

        def weight_loads(b: int) -> list:
            loads = self.weight_loads(b, V("ch0") + b, None, nacc)
            return [Decl(ld.vtype, ld.name, Load(ld.vtype, ld.addr), const=True) for ld in loads]

        body: list = [Decl("int", "ch0", self.stage_chunk(V("st")), const=True)]
        for b in range(early_x):
            body += x_loads(b)
        body.append(AsyncWait(stages - 2))
        body.append(Barrier("simdgroup"))
        body.append(If((V("st") + (stages - 1)).lt(V("nst")), self.copy_stage(V("st") + (stages - 1), V("wr"))))
        body.append(AsyncCommit())
        body.append(Decl(PtrType("u8", const_elem=True, const=True), "slot", V("ring") + V("rd") * self.slot))
        if not late:  # every load of the stage first (ptxas orders them within its register budget)
            for b in range(groups):
                body += weight_loads(b)
        for b in range(groups):
            if late:  # each chunk's shared loads just before its math
                body += weight_loads(b)
            body.append(self.chunk_math(b, nacc))
            if b + early_x < groups:  # late 2 / 3: chunk b + early_x's x after chunk b's math
                body += x_loads(b + early_x)
        if self.per_warp > 1:  # the end of the warp's first K range
            body.append(
                If((V("st") + 1).eq(V("per_warp") / groups), self.move_partials(V("early").at(V("warp")), nacc))
            )
        for ring in ("rd", "wr"):
            r = V(ring)
            body.append(Assign(r, select((r + 1).eq(stages), 0, r + 1)))
        return out + [
            Decls("int", [("rd", Const(0)), ("wr", Const(stages - 1))]),
            Loop("st", Const(0), V("st").lt(V("nst")), None, body, unroll=1),
            AsyncWait(0),
            Line([Barrier()], comment="the ring becomes the reduction buffer"),
        ]

    def lower(self):
        return self.bound(super().lower(), self.s.blocks)

    def bound(self, kernel: KernelDef, blocks: int) -> KernelDef:
        """`blocks` per SM asked for (capping registers; 0: none), but no more than the rings let
        share one; rings over 48 KB sized at launch."""
        fit = max(1, self.s.smem_sm // (self.ring_bytes + DRIVER_SHARED_PER_BLOCK))
        kernel.min_groups = min(blocks, fit)
        kernel.dynamic_shared = self.ring_bytes if self.ring_bytes > STATIC_SHARED_BYTES else 0
        return kernel

    def red_bytes(self, nacc: int) -> int:
        return self.splits * nacc * self.tiles * self.rt * 4 * 32 * 4

    def sq_declaration(self):
        """The sums of squares in the ring, after the partial sums (k_loop sized it for both)."""
        return View("metile_sq", "f32", (self.s.BM,), V("metile_ring") + self.red_bytes(self.nacc))

    def partial_dims(self, nacc: int) -> tuple[int, ...]:
        return (nacc, self.tiles, self.rt, 4, 32)

    def move_partials(self, dst: Expr, nacc: int) -> list:
        """The lane's partial sums into `dst` (a [acc][tile][row tile][element][lane] array), then zeroed."""
        return [Line([Assign(dst.at(*at), run), Assign(run, Const(0.0, "f32"))]) for run, at in self.partials(nacc)]

    def store_partials(self, nacc: int) -> list:
        """Two K ranges per warp: ranges 2w and 2w + 1 into `red` - the first from `early`
        where the warp's range reached its end, else the running sums and then zeros."""
        if self.per_warp == 1:
            return super().store_partials(nacc)
        warp, red, crossed = V("warp"), V("red"), V("crossed")
        out: list = [Decl("bool", "crossed", V("nst").ge(V("per_warp") / self.groups), const=True)]
        for run, at in self.partials(nacc):
            out.append(Assign(red.at(2 * warp, *at), select(crossed, V("early").at(warp, *at), run)))
            out.append(Assign(red.at(2 * warp + 1, *at), select(crossed, run, Const(0.0, "f32"))))
        return out

    def reduction_buffer(self, body: list, nacc: int) -> None:
        """The ring, reused: every copy has landed and every warp left the loop."""
        body.append(View("red", "f32", self.partial_dims(nacc), V("metile_ring")))
