"""A call shape a tuned decision sends to stock MLX on CUDA is kept as a plan (reference.StockPlan)
and replayed without the checks, as the kernels' plans are: the replayed outputs are the stock
composition's, bit for bit, through the op and through a Projection."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np

import mlx_metile as mt
from mlx_metile import dispatch
from mlx_metile.call import check
from mlx_metile.reference import StockPlan, fused_reference
from mlx_metile.schedule import Route, decisions

K, N = 128, 64


def bits(a: mx.array) -> np.ndarray:
    return np.array(a.view(mx.uint16))


def test_a_native_decision_replays_stock_mlx_without_the_checks(fake_cuda, env, tmp_path):
    w = (mx.random.normal((N, K), key=mx.random.key(1)) * K**-0.5).astype(mx.bfloat16)
    q = mt.QuantizedWeight(*mx.quantize(w, group_size=64, bits=4), 64, 4)
    bias = mx.random.normal((N,), key=mx.random.key(2)).astype(mx.bfloat16)
    x = mx.random.normal((3, K), key=mx.random.key(3)).astype(mx.bfloat16)
    target = dispatch.target_of("cuda")
    call = check("fused_linear", x, [q], [bias], None, None)
    spec = dispatch.spec_of(call, target, None)
    entry = {"arch": target.arch, "spec": spec.name(), "K": K, "columns": N, "bucket": 4,
             "route": Route("cuda", "native", native=True).as_dict()}  # fmt: skip
    (tmp_path / "d.json").write_text(json.dumps({"format": decisions.FORMAT, "entries": [entry]}))
    env.set("MLX_METILE_CUDA_DECISIONS", str(tmp_path / "d.json"))
    dispatch.forget_plans()
    want = fused_reference(x, [q], [bias], None, None)[0]

    first = mt.fused_linear(x, [q], biases=[bias])
    plan = dispatch.planned("fused_linear", x, [q], [bias], None, None)
    assert isinstance(plan, StockPlan) and not fake_cuda  # no kernel launched: stock MLX ran
    x2 = mx.random.normal((3, K), key=mx.random.key(4)).astype(mx.bfloat16)
    again = mt.fused_linear(x2, [q], biases=[bias])  # replayed
    assert np.array_equal(bits(first), bits(want))
    assert np.array_equal(bits(again), bits(fused_reference(x2, [q], [bias], None, None)[0]))

    p = mt.Projection([q], biases=[bias])
    p(x2)  # (keeps the dispatch's plan)
    assert [type(v) for v in p._plans.values()] == [StockPlan]
    assert np.array_equal(bits(p(x2)), bits(again)) and not fake_cuda  # StockPlan.run_with
