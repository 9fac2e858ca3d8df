"""mlx_metile.native.rewrite: every rewrite it makes is checked by interpretation (identical bits
under every model), and planted wrong rewrites - a changed constant, a broken dependency, an
unproven identity - are refused. Regions are Mesa's golden G13 encodings where they fit."""

from __future__ import annotations

import pytest

from mlx_metile.native import g13, rewrite
from mlx_metile.native.errors import RewriteError
from mlx_metile.native.rewrite import Policy

P = g13.parse
GOLDEN = bytes.fromhex(
    "1a9156222500"  # fmul r4, r11, r9
    "3a954c22194a0200"  # ffma r5, r6, u9, r5
    "2a81546a2500"  # fadd r0, r10.neg, r11
    "1aa556222500"  # fmul r9, r11, r9
    "1aad52222500"  # fmul r11, r9, r9
    "2a05c2f2"  # fadd r1, ^r1, 0.234375 (4 bytes: a short form)
)
STOP = bytes.fromhex("8800")


@pytest.fixture(scope="module")
def region() -> list:
    code = g13.decode(GOLDEN)
    assert not any(i.opaque for i in code)
    return code + [P("ffma r6, r4, 1.0, -0.0"), P("ffma r7, r5, r4, r0")] + g13.decode(STOP)


@pytest.fixture(scope="module")
def outcome(region):
    return rewrite.run(region)


def texts(region) -> list[str]:
    return [i.text for i in region]


def test_the_pass_rewrites_and_each_result_verifies(region, outcome):
    assert any(a.startswith("fma-identity at #6") for a in outcome.accepted)
    assert "interleave" in outcome.accepted
    assert "mov r6, r4" in texts(outcome.region)
    assert rewrite.verify(region, outcome.region).ok  # checked again here, independently of run()
    assert sum(i.size for i in outcome.region) == sum(i.size for i in region)
    assert outcome.region[-1].encode() == STOP  # the opaque stop stays last, at its offset
    assert g13.decode(g13.encode(outcome.region)) == outcome.region


def test_interleaving_keeps_every_dependency(region, outcome):
    new = outcome.region
    pos = {i.text: k for k, i in enumerate(new)}
    assert pos["fmul r4, r11, r9"] < pos["fmul r9, r11, r9"]  # WAR on r9
    assert pos["fmul r9, r11, r9"] < pos["fmul r11, r9, r9"]  # RAW on r9
    assert pos["fadd r0, r10.neg, r11"] < pos["fmul r11, r9, r9"]  # WAR on r11
    assert pos["ffma r5, r6, u9, r5"] < pos["mov r6, r4"]  # WAR on r6
    assert pos["ffma r5, r6, u9, r5"] < pos["ffma r7, r5, r4, r0"]  # RAW on r5


def test_an_identity_of_a_live_in_is_refused_and_would_change_bits():
    code = [P("ffma r6, r12, 1.0, -0.0"), P("fadd r1, ^r1, 0.234375")]
    out = rewrite.run(code, Policy(rewrites=("fma-identity",)))
    assert out.region == code and not out.accepted
    assert out.rejected and "r12 is not a float result" in out.rejected[0][1]
    planted = rewrite.fma_identity_unchecked(code, 0)
    assert texts(planted) == ["mov r6, r12", "fadd r1, ^r1, 0.234375"]
    verdict = rewrite.verify(code, planted)
    assert not verdict.ok and "r6" in verdict.detail  # a subnormal, an sNaN or a payload shows it
    with pytest.raises(RewriteError, match="refused"):
        rewrite.accept(code, planted)


def test_an_identity_with_a_positive_zero_addend_is_wrong_and_refused():
    code = [P("fmul r4, r11, r9"), P("ffma r6, r4, 1.0, 0.0"), P("fadd r1, ^r1, 0.234375")]
    assert rewrite.run(code, Policy(rewrites=("fma-identity",))).accepted == []  # not a candidate
    planted = [code[0], P("mov r6, r4"), code[2]]  # -0 * 1 + 0 is +0: mov would keep -0
    assert not rewrite.verify(code, planted).ok


