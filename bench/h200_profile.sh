#!/usr/bin/env bash
# Nsight Compute profiles of the mlx_metile kernels on the lent GPU machine
# (after the wheel install of ../shared/DEVICE.md):
#   bash bench/h200_profile.sh OUTDIR [format:rows ...]
# Each case: the third launch of a proj_* kernel, unmodified clocks, caches
# flushed between passes (ncu's default), so weights stream from HBM.
set -uo pipefail
out=${1:?usage: h200_profile.sh OUTDIR [format:rows ...]}
shift
cases=("${@:-int4:1}")
export PYTHONPATH=$HOME/site:$PWD:${PYTHONPATH:-}
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
if [ -z "$ncu" ]; then echo "ncu not found" >&2; exit 1; fi
for c in "${cases[@]}"; do
  fmt=${c%%:*} rows=${c##*:}
  timeout 120 "$ncu" --clock-control none -k regex:proj_ --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section Occupancy --section LaunchStats --section SchedulerStats \
    python3 bench/profile_cuda.py "$fmt" "$rows" > "$out/ncu-$fmt-rows$rows.txt" 2>&1
  grep -E "Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Stall|Long Scoreboard" \
    "$out/ncu-$fmt-rows$rows.txt" | head -20
done
