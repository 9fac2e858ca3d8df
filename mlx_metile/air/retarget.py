"""AIR -> x86-64: the LLVM assembly of an AIR module (llvm-dis 19's output) rewritten so that the
host's LLVM compiles it, plus the emulator's thread entry.

- target triple and datalayout become x86-64 Linux's; Apple's datalayout agrees with it on every
  type AIR kernels use (scalars, pointers, vectors up to 1024 bits take their natural alignment);
- address spaces go: device, constant, threadgroup and thread memory are all host memory, and the
  emulator's runtime tells them apart by address (threadgroup variables are placed in the
  `metile_tg` section, which the runtime poisons per threadgroup and checks);
- function constants become constants of the values the caller set, so that the optimizer folds them;
- every defined function becomes internal and is instrumented by ThreadSanitizer's pass, whose
  callbacks the emulator's runtime defines: each load and store of the kernel is checked against
  the bound buffers and threadgroup memory;
- calls of intrinsics that meet other lanes or threads gain their call site (the disassembly's line);
- `air.*` intrinsics are defined (intrinsics.py); `metile_thread_entry` reads the binding table and
  the thread's position from the runtime's metile_thread_ctx (emu_abi.h) and calls the kernel.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Mapping

from . import intrinsics
from .errors import AirError
from .lines import add_line_table
from .module import Kernel, Param, declarations

X86_TRIPLE = "x86_64-unknown-linux-gnu"
X86_DATALAYOUT = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
# the emu_abi.h version whose metile_thread_ctx layout _CTX_TYPE spells out: a runtime of another
# version refuses these objects ("built for another emulator ABI") rather than misreading them
EMU_ABI_VERSION = 1

# metile_thread_ctx (emu_abi.h) field numbers
_CTX_TYPE = "{ ptr, ptr, [3 x i32], [3 x i32], [3 x i32], [3 x i32], [3 x i32], [3 x i32], i32, i32, i32, i32, i32 }"
_CTX_FIELD = {
    "thread_position_in_grid": 2,
    "threadgroup_position_in_grid": 3,
    "thread_position_in_threadgroup": 4,
    "threads_per_threadgroup": 5,
    "threadgroups_per_grid": 6,
    "threads_per_grid": 7,
    "thread_index_in_threadgroup": 8,
    "thread_index_in_simdgroup": 9,
    "simdgroup_index_in_threadgroup": 10,
    "threads_per_simdgroup": 11,
    "thread_execution_width": 11,
    "simdgroups_per_threadgroup": 12,
}

ConstantValue = bool | int | float


def _constant_literal(ctype: str, llvm_type: str, value: ConstantValue, name: str) -> str:
    if ctype == "bool":
        if not isinstance(value, (bool, int)) or value not in (0, 1):
            raise AirError(f"function constant {name!r} is a bool; got {value!r}")
        return str(int(value))
    if ctype in ("float", "half", "bfloat"):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise AirError(f"function constant {name!r} is a {ctype}; got {value!r}")
        v = float(value)
        if ctype == "float":
            if math.isfinite(v) and abs(v) > 3.4028234663852886e38:
                raise AirError(f"function constant {name!r}: {value!r} overflows a float")
            v = struct.unpack("<f", struct.pack("<f", v))[0]
            return "0x{:016X}".format(struct.unpack("<Q", struct.pack("<d", v))[0])
        if ctype == "half":
            return "0xH{:04X}".format(struct.unpack("<H", struct.pack("<e", v))[0])
        bits = struct.unpack("<I", struct.pack("<f", v))[0]
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
        return f"0xR{bits:04X}"
    bits = int(re.sub(r"\D", "", llvm_type) or 0)
    if not isinstance(value, int) or isinstance(value, bool):
        raise AirError(f"function constant {name!r} is a {ctype}; got {value!r}")
    unsigned = ctype.startswith("u")
    lo, hi = (0, 2**bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if not lo <= value <= hi:
        raise AirError(f"function constant {name!r} ({ctype}) must be in [{lo}, {hi}], got {value}")
    return str(value - 2**bits if unsigned and value >= 2 ** (bits - 1) else value)


def resolve_constants(kernel: Kernel, given: Mapping[str | int, ConstantValue]) -> dict[str, ConstantValue]:
    """{name: value} for every function constant of the kernel, from values given by name or index."""
    by_index = {c.index: c for c in kernel.constants}
    by_name = {c.name: c for c in kernel.constants}
    out: dict[str, ConstantValue] = {}
    for key, value in given.items():
        c = by_name.get(key) if isinstance(key, str) else by_index.get(key)
        if c is None:
            known = ", ".join(f"{c.name} ({c.index})" for c in kernel.constants) or "none"
            raise AirError(f"kernel {kernel.name!r} has no function constant {key!r}; it has: {known}")
        if c.name in out:
            raise AirError(f"function constant {c.name!r} is given twice (by name and by index)")
        out[c.name] = value
    missing = [f"{c.name} ({c.type}, index {c.index})" for c in kernel.constants if c.name not in out]
    if missing:
        raise AirError(f"kernel {kernel.name!r}: function constants not set: {', '.join(missing)}")
    return out


def _set_constants(lines: list[str], kernel: Kernel, values: Mapping[str, ConstantValue]) -> None:
    wanted = {c.symbol: c for c in kernel.constants}
    found = set()
    for i, line in enumerate(lines):
        m = re.match(
            r'^@("?[^\s=]+"?) = (.*?)externally_initialized constant (\S+) undef(, section "[^"]*")?(.*)$', line
        )
        if not m or m.group(1).strip('"') not in wanted:
            continue
        c = wanted[m.group(1).strip('"')]
        lit = _constant_literal(c.type, m.group(3), values[c.name], c.name)
        lines[i] = f"@{m.group(1)} = {m.group(2)}constant {m.group(3)} {lit}{m.group(5)}"
        found.add(c.symbol)
    for sym, c in wanted.items():
        if sym not in found:
            raise AirError(f"function constant {c.name!r}: its global @{sym} is not an externally initialized constant")


def _site_calls(lines: list[str], names: set[str]) -> None:
    """Pass the call's line (1-based, in the original disassembly) to intrinsics that take a site."""
    if not names:
        return
    pat = re.compile(r"@(" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) + r")\(")
    for i, line in enumerate(lines):
        if line.startswith(("declare", "define")) or "@air." not in line:
            continue
        lines[i] = pat.sub(lambda m, n=i + 1: f"@{m.group(1)}(i32 {n}, ", line)
        # an intrinsic taking no other argument: "(i32 N, )" -> "(i32 N)"
        lines[i] = re.sub(r"\(i32 (\d+), \)", r"(i32 \1)", lines[i])