def test_a_changed_constant_is_refused(region):
    planted = list(region)
    planted[5] = P("fadd r1, ^r1, 0.125")  # 0.234375 was the constant
    assert planted[5].size == region[5].size
    with pytest.raises(RewriteError, match="r1"):
        rewrite.accept(region, planted)


def test_a_broken_dependency_is_refused(region):
    order = [0, 1, 2, 4, 3, 5, 6, 7, 8]  # fmul r11, r9, r9 before the fmul r9 it reads
    with pytest.raises(RewriteError, match="depends on"):
        rewrite.check_order(region, order)
    assert not rewrite.verify(region, [region[k] for k in order]).ok


def test_an_addend_dependency_is_tracked():
    code = [P("fmul r5, r11, r9"), P("ffma r7, r6, u9, r5")]  # r5 is only the addend
    assert rewrite.depends(code[0], code[1])
    with pytest.raises(RewriteError, match="depends on"):
        rewrite.check_order(code, [1, 0])
    assert not rewrite.verify(code, code[::-1]).ok
    independent = [P("fmul r5, r11, r9"), P("ffma r7, r6, u9, r8")]
    assert rewrite.verify(independent, independent[::-1]).ok


def test_a_discarded_read_orders_like_a_write():
    assert rewrite.depends(P("fadd r2, ^r1, 0.234375"), P("fmul r3, r1, r1"))
    assert not rewrite.depends(P("fadd r2, r1, 0.234375"), P("fmul r3, r1, r1"))


def test_nothing_crosses_an_opaque_instruction(region):
    moved = region[:5] + [region[8], region[5], region[6], region[7]]  # the stop moved up
    verdict = rewrite.verify(region, moved)
    assert not verdict.ok and "opaque" in verdict.detail


def test_a_length_change_is_refused(region):
    longer = list(region)
    longer[5] = region[5].with_size(6)  # the same fadd in its long form, nothing given back
    verdict = rewrite.verify(region, longer)
    assert not verdict.ok and "length" in verdict.detail


def test_entries_keep_their_boundaries(region):
    at = rewrite.offsets(region)[3]  # code elsewhere may jump to fmul r9, r11, r9
    out = rewrite.run(region, Policy(entries=(at,)))
    assert at in rewrite.offsets(out.region)
    before = {i.text for i in region[:3]}
    assert {i.text for i in out.region if rewrite.offsets(out.region)[out.region.index(i)] < at} == before
    swapped = region[:2] + [region[3], region[2]] + region[4:]  # numerically fine, crosses the entry
    assert rewrite.verify(region, swapped).ok
    assert not rewrite.verify(region, swapped, Policy(entries=(at,))).ok


def test_a_16_bit_identity():
    code = g13.decode(bytes.fromhex("168442400400")) + [P("hfma r3l, r1l, 1.0, -0.0"), P("hadd r0h, ^r0h, 0.234375")]
    assert code[0].text == "hmul r1l, r1l, r2l"
    out = rewrite.run(code, Policy(rewrites=("fma-identity",)))
    assert texts(out.region) == ["hmul r1l, r1l, r2l", "mov r3l, r1l", "hadd r0h, ^r0h, 0.234375"]
    assert out.region[2].size == 6 and rewrite.verify(code, out.region).ok


def test_unknown_rewrites_are_refused(region):
    with pytest.raises(RewriteError, match="not one of"):
        rewrite.run(region, Policy(rewrites=("reassociate",)))


def test_what_is_verified_is_what_gets_written(region):
    planted = list(region)
    planted[7] = region[7].with_size(6)  # ffma r7, r5, r4, r0 has no 6-byte form
    verdict = rewrite.verify(region, planted)
    assert not verdict.ok and "cannot be encoded" in verdict.detail
