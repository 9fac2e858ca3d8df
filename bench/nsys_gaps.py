"""Kernel durations and the idle gaps between kernels on the GPU, from an Nsight Systems trace
(run on the GPU machine):

    nsys profile -o OUT/trace --trace=cuda --cuda-graph-trace=node python3 bench/h200.py ...
    nsys stats --report cuda_gpu_trace --format csv --output OUT/trace OUT/trace.nsys-rep
    python3 bench/nsys_gaps.py OUT/trace_cuda_gpu_trace.csv > OUT/gaps.json

For each kernel name: launches, median duration, and the median idle time from its end to the
start of the next kernel on the GPU (what a loop of products pays between them beyond the kernels'
own time: launch latency, graph dependencies, host submission).
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from collections import defaultdict


def column(header: list[str], word: str) -> str:
    """The first column whose name starts with `word` (nsys names them e.g. 'Start (ns)')."""
    for name in header:
        if name.startswith(word):
            return name
    raise SystemExit(f"no column starting with {word!r} in {header}")


def summarize(rows: list[dict], start: str, duration: str, name: str) -> dict:
    kernels = sorted(
        ((int(r[start]), int(r[duration]), r[name]) for r in rows if r.get(name) and r[duration]),
        key=lambda k: k[0],
    )
    stats: dict[str, dict[str, list[int]]] = defaultdict(lambda: {"duration": [], "gap_after": []})
    for i, (t0, dt, kname) in enumerate(kernels):
        short = kname.split("(")[0][:80]
        stats[short]["duration"].append(dt)
        if i + 1 < len(kernels):
            stats[short]["gap_after"].append(kernels[i + 1][0] - (t0 + dt))
    return {
        k: {
            "launches": len(v["duration"]),
            "median_us": round(statistics.median(v["duration"]) / 1e3, 2),
            "median_gap_after_us": round(statistics.median(v["gap_after"]) / 1e3, 2) if v["gap_after"] else None,
        }
        for k, v in sorted(stats.items(), key=lambda kv: -len(kv[1]["duration"]))
    }


def main() -> int:
    if len(sys.argv) != 2:
        raise SystemExit("usage: nsys_gaps.py TRACE_cuda_gpu_trace.csv")
    with open(sys.argv[1], newline="") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        rows = list(reader)
    result = summarize(rows, column(header, "Start"), column(header, "Duration"), column(header, "Name"))
    json.dump(result, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
