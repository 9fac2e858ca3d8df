"""Render a pytest-benchmark JSON of bench/ as a markdown table: median time,
effective weight bandwidth, and speedup over stock MLX from the same run."""

from __future__ import annotations

import argparse
import json
from collections import defaultdict


def render(path: str) -> str:
    data = json.load(open(path))
    info = data.get("machine_info", {})
    rows: dict[tuple[str, int], dict[str, dict]] = defaultdict(dict)
    for b in data["benchmarks"]:
        e = b["extra_info"]
        workload = e.get("workload") or f"{e['shape']} {e['format']}"  # (test_bench_cuda.py: shape and format)
        rows[(workload, e["rows"])][e["impl"]] = {"median": b["stats"]["median"], "bytes": e["weight_bytes"]}
    out = [
        f"device {info.get('device')} - MLX {info.get('mlx_version')} - mlx-metile {info.get('mlx_metile_version')} "
        f"- {info.get('date')} - {info.get('platform')}",
        "",
        "| workload | rows | mlx-metile ms | stock ms | speedup | mlx-metile GB/s |",
        "|---|---|---|---|---|---|",
    ]
    for (wl, r), impls in sorted(rows.items()):
        ours, stock = impls.get("mlx_metile"), impls.get("stock")
        if not ours or not stock:
            continue
        gbs = ours["bytes"] / ours["median"] / 1e9
        out.append(
            f"| {wl} | {r} | {ours['median'] * 1e3:.3f} | {stock['median'] * 1e3:.3f} | "
            f"{stock['median'] / ours['median']:.2f}x | {gbs:.1f} |"
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", help="a pytest-benchmark JSON file")
    print(render(ap.parse_args().json))


if __name__ == "__main__":
    main()
