"""Where the time of one product goes under MLX on CUDA (run on the GPU machine):
per-product time of mx.compile'd batches of 8, 64 and 256 products, for a tiny
projection (256 x 256, the launch path alone) and for Llama's 4096 -> 14336, for
mlx_metile and stock MLX. Compare with the kernel alone from the MLX-free
harness (bench/cuda_probe/generated_harness.py).

    python bench/launch_overhead.py --out overhead.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx.core as mx  # noqa: E402

from bench.h200 import make_pool, product, timed  # noqa: E402


def tiny_pool(fmt: str, K: int, N: int) -> list:
    """8 weights (in L2: this measures the launch path, not memory)."""
    pool = []
    for i in range(8):
        w = mx.random.normal((N, K), key=mx.random.key(i)).astype(mx.bfloat16)
        pool.append((w,) if fmt == "bf16" else tuple(mx.quantize(w, group_size=64, bits=4)))
    mx.eval(pool)
    return pool


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    report = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "mlx": mx.__version__,
        "device_info": {k: str(v) for k, v in mx.device_info().items()},
        "cases": [],
    }
    for K, N, fmt in ((256, 256, "int4"), (256, 256, "bf16"), (4096, 14336, "int4")):
        pool = make_pool(fmt, K, N)[0] if K * N > 1 << 20 else tiny_pool(fmt, K, N)
        x = mx.random.normal((1, K)).astype(mx.bfloat16)
        for count in (8, 64, 256):
            row = {"K": K, "N": N, "format": fmt, "rows": 1, "products_per_eval": count}
            for impl in ("mlx_metile", "stock"):

                def batch(x, impl=impl, count=count, fmt=fmt, pool=pool):
                    return [product(impl, fmt, x, pool[i % len(pool)]) for i in range(count)]

                compiled = mx.compile(batch)
                row[impl] = {
                    "compiled_us": timed(lambda f=compiled, x=x: f(x)) / count * 1e6,
                    "eager_us": timed(lambda f=batch, x=x: f(x)) / count * 1e6,
                }
            report["cases"].append(row)
            print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
