"""Compiled-graph time per product of mlx_metile under each of several CUDA settings, and stock
MLX's, in one run on one shape (weight pool > L2): how a tuning setting moves the op through MLX.

    python tools/h200/cuda_sweep.py --out sweep.json \\
        --settings "default" "MLX_METILE_CUDA_MMA=0" "MLX_METILE_CUDA_MMA=0;MLX_METILE_CUDA_TUNE=sg=8,nc=2" ...

Each setting is environment assignments separated by ';' (tools/cuda_probe/variants.py), or "default".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import mlx.core as mx  # noqa: E402

from bench import cases  # noqa: E402
from bench.timing import copy_roofline, timed  # noqa: E402
from mlx_metile.cli import machine  # noqa: E402
from tools.cuda_probe.variants import assignments, cuda_settings  # noqa: E402


def per_product(fn, x) -> float:
    return timed(lambda: fn(x)) / cases.PRODUCTS_PER_EVAL


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--settings", nargs="+", required=True, help='"VAR=v;VAR=v" or "default", one per setting')
    ap.add_argument("--shape", default="llama8b_gateup_4096x14336", choices=list(cases.SHAPES))
    ap.add_argument("--formats", nargs="+", default=["int4", "int8", "bf16"], choices=list(cases.FORMATS))
    ap.add_argument("--rows", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32, 64, 128])
    args = ap.parse_args()
    for text in args.settings:
        try:
            assignments(text)
        except ValueError as e:
            ap.error(f"--settings: {e}")
    mx.set_default_device(mx.gpu)
    K, N = cases.SHAPES[args.shape]
    roof, method = copy_roofline()
    report = {**machine.facts(), "shape": args.shape, "copy_roofline_bytes_per_s": roof}
    report.update({"copy_roofline_method": method, "products_per_eval": cases.PRODUCTS_PER_EVAL, "cases": []})
    for fmt in args.formats:
        pool, nbytes = cases.make_pool(fmt, K, N)
        ours, stock = cases.products(fmt, pool)
        for rows in args.rows:
            x = mx.random.normal((rows, K)).astype(mx.bfloat16)
            t_stock = per_product(mx.compile(stock), x)
            row = {"format": fmt, "rows": rows, "weight_bytes": nbytes, "t_stock": t_stock, "tunes": {}}
            for tune in args.settings:
                with cuda_settings(tune):
                    t = per_product(mx.compile(ours), x)
                row["tunes"][tune] = {"t": t, "gbs": nbytes / t / 1e9, "speedup": t_stock / t}
            row["gbs_stock"] = nbytes / t_stock / 1e9
            report["cases"].append(row)
            best = max(row["tunes"].items(), key=lambda kv: kv[1]["gbs"])
            print(
                f"{fmt} rows={rows}: stock {row['gbs_stock']:.0f} GB/s; "
                + "; ".join(f"{k}: {v['gbs']:.0f} ({v['speedup']:.2f}x)" for k, v in row["tunes"].items())
                + f"; best {best[0]}",
                flush=True,
            )
            Path(args.out).write_text(json.dumps(report, indent=1))
        del pool, ours, stock
    return 0


if __name__ == "__main__":
    sys.exit(main())
