"""The C-like renderer core: statements, expressions and the dialect tables.

A dialect subclass overrides only small tables and hooks, in the manner of tinygrad's
renderers: type names, the spelling of each neutral `Call`, conversions, and how a kernel
receives its buffers and thread indices. The printer adds no parentheses of its own: a tree
whose text would parse otherwise is refused (`AmbiguousExpr`), see ast.py.
"""

from __future__ import annotations

import re
from dataclasses import replace

from .ast import (
    POSTFIX,
    SELECT,
    UNARY,
    ArrayPtrType,
    Assign,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Barrier,
    Bin,
    Block,
    Call,
    Cast,
    Comment,
    Const,
    Convert,
    CoopLoad,
    CoopTensor,
    Decl,
    Decls,
    Expr,
    If,
    Increment,
    IntPoly,
    KernelDef,
    Line,
    Load,
    Loop,
    Mma,
    NaxOp,
    NaxRun,
    Paren,
    PtrCast,
    PtrType,
    Select,
    SharedBytes,
    Slot,
    SlotLoop,
    TensorView,
    Un,
    Var,
    View,
    Zero,
    precedence,
)
from .ast import Field as FieldExpr
from .ast import Index as IndexExpr


class AmbiguousExpr(ValueError):
    """An expression tree whose printed form would not parse back to it (a Paren is missing)."""


class RenderError(ValueError):
    """A statement or operation this dialect cannot print."""


# Preamble helpers in neutral notation; dialects map the @calls inside them.
HELPERS = {
    # Abramowitz & Stegun 7.1.26 with the sign restored: |error| <= 1.5e-7.
    "erf": """inline float metile_erf(float x) {
  float s = x < 0.0f ? -1.0f : 1.0f;
  float a = x < 0.0f ? -x : x;
  float t = 1.0f / (1.0f + 0.3275911f * a);
  float y = 1.0f - (((((1.061405429f * t - 1.453152027f) * t) + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f) * t * @exp(-a * a);
  return s * y;
}""",
    "sigmoid": """inline float metile_sigmoid(float x) { return 1.0f / (1.0f + @exp(-x)); }""",
    "silu": """inline float metile_silu(float x) { return x / (1.0f + @exp(-x)); }""",
    "gelu": """inline float metile_gelu(float x) { return 0.5f * x * (1.0f + metile_erf(x * 0.70710678118654752f)); }""",
    "gelu_approx": """inline float metile_gelu_approx(float x) {
  return 0.5f * x * (1.0f + @tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}""",
}
HELPER_DEPENDS = {"gelu": ["erf"]}


def float_literal(v: float) -> str:
    text = repr(float(v))
    if "inf" in text or "nan" in text:
        raise RenderError(f"non-finite constant {v}")
    return f"{text}f" if ("." in text or "e" in text) else f"{text}.0f"


def poly_text(terms) -> str:
    """An IntPoly's terms as C: `(a + 2*b - 3)`, one term without parentheses."""
    if not terms:
        return "0"
    parts = []
    for m, c in terms:
        if m == ():
            parts.append(str(c))
        else:
            factor = "*".join(m)
            parts.append(factor if c == 1 else f"{c}*{factor}")
    text = " + ".join(parts).replace("+ -", "- ")
    return text if len(terms) == 1 else f"({text})"


