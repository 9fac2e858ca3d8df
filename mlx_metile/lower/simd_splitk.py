"""The `simd_splitk` lowering (1..32 rows, every target): lanes split K, every lane keeps all
rows' accumulators.

Each SIMD group owns NC columns; lane l takes VK consecutive k per step (k = 32*VK*kb + VK*l + v)
and keeps BM x NC f32 accumulators in registers, so each weight element it loads serves all BM
rows. A `simd_sum` per accumulator ends the K loop; lane c then finishes column c for every row,
so per-column data (a bias) is read once. A row's sum order depends only on VK and the fixed
`simd_sum` tree, never on BM or NC: rows are invariant.
"""

from __future__ import annotations

from ..codegen.ast import Assign, Call, Const, Decl, If, IntPoly, KernelDef, Loop, Var
from .base import Elem, Lowering, Scope
from .poly import Poly


class SplitKLowering(Lowering):
    def lower(self) -> KernelDef:
        s = self.s
        body: list = []
        root = Scope(body)
        order = self.prologue(body, root)

        nacc = len(order)
        for j in range(nacc):
            body.append(Decl("f32", f"acc{j}", None, dims=(s.BM, s.NC)))
        r = Var("r")
        init = Loop("r", Const(0), r.lt(s.BM), Const(1), unroll=True)
        init_scope = Scope(init.body, root)
        for j, c0 in enumerate(self.loop.init):
            for c in range(s.NC):
                n = Poly.sym("sg") * s.NC + c
                val = self.elem(c0, (Poly.sym("r"), n), init_scope)
                init.body.append(Assign(Var(f"acc{j}").at(r, c), self.to(val, "f32")))
        body.append(init)

        # for kb: for vw (words of the lane's VK positions): U positions unrolled
        kloop = Loop("kb", Const(0), IntPoly((Poly.sym("kb") * s.BK).terms).lt(self.stop.e), Const(1))
        kscope = Scope(kloop.body, root, defines="kb")
        words = s.VK // s.U
        self.bounds["vw"] = words
        vloop = Loop("vw", Const(0), Var("vw").lt(words), Const(1))
        vscope = Scope(vloop.body, kscope, defines="vw")

        def k_at(u: int) -> Poly:
            return Poly.sym("lane") * s.VK + Poly.sym("vw") * s.U + u

        # The U positions go in chunks of C (a 16-byte vector of x): each chunk's
        # weights (C x NC values) are live only while its row loop runs, which
        # keeps the registers to BM*NC + C*NC + C per lane. Sum order per
        # (row, column) stays k ascending.
        for start in range(0, s.U, s.C):
            chunk = range(start, start + s.C)
            bvals: dict[tuple[int, int, int], Elem] = {}
            for u in chunk:
                for c in range(s.NC):
                    n = Poly.sym("sg") * s.NC + c
                    for j, d in enumerate(order):
                        e = self.elem(d.args[1], (k_at(u), n), vscope)
                        bvals[(j, u, c)] = self.temp(vscope, "f32", self.to(e, "f32"), e.loop_deps)
            rloop = Loop("r", Const(0), r.lt(s.BM), Const(1), unroll=True)
            rscope = Scope(rloop.body, vscope, defines="r")
            for u in chunk:
                for j, d in enumerate(order):
                    e = self.elem(d.args[0], (Poly.sym("r"), k_at(u)), rscope)
                    a = self.temp(rscope, "f32", self.to(e, "f32"), e.loop_deps)
                    for c in range(s.NC):
                        acc = Var(f"acc{j}").at(r, c)
                        rloop.body.append(Assign(acc, Call("fma", (a.e, bvals[(j, u, c)].e, acc))))
            vloop.body.append(rloop)
        kloop.body.append(vloop)
        body.append(kloop)

        reduce = Loop("r", Const(0), r.lt(s.BM), Const(1), unroll=True)
        for j in range(nacc):
            for c in range(s.NC):
                acc = Var(f"acc{j}").at(r, c)
                reduce.body.append(Assign(acc, Call("simd_sum", (acc,))))
        body.append(reduce)

        # Lane c finishes column c of every row (rows unrolled), so values
        # that depend only on the column - a bias - are loaded once.
        for c in range(s.NC):
            owner = If(Var("lane").eq(c))
            escope = Scope(owner.body, root, fence=True)
            n = Poly.sym("sg") * s.NC + c
            for row in range(s.BM):
                self.render_stores(
                    owner.body, escope, Poly.const(row), n, lambda j, row=row, c=c: Var(f"acc{j}").at(row, c)
                )
            body.append(owner)
        return self.kernel(body)
