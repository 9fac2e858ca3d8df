"""Compile, on a machine without a GPU, the CUDA kernels that the end-to-end benchmarks
(bench/test_bench_generate.py, bench/decode_host.py, bench/cuda_probe/encode_cost.py) will ask
for on the H200, into the kernel cache (MLX_METILE_CACHE), so that a fresh GPU machine, which
forgets everything between sessions, does not spend its device time in nvcc.

The patched random Llama (Llama-3.1-8B's block shapes, one layer: every layer asks for the same
kernels) runs its decode, verify and prefill calls with the op's CUDA path taken up to the
kernel binary (compiled by the real runtime) and the result of each call computed by the stock
composition instead (no GPU here), so that patch's verification and the model run as on the GPU.
A cached binary is found only where the source, arch and nvcc path match: set MLX_METILE_NVCC to
the same path on both machines.

    MLX_METILE_CACHE=DIR MLX_METILE_NVCC=/usr/local/cuda/bin/nvcc python bench/cuda_probe/precompile.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import mlx_metile as mt  # noqa: E402
from bench.random_llama import random_llama  # noqa: E402
from mlx_metile import ops  # noqa: E402
from mlx_metile.emu.toolchain import cache_root  # noqa: E402

PROMPT, VERIFY = 24, 4  # as bench/test_bench_generate.py


def _compile_then_compute(real_project):
    def project(op, x, weights, biases, epilogue, residual, stream):
        real_project(op, x, weights, biases, epilogue, residual, stream)  # plans, so compiles its kernel
        ws, bs = ops.weight_lists(weights, biases)
        return ops.fused_reference(x, ws, bs, epilogue, residual)

    return project


def main() -> int:
    ops._backend = lambda stream: "cuda"
    mx.fast.precompiled_cuda_kernel = lambda **kw: [
        mx.zeros(s, d) for s, d in zip(kw["output_shapes"], kw["output_dtypes"])
    ]  # (never read: results come from the stock composition)
    ops._project = _compile_then_compute(ops._project)
    ops.planned = lambda *args: None  # every call through _project (Projection keeps no plan)
    before = len(list(cache_root("cuda").iterdir()))
    t0 = time.perf_counter()
    for fmt in ("int4", "int8", "bf16"):
        model = random_llama(fmt, layers=1)
        report = mt.patch(model, max_rows=4 if fmt == "bf16" else 32)  # patch's CUDA defaults
        assert report, str(report)
        for batch in (1, 8):
            prompt = mx.random.randint(0, 8192, (batch, PROMPT))
            cache = make_prompt_cache(model)
            mx.eval(model(prompt, cache=cache))  # prefill
            mx.eval(model(prompt[:, -1:], cache=cache))  # decode
            mx.eval(model(prompt[:, -VERIFY:], cache=cache))  # verify
        print(f"{fmt}: {time.perf_counter() - t0:.0f} s", flush=True)
    q = mx.quantize(mx.zeros((4096, 4096), mx.bfloat16), group_size=64, bits=4)  # encode_cost.py's chain
    mx.eval(mt.Projection([mt.QuantizedWeight(*q, 64, 4)])(mx.zeros((1, 4096), mx.bfloat16)))
    after = len(list(cache_root("cuda").iterdir()))
    print(f"{after - before} kernels compiled into {cache_root('cuda')} ({after} there)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
