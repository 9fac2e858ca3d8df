#!/usr/bin/env bash
# On the GPU machine: compile every harness .cu given (in parallel), then run them one by one.
#   bash bench/cuda_probe/run_ab.sh OUTDIR a.cu b.cu ...
set -uo pipefail
out=${1:?usage: run_ab.sh OUTDIR file.cu...}
shift
for f in "$@"; do
  nvcc -O3 -arch=sm_90 -diag-suppress 177 -o "/tmp/$(basename "$f" .cu)" "$f" 2>"$out/$(basename "$f" .cu).build.txt" &
done
wait
for f in "$@"; do
  b=$(basename "$f" .cu)
  echo "== $b"
  timeout 120 "/tmp/$b" | tee "$out/$b.jsonl"
done
