"""mlx_metile ops against the stock MLX composition they replace, same run.

python -m pytest bench/test_bench_projections.py --benchmark-json bench/results/<machine>-projections-<date>.json
python bench/render.py bench/results/<machine>-projections-<date>.json
(--bench-k, --bench-n and --bench-pool size the weights: bench/conftest.py)
"""

from __future__ import annotations

import itertools

import mlx.core as mx
import pytest

from mlx_metile.cli import workloads as W

WORKLOADS = {
    "linear_bf16": lambda size: W.linear(size, mx.bfloat16),
    "quantized_int4_g64": lambda size: W.quantized(size, 4, 64),
    "quantized_int8_g64": lambda size: W.quantized(size, 8, 64),
    "quantized_int3_g64": lambda size: W.quantized(size, 3, 64),  # values straddle 32-bit words
    "quantized_int6_g64": lambda size: W.quantized(size, 6, 64),
    "fused_qkv_bf16": W.fused_qkv,
    "fused_gate_up_swiglu_int4": W.fused_gate_up_int4,
}
_built: dict[tuple[str, W.Size], W.Workload] = {}


def _workload(name: str, size: W.Size) -> W.Workload:
    if (name, size) not in _built:
        mx.random.seed(0)
        _built[(name, size)] = WORKLOADS[name](size)
    return _built[(name, size)]


@pytest.mark.parametrize("impl", ["mlx_metile", "stock"])
@pytest.mark.parametrize("rows", W.ROWS)
@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_projection(benchmark, bench_size, workload, rows, impl):
    wl = _workload(workload, bench_size)
    x = mx.random.normal((rows, bench_size.K)).astype(mx.bfloat16)
    fn = wl.ours if impl == "mlx_metile" else wl.stock
    counter = itertools.count()
    mx.eval(fn(x, 0))

    def call():
        mx.eval(fn(x, next(counter)))

    benchmark.group = f"{workload} rows={rows}"
    benchmark.extra_info.update(
        {
            "workload": workload,
            "rows": rows,
            "impl": impl,
            "K": bench_size.K,
            "N": bench_size.N,
            "weight_bytes": wl.weight_bytes,
        }
    )
    benchmark.pedantic(call, rounds=20, iterations=1, warmup_rounds=2)
