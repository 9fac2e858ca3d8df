"""The timing protocol's rules, on planted timings (no time is measured)."""

import pytest

from mlx_metile.tune.protocol import CONTROL, NATIVE, Protocol, compete

from .planted import PlantedClock, bimodal

MS = 1e-3
P = Protocol(min_sample_s=10 * MS, min_rounds=4, max_rounds=10, confirm_min_rounds=4, confirm_max_rounds=10)


def noop():
    return None


def run(planted, margins=None, protocol=P):
    names = [n for n in planted if n not in (NATIVE, CONTROL)]
    clock = PlantedClock(planted)
    out = compete(noop, {n: noop for n in names}, margins or dict.fromkeys(names, 0.05), protocol, clock)
    return out, clock


def test_a_clearly_faster_candidate_is_confirmed_and_chosen():
    out, _ = run({"native": 1 * MS, "fast": 0.5 * MS})
    assert out.chosen == "fast"
    t = out.timings["fast"]
    assert t.status == "chosen" and t.ratios == [0.5] * out.rounds and t.confirm_ratios
    assert out.rounds == P.min_rounds  # decided at the first check: no more rounds than needed
    assert not out.rejected


def test_slower_and_tied_candidates_keep_native_with_reasons():
    out, _ = run({"native": 1 * MS, "slow": 2 * MS, "tied": 1 * MS})
    assert out.chosen == NATIVE
    assert out.rejected["slow"].startswith("slower: median 2.000x")
    assert out.rejected["tied"].startswith("within margin: median 1.000x")
    assert out.timings["slow"].status == "slower" and out.timings["tied"].status == "within margin"


def test_inside_the_margin_native_holds():
    # 3% faster against a 5% margin: not enough; against a 2% margin: chosen
    out, _ = run({"native": 1 * MS, "a bit": 0.97 * MS})
    assert out.chosen == NATIVE and "within margin" in out.rejected["a bit"] and "0.950x" in out.rejected["a bit"]
    out, _ = run({"native": 1 * MS, "a bit": 0.97 * MS}, margins={"a bit": 0.02})
    assert out.chosen == "a bit"


def test_a_bimodal_candidate_is_inconclusive_on_the_pessimistic_quantile():
    # 0.6x on two samples of three, 1.5x on the third: its median wins by 40%, its q80 loses
    out, _ = run({"native": 1 * MS, "bimodal": bimodal(0.6 * MS, 1.5 * MS)})
    t = out.timings["bimodal"]
    lo, med, hi = t.quantiles(P.quantile)
    assert med == pytest.approx(0.6) and hi == pytest.approx(1.5)
    assert out.chosen == NATIVE and t.status == "inconclusive"
    assert out.rounds == P.max_rounds and out.rejected["bimodal"].startswith("inconclusive after 10 rounds")


def test_a_candidate_that_wins_rounds_but_not_the_pairwise_confirmation_is_not_chosen():
    # fast in the rounds (its first 1 + 1 + 10 samples: compile, calibration's, rounds), slow after
    out, _ = run({"native": 1 * MS, "fades": lambda i: 0.5 * MS if i < 6 else 2 * MS})
    assert out.chosen == NATIVE
    assert out.timings["fades"].status == "not confirmed"
    assert out.rejected["fades"].startswith("not confirmed pairwise")


def test_the_best_confirmed_finalist_wins_and_the_others_are_recorded():
    out, _ = run({"native": 1 * MS, "good": 0.7 * MS, "best": 0.5 * MS, "third": 0.8 * MS})
    assert out.chosen == "best"
    assert out.rejected["good"].startswith("beaten by best")
    assert out.rejected["third"].startswith("not a finalist")  # (P.finalists = 2)


def test_a_control_faster_than_native_makes_the_timing_unreliable():
    # native's own function, timed again, measures 0.8x of native: the machine favours
    # whoever runs after native, so nobody's win is believed
    out, _ = run({"native": 1 * MS, CONTROL: 0.8 * MS, "fast": 0.5 * MS})
    assert out.chosen == NATIVE
    assert out.rejected["fast"].startswith("timing unreliable")


def test_a_bias_the_control_shows_raises_the_bar():
    # the control's median 0.97x: a candidate must beat native by its margin below that
    out, _ = run({"native": 1 * MS, CONTROL: 0.97 * MS, "fast": 0.93 * MS})
    assert out.chosen == NATIVE and out.timings["fast"].threshold == pytest.approx(0.95 * 0.97)
    out, _ = run({"native": 1 * MS, CONTROL: 0.97 * MS, "fast": 0.9 * MS})
    assert out.chosen == "fast"


