"""Where one decoded token's time goes, stock against patched, on the default device: the
Python that builds the token's graph (`build`), then `mx.eval` of it (`eval`: MLX's host
work encoding the kernels plus the GPU time it waits for); and the same tokens overlapped
as mlx-lm's generate runs them (build, `mx.async_eval`'s own time, the wait). A random-weight Llama of
Llama-3.1-8B's block shapes built with mlx-lm's classes (nothing downloaded), batch 1.

    python tools/host/decode_host.py [--layers 32] [--format bf16|int4|int8] [--tokens 16] [--rounds 3]
        [--impls stock,mlx_metile[,mlx_metile_norms_apart][,mlx_metile_norms_fused]] [--verify BATCH ROWS]
        [--out result.json]

mlx_metile is patch's defaults; mlx_metile_norms_apart / _fused are patch(fuse_norms=False / True)
(the RMSNorms as separate ops / the input norm inside the q/k/v kernel). Every model is
built first and the rounds alternate between them (drift on the machine reaches all alike);
medians over the tokens of all rounds, after one warm-up round each. --verify times instead a
speculative-decoding check: one forward of ROWS draft tokens for each of BATCH sequences on a
prefilled cache (trimmed back after each), evaluated, --tokens of them per round."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402
from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache  # noqa: E402

import mlx_metile as mt  # noqa: E402
from bench.random_llama import FORMATS, PATCH_OPTIONS, random_llama  # noqa: E402
from mlx_metile.backends.cuda_launch import launch_kind  # noqa: E402
from mlx_metile.cli import machine  # noqa: E402

PROMPT = 24  # tokens prefilled before the timed steps


def model_of(layers: int, fmt: str, impl: str) -> nn.Module:
    model = random_llama(fmt, layers)
    if impl != "stock":
        report = mt.patch(model, dense=True, **PATCH_OPTIONS[impl])  # (bf16 too, whatever the backend's default)
        assert report and not report.declined, str(report)
    return model


def prefilled(model: nn.Module, batch: int = 1) -> tuple[list, mx.array]:
    """A cache holding a random PROMPT-token prompt per sequence, and the prompts."""
    cache = make_prompt_cache(model)
    prompt = mx.random.randint(0, 8192, (batch, PROMPT))
    mx.eval(model(prompt, cache=cache))
    return cache, prompt


def verify_times(model: nn.Module, batch: int, rows: int, count: int) -> list[float]:
    """Seconds of `count` evaluated forwards of `rows` draft tokens per sequence after a 24-token prompt."""
    cache, prompt = prefilled(model, batch)
    draft = prompt[:, -rows:]
    times = []
    for _ in range(count):
        t0 = time.perf_counter()
        mx.eval(model(draft, cache=cache))
        times.append(time.perf_counter() - t0)
        trim_prompt_cache(cache, rows)
    return times


def next_token(model: nn.Module, tok: mx.array, cache: list) -> mx.array:
    """The greedy next token's graph (not evaluated)."""
    return mx.argmax(model(tok, cache=cache)[:, -1], axis=-1)[:, None]


def per_token(model: nn.Module, tokens: int) -> tuple[list[float], list[float]]:
    """(build seconds, eval seconds) of each token after a 24-token prompt."""
    cache, prompt = prefilled(model)
    tok = prompt[:, -1:]
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
    cache, prompt = prefilled(model)
    tok = prompt[:, -1:]
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


def decode_rounds(models: dict, args) -> dict:
    """Decoded tokens, alone and overlapped, rounds alternating between the models."""
    build, run = {n: [] for n in models}, {n: [] for n in models}
    parts: dict[str, tuple[list[float], ...]] = {n: ([], [], [], []) for n in models}
    for r in range(args.rounds):
        for name, model in models.items():
            b, e = per_token(model, args.tokens)
            build[name] += b
            run[name] += e
            for acc, got in zip(parts[name], overlapped(model, args.tokens)):
                acc += got
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    rows = {}
    for name in models:
        rows[name] = {"build_ms": statistics.median(build[name]) * 1e3, "eval_ms": statistics.median(run[name]) * 1e3}
        rows[name]["token_ms"] = rows[name]["build_ms"] + rows[name]["eval_ms"]
        ms = [statistics.median(p) * 1e3 for p in parts[name]]
        rows[name]["overlapped"] = dict(zip(("build_ms", "async_eval_ms", "wait_ms", "token_ms"), ms))
        rows[name]["overlapped_round_ms"] = [t * 1e3 for t in parts[name][3]]  # (the spread across rounds)
        print(
            f"{name:22s} build {rows[name]['build_ms']:.2f} ms  eval {rows[name]['eval_ms']:.2f} ms | overlapped:"
            f" build {ms[0]:.2f} ms  async_eval {ms[1]:.2f} ms  wait {ms[2]:.2f} ms"
            f"  -> {ms[3]:.2f} ms per token ({1e3 / ms[3]:.1f} tokens/s)",
            flush=True,
        )
    return rows


def verify_rounds(models: dict, args) -> dict:
    """Verify forwards (--verify BATCH ROWS), rounds alternating between the models."""
    batch, draft = args.verify
    times: dict[str, list[float]] = {n: [] for n in models}
    for r in range(args.rounds):
        for name, model in models.items():
            times[name] += verify_times(model, batch, draft, args.tokens)
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    rows = {}
    for name, t in times.items():
        rows[name] = {
            "verify_ms": statistics.median(t) * 1e3,
            "verify_ms_quartiles": [x * 1e3 for x in statistics.quantiles(t)] if len(t) > 1 else None,
        }
        print(f"{name:22s} verify {batch} x {draft} rows: {rows[name]['verify_ms']:.2f} ms", flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--format", choices=FORMATS, default="int4")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--impls", default="stock,mlx_metile")
    ap.add_argument("--verify", nargs=2, type=int, metavar=("BATCH", "ROWS"))
    ap.add_argument("--out")
    args = ap.parse_args()
    impls = args.impls.split(",")
    if not set(impls) <= {"stock", *PATCH_OPTIONS}:
        ap.error(f"--impls: expected some of stock,{','.join(PATCH_OPTIONS)}, got {args.impls}")
    if args.verify and not (args.verify[0] >= 1 and 1 <= args.verify[1] <= PROMPT):
        ap.error(f"--verify: expected BATCH >= 1 and 1 <= ROWS <= {PROMPT} (draft tokens come from the prompt)")
    models = {}
    for name in impls:
        models[name] = model_of(args.layers, args.format, name)
        per_token(models[name], 4)  # warm-up: kernels compiled and loaded
        print(f"{name}: built and warmed up", flush=True)
    if args.verify:
        rows = verify_rounds(models, args)
    else:
        rows = decode_rounds(models, args)
    report = {
        **machine.facts(),
        "layers": args.layers,
        "format": args.format,
        "tokens_per_round": args.tokens,
        "rounds": args.rounds,
        "verify": args.verify,
        "cuda_launch": launch_kind(),  # (where the CUDA path runs)
        "per_token": rows,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
