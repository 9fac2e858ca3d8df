"""MSL source -> C++ for the emulator, plus the kernel's binding signature.

The rewrite keeps every line where it was (and, for preprocessed text, every line marker), so
diagnostics, __FILE__/__LINE__ and debug info point at the MSL the user wrote. What it does that
the shim's macros cannot:

- tells threadgroup *storage* from threadgroup *pointers*;
- turns `float4(...)` / `vec<T, N>(...)` constructor calls into calls the shim implements;
- reads the [[attributes]] of the kernel's parameters (then blanks every attribute);
- finds the kernel: a `kernel void f(...)` / `[[kernel]] void f(...)` definition, or an explicit
  instantiation `template [[host_name("name")]] [[kernel]] decltype(f<...>) f<...>;` of a template
  kernel (how MLX names its kernels);
- specialises function constants (function_constants.py), and drops parameters whose
  `[[function_constant(flag)]]` is false;
- reconciles Metal's address spaces with the compiled build's one memory (address_spaces.py);
- types floating literals as MSL does.

The text helpers are in source_text.py. docs/NAX.md lists the Metal this takes beyond the basics.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .address_spaces import (
    array_parameters,
    collapse_overloads,
    collapse_specializations,
    rewrite_threadgroup,
    strip_this_address_spaces,
)
from .function_constants import UNSET_CONSTANT, FunctionConstant, specialize_constants
from .preprocess import PreprocessError, needs_preprocessing, preprocess
from .source_text import Locator, TranslateError, blank, matching, matching_angle, split_top_level, strip_comments

__all__ = ["UNSET_CONSTANT", "FunctionConstant", "Param", "TranslateError", "Translation", "entry_point", "translate"]

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
_VECTOR_CTOR = re.compile(
    r"(?<![\w.])(?:metal\s*::\s*)?((?:float|half|bfloat|int|uint|short|ushort|char|uchar|long|ulong|bool)[234])\s*\("
)
_VEC_TEMPLATE_CTOR = re.compile(r"(?<![\w.])(?:metal\s*::\s*)?vec\s*<([^<>;(){}]*)>\s*\(")
_KERNEL_DEF = re.compile(r"(?:\bkernel|\[\[\s*kernel\b[^\]]*\]\])\s+void\s+(\w+)\s*\(")
_INSTANTIATION = re.compile(
    r"\btemplate\s*\[\[\s*host_name\s*\(\s*((?:\"[^\"]*\"\s*)+)\)\s*\]\]\s*\[\[\s*kernel\s*\]\]\s*"
    r"decltype\s*\(\s*(\w+)\s*<"
)
_ADDRESS_WORDS = {"device", "constant", "threadgroup", "thread", "const", "volatile"}


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
    condition: str | None = None  # the function constant the parameter exists under
    active: bool = True  # False where that function constant is false: nothing is bound


@dataclass(frozen=True)
class Translation:
    name: str
    filename: str
    cpp: str  # kernel source as C++, no entry point
    params: tuple[Param, ...]
    function: str = ""  # the C++ function the entry point calls: `k` or `gemm<half, 64>`
    constants: tuple[tuple[str, int, str], ...] = field(default=())  # (name, index, value) specialised

    def __post_init__(self) -> None:
        if not self.function:
            object.__setattr__(self, "function", self.name)

    def buffer(self, index: int) -> Param | None:
        for p in self.params:
            if p.kind == "buffer" and p.index == index:
                return p
        return None


def _attribute_list(text: str) -> list[str]:
    attrs: list[str] = []
    for group in re.findall(r"\[\[(.*?)\]\]", text):
        attrs.extend(a.strip() for a in split_top_level(group) if a.strip())
    return attrs


def _parse_param(text: str, where: str) -> Param:
    attrs = _attribute_list(text)
    decl = re.sub(r"\[\[.*?\]\]", " ", text).strip()
    m = re.search(r"(\w+)\s*$", decl)
    if not m or not attrs:
        raise TranslateError(
            f"{where}: kernel parameter `{decl}` needs an attribute such as [[buffer(n)]] or [[thread_position_in_grid]]"
        )
    name = m.group(1)
    ctype = decl[: m.start()].strip()
    words = re.findall(r"\w+", ctype)
    space = next((w for w in words if w in ("device", "constant", "threadgroup")), "thread")
    elem = " ".join(w for w in words if w not in _ADDRESS_WORDS)
    condition = None
    rest = []
    for a in attrs:
        fc = re.fullmatch(r"function_constant\s*\(\s*(\w+)\s*\)", a)
        if fc:
            condition = fc.group(1)
        else:
            rest.append(a)
    if not rest:
        raise TranslateError(f"{where}: kernel parameter `{name}` needs a binding attribute such as [[buffer(n)]]")
    attr = rest[0]
    am = re.fullmatch(r"(buffer|threadgroup)\s*\(\s*(\d+)\s*\)", attr)
    if am:
        index = int(am.group(2))
        if index > MAX_BUFFER_INDEX:
            raise TranslateError(f"{where}: [[{attr}]] on `{name}`: Metal allows indices 0..{MAX_BUFFER_INDEX}")
        return Param(name, am.group(1), index, am.group(1), ctype, elem, "*" in ctype, "&" in ctype, space, condition)
    if attr in POSITION_ARRAYS or attr in POSITION_SCALARS:
        return Param(name, "position", -1, attr, ctype, elem, False, False, space, condition)
    raise TranslateError(f"{where}: unsupported kernel parameter attribute [[{attr}]] on `{name}`")


def _vector_constructors(src: str) -> str:
    """`float4(...)` and `vec<T, N>(...)` -> calls of the shim's constructor (not after `operator`)."""

    def ctor(m: re.Match) -> str:
        if re.search(r"\boperator\s*$", src[max(0, m.start() - 16) : m.start()]):
            return m.group()
        return f"__metile::make<{m.group(1)}>("

    def vec_ctor(m: re.Match) -> str:
        if re.search(r"\boperator\s*$", src[max(0, m.start() - 16) : m.start()]):
            return m.group()
        return f"__metile::make<vec<{m.group(1)}>>("

    src = _VECTOR_CTOR.sub(ctor, src)
    return _VEC_TEMPLATE_CTOR.sub(vec_ctor, src)