def test_batches_are_calibrated_on_native_and_the_same_for_every_entrant():
    out, clock = run({"native": 1 * MS, "slow": 3 * MS})
    calls = {t.calls for t in out.timings.values()}
    assert calls == {16}  # 1, 2, 4, 8 last < 10 ms of native; 16 does not
    compiles = clock.log[:3]
    assert all(c == 1 for _, c in compiles) and {n for n, _ in compiles} == {NATIVE, CONTROL, "slow"}
    assert out.timings["slow"].compile_s == pytest.approx(3 * MS)


def test_rounds_rotate_the_order():
    out, clock = run({"native": 1 * MS, "a": 2 * MS, "b": 2 * MS})
    rounds = [n for n, _ in clock.log[4 + 5 :]]  # after 4 compiles and native's 5 calibration batches
    firsts = [rounds[i * 4] for i in range(4)]
    assert firsts == [NATIVE, CONTROL, "a", "b"]


def test_the_budget_ends_rounds_and_what_is_undecided_is_inconclusive():
    protocol = Protocol(min_sample_s=10 * MS, min_rounds=2, max_rounds=50, budget_s=1.0)
    out, clock = run({"native": 1 * MS, "bimodal": bimodal(0.6 * MS, 1.5 * MS)}, protocol=protocol)
    assert out.chosen == NATIVE and out.timings["bimodal"].status == "inconclusive"
    assert out.rounds < 50 and clock.t < 1.0 + 0.2


def test_a_candidate_failing_while_timed_is_rejected():
    def boom():
        raise RuntimeError("device lost")

    out = compete(noop, {"boom": boom}, {"boom": 0.05}, P, PlantedClock({"native": MS, "boom": MS}))
    assert out.chosen == NATIVE and out.rejected["boom"] == "error while timing: RuntimeError: device lost"


def test_no_candidates_keeps_native_without_timing():
    clock = PlantedClock({"native": MS})
    out = compete(noop, {}, {}, P, clock)
    assert out.chosen == NATIVE and clock.log == []


