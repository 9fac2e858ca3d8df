"""Generate the standing set of MLX-free A/B harnesses (bench/cuda_probe/generated_harness.py)
into a folder git ignores, to carry to the GPU machine and run with run_ab.sh:

    python bench/cuda_probe/suite.py bench/cuda_probe/ab
    # device, carrying bench/cuda_probe/ab:  bash bench/cuda_probe/run_ab.sh $OUT bench/cuda_probe/ab/*.cu

Each file compares the default kernels of one shape and format with alternatives
(candidates, or the settings the defaults replaced); the first variant of a file is
its reference for rel_diff.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HARNESS = Path(__file__).with_name("generated_harness.py")
E = "MLX_METILE_CUDA_MMA_"

# name: (harness arguments, variants); the first variant is each file's default and reference.
# The standing questions after session 5 (whose runs, with the variants of that time, are in
# bench/results/h200-ab-2026-11-29-session5.json): the defaults against what they replaced -
# dense weights on the staged ring (8 warps where they fit) against split-K and 4 warps;
# nibble-split 8-bit against the f32 conversion; two column tiles against one on wide outputs;
# and for gate/up, stages of 2 groups, with which two tiles' rings fit (the stage size is part
# of the K split, so it would change every row bucket of the spec).


def shape(fmt: str, k: int, n: int, pool: int) -> list[str]:
    return ["--format", fmt, "--epilogue", "none", "--k", str(k), "--n", str(n), "--pool", str(pool)]


BF16 = ["default=", f"splitk={E}DENSE=0", f"w4={E}WARPS=4"]
Q8 = ["default=", f"f32conv={E}Q8SPLIT=0"]
TILES = ["default=", f"t1={E}TILES=1"]
SUITE = {
    "bf16_4096x14336": (shape("bf16", 4096, 14336, 8), BF16),
    "bf16_14336x4096": (shape("bf16", 14336, 4096, 8), BF16),
    "bf16_1536x8960": (shape("bf16", 1536, 8960, 16), BF16),
    "bf16_gateup_fused": (["--format", "bf16"], BF16[:2]),
    "q8g64_gateup_fused": (["--format", "q8g64"], Q8),
    "q8g64_14336x4096": (shape("q8g64", 14336, 4096, 16), Q8),
    "q4g64_gateup_fused": (["--format", "q4g64"], ["default=", f"g2={E}GROUPS=2"]),
    "q4g64_4096x14336": (shape("q4g64", 4096, 14336, 16), TILES),
    "q8g64_4096x14336": (shape("q8g64", 4096, 14336, 8), TILES),
}
# The default gate/up kernel over K (with bench/cuda_probe/fixed_cost.cu: a line t = a + bytes / B
# through these separates the fixed cost of a launch from the streaming rate).
for fmt in ("q4g64", "q8g64"):
    for k, pool in ((1024, 32), (2048, 16), (8192, 4), (16384, 3)):
        SUITE[f"{fmt}_gateup_k{k}"] = (
            ["--format", fmt, "--k", str(k), "--rows", "1,8", "--pool", str(pool)],
            ["default="],
        )


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/cuda_probe/ab")
    out.mkdir(parents=True, exist_ok=True)
    for name, (args, variants) in SUITE.items():
        cmd = [sys.executable, str(HARNESS), str(out / f"{name}.cu"), *args]
        for v in variants:
            cmd += ["--variant", v]
        print(name, flush=True)
        subprocess.run(cmd, check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
