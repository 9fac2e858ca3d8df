"""The `nax_direct` schedule (Metal with neural accelerators): MetalPerformancePrimitives'
matmul2d (16, 32, 16) per SIMD group, the weights loaded from device memory straight into the
right operand's fragment slots (dequantized in registers), x into the left operand's.

A threadgroup of SG SIMD groups owns BN = SG x NC columns and BM rows (BM/16 row fragments; up
to 32 rows every row of the call, so each weight element is read once per call). SIMD group sg
owns NC columns, NC/32 destination tensors of 16 x 32 f32 per row fragment and accumulator, carried
over the K loop (multiply_accumulate). One `run(left, right, destination)`:

    left  (16 x 16): 16 rows x 16 k of x, in the operand dtype (x's: bf16 or f16);
    right (32 x 16, transpose_right: stored N x K like the weight): 32 columns x the same 16 k,
                     each element dequantized in f32 by the format's tile IR, rounded once to the
                     operand dtype;
    destination (16 x 32): f32.

Lane l's slots hold (MLX's fixed lane map, docs/NAX.md) rows nr and nr + 8 of a fragment and its
fragment columns 4 nk .. 4 nk + 3, nr = ((l >> 2) & 4) | ((l >> 1) & 3), nk = ((l >> 2) & 2) | (l & 1).
The k order inside a fragment is free (left and right use the same one), so fragment column
4 nk + c of run t of a K step takes k = BK kb + VK nk + 4 t + c: each column group's lanes walk VK
consecutive k of their columns (a whole quantization group, whole 16 bytes), so every packed word,
scale and bias is loaded by one lane once. The runs of a K step go U k of each column group at a
time (the `vw` loop), U / 4 runs unrolled.

After the K loop each lane finishes its own destination slots through the program's epilogue
(bias, SwiGLU, GELU, residual) and stores them. A row's sum order - the run order, then the
fragment's k order - depends only on VK, never on BM, SG or NC: rows are invariant. The direct and
staged lowerings feed matmul2d the same operands in the same order: the same bits.
"""

from __future__ import annotations

from ..codegen.ast import (
    Assign,
    Const,
    CoopTensor,
    Decl,
    Expr,
    IntPoly,
    KernelDef,
    Loop,
    NaxOp,
    NaxRun,
    Paren,
    Slot,
    SlotLoop,
    Var,
)
from ..ir.nodes import Op
from ..schedule import Schedule
from ..schedule.nax import FRAGMENT_K, FRAGMENT_M, FRAGMENT_N, GEMM_ROWS, unsupported
from ..schedule.schedule import NAX_COLUMN_GROUPS
from ..spec import ProjectionSpec
from .base import LowerError, Lowering, Scope
from .poly import Poly

SLOTS_PER_FRAGMENT = 8  # a lane's elements of a 16 x 16 fragment
K_PER_SLOT_ROW = 4  # consecutive fragment columns a lane holds per row
OP = "mm"  # the matmul2d object's name
MAX_THREADS = 1024


def lane_layout() -> list[Decl]:
    """The lane's fragment row nr (its slots 0-3; 4-7 are row nr + 8) and column group nk."""
    lane = Var("lane")
    nr = Paren(Paren(Paren(lane >> 2) & 4) | Paren(Paren(lane >> 1) & 3))
    nk = Paren(Paren(Paren(lane >> 2) & 2) | Paren(lane & 1))
    return [Decl("int", "nr", nr, const=True), Decl("int", "nk", nk, const=True)]


