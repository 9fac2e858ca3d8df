"""A codec for a subset of Apple's G13 (M1-family) instructions: the float ALU and moves.

Modelled: fadd, fmul, ffma (32-bit) and hadd, hmul, hfma (16-bit) with register, uniform and
8-bit float immediate sources, abs/neg modifiers, cache/discard hints and saturation; `mov` of a
register, uniform or 8-bit immediate; `ldimm` of a 16- or 32-bit constant. Bit layouts follow the
public descriptions of the encoding (Mesa's src/asahi/isa/AGX2.xml, dougallj/applegpu); text
follows Mesa's disassembly syntax with single spaces (`fmul r4, r11, r9`).

A decoder reads only an instruction's own bytes: a short form's missing high bits are zero,
whatever follows it in memory. An encoding outside the subset, or inside it with a bit set that
the public layout does not explain, decodes as `Opaque`: kept byte for byte, never interpreted,
and no rewrite may cross it; so is a register source with hint bits 0 (Mesa prints "# missing
hint"), a 32-bit operand at an odd half, or a 16-bit destination with the 32-bit flag set.
Registers count 16-bit halves: r4 is halves 8 and 9, r4h is half 9.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from .bits import Ranges, deposit, extract, mask, resolve
from .errors import EncodingError
from .floats import minifloat_float

HINT_NONE, HINT_CACHE, HINT_DISCARD = 1, 2, 3
_HINT_TEXT = {HINT_NONE: "", HINT_CACHE: "$", HINT_DISCARD: "^"}
REGISTER_HALVES = 256  # an 8-bit register field
UNIFORM_HALVES = 512  # a 9-bit uniform field


@dataclass(frozen=True)
class Src:
    """A source: kind "reg", "uniform", "fimm" (8-bit float immediate) or "imm" (8-bit integer);
    value is the first 16-bit half for registers and uniforms, the immediate's bits otherwise."""

    kind: str
    value: int
    size: int = 32
    hint: int = HINT_NONE
    abs: bool = False
    neg: bool = False

    @property
    def halves(self) -> tuple[int, ...]:
        if self.kind not in ("reg", "uniform"):
            return ()
        return (self.value, self.value + 1) if self.size == 32 else (self.value,)

    @property
    def text(self) -> str:
        if self.kind == "fimm":
            body = repr(minifloat_float(self.value))
        elif self.kind == "imm":
            body = str(self.value)
        else:
            body = _register_name("r" if self.kind == "reg" else "u", self.value, self.size)
        return _HINT_TEXT[self.hint] + body + (".abs" if self.abs else "") + (".neg" if self.neg else "")


@dataclass(frozen=True)
class Dst:
    reg: int  # first 16-bit half
    size: int = 32
    cache: bool = False

    @property
    def halves(self) -> tuple[int, ...]:
        return (self.reg, self.reg + 1) if self.size == 32 else (self.reg,)

    @property
    def text(self) -> str:
        return ("$" if self.cache else "") + _register_name("r", self.reg, self.size)


def reg(name: str, hint: int = HINT_NONE, abs: bool = False, neg: bool = False) -> Src:
    """A source from its text: "r4" (32-bit), "r4l"/"r4h" (16-bit halves), "u8", "u8h"."""
    kind = {"r": "reg", "u": "uniform"}.get(name[:1])
    size, number = (16, name[1:-1]) if name[-1:] in ("l", "h") else (32, name[1:])
    if kind is None or not number.isdigit():
        raise EncodingError(f"register name {name!r}: expected rN, rNl, rNh, uN, uNl or uNh")
    half = int(number) * 2 + (1 if name.endswith("h") else 0)
    return Src(kind, half, size, hint, abs, neg)


def dst(name: str, cache: bool = False) -> Dst:
    s = reg(name)
    if s.kind != "reg":
        raise EncodingError(f"destination {name!r}: only registers are written")
    return Dst(s.value, s.size, cache)


