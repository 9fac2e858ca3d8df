"""`mlx-metile bench`: the projection benchmark (mlx_metile.cli.workloads, which bench/'s
pytest-benchmark suite shares) on the default device, mlx-metile and stock MLX timed in the same
run in alternated rounds; writes pytest-benchmark-compatible JSON, a markdown table and a PNG plot
(speedup by rows, one line per format) into --out, and prints the table."""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import statistics
import time
from pathlib import Path

from .errors import UsageError
from .progress import Progress

DEFAULT_FORMATS = ("bf16", "int4", "int8")
IMPLS = ("mlx_metile", "stock")


def _stats(samples: list[float]) -> dict:
    s = sorted(samples)
    q1, q3 = s[len(s) // 4], s[(3 * len(s)) // 4]
    mean = statistics.fmean(s)
    return {
        "min": s[0], "max": s[-1], "mean": mean, "stddev": statistics.stdev(s) if len(s) > 1 else 0.0,
        "median": statistics.median(s), "q1": q1, "q3": q3, "iqr": q3 - q1, "rounds": len(s),
        "iterations": 1, "ops": 1 / mean if mean else 0.0, "total": sum(s), "data": samples,
    }  # fmt: skip


def measure(workload, rows: int, K: int, rounds: int, warmup: int) -> dict[str, list[float]]:
    """Seconds per call of each side, in alternated rounds (each round: ours then stock, or the
    other way on odd rounds), each call on the next weight of the pool."""
    import mlx.core as mx

    x = mx.random.normal((rows, K)).astype(mx.bfloat16)
    fns = {"mlx_metile": workload.ours, "stock": workload.stock}
    counter = itertools.count()
    for _ in range(warmup):
        for fn in fns.values():
            mx.eval(fn(x, next(counter)))
    times: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    for r in range(rounds):
        for impl in IMPLS if r % 2 == 0 else IMPLS[::-1]:
            i = next(counter)
            t0 = time.perf_counter()
            mx.eval(fns[impl](x, i))
            times[impl].append(time.perf_counter() - t0)
    return times


def table(results: list[dict]) -> str:
    out = ["| format | rows | mlx-metile ms | stock ms | speedup |", "|---|---|---|---|---|"]
    for r in results:
        out.append(
            f"| {r['format']} | {r['rows']} | {r['ours'] * 1e3:.3f} | {r['stock'] * 1e3:.3f} | {r['stock'] / r['ours']:.2f}x |"
        )
    return "\n".join(out)


def bench(args: argparse.Namespace) -> int:
    from . import machine, workloads
    from .plot import speedup_plot

    unknown = [f for f in args.formats if f not in workloads.FORMATS]
    if unknown:
        raise UsageError(f"--formats: {', '.join(unknown)} not among {', '.join(workloads.FORMATS)}")
    if args.rows is not None and any(r < 1 for r in args.rows):
        raise UsageError(f"--rows: expected positive row counts, got {args.rows}")
    rows = args.rows or ([1, 8, 32] if args.quick else workloads.ROWS)
    rounds, warmup = (5, 1) if args.quick else (args.rounds, 2)
    size = workloads.Size(args.k, args.n, args.pool)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import mlx.core as mx

    facts = machine.facts()
    progress = Progress(len(args.formats) * len(rows), "bench")
    results, benchmarks = [], []
    for fmt in args.formats:
        mx.random.seed(0)
        wl = workloads.FORMATS[fmt](size)
        for r in rows:
            times = measure(wl, r, size.K, rounds, warmup)
            medians = {impl: statistics.median(t) for impl, t in times.items()}
            results.append({"format": fmt, "rows": r, "ours": medians["mlx_metile"], "stock": medians["stock"]})
            for impl, t in times.items():
                extra = {"workload": wl.name, "format": fmt, "rows": r, "impl": impl, "K": size.K, "N": size.N}
                benchmarks.append({
                    "group": f"{wl.name} rows={r}", "name": f"bench[{impl}-{r}-{fmt}]",
                    "fullname": f"mlx-metile bench::{fmt}[{impl}-{r}]", "params": {"impl": impl, "rows": r, "format": fmt},
                    "param": f"{impl}-{r}-{fmt}", "extra_info": extra | {"weight_bytes": wl.weight_bytes},
                    "options": {"timer": "perf_counter", "rounds": rounds, "warmup": warmup, "alternated": True},
                    "stats": _stats(t),
                })  # fmt: skip
            progress.step(f"{fmt} rows={r}")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    machine_info = {
        "mlx_version": facts["mlx"], "mlx_metile_version": facts["mlx_metile"], "device": facts["device"],
        "platform": facts["platform"], "date": facts["date"], "mlx_metile_settings": facts["settings"],
        "python_version": facts["python"],
    }  # fmt: skip
    document = {
        "machine_info": machine_info,
        "commit_info": {},
        "benchmarks": benchmarks,
        "datetime": facts["date"],
        "version": "mlx-metile bench",
    }
    device = str(mx.default_device()).replace("Device(", "").replace(")", "").replace(", ", "")
    stem = out / f"{device}-projections-{stamp}"
    Path(f"{stem}.json").write_text(json.dumps(document, indent=1))
    heading = (
        f"mlx-metile bench on {facts['device']} - MLX {facts['mlx']} - mlx-metile {facts['mlx_metile']} - "
        f"{facts['date']} - K={size.K} N={size.N}, median of {rounds} alternated rounds"
    )
    text = heading + "\n\n" + table(results)
    Path(f"{stem}.md").write_text(text + "\n")
    series: dict[str, dict[int, float]] = {}
    for r in results:
        series.setdefault(r["format"], {})[r["rows"]] = r["stock"] / r["ours"]
    speedup_plot(series, Path(f"{stem}.png"))
    print(text)
    print(f"wrote {stem}.json, {stem}.md, {stem}.png")
    return 0


def add_parser(sub) -> None:
    b = sub.add_parser("bench", help="projection benchmark against stock MLX on the default device")
    b.add_argument("--quick", action="store_true", help="rows 1, 8, 32 and 5 rounds")
    b.add_argument("--rows", type=int, nargs="+", default=None, help="row counts (default 1 2 4 8 16 32)")
    b.add_argument(
        "--formats", nargs="+", default=list(DEFAULT_FORMATS), help="of bf16 f16 int2..int8 mxfp4 mxfp8 nvfp4"
    )
    b.add_argument(
        "--out", default="bench-results", help="directory for the JSON, markdown and PNG (default bench-results)"
    )
    b.add_argument("--k", type=int, default=2048, help="input width K (default 2048)")
    b.add_argument("--n", type=int, default=2048, help="output columns N (default 2048)")
    b.add_argument("--pool", type=int, default=4, help="weights used in turn (default 4)")
    b.add_argument("--rounds", type=int, default=20, help="timed rounds per case (default 20)")
    b.set_defaults(func=bench)
