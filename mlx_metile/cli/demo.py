"""`mlx-metile demo`: projections on the default device, checked against float64 and stock MLX,
with both timings."""

from __future__ import annotations

import argparse
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


def add_parser(sub) -> None:
    d = sub.add_parser("demo", help="run projections on the default device against stock MLX and float64")
    d.add_argument("--dtype", default="bfloat16", choices=["float32", "float16", "bfloat16"])
    d.add_argument("--k", type=int, default=2048, help="input width K (default 2048)")
    d.add_argument("--n", type=int, default=2048, help="output columns N (default 2048)")
    d.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16])
    d.add_argument("--repeat", type=int, default=5, help="timed evaluations per case (default 5)")
    d.set_defaults(func=demo)
