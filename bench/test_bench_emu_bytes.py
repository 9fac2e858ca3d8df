"""Device-memory bytes read and written per call by mlx-metile's kernels (the simdgroup MSL, NAX
direct, NAX staged) and MLX's own quantized and NAX kernels, counted by the Metal emulator. NOT A SPEED MEASUREMENT: the emulator runs kernels on CPU fibers, so the times
pytest-benchmark records here say nothing about a GPU; the byte counts are the result.

python -m pytest bench/test_bench_emu_bytes.py --benchmark-json bench/results/emu-bytes-<date>.json
python bench/render_emu_bytes.py bench/results/emu-bytes-<date>.json

Shapes: Llama-3.1-8B's projections (hidden 4096, KV heads 8 x 128, MLP 14336) divided by SCALE so the
emulator runs them in minutes; affine weights of BITS bits, group 64, float16 activations; rows 1 to
32. Kernels, compiled from the mlx-metal 0.32.4 wheel's headers and launched as MLX's host code
does (mlx_metile.emu.mlx_kernels): affine_qmv (qmv_fast where MLX takes it), affine_qmm_t (staged
through threadgroup memory with simdgroup matrices), affine_qmm_t_nax (matmul2d, weights
dequantized into threadgroup memory), and for dense bfloat16 weights the steel NAX GEMM (A and B
read from device memory straight into fragments). Each kernel runs at every row count, whichever
MLX itself would pick there. Beside them, on the same weights, mlx-metile's kernels as the
emulator's target builds them (mlx_metile.pipeline): `metile_simdgroup` (the default schedule,
simd_splitk), `metile_nax_direct` and `metile_nax_staged` (MLX_METILE_METAL_SCHEDULE's NAX
schedules), for the 4-bit weights and (`_bf16`) the dense bfloat16 ones. The emulator counts the loads and stores the compiled kernel issues,
with no cache: a byte loaded twice counts twice. A 4-bit weight byte counts twice in the NAX
kernel, once per nibble (docs/NAX.md says why).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlx_metile.emu import Kernel
from mlx_metile.emu import mlx_kernels as H
from mlx_metile.formats import WeightFormat
from mlx_metile.pipeline import compile_projection
from mlx_metile.schedule import Shape, choose
from mlx_metile.schedule.nax import nax_schedule
from mlx_metile.spec import ProjectionSpec
from mlx_metile.targets import EMULATOR

SCALE = 8
BITS = 4
GROUP = 64
ROWS = [1, 2, 4, 8, 16, 32]
HIDDEN, KV, MLP = 4096 // SCALE, 1024 // SCALE, 14336 // SCALE
PROJECTIONS = {  # name: (K, N)
    "q_proj": (HIDDEN, HIDDEN),
    "k_proj": (HIDDEN, KV),
    "gate_proj": (HIDDEN, MLP),
    "down_proj": (MLP, HIDDEN),
}
METILE = ["metile_simdgroup", "metile_nax_direct", "metile_nax_staged"]
KERNELS = ["mlx_qmv", "mlx_qmm_t", "mlx_qmm_t_nax", *METILE, "mlx_gemm_nax_bf16", *(k + "_bf16" for k in METILE)]
GEMM_TILE = H.GemmTile(64, 128, 256, 2, 4)  # matmul.cpp's NAX tile for 's', 'c', 'd' devices
LABEL = "emulator byte counts per call - not a speed measurement"


@pytest.fixture(scope="module")
def include():
    try:
        return H.include_dir(H.wheel())
    except H.WheelUnavailable as e:
        pytest.skip(f"MLX's mlx-metal wheel could not be fetched: {e}")


_kernels: dict[tuple, Kernel] = {}


def _metile(kind: str, k: int, n: int, rows: int):
    """mlx-metile's artifact for the shape (f16 activations with the 4-bit weights, bf16 dense)."""
    dense = kind.endswith("_bf16")
    fmt = WeightFormat("bf16") if dense else WeightFormat("f16", BITS, GROUP)
    spec = ProjectionSpec("bf16" if dense else "f16", (fmt,), k_multiple=math.gcd(k, 64))
    policy = kind.removeprefix("metile_").removesuffix("_bf16")
    if policy == "simdgroup":
        schedule = choose(spec, rows, EMULATOR, Shape(k, n))
    else:
        schedule = nax_schedule(spec, rows, policy, EMULATOR)
    return compile_projection(spec, schedule, "msl")


def _run_metile(kernel: Kernel, artifact, buffers: dict, rows: int, k: int, n: int):
    scalars = {"M": rows, "K": k, "N0": n}
    args = [buffers[p.name] if p.kind == "buffer" else scalars[p.name] for p in artifact.params]
    return kernel.dispatch_threadgroups(artifact.grid(rows, n), artifact.threads_per_group, args)


