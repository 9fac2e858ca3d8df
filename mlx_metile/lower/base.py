"""The base of every lowering: a bound tile program rendered per element for a Schedule.

Accepted programs (the projection family): element-wise index and mask
arithmetic, one top-level loop over K whose carried values are f32
accumulators updated only by `dot(a[BM,BK], b[BK,BN], acc)`, and after the
loop element-wise epilogues ending in `store`s of [BM, BN] tiles. Anything
else is rejected with a LowerError naming the op.

Every tile value is rendered *per element*: `elem(v, index)` gives the C
expression of element `index` of `v`, with integer index math kept as
polynomials (poly.py) so equal offsets render equally and loads are shared.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..codegen.ast import (
    TRUE,
    Assign,
    Bin,
    Call,
    Comment,
    Const,
    Convert,
    Decl,
    Expr,
    If,
    Index,
    IntPoly,
    KernelDef,
    KernelParam,
    Paren,
    Select,
    Un,
    Var,
)
from ..ir.nodes import FLOAT_DTYPES, For, Op, Program, Value
from ..schedule import Schedule
from ..spec import ProjectionSpec
from .poly import Poly, divmod_const


class LowerError(ValueError):
    pass


@dataclass(frozen=True)
class Elem:
    """One element of a tile value: an integer polynomial, or an expression (named temporaries
    are Vars)."""

    dtype: str
    poly: Poly | None = None
    expr: Expr | None = None
    deps: frozenset[str] = frozenset()  # loop counters the value depends on

    @property
    def loop_deps(self) -> frozenset[str]:
        if self.poly is not None:
            return frozenset(sym for m, _ in self.poly.terms for sym in m) & LOOP_SYMBOLS
        return self.deps

    @property
    def e(self) -> Expr:
        return poly_expr(self.poly) if self.poly is not None else self.expr  # type: ignore[return-value]


def poly_expr(p: Poly) -> Expr:
    return IntPoly(p.terms)


def is_name(e: Expr) -> bool:
    """Whether `e` prints as a single identifier (a variable, a symbol, true / false): such a
    value needs no temporary."""
    if isinstance(e, Var):
        return True
    if isinstance(e, Const):
        return e.dtype == "bool"
    if isinstance(e, IntPoly) and len(e.terms) == 1:
        ((mono, coef),) = e.terms
        return len(mono) == 1 and coef == 1
    return False


LOOP_SYMBOLS = frozenset({"kb", "vw", "r", "leaf", "vg", "vs"})
VECTOR_WIDTH = {"u32": 4, "bf16": 8, "f16": 8, "f32": 4}  # elements per 16-byte load


class Scope:
    """A statement list; `defines` is the loop counter it introduces. A
    temporary goes to the innermost scope defining a counter it depends on,
    so loop-invariant loads are hoisted out of inner loops."""

    def __init__(
        self,
        stmts: list,
        parent: Scope | None = None,
        defines: str | None = None,
        fence: bool = False,
        declare_in: list | None = None,
    ):
        self.stmts = stmts
        self.parent = parent
        self.defines = defines
        self.fence = fence  # the body of an `if`: nothing is hoisted out of it
        # temporaries are declared here (outside this scope's block) and only
        # assigned in it, so that they stay visible after the block ends
        self.declare_in = declare_in
        self.cache: dict = {}

    def home(self, deps: frozenset[str]) -> Scope:
        s: Scope = self
        while s.parent is not None and not s.fence and (s.defines is None or s.defines not in deps):
            s = s.parent
        return s

    def get(self, key):
        s: Scope | None = self
        while s is not None:
            if key in s.cache:
                return s.cache[key]
            s = s.parent
        return None


def float_const(v: float) -> Const:
    if not math.isfinite(float(v)):
        raise LowerError(f"non-finite constant {v}")
    return Const(float(v), "f32")


def float_of(dtype: str, v: float) -> Expr:
    """A floating-point constant of `dtype` (f32, or converted from f32)."""
    return float_const(v) if dtype == "f32" else Convert(dtype, "f32", float_const(v))


class Lowering:
    """The public base class of the lowerings (one subclass per schedule, `lower()` building the
    kernel). `divisors` state known divisibility of scalar parameters (K by the group size);
    `vector_buffers` name the buffers whose loads may be widened to 16 bytes where the offset is
    provably aligned - both from the spec."""

    def __init__(self, program: Program, schedule: Schedule, spec: ProjectionSpec):
        self.p = program
        self.spec = spec
        self.vector_buffers = spec.vector_buffers()
        self.s = schedule
        self.divisors = {"K": spec.k_divisor}
        self.defs: dict[int, Op] = {}
        self.helpers: list[str] = []
        self.names = 0
        self.sym: dict[int, Poly] = {}
        self.acc: dict[int, int] = {}  # loop result / carried value id -> accumulator number
        # (row, column, accumulator j -> its value) while rendering the stores of one output element
        self.epilogue_at: tuple[Poly, Poly, Callable[[int], Expr]] | None = None
        self.bounds: dict[str, int] = {}  # exclusive upper bounds of loop counters
        tops = [n for n in program.body if isinstance(n, For)]
        if len(tops) != 1:
            raise LowerError(f"{program.name}: expected exactly one top-level loop over K, found {len(tops)}")
        self.loop = tops[0]
        for n in program.body + self.loop.body:
            if isinstance(n, For):
                if n is not self.loop:
                    raise LowerError(f"{program.name}: nested loops are not supported by {schedule.kind}")
                continue
            if n.result is not None:
                self.defs[n.result.id] = n

    def fresh(self, prefix: str) -> str:
        self.names += 1
        return f"{prefix}{self.names}"

    def use_helper(self, name: str) -> None:
        if name not in self.helpers:
            self.helpers.append(name)

    # -- element rendering ---------------------------------------------------
    def arg_index(self, arg: Value, out_shape: tuple, idx: tuple[Poly, ...]) -> tuple[Poly, ...]:
        shape = arg.type.shape
        sub = idx[len(out_shape) - len(shape) :]
        return tuple(Poly.const(0) if d == 1 else i for d, i in zip(shape, sub))

    def temp(self, scope: Scope, dtype: str, value: Expr, deps: frozenset[str] = frozenset()) -> Elem:
        """`value` as a named temporary of the innermost scope it depends on (one per value)."""
        if is_name(value):  # already a named value
            return Elem(dtype, expr=value, deps=deps)
        key = ("expr", dtype, value)
        hit = scope.get(key)
        if hit is not None:
            return hit
        home = scope.home(deps)
        name = self.fresh("t")
        if home.declare_in is not None:
            home.declare_in.append(Decl(dtype, name))
            home.stmts.append(Assign(Var(name), value))
        else:
            home.stmts.append(Decl(dtype, name, value, const=True))
        e = Elem(dtype, expr=Var(name), deps=deps)
        home.cache[key] = e
        return e

    def to(self, e: Elem, dtype: str) -> Expr:
        if e.dtype == dtype:
            return e.e
        src = "i32" if e.poly is not None else e.dtype
        return Convert(dtype, src, e.e)

    def elem(self, v: Value, idx: tuple[Poly, ...], scope: Scope) -> Elem:
        if v.id in self.sym:
            return Elem("i32", poly=self.sym[v.id])
        if v.id in self.acc:
            if self.epilogue_at is None:
                raise LowerError(f"{self.p.name}: an accumulator is read before the K loop ends")
            r, n, acc_value = self.epilogue_at
            # a size-1 dimension (BM == 1) is indexed by 0 under broadcasting
            want = tuple(Poly.const(0) if d == 1 else i for d, i in zip(v.type.shape, (r, n)))
            if idx != want:
                raise LowerError(f"{self.p.name}: an epilogue reads the accumulator at another element")
            return Elem("f32", expr=acc_value(self.acc[v.id]))
        key = ("elem", v.id, idx)
        hit = scope.get(key)
        if hit is not None:
            return hit
        op = self.defs.get(v.id)
        if op is None:
            raise LowerError(f"{self.p.name}: {v!r} has no definition the lowering can render")
        e = self.render_op(op, idx, scope)
        scope.cache[key] = e
        return e

    def render_op(self, op: Op, idx: tuple[Poly, ...], scope: Scope) -> Elem:
        k, dtype = op.kind, op.result.type.dtype
        shape = op.result.type.shape
        args = [
            self.elem(a, self.arg_index(a, shape, idx), scope) if k not in ("expand_dims", "trans") else None
            for a in op.args
        ]
        deps = frozenset().union(*(a.loop_deps for a in args if a is not None))
        if k in ("const", "full"):  # (a full tile: the same value at every index)
            val = op.attrs["value"]
            if dtype in ("i32", "u32"):
                return (
                    Elem(dtype, poly=Poly.const(int(val)))
                    if dtype == "i32"
                    else Elem(dtype, expr=Const(int(val), "u32"))
                )
            if dtype == "bool":
                return Elem(dtype, expr=Const(bool(val), "bool"))
            return Elem("f32" if dtype == "f32" else dtype, expr=float_of(dtype, val))
        if k == "program_id":
            return Elem("i32", poly=Poly.sym(f"pid{op.attrs['axis']}"))
        if k == "arange":
            return Elem("i32", poly=idx[0])
        if k == "expand_dims":
            ax = op.attrs["axis"]
            return self.elem(op.args[0], idx[:ax] + idx[ax + 1 :], scope)
        if k == "trans":
            return self.elem(op.args[0], tuple(reversed(idx)), scope)
        if k == "binary":
            return self.binary(op.attrs["op"], args[0], args[1], dtype, scope, deps)
        if k == "unary":
            name = op.attrs["op"]
            x = self.to(args[0], "f32")
            if name == "neg":
                value: Expr = Paren(Un("-", x))
            else:
                if name in ("erf", "sigmoid", "silu", "gelu", "gelu_approx"):
                    self.use_helper(name)
                value = Call(name, (x,))
            return self.temp(scope, dtype, value if dtype == "f32" else Convert(dtype, "f32", value), deps)
        if k == "select":
            choice = Select(args[0].e, self.to(args[1], dtype), self.to(args[2], dtype))
            return self.temp(scope, dtype, Paren(choice), deps)
        if k == "cast":
            if args[0].dtype == dtype:
                return args[0]
            if dtype == "f32" and args[0].dtype == "u32" and self.below_2_23(op.args[0]):
                # exact either way; a dialect may spell it without an int->float
                # conversion (CUDA: those issue at a quarter of the FMA rate)
                return self.temp(scope, dtype, Call("u2f_small", (args[0].e,)), deps)
            return self.temp(scope, dtype, self.to(args[0], dtype), deps)
        if k == "bitcast":
            if (args[0].dtype, dtype) != ("u32", "f32"):
                raise LowerError(f"{self.p.name}: no element-wise bitcast of {args[0].dtype} to {dtype}")
            return self.temp(scope, dtype, Call("bits_as_f32", (args[0].e,)), deps)
        if k == "load":
            return self.load(op, args, scope, deps)
        raise LowerError(f"{self.p.name}: cannot lower a {k} op element-wise")

    def below_2_23(self, v: Value) -> bool:
        """Whether an unsigned value is provably < 2**23: `anything & c` with such a constant c."""
        op = self.defs.get(v.id)
        if op is None or op.kind != "binary" or op.attrs["op"] != "bitand":
            return False
        for a in op.args:
            c = self.defs.get(a.id)
            if c is not None and c.kind in ("const", "full") and 0 <= int(c.attrs["value"]) < 2**23:
                return True
        return False

    def binary(self, name: str, a: Elem, b: Elem, dtype: str, scope: Scope, deps: frozenset[str]) -> Elem:
        if a.poly is not None and b.poly is not None and dtype == "i32":
            if name == "add":
                return Elem(dtype, poly=a.poly + b.poly)
            if name == "sub":
                return Elem(dtype, poly=a.poly - b.poly)
            if name == "mul":
                return Elem(dtype, poly=a.poly * b.poly)
            if name in ("floordiv", "mod") and b.poly.is_const:
                qr = divmod_const(a.poly, b.poly.const_value, self.bounds)
                if qr is not None:
                    return Elem(dtype, poly=qr[0] if name == "floordiv" else qr[1])
        if name == "lt" and a.poly is not None and b.poly is not None and len(b.poly.terms) == 1:
            # a < d*S  <=>  a // e < (d/e)*S for e dividing d (a >= 0): puts every
            # position of one packed word, group or vector under the same mask,
            # so their shared load is one load. The largest exact e wins.
            ((mono, d),) = b.poly.terms
            e = d if mono != () else 1
            while e > 1:
                qr = divmod_const(a.poly, e, self.bounds)
                if qr is not None:
                    a, b = Elem("i32", poly=qr[0]), Elem("i32", poly=Poly.make({mono: d // e}))
                    deps = a.loop_deps | b.loop_deps
                    break
                e //= 2
        if name in ("lt", "le", "gt", "ge", "eq"):
            sym = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "=="}[name]
            if a.dtype in FLOAT_DTYPES or b.dtype in FLOAT_DTYPES:
                return self.temp(scope, "bool", Paren(Bin(sym, self.to(a, "f32"), self.to(b, "f32"))), deps)
            return self.temp(scope, "bool", Paren(Bin(sym, a.e, b.e)), deps)
        if name in ("and", "or"):
            if a.expr == TRUE:
                return b if name == "and" else a
            if b.expr == TRUE:
                return a if name == "and" else b
            return self.temp(scope, "bool", Paren(Bin("&&" if name == "and" else "||", a.e, b.e)), deps)
        if dtype in FLOAT_DTYPES:
            x, y = self.to(a, "f32"), self.to(b, "f32")
            if name in ("max", "min"):
                value: Expr = Call(name, (x, y))
            else:
                spelled = dict(add="+", sub="-", mul="*", div="/").get(name)
                if spelled is None:
                    raise LowerError(f"{self.p.name}: float op {name} is not supported")
                value = Paren(Bin(spelled, x, y))
            return self.temp(scope, dtype, value if dtype == "f32" else Convert(dtype, "f32", value), deps)
        ops = {"add": "+", "sub": "-", "mul": "*", "floordiv": "/", "mod": "%", "shr": ">>", "shl": "<<", "bitand": "&"}
        if name not in ops:
            raise LowerError(f"{self.p.name}: integer op {name} is not supported")
        return self.temp(scope, dtype, Paren(Bin(ops[name], self.to(a, dtype), self.to(b, dtype))), deps)

    def load(self, op: Op, args: list[Elem], scope: Scope, deps: frozenset[str]) -> Elem:
        buf = op.attrs["buffer"]
        dtype = op.result.type.dtype
        vector = self.vector_load(buf, dtype, args, op.attrs["other"], scope, deps)
        if vector is not None:
            return vector
        access: Expr = Index(Var(buf), args[0].e)
        if len(args) > 1 and args[1].expr != TRUE:
            other = op.attrs["other"]
            if dtype in FLOAT_DTYPES:
                fill = float_of(dtype, other)
            else:
                fill = Const(int(other), "u32" if dtype == "u32" else "i32")
            access = Paren(Select(args[1].e, access, fill))
        return self.temp(scope, dtype, access, deps)

    def vector_load(self, buf: str, dtype: str, args: list[Elem], other, scope: Scope, deps) -> Elem | None:
        """A 16-byte load holding this element, when provably aligned.

        The offset's non-constant coefficients are all multiples of W (the
        elements per 16 bytes), so [base, base + W) is aligned and - since a
        row's length is among those coefficients - inside one row: where the
        mask admits this element, the whole vector is in bounds. Equal vectors
        (same base and mask) are one load."""
        width = VECTOR_WIDTH.get(dtype)
        p = args[0].poly
        if buf not in self.vector_buffers or width is None or p is None or other != 0:
            return None
        if any(c % width or c < 0 for m, c in p.terms if m != ()) or p.const_value < 0:
            return None
        if p.is_const:
            return None
        sub = p.const_value % width
        base = p - sub
        mask = args[1].e if len(args) > 1 else TRUE
        vec = self.temp(scope, f"v{dtype}", Call(f"vload_{dtype}", (Var(buf), poly_expr(base), mask)), deps)
        return Elem(dtype, expr=Call(f"vget_{dtype}", (vec.e, Const(sub))), deps=vec.deps)

    # -- the kernel ------------------------------------------------------------
    def prologue(self, body: list, root: Scope) -> list[Op]:
        """Thread indices, scalar parameters, and the K loop's dots in yield
        order (checked against the schedule's tile shapes)."""
        s, loop = self.s, self.loop
        body.append(Comment(self.s.describe()))
        body.append(Decl("int", "pid0", Call("program_id0"), const=True))
        body.append(Decl("int", "pid1", Call("program_id1"), const=True))
        body.append(Decl("int", "lane", Call("lane"), const=True))
        body.append(Decl("int", "sg", Call("simdgroup"), const=True))
        for name, value in self.p.param_values.items():
            d = self.divisors.get(name, 1)
            if d > 1:
                body.append(Decl("int", f"{name}_d", Var(name) / d, const=True))
                self.sym[value.id] = Poly.sym(f"{name}_d") * d
            else:
                self.sym[value.id] = Poly.sym(name)

        # the K loop: start 0, step BK; its counter is written BK*kb
        dots = [n for n in loop.body if isinstance(n, Op) and n.kind == "dot"]
        if not dots or len(dots) != len(loop.carried):
            raise LowerError(f"{self.p.name}: every carried value must be updated by one dot")
        order = []
        for y in loop.yields:
            d = next((d for d in dots if d.result.id == y.id), None)
            if d is None or d.args[2].id not in {c.id for c in loop.carried}:
                raise LowerError(f"{self.p.name}: loop yields must be dot(a, b, carried)")
            order.append(d)
        for j, (c, r) in enumerate(zip(loop.carried, loop.results)):
            self.acc[c.id] = j
            self.acc[r.id] = j
        for d in order:
            a, b = d.args[0].type.shape, d.args[1].type.shape
            if a != (s.BM, s.BK) or b != (s.BK, s.BN):
                raise LowerError(f"{self.p.name}: dot shapes {a} x {b} do not match {s.describe()}")
        start, step = self.elem(loop.start, (), root), self.elem(loop.step, (), root)
        if start.poly != Poly.const(0) or step.poly != Poly.const(s.BK):
            raise LowerError(f"{self.p.name}: the K loop must run from 0 in steps of BK={s.BK}")
        self.stop = self.elem(loop.stop, (), root)
        self.sym[loop.iv.id] = Poly.sym("kb") * s.BK
        return order

    def stores(self) -> list[Op]:
        if any(isinstance(n, Op) and n.kind == "store" for n in self.loop.body):
            raise LowerError(f"{self.p.name}: stores inside the K loop are not supported")
        return [n for n in self.p.body if isinstance(n, Op) and n.kind == "store"]

    def render_stores(self, out: list, scope: Scope, r: Poly, n: Poly, acc_value: Callable[[int], Expr]) -> None:
        """The stores of output element (r, n), the accumulators read as acc_value(j)."""
        at = (r, n)
        self.epilogue_at = (r, n, acc_value)
        for st in self.stores():
            shape = st.args[0].type.shape
            if len(shape) != 2:
                raise LowerError(f"{self.p.name}: stores must write [BM, BN] tiles")
            off = self.elem(st.args[0], self.arg_index(st.args[0], shape, at), scope)
            val = self.elem(st.args[1], self.arg_index(st.args[1], shape, at), scope)
            dtype = self.p.param(st.attrs["buffer"]).dtype
            assign = Assign(Index(Var(st.attrs["buffer"]), off.e), self.to(val, dtype))
            if len(st.args) > 2:
                mask = self.elem(st.args[2], self.arg_index(st.args[2], shape, at), scope)
                out.append(If(mask.e, [assign]))
            else:
                out.append(assign)
        self.epilogue_at = None

    def kernel(self, body: list) -> KernelDef:
        params = [KernelParam(p.name, p.kind, p.dtype, p.output) for p in self.p.params]
        return KernelDef(self.p.name, params, body, self.helpers, self.s.threads, notes=[self.s.describe()])
