"""The tiled (GEMM-shaped) schedule for more than 32 rows, executed as MSL in
the emulator: results against the float64 reference, a row's bits equal to
the same row computed alone (by the split-K schedule), and weights read once
per 64-row tile."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from mlx_metile.emu import Kernel
from mlx_metile.formats import WeightFormat
from mlx_metile.schedule import TILED_BUCKET
from mlx_metile.spec import ProjectionSpec

from ..conftest import requires_emulator
from ..helpers import artifact as compiled
from ..helpers import bits, rand
from .cases import Case, check, quantized_weight

pytestmark = requires_emulator
ROWS = 100  # one full 64-row tile and a 36-row tail


def _cases() -> dict[str, Case]:
    bf, f16 = mx.bfloat16, mx.float16
    return {
        "int4_g64_bf16": Case(rand((ROWS, 256), bf, 1), [quantized_weight(40, 256, bf, 4, 64, 2)], [None]),
        "int8_g128_f16_bias_k_tail": Case(
            rand((ROWS, 384), f16, 3), [quantized_weight(37, 384, f16, 8, 128, 4)], [rand((37,), f16, 5)]
        ),
        "swiglu_int4_g32": Case(
            rand((ROWS, 128), bf, 6),
            [quantized_weight(24, 128, bf, 4, 32, 7), quantized_weight(24, 128, bf, 4, 32, 8)],
            [None, None],
            "swiglu",
        ),
        "qkv_dense_bf16_bias": Case(
            rand((ROWS, 67), bf, 9),
            [rand((20, 67), bf, 10, 0.2), rand((8, 67), bf, 11, 0.2), rand((8, 67), bf, 12, 0.2)],
            [rand((20,), bf, 13), rand((8,), bf, 14), rand((8,), bf, 15)],
        ),
        # group 64 under the g128 weight's VK 128: staged in 64-k steps (lower/tiled.py group_step)
        "int4_g64_int4_g128": Case(
            rand((ROWS, 512), bf, 24),
            [quantized_weight(24, 512, bf, 4, 64, 25), quantized_weight(16, 512, bf, 4, 128, 26)],
            [None, None],
        ),
        "dense_f32_gelu": Case(rand((ROWS, 45), mx.float32, 16), [rand((33, 45), mx.float32, 17, 0.2)], [None], "gelu"),
        "down_residual_dense_f16": Case(
            rand((ROWS, 64), f16, 18), [rand((30, 64), f16, 19, 0.2)], [None], None, rand((ROWS, 30), f16, 20)
        ),
    }


def _as_list(o):
    return o if isinstance(o, list) else [o]


@pytest.mark.parametrize("name", list(_cases()))
def test_tiled_matches_reference_and_split_k_bits(name, env):
    env.set("MLX_METILE_EMULATE", "1")
    case = _cases()[name]
    for rows in (33, 64, ROWS):
        check(case, rows)
    full = [bits(o) for o in _as_list(case.run(ROWS))]
    for r in (0, 1, 31, 32, 63, 64, 65, ROWS - 1):
        alone = [bits(o) for o in _as_list(case.run_rows(r, r + 1))]
        for i, (f, a) in enumerate(zip(full, alone)):
            np.testing.assert_array_equal(f[r], a[0], err_msg=f"{name}: row {r} of {ROWS}, output {i}")


def _np(a: mx.array) -> np.ndarray:
    return np.array(a.view(mx.uint16)) if a.dtype == mx.bfloat16 else np.array(a)


@pytest.mark.parametrize(
    "groups", [((4, 64),), ((8, 32),), ((4, 64), (4, 128))], ids=["q4g64", "q8g32", "q4g64_q4g128"]
)
def test_tiled_reads_weights_once_per_row_tile(groups):
    """(Fused g64 and g128: a group smaller than VK and larger than S, one load per group.)"""
    k, n = 256, 64
    spec = ProjectionSpec("bf16", tuple(WeightFormat("bf16", b, g) for b, g in groups))
    weights = {}
    for i, (bits_, group) in enumerate(groups):
        q, s, b = mx.quantize(rand((n, k), mx.bfloat16, 1 + i, 0.1), group_size=group, bits=bits_)
        weights |= {f"w{i}": _np(q), f"scales{i}": _np(s), f"biases{i}": _np(b)}
    cols = n * len(groups)
    for rows in (33, 64, 65, 130) if len(groups) == 1 else (65,):
        artifact = compiled(spec, rows, K=k, columns=cols)
        assert artifact.schedule.kind == "tiled"
        kernel = Kernel(artifact.source, artifact.entry)
        outs = {f"y{j}": np.zeros((rows, n), np.uint16) for j in range(len(groups))}
        bufs = {"x": _np(rand((rows, k), mx.bfloat16, 2)), **weights, **outs}
        scalars = {"M": rows, "K": k, **{f"N{i}": n for i in range(len(groups))}}
        args = [bufs[p.name] if p.kind == "buffer" else scalars[p.name] for p in artifact.params]
        stats = kernel.dispatch_threadgroups(artifact.grid(rows, cols), artifact.threads_per_group, args)
        order = [p.name for p in artifact.params]
        tiles = -(-rows // TILED_BUCKET)
        for wname, arr in weights.items():
            read = stats.bytes_read[order.index(wname)]
            assert arr.nbytes * tiles <= read <= 1.05 * arr.nbytes * tiles, (
                f"rows={rows}: {wname} read {read} bytes, {read / arr.nbytes:.2f}x its size for {tiles} row tiles"
            )