@pytest.mark.parametrize(
    "kwargs",
    [dict(quantile=0.4), dict(min_rounds=1), dict(max_rounds=2, min_rounds=3), dict(budget_s=0), dict(max_batch=0)],
)
def test_bad_protocols_are_refused_by_name(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        Protocol(**kwargs)


def test_a_control_that_looks_faster_for_a_while_gets_more_rounds():
    # the control's first rounds look 10% faster (noise), later ones do not: the rounds go on past
    # min_rounds until it settles, and the clear win is then believed
    def control(i):
        return 0.9 * MS if i < 7 else 1.0 * MS

    out, _ = run({"native": 1 * MS, CONTROL: control, "fast": 0.5 * MS})
    assert out.rounds > P.min_rounds and out.chosen == "fast"


# -- rule 7: the incumbent (the rules' own schedule) against its variants -------------------------
INC = "cuda"  # the name CUDA's rules' schedule has among the candidates


def run_with(planted, incumbent=INC, margin=0.03, protocol=P):
    names = [n for n in planted if n not in (NATIVE, CONTROL)]
    clock = PlantedClock(planted)
    out = compete(noop, {n: noop for n in names}, dict.fromkeys(names, margin), protocol, clock, incumbent=incumbent)
    return out, clock


def test_a_variant_tied_with_the_incumbent_leaves_the_incumbent_chosen():
    # both clearly beat native; the variant's 1.4% edge is inside the 3% margin it needs over the incumbent
    planted = {"native": 1 * MS, INC: 0.70 * MS, "cuda:tiles=2": 0.69 * MS}
    out, _ = run_with(planted)
    assert out.chosen == INC and out.incumbent == INC and out.timings[INC].status == "chosen"
    v = out.timings["cuda:tiles=2"]
    assert v.status == "not confirmed vs incumbent" and v.confirm_ratios  # (confirmed against native first)
    assert v.incumbent_ratios == pytest.approx([0.69 / 0.70] * out.incumbent_rounds)
    assert out.incumbent_rounds == P.confirm_min_rounds
    assert out.rejected["cuda:tiles=2"].startswith("not confirmed faster than the incumbent cuda: q80 0.986x")
    assert "(needs < 0.970x)" in out.rejected["cuda:tiles=2"] and INC not in out.rejected
    # without an incumbent the same timings pick the variant (best of the confirmed against native)
    out, _ = run_with(planted, incumbent=None)
    assert out.chosen == "cuda:tiles=2" and not out.timings["cuda:tiles=2"].incumbent_ratios


def test_a_variant_clearly_faster_than_the_incumbent_wins():
    out, _ = run_with({"native": 1 * MS, INC: 0.70 * MS, "cuda:stages=3": 0.5 * MS})
    assert out.chosen == "cuda:stages=3" and out.timings["cuda:stages=3"].status == "chosen"
    assert out.timings["cuda:stages=3"].incumbent_ratios == pytest.approx([0.5 / 0.7] * out.incumbent_rounds)
    assert out.timings[INC].status == "beaten"
    assert out.rejected[INC].startswith("beaten by cuda:stages=3, confirmed faster than the incumbent: q80 0.714x")


def test_the_pairwise_rounds_against_the_incumbent_alternate_which_runs_first():
    out, clock = run_with({"native": 1 * MS, INC: 0.70 * MS, "v": 0.5 * MS})
    pairs = [n for n, _ in clock.log[-2 * out.incumbent_rounds :]]
    assert pairs[:4] == [INC, "v", "v", INC] and set(pairs) == {INC, "v"}


@pytest.mark.parametrize("incumbent_ms", [1.2, 1.0])  # slower than native; tied with it
def test_an_incumbent_not_faster_than_native_leaves_the_variants_to_native(incumbent_ms):
    out, _ = run_with({"native": 1 * MS, INC: incumbent_ms * MS, "a": 0.7 * MS, "b": 0.69 * MS})
    assert out.chosen == "b" and out.incumbent_rounds == 0
    assert not out.timings["b"].incumbent_ratios and not out.timings[INC].confirm_ratios
    assert out.rejected["a"].startswith("beaten by b")
    assert out.rejected[INC].startswith("slower" if incumbent_ms > 1 else "within margin")


def test_an_incumbent_not_confirmed_against_native_leaves_the_variants_to_native():
    # fast in its compile call and the rounds (its samples 0-4), slow in the confirmation
    out, _ = run_with({"native": 1 * MS, INC: lambda i: 0.6 * MS if i < 5 else 1.2 * MS, "v": 0.7 * MS})
    assert out.timings[INC].status == "not confirmed" and out.rejected[INC].startswith("not confirmed pairwise")
    assert out.chosen == "v" and not out.timings["v"].incumbent_ratios


def test_an_incumbent_outside_the_best_finalists_is_still_confirmed():
    # four faster than native; the incumbent ranks last (P.finalists = 2) and is confirmed all the same
    planted = {"native": 1 * MS, "a": 0.64 * MS, "b": 0.645 * MS, "c": 0.648 * MS, INC: 0.65 * MS}
    out, _ = run_with(planted)
    assert out.timings[INC].confirm_ratios and INC in out.confirm_rounds
    assert out.timings["c"].status == "not a finalist" and not out.timings["c"].confirm_ratios
    assert out.chosen == INC  # a's 1.5% edge over it is inside the margin
    assert out.rejected["a"].startswith("not confirmed faster than the incumbent cuda")
    assert out.rejected["b"].startswith("behind a (confirmed q80 0.645x against 0.640x of native)")
    assert out.rejected["b"].endswith("which was not confirmed faster than the incumbent cuda")
    # without the rule the incumbent is no finalist
    out, _ = run_with(planted, incumbent=None)
    assert out.chosen == "a" and out.timings[INC].status == "not a finalist"


def test_an_incumbent_that_is_the_best_wins_as_before():
    out, _ = run_with({"native": 1 * MS, INC: 0.5 * MS, "v": 0.7 * MS})
    assert out.chosen == INC and out.incumbent_rounds == 0
    assert out.rejected["v"].startswith("beaten by cuda")


def test_an_incumbent_failing_while_timed_is_never_chosen():
    def boom():
        raise RuntimeError("device lost")

    clock = PlantedClock({"native": MS, INC: 0.1 * MS, "v": 0.5 * MS})
    out = compete(noop, {INC: boom, "v": noop}, {INC: 0.03, "v": 0.03}, P, clock, incumbent=INC)
    assert out.chosen == "v" and out.incumbent is None and out.rejected[INC].startswith("error while timing")


def test_an_incumbent_must_be_a_candidate():
    with pytest.raises(ValueError, match="incumbent: 'cuda' is not one of the candidates"):
        compete(noop, {"v": noop}, {"v": 0.03}, P, PlantedClock({"native": MS, "v": MS}), incumbent=INC)
