"""AIR dialect: the thread-level AST printed as LLVM 14 typed-pointer assembly in Metal's air64 form.

The same kernel the MSL dialect prints, as Apple's compiler would lower it: device buffers in
address space 1, `constant int&` scalars in 2, threadgroup arrays as addrspace(3) globals; the
positions Metal fills in (threadgroup position, thread index in the threadgroup, SIMD lane and
SIMD group) as extra kernel parameters tagged in `!air.kernel`; Metal's library calls as the
`air.*` intrinsics Apple emits (`air.fma.f32`, `air.simd_shuffle_xor.f32`, `air.wg.barrier`,
`air.convert.f.f32.u.i32`, ...), float narrowing as `fptrunc` and widening as `fpext`, as in
Apple's own AIR. Every C operation is one LLVM instruction in the order C evaluates it, rounding
after each - as the emulator compiles MSL (`-ffp-contract=off`); Apple's compiler contracts by
default (`llvm.fmuladd` in MLX's AIR), which is the `contract` form here.

`AirForm` chooses how the same AST is spelled, never what it computes: fast-math flags on float
instructions, the alignment vector loads claim, range / invariance metadata on loads, and the
unpacking of packed integer fields (one scalar shift-mask-convert per value, as the MSL, or one
4-lane vector shift-mask-convert per word), and the form of the exact small-integer-to-float
conversion. Assembling to bitcode (llvm-as-14) is the AIR room's (mlx_metile.air.llvm14).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from .ast import (
    NAX_STATEMENTS,
    Assign,
    Barrier,
    Bin,
    Block,
    Call,
    Cast,
    Comment,
    Const,
    Convert,
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
    Paren,
    Select,
    Un,
    Var,
    Zero,
)
from .ast import Field as FieldExpr
from .ast import Index as IndexExpr
from .cstyle import RenderError

TRIPLE = "air64_v28-apple-macosx26.0.0"
DATALAYOUT = (
    "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-f32:32:32-f64:64:64-v16:16:16-v24:32:32-"
    "v32:32:32-v48:64:64-v64:64:64-v96:128:128-v128:128:128-v192:256:256-v256:256:256-v512:512:512-"
    "v1024:1024:1024-n8:16:32"
)
AIR_VERSION = (2, 8, 0)
LANGUAGE_VERSION = ("Metal", 4, 0, 0)
SDK_VERSION = (26, 0)

# C type (the AST's dtype names) -> LLVM type, size in bytes, Metal type name
_SCALARS = {
    "f32": ("float", 4, "float"),
    "f16": ("half", 2, "half"),
    "bf16": ("bfloat", 2, "bfloat"),
    "i32": ("i32", 4, "int"),
    "int": ("i32", 4, "int"),
    "u32": ("i32", 4, "uint"),
    "bits32": ("i32", 4, "uint"),
    "bits16": ("i16", 2, "ushort"),
    "u8": ("i8", 1, "uchar"),
    "char": ("i8", 1, "char"),
    "size": ("i64", 8, "ulong"),
    "bool": ("i1", 1, "bool"),
}
# 16-byte vectors as MSL spells them (uint4; float4 for f32), reinterpreted per element
_VECTORS = {"vu32": ("<4 x i32>", "u32"), "vbf16": ("<4 x i32>", "bf16"), "vf16": ("<4 x i32>", "f16")}
_VECTORS["vf32"] = ("<4 x float>", "f32")
_FLOATS = ("f32", "f16", "bf16")
_UNSIGNED = ("u32", "bits32", "bits16", "u8", "size", "bool")

FAST_MATH_FLAGS = ("reassoc", "nnan", "ninf", "nsz", "arcp", "contract", "afn")


@dataclass(frozen=True)
class AirForm:
    """How the AST is spelled in AIR (each choice computes the same values by C's rules, except
    where fast-math flags license the optimizer to change them).

    fast_math: LLVM fast-math flags on every float instruction ("" none, "contract", "fast", or
      flags joined by spaces); "fast" also sets air.compile.fast_math_enable.
    align: "natural" - a 16-byte vector load claims 16-byte alignment (MSL's uint4 / float4);
      "element" - only its element's.
    load_metadata: `!range` [0, 2**31) on loads of the int scalars (sizes are never negative)
      and `!invariant.load` on loads of read-only buffers.
    unpack: "scalar" - a packed field is one shift, mask and convert per value (as the MSL);
      "vector" - one 4-lane shift, mask and convert per word and field width.
    convert: an exact small unsigned -> float conversion (`u2f_small`, unpacked fields) as
      "air" (air.convert.f.f32.u.i32), "llvm" (uitofp) or "bits" ((0x4B000000 | q) as float
      minus 2**23).
    """

    fast_math: str = ""
    align: str = "natural"
    load_metadata: bool = False
    unpack: str = "scalar"
    convert: str = "air"

    def __post_init__(self):
        flags = self.fast_math.split()
        bad = [f for f in flags if f not in (*FAST_MATH_FLAGS, "fast")]
        if bad:
            raise ValueError(f"AirForm.fast_math: unknown flags {bad}; known: {FAST_MATH_FLAGS} or 'fast'")
        if self.align not in ("natural", "element"):
            raise ValueError(f"AirForm.align must be 'natural' or 'element', got {self.align!r}")
        if self.unpack not in ("scalar", "vector"):
            raise ValueError(f"AirForm.unpack must be 'scalar' or 'vector', got {self.unpack!r}")
        if self.convert not in ("air", "llvm", "bits"):
            raise ValueError(f"AirForm.convert must be 'air', 'llvm' or 'bits', got {self.convert!r}")

    def describe(self) -> str:
        return (
            f"fast_math={self.fast_math or 'none'} align={self.align} load_metadata={self.load_metadata} "
            f"unpack={self.unpack} convert={self.convert}"
        )


@dataclass
class _Val:
    """A value: its LLVM operand text and its C type."""

    text: str
    ctype: str


@dataclass
class _Slot:
    """A C variable held in memory: an alloca or a threadgroup global."""

    ptr: str
    ctype: str  # element type
    dims: tuple[int, ...] = ()
    space: int = 0


@dataclass
class _Deferred:
    """A pure integer temporary printed where it is used (the vector unpack form reads its shape)."""

    expr: Expr
    ctype: str


@dataclass
class _Scope:
    names: dict = field(default_factory=dict)
    unpacked: dict = field(default_factory=dict)  # (word operand, field bits) -> vectors of floats


def _lt(ctype: str) -> str:
    if ctype in _VECTORS:
        return _VECTORS[ctype][0]
    if ctype not in _SCALARS:
        raise RenderError(f"air renderer has no type {ctype!r}")
    return _SCALARS[ctype][0]


def _size(ctype: str) -> int:
    return 16 if ctype in _VECTORS else _SCALARS[ctype][1]


def _ptr(elem: str, space: int) -> str:
    return f"{elem} addrspace({space})*" if space else f"{elem}*"


def float_hex(v: float, ctype: str = "f32") -> str:
    """An LLVM literal of a float constant of `ctype`, rounded to it (to nearest even)."""
    f = struct.unpack("<f", struct.pack("<f", float(v)))[0]
    if ctype == "f32":
        return "0x{:016X}".format(struct.unpack("<Q", struct.pack("<d", f))[0])
    if ctype == "f16":
        return "0xH{:04X}".format(struct.unpack("<H", struct.pack("<e", f))[0])
    bits = struct.unpack("<I", struct.pack("<f", f))[0]
    return f"0xR{(bits + 0x7FFF + ((bits >> 16) & 1)) >> 16:04X}"


def _is_unsigned(ctype: str) -> bool:
    return ctype in _UNSIGNED


class _Function:
    """Instruction emission for one LLVM function: fresh names, blocks, allocas."""

    def __init__(self, renderer: AIRRenderer):
        self.r = renderer
        self.lines: list[str] = []
        self.allocas: list[str] = []
        self.count = 0
        self.used: set[str] = set()
        self.block = "entry"

    def fresh(self, base: str = "") -> str:
        self.count += 1
        name = f"{base}.{self.count}" if base else f".{self.count}"
        return "%" + name

    def local(self, base: str) -> str:
        """A readable unique name for a C variable."""
        name = base
        k = 1
        while name in self.used:
            k += 1
            name = f"{base}.{k}"
        self.used.add(name)
        return "%" + name

    def emit(self, text: str) -> None:
        self.lines.append("  " + text)

    def op(self, text: str, base: str = "") -> str:
        name = self.fresh(base)
        self.emit(f"{name} = {text}")
        return name

    def label(self, base: str) -> str:
        self.count += 1
        return f"{base}.{self.count}"

    def start(self, label: str) -> None:
        self.lines.append(f"{label}:")
        self.block = label


def _nax_statement(body: list):
    """The first MetalPerformancePrimitives statement in `body` (nested ones included), or None."""
    for s in body:
        if isinstance(s, NAX_STATEMENTS):
            return s
        inner = [getattr(s, name, None) for name in ("body", "orelse", "stmts")]
        for part in inner:
            if isinstance(part, list):
                found = _nax_statement(part)
                if found is not None:
                    return found
    return None


def refuse_nax(k: KernelDef) -> None:
    """NAX kernels have no AIR form here: their matmul2d calls are MetalPerformancePrimitives
    library code, which Apple's compiler lowers to intrinsics nobody here has seen."""
    found = _nax_statement(k.body)
    if found is not None or "nax" in k.helpers:
        what = type(found).__name__ if found is not None else "the MetalPerformancePrimitives include"
        raise RenderError(
            f"air renderer: kernel {k.name!r} uses NAX ({what}): NAX kernels (MetalPerformancePrimitives "
            "matmul2d) have no AIR form; build them as MSL"
        )


class AIRRenderer:
    """Prints a KernelDef as an AIR module (LLVM 14 assembly with typed pointers)."""

    target = "air"

    def __init__(self, form: AirForm | None = None):
        self.form = form or AirForm()
        self.fmf = " ".join(self.form.fast_math.split())

    # ------------------------------------------------------------------ module --
    def render(self, k: KernelDef) -> str:
        refuse_nax(k)
        self.k = k
        self.decls: dict[str, str] = {}  # intrinsic name -> declare line
        self.helpers: dict[str, str] = {}  # helper function name -> definition
        self.globals: list[str] = []
        self.meta: list[str] = []  # numbered metadata beyond the fixed ones, as text with {} ids
        self.loop_md: list[int] = []
        self.range_md = False
        self.invariant_md = False
        self.f = _Function(self)
        self.scopes: list[_Scope] = [_Scope()]
        self.params = self._params(k)
        for stmt in k.body:
            self.stmt(stmt)
        body = self.f
        sig = ", ".join(p[0] for p in self.params)
        out = [
            f"; AIR kernel generated by mlx-metile ({self.form.describe()})",
            *[f"; {n}" for n in k.notes],
            f'source_filename = "{k.name}"',
            f'target datalayout = "{DATALAYOUT}"',
            f'target triple = "{TRIPLE}"',
            "",
            *self.globals,
            "",
            f"define void @{k.name}({sig}) #0 {{",
            "entry:",
            *body.allocas,
            *self.entry_loads,
            *body.lines,
            "  ret void",
            "}",
            "",
        ]
        out += list(self.helpers.values())
        out += sorted(self.decls.values())
        out += [
            "",
            'attributes #0 = { convergent mustprogress nounwind "frame-pointer"="all" '
            '"min-legal-vector-width"="128" "no-builtins" "no-trapping-math"="true" '
            '"stack-protector-buffer-size"="8" }',
            "attributes #1 = { convergent mustprogress nounwind willreturn }",
            "attributes #2 = { mustprogress nofree nosync nounwind readnone willreturn }",
            "attributes #3 = { alwaysinline convergent mustprogress nounwind }",
            "",
        ]
        out += self._metadata(k)
        return _number(self, "\n".join(out) + "\n")

    def _params(self, k: KernelDef) -> list[tuple[str, str, str]]:
        """(LLVM parameter, LLVM type, argument metadata) per parameter, Metal's positions last."""
        out = []
        self.entry_loads: list[str] = []
        scope = self.scopes[0].names
        for i, p in enumerate(k.params):
            if p.kind == "buffer":
                lt, size, tname = _SCALARS[p.dtype]
                ty = _ptr(lt, 1)
                name = self.f.local(p.name)
                access = "air.read_write" if p.output else "air.read"
                md = (
                    f'!{{i32 {i}, !"air.buffer", !"air.location_index", i32 {i}, i32 1, !"{access}", '
                    f'!"air.address_space", i32 1, !"air.arg_type_size", i32 {size}, !"air.arg_type_align_size", '
                    f'i32 {size}, !"air.arg_type_name", !"{tname}", !"air.arg_name", !"{p.name}"}}'
                )
                out.append((f'{ty} noundef "air-buffer-no-alias" {name}', ty, md))
                scope[p.name] = _Val(name, "ptr:" + p.dtype + (":rw" if p.output else ":ro"))
            else:
                ty = _ptr("i32", 2)
                ref = self.f.local(p.name + ".ref")
                md = (
                    f'!{{i32 {i}, !"air.buffer", !"air.buffer_size", i32 4, !"air.location_index", i32 {i}, i32 1, '
                    f'!"air.read", !"air.address_space", i32 2, !"air.arg_type_size", i32 4, '
                    f'!"air.arg_type_align_size", i32 4, !"air.arg_type_name", !"int", !"air.arg_name", !"{p.name}"}}'
                )
                out.append((f'{ty} noundef align 4 dereferenceable(4) "air-buffer-no-alias" {ref}', ty, md))
                val = self.f.local(p.name)
                extra = ""
                if self.form.load_metadata:
                    extra = ", !range !{RANGE}, !invariant.load !{EMPTY}"
                    self.range_md = self.invariant_md = True
                self.entry_loads.append(f"  {val} = load i32, i32 addrspace(2)* {ref}, align 4{extra}")
                scope[p.name] = _Val(val, "i32")
        n = len(k.params)
        positions = [
            ("metile_tgid", "<3 x i32>", "air.threadgroup_position_in_grid", "uint3"),
            ("metile_lane", "i32", "air.thread_index_in_simdgroup", "uint"),
            ("metile_simdgroup", "i32", "air.simdgroup_index_in_threadgroup", "uint"),
            ("metile_tid", "i32", "air.thread_index_in_threadgroup", "uint"),
        ]
        for j, (name, ty, tag, tname) in enumerate(positions):
            reg = self.f.local(name)
            md = f'!{{i32 {n + j}, !"{tag}", !"air.arg_type_name", !"{tname}", !"air.arg_name", !"{name}"}}'
            out.append((f"{ty} noundef {reg}", ty, md))
            scope[name] = _Val(reg, "u32" if ty == "i32" else "uint3")
        return out

    def _metadata(self, k: KernelDef) -> list[str]:
        lines: list[str] = []
        nodes: list[str] = []

        def node(text: str) -> int:
            nodes.append(text)
            return len(nodes) - 1

        flags = [
            node(f'!{{i32 2, !"SDK Version", [2 x i32] [i32 {SDK_VERSION[0]}, i32 {SDK_VERSION[1]}]}}'),
            node('!{i32 1, !"wchar_size", i32 4}'),
            node('!{i32 7, !"frame-pointer", i32 2}'),
            node('!{i32 7, !"air.max_device_buffers", i32 31}'),
            node('!{i32 7, !"air.max_constant_buffers", i32 31}'),
            node('!{i32 7, !"air.max_threadgroup_buffers", i32 31}'),
            node('!{i32 7, !"air.max_textures", i32 128}'),
            node('!{i32 7, !"air.max_read_write_textures", i32 8}'),
            node('!{i32 7, !"air.max_samplers", i32 16}'),
        ]
        ident = node('!{!"mlx-metile AIR renderer"}')
        version = node("!{{i32 {}, i32 {}, i32 {}}}".format(*AIR_VERSION))
        language = node('!{{!"{}", i32 {}, i32 {}, i32 {}}}'.format(*LANGUAGE_VERSION))
        fast = "fast" in self.form.fast_math.split()
        options = [
            node('!{!"air.compile.denorms_disable"}'),
            node(f'!{{!"air.compile.fast_math_{"enable" if fast else "disable"}"}}'),
            node('!{!"air.compile.framebuffer_fetch_enable"}'),
        ]
        empty = node("!{}")
        args = [node(p[2]) for p in self.params]
        arglist = node("!{" + ", ".join(f"!{a}" for a in args) + "}")
        fn_type = "void (" + ", ".join(p[1] for p in self.params) + ")*"
        limit = node(f'!{{!"air.max_work_group_size", i32 {k.threads_per_group}}}')
        kernel = node(f"!{{{fn_type} @{k.name}, !{empty}, !{arglist}, !{limit}}}")
        rng = node("!{i32 0, i32 -2147483648}") if self.range_md else None
        progress = node('!{!"llvm.loop.mustprogress"}')
        full = node('!{!"llvm.loop.unroll.full"}')
        counts = {
            u: node(f'!{{!"llvm.loop.unroll.count", i32 {u}}}')
            for u in dict.fromkeys(self.loop_md)
            if u and u is not True
        }
        loop0 = len(nodes)
        for unroll in self.loop_md:
            idx = len(nodes)
            extra = f", !{full}" if unroll is True else (f", !{counts[unroll]}" if unroll else "")
            nodes.append(f"distinct !{{!{idx}, !{progress}{extra}}}")
        lines.append("!llvm.module.flags = !{" + ", ".join(f"!{i}" for i in flags) + "}")
        lines.append(f"!llvm.ident = !{{!{ident}}}")
        lines.append(f"!air.kernel = !{{!{kernel}}}")
        lines.append(f"!air.version = !{{!{version}}}")
        lines.append(f"!air.language_version = !{{!{language}}}")
        lines.append("!air.compile_options = !{" + ", ".join(f"!{i}" for i in options) + "}")
        lines.append("")
        lines += [f"!{i} = {t}" for i, t in enumerate(nodes)]
        self._md_ids = {"EMPTY": empty, "RANGE": rng, "LOOP0": loop0}
        return lines

    # --------------------------------------------------------------- scoping --
    def lookup(self, name: str):
        for s in reversed(self.scopes):
            if name in s.names:
                return s.names[name]
        raise RenderError(f"air renderer: {name!r} is not declared")

    def bind(self, name: str, value) -> None:
        self.scopes[-1].names[name] = value

    def push(self) -> None:
        self.scopes.append(_Scope())

    def pop(self) -> None:
        self.scopes.pop()

    def declare(self, name: str, sig: str) -> None:
        self.decls.setdefault(name, sig)

    # ------------------------------------------------------------ conversions --
    def coerce(self, v: _Val, to: str) -> _Val:
        """C's implicit conversion of v to type `to`."""
        to = _canon(to)
        src = v.ctype
        if src == to or _lt(src) == _lt(to) and (src in _FLOATS) == (to in _FLOATS) and to != "bool":
            return _Val(v.text, to)
        return self.convert(v, to)

    def convert(self, v: _Val, to: str) -> _Val:
        to = _canon(to)
        f, src = self.f, v.ctype
        if src == to:
            return v
        st, dt = _lt(src), _lt(to)
        if src in _FLOATS and to in _FLOATS:
            if src == "f32":
                return _Val(f.op(f"fptrunc float {v.text} to {dt}"), to)
            if to == "f32":
                return _Val(f.op(f"fpext {st} {v.text} to float"), to)
            wide = f.op(f"fpext {st} {v.text} to float")  # half <-> bfloat: exact in float, rounded once
            return _Val(f.op(f"fptrunc float {wide} to {dt}"), to)
        if to in _FLOATS:
            if src == "bool":
                v = self.convert(v, "i32")
                src, st = "i32", "i32"
            sign = "u" if _is_unsigned(src) else "s"
            mid = v
            if st not in ("i32",):
                mid = self.convert(v, "u32" if sign == "u" else "i32")
            name = f"air.convert.f.{_suffix(to)}.{sign}.i32"
            self.declare(name, f"declare {dt} @{name}(i32) #2")
            return _Val(f.op(f"call {dt} @{name}(i32 {mid.text})"), to)
        if src in _FLOATS:
            if to == "bool":
                z = float_hex(0.0, src)
                return _Val(f.op(f"fcmp une {st} {v.text}, {z}"), to)
            sign = "u" if _is_unsigned(to) else "s"
            name = f"air.convert.{sign}.{dt}.f.{_suffix(src)}"
            self.declare(name, f"declare {dt} @{name}({st}) #2")
            return _Val(f.op(f"call {dt} @{name}({st} {v.text})"), to)
        if to == "bool":
            return _Val(f.op(f"icmp ne {st} {v.text}, 0"), to)
        sb, db = _bits(st), _bits(dt)
        if sb == db:
            return _Val(v.text, to)
        if v.text.isdigit() and int(v.text) < 2 ** min(sb, db) // 2:
            return _Val(v.text, to)  # a small non-negative literal is the same literal in any width
        if db < sb:
            return _Val(f.op(f"trunc {st} {v.text} to {dt}"), to)
        ext = "zext" if _is_unsigned(src) else "sext"
        return _Val(f.op(f"{ext} {st} {v.text} to {dt}"), to)

    # ------------------------------------------------------------ expressions --
    def pure(self, e: Expr) -> bool:
        """Whether evaluating e reads no memory that could fault (a buffer or a vector load)."""
        if isinstance(e, (Var, Const, IntPoly, Zero)):
            if isinstance(e, Var):
                v = self.lookup(e.name)
                return not isinstance(v, _Deferred) or self.pure(v.expr)
            return True
        if isinstance(e, IndexExpr):
            base = e.base
            while isinstance(base, IndexExpr):
                base = base.base
            if isinstance(base, Var) and isinstance(self.lookup(base.name), _Val):
                return False  # a buffer
        if isinstance(e, Load):
            return False
        if isinstance(e, Call) and e.name.startswith("vload_"):
            return False
        kids = [getattr(e, n) for n in ("a", "b", "cond", "base", "index", "addr") if hasattr(e, n)]
        if isinstance(e, Call):
            kids = list(e.args)
        return all(self.pure(x) for x in kids if isinstance(x, Expr))

    def expr(self, e: Expr) -> _Val:
        f = self.f
        if isinstance(e, Paren):
            return self.expr(e.a)
        if isinstance(e, Var):
            v = self.lookup(e.name)
            if isinstance(v, _Val):
                if v.ctype.startswith("ptr:"):
                    raise RenderError(f"air renderer: buffer {e.name!r} used as a value")
                return v
            if isinstance(v, _Deferred):
                return self.coerce(self.expr(v.expr), v.ctype)
            if v.dims:
                raise RenderError(f"air renderer: array {e.name!r} used as a value")
            return self.load_slot(v, v.ptr)
        if isinstance(e, Const):
            return self.const(e)
        if isinstance(e, IntPoly):
            return self.poly(e)
        if isinstance(e, Bin):
            return self.binary(e)
        if isinstance(e, Un):
            a = self.expr(e.a)
            if e.op == "!":
                b = self.coerce(a, "bool")
                return _Val(f.op(f"xor i1 {b.text}, true"), "bool")
            if a.ctype in _FLOATS:
                if e.op != "-":
                    raise RenderError(f"air renderer: {e.op} of a float")
                return _Val(f.op(f"fneg {self._fmf()}{_lt(a.ctype)} {a.text}"), a.ctype)
            a = self.promote_int(a)
            if e.op == "-":
                nsw = "" if _is_unsigned(a.ctype) else "nsw "
                return _Val(f.op(f"sub {nsw}{_lt(a.ctype)} 0, {a.text}"), a.ctype)
            return _Val(f.op(f"xor {_lt(a.ctype)} {a.text}, -1"), a.ctype)
        if isinstance(e, Select):
            return self.select(e)
        if isinstance(e, Call):
            return self.call(e)
        if isinstance(e, IndexExpr):
            ptr, ctype, space, align, ro = self.address(e)
            return self.load(ptr, ctype, space, align, ro)
        if isinstance(e, FieldExpr):
            v = self.expr(e.base)
            comp = "xyzw".index(e.name)
            if v.ctype == "uint3":
                return _Val(f.op(f"extractelement <3 x i32> {v.text}, i64 {comp}"), "u32")
            raise RenderError(f"air renderer: field .{e.name} of {v.ctype}")
        if isinstance(e, Convert):
            a = self.expr(e.a)
            return self.convert(self.coerce(a, _canon(e.src)) if a.ctype != e.src else a, e.to)
        if isinstance(e, Cast):
            return self.convert(self.expr(e.a), e.dtype)
        if isinstance(e, Zero):
            if e.vtype in _FLOATS:
                return _Val(float_hex(0.0, e.vtype), e.vtype)
            return _Val("zeroinitializer" if e.vtype in _VECTORS else "0", e.vtype)
        raise RenderError(f"air renderer: cannot print {type(e).__name__} {e!r}")

    def _fmf(self) -> str:
        return self.fmf + " " if self.fmf else ""

    def const(self, e: Const) -> _Val:
        t = e.dtype
        if t in ("i32", "u32"):
            v = int(e.value) & 0xFFFFFFFF
            if t == "i32" and v >= 2**31:
                v -= 2**32
            return _Val(str(v), t)
        if t == "f32":
            return _Val(float_hex(e.value), "f32")
        if t == "bool":
            return _Val("true" if e.value else "false", "bool")
        raise RenderError(f"air renderer: constant {e!r} has no value here")

    def poly(self, e: IntPoly) -> _Val:
        f = self.f
        acc: str | None = None
        for mono, coef in e.terms:
            term: str | None = None
            for sym in mono:
                s = self.coerce(self.expr(Var(sym)), "i32").text
                term = s if term is None else f.op(f"mul nsw i32 {term}, {s}")
            if term is None:
                term = str(coef)
            elif coef != 1:
                term = f.op(f"mul nsw i32 {coef}, {term}")
            acc = term if acc is None else f.op(f"add nsw i32 {acc}, {term}")
        return _Val(acc if acc is not None else "0", "i32")

    def promote_int(self, a: _Val) -> _Val:
        if a.ctype in ("bool", "bits16", "u8", "char"):
            return self.convert(a, "i32")
        return a

    def arith_type(self, a: _Val, b: _Val) -> str:
        """C's usual arithmetic conversions: the common type of a and b."""
        if a.ctype in _FLOATS or b.ctype in _FLOATS:
            return a.ctype if a.ctype == b.ctype else "f32"
        kinds = {_promoted(a.ctype), _promoted(b.ctype)}
        if "size" in kinds:
            return "size"
        return "u32" if "u32" in kinds else "i32"

    def binary(self, e: Bin) -> _Val:
        f = self.f
        if e.op in ("&&", "||"):
            return self.logical(e)
        a, b = self.expr(e.a), self.expr(e.b)
        if e.op in ("<<", ">>"):
            a = self.promote_int(a)
            b = self.coerce(b, a.ctype)
            ty = _lt(a.ctype)
            if e.op == "<<":
                return _Val(f.op(f"shl {ty} {a.text}, {b.text}"), a.ctype)
            return _Val(f.op(f"{'lshr' if _is_unsigned(a.ctype) else 'ashr'} {ty} {a.text}, {b.text}"), a.ctype)
        t = self.arith_type(a, b)
        a, b = self.coerce(a, t), self.coerce(b, t)
        ty = _lt(t)
        if e.op in ("<", "<=", ">", ">=", "==", "!="):
            if t in _FLOATS:
                pred = {"<": "olt", "<=": "ole", ">": "ogt", ">=": "oge", "==": "oeq", "!=": "une"}[e.op]
                return _Val(f.op(f"fcmp {self._fmf()}{pred} {ty} {a.text}, {b.text}"), "bool")
            s = "u" if _is_unsigned(t) else "s"
            pred = {"<": f"{s}lt", "<=": f"{s}le", ">": f"{s}gt", ">=": f"{s}ge", "==": "eq", "!=": "ne"}[e.op]
            return _Val(f.op(f"icmp {pred} {ty} {a.text}, {b.text}"), "bool")
        if t in _FLOATS:
            op = {"+": "fadd", "-": "fsub", "*": "fmul", "/": "fdiv"}.get(e.op)
            if op is None:
                raise RenderError(f"air renderer: float {e.op}")
            return _Val(f.op(f"{op} {self._fmf()}{ty} {a.text}, {b.text}"), t)
        unsigned = _is_unsigned(t)
        nsw = "" if unsigned else "nsw "
        op = {
            "+": f"add {nsw}",
            "-": f"sub {nsw}",
            "*": f"mul {nsw}",
            "/": "udiv " if unsigned else "sdiv ",
            "%": "urem " if unsigned else "srem ",
            "&": "and ",
            "|": "or ",
            "^": "xor ",
        }[e.op]
        return _Val(f.op(f"{op}{ty} {a.text}, {b.text}"), t)

    def logical(self, e: Bin) -> _Val:
        f = self.f
        a = self.coerce(self.expr(e.a), "bool")
        if self.pure(e.b):
            b = self.coerce(self.expr(e.b), "bool")
            return _Val(f.op(f"{'and' if e.op == '&&' else 'or'} i1 {a.text}, {b.text}"), "bool")
        # C evaluates the right operand only when it decides the value
        rhs, done = f.label("sc.rhs"), f.label("sc.end")
        before = f.block
        if e.op == "&&":
            f.emit(f"br i1 {a.text}, label %{rhs}, label %{done}")
        else:
            f.emit(f"br i1 {a.text}, label %{done}, label %{rhs}")
        f.start(rhs)
        b = self.coerce(self.expr(e.b), "bool")
        after = f.block
        f.emit(f"br label %{done}")
        f.start(done)
        short = "false" if e.op == "&&" else "true"
        return _Val(f.op(f"phi i1 [ {short}, %{before} ], [ {b.text}, %{after} ]"), "bool")

    def select(self, e: Select) -> _Val:
        f = self.f
        c = self.coerce(self.expr(e.cond), "bool")
        if self.pure(e.a) and self.pure(e.b):
            a, b = self.expr(e.a), self.expr(e.b)
            t = a.ctype if a.ctype == b.ctype else self.arith_type(a, b)
            a, b = self.coerce(a, t), self.coerce(b, t)
            return _Val(f.op(f"select i1 {c.text}, {_lt(t)} {a.text}, {_lt(t)} {b.text}"), t)
        # C evaluates only the chosen operand: a masked load must not happen
        yes, no, done = f.label("sel.t"), f.label("sel.f"), f.label("sel.end")
        f.emit(f"br i1 {c.text}, label %{yes}, label %{no}")
        f.start(yes)
        a = self.expr(e.a)
        a_end, a_lines = f.block, len(f.lines)
        f.start(no)
        b = self.expr(e.b)
        t = a.ctype if a.ctype == b.ctype else self.arith_type(a, b)
        b = self.coerce(b, t)
        b_end = f.block
        f.emit(f"br label %{done}")
        # the true arm's conversion and branch go at its end
        tail = f.lines[a_lines:]
        del f.lines[a_lines:]
        f.block = a_end
        a = self.coerce(a, t)
        a_end = f.block
        f.emit(f"br label %{done}")
        f.lines += tail
        f.start(done)
        return _Val(f.op(f"phi {_lt(t)} [ {a.text}, %{a_end} ], [ {b.text}, %{b_end} ]"), t)

    # ----------------------------------------------------------------- memory --
    def address(self, e: IndexExpr):
        """(pointer operand, element C type, address space, alignment, read-only) of an element."""
        f = self.f
        idx = []
        base = e
        while isinstance(base, IndexExpr):
            idx.append(base.index)
            base = base.base
        idx.reverse()
        if not isinstance(base, Var):
            raise RenderError(f"air renderer: indexing {base!r}")
        v = self.lookup(base.name)
        if isinstance(v, _Val) and v.ctype.startswith("ptr:"):
            _, elem, access = v.ctype.split(":")
            if len(idx) != 1:
                raise RenderError(f"air renderer: {base.name} is a pointer, indexed {len(idx)} times")
            off = self.coerce(self.expr(idx[0]), "i32")
            off64 = self.convert(off, "size").text
            lt = _lt(elem)
            ptr = f.op(f"getelementptr inbounds {lt}, {_ptr(lt, 1)} {v.text}, i64 {off64}")
            return ptr, elem, 1, _size(elem), access == "ro"
        if isinstance(v, _Slot):
            if len(idx) != len(v.dims):
                raise RenderError(f"air renderer: {base.name} has {len(v.dims)} dimensions, indexed {len(idx)}")
            arr = self.array_type(v.ctype, v.dims)
            parts = []
            for i in idx:
                x = self.coerce(self.expr(i), "i32")
                parts.append(f"i64 {self.convert(x, 'size').text}")
            ptr = f.op(f"getelementptr inbounds {arr}, {_ptr(arr, v.space)} {v.ptr}, i64 0, {', '.join(parts)}")
            return ptr, v.ctype, v.space, _size(v.ctype), False
        raise RenderError(f"air renderer: {base.name!r} is not an array or a buffer")

    def array_type(self, ctype: str, dims: tuple[int, ...]) -> str:
        t = _lt(ctype)
        for d in reversed(dims):
            t = f"[{d} x {t}]"
        return t

    def load(self, ptr: str, ctype: str, space: int, align: int, readonly: bool) -> _Val:
        md = ""
        if self.form.load_metadata and readonly:
            md = ", !invariant.load !{EMPTY}"
            self.invariant_md = True
        lt = _lt(ctype)
        return _Val(self.f.op(f"load {lt}, {_ptr(lt, space)} {ptr}, align {align}{md}"), ctype)

    def load_slot(self, s: _Slot, ptr: str) -> _Val:
        lt = _lt(s.ctype)
        return _Val(self.f.op(f"load {lt}, {_ptr(lt, s.space)} {ptr}, align {_size(s.ctype)}"), s.ctype)

    def store(self, target: Expr, value: _Val) -> None:
        f = self.f
        if isinstance(target, Var):
            s = self.lookup(target.name)
            if not isinstance(s, _Slot) or s.dims:
                raise RenderError(f"air renderer: cannot assign to {target.name!r}")
            v = self.coerce(value, s.ctype)
            lt = _lt(s.ctype)
            f.emit(f"store {lt} {v.text}, {_ptr(lt, s.space)} {s.ptr}, align {_size(s.ctype)}")
            return
        if not isinstance(target, IndexExpr):
            raise RenderError(f"air renderer: cannot assign to {target!r}")
        ptr, ctype, space, align, _ = self.address(target)
        v = self.coerce(value, ctype)
        lt = _lt(ctype)
        f.emit(f"store {lt} {v.text}, {_ptr(lt, space)} {ptr}, align {align}")

    # ------------------------------------------------------------------ calls --
    def intrinsic(self, name: str, ret: str, args: list[tuple[str, str]], attrs: str = "#2") -> str:
        """A call of an air.* intrinsic with (LLVM type, operand) arguments."""
        self.declare(name, f"declare {ret} @{name}({', '.join(t for t, _ in args)}) {attrs}")
        flags = self._fmf() if ret in ("float", "half", "bfloat") else ""
        return self.f.op(f"call {flags}{ret} @{name}({', '.join(f'{t} {v}' for t, v in args)})")

    def call(self, e: Call) -> _Val:
        f, n = self.f, e.name
        if n in ("lane", "simdgroup"):
            return self.lookup("metile_" + n)
        if n == "tid":
            return _Val(self.lookup("metile_tid").text, "i32")
        if n in ("program_id0", "program_id1"):
            g = self.lookup("metile_tgid")
            return _Val(f.op(f"extractelement <3 x i32> {g.text}, i64 {n[-1]}"), "i32")
        if n.startswith("vload_"):
            return self.vload(e)
        args = [self.expr(a) for a in e.args]
        if n == "fma":
            xs = [self.coerce(a, "f32").text for a in args]
            return _Val(self.intrinsic("air.fma.f32", "float", [("float", x) for x in xs]), "f32")
        if n in ("exp", "tanh"):
            x = self.coerce(args[0], "f32").text
            return _Val(self.intrinsic(f"air.{n}.f32", "float", [("float", x)]), "f32")
        if n in ("max", "min"):
            xs = [self.coerce(a, "f32").text for a in args]
            return _Val(self.intrinsic(f"air.f{n}.f32", "float", [("float", x) for x in xs]), "f32")
        if n in ("max_i32", "min_i32"):
            xs = [self.coerce(a, "i32").text for a in args]
            return _Val(self.intrinsic(f"air.{n[:3]}.s.i32", "i32", [("i32", x) for x in xs]), "i32")
        if n == "u2f_small":
            return self.small_to_float(self.coerce(args[0], "u32"))
        if n == "bits_as_f32":
            return _Val(f.op(f"bitcast i32 {self.coerce(args[0], 'u32').text} to float"), "f32")
        if n == "simd_sum":
            self.helper_simd_sum()
            x = self.coerce(args[0], "f32").text
            return _Val(f.op(f"call float @metile_simd_sum(float {x})"), "f32")
        if n in ("erf", "sigmoid", "silu", "gelu", "gelu_approx"):
            self.helper_epilogue(n)
            x = self.coerce(args[0], "f32").text
            return _Val(f.op(f"call float @metile_{n}(float {x})"), "f32")
        if n.startswith("vget_"):
            dt = n[len("vget_") :]
            vec = self.coerce(args[0], "v" + dt)
            i = e.args[1]
            if not isinstance(i, Const):
                raise RenderError(f"air renderer: {n} at a non-constant position {i!r}")
            if dt in ("u32", "f32"):
                return _Val(f.op(f"extractelement {_lt('v' + dt)} {vec.text}, i64 {int(i.value)}"), dt)
            lt = _lt(dt)
            cast = f.op(f"bitcast <4 x i32> {vec.text} to <8 x {lt}>")
            return _Val(f.op(f"extractelement <8 x {lt}> {cast}, i64 {int(i.value)}"), dt)
        raise RenderError(f"air renderer has no spelling for {n}")

    def vload(self, e: Call) -> _Val:
        dt = e.name[len("vload_") :]
        self.helper_vload(dt)
        buf = e.args[0]
        if not isinstance(buf, Var):
            raise RenderError(f"air renderer: {e.name} of {buf!r}")
        p = self.lookup(buf.name)
        lt, vt = _lt(dt), _lt("v" + dt)
        off = self.coerce(self.expr(e.args[1]), "i32").text
        ok = self.coerce(self.expr(e.args[2]), "bool").text
        call = f"call {vt} @metile_vload_{dt}({_ptr(lt, 1)} {p.text}, i32 {off}, i1 {ok})"
        return _Val(self.f.op(call), "v" + dt)

    def small_to_float(self, q: _Val, lanes: int = 1) -> _Val:
        """An unsigned value below 2**23 as the float of the same value, in the form's spelling."""
        f = self.f
        it, ft = ("i32", "float") if lanes == 1 else (f"<{lanes} x i32>", f"<{lanes} x float>")
        if self.form.convert == "llvm":
            return _Val(f.op(f"uitofp {it} {q.text} to {ft}"), "f32")
        if self.form.convert == "bits":
            magic, two23 = "1258291200", float_hex(8388608.0)  # 0x4B000000: 2**23 with q as its mantissa
            if lanes > 1:
                magic = _splat("i32", magic, lanes)
                two23 = _splat("float", two23, lanes)
            bits = f.op(f"or {it} {q.text}, {magic}")
            as_f = f.op(f"bitcast {it} {bits} to {ft}")
            return _Val(f.op(f"fsub {self._fmf()}{ft} {as_f}, {two23}"), "f32")
        name = "air.convert.f.f32.u.i32" if lanes == 1 else f"air.convert.f.v{lanes}f32.u.v{lanes}i32"
        return _Val(self.intrinsic(name, ft, [(it, q.text)]), "f32")

    # ---------------------------------------------------------------- helpers --
    def helper_simd_sum(self) -> None:
        if "metile_simd_sum" in self.helpers:
            return
        shuffle = "air.simd_shuffle_xor.f32"
        self.declare(shuffle, f"declare float @{shuffle}(float, i16) #1")
        lines = ["; v += simd_shuffle_xor(v, offset) for offset 16, 8, 4, 2, 1 (the MSL's helper)"]
        lines.append("define internal float @metile_simd_sum(float %v) #3 {\nentry:")
        cur = "%v"
        for k, off in enumerate((16, 8, 4, 2, 1)):
            lines.append(f"  %s{k} = call float @{shuffle}(float {cur}, i16 {off})")
            lines.append(f"  %a{k} = fadd {self._fmf()}float {cur}, %s{k}")
            cur = f"%a{k}"
        lines.append(f"  ret float {cur}\n}}\n")
        self.helpers["metile_simd_sum"] = "\n".join(lines)

    def helper_vload(self, dt: str) -> None:
        name = f"metile_vload_{dt}"
        if name in self.helpers:
            return
        lt, vt = _lt(dt), _lt("v" + dt)
        align = 16 if self.form.align == "natural" else _size(dt)
        md = ", !invariant.load !{EMPTY}" if self.form.load_metadata else ""
        self.invariant_md |= self.form.load_metadata
        self.helpers[name] = (
            f"; ok ? *(const device {vt}*)(p + offset) : 0\n"
            f"define internal {vt} @{name}({_ptr(lt, 1)} %p, i32 %offset, i1 %ok) #3 {{\n"
            f"entry:\n  br i1 %ok, label %load, label %done\n"
            f"load:\n  %o = sext i32 %offset to i64\n"
            f"  %e = getelementptr inbounds {lt}, {_ptr(lt, 1)} %p, i64 %o\n"
            f"  %q = bitcast {_ptr(lt, 1)} %e to {_ptr(vt, 1)}\n"
            f"  %v = load {vt}, {_ptr(vt, 1)} %q, align {align}{md}\n  br label %done\n"
            f"done:\n  %r = phi {vt} [ %v, %load ], [ zeroinitializer, %entry ]\n  ret {vt} %r\n}}\n"
        )

    def helper_epilogue(self, name: str) -> None:
        if name == "gelu":
            self.helper_epilogue("erf")
        if f"metile_{name}" in self.helpers:
            return
        m = self._fmf()
        self.declare("air.exp.f32", "declare float @air.exp.f32(float) #2")
        one = float_hex(1.0)
        body = {
            # x / (1 + exp(-x))
            "silu": [
                "%n = fneg {m}float %x",
                "%e = call {m}float @air.exp.f32(float %n)",
                f"%d = fadd {{m}}float {one}, %e",
                "%r = fdiv {m}float %x, %d",
            ],
            # 1 / (1 + exp(-x))
            "sigmoid": [
                "%n = fneg {m}float %x",
                "%e = call {m}float @air.exp.f32(float %n)",
                f"%d = fadd {{m}}float {one}, %e",
                f"%r = fdiv {{m}}float {one}, %d",
            ],
            # Abramowitz & Stegun 7.1.26, as cstyle.HELPERS["erf"] writes it
            "erf": [
                f"%neg = fcmp {{m}}olt float %x, {float_hex(0.0)}",
                f"%s = select i1 %neg, float {float_hex(-1.0)}, float {one}",
                "%nx = fneg {m}float %x",
                "%a = select i1 %neg, float %nx, float %x",
                f"%pa = fmul {{m}}float {float_hex(0.3275911)}, %a",
                f"%da = fadd {{m}}float {one}, %pa",
                f"%t = fdiv {{m}}float {one}, %da",
                f"%p1 = fmul {{m}}float {float_hex(1.061405429)}, %t",
                f"%p2 = fsub {{m}}float %p1, {float_hex(1.453152027)}",
                "%p3 = fmul {m}float %p2, %t",
                f"%p4 = fadd {{m}}float %p3, {float_hex(1.421413741)}",
                "%p5 = fmul {m}float %p4, %t",
                f"%p6 = fsub {{m}}float %p5, {float_hex(0.284496736)}",
                "%p7 = fmul {m}float %p6, %t",
                f"%p8 = fadd {{m}}float %p7, {float_hex(0.254829592)}",
                "%p9 = fmul {m}float %p8, %t",
                "%na = fneg {m}float %a",
                "%aa = fmul {m}float %na, %a",
                "%ex = call {m}float @air.exp.f32(float %aa)",
                "%pe = fmul {m}float %p9, %ex",
                f"%y = fsub {{m}}float {one}, %pe",
                "%r = fmul {m}float %s, %y",
            ],
            # 0.5 x (1 + erf(x / sqrt 2))
            "gelu": [
                f"%h = fmul {{m}}float {float_hex(0.5)}, %x",
                f"%xs = fmul {{m}}float %x, {float_hex(0.70710678118654752)}",
                "%e = call {m}float @metile_erf(float %xs)",
                f"%d = fadd {{m}}float {one}, %e",
                "%r = fmul {m}float %h, %d",
            ],
            # 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
            "gelu_approx": [
                f"%h = fmul {{m}}float {float_hex(0.5)}, %x",
                f"%c1 = fmul {{m}}float {float_hex(0.044715)}, %x",
                "%c2 = fmul {m}float %c1, %x",
                "%c3 = fmul {m}float %c2, %x",
                "%in = fadd {m}float %x, %c3",
                f"%k = fmul {{m}}float {float_hex(0.79788456080286536)}, %in",
                "%th = call {m}float @air.tanh.f32(float %k)",
                f"%d = fadd {{m}}float {one}, %th",
                "%r = fmul {m}float %h, %d",
            ],
        }[name]
        if name == "gelu_approx":
            self.declare("air.tanh.f32", "declare float @air.tanh.f32(float) #2")
        lines = [f"define internal float @metile_{name}(float %x) #3 {{", "entry:"]
        lines += ["  " + b.replace("{m}", m) for b in body]
        lines.append("  ret float %r\n}\n")
        self.helpers[f"metile_{name}"] = "\n".join(lines)

    # ------------------------------------------------------------- statements --
    def stmt(self, s) -> None:
        f = self.f
        if isinstance(s, Comment):
            f.lines.append(f"  ; {s.text}")
        elif isinstance(s, Decl):
            self.decl(s)
        elif isinstance(s, Decls):
            for name, init in s.items:
                self.decl(Decl(s.dtype, name, init, const=s.const))
        elif isinstance(s, Assign):
            if s.op == "=":
                self.store(s.target, self.expr(s.value))
            else:
                op = {"+=": "+", "*=": "*", "-=": "-"}.get(s.op)
                if op is None:
                    raise RenderError(f"air renderer: assignment {s.op}")
                self.store(s.target, self.expr(Bin(op, s.target, Paren(s.value))))
        elif isinstance(s, Increment):
            self.store(s.target, self.expr(Bin("+", s.target, Const(1))))
        elif isinstance(s, Line):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, Block):
            self.push()
            for x in s.body:
                self.stmt(x)
            self.pop()
        elif isinstance(s, If):
            self.if_(s)
        elif isinstance(s, Loop):
            self.loop(s)
        elif isinstance(s, Barrier):
            if s.scope == "group":  # threadgroup_barrier(mem_flags::mem_threadgroup)
                self.declare("air.wg.barrier", "declare void @air.wg.barrier(i32, i32) #1")
                f.emit("call void @air.wg.barrier(i32 2, i32 1)")
            else:  # simdgroup_barrier(mem_flags::mem_none)
                self.declare("air.simdgroup.barrier", "declare void @air.simdgroup.barrier(i32, i32) #1")
                f.emit("call void @air.simdgroup.barrier(i32 0, i32 1)")
        else:
            raise RenderError(f"air renderer: {type(s).__name__} statements are not supported (simdgroup kernels only)")

    def decl(self, s: Decl) -> None:
        f = self.f
        if not isinstance(s.dtype, str):
            raise RenderError(f"air renderer: declaration of {s.name} as {s.dtype!r}")
        ctype = _canon(s.dtype)
        if s.shared:
            if s.init is not None:
                raise RenderError(f"air renderer: threadgroup {s.name} with an initializer")
            arr = self.array_type(ctype, s.dims)
            g = f"@metile.tg.{s.name}"
            if any(line.startswith(g + " ") for line in self.globals):
                raise RenderError(f"air renderer: threadgroup {s.name} declared twice")
            self.globals.append(f"{g} = internal addrspace(3) global {arr} undef, align {max(4, _size(ctype))}")
            self.bind(s.name, _Slot(g, ctype, s.dims, 3))
            return
        if s.const and s.init is not None and not s.dims:
            if self.form.unpack == "vector":
                d = self.deferred(s)
                if d is not None:
                    self.bind(s.name, d)
                    return
                v = self.unpacked(s)
                if v is not None:
                    self.bind(s.name, v)
                    return
            v = self.coerce(self.expr(s.init), ctype)
            self.bind(s.name, v)
            return
        ty = self.array_type(ctype, s.dims) if s.dims else _lt(ctype)
        reg = f.local(s.name)
        f.allocas.append(f"  {reg} = alloca {ty}, align {max(4, _size(ctype))}")
        slot = _Slot(reg, ctype, s.dims)
        self.bind(s.name, slot)
        if s.init is not None:
            if s.init == Const(None, "zero_init"):
                f.emit(f"store {ty} zeroinitializer, {ty}* {reg}, align {max(4, _size(ctype))}")
            elif s.dims:
                raise RenderError(f"air renderer: array {s.name} with an initializer")
            else:
                self.store(Var(s.name), self.expr(s.init))

    # vector unpack: `t = (W >> c)`, `u = (t & m)` and `float(u)` for a field width b (m = 2**b - 1,
    # c a multiple of b) become one 4-lane shift, mask and conversion per 4 fields of W
    def deferred(self, s: Decl) -> _Deferred | None:
        e = s.init.a if isinstance(s.init, Paren) else s.init
        if s.dtype != "u32" or not isinstance(e, Bin):
            return None
        if e.op == ">>" and _const_int(e.b) is not None:
            return _Deferred(s.init, "u32")
        if e.op == "&" and _const_int(e.b) is not None and isinstance(e.a, Var):
            inner = self.lookup(e.a.name)
            if isinstance(inner, _Deferred):
                return _Deferred(s.init, "u32")
        return None

    def unpacked(self, s: Decl) -> _Val | None:
        e = s.init
        if s.dtype != "f32" or not isinstance(e, (Call, Convert)):
            return None
        arg = e.args[0] if isinstance(e, Call) and e.name == "u2f_small" else getattr(e, "a", None)
        if isinstance(e, Convert) and (e.to, e.src) != ("f32", "u32"):
            return None
        if not isinstance(arg, Var):
            return None
        masked = self.lookup(arg.name)
        if not isinstance(masked, _Deferred):
            return None
        m = masked.expr.a if isinstance(masked.expr, Paren) else masked.expr
        if m.op != "&" or not isinstance(m.a, Var):
            return None
        mask = _const_int(m.b)
        shifted = self.lookup(m.a.name)
        if not isinstance(shifted, _Deferred) or mask is None or mask & (mask + 1):
            return None
        sh = shifted.expr.a if isinstance(shifted.expr, Paren) else shifted.expr
        if sh.op != ">>":
            return None
        bits, c = mask.bit_length(), _const_int(sh.b)
        if bits == 0 or 32 % bits or c % bits or bits > 23:
            return None
        per = 32 // bits
        pos = c // bits
        quad = pos // 4
        key = (sh.a, bits, quad)  # temporaries have kernel-unique names: the tree names one word
        for scope in reversed(self.scopes):
            if key in scope.unpacked:
                vec = scope.unpacked[key]
                break
        else:
            f = self.f
            word = self.coerce(self.expr(sh.a), "u32")
            lanes = min(4, per)
            shifts = ", ".join(f"i32 {bits * (4 * quad + j)}" for j in range(lanes))
            ins = f.op(f"insertelement <{lanes} x i32> undef, i32 {word.text}, i64 0")
            spl = f.op(f"shufflevector <{lanes} x i32> {ins}, <{lanes} x i32> undef, <{lanes} x i32> zeroinitializer")
            shr = f.op(f"lshr <{lanes} x i32> {spl}, <{shifts}>")
            msk = f.op(f"and <{lanes} x i32> {shr}, {_splat('i32', str(mask), lanes)}")
            vec = self.small_to_float(_Val(msk, "u32"), lanes)
            vec = _Val(vec.text, f"<{lanes}>")
            self.scopes[-1].unpacked[key] = vec
        lanes = int(vec.ctype.strip("<>"))
        return _Val(self.f.op(f"extractelement <{lanes} x float> {vec.text}, i64 {pos % 4}"), "f32")

    def if_(self, s: If) -> None:
        f = self.f
        c = self.coerce(self.expr(s.cond), "bool")
        then, done = f.label("if.then"), f.label("if.end")
        other = f.label("if.else") if s.orelse else done
        f.emit(f"br i1 {c.text}, label %{then}, label %{other}")
        f.start(then)
        self.push()
        for x in s.body:
            self.stmt(x)
        self.pop()
        f.emit(f"br label %{done}")
        if s.orelse:
            f.start(other)
            self.push()
            for x in s.orelse:
                self.stmt(x)
            self.pop()
            f.emit(f"br label %{done}")
        f.start(done)

    def loop(self, s: Loop) -> None:
        """for (int var = start; cond; var += step): the counter a phi of the header."""
        f = self.f
        start = self.coerce(self.expr(s.start), "i32")
        head, body, latch, done = (f.label(f"{s.var}.{p}") for p in ("head", "body", "latch", "end"))
        before = f.block
        f.emit(f"br label %{head}")
        f.start(head)
        iv = f.local(s.var)
        phi_at = len(f.lines)
        f.lines.append("")  # the phi, once the latch's value is named
        self.push()
        self.bind(s.var, _Val(iv, "i32"))
        c = self.coerce(self.expr(s.cond), "bool")
        f.emit(f"br i1 {c.text}, label %{body}, label %{done}")
        f.start(body)
        self.push()
        for x in s.body:
            self.stmt(x)
        self.pop()
        f.emit(f"br label %{latch}")
        f.start(latch)
        step = self.coerce(self.expr(s.step), "i32").text if s.step is not None else "1"
        nxt = f.op(f"add nsw i32 {iv}, {step}", s.var + ".next")
        self.loop_md.append(s.unroll)
        f.emit(f"br label %{head}, !llvm.loop !{{LOOP{len(self.loop_md) - 1}}}")
        self.pop()
        f.lines[phi_at] = f"  {iv} = phi i32 [ {start.text}, %{before} ], [ {nxt}, %{latch} ]"
        f.start(done)


