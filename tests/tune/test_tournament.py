"""tournament(): planted candidates against native, on planted timings; what it decides runs."""

import re

import mlx.core as mx
import numpy as np
import pytest

import mlx_metile as mt
from mlx_metile.reference import fused_reference
from mlx_metile.tune import tournament

from . import planted
from .conftest import K, N
from .planted import PlantedClock, bimodal

MS = 1e-3


def x_like(rows=1):
    return mx.zeros((rows, K), mx.bfloat16)


PLANTED = [
    ("wrong element", planted.wrong_in_one_element),
    ("wrong beyond one row", planted.wrong_beyond_one_row),
    ("nan on a draw", planted.NanOnDraw(2)),
    ("slower", planted.right),
    ("bimodal", planted.right),
    ("tied", planted.right),
]
TIMES = {
    "native": 1 * MS,
    "cpu": 1 * MS,
    "wrong element": 0.1 * MS,
    "wrong beyond one row": 0.1 * MS,
    "nan on a draw": 0.1 * MS,
    "slower": 2 * MS,
    "bimodal": bimodal(0.6 * MS, 1.5 * MS),
    "tied": 1 * MS,
}


def test_planted_candidates_none_wrong_chosen_and_native_holds(weight, quick):
    d = tournament(x_like(), [weight], rows=4, extra=PLANTED, clock=PlantedClock(TIMES), protocol=quick, seed=3)
    assert d.chosen == "native" and d.bucket == 4
    why = d.rejected
    assert set(why) == {"cpu", *(name for name, _ in PLANTED)}
    assert why["wrong element"].startswith("accuracy, draw 0 (4 rows): output 0 [3, 32]")
    assert re.match(r"accuracy, draw 0 \(4 rows\): output 0 \[[123], \d+\]: \|error\| ", why["wrong beyond one row"])
    assert why["nan on a draw"].startswith("accuracy, draw 2") and "is nan where stock gives" in why["nan on a draw"]
    assert why["slower"].startswith("slower: median 2.000x")
    assert why["bimodal"].startswith("inconclusive after 6 rounds")
    assert why["tied"].startswith("within margin: median 1.000x") and why["cpu"].startswith("within margin")
    r = d.records
    assert {n for n, rec in r.items() if rec.gate == "fail"} == {
        "wrong element",
        "wrong beyond one row",
        "nan on a draw",
    }
    assert all(r[n].per_call_s is None and r[n].status == "gated out" for n in ("wrong element", "nan on a draw"))
    assert r["slower"].ratio == pytest.approx((2.0, 2.0, 2.0)) and r["slower"].per_call_s == pytest.approx(2 * MS)
    assert r["native"].gate == "reference" and r["native"].status == "chosen"
    assert r["native (control)"].status == "control"


def test_a_right_faster_candidate_wins_over_faster_wrong_ones(weight, quick):
    extra = [("good", planted.right), ("wrong element", planted.wrong_in_one_element)]
    times = {"native": MS, "cpu": MS, "good": 0.5 * MS, "wrong element": 0.05 * MS}
    d = tournament(x_like(), [weight], rows=2, extra=extra, clock=PlantedClock(times), protocol=quick)
    assert d.chosen == "good" and d.records["good"].status == "chosen"
    assert d.records["good"].confirm == pytest.approx((0.5, 0.5, 0.5))
    assert d.route is None  # an extra's decision cannot be installed: the dispatch runs its own routes only
    assert d.records["native"].status == "beaten"


def test_the_invariance_gate_rejects_bits_that_depend_on_the_rows(weight, quick):
    extra = [("truncates", planted.truncated_beyond_one_row)]
    times = {"native": MS, "cpu": 2 * MS, "truncates": 0.5 * MS}
    d = tournament(x_like(), [weight], rows=8, extra=extra, clock=PlantedClock(times), protocol=quick, invariant=True)
    assert d.chosen == "native" and d.rejected["truncates"].startswith("row invariance: row 0 alone differs")
    d = tournament(x_like(), [weight], rows=8, extra=extra, clock=PlantedClock(times), protocol=quick)
    assert d.chosen == "truncates"  # (accurate: without the invariance gate it may win)


def test_what_is_decided_runs_native_to_stock_and_the_cpu_path_elsewhere(weight, quick):
    slow_cpu = PlantedClock({"native": MS, "cpu": 3 * MS})
    fast_cpu = PlantedClock({"native": MS, "cpu": 0.3 * MS})
    assert tournament(x_like(), [weight], rows=1, clock=slow_cpu, protocol=quick, install=True).chosen == "native"
    assert tournament(x_like(), [weight], rows=8, clock=fast_cpu, protocol=quick, install=True).chosen == "cpu"
    for rows, backend in ((1, "mlx (tuned)"), (5, "cpu"), (8, "cpu"), (16, "cpu"), (2, "cpu")):
        x = mx.random.normal((rows, K), key=mx.random.key(rows)).astype(mx.bfloat16)
        with mt.trace() as t:
            y = mt.fused_linear(x, [weight])
        assert [r.backend for r in t.records] == [backend], rows
        if backend.startswith("mlx"):  # the stock composition itself: the same bits
            assert np.array_equal(
                np.array(y.view(mx.uint16)),
                np.array(fused_reference(x, [weight], [None], None, None)[0].view(mx.uint16)),
            )
    mt.tune.forget()
    with mt.trace() as t:
        mt.fused_linear(x_like(1), [weight])
    assert t.records[0].backend == "cpu"


