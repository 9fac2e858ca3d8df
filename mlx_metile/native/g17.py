"""What is public of G17 (M5) code, and no more: no public G17 decoder works off macOS.

Known (meTile's findings, as issue 37 records them): a 2-byte NOP `06 00`, a 4-byte block end
`0e 00 00 00`, blocks padded to 64 bytes, and a compact 8-byte binary32 FMA whose first byte's
low nibble is 0x9, with an immediate encoding (1 + m/8) * 2**(e - 11); Apple's compiler emitted
`09012ec121b00202`. Where m and e, the registers and the modifiers sit in those 8 bytes is not
public, so a compact FMA decodes whole and opaque: sized, kept byte for byte, never interpreted,
and no rewrite crosses it. Anything else is an opaque tail of unknown length.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from .errors import EncodingError

NOP = bytes.fromhex("0600")
BLOCK_END = bytes.fromhex("0e000000")
BLOCK_BYTES = 64
COMPACT_FMA_SIZE = 8
APPLE_COMPACT_FMA = bytes.fromhex("09012ec121b00202")  # emitted by Apple's compiler


@dataclass(frozen=True)
class G17Instruction:
    kind: str  # "nop", "block-end", "compact-fma", "opaque"
    data: bytes
    opaque: bool = field(default=True, init=False)  # none is interpreted: no G17 semantics are modelled

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def text(self) -> str:
        if self.kind == "nop":
            return "nop"
        if self.kind == "block-end":
            return "block end"
        if self.kind == "compact-fma":
            return f"fma.compact <{self.data.hex()}: operand fields not public>"
        return f"<opaque {self.data.hex()}: G17 encoding of unknown length; the rest is not decoded>"

    def encode(self) -> bytes:
        return self.data


def decode_one(data: bytes, offset: int = 0) -> G17Instruction:
    if not 0 <= offset < len(data):
        raise EncodingError(f"offset {offset}: outside the {len(data)} bytes given")
    rest = data[offset:]
    if rest[:2] == NOP:
        return G17Instruction("nop", NOP)
    if rest[:4] == BLOCK_END:
        return G17Instruction("block-end", BLOCK_END)
    if rest[0] & 0xF == 0x9 and len(rest) >= COMPACT_FMA_SIZE:
        return G17Instruction("compact-fma", rest[:COMPACT_FMA_SIZE])
    return G17Instruction("opaque", rest)


def decode(data: bytes) -> list[G17Instruction]:
    out, at = [], 0
    while at < len(data):
        ins = decode_one(data, at)
        out.append(ins)
        at += ins.size
    return out


def pad_block(code: bytes) -> bytes:
    """`code` padded with NOPs to a whole number of 64-byte blocks."""
    if len(code) % 2:
        raise EncodingError(f"{len(code)} bytes: G17 code comes in 2-byte units")
    return code + NOP * ((-len(code) % BLOCK_BYTES) // 2)


def compact_immediate(m: int, e: int) -> Fraction:
    """The value of a compact FMA immediate: (1 + m/8) * 2**(e - 11), m a 3-bit fraction."""
    if not 0 <= m < 8 or e < 0:
        raise EncodingError(f"m={m}, e={e}: m is 0..7 and e is not negative")
    return (1 + Fraction(m, 8)) * Fraction(2) ** (e - 11)


def compact_fields(value: float | Fraction) -> tuple[int, int] | None:
    """(m, e) with compact_immediate(m, e) == value exactly, or None where none exists."""
    x = Fraction(value)
    if x <= 0:
        return None
    e = x.numerator.bit_length() - x.denominator.bit_length()
    e += -1 if Fraction(2) ** e > x else 0
    mant = x / Fraction(2) ** e  # in [1, 2)
    m = (mant - 1) * 8
    if m.denominator != 1 or e + 11 < 0:
        return None
    return int(m), e + 11
