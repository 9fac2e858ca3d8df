"""Render a generation benchmark JSON (bench/test_bench_generate.py) as tokens/s; where the file
holds mlx_metile_norms_apart runs (patch(fuse_norms=False)), with their column and the fused
norms' speedup over them."""

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
    apart = any("mlx_metile_norms_apart" in v for v in rows.values())
    head = "| format | phase | batch | stock tokens/s | patched tokens/s | speedup |"
    rule = "|---|---|---|---|---|---|"
    if apart:
        head += " norms apart tokens/s | fused norms vs apart |"
        rule += "---|---|"
    out = [
        f"device {info.get('device')} - MLX {info.get('mlx_version')} - mlx-metile {info.get('mlx_metile_version')} "
        f"- {info.get('date')}",
        "",
        head,
        rule,
    ]
    for (fmt, phase, batch), v in sorted(rows.items()):
        stock, ours = v.get("stock"), v.get("mlx_metile")  # (a file may hold one side only)
        speedup = _ratio(ours, stock)
        line = f"| {fmt} | {phase} | {batch} | {_rate(stock)} | {_rate(ours)} | {speedup} |"
        if apart:
            other = v.get("mlx_metile_norms_apart")
            line += f" {_rate(other)} | {_ratio(ours, other)} |"
        out.append(line)
    return "\n".join(out)


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


if __name__ == "__main__":
    print(render(sys.argv[1]))
