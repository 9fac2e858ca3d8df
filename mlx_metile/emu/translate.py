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
- specialises function constants (`constant T x [[function_constant(i)]];`) to given values, and
  drops parameters whose `[[function_constant(flag)]]` is false;
- keeps, in the compiled build, one of each set of partial specialisations that differ only in
  address spaces (`struct S<device T*>`, `struct S<threadgroup T*>`): there address spaces are one
  memory and those would be redefinitions; the lint build keeps them all.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .preprocess import PreprocessError, needs_preprocessing, preprocess

MAX_BUFFER_INDEX = 30
UNSET_CONSTANT = "metile_unset_function_constant_"

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
_FUNCTION_CONSTANT = re.compile(
    r"\bconstant\s+([A-Za-z_][\w:]*)\s+(\w+)\s*\[\[\s*function_constant\s*\(\s*(\d+)\s*\)\s*\]\]\s*;"
)
_SPECIALIZATION = re.compile(r"\btemplate\s*<([^<>]*)>\s*(struct|class)\s+(\w+)\s*<")
_LINEMARKER = re.compile(r'^#(?:line)?\s+(\d+)\s+"((?:[^"\\]|\\.)*)"[^\n]*$', re.M)
_ADDRESS_WORDS = {"device", "constant", "threadgroup", "thread", "const", "volatile"}
_SPACE_WORDS = re.compile(r"\b(device|threadgroup|thread)\b")

FunctionConstant = bool | int | float


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
        elif src[i] == "'" and i > 0 and (src[i - 1].isalnum() or src[i - 1] == "_"):
            out.append(src[i])  # a digit separator (1'000), not a character literal
            i += 1
        elif src[i] == "'":
            j = i + 1
            while j < n and src[j] != "'" and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            out.append(src[i : j + 1])
            i = j + 1
        else:
            out.append(src[i])
            i += 1
    return "".join(out)


class _Locator:
    """file:line of a position in the text, honouring line markers of preprocessed text."""

    def __init__(self, src: str, filename: str):
        self.src = src
        self.filename = filename
        self.marks = [(m.end(), int(m.group(1)), m.group(2)) for m in _LINEMARKER.finditer(src)]

    def where(self, pos: int) -> tuple[str, int]:
        base, line, name = 0, 1, self.filename
        for end, mline, mname in self.marks:
            if end > pos:
                break
            base, line, name = end + 1, mline, mname
        return name, line + self.src.count("\n", base, pos)

    def at(self, pos: int) -> str:
        name, line = self.where(pos)
        return f"{os.path.basename(name)}:{line}"


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


def _matching(src: str, open_pos: int, opening: str = "(", closing: str = ")") -> int:
    depth = 0
    for i in range(open_pos, len(src)):
        if src[i] == opening:
            depth += 1
        elif src[i] == closing:
            depth -= 1
            if depth == 0:
                return i
    raise TranslateError(f"unbalanced {opening}{closing} in the kernel source")


def _matching_angle(src: str, open_pos: int) -> int:
    """The `>` closing the template argument list opened at open_pos (parentheses nest)."""
    depth = 0
    i = open_pos
    while i < len(src):
        ch = src[i]
        if ch == "(":
            i = _matching(src, i) + 1
            continue
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise TranslateError("unbalanced <> in the kernel source")


def _attribute_list(text: str) -> list[str]:
    attrs: list[str] = []
    for group in re.findall(r"\[\[(.*?)\]\]", text):
        attrs.extend(a.strip() for a in _split_top_level(group) if a.strip())
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


def _declared_names(declaration: str) -> list[str]:
    names = []
    for declarator in _split_top_level(declaration):
        bare = re.sub(r"\[[^\]]*\]", "", declarator)
        m = re.search(r"(\w+)\s*$", bare)
        if m:
            names.append(m.group(1))
    return names