def fimm(value: float) -> Src:
    """The 8-bit float immediate of `value`; EncodingError where it is not exactly representable."""
    for bits in range(256):
        got = minifloat_float(bits)
        if got == value and math.copysign(1.0, got) == math.copysign(1.0, value):  # -0.0 is not 0.0
            return Src("fimm", bits, 32)
    raise EncodingError(f"{value!r} is not an 8-bit float immediate (sign, 3 exponent, 4 fraction bits)")


def _register_name(prefix: str, half: int, size: int) -> str:
    if size == 32:
        return f"{prefix}{half >> 1}"
    return f"{prefix}{half >> 1}{'lh'[half & 1]}"


# ---- operand fields ---------------------------------------------------------------------------
# Each source kind is a small word; these give (decode, encode) for it. None: not a valid encoding.

_F = {"hi": 12, "abs": 10, "neg": 11, "imm_zero": 0x3C0}  # 32-bit float ALU source, 14 bits
_H = {"hi": 11, "abs": 9, "neg": 10, "imm_zero": 0x7C0}  # 16-bit float ALU source, 13 bits
_A = {"hi": 10, "abs": None, "neg": None, "imm_zero": 0x3C0}  # integer/bitwise ALU source, 12 bits


def _decode_src(kind: str, v: int) -> Src | None:
    lay = {"float": _F, "half": _H, "alu": _A}[kind]
    number = (v & 0x3F) | (((v >> lay["hi"]) & 3) << 6)
    abs_ = bool(lay["abs"] is not None and (v >> lay["abs"]) & 1)
    neg = bool(lay["neg"] is not None and (v >> lay["neg"]) & 1)
    b6, b7, b8, b9 = ((v >> i) & 1 for i in (6, 7, 8, 9))
    if v & lay["imm_zero"] == 0:
        return Src("imm" if kind == "alu" else "fimm", number, 32 if kind != "half" else 16, HINT_NONE, abs_, neg)
    if kind == "half":
        if b8:
            return None if b7 else Src("uniform", number | (b6 << 8), 16, HINT_NONE, abs_, neg)
        hint, size = (v >> 6) & 3, 16
    else:
        if b8 and not b9:
            src = Src("uniform", number | (b6 << 8), 32 if b7 else 16, HINT_NONE, abs_, neg)
            return None if src.size == 32 and src.value & 1 else src
        if b8:
            return None
        hint, size = (v >> 6) & 3, 32 if b9 else 16
    if hint == 0 or (size == 32 and number & 1):
        return None  # Mesa reports a missing hint / an odd 32-bit register
    return Src("reg", number, size, hint, abs_, neg)


def _encode_src(kind: str, s: Src) -> int:
    lay = {"float": _F, "half": _H, "alu": _A}[kind]
    where = f"{s.text} as a {kind} source"
    if (s.abs or s.neg) and lay["abs"] is None:
        raise EncodingError(f"{where}: this source takes no abs/neg modifier")
    mods = (int(s.abs) << lay["abs"] if s.abs else 0) | (int(s.neg) << lay["neg"] if s.neg else 0)
    if s.kind in ("fimm", "imm"):
        if (s.kind == "imm") != (kind == "alu"):
            raise EncodingError(f"{where}: {'integer' if kind == 'alu' else 'float'} immediates only")
        if not 0 <= s.value < 256:
            raise EncodingError(f"{where}: an immediate is 8 bits")
        if kind == "half" and mods:
            raise EncodingError(f"{where}: a 16-bit immediate takes no abs/neg modifier")
        return (s.value & 0x3F) | ((s.value >> 6) << lay["hi"]) | mods
    limit = UNIFORM_HALVES if s.kind == "uniform" else REGISTER_HALVES
    if s.kind not in ("reg", "uniform") or not 0 <= s.value < limit:
        raise EncodingError(f"{where}: a register below {limit} halves, or an immediate")
    if s.size == 32 and (s.value & 1 or kind == "half"):
        raise EncodingError(f"{where}: 32-bit operands start at an even half, in 32-bit instructions")
    low = (s.value & 0x3F) | (((s.value >> 6) & 3) << lay["hi"]) | mods
    if s.kind == "uniform":
        if s.hint != HINT_NONE:
            raise EncodingError(f"{where}: uniforms take no hint")
        size_bit = 0 if kind == "half" else (s.size == 32) << 7
        return low | ((s.value >> 8) << 6) | size_bit | (1 << 8)
    if s.hint not in _HINT_TEXT:
        raise EncodingError(f"{where}: hint {s.hint} is not 1 (none), 2 ($) or 3 (^)")
    return low | (s.hint << 6) | ((s.size == 32 and kind != "half") << 9)