class CStyleRenderer:
    target = "c"
    types = {
        "f32": "float",
        "f16": "half",
        "bf16": "bfloat",
        "i32": "int",
        "u32": "uint",
        "bool": "bool",
        "int": "int",
        "vu32": "metile_vec_u32",
        "vbf16": "metile_vec_bf16",
        "vf16": "metile_vec_f16",
        "vf32": "metile_vec_f32",
        # raw register bits (packed values), byte pointers and sizes
        "bits16": "unsigned short",
        "bits32": "unsigned",
        "bits32x2": "uint2",
        "bits32x4": "uint4",
        "char": "char",
        "u8": "unsigned char",
        "size": "size_t",
    }
    # 16-byte vectors: (element dtype, count)
    vectors = {"u32": 4, "bf16": 8, "f16": 8, "f32": 4}
    # neutral call -> dialect spelling (a format string over the arguments' text)
    calls: dict[str, str] = {
        "fma": "fma({0}, {1}, {2})",
        "u2f_small": "float({0})",  # an unsigned value < 2**23
        "exp": "exp({0})",
        "tanh": "tanh({0})",
        "erf": "metile_erf({0})",
        "sigmoid": "metile_sigmoid({0})",
        "silu": "metile_silu({0})",
        "gelu": "metile_gelu({0})",
        "gelu_approx": "metile_gelu_approx({0})",
        "max": "max({0}, {1})",
        "min": "min({0}, {1})",
        "min_i32": "min({0}, {1})",
        "max_i32": "max({0}, {1})",
        "vload_u32": "metile_vload_u32({0}, {1}, {2})",
        "vload_bf16": "metile_vload_bf16({0}, {1}, {2})",
        "vload_f16": "metile_vload_f16({0}, {1}, {2})",
        "vload_f32": "metile_vload_f32({0}, {1}, {2})",
        "vget_u32": "{0}.v[{1}]",
        "vget_bf16": "{0}.v[{1}]",
        "vget_f16": "{0}.v[{1}]",
        "vget_f32": "{0}.v[{1}]",
    }
    zeros: dict[str, str] = {"bits32": "0u", "f32": "0.0f", "bits16": "(unsigned short)0"}
    unroll_pragma = "#pragma unroll"
    shared_space = "threadgroup"
    barrier = "threadgroup_barrier(mem_flags::mem_threadgroup)"
    simd_barrier = "simdgroup_barrier(mem_flags::mem_none)"
    null = "nullptr"
    indent_unit = "  "

    # -- conversions ----------------------------------------------------------------------
    def convert(self, to: str, src: str, x: str) -> str:
        return f"{self.types[to]}({x})"

    # -- types ----------------------------------------------------------------------------
    def type_name(self, t) -> str:
        if isinstance(t, PtrType):
            inner = self.type_name(t.elem)
            return f"{'const ' if t.const_elem else ''}{inner}*{' const' if t.const else ''}"
        if isinstance(t, ArrayPtrType):
            dims = "".join(f"[{d}]" for d in t.dims)
            return f"{self.types[t.elem]} (*){dims}"
        if t not in self.types:
            raise RenderError(f"{self.target} renderer has no type {t!r}")
        return self.types[t]

    # -- expressions ----------------------------------------------------------------------
    def operand(self, e: Expr, at_least: int, parent: Expr) -> str:
        """e printed where its precedence must be at least `at_least`."""
        if precedence(e) < at_least:
            raise AmbiguousExpr(f"{self.expr(e)!r} needs parentheses inside {type(parent).__name__}")
        return self.expr(e)

    def expr(self, e: Expr) -> str:
        if isinstance(e, Var):
            return e.name
        if isinstance(e, Const):
            return self.const(e)
        if isinstance(e, Bin):
            p = precedence(e)
            return f"{self.operand(e.a, p, e)} {e.op} {self.operand(e.b, p + 1, e)}"
        if isinstance(e, Un):
            return f"{e.op}{self.operand(e.a, UNARY, e)}"
        if isinstance(e, Select):
            return (
                f"{self.operand(e.cond, SELECT + 1, e)} ? {self.operand(e.a, SELECT, e)} : "
                f"{self.operand(e.b, SELECT, e)}"
            )
        if isinstance(e, Paren):
            return f"({self.expr(e.a)})"
        if isinstance(e, Call):
            return self.call(e.name, [self.expr(a) for a in e.args])
        if isinstance(e, IndexExpr):
            return f"{self.operand(e.base, POSTFIX, e)}[{self.expr(e.index)}]"
        if isinstance(e, FieldExpr):
            return f"{self.operand(e.base, POSTFIX, e)}.{e.name}"
        if isinstance(e, Convert):
            return self.convert(e.to, e.src, self.expr(e.a))
        if isinstance(e, Cast):
            return f"({self.type_name(e.dtype)}){self.operand(e.a, UNARY, e)}"
        if isinstance(e, PtrCast):
            return self.ptr_cast(self.type_name(e.ptype), self.expr(e.a))
        if isinstance(e, Load):
            return self.load(e.vtype, self.expr(e.addr))
        if isinstance(e, Zero):
            if e.vtype not in self.zeros:
                raise RenderError(f"{self.target} renderer has no zero of {e.vtype!r}")
            return self.zeros[e.vtype]
        if isinstance(e, IntPoly):
            return poly_text(e.terms)
        if isinstance(e, Slot):
            return self.slot(e.tensor, self.expr(e.index))
        raise RenderError(f"unknown expression {e!r}")

    def const(self, e: Const) -> str:
        v, t = e.value, e.dtype
        if t in ("i32", "u32"):
            digits = f"0x{int(v):0{e.hex}X}" if e.hex else str(int(v))
            return digits + ("u" if t == "u32" else "")
        if t == "f32":
            return float_literal(v)
        if t == "bool":
            return "true" if v else "false"
        if t == "null":
            return self.null
        if t == "zero_init":
            return "{}"
        raise RenderError(f"unknown constant {e!r}")

    def call(self, name: str, args: list[str]) -> str:
        if name not in self.calls:
            raise RenderError(f"{self.target} renderer has no spelling for {name}")
        return self.calls[name].format(*args)

    def ptr_cast(self, ptype: str, x: str) -> str:
        return f"reinterpret_cast<{ptype}>({x})"

    def load(self, vtype: str, addr: str) -> str:
        return f"*reinterpret_cast<const {self.type_name(vtype)}*>({addr})"

    # -- neutral @calls inside helper text ---------------------------------------------------
    def expand(self, text: str) -> str:
        """Replace every @call(...) of helper text innermost-first by its dialect spelling."""
        pattern = re.compile(r"@(\w+)\(([^()@]*(?:\([^()@]*\)[^()@]*)*)\)")
        while "@" in text:
            new = pattern.sub(lambda m: self.call(m.group(1), _split_args(m.group(2))), text)
            if new == text:
                raise RenderError(f"unrenderable call in: {text}")
            text = new
        return text

    # -- statements -------------------------------------------------------------------------
    def line(self, s) -> str:
        """A statement that prints on one line, without indentation."""
        if isinstance(s, Comment):
            return f"// {s.text}"
        if isinstance(s, Decl):
            const, dtype = s.const, s.dtype
            if const and isinstance(dtype, PtrType):  # a pointer that does not change: T* const
                const, dtype = False, replace(dtype, const=True)
            t = self.type_name(dtype)
            dims = "".join(f"[{d}]" for d in s.dims)
            init = f" = {self.expr(s.init)}" if s.init is not None else ""
            space = f"{self.shared_space} " if s.shared else ""
            return f"{space}{'const ' if const else ''}{t} {s.name}{dims}{init};"
        if isinstance(s, Decls):
            t = self.type_name(s.dtype)
            items = ", ".join(n if i is None else f"{n} = {self.expr(i)}" for n, i in s.items)
            return f"{'const ' if s.const else ''}{t} {items};"
        if isinstance(s, View):
            return self.view(s)
        if isinstance(s, SharedBytes):
            return self.shared_bytes(s)
        if isinstance(s, Assign):
            return f"{self.expr(s.target)} {s.op} {self.expr(s.value)};"
        if isinstance(s, Increment):
            return f"++{self.expr(s.target)};"
        if isinstance(s, Barrier):
            return f"{self.barrier if s.scope == 'group' else self.simd_barrier};"
        if isinstance(s, Mma):
            return self.mma(s)
        if isinstance(s, AsyncCopy):
            return self.async_copy(s)
        if isinstance(s, AsyncCommit):
            return self.async_commit()
        if isinstance(s, AsyncWait):
            return self.async_wait(s.pending)
        if isinstance(s, NaxOp):
            return self.nax_op(s)
        if isinstance(s, CoopTensor):
            return self.coop_tensor(s)
        if isinstance(s, TensorView):
            return self.tensor_view(s)
        if isinstance(s, CoopLoad):
            return self.coop_load(s)
        if isinstance(s, NaxRun):
            return self.nax_run(s)
        if isinstance(s, Line):
            text = " ".join(self.line(x) for x in s.stmts)
            return text + (f"  // {s.comment}" if s.comment else "")
        if isinstance(s, If) and (s.inline or not s.braces) and not s.orelse:
            if not s.braces:
                if len(s.body) != 1:
                    raise RenderError("an if without braces takes one statement")
                return f"if ({self.expr(s.cond)}) {self.line(s.body[0])}"
            return f"if ({self.expr(s.cond)}) {{ {' '.join(self.line(x) for x in s.body)} }}"
        raise RenderError(f"{type(s).__name__} does not print on one line")

    def stmts(self, body, depth: int) -> list[str]:
        pad = self.indent_unit * depth
        out: list[str] = []
        for s in body:
            if isinstance(s, Loop):
                if s.unroll is True and self.unroll_pragma:
                    out.append(f"{pad}{self.unroll_pragma}")
                elif s.unroll is not False and self.unroll_pragma:
                    out.append(f"{pad}{self.unroll_pragma} {s.unroll}")
                step = f"++{s.var}" if s.step is None else f"{s.var} += {self.expr(s.step)}"
                out.append(f"{pad}for (int {s.var} = {self.expr(s.start)}; {self.expr(s.cond)}; {step}) {{")
                out += self.stmts(s.body, depth + 1)
                out.append(f"{pad}}}")
            elif isinstance(s, SlotLoop):
                out += [pad + line for line in self.slot_loop_head(s)]
                out += self.stmts(s.body, depth + 1)
                out.append(f"{pad}}}")
            elif isinstance(s, Block):
                out.append(f"{pad}{{")
                out += self.stmts(s.body, depth + 1)
                out.append(f"{pad}}}")
            elif isinstance(s, If) and s.inline:
                out.append(pad + self.line(If(s.cond, s.body, inline=True)))
                for other in s.orelse:
                    if not isinstance(other, If) or not other.inline:
                        raise RenderError("an inline if chains only inline ifs")
                    out.append(pad + "else " + self.stmts([other], 0)[0])
                    out += self.stmts([other], depth)[1:]
            elif isinstance(s, If) and s.braces:
                note = f"  // {s.comment}" if s.comment else ""
                out.append(f"{pad}if ({self.expr(s.cond)}) {{{note}")
                out += self.stmts(s.body, depth + 1)
                tail = s.orelse
                while len(tail) == 1 and isinstance(tail[0], If) and tail[0].braces and not tail[0].inline:
                    out.append(f"{pad}}} else if ({self.expr(tail[0].cond)}) {{")  # an else holding one if
                    out += self.stmts(tail[0].body, depth + 1)
                    tail = tail[0].orelse
                if tail:
                    out.append(f"{pad}}} else {{")
                    out += self.stmts(tail, depth + 1)
                out.append(f"{pad}}}")
            else:
                out.append(pad + self.line(s))
        return out

    def helpers(self, names: list[str]) -> list[str]:
        order: list[str] = []
        for n in names:
            for dep in HELPER_DEPENDS.get(n, []) + [n]:
                if dep not in order:
                    order.append(dep)
        return [self.expand(HELPERS[n]) for n in order]

    # -- dialect hooks -------------------------------------------------------
    def view(self, s: View) -> str:
        raise RenderError(f"{self.target} renderer has no shared-memory views")

    def shared_bytes(self, s: SharedBytes) -> str:
        raise RenderError(f"{self.target} renderer has no raw shared memory")

    def mma(self, s: Mma) -> str:
        raise RenderError(f"{self.target} has no m16n8k16 matrix multiply-accumulate")

    def async_copy(self, s: AsyncCopy) -> str:
        raise RenderError(f"{self.target} has no asynchronous copies")

    def async_commit(self) -> str:
        raise RenderError(f"{self.target} has no asynchronous copies")

    def async_wait(self, pending: int) -> str:
        raise RenderError(f"{self.target} has no asynchronous copies")

    # MetalPerformancePrimitives (NAX): only the MSL dialect has them
    def _no_nax(self) -> RenderError:
        return RenderError(f"{self.target} has no MetalPerformancePrimitives (NAX) operations")

    def nax_op(self, s: NaxOp) -> str:
        raise self._no_nax()

    def coop_tensor(self, s: CoopTensor) -> str:
        raise self._no_nax()

    def tensor_view(self, s: TensorView) -> str:
        raise self._no_nax()

    def coop_load(self, s: CoopLoad) -> str:
        raise self._no_nax()

    def nax_run(self, s: NaxRun) -> str:
        raise self._no_nax()

    def slot(self, tensor: str, index: str) -> str:
        raise self._no_nax()

    def slot_loop_head(self, s: SlotLoop) -> list[str]:
        raise self._no_nax()

    def vector_helpers(self) -> list[str]:
        """A 16-byte struct per element type and a masked load of it (zeros where masked)."""
        out = []
        for dt, n in self.vectors.items():
            t = self.types[dt]
            out.append(f"struct {self.align16} metile_vec_{dt} {{ {t} v[{n}]; }};")
            out.append(
                f"{self.fn_prefix}metile_vec_{dt} metile_vload_{dt}({self.ptr(t)} p, int offset, bool ok) {{\n"
                f"  metile_vec_{dt} r = {{}};\n"
                f"  if (ok) r = *({self.ptr('metile_vec_' + dt)})(p + offset);\n"
                f"  return r;\n}}"
            )
        return out

    align16 = "alignas(16)"
    fn_prefix = "inline "

    def ptr(self, t: str) -> str:
        return f"const {t}*"

    def prelude(self) -> list[str]:
        return []

    def signature(self, k: KernelDef) -> str:
        raise NotImplementedError

    def thread_setup(self, k: KernelDef) -> list[str]:
        return []

    def render(self, k: KernelDef) -> str:
        lines = [f"// {self.target} kernel generated by mlx-metile"] + [f"// {n}" for n in k.notes]
        lines += self.prelude()
        lines += self.vector_helpers()
        lines += self.helpers(k.helpers)
        lines.append(self.signature(k) + " {")
        lines += self.thread_setup(k)
        lines += self.stmts(k.body, 1)
        lines.append("}")
        return "\n".join(lines) + "\n"


def _split_args(text: str) -> list[str]:
    args, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            args.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if cur or args:
        args.append("".join(cur).strip())
    return args
