"""Text of a kernel's source as the translator walks it: comments blanked, positions mapped to
file:line through line markers, brackets matched."""

from __future__ import annotations

import os
import re


class TranslateError(ValueError):
    """The source uses something the emulator rejects; the message has file:line."""


def blank(text: str) -> str:
    return re.sub(r"[^\n]", " ", text)


def strip_comments(src: str) -> str:
    out, i, n = [], 0, len(src)
    while i < n:
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(src[i:j]))
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(blank(src[i:j]))
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


_LINEMARKER = re.compile(r'^#(?:line)?\s+(\d+)\s+"((?:[^"\\]|\\.)*)"[^\n]*$', re.M)


class Locator:
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


def split_top_level(text: str) -> list[str]:
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


def matching(src: str, open_pos: int, opening: str = "(", closing: str = ")") -> int:
    depth = 0
    for i in range(open_pos, len(src)):
        if src[i] == opening:
            depth += 1
        elif src[i] == closing:
            depth -= 1
            if depth == 0:
                return i
    raise TranslateError(f"unbalanced {opening}{closing} in the kernel source")


def matching_angle(src: str, open_pos: int) -> int:
    """The `>` closing the template argument list opened at open_pos (parentheses nest)."""
    depth = 0
    i = open_pos
    while i < len(src):
        ch = src[i]
        if ch == "(":
            i = matching(src, i) + 1
            continue
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise TranslateError("unbalanced <> in the kernel source")


def matching_backward(src: str, close_pos: int) -> int:
    depth = 0
    for i in range(close_pos, -1, -1):
        if src[i] == ")":
            depth += 1
        elif src[i] == "(":
            depth -= 1
            if depth == 0:
                return i
    raise TranslateError("unbalanced parentheses")


def skip_balanced(src: str, i: int) -> int:
    """Index just past the bracket group opening at src[i]."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    return matching(src, i, src[i], pairs[src[i]]) + 1


def enclosing_brace(src: str, pos: int) -> int:
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


def declaration_start(src: str, pos: int) -> int:
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


def statement_end(src: str, pos: int) -> int:
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
