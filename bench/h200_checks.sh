#!/usr/bin/env bash
# One device call on the lent GPU machine, after the MLX CUDA wheel is installed
# into $HOME/site (see ../shared/DEVICE.md):
#   bash bench/h200_checks.sh OUTDIR
# 1. gradients and the quick correctness matrix (with the opt-in dense tensor-core variant);
# 2. a sweep of tensor-core mainloop settings on the Llama gate/up shape;
# 3. Nsight Compute profiles of the default kernel (int4, rows 1 and 16);
# 4. the benchmark (every shape, format and row count) with the default settings.
# Each step writes under OUTDIR and is bounded, so a slow one cannot eat the others;
# the benchmark keeps every finished case if its time runs out.
set -uo pipefail
out=${1:?usage: h200_checks.sh OUTDIR}
export PYTHONPATH=$HOME/site:$PWD:${PYTHONPATH:-}
timeout 150 python3 bench/h200.py --out "$out/correct.json" --correctness quick --mma-opt-in --shapes 2>&1 | grep -v "^{"
timeout 110 python3 bench/cuda_sweep.py --out "$out/sweep.json" --formats int4 int8 --rows 1 8 16 32 \
  --settings default "MLX_METILE_CUDA_MMA_WIDE=1" "MLX_METILE_CUDA_MMA_WIDE=1;MLX_METILE_CUDA_MMA_BATCH=1"
bash bench/h200_profile.sh "$out" int4:1 int4:16
timeout 300 python3 bench/h200.py --out "$out/bench.json" --correctness none 2>&1 | tail -3
