"""Several bench/h200.py result files of the same cases (one per process) as one markdown
table of ranges: per shape, format and row count, the lowest and highest of mlx-metile's and stock
MLX's effective weight bandwidth, the speedup and the fraction of the read floor over the runs.

    python bench/render_h200_runs.py run1.json run2.json run3.json [--mode compiled|eager|chained]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.render_h200 import FLOOR_KEY  # noqa: E402


def span(values: list[float], fmt: str) -> str:
    """'lo-hi' in fmt, or one value where both print alike; '-' for none."""
    if not values:
        return "-"
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return lo if lo == hi else f"{lo}-{hi}"


def table(reports: list[dict], mode: str) -> str:
    def key(c: dict) -> tuple:
        return c["shape"], c["format"], c["rows"]

    by_run = [{key(c): c for c in r["cases"] if mode in c} for r in reports]
    keys = [key(c) for c in reports[0]["cases"] if mode in c]
    lines = [
        f"{len(reports)} runs, timing: {mode}; ranges over the runs (lowest-highest)",
        "",
        "| shape | format | rows | mlx-metile GB/s | stock MLX GB/s | speedup | of read floor |",
        "|---|---|---|---|---|---|---|",
    ]
    for k in keys:
        cases = [run[k] for run in by_run if k in run]
        ours = [c[mode]["gbs_ours"] for c in cases]
        stock = [c[mode]["gbs_stock"] for c in cases]
        speedup = [c[mode]["speedup"] for c in cases]
        floor = FLOOR_KEY.get(mode, "")
        of_floor = [100 * c[floor]["t"] / c[mode]["t_ours"] for c in cases if "t" in c.get(floor, {})]
        lines.append(
            f"| {k[0]} | {k[1]} | {k[2]} | {span(ours, '{:.0f}')} | {span(stock, '{:.0f}')} | "
            f"{span(speedup, '{:.2f}')}x | {span(of_floor, '{:.0f}')}{'%' if of_floor else ''} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", nargs="+")
    ap.add_argument("--mode", default="compiled", choices=["compiled", "eager", "chained"])
    args = ap.parse_args()
    reports = [json.load(open(path)) for path in args.json]
    print(table(reports, args.mode))


if __name__ == "__main__":
    main()
