"""mlx_metile.native.g13 against Mesa's golden G13 encodings (tests/native/fixtures): decoding
with CAFEBABE padding after each instruction, text, and encoding back, byte for byte."""

from __future__ import annotations

import random

import pytest

from mlx_metile.native import g13
from mlx_metile.native.errors import EncodingError

from .conftest import PADDING, load_cases

OUTSIDE = {"log2", "exp2", "rcp", "rsqrt", "wait", "barrier", "stop"}  # not in the modelled subset


@pytest.mark.parametrize("data,text", load_cases(), ids=lambda x: x.hex() if isinstance(x, bytes) else "")
def test_golden_case_decodes_with_padding_and_encodes_back(data, text):
    ins = g13.decode_one(data + PADDING)
    assert ins.size == len(data)
    assert ins.encode() == data
    if text.split()[0] in OUTSIDE:
        assert ins.opaque and "outside the modelled subset" in ins.text
        return
    assert not ins.opaque, ins.text
    assert ins.text == text
    # the other direction: from the text, the shortest form is the golden one
    assert g13.parse(text).encode() == data
    assert g13.parse(text, size=len(data)) == ins


def test_the_subset_covers_the_float_alu_cases(golden):
    decoded = [g13.decode_one(d + PADDING) for d, _ in golden]
    ops = {i.op for i in decoded if not i.opaque}
    assert ops == {"fadd", "fmul", "ffma", "hadd", "hmul", "hfma", "mov", "ldimm16", "ldimm32"}
    assert sum(not i.opaque for i in decoded) == 42


def test_a_stream_decodes_instruction_by_instruction(golden):
    stream = b"".join(d for d, _ in golden)
    decoded = g13.decode(stream)
    assert [i.encode() for i in decoded] == [d for d, _ in golden]
    assert g13.encode(decoded) == stream


def test_padding_never_changes_a_decode(golden):
    rng = random.Random(5)
    for data, _ in golden:
        plain = g13.decode_one(data)
        for _ in range(8):
            assert g13.decode_one(data + bytes(rng.getrandbits(8) for _ in range(12))) == plain


def test_an_unexplained_bit_makes_an_instruction_opaque():
    data = bytearray(bytes.fromhex("1a9156222500"))  # fmul r4, r11, r9, 6-byte form
    data[5] |= 0x40  # bit 46: no field of the public layout
    ins = g13.decode_one(bytes(data))
    assert ins.opaque and "bit 46" in ins.text and ins.encode() == bytes(data)


def test_a_register_source_without_a_hint_is_opaque():
    data = bytearray(bytes.fromhex("1a9156222500"))
    data[2] &= 0x3F  # src1's hint bits 22:23 cleared: Mesa reports a missing hint
    assert g13.decode_one(bytes(data)).opaque


def test_an_unknown_encoding_is_opaque_to_the_end():
    ins = g13.decode(bytes.fromhex("fffe") + bytes.fromhex("1a9156222500"))
    assert len(ins) == 1 and ins[0].opaque and ins[0].size == 8 and "unknown length" in ins[0].text


def test_every_bit_flip_of_a_golden_case_decodes_or_is_opaque_and_keeps_its_bytes(golden):
    for data, _ in golden:
        for bit in range(len(data) * 8):
            flipped = bytearray(data)
            flipped[bit // 8] ^= 1 << (bit % 8)
            ins = g13.decode_one(bytes(flipped) + PADDING)
            assert bytes(flipped + PADDING).startswith(ins.encode())
            if not ins.opaque:
                assert g13.parse(ins.text, size=ins.size) == ins


def test_random_words_never_crash_the_decoder():
    rng = random.Random(11)
    for _ in range(3000):
        word = bytes(rng.getrandbits(8) for _ in range(16))
        ins = g13.decode_one(word)
        assert word.startswith(ins.encode())


def test_forms_too_short_for_their_fields_are_refused():
    ffma = g13.parse("ffma r0, r1, r2, r3")
    assert ffma.size == 8  # a 32-bit register addend needs the long form
    with pytest.raises(EncodingError, match="8-byte form"):
        ffma.with_size(6).encode()
    with pytest.raises(EncodingError, match="forms are"):
        ffma.with_size(4)


@pytest.mark.parametrize(
    "text,match",
    [
        ("fmul r4, r11", "takes 2 sources"),
        ("fmul r4, r11, 0.3", "not an 8-bit float immediate"),
        ("fmul r4, x11, r9", "register or a float"),
        ("hfma r4, r1l, r1l, r1l", "16-bit half"),
        ("hmul r0l, r1, r2l", "32-bit operands"),
        ("fdiv r0, r1, r2", "not in the subset"),
        ("mov r0, 1.5", "integer immediate"),
        ("ldimm r0l, 70000", "does not fit"),
    ],
)
def test_bad_instructions_are_refused_with_a_reason(text, match):
    with pytest.raises(EncodingError, match=match):
        g13.parse(text).encode()


def test_registers_count_16_bit_halves():
    assert g13.reg("r4").halves == (8, 9)
    assert g13.reg("r4h").halves == (9,)
    assert g13.parse("ffma r5, r6, u9, r5").reads() == {12, 13, 10, 11}  # addend r5 is read
    assert g13.parse("ffma r5, r6, u9, r5").writes() == {10, 11}
