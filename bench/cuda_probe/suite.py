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

# name: (harness arguments, variants)
SUITE = {
    # one wave for gate/up's 896 blocks needs 7 per SM: 2 groups x 2 stages fit 7 rings, and the
    # launch bound caps registers at 72 (ptxas: 96 bytes spilled); 6 per SM fits without spills
    "q4g64_gateup_fused": (
        ["--format", "q4g64"],
        [
            "default=",
            f"w2mb8={E}WARPS=2;{E}MINBLOCKS=8",
            f"g2s2mb7={E}GROUPS=2;{E}STAGES=2;{E}MINBLOCKS=7",
            f"g2s3mb6={E}GROUPS=2;{E}STAGES=3;{E}MINBLOCKS=6",
        ],
    ),
    "q4g64_4096x4096": (
        ["--format", "q4g64", "--epilogue", "none", "--n", "4096", "--pool", "32"],
        ["default=", f"w8={E}WARPS=8", f"w16={E}WARPS=16"],
    ),
    "q4g64_14336x4096": (
        ["--format", "q4g64", "--epilogue", "none", "--k", "14336", "--n", "4096", "--pool", "16"],
        ["default=", f"w8={E}WARPS=8"],
    ),
    "q8g64_gateup_fused": (
        ["--format", "q8g64"],
        ["default=", f"q8split={E}Q8SPLIT=1", f"q8split_g4w2={E}Q8SPLIT=1;{E}GROUPS=4;{E}WARPS=2"],
    ),
    "q8g64_14336x4096": (
        ["--format", "q8g64", "--epilogue", "none", "--k", "14336", "--n", "4096", "--pool", "16"],
        ["default=", f"q8split={E}Q8SPLIT=1", f"q8split_w8={E}Q8SPLIT=1;{E}WARPS=8"],
    ),
    "bf16_4096x14336": (
        ["--format", "bf16", "--epilogue", "none", "--n", "14336"],
        ["splitk=", f"direct={E}DENSE=1", f"staged={E}DENSE=staged", f"staged_w8={E}DENSE=staged;{E}WARPS=8"],
    ),
}


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