_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'')
_FLOAT_LITERAL = re.compile(r"(?<![\w.])((?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)(h|H|bf|BF|f|F)?(?![\w.])")


def _float_literals(src: str) -> str:
    """Floating literals as MSL types them: no suffix is float (there is no double), `h` half,
    `bf` bfloat. String and character literals are left alone."""

    def literal(m: re.Match) -> str:
        digits, suffix = m.group(1), (m.group(2) or "").lower()
        if suffix == "f":
            return m.group()
        if suffix == "h":
            return f"((half){digits}f)"
        if suffix == "bf":
            return f"((bfloat){digits}f)"
        return f"{digits}f"

    out, last = [], 0
    for m in _STRING.finditer(src):
        out.append(_FLOAT_LITERAL.sub(literal, src[last : m.start()]))
        out.append(m.group())
        last = m.end()
    out.append(_FLOAT_LITERAL.sub(literal, src[last:]))
    return "".join(out)


def _find_kernel(src: str, name: str, loc: Locator) -> tuple[re.Match, str]:
    """The definition of kernel `name` and the C++ function the entry point calls."""
    for inst in _INSTANTIATION.finditer(src):
        host = "".join(re.findall(r'"([^"]*)"', inst.group(1)))
        if host != name:
            continue
        func = inst.group(2)
        open_angle = inst.end() - 1
        close = matching_angle(src, open_angle)
        targs = " ".join(src[open_angle + 1 : close].split())
        defs = [k for k in _KERNEL_DEF.finditer(src) if k.group(1) == func and k.start() < inst.start()]
        if not defs:
            raise TranslateError(f"{loc.at(inst.start())}: `{name}` instantiates `{func}`, which is no kernel template")
        return defs[-1], f"{func}<{targs}>"
    instantiated = ["".join(re.findall(r'"([^"]*)"', i.group(1))) for i in _INSTANTIATION.finditer(src)]
    kernels = [k for k in _KERNEL_DEF.finditer(src) if k.group(1) == name]
    if kernels:
        if re.search(r"\btemplate\s*<[^;{}]*>\s*$", src[max(0, kernels[0].start() - 4000) : kernels[0].start()]):
            listed = ", ".join(instantiated) or "none in the source"
            raise TranslateError(
                f"{loc.at(kernels[0].start())}: `{name}` is a kernel template: name one of its instantiations "
                f"([[host_name]]s: {listed})"
            )
        return kernels[0], name
    found = [k.group(1) for k in _KERNEL_DEF.finditer(src)] + instantiated
    listed = ", ".join(found[:20]) + (", ..." if len(found) > 20 else "") if found else "none"
    raise TranslateError(f"no kernel named {name!r} in the source (kernels found: {listed})")


