#!/usr/bin/env bash
# On the GPU machine (through tools/h200/device_run.sh), after tools/h200/tune_cuda.py wrote a
# decisions file: bench/h200.py's chained products of the tuned routes against the hand rules'
# (--untuned) against stock MLX, then patched decoding (bench/test_bench_generate.py, Llama-3.1-8B's
# blocks, random weights) with the tuned routes and with the hand rules alone, stock in the same run.
#   bash tools/h200/tuned_vs_rules.sh DECISIONS.json OUT_DIR [FORMAT ...]
case "${1:-}" in -h | --help) sed -n "2,/^[^#]/s/^# \{0,1\}//p" "$0"; exit 0 ;; esac
set -uo pipefail
decisions=$1 out=$2
shift 2
formats=${*:-int4 int8 bf16}
mkdir -p "$out"
export MLX_METILE_CUDA_DECISIONS=$decisions
python3 bench/h200.py --out "$out/chained.json" --modes chained --untuned --formats $formats \
  --shapes llama8b_qkvo_4096x4096 llama8b_down_14336x4096 llama8b_gateup_swiglu_fused_4096x2x14336 \
  llama8b_qkv_fused_4096x6144 --rows 1 2 4 8 16 32 --fused-rows | grep -v '^{' | tail -3
model=(--bench-hidden 4096 --bench-layers 32 --bench-intermediate 14336 --bench-head-dim 128 --bench-decode 16)
for fmt in $formats; do
  [ "$fmt" = bf16 ] && continue
  python3 -m pytest -q -p no:cacheprovider bench/test_bench_generate.py -k 'decode_async or verify' "${model[@]}" \
    --bench-formats "$fmt" --bench-impls stock,mlx_metile --benchmark-json "$out/generate-$fmt-tuned.json" | tail -2
  MLX_METILE_CUDA_DECISIONS=off python3 -m pytest -q -p no:cacheprovider bench/test_bench_generate.py \
    -k 'decode_async or verify' "${model[@]}" --bench-formats "$fmt" --bench-impls mlx_metile \
    --benchmark-json "$out/generate-$fmt-rules.json" | tail -2
done
