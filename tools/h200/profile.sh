#!/usr/bin/env bash
# Nsight Compute profiles of one product's kernels on the GPU machine (inside tools/h200/device_run.sh):
#   bash tools/h200/profile.sh OUTDIR [who:format:rows[:K:N] ...]
# who: ours | stock | floor | torch (tools/h200/profile_cuda.py); K, N default 4096, 14336. Each case
# profiles every kernel of one evaluation after three warm-ups, clocks unlocked
# (--clock-control none), caches flushed between passes (ncu's default), so weights stream
# from HBM. Writes OUTDIR/ncu-<case>.txt and prints each kernel's summary lines.
case "${1:-}" in -h | --help) sed -n "2,/^[^#]/s/^# \{0,1\}//p" "$0"; exit 0 ;; esac
set -uo pipefail
out=${1:?usage: h200_profile.sh OUTDIR [who:format:rows[:K:N] ...]}
shift
cases=("${@:-ours:int4:1}")
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
if [ -z "$ncu" ]; then echo "ncu not found" >&2; exit 1; fi
mkdir -p "$out"
for c in "${cases[@]}"; do
  IFS=: read -r who fmt rows k n <<<"$c"
  k=${k:-4096} n=${n:-14336}
  file="$out/ncu-$who-$fmt-r$rows-${k}x$n.txt"
  timeout 300 "$ncu" --profile-from-start off --clock-control none \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section Occupancy --section LaunchStats --section SchedulerStats \
    python3 tools/h200/profile_cuda.py "$fmt" "$rows" --who "$who" --k "$k" --n "$n" >"$file" 2>&1
  echo "== $c"
  grep -E "^  [A-Za-z_].*\(|Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Waves Per SM|Issued Warp|profiled|rror" \
    "$file" | head -40
done