def _kernel(include, kind: str, k: int, n: int, rows: int) -> tuple[Kernel, bool]:
    """The kernel MLX's host code would build for this shape; and for qmv whether it is qmv_fast."""
    if kind.startswith("metile_"):
        artifact = _metile(kind, k, n, rows)
        key = (kind, artifact.key)
        make = lambda: Kernel(artifact.source, artifact.entry)  # noqa: E731
        if key not in _kernels:
            _kernels[key] = make()
        return _kernels[key], False
    if kind == "mlx_qmv":
        fast = n % 8 == 0 and k % 512 == 0
        key = (kind, fast)
        make = lambda: Kernel(  # noqa: E731
            H.qmv_source("float16", GROUP, BITS, fast), H.qmv_name("float16", GROUP, BITS, fast), include_dirs=[include]
        )
    elif kind == "mlx_qmm_t":
        fast, aligned = False, n % 32 == 0
        key = (kind, aligned)
        make = lambda: Kernel(  # noqa: E731
            H.qmm_t_source("float16", GROUP, BITS, aligned),
            H.qmm_t_name("float16", GROUP, BITS, aligned),
            include_dirs=[include],
            address_space_lint=False,  # steel's BlockLoader (tests/emu/test_mlx_kernels.py says why)
        )
    elif kind == "mlx_qmm_t_nax":
        fast, aligned, bm = False, n % 64 == 0, 32 if rows <= 32 else 64
        key = (kind, aligned, bm)
        make = lambda: Kernel(  # noqa: E731
            H.qmm_t_nax_source("float16", GROUP, BITS, bm, aligned),
            H.qmm_t_nax_name("float16", GROUP, BITS, bm, aligned),
            include_dirs=[include],
        )
    else:
        fast, consts = False, H.gemm_constants(rows, n, k, GEMM_TILE, axpby=False)
        key = (kind, tuple(sorted(consts.items())))
        make = lambda: Kernel(  # noqa: E731
            H.gemm_source(False, True, "bfloat16", GEMM_TILE),
            H.gemm_name(False, True, "bfloat16", GEMM_TILE),
            include_dirs=[include],
            function_constants=consts,
        )
    if key not in _kernels:
        _kernels[key] = make()
    return _kernels[key], fast


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("projection", list(PROJECTIONS))
@pytest.mark.parametrize("kind", KERNELS)
def test_emulated_bytes(benchmark, include, kind, projection, rows):
    k, n = PROJECTIONS[projection]
    rng = np.random.default_rng(0)
    kernel, fast = _kernel(include, kind, k, n, rows)
    if kind.startswith("metile_"):
        artifact = _metile(kind, k, n, rows)
        dense = kind.endswith("_bf16")
        order = [p.name for p in artifact.params]
        if dense:
            dtype = "bfloat16"
            bufs = {"w0": H.to_device(rng.standard_normal((n, k)) * 0.05, dtype)}
        else:
            dtype = "float16"
            qw = H.quantize(n, k, BITS, GROUP, dtype, rng)
            bufs = {"w0": qw.w, "scales0": qw.scales, "biases0": qw.biases}
        weights = list(bufs)
        weight_bytes = sum(bufs[w].nbytes for w in weights)
        x = bufs["x"] = H.to_device(rng.standard_normal((rows, k)), dtype)
        y = bufs["y0"] = H.to_device(np.zeros((rows, n)), dtype)

        def call():
            return _run_metile(kernel, artifact, bufs, rows, k, n)

        def weight_read(s):
            return sum(s.bytes_read[order.index(w)] for w in weights)

        def x_read(s):
            return s.bytes_read[order.index("x")]

        def written(s):
            return s.bytes_written[order.index("y0")]

    elif kind == "mlx_gemm_nax_bf16":
        x = H.to_device(rng.standard_normal((rows, k)), "bfloat16")
        w = H.to_device(rng.standard_normal((n, k)) * 0.05, "bfloat16")
        y = H.to_device(np.zeros((rows, n)), "bfloat16")
        weight_bytes = w.nbytes

        def call():
            return H.run_gemm(kernel, x, w, y, rows, n, k, False, True, GEMM_TILE)

        def weight_read(s):
            return s.bytes_read[1]

        def x_read(s):
            return s.bytes_read[0]

        def written(s):
            return s.bytes_written[3]

    else:
        qw = H.quantize(n, k, BITS, GROUP, "float16", rng)
        x = H.to_device(rng.standard_normal((rows, k)), "float16")
        y = H.to_device(np.zeros((rows, n)), "float16")
        weight_bytes = qw.w.nbytes + qw.scales.nbytes + qw.biases.nbytes
        run = {"mlx_qmv": H.run_qmv, "mlx_qmm_t": H.run_qmm_t}.get(kind)

        def call():
            if run is not None:
                return run(kernel, qw, x, y)
            return H.run_qmm_t_nax(kernel, qw, x, y, 32 if rows <= 32 else 64)

        def weight_read(s):
            return s.bytes_read[0] + s.bytes_read[1] + s.bytes_read[2]

        def x_read(s):
            return s.bytes_read[3]

        def written(s):
            return s.bytes_written[4]

    stats = benchmark.pedantic(call, rounds=1, iterations=1)
    benchmark.group = f"{LABEL}: {projection}"
    benchmark.extra_info.update(
        {
            "note": LABEL,
            "kernel": kind + ("_fast" if fast else ""),
            "projection": projection,
            "K": k,
            "N": n,
            "rows": rows,
            "bits": 16 if kind.endswith("_bf16") else BITS,
            "weight_bytes": weight_bytes,
            "weight_bytes_read": weight_read(stats),
            "x_bytes": x.nbytes,
            "x_bytes_read": x_read(stats),
            "bytes_read": sum(stats.bytes_read),
            "bytes_written": sum(stats.bytes_written),
            "y_bytes": y.nbytes,
            "y_bytes_written": written(stats),
        }
    )
