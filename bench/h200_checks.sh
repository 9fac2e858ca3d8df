#!/usr/bin/env bash
# One device call's worth of checks and sweeps on the lent GPU machine, after the
# MLX CUDA wheel is installed into $HOME/site (see ../shared/DEVICE.md):
#   bash bench/h200_checks.sh OUTDIR [formats...]
# 1. the quick correctness matrix (with the opt-in fused / dense tensor-core variants);
# 2. a sweep of the tensor-core mainloop settings on the Llama gate/up shape.
# Each step writes its JSON under OUTDIR and is bounded, so a slow one cannot eat the other.
set -uo pipefail
out=${1:?usage: h200_checks.sh OUTDIR [formats...]}
shift
formats=("${@:-int4 int8}")
export PYTHONPATH=$HOME/site:$PWD:${PYTHONPATH:-}
timeout 260 python3 bench/h200.py --out "$out/correct.json" --correctness quick --mma-opt-in --shapes \
  2>&1 | grep -v "^{"
timeout 300 python3 bench/cuda_sweep.py --out "$out/sweep.json" --formats ${formats[*]} --rows 1 8 16 32 \
  --settings default "MLX_METILE_CUDA_MMA_BATCH=1" "MLX_METILE_CUDA_MMA_BATCH=2" "MLX_METILE_CUDA_MMA_BATCH=8" \
  "MLX_METILE_CUDA_MMA_TILES=2" "MLX_METILE_CUDA_MMA_WARPS=4" "MLX_METILE_CUDA_MMA_WARPS=16" \
  "MLX_METILE_CUDA_MMA_BATCH=4;MLX_METILE_CUDA_MMA_TILES=2;MLX_METILE_CUDA_MMA_WARPS=4"
