"""Render a generation benchmark JSON (bench/test_bench_generate.py) as tokens/s; where the file
holds mlx_metile_norms_apart or mlx_metile_norms_fused runs (patch(fuse_norms=False / True)), with
their columns and the default patch's speedup over each."""

from __future__ import annotations

import argparse
import json

VARIANTS = {"mlx_metile_norms_apart": "norms apart", "mlx_metile_norms_fused": "norms fused"}


def render(path: str) -> str:
    data = json.load(open(path))
    info = data.get("machine_info", {})
    rows: dict[tuple, dict[str, float]] = {}
    for b in data["benchmarks"]:
        e = b["extra_info"]
        rows.setdefault((e["format"], e["phase"], e["batch"]), {})[e["impl"]] = e["tokens"] / b["stats"]["median"]
    variants = [k for k in VARIANTS if any(k in v for v in rows.values())]
    head = "| format | phase | batch | stock tokens/s | patched tokens/s | speedup |"
    rule = "|---|---|---|---|---|---|"
    for k in variants:
        head += f" {VARIANTS[k]} tokens/s | patched vs {VARIANTS[k]} |"
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
        line = f"| {fmt} | {phase} | {batch} | {_rate(stock)} | {_rate(ours)} | {_ratio(ours, stock)} |"
        for k in variants:
            line += f" {_rate(v.get(k))} | {_ratio(ours, v.get(k))} |"
        out.append(line)
    return "\n".join(out)


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", help="a pytest-benchmark JSON file")
    print(render(ap.parse_args().json))


if __name__ == "__main__":
    main()
