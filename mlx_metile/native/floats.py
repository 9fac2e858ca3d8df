"""Bit-exact binary32 / binary16 arithmetic on bit patterns, for the interpreter.

Values are decoded into exact dyadic rationals (m * 2**e with Python integers), combined exactly
and rounded once to nearest-even, so a fused multiply-add rounds once and every subnormal, signed
zero and overflow follows IEEE 754. What the hardware does where IEEE leaves a choice (NaN
payloads, flushing of subnormals) is a `Model`, never a hidden default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True)
class Format:
    name: str
    width: int
    mant: int  # stored fraction bits
    exp: int  # exponent bits

    @property
    def bias(self) -> int:
        return (1 << (self.exp - 1)) - 1

    @property
    def emax_field(self) -> int:
        return (1 << self.exp) - 1

    @property
    def quiet(self) -> int:
        return 1 << (self.mant - 1)

    @property
    def default_nan(self) -> int:
        return (self.emax_field << self.mant) | self.quiet


F32 = Format("f32", 32, 23, 8)
F16 = Format("f16", 16, 10, 5)

_FRAME = 23  # NaN payloads travel left-aligned in a 23-bit fraction (f32's), so widths can change


class Value(NamedTuple):
    """kind 0: finite, exactly (-1)**sign * m * 2**e (m may be 0); 1: infinity; 2: NaN whose
    fraction, left-aligned to 23 bits, is m."""

    kind: int
    sign: int
    m: int = 0
    e: int = 0


FINITE, INF, NAN = 0, 1, 2


@dataclass(frozen=True)
class Model:
    """What the interpreter assumes where IEEE 754 or the public documentation leave a choice.

    ftz32: binary32 subnormal operands read as zero and binary32 results whose exact value is
    below 2**-126 in magnitude become zero, sign kept (binary16 is never flushed).
    canonical_nan: every NaN result is the default NaN (0x7fc00000 / 0x7e00); otherwise the first
    NaN operand (a, b, c order) comes back quieted with its sign and payload.
    fmul_plus_zero: fmul computes fma(a, b, +0.0), so (-0) * x gives +0; otherwise a plain product.
    """

    name: str
    ftz32: bool
    canonical_nan: bool
    fmul_plus_zero: bool


# dougallj/applegpu's emulator (fma.py, applegpu.py): f32 flushed in and out, f16 kept, NaNs
# canonical, fmul as fma with a +0.0 addend - the public, hardware-tested description of G13.
APPLEGPU = Model("applegpu", ftz32=True, canonical_nan=True, fmul_plus_zero=True)
# IEEE 754 defaults: no flushing, payloads propagated, fmul a plain product.
IEEE = Model("ieee", ftz32=False, canonical_nan=False, fmul_plus_zero=False)
# flushing with propagated payloads: a third corner where the two above disagree
IEEE_FTZ = Model("ieee-ftz", ftz32=True, canonical_nan=False, fmul_plus_zero=False)
MODELS: tuple[Model, ...] = (APPLEGPU, IEEE, IEEE_FTZ)


def decode(fmt: Format, bits: int, ftz: bool = False) -> Value:
    sign = (bits >> (fmt.width - 1)) & 1
    field = (bits >> fmt.mant) & fmt.emax_field
    frac = bits & ((1 << fmt.mant) - 1)
    if field == fmt.emax_field:
        if frac == 0:
            return Value(INF, sign)
        return Value(NAN, sign, frac << (_FRAME - fmt.mant))
    if field == 0:
        if ftz:
            frac = 0
        return Value(FINITE, sign, frac, 1 - fmt.bias - fmt.mant)
    return Value(FINITE, sign, frac | (1 << fmt.mant), field - fmt.bias - fmt.mant)


def minifloat(imm: int) -> Value:
    """G13's 8-bit float immediate (sign, 3 exponent bits, 4 fraction bits), exactly."""
    sign = (imm >> 7) & 1
    exp = (imm >> 4) & 7
    frac = imm & 0xF
    if exp == 0:
        return Value(FINITE, sign, frac, -6)
    return Value(FINITE, sign, frac | 0x10, exp - 7)


