"""Graph-building time of one Llama block (8B shapes, 1 row) and of its parts, stock against
patched, on the default device with the real launch path (on MLX's CUDA backend, the C++ launch):
nothing is evaluated, so this is the Python plus MLX's node construction a decode step pays per
block before any encoding. Minimum over alternated rounds of 300 calls each.

    python tools/host/block_build.py [--format int8] [--rounds 20]"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import mlx.core as mx  # noqa: E402

import mlx_metile as mt  # noqa: E402
from bench.random_llama import FORMATS, random_llama  # noqa: E402


def parts(block) -> dict:
    """name -> a call building that part of the block's graph for x (1, 1, hidden)."""
    attn, mlp = block["self_attn"], block["mlp"]
    norm = block["input_layernorm"]

    def qkv(x):
        return attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)

    return {
        "block": lambda x: block(x, None, None),
        "attention": lambda x: attn(norm(x), None, None),
        "q/k/v": qkv,
        "o_proj": lambda x: attn.o_proj(x),
        "mlp": lambda x: mlp(x) if type(mlp).__name__ != "FusedSwiGLU" else mlp(x, residual=x),
        "input norm": lambda x: norm(x),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--format", default="int8", choices=FORMATS)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    stock, patched = random_llama(args.format, layers=1), random_llama(args.format, layers=1)
    report = mt.patch(patched, verify=False)
    assert report and not report.declined, str(report)
    x = mx.random.normal((1, 1, 4096)).astype(mx.bfloat16)
    mx.eval(x)
    calls = {"stock": parts(stock.model.layers[0]), "mlx_metile": parts(patched.model.layers[0])}
    for table in calls.values():  # warm-up: kernels compiled, plans made
        for f in table.values():
            mx.eval(f(x))

    def per_call(f, n: int = 300) -> float:
        t = time.perf_counter()
        for _ in range(n):
            f(x)
        return (time.perf_counter() - t) / n * 1e6

    best = {impl: dict.fromkeys(table, float("inf")) for impl, table in calls.items()}
    for _ in range(args.rounds):
        for impl, table in calls.items():
            for name, f in table.items():
                best[impl][name] = min(best[impl][name], per_call(f))
    print(f"graph building per call, us ({args.format}, 1 row, {mx.default_device()}; min of {args.rounds} rounds)")
    for name in calls["stock"]:
        s, p = best["stock"][name], best["mlx_metile"][name]
        print(f"  {name:12s} stock {s:7.1f}  patched {p:7.1f}  ({p - s:+.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
