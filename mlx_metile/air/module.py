"""What an AIR module says about its kernels, read off its LLVM assembly (as llvm-dis writes it):
the kernels' parameters from `!air.kernel`, the function constants from `!air.function_constants`,
the intrinsics it declares."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import AirError

# Kernel parameters the GPU fills in (Metal's attributes), named as AIR tags them.
POSITIONS = (
    "thread_position_in_grid",
    "threadgroup_position_in_grid",
    "thread_position_in_threadgroup",
    "threads_per_threadgroup",
    "threadgroups_per_grid",
    "threads_per_grid",
    "thread_index_in_threadgroup",
    "thread_index_in_simdgroup",
    "simdgroup_index_in_threadgroup",
    "threads_per_simdgroup",
    "simdgroups_per_threadgroup",
    "thread_execution_width",
    "quadgroup_index_in_threadgroup",
    "thread_index_in_quadgroup",
    "quadgroups_per_threadgroup",
)


@dataclass(frozen=True)
class Field:
    """A member of a struct passed in a buffer, as air.struct_type_info lays it out."""

    offset: int
    size: int
    type: str
    name: str


@dataclass(frozen=True)
class Param:
    """One kernel parameter. kind: 'buffer' (device / constant memory, [[buffer(index)]]),
    'threadgroup' ([[threadgroup(index)]]) or 'position' (`attribute` names it)."""

    position: int
    kind: str
    llvm_type: str
    name: str
    index: int = -1  # location index of a buffer / threadgroup parameter
    address_space: int = 0
    elem: str = ""  # the pointee's type name (air.arg_type_name)
    elem_size: int = 0
    access: str = ""  # read / read_write / write
    attribute: str = ""  # for positions: thread_position_in_grid, ...
    unused: bool = False
    predicate: str | None = None  # the (bool) function constant the binding is made under
    fields: tuple[Field, ...] = ()  # a struct buffer's layout (air.struct_type_info)


@dataclass(frozen=True)
class Constant:
    """A function constant: its global's name, MSL type, name, index."""

    symbol: str
    type: str
    name: str
    index: int


@dataclass(frozen=True)
class Kernel:
    name: str
    params: tuple[Param, ...]
    max_threads: int | None
    constants: tuple[Constant, ...]

    def buffer(self, index: int) -> Param | None:
        for p in self.params:
            if p.kind == "buffer" and p.index == index:
                return p
        return None


# ---------------------------------------------------------------- metadata --
_MD_LINE = re.compile(r"^!(\d+) = (?:distinct )?!\{(.*)\}\s*$")
_NAMED_LINE = re.compile(r"^!([\w.]+) = !\{(.*)\}\s*$")


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split at `sep` outside brackets, braces, parentheses, angle brackets and quotes."""
    out, depth, cur, quote = [], 0, [], False
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == '"':
                quote = False
            continue
        if ch == '"':
            quote = True
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == sep and depth == 0:
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    tail = "".join(cur).strip()
    if tail:
        out.append(tail)
    return out


class Metadata:
    """The module's numbered and named metadata tuples (elements left as text)."""

    def __init__(self, ll: str):
        self.nodes: dict[int, list[str]] = {}
        self.named: dict[str, list[str]] = {}
        for line in ll.split("\n"):
            if not line.startswith("!"):
                continue
            m = _MD_LINE.match(line)
            if m:
                self.nodes[int(m.group(1))] = split_top(m.group(2))
                continue
            m = _NAMED_LINE.match(line)
            if m:
                self.named[m.group(1)] = split_top(m.group(2))

    def node(self, ref: str, what: str) -> list[str]:
        m = re.fullmatch(r"!(\d+)", ref.strip())
        if not m or int(m.group(1)) not in self.nodes:
            raise AirError(f"{what}: metadata reference {ref!r} is not a metadata tuple of this module")
        return self.nodes[int(m.group(1))]


def _string(el: str) -> str | None:
    m = re.fullmatch(r'!"(.*)"', el.strip())
    return m.group(1) if m else None


def _int(el: str) -> int | None:
    m = re.fullmatch(r"i\d+ (-?\d+)", el.strip())
    return int(m.group(1)) if m else None


def _symbol(el: str) -> str | None:
    m = re.fullmatch(r'ptr(?: addrspace\(\d+\))? @("?[^"\s]+"?)', el.strip())
    return m.group(1).strip('"') if m else None


# ---------------------------------------------------------------- kernels --
def _define_params(ll: str, name: str) -> list[str]:
    m = re.search(r"^define [^\n]*@" + re.escape(name) + r"\((.*)\)[^()\n]*\{\s*$", ll, re.M)
    if not m:
        m = re.search(r'^define [^\n]*@"' + re.escape(name) + r'"\((.*)\)[^()\n]*\{\s*$', ll, re.M)
    if not m:
        raise AirError(f"kernel {name!r}: no definition in the module")
    return split_top(m.group(1)) if m.group(1).strip() else []


_TYPE = re.compile(
    r"^(ptr(?: addrspace\(\d+\))?|<\d+ x (?:i\d+|half|float|bfloat)>|i\d+|half|float|bfloat|double)(?=\s|$)"
)


def _param_type(text: str, kernel: str, i: int) -> str:
    m = _TYPE.match(text)
    if not m:
        raise AirError(f"kernel {kernel!r}: parameter {i} has a type this executor does not pass: {text!r}")
    return m.group(1)


