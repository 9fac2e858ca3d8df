"""`mlx-metile tune`: decide a projection's (or a local mlx-lm model's) routes at each row bucket
against stock MLX, into the tuner's store, with a progress bar on stderr; `mlx-metile tune --show`
prints the store's decisions and the candidates each rejected, with the reasons."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import UsageError

DTYPES = ("float32", "float16", "bfloat16")


def run(args: argparse.Namespace) -> int:
    import mlx.core as mx

    from ..tune import Store, autotune, tournament
    from ..tune.autotune import stderr_progress
    from ..tune.show import show

    store = Store(args.store) if args.store else Store()
    if args.show:
        print(show(store))
        return 0
    if args.model:
        if not Path(args.model).is_dir():
            raise UsageError(f"--model: {args.model!r} is not a local model directory (nothing is downloaded)")
        import mlx_lm

        from ..integrations import patch

        model, _ = mlx_lm.load(args.model)
        print(patch(model), file=sys.stderr)
        print(autotune(model, rows=tuple(args.rows), store=store, retune=args.retune, progress=True))
        return 0
    from ..formats import QuantizedWeight
    from ..schedule import row_bucket

    if min(args.k, *args.n, *args.rows) < 1:
        raise UsageError("--k, --n, --rows: expected positive numbers")
    dtype = getattr(mx, args.dtype)
    mx.random.seed(0)
    weights = []
    for n in args.n:
        w = (mx.random.normal((n, args.k)) * args.k**-0.5).astype(dtype)
        if args.bits:
            w = QuantizedWeight(*mx.quantize(w, group_size=args.group, bits=args.bits), args.group, args.bits)
        weights.append(w)
    x = mx.zeros((1, args.k), dtype)
    residual = mx.zeros((1, args.n[0]), dtype) if args.residual else None
    buckets = len({row_bucket(r) for r in args.rows})
    decisions = tournament(
        x, weights, args.epilogue, residual, rows=list(args.rows), store=store, retune=args.retune,
        progress=stderr_progress(buckets),
    )  # fmt: skip
    for d in decisions.values():
        print(d)
    return 0


def add_parser(sub) -> None:
    t = sub.add_parser("tune", help="decide routes against stock MLX into the tuner's store (--show: print it)")
    t.add_argument("--show", action="store_true", help="print the store's decisions and rejections, tune nothing")
    t.add_argument("--store", default=None, help="the store's path (default: MLX_METILE_TUNE_STORE or the cache's)")
    t.add_argument("--model", default=None, help="a local mlx-lm model directory: patch it and tune its calls")
    t.add_argument("--dtype", default="bfloat16", choices=DTYPES)
    t.add_argument("--k", type=int, default=2048)
    t.add_argument("--n", type=int, nargs="+", default=[2048], help="one N per weight (several: one fused call)")
    t.add_argument("--bits", type=int, default=4, help="affine bits of random weights (0: dense)")
    t.add_argument("--group", type=int, default=64)
    t.add_argument("--epilogue", default=None, choices=["swiglu", "gelu", "gelu_approx", "silu"])
    t.add_argument("--residual", action="store_true")
    t.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    t.add_argument("--retune", action="store_true", help="decide again where the store has a decision")
    t.set_defaults(func=run)
