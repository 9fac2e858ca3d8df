#!/usr/bin/env bash
# One device call for settings that are not the default, after the MLX CUDA wheel is
# installed into $HOME/site (../shared/DEVICE.md) and, for step 1, with bench/cuda_probe/ab
# carried (python bench/cuda_probe/suite.py bench/cuda_probe/ab, locally):
#   bash bench/h200_candidates.sh OUTDIR
# 1. the MLX-free A/B suite (bench/cuda_probe/suite.py: each file's candidates against its default);
# 2. launch overhead under MLX with fatbins (the default) and cubins, alternating, twice each;
# 3. the quick correctness matrix with the non-default paths: cubins, direct dense loads
#    (MLX_METILE_CUDA_MMA_DENSE=1) and the f32 conversion of 8-bit weights (Q8SPLIT=0).
# Each step is bounded; results land under OUTDIR.
set -uo pipefail
out=${1:?usage: h200_candidates.sh OUTDIR}
export PYTHONPATH=$HOME/site:$PWD:${PYTHONPATH:-}
if ls bench/cuda_probe/ab/*.cu >/dev/null 2>&1; then
  timeout 200 bash bench/cuda_probe/run_ab.sh "$out" bench/cuda_probe/ab/*.cu | grep -v '^{' || true
fi
bash bench/h200_overhead_ab.sh "$out"
MLX_METILE_CUDA_BINARY=cubin MLX_METILE_CUDA_MMA_DENSE=1 MLX_METILE_CUDA_MMA_Q8SPLIT=0 timeout 240 \
  python3 bench/h200.py --out "$out/correct-candidates.json" --correctness quick --shapes 2>&1 |
  grep -v "^{" | cut -c1-1500
