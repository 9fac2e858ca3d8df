"""Where batch-1 decoding's host time goes, stock against patched: cProfile of mlx-lm-style
overlapped decoding (each token's graph built and handed to mx.async_eval while the GPU runs the
last) on a random-weight Llama of Llama-3.1-8B's block shapes. cProfile slows Python calls, so
compare the two models' tables with each other, not with unprofiled timings; time spent inside
MLX's C++ (graph building, encoding) is charged to the Python function that called it.

    python bench/cuda_probe/decode_profile.py [--format int8] [--layers 32] [--tokens 64] [--top 25]"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.decode_host import model_of, next_token, prefilled  # noqa: E402


def decode(model, tokens: int) -> float:
    """Seconds per token of overlapped decoding (as decode_host.overlapped, without the splits)."""
    cache, prompt = prefilled(model)
    tok = prompt[:, -1:]
    start = time.perf_counter()
    for _ in range(tokens):
        nxt = next_token(model, tok, cache)
        mx.async_eval(nxt)
        mx.eval(tok)
        tok = nxt
    mx.eval(tok)
    return (time.perf_counter() - start) / tokens


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--format", default="int8")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    for impl in ("stock", "mlx_metile"):
        model = model_of(args.layers, args.format, impl)
        decode(model, 8)  # warm-up
        plain = min(decode(model, args.tokens) for _ in range(3))
        prof = cProfile.Profile()
        prof.enable()
        profiled = decode(model, args.tokens)
        prof.disable()
        out = io.StringIO()
        stats = pstats.Stats(prof, stream=out)
        stats.sort_stats("tottime").print_stats(args.top)
        print(
            f"## {impl} ({args.format}, {args.layers} layers): {plain * 1e3:.2f} ms per token unprofiled, "
            f"{profiled * 1e3:.2f} profiled; per token below: divide by {args.tokens}"
        )
        print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
