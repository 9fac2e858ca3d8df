#!/usr/bin/env bash
# One device call's worth of checks and sweeps on the lent GPU machine, after the
# MLX CUDA wheel is installed into $HOME/site (see ../shared/DEVICE.md):
#   bash bench/h200_checks.sh $OUT
# 1. CUDA gradients (opt-in MLX_METILE_CUDA_GRADIENTS) against stock MLX's;
# 2. the correctness matrix with the opt-in tensor-core variants (fused q/k/v, dense);
# 3. a sweep of the tensor-core knobs on the Llama gate/up shape.
# Each step writes its JSON under $1 and is bounded, so a slow one cannot eat the others.
set -uo pipefail
out=${1:?usage: h200_checks.sh OUTDIR}
export PYTHONPATH=$HOME/site:$PWD:${PYTHONPATH:-}
timeout 120 python3 bench/h200.py --out "$out/grad.json" --correctness grad
timeout 240 python3 bench/h200.py --out "$out/opt-in.json" --correctness quick --mma-opt-in --shapes
timeout 300 python3 bench/cuda_sweep.py --out "$out/sweep.json" --formats int4 int8 bf16 --rows 1 4 8 16 \
  --settings default "MLX_METILE_CUDA_MMA_PIPELINE=1" "MLX_METILE_CUDA_MMA_WARPS=4" "MLX_METILE_CUDA_MMA_WARPS=16" \
  "MLX_METILE_CUDA_MMA_DENSE=1"