def _promoted(ctype: str) -> str:
    """C's integer promotion of a type (bool, char, short -> int)."""
    return "i32" if ctype in ("bool", "bits16", "u8", "char") else _canon(ctype)


def _bits(llvm_type: str) -> int:
    return {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64}[llvm_type]


def _suffix(ctype: str) -> str:
    return {"f32": "f32", "f16": "f16", "bf16": "bf16"}[ctype]


def _canon(ctype: str) -> str:
    return {"int": "i32", "bits32": "u32"}.get(ctype, ctype)


def _splat(elem: str, value: str, lanes: int) -> str:
    return "<" + ", ".join(f"{elem} {value}" for _ in range(lanes)) + ">"


def _const_int(e: Expr) -> int | None:
    """The value of a constant integer operand (`15u`, `uint(4)`, an IntPoly constant)."""
    if isinstance(e, Paren):
        return _const_int(e.a)
    if isinstance(e, Const) and e.dtype in ("i32", "u32"):
        return int(e.value)
    if isinstance(e, Convert) and e.to in ("u32", "i32"):
        return _const_int(e.a)
    if isinstance(e, Cast):
        return _const_int(e.a)
    if isinstance(e, IntPoly):
        if not e.terms:
            return 0
        if len(e.terms) == 1 and e.terms[0][0] == ():
            return int(e.terms[0][1])
    return None


def _number(renderer: AIRRenderer, text: str) -> str:
    """Metadata references the body names before the metadata is numbered."""
    ids = renderer._md_ids
    for key in ("EMPTY", "RANGE"):
        if ids.get(key) is not None:
            text = text.replace("!{" + key + "}", f"!{ids[key]}")
    for j in range(len(renderer.loop_md)):
        text = text.replace("!{LOOP" + str(j) + "}", f"!{ids['LOOP0'] + j}")
    return text
