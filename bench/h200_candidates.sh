#!/usr/bin/env bash
# One device call that tries what is written but has not run on a GPU, after the MLX CUDA
# wheel is installed into $HOME/site (../shared/DEVICE.md) and, for step 1, with
# bench/cuda_probe/ab carried (python bench/cuda_probe/suite.py bench/cuda_probe/ab, locally):
#   bash bench/h200_candidates.sh OUTDIR
# 1. the MLX-free A/B suite (narrow-shape warps, one-wave int4 settings, nibble-split 8-bit,
#    staged dense bf16);
# 2. launch overhead under MLX with cubins, then with compressed fatbins (MLX_METILE_CUDA_BINARY);
# 3. the quick correctness matrix with fatbins, staged dense weights (--mma-opt-in with
#    MLX_METILE_CUDA_MMA_DENSE=staged) and nibble-split 8-bit (MLX_METILE_CUDA_MMA_Q8SPLIT=1),
#    which checks that fatbins load and that both kernels are right.
# Each step is bounded; results land under OUTDIR.
set -uo pipefail
out=${1:?usage: h200_candidates.sh OUTDIR}
export PYTHONPATH=$HOME/site:$PWD:${PYTHONPATH:-}
if ls bench/cuda_probe/ab/*.cu >/dev/null 2>&1; then
  timeout 200 bash bench/cuda_probe/run_ab.sh "$out" bench/cuda_probe/ab/*.cu | grep -v '^{' || true
fi
timeout 90 python3 bench/launch_overhead.py --out "$out/overhead-cubin.json" | tail -1
MLX_METILE_CUDA_BINARY=fatbin timeout 90 python3 bench/launch_overhead.py --out "$out/overhead-fatbin.json" | tail -1
MLX_METILE_CUDA_BINARY=fatbin MLX_METILE_CUDA_MMA_DENSE=staged MLX_METILE_CUDA_MMA_Q8SPLIT=1 timeout 240 \
  python3 bench/h200.py --out "$out/correct-candidates.json" --correctness quick --mma-opt-in --shapes 2>&1 |
  grep -v "^{" | cut -c1-1500