def _remangle(text: str) -> str:
    """Address spaces leave LLVM intrinsics' names: llvm.memcpy.p3.p1.i64 -> llvm.memcpy.p0.p0.i64."""
    return re.sub(r"@llvm\.[\w.]+", lambda m: re.sub(r"\.p\d+(?=\.|$)", ".p0", m.group(0)), text)


def _entry(kernel: Kernel, kernel_symbol: str) -> str:
    out = [f"%metile.ctx = type {_CTX_TYPE}", "", "define void @metile_thread_entry(ptr %c) {"]
    out.append("  %bt.p = getelementptr %metile.ctx, ptr %c, i32 0, i32 0\n  %bt = load ptr, ptr %bt.p")
    out.append("  %tt.p = getelementptr %metile.ctx, ptr %c, i32 0, i32 1\n  %tt = load ptr, ptr %tt.p")
    args = []
    for p in kernel.params:
        v = f"%p{p.position}"
        if p.kind in ("buffer", "threadgroup"):
            table = "%bt" if p.kind == "buffer" else "%tt"
            out.append(f"  {v}.s = getelementptr ptr, ptr {table}, i64 {p.index}\n  {v} = load ptr, ptr {v}.s")
            args.append(f"ptr {v}")
        else:
            out += _position(p, v)
            args.append(f"{p.llvm_type} {v}")
    out.append(f"  call void @{kernel_symbol}({', '.join(args)})\n  ret void\n}}")
    return "\n".join(out) + "\n"


# quad-groups are 4 consecutive threads of a threadgroup: derived from the thread's index
_QUAD = {
    "quadgroup_index_in_threadgroup": "udiv",
    "thread_index_in_quadgroup": "urem",
    "quadgroups_per_threadgroup": "count",
}


