"""`mlx-metile demo` / `python -m mlx_metile demo`: run projections on the
default device, check them against stock MLX and print both timings.
`mlx-metile tune`: decide a projection's (or a local mlx-lm model's) routes at each row bucket
against stock MLX, into the tuner's store; `mlx-metile tune --show` prints the store's decisions
and the candidates they rejected, with the reasons."""

from __future__ import annotations

import argparse
import sys
import time

import mlx.core as mx
import numpy as np


def _time(fn, repeat: int) -> float:
    """Median seconds of `repeat` evaluations (after one warm-up)."""
    mx.eval(fn())
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        mx.eval(fn())
        samples.append(time.perf_counter() - t0)
    return float(np.median(samples))


def _f64(a: mx.array) -> np.ndarray:
    return np.array(a.astype(mx.float32), dtype=np.float64)


def demo(args: argparse.Namespace) -> int:
    import mlx_metile as mt
    from mlx_metile.reference import dequantize_exact

    dtype = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}[args.dtype]
    K, N = args.k, args.n
    device = mx.default_device()
    print(f"mlx-metile {mt.__version__} demo on {device} (MLX {mx.__version__}), {args.dtype}, K={K}, N={N}")
    mx.random.seed(0)
    w = (mx.random.normal((N, K)) * K**-0.5).astype(dtype)
    b = mx.random.normal((N,)).astype(dtype)
    wq, sq, bq = mx.quantize(w, group_size=64, bits=4)
    print(
        f"{'op':28s} {'rows':>4s} {'err ours':>10s} {'err stock':>10s} {'ok':>3s} {'mlx-metile':>11s} {'stock MLX':>11s}"
    )
    w64, b64 = _f64(w), _f64(b)
    wq64 = dequantize_exact(wq, sq, bq, 64, 4)
    ulp = {mx.float32: 2.0**-24, mx.float16: 2.0**-11, mx.bfloat16: 2.0**-8}[dtype]
    failures = 0
    for rows in args.rows:
        x = mx.random.normal((rows, K)).astype(dtype)
        x64 = _f64(x)
        cases = [
            ("linear (+bias)", lambda x=x: mt.linear(x, w, b), lambda x=x: x @ w.T + b, x64 @ w64.T + b64, w64),
            (
                "quantized_linear int4 g64",
                lambda x=x: mt.quantized_linear(x, wq, sq, bq, group_size=64, bits=4),
                lambda x=x: mx.quantized_matmul(x, wq, sq, bq, transpose=True, group_size=64, bits=4),
                x64 @ wq64.T,
                wq64,
            ),
        ]
        for name, ours, stock, exact, w_exact in cases:
            with mt.trace() as tr:
                y = ours()
            err_ours = np.abs(_f64(y) - exact)
            err_stock = np.abs(_f64(stock()) - exact).max()
            # our contract: one rounding of the output plus f32 accumulation error
            tol = ulp * np.abs(exact) + K * 2.0**-24 * (np.abs(x64) @ np.abs(w_exact).T) + 1e-12
            ok = bool((err_ours <= tol).all())
            failures += not ok
            t_ours, t_stock = _time(ours, args.repeat), _time(stock, args.repeat)
            backend = tr.records[0].backend if tr.records else "?"
            print(
                f"{name:28s} {rows:4d} {err_ours.max():10.3g} {err_stock:10.3g} {'yes' if ok else 'NO':>3s} "
                f"{t_ours * 1e3:9.3f}ms {t_stock * 1e3:9.3f}ms  [{backend}]"
            )
    print("errors are max |result - float64 reference|; ok = within one output rounding + f32 accumulation")
    print("all mlx-metile results are within tolerance" if not failures else f"{failures} results out of tolerance")
    return 1 if failures else 0


def tune(args: argparse.Namespace) -> int:
    from mlx_metile.tune import Store, autotune, tournament
    from mlx_metile.tune.autotune import stderr_progress
    from mlx_metile.tune.show import show

    store = Store(args.store) if args.store else Store()
    if args.show:
        print(show(store))
        return 0
    if args.model:
        from pathlib import Path

        import mlx_lm

        if not Path(args.model).is_dir():
            print(f"--model: {args.model!r} is not a local model directory (nothing is downloaded)", file=sys.stderr)
            return 2

        import mlx_metile as mt

        model, _ = mlx_lm.load(args.model)
        report = mt.patch(model)
        print(report, file=sys.stderr)
        tuning = autotune(model, rows=tuple(args.rows), store=store, retune=args.retune, progress=True)
        print(tuning)
        return 0
    from mlx_metile.formats import QuantizedWeight

    dtype = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}[args.dtype]
    mx.random.seed(0)
    weights = []
    for n in args.n:
        w = (mx.random.normal((n, args.k)) * args.k**-0.5).astype(dtype)
        if args.bits:
            w = QuantizedWeight(*mx.quantize(w, group_size=args.group, bits=args.bits), args.group, args.bits)
        weights.append(w)
    x = mx.zeros((1, args.k), dtype)
    residual = mx.zeros((1, args.n[0]), dtype) if args.residual else None
    buckets = len({min(b for b in (1, 2, 4, 8, 16, 32, 64) if b >= r) for r in args.rows})
    decisions = tournament(
        x, weights, args.epilogue, residual, rows=list(args.rows), store=store, retune=args.retune,
        progress=stderr_progress(buckets),
    )  # fmt: skip
    for d in decisions.values():
        print(d)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mlx-metile", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="run projections on the default device against stock MLX")
    d.add_argument("--dtype", default="bfloat16", choices=["float32", "float16", "bfloat16"])
    d.add_argument("--k", type=int, default=2048)
    d.add_argument("--n", type=int, default=2048)
    d.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16])
    d.add_argument("--repeat", type=int, default=5)
    d.set_defaults(func=demo)
    t = sub.add_parser("tune", help="decide routes against stock MLX into the tuner's store (--show: print it)")
    t.add_argument("--show", action="store_true", help="print the store's decisions and rejections, tune nothing")
    t.add_argument("--store", default=None, help="the store's path (default: MLX_METILE_TUNE_STORE or the cache's)")
    t.add_argument("--model", default=None, help="a local mlx-lm model directory: patch it and tune its calls")
    t.add_argument("--dtype", default="bfloat16", choices=["float32", "float16", "bfloat16"])
    t.add_argument("--k", type=int, default=2048)
    t.add_argument("--n", type=int, nargs="+", default=[2048], help="one N per weight (several: one fused call)")
    t.add_argument("--bits", type=int, default=4, help="affine bits of random weights (0: dense)")
    t.add_argument("--group", type=int, default=64)
    t.add_argument("--epilogue", default=None, choices=["swiglu", "gelu", "gelu_approx", "silu"])
    t.add_argument("--residual", action="store_true")
    t.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    t.add_argument("--retune", action="store_true", help="decide again where the store has a decision")
    t.set_defaults(func=tune)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
