"""pytest-benchmark suite for MLX's CUDA backend: mlx_metile, stock MLX and, for bf16, PyTorch's
F.linear, in the same run, on the model shapes of bench/cases.py and the fused gate/up+SwiGLU and
q/k/v products, each timed call streaming the next weight of a pool larger than the L2. Each
round is one eager call and a synchronisation, so host overhead is included (bench/h200.py
reports compiled-graph figures beside eager ones). Skipped without a CUDA device.

    python -m pytest bench/test_bench_cuda.py --benchmark-json bench/results/h200-pytest-eager-<date>.json
"""

from __future__ import annotations

import itertools

import mlx.core as mx
import pytest

from . import cases

pytestmark = pytest.mark.skipif(not mx.cuda.is_available(), reason="needs MLX's CUDA backend and a GPU")

SHAPES = ["llama8b_gateup_4096x14336", "llama8b_down_14336x4096", "qwen1.5b_gateup_1536x8960"]
_pools: dict[tuple[str, str], tuple[list, int]] = {}


def _pool(shape: str, fmt: str):
    """(pool, bytes per entry) of a single or a fused shape of bench/cases.py."""
    if (shape, fmt) not in _pools:
        _pools.clear()  # one pool resident at a time: each is about 480 MB
        if shape in cases.FUSED_SHAPES:
            K, widths, _ = cases.FUSED_SHAPES[shape]
            _pools[(shape, fmt)] = cases.make_pool(fmt, K, sum(widths), widths)
        else:
            K, N = cases.SHAPES[shape]
            _pools[(shape, fmt)] = cases.make_pool(fmt, K, N)
    return _pools[(shape, fmt)]


@pytest.mark.parametrize("impl", ["mlx_metile", "stock", "torch"])
@pytest.mark.parametrize("rows", cases.ROWS)
@pytest.mark.parametrize("fmt", ["bf16", "int4", "int8"])
@pytest.mark.parametrize("shape", SHAPES)
def test_cuda_projection(benchmark, shape, fmt, rows, impl):
    K, N = cases.SHAPES[shape]
    pool, nbytes = _pool(shape, fmt)
    counter = itertools.count()
    if impl == "torch":
        torch = pytest.importorskip("torch")
        if fmt != "bf16" or not torch.cuda.is_available():
            pytest.skip("PyTorch is measured for bf16 (F.linear) only")
        weights = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) * K**-0.5 for _ in range(len(pool))]
        x_t = torch.randn(rows, K, device="cuda", dtype=torch.bfloat16)

        def call():
            torch.nn.functional.linear(x_t, weights[next(counter) % len(weights)])
            torch.cuda.synchronize()

    else:
        x = mx.random.normal((rows, K)).astype(mx.bfloat16)

        def call():
            mx.eval(cases.product(impl, fmt, x, pool[next(counter) % len(pool)]))

    benchmark.group = f"{shape} {fmt} rows={rows}"
    benchmark.extra_info.update({"shape": shape, "format": fmt, "rows": rows, "impl": impl, "weight_bytes": nbytes})
    benchmark.pedantic(call, rounds=30, iterations=1, warmup_rounds=3)


@pytest.mark.parametrize("impl", ["mlx_metile", "stock"])
@pytest.mark.parametrize("rows", cases.ROWS)
@pytest.mark.parametrize("fmt", ["bf16", "int4", "int8"])
@pytest.mark.parametrize("shape", list(cases.FUSED_SHAPES))
def test_cuda_fused(benchmark, shape, fmt, rows, impl):
    """One fused kernel (mlx_metile) against stock MLX's separate products (then SwiGLU)."""
    K, _, epilogue = cases.FUSED_SHAPES[shape]
    pool, nbytes = _pool(shape, fmt)
    counter = itertools.count()
    x = mx.random.normal((rows, K)).astype(mx.bfloat16)

    def call():
        mx.eval(cases.fused_product(impl, fmt, x, pool[next(counter) % len(pool)], epilogue))

    benchmark.group = f"{shape} {fmt} rows={rows}"
    benchmark.extra_info.update({"shape": shape, "format": fmt, "rows": rows, "impl": impl, "weight_bytes": nbytes})
    benchmark.pedantic(call, rounds=30, iterations=1, warmup_rounds=3)
