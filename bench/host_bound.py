"""Is a compiled loop of products limited by the GPU or by MLX's host side? On the GPU
machine, per product: the whole evaluation (submit + run, synchronized) against the time
`mx.async_eval` takes to return (MLX's host work of building and submitting the command
buffers; the GPU runs behind it - but MLX also makes it wait for the GPU while too many
command buffers are in flight). Where the two are close and the GPU's own time is known to be
shorter (the read floor's kernel alone), the host is the limit and no kernel change moves the
time; where the GPU's time is not known, the two being close proves nothing.

    python bench/host_bound.py --out host_bound.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import h200  # noqa: E402
from read_floor import read_all  # noqa: E402

PRODUCTS = 256


def as_list(out) -> list:
    return out if isinstance(out, list) else [out]


def measure(fn, x) -> dict:
    total, host = h200.timed_with_host(lambda: fn(x))
    return {"total_us": total / PRODUCTS * 1e6, "host_us": host / PRODUCTS * 1e6}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    mx.set_default_device(mx.gpu)
    h200.PRODUCTS_PER_EVAL = PRODUCTS
    cases = [
        ("int4", 4096, 4096, (), False),
        ("int4", 4096, 14336, (), False),
        ("int4", 4096, 6144, (4096, 1024, 1024), None),
        ("int4", 4096, 28672, (14336, 14336), "swiglu"),
    ]
    results = []
    for fmt, K, N, widths, fused in cases:
        pool, nbytes = h200.make_pool(fmt, K, N, widths)
        x = mx.random.normal((1, K)).astype(mx.bfloat16)
        if fused is not False:  # one x per product, as h200.products takes them for fused products
            x = [mx.random.normal((1, K), key=mx.random.key(i)).astype(mx.bfloat16) for i in range(PRODUCTS)]
        ours, stock = h200.products(fmt, pool, fused)
        impls = {"mlx_metile": ours, "stock": stock}
        # the read floor with one output, and with as many as ours has (q/k/v: 3)
        for outputs in (1, len(widths)) if fused is None else (1,):
            impls[f"read_floor_{outputs}_outputs"] = lambda x, pool=pool, n=outputs: [
                y for i in range(PRODUCTS) for y in as_list(read_all(h200.flat(pool[i % len(pool)]), n))
            ]
        for name, fn in impls.items():
            r = {"format": fmt, "K": K, "N": N, "widths": widths, "impl": name, "weight_bytes": nbytes}
            r.update(measure(mx.compile(fn), x))
            results.append(r)
            print(json.dumps(r), flush=True)
        del pool
    Path(args.out).write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "rows": 1, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
