"""MSL source -> C++ for the emulator, plus the kernel's binding signature.

The rewrite keeps every line where it was, so diagnostics, __FILE__/__LINE__
and debug info point at the MSL the user wrote. It does three things the
shim's macros cannot: tells threadgroup *storage* from threadgroup *pointers*,
turns `float4(...)` constructor calls into calls the shim implements, and
reads the [[attributes]] of the kernel's parameters (then blanks them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_BUFFER_INDEX = 30

POSITION_ARRAYS = {
    "thread_position_in_grid",
    "threadgroup_position_in_grid",
    "thread_position_in_threadgroup",
    "threads_per_threadgroup",
    "threadgroups_per_grid",
    "threads_per_grid",
}
POSITION_SCALARS = {
    "thread_index_in_threadgroup": "thread_index_in_threadgroup",
    "thread_index_in_simdgroup": "thread_index_in_simdgroup",
    "simdgroup_index_in_threadgroup": "simdgroup_index_in_threadgroup",
    "threads_per_simdgroup": "threads_per_simdgroup",
    "thread_execution_width": "threads_per_simdgroup",
    "simdgroups_per_threadgroup": "simdgroups_per_threadgroup",
}
_VECTOR_CTOR = re.compile(r"\b((?:float|half|bfloat|int|uint|short|ushort|char|uchar|long|ulong|bool)[234])\s*\(")
_VEC_TEMPLATE_CTOR = re.compile(r"\bvec\s*<([^<>;(){}]*)>\s*\(")
_KERNEL = re.compile(r"(?:\bkernel|\[\[\s*kernel\s*\]\])\s+void\s+(\w+)\s*\(")
_ADDRESS_WORDS = {"device", "constant", "threadgroup", "thread", "const", "volatile"}


class TranslateError(ValueError):
    """The source uses something the emulator rejects; the message has file:line."""


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # "buffer" | "threadgroup" | "position"
    index: int  # buffer / threadgroup index, or -1
    attribute: str  # the Metal attribute name
    ctype: str  # parameter type as written (after the rewrite)
    elem: str  # element type with address space and * / & removed
    is_pointer: bool
    is_reference: bool
    address_space: str  # device | constant | threadgroup | thread


@dataclass(frozen=True)
class Translation:
    name: str
    filename: str
    cpp: str  # kernel source as C++, no entry point
    params: tuple[Param, ...]

    def buffer(self, index: int) -> Param | None:
        for p in self.params:
            if p.kind == "buffer" and p.index == index:
                return p
        return None


def _blank(text: str) -> str:
    return re.sub(r"[^\n]", " ", text)


def strip_comments(src: str) -> str:
    out, i, n = [], 0, len(src)
    while i < n:
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(_blank(src[i:j]))
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(_blank(src[i:j]))
            i = j
        elif src[i] == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append(src[i : j + 1])
            i = j + 1
        else:
            out.append(src[i])
            i += 1
    return "".join(out)


def _line_of(src: str, pos: int) -> int:
    return src.count("\n", 0, pos) + 1


def _split_top_level(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return parts


def _matching_paren(src: str, open_pos: int) -> int:
    depth = 0
    for i in range(open_pos, len(src)):
        if src[i] == "(":
            depth += 1
        elif src[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    raise TranslateError("unbalanced parentheses in the kernel signature")


def _parse_param(text: str, filename: str, line: int) -> Param:
    attrs = re.findall(r"\[\[(.*?)\]\]", text)
    decl = re.sub(r"\[\[.*?\]\]", " ", text).strip()
    m = re.search(r"(\w+)\s*$", decl)
    if not m or not attrs:
        raise TranslateError(
            f"{filename}:{line}: kernel parameter `{decl}` needs an attribute such as "
            "[[buffer(n)]] or [[thread_position_in_grid]]"
        )
    name = m.group(1)
    ctype = decl[: m.start()].strip()
    words = re.findall(r"\w+", ctype)
    space = next((w for w in words if w in ("device", "constant", "threadgroup")), "thread")
    elem = " ".join(w for w in words if w not in _ADDRESS_WORDS)
    attr = attrs[0].strip()
    am = re.fullmatch(r"(buffer|threadgroup)\s*\(\s*(\d+)\s*\)", attr)
    if am:
        index = int(am.group(2))
        if index > MAX_BUFFER_INDEX:
            raise TranslateError(
                f"{filename}:{line}: [[{attr}]] on `{name}`: Metal allows indices 0..{MAX_BUFFER_INDEX}"
            )
        return Param(name, am.group(1), index, am.group(1), ctype, elem, "*" in ctype, "&" in ctype, space)
    if attr in POSITION_ARRAYS or attr in POSITION_SCALARS:
        return Param(name, "position", -1, attr, ctype, elem, False, False, space)
    raise TranslateError(f"{filename}:{line}: unsupported kernel parameter attribute [[{attr}]] on `{name}`")


def _declared_names(declaration: str) -> list[str]:
    names = []
    for declarator in _split_top_level(declaration):
        bare = re.sub(r"\[[^\]]*\]", "", declarator)
        m = re.search(r"(\w+)\s*$", bare)
        if m:
            names.append(m.group(1))
    return names


def _rewrite_threadgroup(src: str, filename: str) -> str:
    """`threadgroup T x[n];` -> shared storage; `threadgroup T* p` -> a pointer.

    Storage is made to escape right after its declaration: the compiler then
    cannot assume a barrier (an opaque call) leaves it unchanged, which is
    what lets other threads' writes become visible after the barrier.
    """
    out, last = [], 0
    for m in re.finditer(r"\bthreadgroup\b", src):
        rest = src[m.end() :]
        stop = re.search(r"[;=),{]", rest)
        segment = rest[: stop.start()] if stop else rest
        out.append(src[last : m.start()])
        last = m.end()
        if "*" in segment or "&" in segment:
            out.append("METILE_TG_PTR")
            continue
        if stop and stop.group() == "=":
            raise TranslateError(
                f"{filename}:{_line_of(src, m.start())}: threadgroup variables cannot be "
                "initialised in their declaration (MSL rejects it); assign after declaring"
            )
        out.append("METILE_TG_STORAGE")
        if stop and stop.group() == ";":
            end = m.end() + stop.end()
            escapes = "".join(f" METILE_TG_ESCAPE({n});" for n in _declared_names(segment))
            out.append(src[m.end() : end] + escapes)
            last = end
    out.append(src[last:])
    return "".join(out)


def translate(source: str, name: str) -> Translation:
    filename = f"{name}.metal"
    src = strip_comments(source)
    kernels = list(_KERNEL.finditer(src))
    match = next((k for k in kernels if k.group(1) == name), None)
    if match is None:
        found = ", ".join(k.group(1) for k in kernels) or "none"
        raise TranslateError(f"no kernel named {name!r} in the source (kernels found: {found})")
    open_pos = match.end() - 1
    close_pos = _matching_paren(src, open_pos)
    line = _line_of(src, open_pos)
    raw_params = [p for p in _split_top_level(src[open_pos + 1 : close_pos]) if p.strip()]
    params = []
    for text in raw_params:
        p = _parse_param(text, filename, line)
        params.append(p)
    seen = set()
    for p in params:
        if p.kind != "position":
            key = (p.kind, p.index)
            if key in seen:
                raise TranslateError(f"{filename}:{line}: two parameters bound to [[{p.kind}({p.index})]]")
            seen.add(key)

    # Attributes are read; blank them all (clang would only warn, but an
    # attribute like [[buffer(0)]] must not reach the threadgroup rewrite).
    src = re.sub(r"\[\[.*?\]\]", lambda m: _blank(m.group()), src)
    src = _rewrite_threadgroup(src, filename)
    src = _VECTOR_CTOR.sub(r"__metile::make<\1>(", src)
    src = _VEC_TEMPLATE_CTOR.sub(r"__metile::make<vec<\1>>(", src)
    # Parameter types as rewritten (threadgroup -> METILE_TG_PTR).
    params = [
        Param(
            p.name,
            p.kind,
            p.index,
            p.attribute,
            _rewrite_threadgroup(p.ctype, filename) if p.kind == "threadgroup" else p.ctype,
            p.elem,
            p.is_pointer,
            p.is_reference,
            p.address_space,
        )
        for p in params
    ]
    cpp = f'#line 1 "{filename}"\n{src}\n'
    return Translation(name, filename, cpp, tuple(params))


def _argument(p: Param) -> str:
    if p.kind == "position":
        if p.attribute in POSITION_ARRAYS:
            n = int(p.elem[-1]) if p.elem[-1] in "23" else 1
            comps = ", ".join(f"c->{p.attribute}[{k}]" for k in range(n))
            return f"__metile::make<{p.elem}>({comps})" if n > 1 else f"({p.elem})c->{p.attribute}[0]"
        return f"({p.elem})c->{POSITION_SCALARS[p.attribute]}"
    table = "c->buffers" if p.kind == "buffer" else "c->tg_buffers"
    if p.is_reference:
        return f"*({p.ctype.replace('&', '*')}){table}[{p.index}]"
    if p.is_pointer:
        return f"({p.ctype}){table}[{p.index}]"
    return f"*({p.ctype}*){table}[{p.index}]"  # by-value buffer argument


def entry_point(t: Translation) -> str:
    """C++ appended to the kernel: the thread entry and the kernel descriptor."""
    args = ",\n      ".join(_argument(p) for p in t.params)
    return f"""
#line 1 "<metile-entry>"
#include "emu_abi.h"
extern "C" __attribute__((no_sanitize("thread"))) void metile_thread_entry(const metile_thread_ctx* c) {{
  {t.name}(
      {args});
}}
extern "C" char __start_metile_tg[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_metile_tg[] __attribute__((weak, visibility("hidden")));
extern "C" const metile_kernel_info metile_kernel = {{
    METILE_EMU_ABI_VERSION, &metile_thread_entry, __start_metile_tg, __stop_metile_tg, "{t.name}"}};
"""
