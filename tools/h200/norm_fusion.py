"""The RMSNorm fused into the projection after it, timed against the same norm as its own op, on
the default device: Llama-3.1-8B's q/k/v (4096 -> 4096 + 1024 + 1024) and gate/up with SwiGLU
(4096 -> 2 x 14336), int4 / int8 (group 64) weights from a pool several times larger than the L2,
bf16 x and norm weight, rows 1-32. Per row count and shape, three functions of PRODUCTS per
evaluation (each product with its own x and the pool's next weights), each under mx.compile:

- fused: mt.fused_linear(x, ws, norm=(g, eps))      (one kernel wherever the kernel can take the
  norm: schedule.norm_pays, the rule these measurements set, is overridden here so that SwiGLU is
  fused too)
- apart: mt.fused_linear(mx.fast.rms_norm(x, g, eps), ws)
- stock: mx.fast.rms_norm, then stock MLX's products (and silu(gate) * up)

fused and apart are timed alternating (bench/timing.py's timed_pair), 15 evaluations each; stock
alone. Prints and writes per-product microseconds and fused over apart.
--ops-rule keeps schedule.norm_pays, so that "fused" is what the ops do with the call (for the
SwiGLU gate/up: rms_norm then the plain kernel, planned as a backends.cuda_launch.NormFirstPlan);
--eager times the calls without mx.compile (each evaluation's graph built in Python: the host
cost of a call).

    python tools/h200/norm_fusion.py --out result.json [--rows 1 2 4 8 16 32] [--formats int4 int8]
        [--products 256] [--pool-mb 480] [--ops-rule] [--eager]
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import mlx.core as mx  # noqa: E402

import mlx_metile as mt  # noqa: E402
from bench import cases  # noqa: E402
from bench.timing import timed, timed_pair  # noqa: E402
from mlx_metile.cli import machine  # noqa: E402

# the module (mlx_metile.schedule's attribute `choose` is the function of that name)
schedule_choose = importlib.import_module("mlx_metile.schedule.choice")

K = 4096
SHAPES = {  # name: (output widths, epilogue)
    "llama8b_qkv_4096x6144": ((4096, 1024, 1024), None),
    "llama8b_gateup_swiglu_4096x2x14336": ((14336, 14336), "swiglu"),
}
EPS = 1e-5


def functions(fmt: str, pool: list, g: mx.array, epilogue: str | None) -> dict:
    """name -> a function of a list of x's computing one product per x."""
    bits, group = cases.FORMATS[fmt]

    def weights(entry):
        return [mt.QuantizedWeight(*p, group, bits) for p in entry]

    def fused(xs):
        return [
            mt.fused_linear(x, weights(pool[i % len(pool)]), epilogue=epilogue, norm=(g, EPS)) for i, x in enumerate(xs)
        ]

    def apart(xs):
        return [
            mt.fused_linear(mx.fast.rms_norm(x, g, EPS), weights(pool[i % len(pool)]), epilogue=epilogue)
            for i, x in enumerate(xs)
        ]

    def stock(xs):
        return [
            cases.fused_product("stock", fmt, mx.fast.rms_norm(x, g, EPS), pool[i % len(pool)], epilogue)
            for i, x in enumerate(xs)
        ]

    return {"fused": fused, "apart": apart, "stock": stock}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", nargs="*", type=int, default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--formats", nargs="*", default=["int4", "int8"], choices=["int4", "int8"])
    ap.add_argument("--products", type=int, default=256)
    ap.add_argument(
        "--pool-mb", type=int, default=cases.POOL_BYTES >> 20, help="weight pool size (default: bench/cases.py's)"
    )
    ap.add_argument("--ops-rule", action="store_true", help="keep schedule.norm_pays (fused: what the ops do)")
    ap.add_argument("--eager", action="store_true", help="no mx.compile")
    args = ap.parse_args()
    pool_bytes = args.pool_mb << 20
    if not args.ops_rule:  # (the fused kernel itself is what is timed; fuses_norm reads this name)
        schedule_choose.norm_pays = lambda epilogue, columns: True
    g = (mx.random.normal((K,), key=mx.random.key(5)) * 0.1 + 1).astype(mx.bfloat16)
    results = []
    for fmt in args.formats:
        for name, (widths, epilogue) in SHAPES.items():
            pool, nbytes = cases.make_pool(fmt, K, sum(widths), widths, pool_bytes)
            fns = functions(fmt, pool, g, epilogue)
            for rows in args.rows:
                xs = [
                    (mx.random.normal((rows, K), key=mx.random.key(100 + i)) * 2).astype(mx.bfloat16)
                    for i in range(args.products)
                ]
                mx.eval(xs)
                compiled = {k: (f if args.eager else mx.compile(f)) for k, f in fns.items()}
                run = {k: (lambda f=f, xs=xs: f(xs)) for k, f in compiled.items()}
                t_fused, t_apart = timed_pair(run["fused"], run["apart"])
                t_stock = timed(run["stock"])
                per = {
                    k: t / args.products * 1e6 for k, t in (("fused", t_fused), ("apart", t_apart), ("stock", t_stock))
                }
                row = {"format": fmt, "shape": name, "rows": rows, "us": per, "weight_bytes": nbytes}
                row["fused_over_apart"] = per["apart"] / per["fused"]
                row["fused_over_stock"] = per["stock"] / per["fused"]
                row["fused_tbs"] = nbytes / per["fused"] / 1e6
                results.append(row)
                print(
                    f"{fmt} {name} rows={rows}: fused {per['fused']:.2f} us, apart {per['apart']:.2f} us, "
                    f"stock {per['stock']:.2f} us -> fused {row['fused_over_apart']:.3f}x apart, "
                    f"{row['fused_over_stock']:.2f}x stock, {row['fused_tbs']:.2f} TB/s",
                    flush=True,
                )
            del pool
    report = {
        **machine.facts(),
        "products_per_eval": args.products,
        "ops_rule": args.ops_rule,
        "eager": args.eager,
        "pool_bytes": pool_bytes,
        "method": __doc__,
        "results": results,
    }
    Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
