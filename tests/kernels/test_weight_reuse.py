"""Small-batch weight reuse, measured: for 1..32 rows the generated MSL reads
every weight, scale and bias buffer (microscaled formats: weights and uint8
scales) at most 1.05x its size per call (the emulator counts every byte each
kernel load touches)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from mlx_metile.emu import Kernel
from mlx_metile.formats import WeightFormat
from mlx_metile.spec import ProjectionSpec

from ..conftest import requires_emulator
from ..helpers import artifact as compiled

pytestmark = requires_emulator
K, N = 512, 48


def _np(a: mx.array) -> np.ndarray:
    if a.dtype == mx.bfloat16:
        return np.array(a.view(mx.uint16))
    return np.array(a)


def _weights(fmt: WeightFormat, n: int, seed: int) -> dict[str, np.ndarray]:
    mx.random.seed(seed)
    w = (mx.random.normal((n, K)) * 0.1).astype(mx.bfloat16)
    if fmt.quantized and not fmt.affine:
        q, s = mx.quantize(w, mode=fmt.mode)
        return {"w": _np(q), "scales": _np(s)}
    if fmt.quantized:
        q, s, b = mx.quantize(w, group_size=fmt.group_size, bits=fmt.bits)
        return {"w": _np(q), "scales": _np(s), "biases": _np(b)}
    return {"w": _np(w)}


SPECS = {
    "dense_bf16_bias": ProjectionSpec("bf16", (WeightFormat("bf16", has_bias=True, bias_dtype="bf16"),)),
    "dense_bf16_k64_vector_loads": ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=64),
    "int4_g32": ProjectionSpec("bf16", (WeightFormat("bf16", 4, 32),)),
    "int4_g128": ProjectionSpec("bf16", (WeightFormat("bf16", 4, 128),)),
    "int8_g64": ProjectionSpec("bf16", (WeightFormat("bf16", 8, 64),)),
    "qkv_int4_g64_bias": ProjectionSpec("bf16", tuple(WeightFormat("bf16", 4, 64, True, "bf16") for _ in range(3))),
    "swiglu_int8_g32": ProjectionSpec("bf16", (WeightFormat("bf16", 8, 32), WeightFormat("bf16", 8, 32)), "swiglu"),
    "down_int4_g64_residual": ProjectionSpec("bf16", (WeightFormat("bf16", 4, 64),), None, True),
    "int2_g64": ProjectionSpec("bf16", (WeightFormat("bf16", 2, 64),)),
    "int3_g32": ProjectionSpec("bf16", (WeightFormat("bf16", 3, 32),)),  # values straddle words
    "int5_g64": ProjectionSpec("bf16", (WeightFormat("bf16", 5, 64),)),
    "int6_g128": ProjectionSpec("bf16", (WeightFormat("bf16", 6, 128),)),
    "mxfp4": ProjectionSpec("bf16", (WeightFormat("u8", 4, 32, mode="mxfp4"),)),
    "mxfp8": ProjectionSpec("bf16", (WeightFormat("u8", 8, 32, mode="mxfp8"),)),
    "nvfp4": ProjectionSpec("bf16", (WeightFormat("u8", 4, 16, mode="nvfp4"),), k_multiple=64),
    # K known a multiple of 16 (or 32) only: a lane's 16 bytes of weights span two k < K masks
    "nvfp4_k16": ProjectionSpec("bf16", (WeightFormat("u8", 4, 16, mode="nvfp4"),), k_multiple=16),
    "int2_g32_k32": ProjectionSpec("bf16", (WeightFormat("bf16", 2, 32),), k_multiple=32),
}


# groups smaller than VK, fused with a wider one (VK 64 or 128): U whole groups (schedule.simt
# whole_groups), so each scale and bias is one load per group; rows 1 (BM 1) and 17 (BM 32)
MIXED = {
    "qkv_mxfp8_int8_g64_dense_bias": ProjectionSpec(
        "bf16",
        (
            WeightFormat("u8", 8, 32, mode="mxfp8"),
            WeightFormat("bf16", 8, 64),
            WeightFormat("bf16", has_bias=True, bias_dtype="bf16"),
        ),
        k_multiple=64,
    ),
    "nvfp4_int4_g64": ProjectionSpec(
        "bf16", (WeightFormat("u8", 4, 16, mode="nvfp4"), WeightFormat("bf16", 4, 64)), k_multiple=64
    ),
    "int4_g64_int4_g128": ProjectionSpec(
        "bf16", (WeightFormat("bf16", 4, 64), WeightFormat("bf16", 4, 128)), k_multiple=64
    ),
}


@pytest.mark.parametrize("name", list(SPECS))
def test_each_weight_byte_is_read_once_per_call(name):
    _check_reads(name, SPECS[name], range(1, 33))


@pytest.mark.parametrize("name", list(MIXED))
def test_groups_smaller_than_vk_are_read_once_per_call(name):
    _check_reads(name, MIXED[name], (1, 17))


def _check_reads(name: str, spec: ProjectionSpec, row_counts) -> None:
    ns = [N, N // 3, N // 3] if len(spec.weights) == 3 else [N] * len(spec.weights)
    arrays: dict[str, np.ndarray] = {}
    for i, fmt in enumerate(spec.weights):
        for key, arr in _weights(fmt, ns[i], 100 + i).items():
            arrays[f"{key}{i}"] = arr
        if fmt.has_bias:
            arrays[f"bias{i}"] = np.arange(ns[i], dtype=np.uint16)
    weight_names = [k for k in arrays]
    cols = ns[0] if spec.epilogue == "swiglu" else sum(ns)
    for rows in row_counts:
        artifact = compiled(spec, rows, K=K, columns=cols)
        kernel = Kernel(artifact.source, artifact.entry)
        x = _np(mx.random.normal((rows, K)).astype(mx.bfloat16))
        bufs = {"x": x, **arrays}
        if spec.has_residual:
            bufs["residual"] = np.zeros((rows, ns[0]), np.uint16)
        out_ns = [ns[0]] if spec.outputs == 1 else ns
        for j, n in enumerate(out_ns):
            bufs[f"y{j}"] = np.zeros((rows, n), np.uint16)
        scalars = {"M": rows, "K": K, **{f"N{i}": n for i, n in enumerate(ns)}}
        order = [p.name for p in artifact.params]
        args = [bufs[p.name] if p.kind == "buffer" else scalars[p.name] for p in artifact.params]
        stats = kernel.dispatch_threadgroups(artifact.grid(rows, cols), artifact.threads_per_group, args)
        for wname in weight_names:
            i = order.index(wname)
            size = bufs[wname].nbytes
            assert stats.bytes_read[i] <= 1.05 * size, (
                f"{name}, rows={rows}: {wname} read {stats.bytes_read[i]} bytes for its {size} ({stats.bytes_read[i] / size:.2f}x)"
            )
            assert stats.bytes_read[i] >= size, f"{name}, rows={rows}: {wname} not fully read"
        for j in range(len(out_ns)):
            i = order.index(f"y{j}")
            assert stats.bytes_written[i] == bufs[f"y{j}"].nbytes, (
                f"{name}: y{j} written {stats.bytes_written[i]} bytes"
            )
