"""Address spaces in the translator. The compiled build has one memory (device, constant,
threadgroup and thread pointers are plain pointers), the lint build one clang address space each:
threadgroup storage is told from threadgroup pointers, `this`-address-space qualifiers of member
functions go, and overloads or partial specialisations that differ only in address spaces keep
their first in the compiled build (all of them in the lint build)."""

from __future__ import annotations

import re

from .source_text import (
    Locator,
    TranslateError,
    blank,
    declaration_start,
    enclosing_brace,
    matching,
    matching_angle,
    matching_backward,
    skip_balanced,
    split_top_level,
    statement_end,
)

_SPACE_WORDS = re.compile(r"\b(device|threadgroup|thread)\b")


_SPECIALIZATION = re.compile(r"\btemplate\s*<([^<>]*)>\s*(struct|class)\s+(\w+)\s*<")


def _declared_names(declaration: str) -> list[str]:
    names = []
    for declarator in split_top_level(declaration):
        bare = re.sub(r"\[[^\]]*\]", "", declarator)
        m = re.search(r"(\w+)\s*$", bare)
        if m:
            names.append(m.group(1))
    return names


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


def rewrite_threadgroup(src: str, loc: Locator | None) -> str:
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
            end = statement_end(src, m.end())
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


def collapse_specializations(src: str, loc: Locator) -> str:
    """Partial specialisations that differ only in address spaces: the compiled build keeps the first
    of each set (the others would redefine it), the lint build all of them."""
    seen: set[tuple[str, str]] = set()
    spans: list[tuple[int, int]] = []
    for m in _SPECIALIZATION.finditer(src):
        open_angle = m.end() - 1
        try:
            close = matching_angle(src, open_angle)
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
        end = matching(src, body, "{", "}")
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
            i = skip_balanced(src, i)
            continue
        elif ch == "{":
            before = src[:i].rstrip()
            if initializers and before and (before[-1].isalnum() or before[-1] in "_>"):
                i = skip_balanced(src, i)  # a brace initializer `member{...}`
                continue
            return skip_balanced(src, i)
        i += 1
    return n


def strip_this_address_spaces(src: str) -> str:
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
            open_paren = matching_backward(src, m.start())
        except TranslateError:
            continue
        start = declaration_start(src, open_paren)
        scope = enclosing_brace(src, start)
        head = re.sub(r"\b(?:public|private|protected)\s*:", " ", src[start : m.start() + 1])
        key = (scope, " ".join((head + m.group(1)).split()))
        if key in seen:
            end = _member_end(src, m.end())
            edits.append((start, end, blank(src[start:end])))
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
            i = skip_balanced(src, i)
            continue
        elif ch == "{":
            close = matching(src, i, "{", "}")
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


def collapse_overloads(src: str, loc: Locator) -> str:
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


def _lint_only(src: str, spans: list[tuple[int, int]], loc: Locator) -> str:
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


_ARRAY_PARAM = re.compile(r"\b(device|constant|threadgroup)\b([^,;(){}\[\]=]*?)\b(\w+)\s*\[[^\]]*\](?=\s*[,)])")


def array_parameters(src: str) -> str:
    """`constant T a[N]` as a parameter is a pointer into that address space: spelled so."""
    return _ARRAY_PARAM.sub(lambda m: f"{m.group(1)}{m.group(2)}*{m.group(3)}", src)
