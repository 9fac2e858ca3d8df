#!/usr/bin/env bash
# On the GPU machine: compile every harness .cu given (in parallel), then run them one by one.
#   bash bench/cuda_probe/run_ab.sh OUTDIR a.cu b.cu ...
# Results: OUTDIR/ab.jsonl, one line per variant and row count, tagged with the harness
# (one file: the device call brings back a limited number of files); build logs only
# of builds that failed.
set -uo pipefail
out=${1:?usage: run_ab.sh OUTDIR file.cu...}
shift
for f in "$@"; do
  b=$(basename "$f" .cu)
  (nvcc -O3 -arch=sm_90 -diag-suppress 177 -o "/tmp/$b" "$f" 2>"/tmp/$b.build.txt" ||
    cp "/tmp/$b.build.txt" "$out/$b.build.txt") &
done
wait
for f in "$@"; do
  b=$(basename "$f" .cu)
  echo "== $b"
  timeout 120 "/tmp/$b" | sed "s/^{/{\"harness\": \"$b\", /" | tee -a "$out/ab.jsonl"
done
