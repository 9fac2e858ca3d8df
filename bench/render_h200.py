"""Render bench/h200.py results: a markdown table (median time per product, effective weight
bandwidth, fraction of the copy roofline of the same run and, where measured, of the read floor
(bench/read_floor.py), speedup over stock MLX) and, where matplotlib is installed, a plot of the
speedup by rows.

    python bench/render_h200.py bench/results/h200-<what>-<date>.json [--plot out.png] [--mode compiled|eager|chained]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict


def table(report: dict, mode: str) -> str:
    roof = report["copy_roofline_bytes_per_s"]
    lines = [
        f"{report['device_info'].get('device_name')} - MLX {report['mlx']} - mlx-metile {report['mlx_metile']} - "
        f"{report['date']} - copy roofline {roof / 1e12:.2f} TB/s (read+write, same run, "
        f"{report.get('copy_roofline_method', 'mlx a + 1, 1 GiB')}) - timing: {mode}, "
        f"{report.get('products_per_eval', 64)} products per mx.eval"
        + (f" - CUDA launch: {report['cuda_launch']}" if "cuda_launch" in report else ""),
        "",
        "PyTorch, replayed from a CUDA graph over a pool of the same size: F.linear (cuBLAS) for bf16; "
        + (
            "`_weight_int4pack_mm` (group 64) for int4, its GB/s counting its own packed weights, scales and zeros."
            if any(c.get("format") == "int4" and "torch" in c for c in report["cases"])
            else "its int4 kernel was not measured in this run."
        ),
        "",
    ]
    floor_key = FLOOR_KEY.get(mode, "")
    floors = any("gbs" in c.get(floor_key, {}) for c in report["cases"])
    if mode == "chained":
        lines += [
            "Chained: each product's x is the previous product's x plus 0 times its output's first element (one "
            "small elementwise kernel after every product, ours and stock's alike), so the products run one after "
            "another as a model's projections do, instead of side by side; the times include that kernel.",
            "",
        ]
    if floors:
        lines += [
            "Read floor: a kernel that only reads the same weight's bytes, launched through MLX like mlx-metile's "
            f"kernels in the same {mode} loop over the same pool (bench/read_floor.py): what any one-kernel "
            'product of those bytes costs there. "of floor" = read floor time / mlx-metile time.',
            "",
        ]
    if mode != "eager" and any("host_ours" in c.get(mode, {}) for c in report["cases"]):
        lines += [
            f"An entry marked {HOST_MARK}: at least {HOST_BOUND:.0%} of its time passed before `mx.async_eval` returned. "
            "That is MLX's host work, or MLX holding the submission back until the GPU caught up (it waits while "
            "too many command buffers are in flight: the bf16 read floor, a 117 MB read, once showed 29 of its "
            "31 us); so the host is the limit only where the GPU's own time is known to be shorter.",
            "",
        ]
    untuned = any(f"{mode}_untuned" in c for c in report["cases"])
    if untuned:
        lines += [
            "Rules: mlx-metile with the hand rules alone (MLX_METILE_CUDA_DECISIONS=off) in the same run; the "
            "mlx-metile columns are the decisions file's routes (a native decision runs stock MLX's composition).",
            "",
        ]
    head = "| shape | format | rows | mlx-metile us | GB/s | of roofline |"
    head += " read floor GB/s | of floor |" if floors else ""
    head += " stock MLX us | GB/s | speedup |"
    head += " rules us | rules GB/s | rules speedup |" if untuned else ""
    head += " PyTorch GB/s | vs PyTorch |"
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    for c in report["cases"]:
        if mode not in c:
            continue
        r = c[mode]
        lines.append(
            f"| {c['shape']} | {c['format']} | {c['rows']} | {us(r['t_ours'], r.get('host_ours'))} | {r['gbs_ours']:.0f} | "
            f"{r['gbs_ours'] * 1e9 / roof:.0%} | "
            + (floor_cells(c.get(floor_key, {}), r["t_ours"]) if floors else "")
            + f"{us(r['t_stock'], r.get('host_stock'))} | {r['gbs_stock']:.0f} | {r['speedup']:.2f}x | "
            + (rules_cells(c.get(f"{mode}_untuned")) if untuned else "")
            + (f"{c['torch']['gbs']:.0f} | {c['torch']['t'] / r['t_ours']:.2f}x |" if "torch" in c else "- | - |")
        )
    fused = report.get("fused", {})
    if isinstance(fused, dict) and fused and "error" not in fused:
        lines += [
            "",
            "| fused op (eager) | rows | fused us | separate mlx-metile calls us | speedup |",
            "|---|---|---|---|---|",
        ]
        for rows, ops in fused.items():
            for name, r in ops.items():
                lines.append(
                    f"| {name} | {rows} | {r['t_fused'] * 1e6:.1f} | {r['t_separate'] * 1e6:.1f} | {r['speedup']:.2f}x |"
                )
    return "\n".join(lines)


FLOOR_KEY = {"compiled": "read_floor", "chained": "read_floor_chained"}  # bench/h200.py's keys
HOST_BOUND = 0.9  # part before async_eval returned / whole time from which a time is marked
HOST_MARK = "(h)"


def us(t: float, host: float | None) -> str:
    """A time in us, marked where its part before `mx.async_eval` returned was at least HOST_BOUND."""
    return f"{t * 1e6:.1f}" + (f" {HOST_MARK}" if host is not None and host >= HOST_BOUND * t else "")


def rules_cells(r: dict | None) -> str:
    if not r:
        return "- | - | - | "
    return f"{us(r['t_ours'], r.get('host_ours'))} | {r['gbs_ours']:.0f} | {r['speedup']:.2f}x | "


def floor_cells(floor: dict, t_ours: float) -> str:
    if "gbs" not in floor:
        return "- | - | "
    return f"{floor['gbs']:.0f}{' ' + HOST_MARK if floor.get('host', 0) >= HOST_BOUND * floor['t'] else ''} | {floor['t'] / t_ours:.0%} | "


def plot(report: dict, mode: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    for c in report["cases"]:
        if mode in c:
            series[(c["shape"], c["format"])].append((c["rows"], c[mode]["speedup"]))
    formats = list(dict.fromkeys(f for _, f in series))  # in the order the run measured them
    fig, axes = plt.subplots(1, len(formats), figsize=(5 * len(formats), 4.5), sharey=True, squeeze=False)
    axes = axes[0]
    for ax, fmt in zip(axes, formats):
        for (shape, f), pts in sorted(series.items()):
            if f != fmt:
                continue
            xs, ys = zip(*sorted(pts))
            ax.plot(xs, ys, marker="o", label=shape)
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("rows")
        ax.set_title(f"{fmt}: mlx-metile / stock MLX")
    axes[0].set_ylabel(f"speedup ({mode} timing)")
    axes[-1].legend(fontsize=7)
    fig.suptitle(f"{report['device_info'].get('device_name')} - {report['date']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json")
    ap.add_argument("--mode", default="compiled", choices=["compiled", "eager", "chained"])
    ap.add_argument("--plot")
    args = ap.parse_args()
    report = json.load(open(args.json))
    print(table(report, args.mode))
    if args.plot:
        plot(report, args.mode, args.plot)


if __name__ == "__main__":
    main()
