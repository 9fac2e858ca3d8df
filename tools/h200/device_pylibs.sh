#!/usr/bin/env bash
# Makes .pylibs/ (carry it with device_run.sh's call): mlx-lm's model classes for the
# GPU machine, which has no mlx-lm and no network. Copied from this machine's installed mlx-lm with
# its package __init__ reduced to the version, so that importing mlx_lm.models.* does not import
# transformers (mlx-lm's loaders and tokenizers need it; the benchmarks' random-weight models do
# not). tools/h200/device_run.sh puts .pylibs on PYTHONPATH when it is there.
#   bash tools/h200/device_pylibs.sh [PYTHON]
case "${1:-}" in -h | --help) sed -n "2,/^[^#]/s/^# \{0,1\}//p" "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/../.."
src=$("${1:-python3}" -c "import mlx_lm, os; print(os.path.dirname(mlx_lm.__file__))")
rm -rf .pylibs && mkdir -p .pylibs
cp -r "$src" .pylibs/mlx_lm
find .pylibs -name __pycache__ -prune -exec rm -rf {} +
printf 'from ._version import __version__  # (device copy: the models only, no transformers)\n' >.pylibs/mlx_lm/__init__.py
du -sh .pylibs
