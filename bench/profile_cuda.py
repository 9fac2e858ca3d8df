"""One mlx_metile and one stock MLX projection (K=4096, N=14336) at a given
format and row count, for Nsight Compute:

    ncu --clock-control none --section SpeedOfLight --section Occupancy \\
        --section LaunchStats -k regex:proj_ --launch-skip 2 --launch-count 1 \\
        python bench/profile_cuda.py int4 1
"""

from __future__ import annotations

import sys
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import mlx_metile as mt  # noqa: E402

fmt = sys.argv[1] if len(sys.argv) > 1 else "int4"
rows = int(sys.argv[2]) if len(sys.argv) > 2 else 1
if fmt not in ("int4", "int8", "bf16"):
    raise SystemExit(f"format: expected int4, int8 or bf16, got {fmt!r}")
mx.set_default_device(mx.gpu)
w = (mx.random.normal((14336, 4096)) * 4096**-0.5).astype(mx.bfloat16)
x = mx.random.normal((rows, 4096)).astype(mx.bfloat16)
if fmt == "bf16":
    ours, stock = (lambda: mt.linear(x, w)), (lambda: x @ w.T)
else:
    bits = 4 if fmt == "int4" else 8
    q = mx.quantize(w, group_size=64, bits=bits)
    mx.eval(q)
    ours = lambda: mt.quantized_linear(x, *q, group_size=64, bits=bits)  # noqa: E731
    stock = lambda: mx.quantized_matmul(x, *q, transpose=True, group_size=64, bits=bits)  # noqa: E731
mx.eval(w, x)
for _ in range(3):
    mx.eval(ours())
    mx.eval(stock())
mx.synchronize()
