"""One mlx_metile and one stock MLX int4 projection (K=4096, N=14336) at a
given row count, for Nsight Compute:

    ncu --clock-control none --section SpeedOfLight --section Occupancy \\
        --section LaunchStats --launch-skip 4 --launch-count 4 python bench/profile_cuda.py 1
"""

from __future__ import annotations

import sys
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import mlx_metile as mt  # noqa: E402

rows = int(sys.argv[1]) if len(sys.argv) > 1 else 1
mx.set_default_device(mx.gpu)
w = (mx.random.normal((14336, 4096)) * 4096**-0.5).astype(mx.bfloat16)
q = mx.quantize(w, group_size=64, bits=4)
x = mx.random.normal((rows, 4096)).astype(mx.bfloat16)
mx.eval(q, x)
for _ in range(3):
    mx.eval(mt.quantized_linear(x, *q, group_size=64, bits=4))
    mx.eval(mx.quantized_matmul(x, *q, transpose=True, group_size=64, bits=4))
mx.synchronize()
