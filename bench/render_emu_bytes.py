"""Render bench/test_bench_emu_bytes.py's JSON as markdown: for each projection and row count, the
bytes each MLX kernel read and wrote per call in the Metal emulator. Byte counts, not speed."""

from __future__ import annotations

import argparse
import json
from collections import defaultdict


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
        "# Bytes per call of MLX's kernels in the Metal emulator - not a speed measurement",
        "",
        f"mlx-metile {info.get('mlx_metile_version')} - {info.get('date')} - {info.get('platform')}. "
        "Counted by the emulator: every load and store the compiled kernel issues, no cache. "
        "`weights` is weight-side bytes read (packed weights, scales, biases; or the bf16 matrix) "
        "over their size; `read` and `written` are all bytes, in KiB.",
        "",
    ]
    for proj in sorted(shapes, key=list(shapes).index):
        k, n = shapes[proj]
        out += [f"## {proj} (K={k}, N={n})", ""]
        head = "| rows | " + " | ".join(f"{kn} weights | read | written" for kn in kernels) + " |"
        out += [head, "|---|" + "---|---|---|" * len(kernels)]
        for rows in sorted({r for (p, r) in cells if p == proj}):
            row = [str(rows)]
            for kn in kernels:
                e = cells[(proj, rows)].get(kn)
                if e is None:
                    row += ["", "", ""]
                    continue
                row += [
                    f"{e['weight_bytes_read'] / e['weight_bytes']:.2f}x",
                    f"{e['bytes_read'] / 1024:.1f}",
                    f"{e['bytes_written'] / 1024:.1f}",
                ]
            out.append("| " + " | ".join(row) + " |")
        out.append("")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", help="a pytest-benchmark JSON file of bench/test_bench_emu_bytes.py")
    print(render(ap.parse_args().json))


if __name__ == "__main__":
    main()
