"""Protocol(pool_bytes=...): the timed calls rotate through copies of the site's weights (the same
values over other buffers), so that a GPU's L2 does not hold the one weight every call reads."""

import mlx.core as mx
import numpy as np

from mlx_metile.tune import Protocol, tournament
from mlx_metile.tune.site import Site

from .conftest import K, quantized
from .planted import PlantedClock


def test_pool_copies_hold_the_same_values_in_other_buffers(weight):
    bias = mx.ones((weight.N,), mx.bfloat16)
    site = Site.of(mx.zeros((1, K), mx.bfloat16), [weight], [bias])
    one = site.weight_bytes()
    assert one == weight.w.nbytes + weight.scales.nbytes + weight.biases.nbytes + bias.nbytes
    assert len(site.pool(0)) == 1 and site.pool(0)[0] is site
    pool = site.pool(3 * one + 1)
    assert len(pool) == 4 and pool[0] is site
    for p in pool[1:]:
        w = p.weights[0]
        assert (w.group_size, w.bits, w.mode) == (weight.group_size, weight.bits, weight.mode)
        for a, b in zip(w.arrays() + [p.biases[0]], weight.arrays() + [bias]):
            assert (
                a.dtype == b.dtype
                and a is not b
                and np.array_equal(np.array(a.view(mx.uint8)), np.array(b.view(mx.uint8)))
            )


def test_timed_calls_rotate_through_the_pool(weight):
    seen = []

    def mine(x, weights, biases=None, epilogue=None, residual=None):
        seen.append(id(weights[0]))
        from mlx_metile import fused_linear

        return fused_linear(x, weights, biases=biases, epilogue=epilogue, residual=residual)

    class CallingClock(PlantedClock):  # planted times, but every batch really calls its entrant
        def batch(self, name, fn, calls):
            for _ in range(calls):
                fn()
            return super().batch(name, fn, calls)

    w = quantized(weight.N, K, 7)
    protocol = Protocol(min_rounds=3, max_rounds=3, confirm_min_rounds=3, confirm_max_rounds=3, pool_bytes=5 * 2**10)
    tournament(mx.zeros((1, K), mx.bfloat16), [w], rows=1, extra=[("mine", mine)], protocol=protocol,
               clock=CallingClock({"native": 1e-3, "mine": 1e-3, "cpu": 1e-3}), seed=1)  # fmt: skip
    site = Site.of(mx.zeros((1, K), mx.bfloat16), [w])
    copies = -(-5 * 2**10 // site.weight_bytes())
    assert copies >= 2 and len(set(seen)) >= copies  # the gate's calls plus every copy in timing
