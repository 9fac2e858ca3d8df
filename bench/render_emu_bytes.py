"""Render bench/test_bench_emu_bytes.py's JSON as markdown: for each projection, the bytes each
kernel (mlx-metile's simdgroup MSL, NAX direct and NAX staged; MLX's own qmv, qmm_t, NAX kernels)
read and wrote per call in the Metal emulator, at each row count. Byte counts, not speed."""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

NOTE = (
    "**These are byte counts, not a speed measurement**: the emulator runs the kernels on CPU fibers, "
    "and nothing here has run on an Apple GPU. Counted by the emulator: every load and store the "
    "compiled kernel issues, no cache (a byte loaded twice counts twice). mlx-metile's kernels "
    "(`metile_*`) are built for the emulator's target by mlx_metile.pipeline: `metile_simdgroup` is "
    "the default schedule (simd_splitk), `metile_nax_direct` / `metile_nax_staged` the NAX schedules "
    "MLX_METILE_METAL_SCHEDULE asks for (docs/NAX.md); `_bf16` marks the dense bfloat16 weights, the "
    "others are 4-bit group-64 weights with float16 activations. MLX's kernels are compiled from the "
    "mlx-metal wheel's headers and launched as MLX's host code does."
)


FIGURES = [
    ("weights read / their size", lambda e: f"{e['weight_bytes_read'] / e['weight_bytes']:.2f}x"),
    ("read, KiB", lambda e: f"{e['bytes_read'] / 1024:.1f}"),
    ("written, KiB", lambda e: f"{e['bytes_written'] / 1024:.1f}"),
]


def _table(title: str, kernels: list[str], by_rows: dict[int, dict[str, dict]], fmt) -> list[str]:
    """One figure of each kernel (rows of the table) at each row count (columns)."""
    rows = sorted(by_rows)
    out = [f"{title}:", "", "| kernel | " + " | ".join(f"{r} rows" for r in rows) + " |"]
    out.append("|---|" + "---|" * len(rows))
    for kn in kernels:
        out.append(f"| {kn} | " + " | ".join(fmt(by_rows[r][kn]) if kn in by_rows[r] else "" for r in rows) + " |")
    return out + [""]


def render(path: str) -> str:
    data = json.load(open(path))
    info = data.get("machine_info", {})
    cells: dict[tuple[str, int], dict[str, dict]] = defaultdict(dict)
    kernels: list[str] = []
    shapes: dict[str, tuple[int, int]] = {}
    for b in data["benchmarks"]:
        e = b["extra_info"]
        cells[(e["projection"], e["rows"])][e["kernel"]] = e
        shapes[e["projection"]] = (e["K"], e["N"])
        if e["kernel"] not in kernels:
            kernels.append(e["kernel"])
    out = [
        "# Bytes per call in the Metal emulator - not a speed measurement",
        "",
        f"mlx-metile {info.get('mlx_metile_version')} - {info.get('date')} - {info.get('platform')}.",
        "",
        NOTE,
        "",
        "`weights`: weight-side bytes read (packed weights, scales, biases; or the bf16 matrix) over "
        "their size; `read` and `written`: all bytes, in KiB.",
        "",
    ]
    for proj in sorted(shapes, key=list(shapes).index):
        k, n = shapes[proj]
        rows = sorted({r for (p, r) in cells if p == proj})
        here = [kn for kn in kernels if any(kn in cells[(proj, r)] for r in rows)]

        out += [f"## {proj} (K={k}, N={n})", ""]
        here_cells = {r: cells[(proj, r)] for r in rows}
        for title, fmt in FIGURES:
            out += _table(title, here, here_cells, fmt)
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", help="a pytest-benchmark JSON file of bench/test_bench_emu_bytes.py")
    print(render(ap.parse_args().json))


if __name__ == "__main__":
    main()