def minifloat_float(imm: int) -> float:
    v = minifloat(imm)
    return (-1.0 if v.sign else 1.0) * v.m * 2.0**v.e


def _nan_bits(fmt: Format, v: Value, model: Model) -> int:
    if model.canonical_nan:
        return fmt.default_nan
    frac = (v.m >> (_FRAME - fmt.mant)) | fmt.quiet
    return (v.sign << (fmt.width - 1)) | (fmt.emax_field << fmt.mant) | frac


def round_to(fmt: Format, v: Value, model: Model, ftz: bool = False) -> int:
    """The bits of `v` rounded to nearest-even in `fmt` (ftz: exact magnitudes below the smallest
    normal become zero first)."""
    sign_bit = v.sign << (fmt.width - 1)
    if v.kind == NAN:
        return _nan_bits(fmt, v, model)
    if v.kind == INF:
        return sign_bit | (fmt.emax_field << fmt.mant)
    m, e = v.m, v.e
    if m == 0:
        return sign_bit
    emin = 1 - fmt.bias
    lead = e + m.bit_length() - 1
    if ftz and lead < emin:
        return sign_bit
    q = max(lead - fmt.mant, emin - fmt.mant)
    if e >= q:
        mm = m << (e - q)
    else:
        shift = q - e
        mm = m >> shift
        rem = m & ((1 << shift) - 1)
        half = 1 << (shift - 1)
        if rem > half or (rem == half and mm & 1):
            mm += 1
        if mm == 1 << (fmt.mant + 1):
            mm >>= 1
            q += 1
    if mm < (1 << fmt.mant):  # subnormal (or zero after rounding down)
        return sign_bit | mm
    field = q + fmt.mant + fmt.bias
    if field >= fmt.emax_field:
        return sign_bit | (fmt.emax_field << fmt.mant)
    return sign_bit | (field << fmt.mant) | (mm - (1 << fmt.mant))


def modify(v: Value, abs_: bool, neg: bool) -> Value:
    """Source modifiers act on the sign bit alone, NaNs included."""
    sign = 0 if abs_ else v.sign
    return v._replace(sign=sign ^ int(neg))


INVALID = Value(NAN, 0, 1 << (_FRAME - 1))  # the default NaN of an invalid operation


def fma(a: Value, b: Value, c: Value | None, model: Model) -> Value:
    """a * b + c exactly (c None: the product alone), NaN rules of `model`; not yet rounded."""
    operands = (a, b) if c is None else (a, b, c)
    for x in operands:
        if x.kind == NAN:
            return INVALID if model.canonical_nan else x._replace(m=x.m | (1 << (_FRAME - 1)))
    ps = a.sign ^ b.sign
    a_zero = a.kind == FINITE and a.m == 0
    b_zero = b.kind == FINITE and b.m == 0
    if (a.kind == INF and b_zero) or (b.kind == INF and a_zero):
        return INVALID
    if a.kind == INF or b.kind == INF:
        if c is not None and c.kind == INF and c.sign != ps:
            return INVALID
        return Value(INF, ps)
    if c is not None and c.kind == INF:
        return c
    pm, pe = a.m * b.m, a.e + b.e
    if c is None:
        return Value(FINITE, ps, pm, pe)
    if pm == 0 and c.m == 0:
        return Value(FINITE, ps if ps == c.sign else 0, 0, 0)
    e0 = min(pe, c.e)
    total = (-1 if ps else 1) * (pm << (pe - e0)) + (-1 if c.sign else 1) * (c.m << (c.e - e0))
    if total == 0:
        return Value(FINITE, 0, 0, 0)  # exact cancellation is +0 when rounding to nearest
    return Value(FINITE, int(total < 0), abs(total), e0)


def saturate(v: Value) -> Value:
    """Clamp to [0, 1]: NaN and every negative value (-0 included) give +0."""
    if v.kind == NAN or v.sign:
        return Value(FINITE, 0, 0, 0)
    above_one = v.kind == INF or (v.m << v.e > 1 if v.e >= 0 else v.m > 1 << -v.e)
    return Value(FINITE, 0, 1, 0) if above_one else v


ONE = Value(FINITE, 0, 1, 0)
PLUS_ZERO = Value(FINITE, 0, 0, 0)
