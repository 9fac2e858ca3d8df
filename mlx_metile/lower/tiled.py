"""The `tiled` schedule: a GEMM-shaped kernel whose sums keep split-K's order.

A threadgroup of T threads owns a BM x BN output tile; thread (tr, tc) owns
rows tr + (T/(BN/TN))*i and columns tc + (BN/TN)*j. Each output is built as
the `simd_splitk` schedule builds it, so its bits match that schedule's:

    for li in 0..32:                  leaf = bit-reverse(li), the lane it stands for
        p = init
        for kb: for vg: for vs: stage S k positions of x and of the dequantised weights
                        (k = BK*kb + VK*leaf + G*vg + S*vs + v) in threadgroup memory,
                        then p = fma(x, w, p) over v ascending
        fold p into a 5-level stack (pairwise sums in leaf order)

G is the largest quantization group between S and VK (`group_step`), else VK (no vg loop):
only with G*vg apart is such a group's scale and bias index `(G*vg + S*vs + v) / g` exact, so
they are loaded once per G k, before the vs loop, rather than once per k. The order of k in a
sum is the same either way.

The xor butterfly of a SIMD-group sum first adds lanes l and l^16, then
l^8, ...; visiting lanes in bit-reversed order makes those pairs adjacent, so
the pairwise stack reproduces its tree exactly (IEEE addition commutes, so
operand order within a pair does not matter).

Staging: x[BM, S] (one position per thread) and, per dot, w[BN, S] (one
column per thread, its S positions unrolled) as f32 values computed by the
same element expressions the split-K lanes evaluate; each weight, scale and
bias element is loaded once per threadgroup, i.e. once per BM rows.
"""

from __future__ import annotations

from ..codegen.ast import Assign, Barrier, Call, Comment, Const, Decl, If, IntPoly, KernelDef, Loop, Paren, Var, chain
from .base import LowerError, Lowering, Scope
from .poly import Poly

LEAVES = 32  # the SIMD-group width whose sum order is reproduced
LEVELS = 5  # log2(LEAVES)


def _bit_reverse5(var: str):
    v = Var(var)
    parts = [Paren(Paren(v & 1) << 4), Paren(Paren(v & 2) << 2), Paren(v & 4), Paren(Paren(v & 8) >> 2)]
    return Paren(chain("|", [*parts, Paren(Paren(v & 16) >> 4)]))


def group_step(VK: int, S: int, groups: list[int]) -> int:
    """The k per `vg` step: the largest group larger than S and smaller than VK, else VK. A
    group of S k or fewer is whole in each stage and one of VK is one per K step; with groups
    powers of two and S 32 (or VK), at most one group size lies between them."""
    return max([g for g in groups if S < g < VK], default=VK)


