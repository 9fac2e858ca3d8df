"""Where one decoded token's time goes, stock against patched, on the default device: the
Python that builds the token's graph (`build`), then `mx.eval` of it (`eval`: MLX's host
work encoding the kernels plus the GPU time it waits for). A random-weight Llama of
Llama-3.1-8B's block shapes built with mlx-lm's classes (nothing downloaded), batch 1.

    python bench/decode_host.py [--layers 32] [--format int4|bf16] [--tokens 16] [--out result.json]

Medians over the tokens of 3 rounds, after one warm-up round."""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import llama
from mlx_lm.models.cache import make_prompt_cache

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import mlx_metile as mt  # noqa: E402


def model_of(layers: int, fmt: str, patched: bool) -> nn.Module:
    args = llama.ModelArgs(
        model_type="llama",
        hidden_size=4096,
        num_hidden_layers=layers,
        intermediate_size=14336,
        num_attention_heads=32,
        num_key_value_heads=8,
        rms_norm_eps=1e-5,
        vocab_size=8192,
        tie_word_embeddings=False,
    )
    mx.random.seed(0)
    model = llama.Model(args)
    model.set_dtype(mx.bfloat16)
    if fmt == "int4":
        nn.quantize(model, group_size=64, bits=4)
    mx.eval(model.parameters())
    if patched:
        assert mt.patch(model)
    return model


def per_token(model: nn.Module, tokens: int) -> tuple[list[float], list[float]]:
    """(build seconds, eval seconds) of each token after a 24-token prompt."""
    cache = make_prompt_cache(model)
    tok = mx.random.randint(0, 8192, (1, 24))
    mx.eval(model(tok, cache=cache))
    tok = tok[:, -1:]
    build, run = [], []
    for _ in range(tokens):
        t0 = time.perf_counter()
        nxt = mx.argmax(model(tok, cache=cache)[:, -1], axis=-1)[:, None]
        t1 = time.perf_counter()
        mx.eval(nxt)
        t2 = time.perf_counter()
        build.append(t1 - t0)
        run.append(t2 - t1)
        tok = nxt
    return build, run


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--format", choices=("int4", "bf16"), default="int4")
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
        "per_token": rows,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
