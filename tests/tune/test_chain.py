"""Protocol(chain=N): a timed call is one compiled evaluation of N products, each x made from the
previous product's output, so that candidates are timed as a model's chained projections run."""

import mlx.core as mx

from mlx_metile import fused_linear
from mlx_metile.tune import Protocol, tournament

from .conftest import K
from .planted import PlantedClock


def test_a_chained_call_traces_n_products_once_and_replays_them(weight):
    xs = []

    def mine(x, weights, biases=None, epilogue=None, residual=None):
        xs.append(x)
        return fused_linear(x, weights, biases=biases, epilogue=epilogue, residual=residual)

    protocol = Protocol(min_rounds=3, max_rounds=3, confirm_min_rounds=3, confirm_max_rounds=3, chain=8)
    d = tournament(mx.zeros((1, K), mx.bfloat16), [weight], rows=1, extra=[("mine", mine)], protocol=protocol,
                   clock=PlantedClock({"native": 1e-3, "mine": 1e-3, "cpu": 1e-3}), seed=1)  # fmt: skip
    gated = len(xs) - 8  # the gate's calls, then one trace of the chain: every later call replays it
    traced = xs[gated:]
    assert gated > 0 and len(traced) == 8 and d.records["mine"].gate == "pass"
    assert all(a is not b for a, b in zip(traced, traced[1:]))  # each product its own x (the chain)
    assert d.chosen == "native" and d.records["mine"].status == "within margin"


def test_chain_must_not_be_negative():
    import pytest

    with pytest.raises(ValueError, match="chain"):
        Protocol(chain=-1)
