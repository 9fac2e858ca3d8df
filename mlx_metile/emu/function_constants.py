"""Function constants (`constant T x [[function_constant(i)]];`): specialised to the values a
kernel is built with, as Metal's MTLFunctionConstantValues does."""

from __future__ import annotations

import re
from collections.abc import Mapping

from .source_text import Locator, TranslateError

UNSET_CONSTANT = "metile_unset_function_constant_"
FunctionConstant = bool | int | float


_FUNCTION_CONSTANT = re.compile(
    r"\bconstant\s+([A-Za-z_][\w:]*)\s+(\w+)\s*\[\[\s*function_constant\s*\(\s*(\d+)\s*\)\s*\]\]\s*;"
)


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


def specialize_constants(
    src: str, loc: Locator, given: Mapping[int | str, FunctionConstant]
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
