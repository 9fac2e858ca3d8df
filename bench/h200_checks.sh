#!/usr/bin/env bash
# One device call on the lent GPU machine, after the MLX CUDA wheel is installed
# into $HOME/site (see ../shared/DEVICE.md):
#   bash bench/h200_checks.sh OUTDIR [full|quick]
# 1. gradients and the correctness matrix (default settings);
# 2. Nsight Compute profiles of the default kernel (int4, rows 1 and 16);
# 3. the benchmark (every shape, format and row count, PyTorch's F.linear and int4 kernel)
#    with the default settings, 256 products per evaluation, compiled: the README's headline.
# Each step writes under OUTDIR and is bounded, so a slow one cannot eat the others;
# the benchmark keeps every finished case if its time runs out. On a fresh machine (kernels
# not yet compiled) the full matrix took 257 s and the benchmark 166 s on 2026-11-29: with the
# install, close to one call's 600 s - give the call its whole limit.
# (Sweeps of the tensor-core settings: bench/cuda_sweep.py --settings ...; MLX-free A/B of
# generated kernels: bench/cuda_probe/run_ab.sh; the Llama shapes at a decode step's batching:
#   python3 bench/h200.py --out OUT.json --correctness none --products-per-eval 256 --modes compiled \
#     --shapes llama8b_gateup_4096x14336 llama8b_down_14336x4096 llama8b_qkvo_4096x4096)
set -uo pipefail
out=${1:?usage: h200_checks.sh OUTDIR [full|quick]}
matrix=${2:-full}
export PYTHONPATH=$HOME/site:$PWD:${PYTHONPATH:-}
timeout 300 python3 bench/h200.py --out "$out/correct.json" --correctness "$matrix" --shapes 2>&1 |
  grep -v "^{"
bash bench/h200_profile.sh "$out" ours:int4:1 ours:int4:16
timeout 280 python3 bench/h200.py --out "$out/bench.json" --correctness none --products-per-eval 256 --modes compiled 2>&1 |
  tail -3
