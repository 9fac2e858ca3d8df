"""CUDA schedule tuning run for the lent GPU machine:

    python bench/cuda_sweep.py --out sweep.json \
        --settings "MLX_METILE_CUDA_MMA=0" "MLX_METILE_CUDA_MMA=0;MLX_METILE_CUDA_TUNE=sg=8,nc=2" ...

For each setting (environment assignments separated by ';', or "default"), the
compiled-graph time of mlx_metile and stock MLX (same run, weight pool > L2)
on one shape, per format and rows.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import h200  # noqa: E402
from settings import apply_cuda_settings  # noqa: E402


def per_product(fn, x) -> float:
    return h200.timed(lambda: fn(x)) / h200.PRODUCTS_PER_EVAL


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--settings", nargs="+", required=True)
    ap.add_argument("--shape", default="llama8b_gateup_4096x14336")
    ap.add_argument("--formats", nargs="+", default=["int4", "int8", "bf16"])
    ap.add_argument("--rows", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32, 64, 128])
    args = ap.parse_args()
    mx.set_default_device(mx.gpu)
    K, N = h200.SHAPES[args.shape]
    roof, method = h200.copy_roofline()
    report = {"shape": args.shape, "copy_roofline_bytes_per_s": roof, "copy_roofline_method": method, "cases": []}
    for fmt in args.formats:
        pool, nbytes = h200.make_pool(fmt, K, N)

        ours, stock = h200.products(fmt, pool)
        for rows in args.rows:
            x = mx.random.normal((rows, K)).astype(mx.bfloat16)
            t_stock = per_product(mx.compile(stock), x)
            row = {"format": fmt, "rows": rows, "weight_bytes": nbytes, "t_stock": t_stock, "tunes": {}}
            for tune in args.settings:
                apply_cuda_settings(tune)
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
