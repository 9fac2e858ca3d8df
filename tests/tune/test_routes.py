"""The hooks decisions reach the calls through: schedule.tuned (what choose reads) and the dispatch."""

import threading

import mlx.core as mx
import numpy as np

import mlx_metile as mt
from mlx_metile import dispatch
from mlx_metile.call import check
from mlx_metile.reference import fused_reference
from mlx_metile.schedule import Route, Shape, choose, row_bucket, tuned
from mlx_metile.targets import CPU

from .conftest import K, N


def spec_of(weight, rows=1):
    call = check("fused_linear", mx.zeros((rows, K), mx.bfloat16), [weight], [None], None, None)
    return dispatch.spec_of(call, CPU, None)


def backend_of(weight, rows):
    with mt.trace() as t:
        mt.fused_linear(mx.ones((rows, K), mx.bfloat16), [weight])
    return t.records[0].backend


def test_an_installed_native_decision_runs_stock_mlx_for_its_bucket_only(weight):
    spec, shape = spec_of(weight), Shape(K, N)
    tuned.install({tuned.key(CPU, spec, 4, shape): Route("cpu", "native", native=True)})
    assert [backend_of(weight, r) for r in (1, 3, 4, 5)] == ["cpu", "mlx (tuned)", "mlx (tuned)", "cpu"]
    x = mx.random.normal((3, K), key=mx.random.key(1)).astype(mx.bfloat16)
    got = mt.fused_linear(x, [weight])
    want = fused_reference(x, [weight], [None], None, None)[0]
    assert np.array_equal(np.array(got.view(mx.uint16)), np.array(want.view(mx.uint16)))


def test_a_decision_of_another_backend_is_not_applied(weight):
    tuned.install({tuned.key(CPU, spec_of(weight), 1, Shape(K, N)): Route("emulator", "native", native=True)})
    assert backend_of(weight, 1) == "cpu"


def test_forcing_takes_every_bucket_and_ends_with_its_block(weight):
    spec, shape = spec_of(weight), Shape(K, N)
    with tuned.forcing(CPU, spec, shape, Route("cpu", "native", native=True)):
        assert {backend_of(weight, r) for r in (1, 7, 40)} == {"mlx (tuned)"}
    assert backend_of(weight, 1) == "cpu" and not tuned.active()


def test_choose_returns_a_decision_s_schedule_and_the_kernel_cache_follows(weight):
    spec, shape = spec_of(weight), Shape(K, N)
    rules = choose(spec, 2, CPU, shape)
    other = rules.with_fields(NC=1)
    tuned.install({tuned.key(CPU, spec, 2, shape): Route("cpu", "narrow", schedule=other)})
    assert choose(spec, 2, CPU, shape) == other and choose(spec, 4, CPU, shape) != other
    route = tuned.lookup(CPU, spec, row_bucket(2), shape)
    assert dispatch._compiled(spec, 2, CPU, shape, 0, route).schedule == other
    tuned.forget()  # (the dispatch passes the route it looked up: the cache key follows the table)
    assert dispatch._compiled(spec, 2, CPU, shape, 0, tuned.lookup(CPU, spec, 2, shape)).schedule == rules


def test_launch_plans_are_keyed_by_the_tuned_table(weight):
    args = ("fused_linear", mx.zeros((1, K), mx.bfloat16), [weight], [None], None, None)
    before = dispatch.plan_key(*args)
    tuned.install({})
    assert dispatch.plan_key(*args) != before
    with tuned.forcing(CPU, spec_of(weight), Shape(K, N), Route("cpu", "native", native=True)):
        assert dispatch.plan_key(*args) not in (before, dispatch.plan_key(*args)[:-1])


def test_capture_collects_each_checked_call(weight, gate_up):
    with dispatch.capture() as calls:
        mt.fused_linear(mx.ones((2, K), mx.bfloat16), [weight])
        mt.fused_linear(mx.ones((1, K), mx.bfloat16), gate_up, epilogue="swiglu")
    assert [(c.rows, c.epilogue, len(c.weights)) for c in calls] == [(2, None, 1), (1, "swiglu", 2)]
    assert not dispatch._CAPTURES


def test_forcing_is_seen_only_by_the_thread_that_forces(weight):
    seen = {}
    with tuned.forcing(CPU, spec_of(weight), Shape(K, N), Route("cpu", "native", native=True)):
        worker = threading.Thread(target=lambda: seen.update(other=backend_of(weight, 2)))
        worker.start()
        worker.join()
        seen["mine"] = backend_of(weight, 2)
    assert seen == {"other": "cpu", "mine": "mlx (tuned)"}
