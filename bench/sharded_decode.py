"""Decoding tokens/s of a tensor-parallel model, stock-sharded against patched-sharded, on real
ranks: mlx.launch with the ring backend over 127.0.0.1 (the default device of each rank: the CPU
here). Every rank builds the same random-weight Llama (bench/random_llama.py), shards it with
mlx-lm's `model.shard(group)` twice - one copy left stock, one through mlx_metile.patch - and
decodes batch-1 tokens (each token evaluated before the next is built), the two copies taking
turns round by round; rank 0 writes the JSON (machine, versions, date, load average).

    python -m bench.sharded_decode --ranks 2 --out bench/results/cpu-sharded-decode-<date>.json

Run without MLX_RANK in the environment it starts the ranks itself (and stops them after
--timeout seconds); under mlx.launch it is one rank.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--format", default="int4", choices=("bf16", "int4", "int8"))
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--intermediate", type=int, default=1408)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--prompt", type=int, default=16, help="prompt tokens (prefilled, not timed)")
    p.add_argument("--tokens", type=int, default=32, help="tokens decoded per round")
    p.add_argument("--rounds", type=int, default=5, help="rounds per variant (alternating)")
    p.add_argument("--timeout", type=float, default=540.0)
    p.add_argument("--out", type=Path, help="the JSON file (driver); a directory (rank)")
    return p.parse_args(argv)


def drive(args: argparse.Namespace, argv: list[str]) -> int:
    """Start the ranks, wait (bounded), write rank 0's result with the machine's facts."""
    from mlx_metile.integrations.launch import RankFailure, launch

    with tempfile.TemporaryDirectory() as tmp:
        rest = [a for i, a in enumerate(argv) if a != "--out" and (i == 0 or argv[i - 1] != "--out")]
        program = [sys.executable, "-m", "bench.sharded_decode", *rest, "--out", tmp]
        try:  # (log=False: the ranks' output comes to this terminal)
            (data,) = launch(args.ranks, program, Path(tmp), args.timeout, cwd=ROOT, results=[0], log=False)
        except RankFailure as failure:
            print(f"{failure}\n(see the ranks' output above)", file=sys.stderr)
            return 1
    text = json.dumps(data, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return 0


def rank(args: argparse.Namespace) -> int:
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    import mlx_metile as mt
    from mlx_metile.cli.machine import facts

    from .random_llama import random_llama

    group = mx.distributed.init(backend="ring", strict=True)

    def build():
        model = random_llama(args.format, args.layers, args.hidden, args.intermediate, args.head_dim)
        model.shard(group)
        mx.eval(model.parameters())
        return model

    stock, patched = build(), build()
    start = time.perf_counter()
    report = mt.patch(patched)
    patch_seconds = time.perf_counter() - start
    prompt = mx.random.randint(0, 8192, (1, args.prompt), key=mx.random.key(1))

    def decode(model) -> float:
        """Tokens/s of `args.tokens` greedy steps after a prefill (each token evaluated)."""
        cache = make_prompt_cache(model)
        y = mx.argmax(model(prompt, cache=cache)[:, -1], axis=-1)
        mx.eval(y)
        t = time.perf_counter()
        for _ in range(args.tokens):
            y = mx.argmax(model(y[:, None], cache=cache)[:, -1], axis=-1)
            mx.eval(y)
        return args.tokens / (time.perf_counter() - t)

    decode(stock), decode(patched)  # (warm-up: kernels built, caches made)
    rates: dict[str, list[float]] = {"stock": [], "patched": []}
    for _ in range(args.rounds):
        rates["stock"].append(decode(stock))
        rates["patched"].append(decode(patched))
    if group.rank() == 0:
        median = {k: statistics.median(v) for k, v in rates.items()}
        out = {
            **facts(),
            "load_average": os.getloadavg(),
            "cpu_count": os.cpu_count(),
            "backend": "ring",
            "ranks": group.size(),
            "model": {k: getattr(args, k) for k in ("format", "hidden", "layers", "intermediate", "head_dim")},
            "prompt": args.prompt,
            "tokens_per_round": args.tokens,
            "rounds": args.rounds,
            "decode_tokens_per_s": rates,
            "median_tokens_per_s": median,
            "patched_over_stock": median["patched"] / median["stock"],
            "patch_seconds": patch_seconds,
            "report": str(report),
        }
        (args.out / "rank0.json").write_text(json.dumps(out))
    mx.eval(mx.distributed.all_sum(mx.array(1.0), group=group, stream=mx.cpu))  # (no rank leaves early)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = arguments(argv)
    return rank(args) if "MLX_RANK" in os.environ else drive(args, argv)


if __name__ == "__main__":
    sys.exit(main())
