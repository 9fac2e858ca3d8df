"""mlx_metile.native.g17: only what is public of G17 code - sizes, the NOP, the block end, 64-byte
blocks, and the compact FMA immediate (1 + m/8) * 2**(e - 11) - against exact rationals."""

from __future__ import annotations

from fractions import Fraction

import pytest

from mlx_metile.native import g17
from mlx_metile.native.errors import EncodingError


def test_apples_compact_fma_decodes_whole_and_opaque():
    code = g17.APPLE_COMPACT_FMA + g17.NOP + g17.BLOCK_END
    decoded = g17.decode(code)
    assert [i.kind for i in decoded] == ["compact-fma", "nop", "block-end"]
    assert [i.size for i in decoded] == [8, 2, 4]
    assert all(i.opaque for i in decoded)  # no G17 semantics are modelled, so no rewrite crosses one
    assert b"".join(i.encode() for i in decoded) == code
    assert "not public" in decoded[0].text


def test_anything_else_is_an_opaque_tail():
    decoded = g17.decode(g17.NOP + bytes.fromhex("123456"))
    assert decoded[-1].kind == "opaque" and decoded[-1].size == 3 and "unknown length" in decoded[-1].text


def test_blocks_are_padded_to_64_bytes_with_nops():
    padded = g17.pad_block(g17.APPLE_COMPACT_FMA + g17.BLOCK_END)
    assert len(padded) == 64 and padded.endswith(g17.NOP * 26)
    with pytest.raises(EncodingError, match="2-byte units"):
        g17.pad_block(b"\0")


def test_the_compact_immediate():
    for m in range(8):
        for e in range(0, 24):
            value = g17.compact_immediate(m, e)
            assert value == (1 + Fraction(m, 8)) * Fraction(2) ** (e - 11)
            assert g17.compact_fields(value) == (m, e)
    assert g17.compact_fields(1.0) == (0, 11)
    assert g17.compact_fields(3.0) == (4, 12)
    assert g17.compact_fields(1.1) is None  # not (1 + m/8) * 2**k
    assert g17.compact_fields(-1.0) is None and g17.compact_fields(0) is None
    assert g17.compact_fields(2.0**-12) is None  # would need e < 0
    with pytest.raises(EncodingError):
        g17.compact_immediate(8, 0)