def _decode_dst(kind: str, v: int) -> Dst | None:
    cache, size32, number = v & 1, (v >> 1) & 1, v >> 2
    if kind == "dhalf" and size32:
        return None
    if size32 and number & 1:
        return None
    return Dst(number, 32 if size32 else 16, bool(cache))


def _encode_dst(kind: str, d: Dst) -> int:
    if not 0 <= d.reg < REGISTER_HALVES or (d.size == 32 and d.reg & 1):
        raise EncodingError(f"destination {d.text}: a register below {REGISTER_HALVES} halves, 32-bit ones even")
    if kind == "dhalf" and d.size != 16:
        raise EncodingError(f"destination {d.text}: a 16-bit instruction writes a 16-bit half")
    return int(d.cache) | ((d.size == 32) << 1) | (d.reg << 2)


# ---- instruction forms --------------------------------------------------------------------------

_DEST: Ranges = ((7, 14), (-4, -3))
_FSRC = (((16, 27), (-6, -5)), ((28, 39), (-8, -7)), ((40, 51), (-10, -9)))
_HSRC = (((16, 26), (-6, -5)), ((28, 38), (-8, -7)), ((40, 50), (-10, -9)))
_ASRC1: Ranges = ((16, 25), (-6, -5))
LENGTH_BIT = 15
SAT_BIT = 6


@dataclass(frozen=True)
class _Form:
    op: str  # the instruction's name here
    display: str  # its mnemonic in the text
    opmask: int
    opvalue: int
    lengths: tuple[int, ...]  # (short, long) chosen by bit 15, or one length
    dest: str  # "dalu" or "dhalf"
    srcs: tuple[tuple[str, Ranges], ...]
    sat: bool
    imm: Ranges | None = None
    arith: str = ""  # "f32" / "f16": a float operation; "" a move

    @property
    def long_bits(self) -> int:
        return self.lengths[-1] * 8

    def known(self) -> int:
        n = self.long_bits
        out = self.opmask | mask(resolve(_DEST, n))
        out |= (1 << LENGTH_BIT) if len(self.lengths) > 1 else 0
        out |= (1 << SAT_BIT) if self.sat else 0
        for _, ranges in self.srcs:
            out |= mask(resolve(ranges, n))
        if self.imm:
            out |= mask(self.imm)
        return out


def _bitstring(positions: list[int], value: int) -> int:
    return sum(((value >> i) & 1) << p for i, p in enumerate(positions))


_MOV_MASK = 0x7F | 1 << 15 | mask(((28, 37), (40, 41))) | _bitstring([26, 27, 38, 39], 0xF)
_MOV_VALUE = 0x7E | _bitstring([26, 27, 38, 39], 0b1010)