def translate(
    source: str,
    name: str,
    *,
    include_dirs: Sequence[str | os.PathLike] = (),
    function_constants: Mapping[int | str, FunctionConstant] | None = None,
) -> Translation:
    """Translate kernel `name` of `source`. `include_dirs` are searched for the source's own
    headers; `function_constants` give values (by index or name) to its function constants."""
    filename = f"{name}.metal"
    if needs_preprocessing(source, include_dirs):
        try:
            source = preprocess(source, filename, include_dirs)
        except PreprocessError as e:
            raise TranslateError(str(e)) from None
    src = strip_comments(source)
    loc = Locator(src, filename)
    src, values, constants = specialize_constants(src, loc, function_constants or {})
    loc = Locator(src, filename)
    match, function = _find_kernel(src, name, loc)
    open_pos = match.end() - 1
    close_pos = matching(src, open_pos)
    where = loc.at(open_pos)
    raw_params = [p for p in split_top_level(src[open_pos + 1 : close_pos]) if p.strip()]
    params = [_parse_param(text, where) for text in raw_params]
    seen = set()
    for p in params:
        if p.kind != "position":
            key = (p.kind, p.index)
            if key in seen:
                raise TranslateError(f"{where}: two parameters bound to [[{p.kind}({p.index})]]")
            seen.add(key)
        if p.condition is not None and p.condition not in values:
            raise TranslateError(
                f"{where}: parameter `{p.name}` exists under [[function_constant({p.condition})]], "
                "which is no function constant of the source"
            )

    # Attributes are read; blank them all (clang would only warn, but an
    # attribute like [[buffer(0)]] must not reach the threadgroup rewrite).
    src = re.sub(r"\[\[.*?\]\]", lambda m: blank(m.group()), src)
    src = strip_this_address_spaces(src)
    src = collapse_specializations(src, loc)
    loc = Locator(src, filename)
    src = collapse_overloads(src, loc)
    src = array_parameters(_float_literals(src))
    loc = Locator(src, filename)
    src = rewrite_threadgroup(src, loc)
    src = _vector_constructors(src)
    params = [
        Param(
            p.name,
            p.kind,
            p.index,
            p.attribute,
            rewrite_threadgroup(p.ctype, None) if p.kind == "threadgroup" else p.ctype,
            p.elem,
            p.is_pointer,
            p.is_reference,
            p.address_space,
            p.condition,
            p.condition is None or values[p.condition] != "false",
        )
        for p in params
    ]
    cpp = src if re.match(r'# 1 "', src) else f'#line 1 "{filename}"\n{src}'
    if not cpp.endswith("\n"):
        cpp += "\n"
    return Translation(name, filename, cpp, tuple(params), function, constants)


def _argument(i: int, p: Param) -> str:
    arg = f"__metile_sig::arg<{i}>"
    if p.kind == "position":
        if p.attribute in POSITION_ARRAYS:
            return f"__metile::bind_position<{arg}>(c->{p.attribute})"
        return f"__metile::bind_scalar<{arg}>(c->{POSITION_SCALARS[p.attribute]})"
    table = "c->buffers" if p.kind == "buffer" else "c->tg_buffers"
    return f"__metile::bind_buffer<{arg}>({table}[{p.index}])"


def entry_point(t: Translation) -> str:
    """C++ appended to the kernel: the thread entry and the kernel descriptor."""
    args = ",\n      ".join(_argument(i, p) for i, p in enumerate(t.params))
    return f"""
#line 1 "<metile-entry>"
#include "emu_abi.h"
extern "C" __attribute__((no_sanitize("thread"))) void metile_thread_entry(const metile_thread_ctx* c) {{
  using __metile_sig = __metile::signature<decltype({t.function})>;
  {t.function}(
      {args});
}}
extern "C" char __start_metile_tg[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_metile_tg[] __attribute__((weak, visibility("hidden")));
extern "C" const metile_kernel_info metile_kernel = {{
    METILE_EMU_ABI_VERSION, &metile_thread_entry, __start_metile_tg, __stop_metile_tg, "{t.name}"}};
"""
