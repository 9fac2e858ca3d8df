"""The timing protocol, honest on noisy machines (shared cores, clocks that drift).

1. Compile: each entrant's first call is timed on its own (compile_s) and never ranked.
2. Calibrate: a sample is a batch of calls (each evaluated) that lasts native at least
   `min_sample_s`, its time divided by the calls; every entrant's batch has that many calls, so
   that no entrant's per-call time carries another batch size's overheads.
3. Rounds: every round samples native, a control (native's very function again, under another
   name) and each candidate once, in an order rotated by one each round; a candidate's ratio in a
   round is its time over native's in that round, so drift between rounds cancels.
4. Ranking on a pessimistic quantile: a candidate is faster where the `quantile` (0.8) of its
   ratios is below its threshold, slower or tied where the 1 - quantile one is not, undecided
   otherwise. Noise widens the quantiles, so a noisy machine asks for a clearer win. The
   threshold is 1 - its family's margin, times the control's median ratio where that is below 1
   (a bias of the order or of running second, which the candidate would enjoy too).
5. Rounds go on from `min_rounds` until every candidate is decided and the control does not
   look faster than native, or `max_rounds`, or the budget; undecided ones are inconclusive. Where
   the control still measures faster than native by the smallest margin (its high quantile below
   1 - margin), the timing is unreliable: every faster candidate is inconclusive, native is kept.
6. Finalists (the best `finalists` faster ones, and the incumbent wherever it is faster: rule 7)
   are confirmed pairwise against native: rounds of the two alone, in alternating order (native
   first, then the candidate first), judged as in 4. The best confirmed one wins; none confirmed,
   native is kept.
7. The incumbent - the candidate running what the hand rules give the call, if it is among the
   candidates - is held against the best of many variants, each within noise of it, whose best
   pessimistic ratio to native is biased low (a winner's curse). Where the incumbent passed the
   gate and is faster than native in the rounds, it is a finalist whatever its rank; where it is
   confirmed and the best confirmed candidate is another, that one is confirmed pairwise against
   the incumbent as in 6 (the incumbent in native's place, threshold 1 - the variant's margin:
   the order's bias cancels, both run in the same position) and wins only if confirmed; otherwise
   the incumbent is chosen. An incumbent not faster than native (or not confirmed) leaves the
   variants to native as in 6.

The clock is injectable (`Clock`): a test plants each entrant's times and checks every rule above
deterministically.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Protocol as TypingProtocol

import numpy as np

NATIVE = "native"
CONTROL = "native (control)"


class Clock(TypingProtocol):
    def now(self) -> float:
        """Seconds since some fixed point (the budget's clock)."""

    def batch(self, name: str, fn: Callable[[], object], calls: int) -> float:
        """Seconds that `calls` calls of `fn` (the entrant `name`'s, each evaluating its outputs) take."""


class WallClock:
    """time.perf_counter around the calls."""

    def now(self) -> float:
        return time.perf_counter()

    def batch(self, name: str, fn: Callable[[], object], calls: int) -> float:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return time.perf_counter() - t0


@dataclass(frozen=True)
class Protocol:
    min_sample_s: float = 0.01
    max_batch: int = 512
    min_rounds: int = 5
    max_rounds: int = 15
    confirm_min_rounds: int = 5
    confirm_max_rounds: int = 15
    quantile: float = 0.8
    finalists: int = 2
    budget_s: float = 300.0  # one tournament's timing; past it, whoever is undecided is inconclusive
    # bytes of weights the timed calls rotate through (copies of the site's, each call the next):
    # more than the GPU's L2 (the H200's is 60 MB) streams them from memory, as a model's layers
    # do; 0 times the site's weights alone
    pool_bytes: int = 0
    # products per timed call, each taking the previous one's output, compiled (mx.compile) and
    # evaluated once - as a model's projections run one after another inside one evaluation; 0: one
    # product per call, evaluated on its own (which times MLX's per-evaluation costs too). With a
    # chain, an `extra` candidate must be traceable by mx.compile (no host reads of its arrays).
    chain: int = 0

    def __post_init__(self) -> None:
        if not 0.5 <= self.quantile < 1.0:
            raise ValueError(f"quantile: expected a value in [0.5, 1), got {self.quantile}")
        if self.min_rounds < 2 or self.max_rounds < self.min_rounds:
            raise ValueError(
                f"min_rounds, max_rounds: expected 2 <= min <= max, got {self.min_rounds}, {self.max_rounds}"
            )
        if self.confirm_min_rounds < 2 or self.confirm_max_rounds < self.confirm_min_rounds:
            raise ValueError(
                "confirm_min_rounds, confirm_max_rounds: expected 2 <= min <= max, got "
                f"{self.confirm_min_rounds}, {self.confirm_max_rounds}"
            )
        if self.min_sample_s <= 0 or self.max_batch < 1 or self.finalists < 1 or self.budget_s <= 0:
            raise ValueError("min_sample_s, max_batch, finalists, budget_s: expected positive values")
        if self.chain < 0:
            raise ValueError(f"chain: expected a product count >= 0, got {self.chain}")
        if self.pool_bytes < 0:
            raise ValueError(f"pool_bytes: expected a byte count >= 0, got {self.pool_bytes}")

    def key(self) -> dict:
        return asdict(self)


@dataclass
class Timing:
    """One entrant's measurements: per-call seconds of each sample and ratios to native."""

    name: str
    compile_s: float = 0.0
    calls: int = 1  # calls per sample (calibrated)
    samples: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    confirm_ratios: list[float] = field(default_factory=list)
    incumbent_ratios: list[float] = field(default_factory=list)  # its time over the incumbent's (rule 7)
    threshold: float = 1.0
    # faster | slower | within margin | undecided | inconclusive | confirmed | not confirmed |
    # not confirmed vs incumbent | not a finalist | beaten | chosen
    status: str = ""
    reason: str = ""

    def quantiles(self, q: float, ratios: list[float] | None = None) -> tuple[float, float, float]:
        """(1 - q, median, q) quantiles of the ratios (NaN where there are none)."""
        r = self.ratios if ratios is None else ratios
        if not r:
            return (math.nan,) * 3
        lo, med, hi = np.quantile(np.array(r), [1 - q, 0.5, q])
        return float(lo), float(med), float(hi)

    def per_call_s(self) -> float:
        return float(np.median(self.samples)) if self.samples else math.nan

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Outcome:
    chosen: str
    timings: dict[str, Timing]
    rejected: dict[str, str]  # candidate -> why it was not chosen
    rounds: int = 0
    confirm_rounds: dict[str, int] = field(default_factory=dict)
    incumbent: str | None = None  # the incumbent (rule 7) where it was timed
    incumbent_rounds: int = 0  # rounds of the chosen-to-be variant against the incumbent
    control: tuple[float, float, float] = (math.nan, math.nan, math.nan)  # the control's quantiles
    seconds: float = 0.0


def _classify(t: Timing, q: float, threshold: float) -> str:
    lo, _, hi = t.quantiles(q)
    if hi < threshold:
        return "faster"
    if lo >= threshold:
        return "not faster"
    return "undecided"


def compete(
    native: Callable[[], object],
    candidates: dict[str, Callable[[], object]],
    margins: dict[str, float],
    protocol: Protocol | None = None,
    clock: Clock | None = None,
    incumbent: str | None = None,
) -> Outcome:
    """Time `candidates` (name -> a call evaluating its outputs) against `native` under the
    protocol; `margins` gives each candidate's margin (a fraction, e.g. 0.05). `incumbent`: the
    candidate running what the hand rules give the call (rule 7), if it is one of them."""
    if incumbent is not None and incumbent not in candidates:
        raise ValueError(f"incumbent: {incumbent!r} is not one of the candidates")
    p = protocol or Protocol()
    clock = clock or WallClock()
    start = clock.now()
    timings: dict[str, Timing] = {NATIVE: Timing(NATIVE), CONTROL: Timing(CONTROL)}
    fns: dict[str, Callable[[], object]] = {NATIVE: native, CONTROL: native}
    rejected: dict[str, str] = {}
    for name, fn in candidates.items():
        if name in (NATIVE, CONTROL):
            raise ValueError(f"candidates: {name!r} is the native entrant's name")
        timings[name] = Timing(name)
        fns[name] = fn
    if not candidates:
        return Outcome(NATIVE, timings, rejected, seconds=clock.now() - start)

    # 1: compile (the first call)
    for name, fn in list(fns.items()):
        try:
            timings[name].compile_s = clock.batch(name, fn, 1)
        except Exception as e:  # (the gate ran it: a failure here is the machine's or the timing's)
            if name == NATIVE:
                raise
            rejected[name] = f"error while timing: {type(e).__name__}: {e}"
            del fns[name]
    # 2: calibrate on native, doubling the batch until it lasts min_sample_s
    calls = 1
    while calls < p.max_batch and clock.batch(NATIVE, native, calls) < p.min_sample_s:
        calls = min(p.max_batch, 2 * calls)
    for t in timings.values():
        t.calls = calls
    names = [n for n in fns if n != NATIVE]
    contenders = [n for n in names if n != CONTROL]
    smallest_margin = min(margins.get(n, 0.05) for n in contenders) if contenders else 0.05
    order = [NATIVE, *names]

    def sample(name: str) -> float:
        t = timings[name]
        return clock.batch(name, fns[name], t.calls) / t.calls

    def pairwise(base: str, name: str, ratios: list[float], threshold: float) -> tuple[str, int]:
        """Rounds of `base` and `name` alone, alternating which runs first, `name`'s time over
        `base`'s appended to `ratios`: (confirmed | refuted | undecided, rounds)."""
        n, verdict = 0, "undecided"
        while n < p.confirm_max_rounds:
            pair = [base, name] if n % 2 == 0 else [name, base]
            times = {e: sample(e) for e in pair}
            ratios.append(times[name] / times[base])
            n += 1
            if n >= p.confirm_min_rounds:
                lo, _, hi = timings[name].quantiles(p.quantile, ratios)
                verdict = "confirmed" if hi < threshold else "refuted" if lo >= threshold else "undecided"
                if verdict != "undecided" or clock.now() - start > p.budget_s:
                    break
        return verdict, n

    def thresholds() -> dict[str, float]:
        median_control = timings[CONTROL].quantiles(p.quantile)[1]
        bias = min(1.0, median_control) if not math.isnan(median_control) else 1.0
        return {n: (1.0 - margins.get(n, smallest_margin)) * bias for n in contenders}

    # 3-5: interleaved, rotated rounds
    rounds, status = 0, {}
    while rounds < p.max_rounds:
        rotated = order[rounds % len(order) :] + order[: rounds % len(order)]
        times = {name: sample(name) for name in rotated}
        for name in names:
            timings[name].ratios.append(times[name] / times[NATIVE])
        for name in order:
            timings[name].samples.append(times[name])
        rounds += 1
        if rounds < p.min_rounds:
            continue
        limits = thresholds()
        status = {n: _classify(timings[n], p.quantile, limits[n]) for n in contenders}
        control_ok = timings[CONTROL].quantiles(p.quantile)[2] >= 1.0 - smallest_margin
        if control_ok and all(s != "undecided" for s in status.values()):
            break  # (a control that looks faster than native is given more rounds: it may be noise)
        if clock.now() - start > p.budget_s:
            break
    limits = thresholds()
    control_q = timings[CONTROL].quantiles(p.quantile)
    unreliable = control_q[2] < 1.0 - smallest_margin
    finalists = []
    for name in contenders:
        t = timings[name]
        t.threshold = limits[name]
        lo, med, hi = t.quantiles(p.quantile)
        need = f"needs q{_pct(p.quantile)} < {limits[name]:.3f}x"
        st = status.get(name, "undecided")
        if st == "faster" and unreliable:
            t.status = "inconclusive"
            rejected[name] = (
                f"timing unreliable: the control (native again) measured q{_pct(p.quantile)} {control_q[2]:.3f}x "
                f"of native over {rounds} rounds; this candidate's q{_pct(p.quantile)} {hi:.3f}x; native kept"
            )
        elif st == "faster":
            t.status = "faster"
            finalists.append(name)
        elif st == "not faster":
            t.status = "slower" if med > 1.0 else "within margin"
            rejected[name] = (
                f"{t.status}: median {med:.3f}x, q{_pct(1 - p.quantile)} {lo:.3f}x of native over {rounds} rounds ({need})"
            )
        else:
            t.status = "inconclusive"
            rejected[name] = (
                f"inconclusive after {rounds} rounds: q{_pct(1 - p.quantile)} {lo:.3f}x, q{_pct(p.quantile)} "
                f"{hi:.3f}x of native ({need}); native kept"
            )
        t.reason = rejected.get(name, "")
    timings[CONTROL].status = "control"
    finalists.sort(key=lambda n: timings[n].quantiles(p.quantile)[2])

    # 6: finalists confirmed pairwise against native (7: the incumbent among them wherever it is faster)
    inc = incumbent if incumbent in fns else None  # (one failing while timed is rejected above)
    confirmed, confirm_rounds = [], {}
    for rank, name in enumerate(finalists):
        t = timings[name]
        if rank >= p.finalists and name != inc:
            t.status = "not a finalist"
            rejected[name] = (
                f"not a finalist: q{_pct(p.quantile)} {t.quantiles(p.quantile)[2]:.3f}x, behind {finalists[: p.finalists]}"
            )
            t.reason = rejected[name]
            continue
        verdict, n = pairwise(NATIVE, name, t.confirm_ratios, t.threshold)
        confirm_rounds[name] = n
        lo, med, hi = t.quantiles(p.quantile, t.confirm_ratios)
        if verdict == "confirmed":
            t.status = "confirmed"
            confirmed.append(name)
        else:
            t.status = "not confirmed"
            rejected[name] = (
                f"not confirmed pairwise: q{_pct(p.quantile)} {hi:.3f}x, median {med:.3f}x of native over {n} "
                f"rounds (needs < {t.threshold:.3f}x)"
            )
            t.reason = rejected[name]

    def confirmed_hi(name: str) -> float:
        return timings[name].quantiles(p.quantile, timings[name].confirm_ratios)[2]

    confirmed.sort(key=confirmed_hi)
    chosen = confirmed[0] if confirmed else NATIVE
    best = chosen
    # 7: the best confirmed variant confirmed pairwise against a confirmed incumbent
    incumbent_rounds = 0
    if inc in confirmed and chosen != inc:
        t = timings[chosen]
        limit = 1.0 - margins.get(chosen, smallest_margin)
        verdict, incumbent_rounds = pairwise(inc, chosen, t.incumbent_ratios, limit)
        lo, med, hi = t.quantiles(p.quantile, t.incumbent_ratios)
        numbers = (
            f"q{_pct(p.quantile)} {hi:.3f}x, median {med:.3f}x of {inc}'s time over {incumbent_rounds} rounds "
            f"(needs < {limit:.3f}x)"
        )
        if verdict == "confirmed":
            timings[inc].status = "beaten"
            rejected[inc] = f"beaten by {chosen}, confirmed faster than the incumbent: {numbers}"
            timings[inc].reason = rejected[inc]
        else:
            t.status = "not confirmed vs incumbent"
            rejected[chosen] = f"not confirmed faster than the incumbent {inc}: {numbers}; the incumbent kept"
            t.reason = rejected[chosen]
            chosen = inc
    for name in confirmed:
        if name in (chosen, best, inc):
            continue
        mine = confirmed_hi(name)
        timings[name].status = "beaten"
        if chosen == inc and best != inc:
            rejected[name] = (
                f"behind {best} (confirmed q{_pct(p.quantile)} {mine:.3f}x against {confirmed_hi(best):.3f}x of "
                f"native), which was not confirmed faster than the incumbent {inc}"
            )
        else:
            rejected[name] = (
                f"beaten by {chosen}: confirmed q{_pct(p.quantile)} {mine:.3f}x against {confirmed_hi(chosen):.3f}x"
            )
        timings[name].reason = rejected[name]
    if chosen != NATIVE:
        timings[chosen].status = "chosen"
    timings[NATIVE].status = "chosen" if chosen == NATIVE else "beaten"
    return Outcome(
        chosen, timings, rejected, rounds, confirm_rounds, incumbent=inc, incumbent_rounds=incumbent_rounds,
        control=control_q, seconds=clock.now() - start,
    )  # fmt: skip


def _pct(q: float) -> int:
    return round(q * 100)
