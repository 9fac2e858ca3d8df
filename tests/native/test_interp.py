"""mlx_metile.native.interp / floats: the subset's arithmetic, bit for bit.

References: glibc's fmaf (correctly rounded binary32 FMA) through ctypes, numpy's binary32
add/mul, and binary16 results from exact float64 sums/products rounded once by numpy. Tolerance:
none - bits must match, except that when both sides are NaN only NaN-ness is compared (which
NaN the reference returns depends on its instruction order; payloads are tested separately)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import random
import struct

import numpy as np
import pytest

from mlx_metile.native import floats, g13, interp
from mlx_metile.native.errors import InterpretError
from mlx_metile.native.floats import APPLEGPU, IEEE, IEEE_FTZ

LIBM = ctypes.CDLL(ctypes.util.find_library("m"))
LIBM.fmaf.restype = ctypes.c_float
LIBM.fmaf.argtypes = [ctypes.c_float] * 3


def f32(b: int) -> float:
    return struct.unpack("<f", struct.pack("<I", b))[0]


def b32(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def is_nan32(b: int) -> bool:
    return (b & 0x7F800000) == 0x7F800000 and bool(b & 0x7FFFFF)


def random_f32(rng: random.Random) -> int:
    k = rng.random()
    if k < 0.3:
        return rng.getrandbits(32)
    exp = rng.choice([0, 1, 2, 100, 103, 126, 127, 128, 150, 200, 253, 254, 255]) if k < 0.7 else rng.randint(110, 140)
    return rng.getrandbits(1) << 31 | exp << 23 | rng.getrandbits(23) >> rng.choice([0, 0, 12, 22])


@functools.cache
def parsed(text: str) -> g13.Instruction:
    return g13.parse(text)


def run32(text: str, regs: dict[int, int], model, out: int = 0) -> int:
    state = interp.State()
    for n, bits in regs.items():
        state.set_reg32(n, bits)
    return interp.run([parsed(text)], state, model).reg32(out)


def test_ffma_matches_glibc_fmaf_bit_for_bit():
    rng = random.Random(3)
    for _ in range(3000):
        a, b, c = (random_f32(rng) for _ in range(3))
        got = run32("ffma r0, r1, r2, r3", {1: a, 2: b, 3: c}, IEEE)
        want = b32(LIBM.fmaf(f32(a), f32(b), f32(c)))
        assert got == want or (is_nan32(got) and is_nan32(want)), (hex(a), hex(b), hex(c), hex(got), hex(want))


@pytest.mark.parametrize("op,fn", [("fadd", np.add), ("fmul", np.multiply)])
def test_fadd_fmul_match_numpy_float32(op, fn):
    rng = random.Random(4)
    with np.errstate(all="ignore"):
        for _ in range(2000):
            a, b = random_f32(rng), random_f32(rng)
            got = run32(f"{op} r0, r1, r2", {1: a, 2: b}, IEEE)
            want = int(fn(np.uint32(a).view(np.float32), np.uint32(b).view(np.float32)).view(np.uint32))
            assert got == want or (is_nan32(got) and is_nan32(want)), (op, hex(a), hex(b), hex(got), hex(want))


def random_f16(rng: random.Random, exps=None) -> int:
    exp = rng.choice(exps) if exps else rng.randint(0, 31)
    return rng.getrandbits(1) << 15 | exp << 10 | rng.getrandbits(10)


def run16(text: str, regs: dict[int, int], model=IEEE) -> int:
    state = interp.State()
    for half, bits in regs.items():
        state.regs[half] = bits
    return interp.run([parsed(text)], state, model).regs[0]


def h(bits: int) -> np.float64:
    return np.float64(np.uint16(bits).view(np.float16))


def to16(x: np.float64) -> int:
    return int(np.float64(x).astype(np.float16).view(np.uint16))


def test_hadd_hmul_match_a_single_rounding_from_exact_float64():
    # binary16 sums and products are exact in float64 (at most 51 significant bits)
    rng = random.Random(6)
    with np.errstate(all="ignore"):
        for _ in range(1500):
            a, b = random_f16(rng), random_f16(rng)
            for op, fn in (("hadd", np.add), ("hmul", np.multiply)):
                got = run16(f"{op} r0l, r0h, r1l", {1: a, 2: b})
                want = to16(fn(h(a), h(b)))
                both_nan = np.isnan(h(got)) and np.isnan(h(want))
                assert got == want or both_nan, (op, hex(a), hex(b), hex(got), hex(want))


def test_hfma_rounds_once():
    # exponents 8..22 keep a*b+c exact in float64 (at most 51 significant bits), so numpy's
    # one rounding of it to binary16 is the reference
    rng = random.Random(7)
    exps = list(range(8, 23))
    for _ in range(2000):
        a, b, c = (random_f16(rng, exps) for _ in range(3))
        got = run16("hfma r0l, r0h, r1l, r1h", {1: a, 2: b, 3: c})
        assert got == to16(h(a) * h(b) + h(c)), (hex(a), hex(b), hex(c))


def test_signed_zeros():
    zero, mzero, one = 0x0, 0x80000000, 0x3F800000
    assert run32("ffma r0, r1, r2, r3", {1: mzero, 2: one, 3: mzero}, IEEE) == mzero
    assert run32("ffma r0, r1, r2, r3", {1: zero, 2: one, 3: mzero}, IEEE) == zero
    assert run32("ffma r0, r1, r2, r3", {1: one, 2: one, 3: 0xBF800000}, IEEE) == zero  # exact cancellation
    assert run32("fmul r0, r1, r2", {1: mzero, 2: one}, IEEE) == mzero
    assert run32("fmul r0, r1, r2", {1: mzero, 2: one}, APPLEGPU) == zero  # fma(a, b, +0.0)


def test_nan_payloads_per_model():
    payload = 0x7FC01234
    snan = 0x7FA00001
    one = 0x3F800000
    assert run32("fmul r0, r1, r2", {1: payload, 2: one}, IEEE) == payload
    assert run32("fmul r0, r1, r2", {1: snan, 2: one}, IEEE) == snan | 0x400000  # quieted, payload kept
    assert run32("fmul r0, r1, r2", {1: payload, 2: one}, APPLEGPU) == 0x7FC00000
    inf, zero = 0x7F800000, 0
    assert run32("fmul r0, r1, r2", {1: inf, 2: zero}, IEEE) == 0x7FC00000  # invalid: the default NaN
    # a NaN's sign goes with abs/neg source modifiers
    assert run32("fadd r0, r1.neg, r2", {1: payload, 2: zero}, IEEE) == payload | 0x80000000


def test_subnormals_flush_where_the_model_says():
    sub, one, mzero = 0x00000001, 0x3F800000, 0x80000000
    assert run32("fmul r0, r1, r2", {1: sub, 2: one}, IEEE) == sub
    assert run32("fmul r0, r1, r2", {1: sub, 2: one}, IEEE_FTZ) == 0
    assert run32("fmul r0, r1, r2", {1: sub | mzero, 2: one}, IEEE_FTZ) == mzero  # flushed, sign kept
    # a result below 2**-126 before rounding is flushed, even one that rounds up to it:
    # 2**-126 * (1 - 2**-24) is a tie between the largest subnormal and 2**-126, which is even
    assert run32("fmul r0, r1, r2", {1: 0x00800000, 2: 0x3F7FFFFF}, IEEE) == 0x00800000
    assert run32("fmul r0, r1, r2", {1: 0x00800000, 2: 0x3F7FFFFF}, APPLEGPU) == 0
    # binary16 is never flushed
    assert run16("hmul r0l, r0h, r1l", {1: 0x0001, 2: 0x3C00}, APPLEGPU) == 0x0001


def test_a_16_bit_result_of_a_32_bit_operation_rounds_twice():
    # 1 + 2**-11 + 2**-30: binary32 rounds to 1 + 2**-11, a binary16 tie that goes to even (1.0);
    # one rounding of the exact sum to binary16 would give 1 + 2**-10
    state = interp.State()
    state.set_reg32(1, b32(1 + 2**-11))
    state.set_reg32(2, b32(2**-30))
    for model in floats.MODELS:
        assert interp.run([g13.parse("fadd r0l, r1, r2")], state, model).regs[0] == 0x3C00


def test_saturation():
    cases = {0x40000000: 0x3F800000, 0xBF800000: 0, 0x80000000: 0, 0x7FC01234: 0, 0x3F000000: 0x3F000000}
    for src, want in cases.items():
        assert run32("fadd r0, r1, r2, sat", {1: src, 2: 0x80000000}, IEEE) == want, hex(src)


def test_moves_and_immediates():
    assert run32("mov r0, r1", {1: 0x7FA00001}, APPLEGPU) == 0x7FA00001  # bits, no canonicalisation
    assert run32("mov r0, 5", {}, IEEE) == 5
    assert run32("ldimm r0, 3735879680", {}, IEEE) == 0xDEAD0000
    assert run32("fadd r0, r1, 0.234375", {1: 0x3F800000}, IEEE) == b32(1.234375)


def test_what_is_not_modelled_is_refused():
    with pytest.raises(InterpretError, match="between sizes"):
        interp.run([g13.parse("mov r0l, r1")], interp.State(), IEEE)
    with pytest.raises(InterpretError, match="opaque"):
        interp.run(g13.decode(bytes.fromhex("8800")), interp.State(), IEEE)


def test_rounding_is_exact_at_the_edges_of_binary32():
    top = floats.Value(floats.FINITE, 0, (1 << 24) - 1, 104)  # the largest binary32
    assert floats.round_to(floats.F32, top, IEEE) == 0x7F7FFFFF
    tie = floats.Value(floats.FINITE, 0, (1 << 25) - 1, 103)  # halfway to 2**128: to even, infinity
    assert floats.round_to(floats.F32, tie, IEEE) == 0x7F800000
    tiny = floats.Value(floats.FINITE, 1, 1, -150)  # -2**-150: half the smallest subnormal, a tie
    assert floats.round_to(floats.F32, tiny, IEEE) == 0x80000000  # to even: -0
    assert floats.round_to(floats.F32, tiny._replace(m=3, e=-151), IEEE) == 0x80000001
