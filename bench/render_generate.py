"""Render a generation benchmark JSON (bench/test_bench_generate.py) as tokens/s."""

from __future__ import annotations

import json
import sys


def render(path: str) -> str:
    data = json.load(open(path))
    info = data.get("machine_info", {})
    rows: dict[tuple, dict[str, float]] = {}
    for b in data["benchmarks"]:
        e = b["extra_info"]
        rows.setdefault((e["format"], e["phase"], e["batch"]), {})[e["impl"]] = e["tokens"] / b["stats"]["median"]
    out = [
        f"device {info.get('device')} - MLX {info.get('mlx_version')} - mlx-metile {info.get('mlx_metile_version')} "
        f"- {info.get('date')}",
        "",
        "| format | phase | batch | stock tokens/s | patched tokens/s | speedup |",
        "|---|---|---|---|---|---|",
    ]
    for (fmt, phase, batch), v in sorted(rows.items()):
        stock, ours = v.get("stock"), v.get("mlx_metile")  # (a file may hold one side only)
        speedup = f"{ours / stock:.2f}x" if stock and ours else "-"
        out.append(f"| {fmt} | {phase} | {batch} | {_rate(stock)} | {_rate(ours)} | {speedup} |")
    return "\n".join(out)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


if __name__ == "__main__":
    print(render(sys.argv[1]))
