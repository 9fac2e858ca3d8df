"""Where a compiled loop of products spends its GPU time on MLX's CUDA backend: the kernels' own
durations and the idle gaps between them, read with CUPTI through PyTorch's profiler (which
records every kernel of the process, MLX's graph-launched ones included; the GPU machine has no
Nsight Systems). For each case, mlx-metile's products, stock MLX's, and the read floor
(bench/read_floor.py) over the same pool of weights, as bench/h200.py times them:

    python3 tools/h200/kernel_timeline.py OUT.json [shape:format:rows ...]

Per implementation: kernels per product, the median kernel duration, the median gap from a
kernel's end to the next kernel's start (negative: kernels overlapping, as MLX's graph lets
independent products run concurrently), the span (first start to last end) per product, the time
the GPU ran no kernel within that span, and the lead: from the evaluation's start on the host to
its first kernel (the host building the first CUDA graph, which nothing hides), per product.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import cases  # noqa: E402
from bench.read_floor import read_all  # noqa: E402
from mlx_metile.cli import machine  # noqa: E402

PRODUCTS = 256
DEFAULT_CASES = [
    "llama8b_qkvo_4096x4096:bf16:1",
    "llama8b_qkvo_4096x4096:bf16:8",
    "llama8b_gateup_4096x14336:bf16:1",
    "llama8b_gateup_4096x14336:int4:1",
    "llama8b_gateup_4096x14336:int8:1",
    "llama8b_qkvo_4096x4096:int4:1",
]


def kernel_events(torch, fn, x) -> tuple[list[tuple[float, float, str]], tuple[float, float] | None]:
    """(start us, duration us, name) of every kernel one evaluation of fn(x) ran, in start order,
    and (start us, duration us) of the evaluation on the host (same clock), if recorded."""
    from torch.profiler import ProfilerActivity, profile, record_function

    mx.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function("metile_eval"):
            mx.eval(fn(x))
            mx.synchronize()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents", [])
    kernels = [
        (float(e["ts"]), float(e["dur"]), str(e.get("name", "")))
        for e in events
        if e.get("cat") == "kernel" and e.get("ph") == "X"
    ]
    host = [(float(e["ts"]), float(e["dur"])) for e in events if e.get("name") == "metile_eval" and "dur" in e]
    return sorted(kernels), (host[0] if host else None)


def idle_within(kernels: list[tuple[float, float, str]]) -> float:
    """Time within the kernels' span during which none ran (us)."""
    idle, end = 0.0, kernels[0][0]
    for start, duration, _ in kernels:
        if start > end:
            idle += start - end
        end = max(end, start + duration)
    return idle


def summary(kernels: list[tuple[float, float, str]], host: tuple[float, float] | None) -> dict:
    if not kernels:
        return {"kernels": 0}
    gaps = [b[0] - (a[0] + a[1]) for a, b in zip(kernels, kernels[1:])]
    names: dict[str, int] = {}
    for _, _, name in kernels:
        short = name.split("(")[0][:60]
        names[short] = names.get(short, 0) + 1
    return {
        "kernels_per_product": round(len(kernels) / PRODUCTS, 2),
        "median_kernel_us": round(statistics.median(k[1] for k in kernels), 2),
        "median_gap_us": round(statistics.median(gaps), 2) if gaps else None,
        "span_per_product_us": round((kernels[-1][0] + kernels[-1][1] - kernels[0][0]) / PRODUCTS, 2),
        "idle_in_span_per_product_us": round(idle_within(kernels) / PRODUCTS, 2),
        "lead_per_product_us": round((kernels[0][0] - host[0]) / PRODUCTS, 2) if host else None,
        "evaluation_per_product_us": round(host[1] / PRODUCTS, 2) if host else None,
        "names": dict(sorted(names.items(), key=lambda kv: -kv[1])[:4]),
    }


def wall_per_product(fn, x, evaluations: int) -> float:
    """Median wall time per product (us) of `evaluations` issued with mx.async_eval between two
    synchronizations: 1 is bench/h200.py's timing; more let the host build the next evaluation
    while the GPU runs the last, as mlx-lm's decode loop does (the steady state)."""
    times = []
    for _ in range(5):
        mx.synchronize()
        t0 = time.perf_counter()
        for _ in range(evaluations):
            mx.async_eval(fn(x))
        mx.synchronize()
        times.append((time.perf_counter() - t0) / (evaluations * PRODUCTS) * 1e6)
    return round(statistics.median(times), 2)


def case(torch, spec: str) -> dict:
    shape, fmt, rows = spec.split(":")
    K, N = cases.SHAPES[shape]
    pool, nbytes = cases.make_pool(fmt, K, N)
    metile, stock = cases.products(fmt, pool, count=PRODUCTS)

    def floor(x):
        return [read_all(cases.flat(pool[i % len(pool)])) for i in range(PRODUCTS)]

    x = mx.random.normal((int(rows), K)).astype(mx.bfloat16)
    result = {"case": spec, "weight_bytes": nbytes}
    for name, fn in (("mlx_metile", metile), ("stock", stock), ("read_floor", floor)):
        compiled = mx.compile(fn)
        for _ in range(3):
            mx.eval(compiled(x))
        s = summary(*kernel_events(torch, compiled, x))
        s["wall_per_product_us"] = wall_per_product(compiled, x, 1)
        s["pipelined_wall_per_product_us"] = wall_per_product(compiled, x, 4)
        result[name] = s
        print(spec, name, json.dumps(s), flush=True)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="the JSON file to write")
    ap.add_argument("cases", nargs="*", help=f"shape:format:rows (default: {' '.join(DEFAULT_CASES)})")
    args = ap.parse_args()
    for spec in args.cases:
        shape, _, rest = spec.partition(":")
        fmt, _, rows = rest.partition(":")
        if shape not in cases.SHAPES or fmt not in cases.FORMATS or not rows.isdigit():
            ap.error(f"{spec!r}: expected shape:format:rows of bench/cases.py's shapes and formats")
    import torch

    mx.set_default_device(mx.gpu)
    torch.zeros(1, device="cuda")  # (PyTorch's context: CUPTI then sees MLX's kernels as well)
    results = [case(torch, spec) for spec in (args.cases or DEFAULT_CASES)]
    report = {**machine.facts(), "torch": torch.__version__, "products_per_eval": PRODUCTS, "cases": results}
    Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
