"""Bit fields of instruction words: lists of inclusive (start, end) ranges, least significant first.

A negative bit counts from the end of an instruction's long form (Mesa's AGX2.xml convention), so
a field can keep high bits in the extension bytes; in a short form those bits read as zero.
"""

from __future__ import annotations

Ranges = tuple[tuple[int, int], ...]


def resolve(ranges: Ranges, long_bits: int) -> Ranges:
    return tuple((s % long_bits, e % long_bits) for s, e in ranges)


def width(ranges: Ranges) -> int:
    return sum(e - s + 1 for s, e in ranges)


def mask(ranges: Ranges) -> int:
    out = 0
    for s, e in ranges:
        out |= ((1 << (e - s + 1)) - 1) << s
    return out


def extract(raw: int, ranges: Ranges) -> int:
    value, n = 0, 0
    for s, e in ranges:
        size = e - s + 1
        value |= ((raw >> s) & ((1 << size) - 1)) << n
        n += size
    return value


def deposit(value: int, ranges: Ranges) -> int:
    if value >> width(ranges):
        raise ValueError(f"value {value:#x} does not fit {width(ranges)} bits")
    raw, n = 0, 0
    for s, e in ranges:
        size = e - s + 1
        raw |= ((value >> n) & ((1 << size) - 1)) << s
        n += size
    return raw


def field(value: int, start: int, size: int = 1) -> int:
    return (value >> start) & ((1 << size) - 1)
