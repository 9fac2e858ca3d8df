#!/usr/bin/env bash
# On the GPU machine: Nsight Compute of the first timed launch of each harness given.
#   bash tools/cuda_probe/ncu_ab.sh OUTDIR a.cu ...
case "${1:-}" in -h | --help) sed -n "2,/^[^#]/s/^# \{0,1\}//p" "$0"; exit 0 ;; esac
set -uo pipefail
out=${1:?usage: ncu_ab.sh OUTDIR file.cu...}
shift
ncu=/usr/local/cuda/bin/ncu
for f in "$@"; do
  b=$(basename "$f" .cu)
  nvcc -O3 -arch=sm_90 -diag-suppress 177 -lineinfo -o "/tmp/$b" "$f" && timeout 200 $ncu --clock-control none --set full --kernel-name regex:proj --launch-skip 10 --launch-count 1 --import-source yes -o "$out/$b" "/tmp/$b" >/dev/null 2>&1
  $ncu --import "$out/$b.ncu-rep" --page details --print-units base > "$out/$b.txt" 2>&1
  grep -E "Duration|DRAM Throughput|Memory Throughput|L1/TEX Hit|Registers Per|Achieved Occupancy|Theoretical Occupancy|Waves Per SM|Issued Ipc|Block Limit|Stall|Eligible" "$out/$b.txt" | head -40
done