def test_rows_as_a_sequence_give_one_decision_per_bucket(weight, quick):
    clock = PlantedClock({"native": MS, "cpu": 2 * MS})
    ds = tournament(x_like(), [weight], rows=[1, 3, 4, 5], clock=clock, protocol=quick)
    assert sorted(ds) == [1, 4, 8] and all(d.chosen == "native" for d in ds.values())
    assert len({d.key for d in ds.values()}) == 3
    text = str(ds[4])
    assert (
        text.startswith(f"q4g64 K={K} N={N} x bfloat16, rows <= 4: native (tuned in") and "rejected cpu: slower" in text
    )


def test_a_fused_call_with_bias_epilogue_and_residual(gate_up, quick):
    clock = PlantedClock({"native": MS, "cpu": 0.4 * MS})
    residual = mx.zeros((1, N), mx.bfloat16)
    d = tournament(x_like(), gate_up, "swiglu", residual, rows=4, clock=clock, protocol=quick)
    assert d.chosen == "cpu" and d.records["cpu"].gate == "pass"
    assert d.site == f"q4g64+q4g64 K={K} N={N},{N} x bfloat16 swiglu +residual"


def test_bad_arguments_are_named(weight):
    with pytest.raises(ValueError, match="rows: expected a positive row count"):
        tournament(x_like(), [weight], rows=0)
    with pytest.raises(ValueError, match="rows: expected positive row counts"):
        tournament(x_like(), [weight], rows=[1, -2])
    with pytest.raises(TypeError, match=r"extra\[0\]: expected a \(name, function\) pair"):
        tournament(x_like(), [weight], extra=[planted.right])
    with pytest.raises(ValueError, match="extra: candidate name 'cpu' is taken"):
        tournament(x_like(), [weight], extra=[("cpu", planted.right)])
    with pytest.raises(ValueError, match="draws: expected a positive number"):
        tournament(x_like(), [weight], draws=0)
    with pytest.raises(TypeError, match="weights: expected a list or tuple"):
        tournament(x_like(), weight)
    with pytest.raises(ValueError, match="x's last dimension"):
        tournament(mx.zeros((1, K + 1), mx.bfloat16), [weight])
    with pytest.raises(TypeError, match="store: expected True, False, None or a Store"):
        tournament(x_like(), [weight], store="here")


def test_the_cpu_path_is_the_incumbent_a_tied_extra_does_not_displace(weight, quick, store):
    times = {"native": MS, "cpu": 0.5 * MS, "mine": 0.49 * MS}
    extra = [("mine", planted.right)]
    d = tournament(x_like(), [weight], rows=4, extra=extra, clock=PlantedClock(times), protocol=quick, store=store)
    assert d.chosen == "cpu" and d.route is not None and d.route.backend == "cpu"
    assert d.records["cpu"].incumbent and not d.records["mine"].incumbent
    assert d.rejected["mine"].startswith("not confirmed faster than the incumbent cpu: q80 0.980x")
    assert d.records["mine"].versus_incumbent == pytest.approx((0.98, 0.98, 0.98))
    assert "cpu (incumbent)" in str(d)
    again = tournament(x_like(), [weight], rows=4, extra=extra, clock=PlantedClock(times), protocol=quick, store=store)
    assert again.from_store and again.records["mine"].versus_incumbent == pytest.approx((0.98, 0.98, 0.98))
    # clearly faster than the incumbent, the extra wins
    times["mine"] = 0.3 * MS
    d = tournament(x_like(), [weight], rows=4, extra=extra, clock=PlantedClock(times), protocol=quick)
    assert d.chosen == "mine" and d.rejected["cpu"].startswith("beaten by mine, confirmed faster than the incumbent")


def test_a_wrong_incumbent_is_gated_out_and_never_chosen(weight, quick, monkeypatch):
    from mlx_metile.tune import candidates as C

    def wrong_cpu(site, bucket):
        return [C.Candidate("cpu", "cpu", fn=planted.wrong_in_one_element, identity="wrong", incumbent=True)]

    monkeypatch.setitem(C.KINDS, "cpu", C.Kind("cpu", 0.05, wrong_cpu))
    times = {"native": MS, "cpu": 0.1 * MS, "good": 0.7 * MS}
    d = tournament(
        x_like(), [weight], rows=4, extra=[("good", planted.right)], clock=PlantedClock(times), protocol=quick
    )
    assert d.chosen == "good" and d.records["good"].versus_incumbent is None
    cpu = d.records["cpu"]
    assert cpu.incumbent and cpu.gate == "fail" and cpu.status == "gated out" and cpu.per_call_s is None
    assert d.rejected["cpu"].startswith("accuracy, draw 0")