def _quad(p: Param, v: str) -> list[str]:
    if p.llvm_type not in ("i32", "i16"):
        raise AirError(f"parameter {p.name!r} ({p.attribute}) has type {p.llvm_type}, which Metal does not give it")
    op = _QUAD[p.attribute]
    out = []
    if op == "count":  # the threadgroup's threads / 4, rounded up
        for a in range(3):
            out.append(f"  {v}.n{a}.p = getelementptr %metile.ctx, ptr %c, i32 0, i32 5, i32 {a}")
            out.append(f"  {v}.n{a} = load i32, ptr {v}.n{a}.p")
        out.append(f"  {v}.xy = mul i32 {v}.n0, {v}.n1\n  {v}.t = mul i32 {v}.xy, {v}.n2")
        out.append(f"  {v}.t3 = add i32 {v}.t, 3\n  {v}.r = udiv i32 {v}.t3, 4")
    else:
        out.append(f"  {v}.p = getelementptr %metile.ctx, ptr %c, i32 0, i32 8\n  {v}.i = load i32, ptr {v}.p")
        out.append(f"  {v}.r = {op} i32 {v}.i, 4")
    out.append(f"  {v} = trunc i32 {v}.r to i16" if p.llvm_type == "i16" else f"  {v} = add i32 {v}.r, 0")
    return out


def _position(p: Param, v: str) -> list[str]:
    if p.attribute in _QUAD:
        return _quad(p, v)
    field = _CTX_FIELD[p.attribute]
    m = re.fullmatch(r"<(\d+) x i(\d+)>|i(\d+)", p.llvm_type)
    if not m:
        raise AirError(f"parameter {p.name!r} ({p.attribute}) has type {p.llvm_type}; expected integers")
    lanes = int(m.group(1)) if m.group(1) else 1
    bits = int(m.group(2) or m.group(3))
    vector = field <= 7
    if (not vector and lanes != 1) or lanes > 3 or bits not in (16, 32):
        raise AirError(f"parameter {p.name!r} ({p.attribute}) has type {p.llvm_type}, which Metal does not give it")
    out, comps = [], []
    for a in range(lanes):
        idx = f"i32 0, i32 {field}, i32 {a}" if vector else f"i32 0, i32 {field}"
        out.append(f"  {v}.{a}.p = getelementptr %metile.ctx, ptr %c, {idx}\n  {v}.{a} = load i32, ptr {v}.{a}.p")
        comp = f"{v}.{a}"
        if bits == 16:
            out.append(f"  {v}.{a}.t = trunc i32 {comp} to i16")
            comp += ".t"
        comps.append(comp)
    if lanes == 1:
        out.append(f"  {v} = add i{bits} {comps[0]}, 0")
        return out
    prev = "poison"
    for a, comp in enumerate(comps):
        name = v if a == lanes - 1 else f"{v}.v{a}"
        out.append(f"  {name} = insertelement {p.llvm_type} {prev}, i{bits} {comp}, i64 {a}")
        prev = name
    return out


