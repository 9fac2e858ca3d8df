"""Render a tuned-decoding benchmark JSON (bench/test_bench_tuned.py): tokens/s of stock and of the
patched, tuned model per batch, the speedup of medians and its range over the rounds (the tuned
model's slowest round against stock's fastest, and the other way), and what the tuner chose."""

from __future__ import annotations

import argparse
import json


def render(path: str) -> str:
    data = json.load(open(path))
    info = data.get("machine_info", {})
    runs: dict[int, dict[str, dict]] = {}
    for b in data["benchmarks"]:
        e = b["extra_info"]
        runs.setdefault(e["batch"], {})[e["impl"]] = {"tokens": e["tokens"], "stats": b["stats"], "extra": e}
    out = [
        f"device {info.get('device')} - MLX {info.get('mlx_version')} - mlx-metile {info.get('mlx_metile_version')} "
        f"- {info.get('date')} - {info.get('cpu', {}).get('brand_raw', '')}",
        "",
        "| batch | stock tokens/s | tuned tokens/s | speedup (medians) | range over rounds | tuned runs |",
        "|---|---|---|---|---|---|",
    ]
    chosen_lines = []
    tune_seconds = None
    for batch in sorted(runs):
        v = runs[batch]
        stock, tuned = v.get("stock"), v.get("tuned")
        if not stock or not tuned:
            continue
        n = stock["tokens"]
        s, t = stock["stats"], tuned["stats"]
        speed = s["median"] / t["median"]
        low, high = s["min"] / t["max"], s["max"] / t["min"]
        backends = ", ".join(tuned["extra"].get("backends", []))
        out.append(
            f"| {batch} | {n / s['median']:.2f} | {n / t['median']:.2f} | {speed:.2f}x | {low:.2f}-{high:.2f}x | {backends} |"
        )
        tune_seconds = tuned["extra"].get("tune_seconds", tune_seconds)
        for site, d in tuned["extra"].get("decisions", {}).items():
            ratio = d.get("cpu_confirm") or d.get("cpu_ratio")
            shown = (
                "" if not ratio else f" (cpu q20/median/q80 {ratio[0]:.2f}/{ratio[1]:.2f}/{ratio[2]:.2f}x of native)"
            )
            chosen_lines.append(f"- rows <= {batch}, {site}: {d['chosen']}{shown}")
    if tune_seconds is not None:
        out += ["", f"Tuning took {tune_seconds:.0f} s. Decisions:", "", *chosen_lines]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", help="a pytest-benchmark JSON file")
    print(render(ap.parse_args().json))


if __name__ == "__main__":
    main()
