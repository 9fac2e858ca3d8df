"""The `nax_staged` schedule: as `nax_direct` (lower/nax_direct.py), but the weights are
dequantized into threadgroup memory first, then loaded into the right operand's fragments from
there (MLX's quantized NAX GEMM's policy); x is read straight into the left operand.

Per vw chunk (U k of each of the four column groups of a K step), between two barriers, thread t
of the threadgroup dequantizes units (column n, column group t & 3), n = t / 4 + (threads / 4) i
for i < 4 BN / threads: U consecutive k of one column - whole packed words, with the group's scale
and bias loaded once per K step - each rounded once to the operand dtype, into

    ws_j[n * stride + 16 (u / 4) + 4 (t & 3) + u % 4]     (u < U; stride = 4 U + row_pad / 2)

that is, row n holds the chunk's U / 4 runs of 16 fragment columns in the order the fragments
take them. Each SIMD group then loads its right operands from a threadgroup tensor view of its 32
rows and one run's 16 columns (`cooperative_tensor::load`). Rows are padded by row_pad bytes
(MLX pads its staged rows by 16 bytes). The operands and their order are those of `nax_direct`,
so both compute the same bits.
"""

from __future__ import annotations

from ..codegen.ast import Assign, Barrier, Call, Const, CoopLoad, Decl, Index, IntPoly, TensorView, Var
from ..ir.nodes import Op
from ..schedule import Schedule
from ..schedule.nax import FRAGMENT_K, FRAGMENT_N, OPERAND_BYTES, staged_bytes
from ..schedule.schedule import NAX_COLUMN_GROUPS
from ..spec import ProjectionSpec
from .base import LowerError, Scope
from .nax_direct import K_PER_SLOT_ROW, NaxDirectLowering
from .poly import Poly


class NaxStagedLowering(NaxDirectLowering):
    def __init__(self, program, schedule: Schedule, spec: ProjectionSpec):
        super().__init__(program, schedule, spec)
        s = schedule
        if s.row_pad < 0 or s.row_pad % OPERAND_BYTES:
            raise LowerError(f"{program.name}: {s.kind}: row_pad={s.row_pad} bytes is not whole operand elements")
        self.stride = NAX_COLUMN_GROUPS * s.U + s.row_pad // OPERAND_BYTES  # elements per staged row
        self.units = NAX_COLUMN_GROUPS * s.BN // s.threads  # (column, column group) units per thread
        need = staged_bytes(spec, s.SG, s.NC, s.U, s.row_pad)
        if s.smem_block <= 0:
            raise LowerError(f"{program.name}: {s.kind}: the Schedule carries no threadgroup memory size (smem_block)")
        if need > s.smem_block:
            raise LowerError(
                f"{program.name}: {s.kind}: the staged weights take {need} bytes of threadgroup memory, "
                f"the target gives {s.smem_block} (fewer SIMD groups, a smaller U or row_pad)"
            )

    def declarations(self, body: list, nacc: int) -> None:
        super().declarations(body, nacc)
        tid = Call("tid")
        body.append(Decl("int", "sn", tid >> 2, const=True))  # the thread's first staged column
        body.append(Decl("int", "sc", tid & 3, const=True))  # and its column group
        self.bounds.update(sn=self.s.threads // NAX_COLUMN_GROUPS, sc=NAX_COLUMN_GROUPS)
        for j in range(nacc):
            body.append(Decl(self.act, f"ws{j}", None, dims=(self.s.BN * self.stride,), shared=True))

    def stage(self, out: list, scope: Scope, order: list[Op]) -> None:
        """This vw chunk's weights, dequantized by the whole threadgroup into ws_j."""
        s = self.s
        out.append(Barrier())  # the previous chunk's fragments are loaded
        for j, d in enumerate(order):
            for i in range(self.units):
                n = Poly.sym("sn") + (s.threads // NAX_COLUMN_GROUPS) * i
                for u in range(s.U):
                    k = Poly.sym("sc") * s.VK + Poly.sym("vw") * s.U + u
                    e = self.elem(d.args[1], (k, n), scope)
                    pos = n * self.stride + Poly.sym("sc") * K_PER_SLOT_ROW + (FRAGMENT_K * (u // 4) + u % 4)
                    out.append(Assign(Index(Var(f"ws{j}"), IntPoly(pos.terms)), self.to(e, self.act)))
        out.append(Barrier())  # the chunk is in threadgroup memory

    def right_operand(self, out: list, scope: Scope, d: Op, j: int, f: int, run: int) -> None:
        """The SIMD group's 32 rows of ws_j, run `run`'s 16 fragment columns, into the fragments."""
        s = self.s
        first = Poly.sym("sg") * (s.NC * self.stride) + (FRAGMENT_N * f * self.stride + FRAGMENT_K * run)
        view = f"wv{j}_{f}_{run}"
        extents, strides = (Const(FRAGMENT_K), Const(FRAGMENT_N)), (Const(1), Const(self.stride))
        base = Var(f"ws{j}") + IntPoly(first.terms)
        out.append(TensorView(view, "threadgroup", self.act, base, extents, strides))
        out.append(CoopLoad(f"b{j}_{f}", view))