FORMS: tuple[_Form, ...] = (
    _Form("ldimm16", "ldimm", 0x17F, 0x062, (4, 6), "dalu", (), False, ((16, 31),)),
    _Form("ldimm32", "ldimm", 0x17F, 0x162, (6, 8), "dalu", (), False, ((16, 47),)),
    _Form("ffma", "ffma", 0x3F, 0x3A, (6, 8), "dalu", tuple(("float", r) for r in _FSRC), True, arith="f32"),
    _Form("hfma", "hfma", 0x3F, 0x36, (6, 8), "dhalf", tuple(("half", r) for r in _HSRC), True, arith="f16"),
    _Form("fadd", "fadd", 0x3F, 0x2A, (4, 6), "dalu", tuple(("float", r) for r in _FSRC[:2]), True, arith="f32"),
    _Form("fmul", "fmul", 0x3F, 0x1A, (4, 6), "dalu", tuple(("float", r) for r in _FSRC[:2]), True, arith="f32"),
    _Form("hadd", "hadd", 0x3F, 0x26, (4, 6), "dhalf", tuple(("half", r) for r in _HSRC[:2]), True, arith="f16"),
    _Form("hmul", "hmul", 0x3F, 0x16, (4, 6), "dhalf", tuple(("half", r) for r in _HSRC[:2]), True, arith="f16"),
    _Form("mov", "mov", _MOV_MASK, _MOV_VALUE, (6,), "dalu", (("alu", _ASRC1),), False),
)
FORM = {f.op: f for f in FORMS}

# Instructions outside the subset whose length rule the public descriptions give (Mesa's AGX2.xml):
# they decode as Opaque of the right size. (name, opmask, opvalue, lengths)
_SIZED_OPAQUE: tuple[tuple[str, int, int, tuple[int, ...]], ...] = (
    ("iadd", 0x3F | 1 << 15, 0x0E, (8,)),
    ("imadd", 0x3F | 1 << 15, 0x1E, (8,)),
    ("convert", 0x7F | 1 << 15, 0x3E | 1 << 15, (6,)),
    ("bitop", 0x7F | 1 << 15, 0x7E, (6,)),
    ("intunop", 0x7F | 1 << 15, 0x3E, (6,)),
    ("shift", 0x7F, 0x2E, (8,)),
    ("funop", 0x3F, 0x0A, (4, 6)),
    ("icsel", 0x7F, 0x12, (8, 10)),
    ("fcsel", 0x7F, 0x02, (8, 10)),
    ("stop", 0xFFFF, 0x0088, (2,)),
    ("trap", 0xFFFF, 0x0008, (2,)),
    ("wait", 0xFF, 0x38, (2,)),
    ("barrier", 0xFF, 0x68, (2,)),
)


