"""Python time per eager call of the CUDA path with MLX's kernel launch stubbed
out (so it runs on any machine): what mlx_metile's op adds on the host before
MLX sees a kernel, beside stock MLX's `mx.quantized_matmul` graph building.

    python tools/host/host_overhead.py [--out result.json]

Int4 group 64, K=4096, N=14336, 1 row; minimum over 5 repetitions of 20000 calls."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import mlx.core as mx  # noqa: E402

import mlx_metile as mt  # noqa: E402
from mlx_metile import dispatch  # noqa: E402
from mlx_metile.backends import cuda_compile  # noqa: E402
from mlx_metile.cli import machine  # noqa: E402


def per_call(fn, n: int = 20000, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out")
    args = ap.parse_args()
    w = (mx.random.normal((14336, 4096)) * 0.01).astype(mx.bfloat16)
    q = mx.quantize(w, group_size=64, bits=4)
    x = mx.random.normal((1, 4096)).astype(mx.bfloat16)
    mx.eval(q, x)
    stock = per_call(lambda: mx.quantized_matmul(x, *q, transpose=True, group_size=64, bits=4))
    out = [mx.zeros((1, 14336), mx.bfloat16)]
    # the CUDA path up to MLX's launch: backend forced, launch and compiled code stubbed
    dispatch.backend_of = lambda stream: "cuda"
    mx.fast.precompiled_cuda_kernel = lambda **kw: out
    cuda_compile.ptx = lambda artifact, arch=None: b"\0" * 20000
    ours = per_call(lambda: mt.quantized_linear(x, *q, group_size=64, bits=4))
    report = {
        **machine.facts(),
        "us_per_call_mlx_metile_launch_stubbed": ours * 1e6,
        "us_per_call_stock_graph_build": stock * 1e6,
    }
    print(json.dumps(report, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
