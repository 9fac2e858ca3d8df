"""The RMSNorm fused into the projection after it, timed against the same norm as its own op, on
the default device: Llama-3.1-8B's q/k/v (4096 -> 4096 + 1024 + 1024) and gate/up with SwiGLU
(4096 -> 2 x 14336), int4 / int8 (group 64) weights from a pool several times larger than the L2,
bf16 x and norm weight, rows 1-32. Per row count and shape, three functions of PRODUCTS per
evaluation (each product with its own x and the pool's next weights), each under mx.compile:

- fused: mt.fused_linear(x, ws, norm=(g, eps))      (one kernel wherever ops can fuse the norm:
  ops.norm_pays, the rule these measurements set, is overridden here so that SwiGLU is fused too)
- apart: mt.fused_linear(mx.fast.rms_norm(x, g, eps), ws)
- stock: mx.fast.rms_norm, then stock MLX's products (and silu(gate) * up)

fused and apart are timed alternating (bench/h200.py's timed_pair), 15 evaluations each; stock
alone. Prints and writes per-product microseconds and fused over apart.
--ops-rule keeps ops.norm_pays, so that "fused" is what ops does with the call (for the SwiGLU
gate/up: rms_norm then the plain kernel, planned by ops._NormFirstPlan); --eager times the calls
without mx.compile (each evaluation's graph built in Python: the host cost of a call).

    python bench/norm_fusion.py --out result.json [--rows 1 2 4 8 16 32] [--formats int4 int8]
        [--products 256] [--pool-mb 480] [--ops-rule] [--eager]
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import mlx_metile as mt  # noqa: E402
from bench import h200  # noqa: E402
from mlx_metile import ops  # noqa: E402

K = 4096
SHAPES = {  # name: (output widths, epilogue)
    "llama8b_qkv_4096x6144": ((4096, 1024, 1024), None),
    "llama8b_gateup_swiglu_4096x2x14336": ((14336, 14336), "swiglu"),
}
EPS = 1e-5


def functions(fmt: str, pool: list, g: mx.array, epilogue: str | None) -> dict:
    """name -> a function of a list of x's computing one product per x."""
    bits, group = h200.FORMATS[fmt]

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
            h200.fused_product("stock", fmt, mx.fast.rms_norm(x, g, EPS), pool[i % len(pool)], epilogue)
            for i, x in enumerate(xs)
        ]

    return {"fused": fused, "apart": apart, "stock": stock}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", nargs="*", type=int, default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--formats", nargs="*", default=["int4", "int8"], choices=["int4", "int8"])
    ap.add_argument("--products", type=int, default=256)
    ap.add_argument("--pool-mb", type=int, default=h200.POOL_BYTES >> 20, help="weight pool size (default: h200.py's)")
    ap.add_argument("--ops-rule", action="store_true", help="keep ops.norm_pays (fused: what ops does)")
    ap.add_argument("--eager", action="store_true", help="no mx.compile")
    args = ap.parse_args()
    h200.POOL_BYTES = args.pool_mb << 20
    if not args.ops_rule:
        ops.norm_pays = lambda epilogue, columns: True  # (the fused kernel itself is what is timed)
    g = (mx.random.normal((K,), key=mx.random.key(5)) * 0.1 + 1).astype(mx.bfloat16)
    results = []
    for fmt in args.formats:
        for name, (widths, epilogue) in SHAPES.items():
            pool, nbytes = h200.make_pool(fmt, K, sum(widths), widths)
            fns = functions(fmt, pool, g, epilogue)
            for rows in args.rows:
                xs = [
                    (mx.random.normal((rows, K), key=mx.random.key(100 + i)) * 2).astype(mx.bfloat16)
                    for i in range(args.products)
                ]
                mx.eval(xs)
                compiled = {k: (f if args.eager else mx.compile(f)) for k, f in fns.items()}
                run = {k: (lambda f=f, xs=xs: f(xs)) for k, f in compiled.items()}
                t_fused, t_apart = h200.timed_pair(run["fused"], run["apart"])
                t_stock = h200.timed(run["stock"])
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
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": str(mx.default_device()),
        "device_info": {k: str(v) for k, v in mx.device_info(mx.default_device()).items()},
        "platform": platform.platform(),
        "mlx": mx.__version__,
        "products_per_eval": args.products,
        "ops_rule": args.ops_rule,
        "eager": args.eager,
        "pool_bytes": h200.POOL_BYTES,
        "method": __doc__,
        "results": results,
    }
    Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
