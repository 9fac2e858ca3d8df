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
# The questions of session 6, all answered in bench/results/h200-ab-2026-11-29-session6.json
# (earlier ones in -session4 and -session5): interleaved K stages (IL), register caps at 16-32
# rows (MB: 2 blocks per SM at 32 rows became the default), and rings over 48 KB (BIG), on every
# benchmark shape and format, plus the gate/up kernel over K.


def shape(fmt: str, k: int, n: int, pool: int) -> list[str]:
    return ["--format", fmt, "--epilogue", "none", "--k", str(k), "--n", str(n), "--pool", str(pool)]


# il: MLX_METILE_CUDA_MMA_INTERLEAVE=1, warp w taking stages w, w + W, ..., so that a block's
# warps copy adjacent runs of each column
IL = ["default=", f"il={E}INTERLEAVE=1"]
# mbN = MLX_METILE_CUDA_MMA_MINBLOCKS=N at 16 and 32 rows, where the uncapped kernels hold
# 127-255 registers: 2-3 blocks per SM
MB = ["default=", f"mb2={E}MINBLOCKS=2", f"mb3={E}MINBLOCKS=3"]
# Rings over 48 KB (dynamic shared memory, which MLX does give a kernel - see
# dynamic_smem.py): sN = MLX_METILE_CUDA_MMA_SMEM=N (KB), stN = STAGES, tN = TILES.
BIG = {
    "q4g64_4096x14336": ["default=", f"s96t4={E}SMEM=96;{E}TILES=4"],
    "q4g64_gateup_fused": ["default=", f"s96={E}SMEM=96"],
    "q4g64_14336x4096": ["default=", f"s80st8={E}SMEM=80;{E}STAGES=8"],
    "q4g64_4096x4096": ["default=", f"s80st8={E}SMEM=80;{E}STAGES=8"],
    "q8g64_4096x14336": ["default=", f"s80={E}SMEM=80", f"s80t4={E}SMEM=80;{E}TILES=4"],
    "q8g64_gateup_fused": ["default=", f"s80={E}SMEM=80", f"s80t1={E}SMEM=80;{E}TILES=1"],
    "bf16_4096x4096": ["default=", f"s56st3={E}SMEM=56;{E}STAGES=3", f"s74={E}SMEM=74"],
    "bf16_4096x14336": ["default=", f"s74={E}SMEM=74", f"s74t1={E}SMEM=74;{E}TILES=1"],
    "bf16_gateup_fused": ["default=", f"s74={E}SMEM=74"],
}
SUITE = {}
for fmt, pool in (("q4g64", 32), ("q8g64", 16), ("bf16", 8)):
    gateup = ["--format", fmt, "--pool", str(pool // 4)]
    SUITE[f"{fmt}_gateup_fused"] = (gateup, IL)
    SUITE[f"{fmt}_gateup_fused_mb"] = ([*gateup, "--rows", "16,32"], MB)
    if f"{fmt}_gateup_fused" in BIG:
        SUITE[f"{fmt}_gateup_fused_big"] = (gateup, BIG[f"{fmt}_gateup_fused"])
    for k, n in ((4096, 4096), (4096, 14336), (14336, 4096), (1536, 8960), (8960, 1536)):
        args = shape(fmt, k, n, pool * (4 if k * n < 2**25 else 1))
        SUITE[f"{fmt}_{k}x{n}"] = (args, IL)
        SUITE[f"{fmt}_{k}x{n}_mb"] = ([*args, "--rows", "16,32"], MB)
        if f"{fmt}_{k}x{n}" in BIG:
            SUITE[f"{fmt}_{k}x{n}_big"] = (args, BIG[f"{fmt}_{k}x{n}"])
# The default gate/up kernel over K (with bench/cuda_probe/fixed_cost.cu: a line t = a + bytes / B
# through these separates the fixed cost of a launch from the streaming rate).
for fmt in ("q4g64", "q8g64"):
    for k, pool in ((1024, 32), (2048, 16), (8192, 4), (16384, 3)):
        SUITE[f"{fmt}_gateup_k{k}"] = (
            ["--format", fmt, "--k", str(k), "--rows", "1,8", "--pool", str(pool)],
            IL,
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
