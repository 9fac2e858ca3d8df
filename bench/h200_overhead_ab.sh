#!/usr/bin/env bash
# Launch overhead under MLX (bench/launch_overhead.py) with compressed fatbins (the nvcc
# default) and cubins (MLX_METILE_CUDA_BINARY=cubin), alternating, twice each, so that a
# drift of the machine shows as a difference between the two runs of one kind:
#   bash bench/h200_overhead_ab.sh OUTDIR    ->  OUTDIR/overhead-{fatbin,cubin}-{1,2}.json
set -uo pipefail
out=${1:?usage: h200_overhead_ab.sh OUTDIR}
export PYTHONPATH=$HOME/site:$PWD:${PYTHONPATH:-}
for i in 1 2; do
  for kind in fatbin cubin; do
    MLX_METILE_CUDA_BINARY=$kind timeout 90 python3 bench/launch_overhead.py --out "$out/overhead-$kind-$i.json" | tail -1
  done
done
