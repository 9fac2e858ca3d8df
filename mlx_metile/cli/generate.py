"""`mlx-metile generate`: load an mlx-lm model directory (or a hub name where the network allows),
patch it, print the patch report one line per kind, stream the text and end with mlx-lm's own
throughput and peak-memory figures; `--compare` runs the unpatched model on the same prompt too."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

from .errors import UsageError


def model_path(text: str, what: str) -> str:
    """A local model directory as given, or a hub name (owner/name) for mlx_lm.load to fetch."""
    path = Path(text).expanduser()
    if path.exists():
        if not path.is_dir():
            raise UsageError(f"{what}: {text} is a file, not an mlx-lm model directory")
        if not (path / "config.json").is_file():
            raise UsageError(f"{what}: {text} is not an mlx-lm model directory (it has no config.json)")
        return str(path)
    parts = text.split("/")
    if len(parts) == 2 and all(parts) and not text.startswith((".", "~")):
        return text  # a hub name: mlx_lm.load downloads it where the network allows
    raise UsageError(f"{what}: no such model directory: {text}")


def report_lines(report) -> list[str]:
    """The patch report, one line per kind: how many replaced (and their formats), declined and why."""
    lines = []
    kinds = Counter(kind for _, kind in report.replaced)
    for kind, count in kinds.items():
        formats = sorted({f for (_, k), f in report.formats.items() if k == kind and f})
        lines.append(f"  {kind:12s} {count} replaced" + (f" ({', '.join(formats)})" if formats else ""))
    reasons: dict[str, Counter] = {}
    for _, kind, why in report.declined:
        reasons.setdefault(kind, Counter())[why] += 1
    for kind, whys in reasons.items():
        said = "; ".join(f"{why} (x{n})" if n > 1 else why for why, n in whys.items())
        lines.append(f"  {kind:12s} {sum(whys.values())} declined: {said}")
    if report.max_diff is not None:
        within = report.verdict(long=False)
        if report.record.startswith("cached"):
            lines.append(f"  verified     {report.record} ({within} when recorded)")
        else:
            lines.append(f"  verified     {within}" + (f"; {report.record}" if report.record else ""))
    if report.phases:
        lines.append(f"  time         {report.timings()}")
    return lines


def _stream(model, tokenizer, args, draft=None, echo: bool = True):
    """(tokens, last response) of one generation, its text printed as it comes."""
    from mlx_lm.generate import stream_generate
    from mlx_lm.sample_utils import make_sampler

    kwargs = {"sampler": make_sampler(temp=args.temp)}
    if draft is not None:
        kwargs |= {"draft_model": draft, "num_draft_tokens": args.num_draft}
    tokens, last = [], None
    for response in stream_generate(model, tokenizer, args.prompt, max_tokens=args.max_tokens, **kwargs):
        tokens.append(response.token)
        last = response
        if echo:
            print(response.text, end="", flush=True)
    if echo:
        print()
    return tokens, last


def _figures(last) -> list[str]:
    # as mlx_lm.generate prints them
    return [
        f"Prompt: {last.prompt_tokens} tokens, {last.prompt_tps:.3f} tokens-per-sec",
        f"Generation: {last.generation_tokens} tokens, {last.generation_tps:.3f} tokens-per-sec",
        f"Peak memory: {last.peak_memory:.3f} GB",
    ]


def generate(args: argparse.Namespace) -> int:
    path = model_path(args.model, "--model")
    draft_path = model_path(args.draft_model, "--draft-model") if args.draft_model else None
    if args.max_tokens < 1:
        raise UsageError(f"--max-tokens: expected a positive number, got {args.max_tokens}")
    if args.temp < 0:
        raise UsageError(f"--temp: expected a temperature >= 0, got {args.temp}")

    import mlx_lm

    import mlx_metile as mt

    t0 = time.perf_counter()
    print(f"loading {path} ...", file=sys.stderr, flush=True)
    model, tokenizer = mlx_lm.load(path)
    draft = mlx_lm.load(draft_path)[0] if draft_path else None
    print(f"loaded in {time.perf_counter() - t0:.1f} s", file=sys.stderr)

    stock_tokens = None
    if args.compare:
        print("== stock MLX")
        stock_tokens, last = _stream(model, tokenizer, args, draft)
        print("\n".join(_figures(last)))

    report = mt.patch(model, **({"tune": True} if args.tune else {}))
    print(
        f"mlx_metile.patch: {len(report.replaced)} replaced, {len(report.declined)} declined in {report.seconds:.1f} s"
    )
    print("\n".join(report_lines(report)))
    if draft is not None:
        draft_report = mt.patch(draft)
        print(f"draft model: {len(draft_report.replaced)} replaced, {len(draft_report.declined)} declined")

    if args.compare:
        print("== mlx-metile")
    tokens, last = _stream(model, tokenizer, args, draft)
    print("\n".join(_figures(last)))
    if stock_tokens is not None:
        if args.temp > 0:
            print("tokens not compared: sampled at a temperature above 0")
        elif tokens == stock_tokens:
            print(f"greedy tokens match: yes ({len(tokens)} tokens)")
        else:
            first = next(
                (i for i, (a, b) in enumerate(zip(tokens, stock_tokens)) if a != b), min(len(tokens), len(stock_tokens))
            )
            print(f"greedy tokens match: no (first difference at token {first} of {len(tokens)})")
    return 0


def add_parser(sub) -> None:
    g = sub.add_parser("generate", help="generate from an mlx-lm model directory, patched")
    g.add_argument("--model", required=True, help="an mlx-lm model directory (or a hub name: owner/name)")
    g.add_argument("--prompt", required=True, help="the prompt text")
    g.add_argument("--max-tokens", type=int, default=100, help="tokens to generate (default 100)")
    g.add_argument("--temp", type=float, default=0.0, help="sampling temperature (default 0: greedy)")
    g.add_argument("--draft-model", default=None, help="a draft model directory: speculative decoding")
    g.add_argument("--num-draft", type=int, default=3, help="draft tokens per step (default 3)")
    g.add_argument("--compare", action="store_true", help="run the unpatched model first and compare tokens")
    g.add_argument("--tune", action="store_true", help="patch with tuning (the tournament)")
    g.set_defaults(func=generate)
