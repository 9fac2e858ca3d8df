"""Where one decoded token's time goes, stock against patched, on the default device: the
Python that builds the token's graph (`build`), then `mx.eval` of it (`eval`: MLX's host
work encoding the kernels plus the GPU time it waits for); and the same tokens overlapped
as mlx-lm's generate runs them (build, `mx.async_eval`'s own time, the wait). A random-weight Llama of
Llama-3.1-8B's block shapes built with mlx-lm's classes (nothing downloaded), batch 1.

    python bench/decode_host.py [--layers 32] [--format bf16|int4|int8] [--tokens 16] [--out result.json]

Medians over the tokens of 3 rounds, after one warm-up round."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import make_prompt_cache

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import mlx_metile as mt  # noqa: E402
from bench.random_llama import FORMATS, random_llama  # noqa: E402
from mlx_metile import ops  # noqa: E402


def model_of(layers: int, fmt: str, patched: bool) -> nn.Module:
    model = random_llama(fmt, layers)
    if patched:
        assert mt.patch(model, dense=True)  # (bf16 too, whatever the backend's default)
    return model


def prefilled(model: nn.Module) -> tuple[list, mx.array]:
    """A cache holding a 24-token random prompt, and its last token."""
    cache = make_prompt_cache(model)
    prompt = mx.random.randint(0, 8192, (1, 24))
    mx.eval(model(prompt, cache=cache))
    return cache, prompt[:, -1:]


def next_token(model: nn.Module, tok: mx.array, cache: list) -> mx.array:
    """The greedy next token's graph (not evaluated)."""
    return mx.argmax(model(tok, cache=cache)[:, -1], axis=-1)[:, None]


def per_token(model: nn.Module, tokens: int) -> tuple[list[float], list[float]]:
    """(build seconds, eval seconds) of each token after a 24-token prompt."""
    cache, tok = prefilled(model)
    build, run = [], []
    for _ in range(tokens):
        t0 = time.perf_counter()
        nxt = next_token(model, tok, cache)
        t1 = time.perf_counter()
        mx.eval(nxt)
        t2 = time.perf_counter()
        build.append(t1 - t0)
        run.append(t2 - t1)
        tok = nxt
    return build, run


def overlapped(model: nn.Module, tokens: int) -> tuple[list[float], ...]:
    """Tokens decoded as mlx-lm's generate does (the next token's graph built and handed to
    mx.async_eval while the GPU computes this one): per token (build, async_eval, wait)
    seconds - async_eval's own time is MLX encoding the graph on this thread - and the mean
    seconds per token over the whole loop."""
    cache, tok = prefilled(model)
    build, encode, wait = [], [], []
    start = time.perf_counter()
    for _ in range(tokens):
        t0 = time.perf_counter()
        nxt = next_token(model, tok, cache)
        t1 = time.perf_counter()
        mx.async_eval(nxt)
        t2 = time.perf_counter()
        mx.eval(tok)
        t3 = time.perf_counter()
        build.append(t1 - t0)
        encode.append(t2 - t1)
        wait.append(t3 - t2)
        tok = nxt
    mx.eval(tok)
    return build, encode, wait, [(time.perf_counter() - start) / tokens]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--format", choices=FORMATS, default="int4")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--out")
    args = ap.parse_args()
    rows = {}
    for patched in (False, True):
        model = model_of(args.layers, args.format, patched)
        per_token(model, 4)  # warm-up: kernels compiled and loaded
        build, run = [], []
        for _ in range(3):
            b, r = per_token(model, args.tokens)
            build += b
            run += r
        name = "mlx_metile" if patched else "stock"
        rows[name] = {"build_ms": statistics.median(build) * 1e3, "eval_ms": statistics.median(run) * 1e3}
        rows[name]["token_ms"] = rows[name]["build_ms"] + rows[name]["eval_ms"]
        print(f"{name:10s} build {rows[name]['build_ms']:.2f} ms  eval {rows[name]['eval_ms']:.2f} ms", flush=True)
        parts: tuple[list[float], ...] = ([], [], [], [])
        for _ in range(3):
            for acc, got in zip(parts, overlapped(model, args.tokens)):
                acc += got
        ms = [statistics.median(p) * 1e3 for p in parts]
        rows[name]["overlapped"] = dict(zip(("build_ms", "async_eval_ms", "wait_ms", "token_ms"), ms))
        print(
            f"{name:10s} overlapped: build {ms[0]:.2f} ms  async_eval {ms[1]:.2f} ms  wait {ms[2]:.2f} ms"
            f"  -> {ms[3]:.2f} ms per token ({1e3 / ms[3]:.1f} tokens/s)",
            flush=True,
        )
        del model
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": str(mx.default_device()),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "mlx": mx.__version__,
        "layers": args.layers,
        "format": args.format,
        "tokens_per_round": args.tokens,
        "mlx_env": {k: v for k, v in os.environ.items() if k.startswith("MLX_")},
        "cuda_launch": "native" if ops._native_launch() else "python",  # (where the CUDA path runs)
        "per_token": rows,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
