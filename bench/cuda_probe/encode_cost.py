"""Host cost per op on MLX's CUDA backend, ours against stock: a chain of N int4 projections
y = W y (K = N = 4096, group 64, 1 row, bf16) built, handed to mx.async_eval, then waited for.
Per op: `build` (Python graph building), `encode` (mx.async_eval's own time: MLX encoding the
kernels on this thread) and `total` (build + encode + wait).

    python bench/cuda_probe/encode_cost.py [--ops 512]"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import mlx_metile as mt  # noqa: E402


def chain(step, x, ops: int) -> tuple[float, float, float]:
    t0 = time.perf_counter()
    y = x
    for _ in range(ops):
        y = step(y)
    t1 = time.perf_counter()
    mx.async_eval(y)
    t2 = time.perf_counter()
    mx.eval(y)
    t3 = time.perf_counter()
    return (t1 - t0) / ops * 1e6, (t2 - t1) / ops * 1e6, (t3 - t0) / ops * 1e6


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=512)
    args = ap.parse_args()
    w = (mx.random.normal((4096, 4096)) * 0.01).astype(mx.bfloat16)
    q = mx.quantize(w, group_size=64, bits=4)
    x = mx.random.normal((1, 4096)).astype(mx.bfloat16)
    mx.eval(q, x)
    proj = mt.Projection([mt.QuantizedWeight(*q, 64, 4)])
    steps = {
        "stock quantized_matmul": lambda y: mx.quantized_matmul(y, *q, transpose=True, group_size=64, bits=4),
        "mlx_metile Projection": proj,
        "mlx_metile quantized_linear": lambda y: mt.quantized_linear(y, *q, group_size=64, bits=4),
    }
    for name, step in steps.items():
        chain(step, x, 16)  # warm-up: compiled, loaded
        runs = [chain(step, x, args.ops) for _ in range(5)]
        build, encode, total = (min(r[i] for r in runs) for i in range(3))
        print(f"{name:28s} per op: build {build:6.2f} us  encode {encode:6.2f} us  total {total:6.2f} us", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