@dataclass(frozen=True)
class Instruction:
    """One instruction of the subset. `size` is its length in bytes (its short or long form)."""

    op: str
    dest: Dst
    srcs: tuple[Src, ...] = ()
    sat: bool = False
    imm: int | None = None
    size: int = 0  # 0: the shortest form that holds the fields (fixed by __post_init__)
    opaque: bool = field(default=False, init=False)

    def __post_init__(self):
        form = FORM.get(self.op)
        if form is None:
            raise EncodingError(f"op {self.op!r}: not in the subset ({', '.join(FORM)})")
        if len(self.srcs) != len(form.srcs):
            raise EncodingError(f"{self.op}: {len(form.srcs)} sources, got {len(self.srcs)}")
        if self.sat and not form.sat:
            raise EncodingError(f"{self.op}: no saturating form")
        if (self.imm is None) != (form.imm is None):
            raise EncodingError(f"{self.op}: an immediate {'is required' if form.imm else 'is not taken'}")
        if self.size == 0:
            object.__setattr__(self, "size", self._smallest())
        elif self.size not in form.lengths:
            raise EncodingError(f"{self.op}: {self.size} bytes; its forms are {form.lengths}")

    @property
    def form(self) -> _Form:
        return FORM[self.op]

    def _fields(self) -> int:
        form = self.form
        n = form.long_bits
        raw = form.opvalue | deposit(_encode_dst(form.dest, self.dest), resolve(_DEST, n))
        if form.op == "ldimm16" and self.dest.size != 16 or form.op == "ldimm32" and self.dest.size != 32:
            raise EncodingError(f"{form.op}: destination {self.dest.text} has the wrong size")
        for (kind, ranges), s in zip(form.srcs, self.srcs):
            raw |= deposit(_encode_src(kind, s), resolve(ranges, n))
        if form.imm:
            try:
                raw |= deposit(self.imm, form.imm)
            except ValueError as e:
                raise EncodingError(f"{form.op}: immediate {self.imm}: {e}") from None
        return raw | (int(self.sat) << SAT_BIT)

    def _smallest(self) -> int:
        raw = self._fields()
        for n in self.form.lengths:
            if raw >> (n * 8) == 0:
                return n
        raise EncodingError(f"{self.op}: fields do not fit")  # pragma: no cover - the long form holds all

    def encode(self) -> bytes:
        form = self.form
        raw = self._fields()
        if raw >> (self.size * 8):
            raise EncodingError(f"{self.text}: needs the {form.lengths[-1]}-byte form, {self.size} bytes asked")
        if len(form.lengths) > 1 and self.size == form.lengths[-1]:
            raw |= 1 << LENGTH_BIT
        return raw.to_bytes(self.size, "little")

    @property
    def text(self) -> str:
        parts = [self.dest.text] + [s.text for s in self.srcs]
        if self.imm is not None:
            parts.append(str(self.imm))
        if self.sat:
            parts.append("sat")
        return f"{self.form.display} {', '.join(parts)}"

    def reads(self) -> frozenset[int]:
        """Register halves read (uniforms are never written, so they order nothing)."""
        return frozenset(h for s in self.srcs if s.kind == "reg" for h in s.halves)

    def writes(self) -> frozenset[int]:
        return frozenset(self.dest.halves)

    def discards(self) -> frozenset[int]:
        """Halves read with the discard hint (^): the register cache may drop them after this read."""
        return frozenset(h for s in self.srcs if s.kind == "reg" and s.hint == HINT_DISCARD for h in s.halves)

    def with_size(self, size: int) -> Instruction:
        return replace(self, size=size)

    def __repr__(self) -> str:
        return f"<{self.text} ({self.size} bytes)>"


@dataclass(frozen=True)
class Opaque:
    """Bytes outside the modelled subset, kept exactly; `why` says what they are."""

    data: bytes
    why: str
    opaque: bool = field(default=True, init=False)

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def text(self) -> str:
        return f"<opaque {self.data.hex()}: {self.why}>"

    def encode(self) -> bytes:
        return self.data

    def __repr__(self) -> str:
        return self.text


Decoded = Instruction | Opaque


def _word(data: bytes, offset: int, n: int) -> int | None:
    if offset + n > len(data):
        return None
    return int.from_bytes(data[offset : offset + n], "little")


def _length(data: bytes, offset: int, lengths: tuple[int, ...]) -> int | None:
    if len(lengths) == 1:
        return lengths[0]
    head = _word(data, offset, 2)
    if head is None:
        return None
    return lengths[1] if (head >> LENGTH_BIT) & 1 else lengths[0]


