"""Python time of one patched Llama block (8B shapes, int4 group 64, 1 row) with MLX's CUDA launch
stubbed out, so it runs on any machine, against the stock block in the same process: what the
patched modules add on the host before MLX sees a kernel. Minimum over 30 alternated rounds of
300 calls.

    python tools/host/block_host.py"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import mlx.core as mx  # noqa: E402

import mlx_metile as mt  # noqa: E402
from bench.random_llama import random_llama  # noqa: E402
from mlx_metile import dispatch  # noqa: E402
from mlx_metile.backends import cuda_compile  # noqa: E402


def main() -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    stock, patched = random_llama("int4", layers=1), random_llama("int4", layers=1)
    # the CUDA path up to MLX's launch: backend forced, launch and compiled code stubbed
    dispatch.backend_of = lambda stream: "cuda"
    mx.fast.precompiled_cuda_kernel = lambda **kw: [
        mx.zeros(s, d) for s, d in zip(kw["output_shapes"], kw["output_dtypes"])
    ]
    cuda_compile.ptx = lambda artifact, arch=None: b"\0" * 20000
    mt.patch(patched, verify=False, max_rows=32)
    x = mx.random.normal((1, 1, 4096)).astype(mx.bfloat16)
    mx.eval(x)

    def per_call(layer, n: int = 300) -> float:
        t = time.perf_counter()
        for _ in range(n):
            layer(x, None, None)
        return (time.perf_counter() - t) / n * 1e6

    blocks = (stock.model.layers[0], patched.model.layers[0])
    per_call(blocks[1], 50)
    best = [float("inf"), float("inf")]
    for _ in range(30):
        best = [min(b, per_call(layer)) for b, layer in zip(best, blocks)]
    print(f"one block's Python: stock {best[0]:.1f} us, patched {best[1]:.1f} us (launch stubbed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