class NaxDirectLowering(Lowering):
    def __init__(self, program, schedule: Schedule, spec: ProjectionSpec):
        super().__init__(program, schedule, spec)
        self.check()
        self.row_frags = schedule.BM // FRAGMENT_M
        self.col_frags = schedule.NC // FRAGMENT_N
        self.runs = schedule.U // K_PER_SLOT_ROW  # runs per U k of each column group
        self.act = spec.act_dtype

    def check(self) -> None:
        """Legality of the Schedule for the spec: LowerError naming what is wrong."""
        s, name = self.s, self.p.name
        reason = unsupported(self.spec)
        if reason is not None:
            raise LowerError(f"{name}: {s.kind}: {reason}")
        if s.BM <= 0 or s.BM % FRAGMENT_M or s.BM > GEMM_ROWS:
            rule = f"a multiple of the fragment's {FRAGMENT_M} rows, at most {GEMM_ROWS}"
            raise LowerError(f"{name}: {s.kind}: BM={s.BM} must be {rule}")
        if s.NC <= 0 or s.NC % FRAGMENT_N:
            raise LowerError(f"{name}: {s.kind}: NC={s.NC} must be a multiple of matmul2d's n = {FRAGMENT_N}")
        if s.SG < 1 or s.threads > MAX_THREADS:
            raise LowerError(f"{name}: {s.kind}: SG={s.SG} SIMD groups: 1 to {MAX_THREADS // 32} fit a threadgroup")
        if s.U <= 0 or s.U % K_PER_SLOT_ROW or s.VK % s.U:
            raise LowerError(
                f"{name}: {s.kind}: U={s.U} must be a multiple of the {K_PER_SLOT_ROW} k a lane's slot row "
                f"holds and divide VK={s.VK}"
            )
        if s.BK != NAX_COLUMN_GROUPS * s.VK or (NAX_COLUMN_GROUPS * K_PER_SLOT_ROW) != FRAGMENT_K:
            raise LowerError(f"{name}: {s.kind}: a K step must be {NAX_COLUMN_GROUPS} column groups of VK k")

    # -- operands ------------------------------------------------------------------------------
    def k_at(self, run: int, c: int) -> Poly:
        """k (within the K step) of fragment column 4 nk + c in run `run` of the current vw chunk."""
        s = self.s
        return Poly.sym("nk") * s.VK + Poly.sym("vw") * s.U + (K_PER_SLOT_ROW * run + c)

    @staticmethod
    def fragment_row(slot: int) -> Poly:
        """The row (of a 16-row fragment) of slot `slot` of this lane's 8."""
        return Poly.sym("nr") + 8 * (slot // 4)

    def column(self, f: int, slot: int) -> Poly:
        """The column (within the threadgroup's BN) of right-operand slot `slot` (0..15) of the
        SIMD group's column fragment f: two 16-column halves of 8 slots."""
        return self.fragment_row(slot % 8) + Poly.sym("sg") * self.s.NC + (FRAGMENT_N * f + 16 * (slot // 8))

    def stage(self, out: list, scope: Scope, order: list[Op]) -> None:
        """What a vw chunk does before its runs (the staged lowering fills threadgroup memory)."""

    def right_operand(self, out: list, scope: Scope, d: Op, j: int, f: int, run: int) -> None:
        """Right-operand slots from device memory: each a weight element dequantized in f32 by
        the format's tile IR, rounded once to the operand dtype."""
        for i in range(2 * SLOTS_PER_FRAGMENT):
            e = self.elem(d.args[1], (self.k_at(run, i % 4), self.column(f, i)), scope)
            out.append(Assign(Slot(f"b{j}_{f}", Const(i)), self.to(e, self.act)))

    def left_operand(self, out: list, scope: Scope, x, rm: int, run: int) -> None:
        for i in range(SLOTS_PER_FRAGMENT):
            row = self.fragment_row(i) + FRAGMENT_M * rm
            e = self.elem(x, (row, self.k_at(run, i % 4)), scope)
            out.append(Assign(Slot(f"a{rm}", Const(i)), self.to(e, self.act)))

    def declarations(self, body: list, nacc: int) -> None:
        """The matmul2d, its cooperative tensors, and what the staged lowering adds."""
        act = self.act
        body.append(NaxOp(OP, FRAGMENT_M, FRAGMENT_N, FRAGMENT_K, transpose_left=False, transpose_right=True))
        for rm in range(self.row_frags):
            body.append(CoopTensor(f"a{rm}", OP, "left", "f32", act, act))
        for j in range(nacc):
            for f in range(self.col_frags):
                body.append(CoopTensor(f"b{j}_{f}", OP, "right", "f32", act, act))

    def accumulators(self, body: list, root: Scope, nacc: int) -> None:
        """The destination tensors, each slot set to the loop's initial value (a constant)."""
        for j, c0 in enumerate(self.loop.init):
            op = self.defs.get(c0.id)
            if op is None or op.kind not in ("const", "full"):
                raise LowerError(f"{self.p.name}: {self.s.kind}: the accumulators must start from a constant")
            init = self.to(self.elem(c0, (Poly.const(0), Poly.const(0)), root), "f32")
            for rm in range(self.row_frags):
                for f in range(self.col_frags):
                    name = f"c{j}_{rm}_{f}"
                    body.append(CoopTensor(name, OP, "destination", "f32", "a0", "b0_0"))
                    body.append(SlotLoop("i", name, [Assign(Slot(name, Var("i")), init)]))

    # -- the kernel ----------------------------------------------------------------------------
    def lower(self) -> KernelDef:
        s = self.s
        body: list = []
        root = Scope(body)
        order = self.prologue(body, root)
        nacc = len(order)
        xs = {d.args[0].id for d in order}
        if len(xs) != 1:
            raise LowerError(f"{self.p.name}: {s.kind}: every product must read the same x tile")
        x = order[0].args[0]
        self.use_helper("nax")
        body += lane_layout()
        self.bounds.update(nr=8, nk=NAX_COLUMN_GROUPS, vw=s.VK // s.U)
        self.declarations(body, nacc)
        self.accumulators(body, root, nacc)

        kloop = Loop("kb", Const(0), IntPoly((Poly.sym("kb") * s.BK).terms).lt(self.stop.e), Const(1))
        kscope = Scope(kloop.body, root, defines="kb")
        vloop = Loop("vw", Const(0), Var("vw").lt(s.VK // s.U), Const(1))
        vscope = Scope(vloop.body, kscope, defines="vw")
        self.stage(vloop.body, vscope, order)
        for run in range(self.runs):
            for j, d in enumerate(order):
                for f in range(self.col_frags):
                    self.right_operand(vloop.body, vscope, d, j, f, run)
            for rm in range(self.row_frags):
                self.left_operand(vloop.body, vscope, x, rm, run)
            for j in range(nacc):
                for rm in range(self.row_frags):
                    for f in range(self.col_frags):
                        vloop.body.append(NaxRun(OP, f"a{rm}", f"b{j}_{f}", f"c{j}_{rm}_{f}"))
        kloop.body.append(vloop)
        body.append(kloop)

        # each lane finishes its own destination slots
        for rm in range(self.row_frags):
            for f in range(self.col_frags):
                for i in range(2 * SLOTS_PER_FRAGMENT):
                    row = self.fragment_row(i % 8) + FRAGMENT_M * rm
                    col = Poly.sym("sg") * s.NC + (FRAGMENT_N * f + 16 * (i // 8) + i % 4) + Poly.sym("nk") * 4
                    self.render_stores(body, root, row, col, self.slot_of(rm, f, i))
        return self.kernel(body)

    @staticmethod
    def slot_of(rm: int, f: int, i: int):
        def value(j: int) -> Expr:
            return Slot(f"c{j}_{rm}_{f}", Const(i))

        return value
