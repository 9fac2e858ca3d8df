"""mlx_metile ops against the stock MLX composition they replace, same run.

python -m pytest bench --benchmark-json bench/results/<machine>-<date>.json
python bench/render.py bench/results/<file>.json
"""

from __future__ import annotations

import itertools

import mlx.core as mx
import pytest

from . import workloads as W

WORKLOADS = {
    "linear_bf16": lambda: W.linear(mx.bfloat16),
    "quantized_int4_g64": lambda: W.quantized(4, 64),
    "quantized_int8_g64": lambda: W.quantized(8, 64),
    "fused_qkv_bf16": W.fused_qkv,
    "fused_gate_up_swiglu_int4": W.fused_gate_up_int4,
}
_built: dict[str, W.Workload] = {}


def _workload(name: str) -> W.Workload:
    if name not in _built:
        mx.random.seed(0)
        _built[name] = WORKLOADS[name]()
    return _built[name]


@pytest.mark.parametrize("impl", ["mlx_metile", "stock"])
@pytest.mark.parametrize("rows", W.ROWS)
@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_projection(benchmark, workload, rows, impl):
    wl = _workload(workload)
    x = mx.random.normal((rows, W.K)).astype(mx.bfloat16)
    fn = wl.ours if impl == "mlx_metile" else wl.stock
    counter = itertools.count()
    mx.eval(fn(x, 0))

    def call():
        mx.eval(fn(x, next(counter)))

    benchmark.group = f"{workload} rows={rows}"
    benchmark.extra_info.update(
        {"workload": workload, "rows": rows, "impl": impl, "K": W.K, "N": W.N, "weight_bytes": wl.weight_bytes}
    )
    benchmark.pedantic(call, rounds=20, iterations=1, warmup_rounds=2)