def _fields(info: list[str], what: str) -> tuple[Field, ...]:
    """air.struct_type_info: (offset, size, array count, type name, member name) per member, a
    struct member's own layout (!"air.struct_type_info", !N) before it."""
    out, i = [], 0
    while i < len(info):
        if _string(info[i]) == "air.struct_type_info":
            i += 2
        group = info[i : i + 5]
        if len(group) == 5:
            o, n, t, m = _int(group[0]), _int(group[1]), _string(group[3]), _string(group[4])
        if len(group) != 5 or o is None or n is None or t is None or m is None:
            raise AirError(f"{what}: air.struct_type_info member {group!r} is not (offset, size, n, type, name)")
        out.append(Field(o, n, t, m))
        i += 5
    return tuple(out)


def _param(md: Metadata, tup: list[str], llvm_types: list[str], kernel: str) -> Param:
    pos = _int(tup[0]) if tup else None
    if pos is None or not 0 <= pos < len(llvm_types):
        raise AirError(f"kernel {kernel!r}: argument metadata {tup!r} names no parameter of the definition")
    what = f"kernel {kernel!r}: parameter {pos}"
    strings = [_string(e) for e in tup]
    keys = {s: i for i, s in enumerate(strings) if s is not None}

    def after(key: str, conv):
        i = keys.get(key)
        return conv(tup[i + 1]) if i is not None and i + 1 < len(tup) else None

    name = after("air.arg_name", _string) or f"arg{pos}"
    predicate = None
    if "air.function_constant" in keys:
        ref = tup[keys["air.function_constant"] + 1]
        pred = md.node(ref, what)  # {predicate global, !"bool", !"constant's name"}
        predicate = _string(pred[2]) if len(pred) > 2 else None
        if predicate is None:
            raise AirError(f"{what}: its function-constant predicate {pred!r} names no function constant")
    unused = "air.arg_unused" in keys
    ltype = llvm_types[pos]
    if "air.buffer" in keys:
        loc = after("air.location_index", _int)
        space = after("air.address_space", _int)
        if loc is None or space is None:
            raise AirError(f"{what} ({name}): air.buffer without a location index or address space")
        access = next((s[4:] for s in strings if s in ("air.read", "air.read_write", "air.write")), "")
        fields: tuple[Field, ...] = ()
        if "air.struct_type_info" in keys:
            fields = _fields(md.node(tup[keys["air.struct_type_info"] + 1], what), what)
        return Param(
            position=pos,
            kind="threadgroup" if space == 3 else "buffer",
            llvm_type=ltype,
            name=name,
            index=loc,
            address_space=space,
            elem=after("air.arg_type_name", _string) or "",
            elem_size=after("air.arg_type_size", _int) or 0,
            access=access,
            unused=unused,
            predicate=predicate,
            fields=fields,
        )
    for s in strings[1:]:
        if s and s.startswith("air.") and s[4:] in POSITIONS:
            return Param(position=pos, kind="position", llvm_type=ltype, name=name, attribute=s[4:], unused=unused)
    kind = next((s for s in strings[1:] if s), "?")
    raise AirError(f"{what} ({name}): {kind} parameters are not supported by the AIR executor")


def kernels(ll: str) -> dict[str, Kernel]:
    """Every kernel of the module, from its `!air.kernel` metadata."""
    md = Metadata(ll)
    constants = []
    for ref in md.named.get("air.function_constants", []):
        tup = md.node(ref, "!air.function_constants")
        sym, ctype, cname, index = (
            _symbol(tup[0]),
            _string(tup[1]),
            _string(tup[2]),
            _int(tup[3]) if len(tup) > 3 else None,
        )
        if sym is None or ctype is None or cname is None or index is None:
            raise AirError(f"!air.function_constants: entry {tup!r} is not (global, type, name, index, ...)")
        constants.append(Constant(sym, ctype, cname, index))
    out = {}
    for ref in md.named.get("air.kernel", []):
        tup = md.node(ref, "!air.kernel")
        fname = _symbol(tup[0]) if tup else None
        if fname is None or len(tup) < 3:
            raise AirError(f"!air.kernel: entry {tup!r} is not (function, {{}}, {{arguments}})")
        llvm_types = [_param_type(p, fname, i) for i, p in enumerate(_define_params(ll, fname))]
        params = [_param(md, md.node(a, f"kernel {fname!r}"), llvm_types, fname) for a in md.node(tup[2], fname)]
        if sorted(p.position for p in params) != list(range(len(llvm_types))):
            raise AirError(
                f"kernel {fname!r}: its argument metadata does not describe each of its {len(llvm_types)} parameters"
            )
        max_threads = None
        for extra in tup[3:]:
            node = md.node(extra, fname)
            if node and _string(node[0]) == "air.max_work_group_size" and len(node) > 1:
                max_threads = _int(node[1])
        out[fname] = Kernel(fname, tuple(sorted(params, key=lambda p: p.position)), max_threads, tuple(constants))
    return out


def declarations(ll: str) -> dict[str, str]:
    """name -> the `declare` line, for every function the module declares."""
    out = {}
    for m in re.finditer(r"^declare [^\n]*?@(\"?[\w.$]+\"?)\(([^\n]*)$", ll, re.M):
        out[m.group(1).strip('"')] = m.group(0)
    return out