class TiledLowering(Lowering):
    def lower(self) -> KernelDef:
        s = self.s
        T, S, VK = s.threads, s.S, s.VK
        col_threads = s.BN // s.TN
        row_threads = T // col_threads
        if row_threads * s.TM != s.BM or VK % S or T % S or (s.BM * S) % T or s.BN > T:
            raise LowerError(f"{self.p.name}: inconsistent tiled schedule ({s.describe()})")
        body: list = []
        root = Scope(body)
        order = self.prologue(body, root)
        nacc = len(order)

        tid = Var("tid")
        body.append(Decl("int", "tid", Call("tid"), const=True))
        body.append(Decl("int", "tr", tid / col_threads, const=True))
        body.append(Decl("int", "tc", tid % col_threads, const=True))
        self.bounds.update(tr=row_threads, tc=col_threads, leaf=LEAVES)
        # x is staged one position per thread: position sv of row srow
        body.append(Decl("int", "sv", tid % S, const=True))
        body.append(Decl("int", "srow", tid / S, const=True))
        self.bounds.update(sv=S, srow=T // S)

        # threadgroup tiles, padded by one column against bank conflicts
        x_tiles: dict[int, str] = {}
        for d in order:
            if d.args[0].id not in x_tiles:
                x_tiles[d.args[0].id] = f"xs{len(x_tiles)}"
                body.append(Decl("f32", x_tiles[d.args[0].id], None, dims=(s.BM, S + 1), shared=True))
        for j in range(nacc):
            body.append(Decl("f32", f"ws{j}", None, dims=(s.BN, S + 1), shared=True))
        for j in range(nacc):
            body.append(Decl("f32", f"p{j}", None, dims=(s.TM, s.TN)))
            for level in range(LEVELS):
                body.append(Decl("f32", f"s{j}_{level}", None, dims=(s.TM, s.TN)))

        def out_at(i: int, jj: int) -> tuple[Poly, Poly]:
            return Poly.sym("tr") + row_threads * i, Poly.sym("tc") + col_threads * jj

        leaves = Loop("li", Const(0), Var("li").lt(LEAVES), Const(1))
        leaves.body.append(Decl("int", "leaf", _bit_reverse5("li"), const=True))
        lscope = Scope(leaves.body, root, defines="leaf")
        for j, c0 in enumerate(self.loop.init):
            for i in range(s.TM):
                for jj in range(s.TN):
                    val = self.elem(c0, out_at(i, jj), lscope)
                    leaves.body.append(Assign(Var(f"p{j}").at(i, jj), self.to(val, "f32")))

        kloop = Loop("kb", Const(0), IntPoly((Poly.sym("kb") * s.BK).terms).lt(self.stop.e), Const(1))
        kscope = Scope(kloop.body, lscope, defines="kb")
        G = group_step(VK, S, [w.group_size for w in self.spec.weights if w.quantized])
        k_group = Poly.sym("leaf") * VK
        gscope = kscope
        if G < VK:
            self.bounds["vg"] = VK // G
            vgloop = Loop("vg", Const(0), Var("vg").lt(VK // G), Const(1))
            gscope = Scope(vgloop.body, kscope, defines="vg")
            k_group = k_group + Poly.sym("vg") * G
        self.bounds["vs"] = G // S
        vsloop = Loop("vs", Const(0), Var("vs").lt(G // S), Const(1))
        vscope = Scope(vsloop.body, gscope, defines="vs")
        k_local = k_group + Poly.sym("vs") * S + Poly.sym("sv")

        vsloop.body.append(Comment("stage x and the dequantised weights for S k positions"))
        step = T // S
        for xid, name in x_tiles.items():
            a = next(d.args[0] for d in order if d.args[0].id == xid)
            for i in range(s.BM * S // T):
                e = self.elem(a, (Poly.sym("srow") + step * i, k_local), vscope)
                vsloop.body.append(Assign(Var(name).at(Var("srow") + step * i, "sv"), self.to(e, "f32")))
        # One thread per column stages its S weight positions, so each packed
        # word, scale and bias is loaded once per tile (16-byte loads where aligned).
        # What does not change with vs (a group's scale and bias) is loaded in
        # an `if` before the vs loop (before the vg loop where it does not change
        # with vg either), into variables declared ahead of it.
        self.bounds["tid"] = T
        pre_decls: list = []
        pre = If(tid.lt(s.BN))
        pre_scope = Scope(pre.body, kscope, fence=True, declare_in=pre_decls)
        group_decls: list = []
        group_pre = If(tid.lt(s.BN))
        stage_parent = pre_scope
        if G < VK:  # (the condition of `pre`, so a load may go to either)
            stage_parent = Scope(group_pre.body, pre_scope, defines="vg", declare_in=group_decls)
        for j, d in enumerate(order):
            guard = If(tid.lt(s.BN))
            scope = Scope(guard.body, stage_parent, defines="vs")
            for u in range(S):
                k = k_group + Poly.sym("vs") * S + u
                e = self.elem(d.args[1], (k, Poly.sym("tid")), scope)
                guard.body.append(Assign(Var(f"ws{j}").at(tid, u), self.to(e, "f32")))
            vsloop.body.append(guard)
        vsloop.body.append(Barrier())

        vloop = Loop("v", Const(0), Var("v").lt(S), Const(1), unroll=True)
        for j, d in enumerate(order):
            xname = x_tiles[d.args[0].id]
            for i in range(s.TM):
                a = Var(xname).at(Var("tr") + row_threads * i, "v")
                for jj in range(s.TN):
                    b = Var(f"ws{j}").at(Var("tc") + col_threads * jj, "v")
                    p = Var(f"p{j}").at(i, jj)
                    vloop.body.append(Assign(p, Call("fma", (a, b, p))))
        vsloop.body.append(vloop)
        vsloop.body.append(Barrier())
        stage = [vsloop]
        if G < VK:
            vgloop.body += group_decls + ([group_pre] if group_pre.body else []) + [vsloop]
            stage = [vgloop]
        kloop.body += pre_decls + ([pre] if pre.body else []) + stage
        leaves.body.append(kloop)
        leaves.body += self.fold(nacc)
        body.append(leaves)

        for i in range(s.TM):
            for jj in range(s.TN):
                r, n = out_at(i, jj)
                self.render_stores(body, root, r, n, lambda j, i=i, jj=jj: Var(f"p{j}").at(i, jj))
        return self.kernel(body)

    def fold(self, nacc: int) -> list:
        """Push leaf li's partial sums: while li's low bits are 1, add the
        stack level they complete; after li = 31 the total is in p."""

        def level(k: int) -> list:
            if k == LEVELS:
                return []
            cells = [(j, i, jj) for j in range(nacc) for i in range(self.s.TM) for jj in range(self.s.TN)]
            p = {(j, i, jj): Var(f"p{j}").at(i, jj) for j, i, jj in cells}
            stack = {(j, i, jj): Var(f"s{j}_{k}").at(i, jj) for j, i, jj in cells}
            merge = [Assign(p[c], Paren(stack[c] + p[c])) for c in cells]
            keep = [Assign(stack[c], p[c]) for c in cells]
            bit = Paren(Var("li") & (1 << k))
            return [If(bit.ne(0), merge + level(k + 1)), If(bit.eq(0), keep)]

        return level(0)