def _statement_end(src: str, pos: int) -> int:
    """Index of the `;` ending the declaration that continues at pos (brackets nest)."""
    depth = 0
    for i in range(pos, len(src)):
        ch = src[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == ";" and depth == 0:
            return i
    return len(src)


def _declarator_stop(src: str, pos: int) -> int:
    """Where the declaration after a `threadgroup` word stops being a type and name: the first
    `; = , { >` outside brackets, or a `)` / `]` closing one opened before it."""
    depth = angle = 0
    for i in range(pos, len(src)):
        ch = src[i]
        if ch in "([":
            depth += 1
        elif ch in ")]":
            if depth == 0:
                return i
            depth -= 1
        elif ch == "<" and depth == 0:
            angle += 1
        elif ch == ">" and depth == 0 and angle > 0:
            angle -= 1
        elif depth == 0 and angle == 0 and ch in ";=,{>":
            return i
    return len(src)


def _rewrite_threadgroup(src: str, loc: _Locator | None) -> str:
    """`threadgroup T x[n];` -> shared storage; `threadgroup T* p` (and `tensor<threadgroup T, ...>`)
    -> the address space of a pointer.

    Storage is made to escape right after its declaration: the compiler then
    cannot assume a barrier (an opaque call) leaves it unchanged, which is
    what lets other threads' writes become visible after the barrier.
    """
    out, last = [], 0
    for m in re.finditer(r"\bthreadgroup\b", src):
        if m.start() < last:
            continue
        stop_at = _declarator_stop(src, m.end())
        stop = src[stop_at] if stop_at < len(src) else ""
        segment = src[m.end() : stop_at]
        declarator = re.sub(r"\[[^\]]*\]", "", segment)
        out.append(src[last : m.start()])
        last = m.end()
        bare_type = re.fullmatch(r"\s*(?:(?:const|volatile)\s+)*[\w:]+(?:\s+(?:const|volatile))*\s*", segment)
        if "*" in declarator or "&" in declarator or (stop in (">", ",", ")") and bare_type):
            out.append("METILE_TG_PTR")
            continue
        if stop == "=":
            where = loc.at(m.start()) if loc else "?"
            raise TranslateError(
                f"{where}: threadgroup variables cannot be initialised in their declaration (MSL rejects it); "
                "assign after declaring"
            )
        out.append("METILE_TG_STORAGE")
        if stop in (";", ","):
            end = _statement_end(src, m.end())
            declaration = src[m.end() : end]
            if "=" in declaration:
                where = loc.at(m.start()) if loc else "?"
                raise TranslateError(
                    f"{where}: threadgroup variables cannot be initialised in their declaration (MSL rejects it); "
                    "assign after declaring"
                )
            escapes = "".join(f" METILE_TG_ESCAPE({n});" for n in _declared_names(declaration))
            out.append(declaration + ";" + escapes)
            last = end + 1
    out.append(src[last:])
    return "".join(out)


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


def _literal(value: FunctionConstant, ctype: str, where: str, name: str) -> str:
    if isinstance(value, bool) or ctype == "bool":
        if not isinstance(value, (bool, int)) or (not isinstance(value, bool) and value not in (0, 1)):
            raise TranslateError(f"{where}: function constant `{name}` is bool; got {value!r}")
        return "true" if value else "false"
    if isinstance(value, int):
        return f"({ctype})({value})"
    if isinstance(value, float):
        return f"({ctype})({float(value)!r}f)"
    raise TranslateError(f"{where}: function constant `{name}`: expected bool, int or float, got {value!r}")


def _specialize_constants(
    src: str, loc: _Locator, given: Mapping[int | str, FunctionConstant]
) -> tuple[str, dict[str, str], tuple[tuple[str, int, str], ...]]:
    """Program-scope function constants become constexpr values; returns the text, each constant's
    C++ value by name (bools as true/false), and the constants specialised."""
    declared = list(_FUNCTION_CONSTANT.finditer(src))
    by_name = {m.group(2): m for m in declared}
    by_index = {int(m.group(3)): m for m in declared}
    for key in given:
        if isinstance(key, bool) or not isinstance(key, (int, str)):
            raise TranslateError(f"function_constants: keys are indices or names, got {key!r}")
        if (isinstance(key, int) and key not in by_index) or (isinstance(key, str) and key not in by_name):
            known = ", ".join(f"{m.group(2)} ({m.group(3)})" for m in declared) or "none"
            raise TranslateError(f"function_constants: {key!r} is not declared in the source (declared: {known})")
    values: dict[str, str] = {}
    done = []
    out, last = [], 0
    for m in declared:
        ctype, name, index = m.group(1), m.group(2), int(m.group(3))
        where = loc.at(m.start())
        if name in given and index in given and given[name] != given[index]:
            raise TranslateError(
                f"function_constants: `{name}` given twice ({index} and {name!r}) with different values"
            )
        value = given.get(index, given.get(name))
        if value is None:
            # Unset: fine unless the kernel uses it. A use links to this symbol, which nothing
            # defines; the build reports it by name (build.py, UNSET_CONSTANT).
            text = f'extern const {ctype} {name} __asm__("{UNSET_CONSTANT}{index}_{name}");'
            values[name] = "false"
        else:
            lit = _literal(value, ctype, where, name)
            text = f"static constexpr {ctype} {name} = {lit};"
            values[name] = lit
            done.append((name, index, lit))
        out.append(src[last : m.start()])
        out.append(text + "\n" * m.group().count("\n"))
        last = m.end()
    out.append(src[last:])
    text = "".join(out)
    defined = {m.group(2) for m in declared if m.group(2) in given or int(m.group(3)) in given}

    def _defined(m: re.Match) -> str:
        return "true" if m.group(1) in defined else "false"

    text = re.sub(r"\bis_function_constant_defined\s*\(\s*(\w+)\s*\)", _defined, text)
    return text, values, tuple(done)


def _collapse_address_space_specializations(src: str, loc: _Locator) -> str:
    """Partial specialisations that differ only in address spaces: the compiled build keeps the first
    of each set (the others would redefine it), the lint build all of them."""
    seen: set[tuple[str, str]] = set()
    spans: list[tuple[int, int]] = []
    for m in _SPECIALIZATION.finditer(src):
        open_angle = m.end() - 1
        try:
            close = _matching_angle(src, open_angle)
        except TranslateError:
            continue
        args = src[open_angle + 1 : close]
        if not _SPACE_WORDS.search(args) and not re.search(r"\bconstant\b", args):
            continue
        key_args = re.sub(r"\bconstant\b", "const", _SPACE_WORDS.sub(" ", args))
        key = (m.group(3), " ".join(key_args.split()))
        body = src.find("{", close)
        semi = src.find(";", close)
        if body < 0 or (0 <= semi < body):
            continue
        end = _matching(src, body, "{", "}")
        tail = re.match(r"\s*;", src[end + 1 :])
        end = end + 1 + (tail.end() if tail else 0)
        if key in seen:
            spans.append((m.start(), end))
        else:
            seen.add(key)
    return _lint_only(src, spans, loc)


_THIS_SPACE = re.compile(
    r"\)((?:\s*\b(?:const|volatile)\b)*)\s*\b(thread|threadgroup|device|constant)\b(?=\s*(?:[{:;=]|noexcept\b|->))"
)


def _skip_balanced(src: str, i: int) -> int:
    """Index just past the bracket group opening at src[i]."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    return _matching(src, i, src[i], pairs[src[i]]) + 1


def _member_end(src: str, pos: int) -> int:
    """Index just past the member function whose declarator ends at pos: its body (after any
    constructor initializers), `= default;` or `;`."""
    i, n = pos, len(src)
    initializers = False
    while i < n:
        ch = src[i]
        if ch == ";":
            return i + 1
        if ch == ":" and not initializers and not src.startswith("::", i):
            initializers = True
        elif ch in "([":
            i = _skip_balanced(src, i)
            continue
        elif ch == "{":
            before = src[:i].rstrip()
            if initializers and before and (before[-1].isalnum() or before[-1] in "_>"):
                i = _skip_balanced(src, i)  # a brace initializer `member{...}`
                continue
            return _skip_balanced(src, i)
        i += 1
    return n


def _declaration_start(src: str, pos: int) -> int:
    """Start of the declaration containing pos: just after the previous `;`, `{` or `}` at depth 0."""
    depth = 0
    for i in range(pos - 1, -1, -1):
        ch = src[i]
        if ch in ")]":
            depth += 1
        elif ch in "([":
            depth -= 1
        elif depth == 0 and ch in ";{}":
            return i + 1
    return 0


def _strip_this_address_spaces(src: str) -> str:
    """Member functions qualified by the address space of `this` (`f() const thread`, `T() device`):
    the emulator has one memory, so the qualifier goes, and of overloads that differed only in it the
    first is kept (the others are blanked)."""
    seen: set[tuple[int, str]] = set()
    edits: list[tuple[int, int, str]] = []
    covered = -1
    for m in _THIS_SPACE.finditer(src):
        if m.start() < covered:
            continue
        try:
            open_paren = _matching_backward(src, m.start())
        except TranslateError:
            continue
        start = _declaration_start(src, open_paren)
        scope = _enclosing_brace(src, start)
        head = re.sub(r"\b(?:public|private|protected)\s*:", " ", src[start : m.start() + 1])
        key = (scope, " ".join((head + m.group(1)).split()))
        if key in seen:
            end = _member_end(src, m.end())
            edits.append((start, end, _blank(src[start:end])))
            covered = end
        else:
            seen.add(key)
            q = m.start(2)
            edits.append((q, m.end(2), " " * (m.end(2) - q)))
    if not edits:
        return src
    out, last = [], 0
    for a, b, text in sorted(edits):
        if a < last:
            continue
        out.append(src[last:a])
        out.append(text)
        last = b
    out.append(src[last:])
    return "".join(out)


def _enclosing_brace(src: str, pos: int) -> int:
    """Position of the unmatched `{` enclosing pos (-1 at namespace scope of the file)."""
    depth = 0
    for i in range(pos - 1, -1, -1):
        if src[i] == "}":
            depth += 1
        elif src[i] == "{":
            if depth == 0:
                return i
            depth -= 1
    return -1


def _matching_backward(src: str, close_pos: int) -> int:
    depth = 0
    for i in range(close_pos, -1, -1):
        if src[i] == ")":
            depth += 1
        elif src[i] == "(":
            depth -= 1
            if depth == 0:
                return i
    raise TranslateError("unbalanced parentheses")


_SPACE_ANY = re.compile(r"\b(?:device|threadgroup|constant|thread)\b")
_FUNCTION_HEAD = re.compile(r"\)\s*(?:(?:const|volatile|noexcept|override|final)\b\s*)*(?:->[^{;]*)?$")
_CTOR_HEAD = re.compile(r"\)\s*:[^:].*$", re.S)
_SCOPE_HEAD = re.compile(r"\b(?:struct|class|union|namespace)\b|\bextern\s*\"C\"")


def _space_key(text: str) -> str:
    """A declaration head with its address spaces removed, as the compiled build sees it."""
    text = re.sub(r"\bconstant\b", "const", text)
    text = re.sub(r"\b(?:device|threadgroup|thread)\b", " ", text)
    text = re.sub(r"\b(?:public|private|protected)\s*:", " ", text)
    text = " ".join(text.split())
    while "const const" in text:
        text = text.replace("const const", "const")
    return text


def _function_definitions(src: str, lo: int, hi: int, scope: int, out: list) -> None:
    """Function definitions at namespace and class scope in src[lo:hi] as (start, end, head,
    scope): function bodies are skipped, class and namespace bodies entered."""
    i, start = lo, lo
    while i < hi:
        ch = src[i]
        if ch == ";":
            start = i + 1
        elif ch == '"':
            j = i + 1
            while j < hi and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            i = j + 1
            continue
        elif ch == "#" and (i == 0 or src[i - 1] == "\n"):
            j = src.find("\n", i)
            i = hi if j < 0 else j
            start = i
            continue
        elif ch in "([":
            i = _skip_balanced(src, i)
            continue
        elif ch == "{":
            close = _matching(src, i, "{", "}")
            bare = " ".join(src[start:i].split())
            if _FUNCTION_HEAD.search(bare) or _CTOR_HEAD.search(bare):
                out.append((start, close + 1, src[start:i], scope))
                i = close + 1
                start = i
                continue
            if _SCOPE_HEAD.search(bare) and "=" not in bare:
                _function_definitions(src, i + 1, close, i, out)
                i = close + 1
                continue  # a class head runs on to its `;`
            i = close + 1
            continue
        elif ch == "}":
            start = i + 1
        i += 1


def _collapse_address_space_overloads(src: str, loc: _Locator) -> str:
    """Functions overloaded on address spaces only (`f(device T& a)`, `f(threadgroup T& a)`): the
    compiled build keeps the first of each set, the lint build all of them."""
    defs: list = []
    try:
        _function_definitions(src, 0, len(src), -1, defs)
    except TranslateError:
        return src
    seen: set[tuple[int, str]] = set()
    spans = []
    for start, end, head, scope in defs:
        if not _SPACE_ANY.search(head):
            continue
        key = (scope, _space_key(head))
        if key in seen:
            spans.append((start, end))
        else:
            seen.add(key)
    return _lint_only(src, spans, loc)


def _lint_only(src: str, spans: list[tuple[int, int]], loc: _Locator) -> str:
    """Wraps each span in `#ifdef METILE_LINT`, with line markers keeping the lines after it."""
    if not spans:
        return src
    out, last = [], 0
    for start, end in sorted(spans):
        while start < end and src[start] in " \t\n":
            start += 1
        if start < last:
            continue
        out.append(src[last:start])
        name, line = loc.where(start)
        _, end_line = loc.where(end)
        col = " " * (start - (src.rfind("\n", 0, start) + 1))
        out.append(f'\n#ifdef METILE_LINT\n#line {line} "{name}"\n{col}{src[start:end]}\n#endif\n')
        out.append(f'#line {end_line} "{name}"\n' + " " * (end - (src.rfind("\n", 0, end) + 1)))
        last = end
    out.append(src[last:])
    return "".join(out)


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


_ARRAY_PARAM = re.compile(r"\b(device|constant|threadgroup)\b([^,;(){}\[\]=]*?)\b(\w+)\s*\[[^\]]*\](?=\s*[,)])")


def _array_parameters(src: str) -> str:
    """`constant T a[N]` as a parameter is a pointer into that address space: spelled so."""
    return _ARRAY_PARAM.sub(lambda m: f"{m.group(1)}{m.group(2)}*{m.group(3)}", src)


def _find_kernel(src: str, name: str, loc: _Locator) -> tuple[re.Match, str]:
    """The definition of kernel `name` and the C++ function the entry point calls."""
    for inst in _INSTANTIATION.finditer(src):
        host = "".join(re.findall(r'"([^"]*)"', inst.group(1)))
        if host != name:
            continue
        func = inst.group(2)
        open_angle = inst.end() - 1
        close = _matching_angle(src, open_angle)
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
    loc = _Locator(src, filename)
    src, values, constants = _specialize_constants(src, loc, function_constants or {})
    loc = _Locator(src, filename)
    match, function = _find_kernel(src, name, loc)
    open_pos = match.end() - 1
    close_pos = _matching(src, open_pos)
    where = loc.at(open_pos)
    raw_params = [p for p in _split_top_level(src[open_pos + 1 : close_pos]) if p.strip()]
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
    src = re.sub(r"\[\[.*?\]\]", lambda m: _blank(m.group()), src)
    src = _strip_this_address_spaces(src)
    src = _collapse_address_space_specializations(src, loc)
    loc = _Locator(src, filename)
    src = _collapse_address_space_overloads(src, loc)
    src = _array_parameters(_float_literals(src))
    loc = _Locator(src, filename)
    src = _rewrite_threadgroup(src, loc)
    src = _vector_constructors(src)
    params = [
        Param(
            p.name,
            p.kind,
            p.index,
            p.attribute,
            _rewrite_threadgroup(p.ctype, None) if p.kind == "threadgroup" else p.ctype,
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
