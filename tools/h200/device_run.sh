#!/usr/bin/env bash
# On the lent GPU machine: device call 2 of ../shared/DEVICE.md's pair, made right after call 1
# parked .whlA's parts in $HOME/parts; carry [".whlB", ".kcache", ...] (and ".pylibs" where
# mlx-lm is needed). Once per warm machine it installs MLX's CUDA build into $HOME/site and
# installs the package against it (editable, no build isolation: kernels/ is mlx_metile.kernels only
# through an install, so the bare source tree is not importable); it unpacks the kernel cache that
# tools/h200/precompile.py filled on a machine without a GPU (.kcache/*.tar.gz, tars
# of that cache's cuda/ folder), prints what MLX and mlx_metile see, then runs the command:
#   bash tools/h200/device_run.sh CMD...        (METILE_REBUILD=1 rebuilds the extension)
# A device call brings back at most eight files from $OUT: write results elsewhere and tar them
# into one file there.
case "${1:-}" in -h | --help) sed -n "2,/^[^#]/s/^# \{0,1\}//p" "$0"; exit 0 ;; esac
set -uo pipefail
export PYTHONPATH=$HOME/site
[ -d .pylibs ] && PYTHONPATH=$PYTHONPATH:$PWD/.pylibs  # mlx-lm's models: tools/h200/device_pylibs.sh
if ! python3 -c "import mlx.core" 2>/dev/null; then
  [ -d "$HOME/parts" ] || { echo "no \$HOME/parts: repeat device call 1"; exit 3; }
  version=$(cd .whlB && ls mlx-*.whl | sed 's/^mlx-\([^-]*\)-.*/\1/')
  whl=$HOME/mlx_cuda_13-$version-py3-none-manylinux_2_35_x86_64.whl
  cat "$HOME"/parts/part_* .whlB/part_* >"$whl"
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$HOME/site" "$whl" .whlB/mlx-*.whl || exit 4
fi
if [ "${METILE_REBUILD:-0}" = 1 ] || ! python3 -c "import mlx_metile._ext" 2>/dev/null; then
  t0=$SECONDS
  python3 -m pip install -v --no-build-isolation --no-deps -e . >/tmp/metile_build.txt 2>&1 ||
    { tail -30 /tmp/metile_build.txt; exit 5; }
  grep -o "mlx-metile: .*" /tmp/metile_build.txt
  echo "package installed (editable) in $((SECONDS - t0)) s"
fi
export MLX_METILE_CACHE=$HOME/kcache MLX_METILE_NVCC=/usr/local/cuda/bin/nvcc
for part in .kcache/*.tar.gz; do  # (a loan's later calls may carry more parts)
  [ -f "$part" ] && mkdir -p "$HOME/kcache" && tar -xzf "$part" -C "$HOME/kcache"
done
python3 - <<'EOF'
import mlx.core as mx
from mlx_metile.backends.cuda_device import cuda_arch
from mlx_metile.backends.extension import _ext
info = mx.device_info(mx.gpu)
print(f"MLX {mx.__version__} on {mx.default_device()}: {info.get('device_name', '?')}, "
      f"architecture {info.get('architecture')!r} -> mlx_metile builds {cuda_arch()}; "
      f"extension {'loaded' if _ext is not None else 'NOT loaded'}, CUDA primitive "
      f"{getattr(_ext, 'HAS_CUDA_PRIMITIVE', None)}", flush=True)
EOF
"$@"