def retarget(
    ll: str, kernel: Kernel, constants: Mapping[str, ConstantValue], source_name: str, source_dir: str = "."
) -> str:
    """The x86-64 module running `kernel` of the AIR module `ll` with `constants` set; its line
    table points into `source_dir/source_name` (where the build keeps `ll`)."""
    decls = declarations(ll)
    air = {n: d for n, d in decls.items() if n.startswith("air.")}
    file_sym = "@metile.air.file"
    definitions, extra_decls, unsupported = [], [], []
    for name, line in sorted(air.items()):
        body = intrinsics.define(intrinsics.parse_declare(line), file_sym)
        if body is None:
            unsupported.append(name)
        else:
            definitions.append(body)
    defined = {n for n in air if n not in unsupported}
    reach = _reachable(ll, kernel.name)
    unsupported = [n for n in unsupported if n in reach]
    if unsupported:
        raise AirError(
            f"kernel {kernel.name!r} calls AIR intrinsics the CPU executor does not implement: {', '.join(unsupported)}"
        )
    lines = ll.split("\n")
    _set_constants(lines, kernel, constants)
    _site_calls(lines, {n for n in defined if intrinsics.takes_site(n)})
    add_line_table(lines, source_name, source_dir)
    kept = []
    for line in lines:
        if line.startswith("target triple"):
            kept.append(f'target triple = "{X86_TRIPLE}"')
        elif line.startswith("target datalayout"):
            kept.append(f'target datalayout = "{X86_DATALAYOUT}"')
        elif line.startswith("declare") and re.search(r"@\"?air\.", line) and _declared(line) in defined:
            continue  # defined below
        elif line.startswith("!air.kernel = "):
            continue  # would keep the other kernels of the module (and what they call) alive
        elif line.startswith("@") and re.search(r"\baddrspace\(3\) global\b", line):
            # threadgroup variables: one section the runtime knows (emu_abi.h tg_static_lo/hi)
            line = re.sub(r', section "[^"]*"', "", line)
            line = re.sub(r", align \d+", "", line)
            kept.append(line + ', section "metile_tg", align 16')
        elif line.startswith("define "):
            line = re.sub(
                r"^define (?:(?:weak_odr|weak|linkonce_odr|linkonce|external|dso_local|internal|private|available_externally) )*",
                "define internal ",
                line,
            )
            kept.append(line)
        else:
            kept.append(line)
    text = "\n".join(kept)
    text = re.sub(r" addrspace\(\d+\)", "", text)
    text = re.sub(r"\baddrspacecast\b", "bitcast", text)
    text = re.sub(r' "air-buffer-no-alias"', "", text)
    text = _remangle(text)
    text = _dedupe_declares(text)
    text = _instrument_attributes(text)
    present = set(declarations(text)) | set(re.findall(r"^define [^\n]*?@\"?([\w.$]+)\"?\(", text, re.M))
    for d in definitions:
        for line in d.split("\n"):
            m = re.match(r"declare [^@]*@([\w.$]+)\(", line)
            if m:
                if m.group(1) in present:
                    continue
                present.add(m.group(1))
            extra_decls.append(line)
    name_bytes = kernel.name.encode() + b"\0"
    file_bytes = source_name.encode() + b"\0"
    tail = [
        "",
        "; ---- the executor's additions (mlx_metile/air/retarget.py)",
        intrinsics.RUNTIME_DECLS,
        f'{file_sym} = private unnamed_addr constant [{len(file_bytes)} x i8] c"{_c_string(file_bytes)}"',
        f'@metile.kernel.name = private unnamed_addr constant [{len(name_bytes)} x i8] c"{_c_string(name_bytes)}"',
        "@__start_metile_tg = extern_weak hidden global [0 x i8]",
        "@__stop_metile_tg = extern_weak hidden global [0 x i8]",
        f"@metile_kernel = constant {{ i32, ptr, ptr, ptr, ptr }} {{ i32 {EMU_ABI_VERSION}, ptr @metile_thread_entry, "
        "ptr @__start_metile_tg, ptr @__stop_metile_tg, ptr @metile.kernel.name }",
        "",
        "\n".join(extra_decls),
        _entry(kernel, kernel.name),
    ]
    return text + "\n" + "\n".join(tail) + "\n"


def _declared(line: str) -> str:
    m = re.match(r"declare [^\n]*?@\"?([\w.$]+)\"?\(", line)
    return m.group(1) if m else ""


def _reachable(ll: str, root: str) -> set[str]:
    """Functions `root` calls, directly or through other functions of the module."""
    calls: dict[str, set[str]] = {}
    current = None
    for line in ll.split("\n"):
        d = re.match(r"define [^@]*@\"?([\w.$]+)\"?\(", line)
        if d:
            current = d.group(1)
            calls[current] = set()
        elif line.startswith("}"):
            current = None
        elif current:
            calls[current].update(re.findall(r"@\"?([\w.$]+)\"?\(", line))
    seen, todo = set(), [root]
    while todo:
        f = todo.pop()
        for g in calls.get(f, ()):
            if g not in seen:
                seen.add(g)
                todo.append(g)
    return seen


def _c_string(b: bytes) -> str:
    return "".join(chr(c) if 32 <= c < 127 and c not in (34, 92) else f"\\{c:02X}" for c in b)


def _dedupe_declares(text: str) -> str:
    seen, out = set(), []
    for line in text.split("\n"):
        m = re.match(r"declare [^\n]*?@(\"?[\w.$]+\"?)\(", line)
        if m:
            if m.group(1) in seen:
                continue
            seen.add(m.group(1))
        out.append(line)
    return "\n".join(out)


def _instrument_attributes(text: str) -> str:
    """sanitize_thread on each defined function's attribute group (or inline where it has none)."""
    groups = set()
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if not line.startswith("define "):
            continue
        m = re.search(r"\) ((?:[\w]+ )*)#(\d+)\b", line)
        if m:
            groups.add(m.group(2))
        else:
            lines[i] = re.sub(r"\)\s*\{\s*$", ") sanitize_thread {", line)
    for i, line in enumerate(lines):
        m = re.match(r"^attributes #(\d+) = \{ (.*) \}$", line)
        if m and m.group(1) in groups:
            lines[i] = f"attributes #{m.group(1)} = {{ {m.group(2)} sanitize_thread }}"
    return "\n".join(lines)
