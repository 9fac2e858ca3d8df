"""Generate the standing set of MLX-free A/B harnesses (bench/cuda_probe/generated_harness.py)
into a folder git ignores, to carry to the GPU machine and run with run_ab.sh:

    python bench/cuda_probe/suite.py bench/cuda_probe/ab
    # device, carrying bench/cuda_probe/ab:  bash bench/cuda_probe/run_ab.sh $OUT bench/cuda_probe/ab/*.cu

Each file compares the default kernels of one shape and format with candidates
that are not default yet; the first variant of a file is its reference for rel_diff.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HARNESS = Path(__file__).with_name("generated_harness.py")
E = "MLX_METILE_CUDA_MMA_"

# name: (harness arguments, variants). Session 5's questions: staged dense weights with 4, 8
# or 16 warps on every bf16 shape of the benchmark, against split-K; warps and groups per stage
# for 4-bit weights on narrow outputs (96-256 tiles of 16 columns: under one block per SM at 4
# warps); the nibble-split 8-bit default on the shapes not yet measured.
STAGED = f"{E}DENSE=staged"
BF16_VARIANTS = ["splitk=", f"staged={STAGED}", f"staged_w8={STAGED};{E}WARPS=8", f"staged_w16={STAGED};{E}WARPS=16"]
NARROW_Q4 = [
    "default=",
    f"w8={E}WARPS=8",
    f"w8g2={E}WARPS=8;{E}GROUPS=2",
    f"w16={E}WARPS=16",
    f"w16g2={E}WARPS=16;{E}GROUPS=2",
]
Q8 = ["default=", f"q8split={E}Q8SPLIT=1", f"q8split_w8g2={E}Q8SPLIT=1;{E}WARPS=8;{E}GROUPS=2"]


def shape(fmt: str, k: int, n: int, pool: int) -> list[str]:
    return ["--format", fmt, "--epilogue", "none", "--k", str(k), "--n", str(n), "--pool", str(pool)]


SUITE = {
    "bf16_4096x4096": (shape("bf16", 4096, 4096, 16), BF16_VARIANTS),
    "bf16_14336x4096": (shape("bf16", 14336, 4096, 8), BF16_VARIANTS),
    "bf16_1536x8960": (shape("bf16", 1536, 8960, 16), BF16_VARIANTS),
    "bf16_8960x1536": (shape("bf16", 8960, 1536, 16), BF16_VARIANTS),
    "bf16_gateup_fused": (["--format", "bf16"], BF16_VARIANTS[:3]),
    "q4g64_4096x4096": (shape("q4g64", 4096, 4096, 32), NARROW_Q4),
    "q4g64_8960x1536": (shape("q4g64", 8960, 1536, 64), NARROW_Q4),
    "q4g64_1536x8960": (shape("q4g64", 1536, 8960, 64), NARROW_Q4),
    "q4g64_14336x4096": (shape("q4g64", 14336, 4096, 16), NARROW_Q4[:3]),
    "q8g64_4096x4096": (shape("q8g64", 4096, 4096, 32), Q8),
    "q8g64_8960x1536": (shape("q8g64", 8960, 1536, 32), Q8),
}
# Rows 8-32: several 16-column tiles per block on the staged ring (x loaded once for all of them;
# the direct loads with tiles measured slower, call 9 of the session-5 A/B file). Tiles move loads
# only, so every variant must match the default bit for bit (rel_diff 0).
STAGED_TILES = ["default=", f"t2={E}TILES=2", f"t2mb3={E}TILES=2;{E}MINBLOCKS=3", f"t4={E}TILES=4"]
for name, args in (
    ("q4g64_4096x14336", shape("q4g64", 4096, 14336, 16)),
    ("q4g64_14336x4096", shape("q4g64", 14336, 4096, 16)),
    ("q4g64_4096x4096", shape("q4g64", 4096, 4096, 32)),
    ("q8g64_4096x14336", shape("q8g64", 4096, 14336, 8)),
    ("q4g64_1536x8960", shape("q4g64", 1536, 8960, 64)),
):
    SUITE[f"{name}_tiles"] = ([*args, "--rows", "1,8,16,32"], STAGED_TILES)
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
