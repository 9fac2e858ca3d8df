#!/usr/bin/env bash
# On the GPU machine: compile every harness .cu given (in parallel), then run them one by one.
#   bash tools/cuda_probe/run_ab.sh OUTDIR a.cu b.cu ...
# Results: OUTDIR/ab.jsonl, one line per variant and row count, tagged with the harness
# (one file: the device call brings back a limited number of files); build logs only
# of builds that failed.
case "${1:-}" in -h | --help) sed -n "2,/^[^#]/s/^# \{0,1\}//p" "$0"; exit 0 ;; esac
set -uo pipefail
out=${1:?usage: run_ab.sh OUTDIR file.cu...}
shift
# cuBLAS (the harness's `cublas` variant): the toolkit's, else the one PyTorch's wheels bring
blas=(-lcublas)
if ! echo '#include <cublas_v2.h>' | nvcc -E -x cu - >/dev/null 2>&1; then
  dir=$(python3 -c "import nvidia.cublas as m; print(list(m.__path__)[0])" 2>/dev/null)
  lib=$(ls "$dir"/lib/libcublas.so.* 2>/dev/null | head -1)
  [ -n "$lib" ] && blas=(-I"$dir/include" "$lib" -Xlinker -rpath -Xlinker "$dir/lib")
fi
for f in "$@"; do
  b=$(basename "$f" .cu)
  (nvcc -O3 -arch=sm_90 -diag-suppress 177 -o "/tmp/$b" "$f" "${blas[@]}" 2>"/tmp/$b.build.txt" ||
    cp "/tmp/$b.build.txt" "$out/$b.build.txt") &
done
wait
for f in "$@"; do
  b=$(basename "$f" .cu)
  echo "== $b"
  timeout 120 "/tmp/$b" | sed "s/^{/{\"harness\": \"$b\", /" | tee -a "$out/ab.jsonl"
done