def decode_one(data: bytes, offset: int = 0) -> Decoded:
    """The instruction at `offset`; an encoding of unknown length is Opaque to the end of `data`."""
    if not 0 <= offset < len(data):
        raise EncodingError(f"offset {offset}: outside the {len(data)} bytes given")
    for form in FORMS:
        n = _length(data, offset, form.lengths)
        raw = None if n is None else _word(data, offset, n)
        if raw is None or raw & form.opmask != form.opvalue:
            continue
        chunk = data[offset : offset + n]
        unknown = raw & ~form.known()
        if unknown:
            first = (unknown & -unknown).bit_length() - 1
            return Opaque(chunk, f"{form.op} with bit {first} set, which the public layout does not explain")
        long_bits = form.long_bits
        dest = _decode_dst(form.dest, extract(raw, resolve(_DEST, long_bits)))
        srcs = tuple(_decode_src(kind, extract(raw, resolve(r, long_bits))) for kind, r in form.srcs)
        if dest is None or None in srcs:
            return Opaque(chunk, f"{form.op} with an operand encoding the public layout rejects")
        if form.op.startswith("ldimm") and dest.size != (16 if form.op == "ldimm16" else 32):
            return Opaque(chunk, f"{form.op} with a destination of the wrong size")  # pragma: no cover
        imm = extract(raw, form.imm) if form.imm else None
        ins = Instruction(form.op, dest, srcs, bool((raw >> SAT_BIT) & 1) if form.sat else False, imm, n)
        if ins.encode() != chunk:  # pragma: no cover - decode and encode are one table
            return Opaque(chunk, f"{form.op} that does not re-encode to the same bytes")
        return ins
    for name, opmask, opvalue, lengths in _SIZED_OPAQUE:
        n = _length(data, offset, lengths)
        raw = None if n is None else _word(data, offset, n)
        if raw is not None and raw & opmask == opvalue:
            return Opaque(data[offset : offset + n], f"{name}, outside the modelled subset")
    return Opaque(data[offset:], "an encoding of unknown length; the rest is not decoded")


def decode(data: bytes) -> list[Decoded]:
    """Every instruction of `data`, in order; the sizes add up to len(data)."""
    out: list[Decoded] = []
    offset = 0
    while offset < len(data):
        ins = decode_one(data, offset)
        out.append(ins)
        offset += ins.size
    return out


def encode(instructions: list[Decoded]) -> bytes:
    return b"".join(i.encode() for i in instructions)


def _operand(token: str, kind: str) -> Src:
    hint = HINT_NONE
    if token[:1] in ("$", "^"):
        hint, token = (HINT_CACHE if token[0] == "$" else HINT_DISCARD), token[1:]
    abs_ = neg = False
    while token.endswith((".abs", ".neg")):
        abs_, neg = abs_ or token.endswith(".abs"), neg or token.endswith(".neg")
        token = token[:-4]
    if token[:1] in ("r", "u") and token[1:2].isdigit():
        return replace(reg(token, hint, abs_, neg), size=reg(token).size)
    if kind == "alu":
        if not token.isdigit():
            raise EncodingError(f"operand {token!r}: a register or an integer immediate")
        return Src("imm", int(token), 32)
    try:
        value = float(token)
    except ValueError:
        raise EncodingError(f"operand {token!r}: a register or a float immediate") from None
    return replace(fimm(value), size=16 if kind == "half" else 32, abs=abs_, neg=neg)


def parse(text: str, size: int = 0) -> Instruction:
    """The instruction of a line of the text syntax (`ffma r4, r3, u8, u6`); size 0: the shortest."""
    mnemonic, _, rest = text.strip().partition(" ")
    tokens = [t.strip() for t in rest.split(",") if t.strip()]
    sat = bool(tokens) and tokens[-1] == "sat"
    tokens = tokens[:-1] if sat else tokens
    if not tokens:
        raise EncodingError(f"{text!r}: no operands")
    cache = tokens[0].startswith("$")
    dest = dst(tokens[0].lstrip("$"), cache)
    if mnemonic == "ldimm":
        if len(tokens) != 2 or not tokens[1].isdigit():
            raise EncodingError(f"{text!r}: ldimm takes a register and an unsigned integer")
        return Instruction("ldimm32" if dest.size == 32 else "ldimm16", dest, (), False, int(tokens[1]), size)
    form = FORM.get(mnemonic)
    if form is None or form.imm:
        raise EncodingError(f"{text!r}: {mnemonic!r} is not in the subset")
    if len(tokens) - 1 != len(form.srcs):
        raise EncodingError(f"{text!r}: {mnemonic} takes {len(form.srcs)} sources")
    srcs = tuple(_operand(t, kind) for t, (kind, _) in zip(tokens[1:], form.srcs))
    return Instruction(mnemonic, dest, srcs, sat, None, size)
