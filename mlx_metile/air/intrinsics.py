"""Definitions of AIR's `air.*` intrinsics for the CPU, as LLVM assembly.

Each intrinsic the module declares gets a definition here, from its name and its declared
signature. Three families:

- collectives (SIMD-group reductions, shuffles, broadcasts, the 8x8 matrix multiply) and barriers
  call the emulator's fiber runtime (`metile_rt_collective`, `metile_rt_barrier`, emu_rt.h), so a
  dispatch has Metal's execution model: lanes of a SIMD group meet in the collective, threads of a
  threadgroup at the barrier, and divergence is a fault. These take the call site as a first
  argument (the retargeting pass adds it: the line of the call in the module's disassembly), so
  that faults name where the lanes diverged;
- conversions, integer min/max/clamp/abs and float math map to LLVM instructions, LLVM intrinsics
  or the C library;
- `air.normalize_function_constant_predicate` makes a function constant a 0/1 byte.

A simdgroup_matrix<T, 8, 8> is, in AIR, a `<64 x T>` value of which each lane uses elements 0
and 1: its two elements of the matrix at the lane's fragment coordinates (the layout the runtime's
MMA resolves, metile_frag_coord in emu_rt.h).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import AirError
from .module import split_top

# emu_rt.h: enum metile_collective_op / metile_type_code
OPS = {
    "sum": 0,
    "product": 1,
    "max": 2,
    "min": 3,
    "and": 4,
    "or": 5,
    "xor": 6,
    "shuffle": 7,
    "shuffle_down": 8,
    "shuffle_up": 9,
    "shuffle_xor": 10,
    "broadcast": 11,
}
OP_MMA = 12
TCODES = {
    ("f", "float"): 0,
    ("f", "half"): 1,
    ("f", "bfloat"): 2,
    ("s", "i32"): 3,
    ("u", "i32"): 4,
    ("s", "i16"): 5,
    ("u", "i16"): 6,
    ("s", "i8"): 7,
    ("u", "i8"): 8,
    ("s", "i64"): 9,
    ("u", "i64"): 10,
}
_SIZE = {"float": 4, "half": 2, "bfloat": 2, "double": 8, "i64": 8, "i32": 4, "i16": 2, "i8": 1, "i1": 1}
PAYLOAD = 32  # bytes a lane passes through a collective (runtime.cpp kPayload)

RUNTIME_DECLS = (
    "declare void @metile_rt_barrier(ptr, i32)\n"
    "declare void @metile_rt_collective(i32, i32, i32, ptr, i32, i32, ptr, ptr, i32)\n"
)


@dataclass(frozen=True)
class Signature:
    name: str
    ret: str
    args: tuple[str, ...]


def parse_declare(line: str) -> Signature:
    m = re.match(r"declare (?:[\w]+ )*?(\S+(?: x \S+>)?|<\d+ x \w+>) @\"?([\w.$]+)\"?\((.*)\)", line)
    if not m:
        raise AirError(f"cannot read the declaration {line!r}")
    ret, name, args = m.group(1), m.group(2), m.group(3)
    types = []
    for a in split_top(args):
        t = re.match(r"(ptr(?: addrspace\(\d+\))?|<\d+ x \w+>|\w+)", a)
        types.append(t.group(1) if t else a)
    return Signature(name, ret, tuple(types))


def _scalar(t: str) -> tuple[str, int]:
    """(element type, lanes) of an LLVM scalar or vector type."""
    m = re.fullmatch(r"<(\d+) x (\w+)>", t)
    return (m.group(2), int(m.group(1))) if m else (t, 1)


def takes_site(name: str) -> bool:
    """Whether the retargeting pass passes the call site to this intrinsic."""
    return bool(
        re.match(r"air\.simd_(" + "|".join(OPS) + r")\.", name)
        or re.match(r"air\.quad_(" + "|".join(_QUAD_OPS) + r")\.", name)
        or name.startswith("air.is_uniform.")
        or name in ("air.wg.barrier", "air.simdgroup.barrier", "air.simd_any", "air.simd_all")
        or name.startswith("air.simdgroup_matrix_8x8_multiply_accumulate.")
    )


# -------------------------------------------------------------- collectives --
# quad-group reductions: two xor shuffles inside the SIMD group (lanes l^1, then l^2)
_QUAD_OPS = {
    "sum": ("fadd", "add"),
    "product": ("fmul", "mul"),
    "max": ("maxnum", "max"),
    "min": ("minnum", "min"),
    "and": (None, "and"),
    "or": (None, "or"),
    "xor": (None, "xor"),
}


def _collective(sig: Signature, op: str, sign: str, file_sym: str) -> str:
    vtype = sig.ret
    elem, width = _scalar(vtype)
    kind = "f" if elem in ("float", "half", "bfloat") else sign
    if elem == "i1":
        return _collective_bool(sig, op, file_sym)
    tcode = TCODES.get((kind, elem))
    if tcode is None or width * _SIZE[elem] > PAYLOAD:
        raise AirError(f"{sig.name}: collectives of {vtype} are not supported")
    nbytes = width * _SIZE[elem]
    if op in ("shuffle", "shuffle_down", "shuffle_up", "shuffle_xor", "broadcast"):
        if len(sig.args) != 2:
            raise AirError(f"{sig.name}: expected (value, lane), declared ({', '.join(sig.args)})")
        lane_t = sig.args[1]
        params = f"i32 %site, {vtype} %v, {lane_t} %lane"
        lane = "%lane" if lane_t == "i32" else "%lane.x"
        widen = "" if lane_t == "i32" else f"  %lane.x = zext {lane_t} %lane to i32\n"
    else:
        params = f"i32 %site, {vtype} %v"
        lane, widen = "0", ""
    return (
        f"define internal {vtype} @{sig.name}({params}) alwaysinline {{\n"
        f"{widen}"
        f"  %in = alloca {vtype}, align 16\n"
        f"  %out = alloca {vtype}, align 16\n"
        f"  store {vtype} %v, ptr %in\n"
        f"  call void @metile_rt_collective(i32 {OPS[op]}, i32 {tcode}, i32 {width}, ptr %in, i32 {nbytes}, "
        f"i32 {lane}, ptr %out, ptr {file_sym}, i32 %site)\n"
        f"  %r = load {vtype}, ptr %out\n"
        f"  ret {vtype} %r\n}}\n"
    )


def _collective_bool(sig: Signature, op: str, file_sym: str) -> str:
    return (
        f"define internal i1 @{sig.name}(i32 %site, i1 %v) alwaysinline {{\n"
        f"  %in = alloca i8, align 16\n"
        f"  %out = alloca i8, align 16\n"
        f"  %b = zext i1 %v to i8\n"
        f"  store i8 %b, ptr %in\n"
        f"  call void @metile_rt_collective(i32 {OPS[op]}, i32 8, i32 1, ptr %in, i32 1, i32 0, ptr %out, "
        f"ptr {file_sym}, i32 %site)\n"
        f"  %r = load i8, ptr %out\n"
        f"  %t = icmp ne i8 %r, 0\n"
        f"  ret i1 %t\n}}\n"
    )


def _quad(sig: Signature, op: str, sign: str, file_sym: str) -> str:
    vtype = sig.ret
    is_float = _scalar(vtype)[0] in ("float", "half", "bfloat")
    fop, iop = _QUAD_OPS[op]
    if (fop if is_float else iop) is None:
        raise AirError(f"{sig.name}: quad_{op} of {vtype} is not defined")
    shuffle = Signature(f"{sig.name}.shuffle", vtype, (vtype, "i16"))
    lines = [f"define internal {vtype} @{sig.name}(i32 %site, {vtype} %v) alwaysinline {{"]
    decls = []
    cur = "%v"
    for k, mask in enumerate((1, 2)):
        lines.append(f"  %s{k} = call {vtype} @{shuffle.name}(i32 %site, {vtype} {cur}, i16 {mask})")
        if op in ("max", "min"):
            intr = f"llvm.{fop}.{_suffix(vtype)}" if is_float else f"llvm.{sign}{iop}.{_suffix(vtype)}"
            lines.append(f"  %r{k} = call {vtype} @{intr}({vtype} {cur}, {vtype} %s{k})")
            decls.append(f"declare {vtype} @{intr}({vtype}, {vtype})")
        else:
            lines.append(f"  %r{k} = {fop if is_float else iop} {vtype} {cur}, %s{k}")
        cur = f"%r{k}"
    lines.append(f"  ret {vtype} {cur}\n}}\n")
    body = _collective(shuffle, "shuffle_xor", sign, file_sym)
    return body + "\n".join(lines) + "".join(d + "\n" for d in dict.fromkeys(decls))


def _is_uniform(sig: Signature, file_sym: str) -> str:
    """Whether every active lane holds the same value: its SIMD-group minimum equals its maximum."""
    t = sig.args[0]
    wide = "i8" if t == "i1" else t
    lo = Signature(f"{sig.name}.min", wide, (wide,))
    hi = Signature(f"{sig.name}.max", wide, (wide,))
    ext = "  %w = zext i1 %v to i8\n" if t == "i1" else ""
    val = "%w" if t == "i1" else "%v"
    cmp = "fcmp oeq" if wide in ("float", "half", "bfloat") else "icmp eq"
    body = (
        f"define internal i1 @{sig.name}(i32 %site, {t} %v) alwaysinline {{\n{ext}"
        f"  %lo = call {wide} @{lo.name}(i32 %site, {wide} {val})\n"
        f"  %hi = call {wide} @{hi.name}(i32 %site, {wide} {val})\n"
        f"  %r = {cmp} {wide} %lo, %hi\n  ret i1 %r\n}}\n"
    )
    return _collective(lo, "min", "u", file_sym) + _collective(hi, "max", "u", file_sym) + body


def _barrier(sig: Signature, file_sym: str) -> str:
    params = ", ".join(f"{t} %a{i}" for i, t in enumerate(sig.args))
    if sig.name == "air.wg.barrier":
        body = f"  call void @metile_rt_barrier(ptr {file_sym}, i32 %site)\n"
    else:  # a simdgroup barrier: the lanes of the SIMD group meet (as the emulator's simdgroup_barrier)
        body = (
            "  %in = alloca i32, align 16\n  %out = alloca i32, align 16\n  store i32 0, ptr %in\n"
            f"  call void @metile_rt_collective(i32 5, i32 4, i32 1, ptr %in, i32 4, i32 0, ptr %out, "
            f"ptr {file_sym}, i32 %site)\n"
        )
    return f"define internal void @{sig.name}(i32 %site{', ' if params else ''}{params}) alwaysinline {{\n{body}  ret void\n}}\n"


def _to_float(v: str, t: str, out: str) -> str:
    return f"  {out} = fpext {t} {v} to float\n" if t != "float" else f"  {out} = fadd float {v}, -0.0\n"


def _mma(sig: Signature, file_sym: str) -> str:
    if len(sig.args) != 3:
        raise AirError(f"{sig.name}: expected (A, B, C), declared ({', '.join(sig.args)})")
    d_elem, n = _scalar(sig.ret)
    if n != 64 or any(_scalar(a)[1] != 64 for a in sig.args):
        raise AirError(f"{sig.name}: expected <64 x T> matrices, declared {sig.ret} ({', '.join(sig.args)})")
    for t in (d_elem, *(_scalar(a)[0] for a in sig.args)):
        if t not in ("float", "half", "bfloat"):
            raise AirError(f"{sig.name}: simdgroup matrices of {t} are not supported")
    lines = [
        f"define internal {sig.ret} @{sig.name}(i32 %site, {sig.args[0]} %a, {sig.args[1]} %b, {sig.args[2]} %c) alwaysinline {{"
    ]
    lines.append("  %in = alloca [6 x float], align 16\n  %out = alloca [2 x float], align 16")
    body = []
    for k, (v, t) in enumerate((("%a", sig.args[0]), ("%b", sig.args[1]), ("%c", sig.args[2]))):
        elem = _scalar(t)[0]
        for j in (0, 1):
            x = f"%{v[1]}{j}"
            body.append(f"  {x} = extractelement {t} {v}, i64 {j}")
            body.append(_to_float(x, elem, f"{x}.f").rstrip("\n"))
            body.append(f"  {x}.p = getelementptr [6 x float], ptr %in, i64 0, i64 {2 * k + j}")
            body.append(f"  store float {x}.f, ptr {x}.p")
    lines += body
    lines.append(
        f"  call void @metile_rt_collective(i32 {OP_MMA}, i32 0, i32 1, ptr %in, i32 24, i32 0, ptr %out, "
        f"ptr {file_sym}, i32 %site)"
    )
    prev = "poison"
    for j in (0, 1):
        lines.append(f"  %o{j}.p = getelementptr [2 x float], ptr %out, i64 0, i64 {j}")
        lines.append(f"  %o{j} = load float, ptr %o{j}.p")
        val = f"%o{j}"
        if d_elem != "float":
            lines.append(f"  %o{j}.t = fptrunc float %o{j} to {d_elem}")
            val = f"%o{j}.t"
        lines.append(f"  %d{j} = insertelement {sig.ret} {prev}, {d_elem} {val}, i64 {j}")
        prev = f"%d{j}"
    lines.append(f"  ret {sig.ret} {prev}\n}}\n")
    return "\n".join(lines)


# --------------------------------------------------------------------- pure --
_CONVERT = re.compile(r"air\.convert\.([fsu])\.(v\d+)?([fi]\d+|bf16)\.([fsu])\.(v\d+)?([fi]\d+|bf16)$")
_LLVM_UNARY = {
    "fabs": "fabs",
    "sqrt": "sqrt",
    "floor": "floor",
    "ceil": "ceil",
    "trunc": "trunc",
    "rint": "rint",
    "round": "round",
    "exp": "exp",
    "exp2": "exp2",
    "log": "log",
    "log2": "log2",
    "log10": "log10",
    "sin": "sin",
    "cos": "cos",
}
_LIBM_UNARY = {"tan", "tanh", "sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "erf", "exp10"}
_LLVM_BINARY = {"fmin": "minnum", "fmax": "maxnum", "pow": "pow", "copysign": "copysign"}
_LIBM_BINARY = {"atan2", "fmod", "hypot", "fdim"}


def _suffix(t: str) -> str:
    elem, n = _scalar(t)
    e = {"float": "f32", "half": "f16", "bfloat": "bf16", "double": "f64"}.get(elem, elem)
    return f"v{n}{e}" if n > 1 else e


def _def(sig: Signature, body: str) -> str:
    params = ", ".join(f"{t} %a{i}" for i, t in enumerate(sig.args))
    return f"define internal {sig.ret} @{sig.name}({params}) alwaysinline {{\n{body}}}\n"


def _convert(sig: Signature, m: re.Match) -> str:
    dk, sk = m.group(1), m.group(4)
    src, dst = sig.args[0], sig.ret
    s_elem, d_elem = _scalar(src)[0], _scalar(dst)[0]
    if dk == "f" and sk == "f":
        ss, ds = _SIZE[s_elem], _SIZE[d_elem]
        if s_elem == d_elem:
            return _def(sig, f"  ret {dst} %a0\n")
        if s_elem in ("half", "bfloat") and d_elem in ("half", "bfloat"):  # through float: both are exact in it
            mid = "float" if _scalar(src)[1] == 1 else f"<{_scalar(src)[1]} x float>"
            return _def(sig, f"  %f = fpext {src} %a0 to {mid}\n  %r = fptrunc {mid} %f to {dst}\n  ret {dst} %r\n")
        op = "fpext" if ds > ss else "fptrunc"
        return _def(sig, f"  %r = {op} {src} %a0 to {dst}\n  ret {dst} %r\n")
    if dk == "f":
        op = "sitofp" if sk == "s" else "uitofp"
        return _def(sig, f"  %r = {op} {src} %a0 to {dst}\n  ret {dst} %r\n")
    if sk == "f":
        if d_elem == "i1":  # float -> bool: nonzero is true
            return _def(sig, f"  %r = fcmp une {src} %a0, zeroinitializer\n  ret {dst} %r\n")
        # saturating, as GPUs convert (LLVM's plain fptosi would be poison out of range)
        intr = f"llvm.fpto{dk}i.sat.{_suffix(dst)}.{_suffix(src)}"
        return _def(sig, f"  %r = call {dst} @{intr}({src} %a0)\n  ret {dst} %r\n") + f"declare {dst} @{intr}({src})\n"
    ss, ds = _SIZE[s_elem], _SIZE[d_elem]
    if d_elem == "i1":
        return _def(sig, f"  %r = icmp ne {src} %a0, zeroinitializer\n  ret {dst} %r\n")
    if ss == ds:
        return _def(sig, f"  ret {dst} %a0\n")
    op = "trunc" if ds < ss else ("sext" if sk == "s" else "zext")
    return _def(sig, f"  %r = {op} {src} %a0 to {dst}\n  ret {dst} %r\n")


def _through_float(sig: Signature, call: str, nargs: int) -> str:
    """A float-only C function applied to half / bfloat / float arguments (scalars)."""
    t = sig.ret
    lines, args = [], []
    for i in range(nargs):
        if t == "float":
            args.append(f"float %a{i}")
        else:
            lines.append(f"  %x{i} = fpext {t} %a{i} to float")
            args.append(f"float %x{i}")
    lines.append(f"  %f = call float @{call}({', '.join(args)})")
    if t == "float":
        lines.append("  ret float %f")
    else:
        lines.append(f"  %r = fptrunc float %f to {t}\n  ret {t} %r")
    decl = f"declare float @{call}({', '.join(['float'] * nargs)})\n"
    return _def(sig, "\n".join(lines) + "\n") + decl


def _pure(sig: Signature) -> str | None:
    name = sig.name
    m = _CONVERT.match(name)
    if m:
        return _convert(sig, m)
    if name.startswith("air.normalize_function_constant_predicate."):
        t = sig.ret
        return _def(sig, f"  %c = icmp ne {t} %a0, 0\n  %r = zext i1 %c to {t}\n  ret {t} %r\n")
    if name == "air.get_simdgroup_size.i16":
        return _def(sig, "  ret i16 32\n")
    m = re.fullmatch(r"air\.(min|max)\.([su])\.(\w+)", name)
    if m:
        intr = f"llvm.{m.group(2)}{m.group(1)}.{_suffix(sig.ret)}"
        return (
            _def(sig, f"  %r = call {sig.ret} @{intr}({sig.ret} %a0, {sig.ret} %a1)\n  ret {sig.ret} %r\n")
            + f"declare {sig.ret} @{intr}({sig.ret}, {sig.ret})\n"
        )
    m = re.fullmatch(r"air\.clamp\.([su])\.(\w+)", name)
    if m:
        t, s = sig.ret, m.group(1)
        body = (
            f"  %lo = call {t} @llvm.{s}max.{_suffix(t)}({t} %a0, {t} %a1)\n"
            f"  %r = call {t} @llvm.{s}min.{_suffix(t)}({t} %lo, {t} %a2)\n  ret {t} %r\n"
        )
        return (
            _def(sig, body)
            + f"declare {t} @llvm.{s}max.{_suffix(t)}({t}, {t})\ndeclare {t} @llvm.{s}min.{_suffix(t)}({t}, {t})\n"
        )
    m = re.fullmatch(r"air\.abs\.s\.(\w+)", name)
    if m:
        t = sig.ret
        return _def(sig, f"  %r = call {t} @llvm.abs.{_suffix(t)}({t} %a0, i1 false)\n  ret {t} %r\n") + (
            f"declare {t} @llvm.abs.{_suffix(t)}({t}, i1)\n"
        )
    m = re.fullmatch(r"air\.dot\.v(\d+)(f32|f16)", name)
    if m and len(sig.args) == 2:  # products summed left to right, each rounded
        t, n = sig.args[0], int(m.group(1))
        lines = []
        for i in range(n):
            lines.append(f"  %a{i}.e = extractelement {t} %a0, i64 {i}\n  %b{i}.e = extractelement {t} %a1, i64 {i}")
            lines.append(f"  %p{i} = fmul {sig.ret} %a{i}.e, %b{i}.e")
        acc = "%p0"
        for i in range(1, n):
            lines.append(f"  %s{i} = fadd {sig.ret} {acc}, %p{i}")
            acc = f"%s{i}"
        return _def(sig, "\n".join(lines) + f"\n  ret {sig.ret} {acc}\n")
    if name == "air.ldexp.f32" and sig.args == ("float", "i32"):
        return _def(sig, "  %r = call float @ldexpf(float %a0, i32 %a1)\n  ret float %r\n") + (
            "declare float @ldexpf(float, i32)\n"
        )
    m = re.fullmatch(r"air\.(?:fast_|precise_)?(\w+?)\.((?:v\d+)?(?:f32|f16|bf16))", name)
    if not m:
        return None
    op, t = m.group(1), sig.ret
    elem, lanes = _scalar(t)
    if op in _LLVM_UNARY and len(sig.args) == 1:
        intr = f"llvm.{_LLVM_UNARY[op]}.{_suffix(t)}"
        return _def(sig, f"  %r = call {t} @{intr}({t} %a0)\n  ret {t} %r\n") + f"declare {t} @{intr}({t})\n"
    if op == "rsqrt" and len(sig.args) == 1:
        one = "1.0" if lanes == 1 else "splat (" + elem + " 1.0)"
        intr = f"llvm.sqrt.{_suffix(t)}"
        return _def(sig, f"  %s = call {t} @{intr}({t} %a0)\n  %r = fdiv {t} {one}, %s\n  ret {t} %r\n") + (
            f"declare {t} @{intr}({t})\n"
        )
    if op in _LLVM_BINARY and len(sig.args) == 2:
        intr = f"llvm.{_LLVM_BINARY[op]}.{_suffix(t)}"
        return (
            _def(sig, f"  %r = call {t} @{intr}({t} %a0, {t} %a1)\n  ret {t} %r\n") + f"declare {t} @{intr}({t}, {t})\n"
        )
    if op == "fma" and len(sig.args) == 3:
        intr = f"llvm.fma.{_suffix(t)}"
        return _def(sig, f"  %r = call {t} @{intr}({t} %a0, {t} %a1, {t} %a2)\n  ret {t} %r\n") + (
            f"declare {t} @{intr}({t}, {t}, {t})\n"
        )
    if lanes == 1 and op in _LIBM_UNARY and len(sig.args) == 1:
        return _through_float(sig, f"{op}f", 1)
    if lanes == 1 and op in _LIBM_BINARY and len(sig.args) == 2:
        return _through_float(sig, f"{op}f", 2)
    return None


# ---------------------------------------------------------------- dispatch --
def define(sig: Signature, file_sym: str) -> str | None:
    """The definition of intrinsic `sig`, or None where the executor has none."""
    name = sig.name
    if name in ("air.wg.barrier", "air.simdgroup.barrier"):
        return _barrier(sig, file_sym)
    if name in ("air.simd_any", "air.simd_all"):
        return _collective_bool(sig, "or" if name == "air.simd_any" else "and", file_sym)
    if name.startswith("air.simdgroup_matrix_8x8_multiply_accumulate."):
        return _mma(sig, file_sym)
    m = re.fullmatch(r"air\.simd_(\w+?)\.(?:([su])\.)?(v\d+)?(f32|f16|bf16|i\d+)", name)
    if m and m.group(1) in OPS:
        return _collective(sig, m.group(1), m.group(2) or "s", file_sym)
    m = re.fullmatch(r"air\.quad_(\w+?)\.(?:([su])\.)?(f32|f16|bf16|i\d+)", name)
    if m and m.group(1) in _QUAD_OPS and len(sig.args) == 1:
        return _quad(sig, m.group(1), m.group(2) or "s", file_sym)
    if re.fullmatch(r"air\.is_uniform\.(i1|i8|i16|i32|f32)", name) and len(sig.args) == 1 and sig.ret == "i1":
        return _is_uniform(sig, file_sym)
    return _pure(sig)
