"""Compile, on a machine without a GPU, the CUDA kernels that the end-to-end benchmarks
(bench/test_bench_generate.py, bench/decode_host.py, bench/cuda_probe/encode_cost.py) will ask
for on the H200, into the kernel cache (MLX_METILE_CACHE), so that a fresh GPU machine, which
forgets everything between sessions, does not spend its device time in nvcc.

The patched random Llama (Llama-3.1-8B's block shapes, one layer: every layer asks for the same
kernels) takes the op's CUDA path up to the kernel binary (compiled by the real runtime); the
launch returns zeros (no GPU here). patch's verification therefore declines every part, but only
after trying each (its kernels, the f32 probes' included, compiled); the model is then patched
without verification and runs the benchmarks' prefill, decode and verify calls at batch 1 and 8.
A cached binary is found only where the source, arch and nvcc path match: set MLX_METILE_NVCC to
the same path on both machines.

    MLX_METILE_CACHE=DIR MLX_METILE_NVCC=/usr/local/cuda/bin/nvcc python bench/cuda_probe/precompile.py \
        [generate] [matrix] [matrix-full] [table] [--shapes NAME ...] [--formats bf16 int4 ...]

generate (the default): the end-to-end benchmarks' kernels, as above; matrix / matrix-full: the
correctness matrix and gradient check of tests/gpu (bench/h200.py's, quick or full; their checks
fail here, on zeros, which is expected); table: bench/h200.py's benchmark table (every shape,
format and row count, single and fused).
"""

from __future__ import annotations

import argparse
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


def generate(t0: float) -> None:
    for fmt in ("int4", "int8", "bf16"):
        model = random_llama(fmt, layers=1)
        max_rows = 4 if fmt == "bf16" else 32  # patch's CUDA defaults
        mt.patch(model, max_rows=max_rows, dense=True).restore()  # verification's kernels (its parts then declined)
        for fuse_norms in (True, False):  # (False: BENCH_IMPLS' mlx_metile_norms_apart)
            report = mt.patch(model, max_rows=max_rows, dense=True, verify=False, fuse_norms=fuse_norms)
            assert report, str(report)
            for batch in (1, 8):
                prompt = mx.random.randint(0, 8192, (batch, PROMPT))
                cache = make_prompt_cache(model)
                if batch * PROMPT <= max_rows:  # (a longer prefill runs stock MLX: no kernel, slow here)
                    mx.eval(model(prompt, cache=cache))
                mx.eval(model(prompt[:, -1:], cache=cache))  # decode
                mx.eval(model(prompt[:, -VERIFY:], cache=cache))  # verify
            report.restore()
        print(f"{fmt}: {time.perf_counter() - t0:.0f} s", flush=True)
    q = mx.quantize(mx.zeros((4096, 4096), mx.bfloat16), group_size=64, bits=4)  # encode_cost.py's chain
    mx.eval(mt.Projection([mt.QuantizedWeight(*q, 64, 4)])(mx.zeros((1, 4096), mx.bfloat16)))


def matrix(full: bool) -> None:
    from bench.h200 import correctness, gradients_check

    report = correctness(quick=not full)
    print(f"matrix: {report['cases']} cases ({len(report['failures'])} failed on zeros, as expected)")
    gradients_check()


def table(shapes: list[str] | None, formats: list[str] | None) -> None:
    from bench import h200

    formats = formats or list(h200.FORMATS)
    for name, (K, N) in h200.SHAPES.items():
        if shapes and name not in shapes:
            continue
        for fmt in formats:
            entry = h200.make_weight(fmt, K, N, 0)
            for rows in h200.ROWS:
                mx.eval(h200.product("mlx_metile", fmt, mx.zeros((rows, K), mx.bfloat16), entry))
        print(f"table: {name}", flush=True)
    for name, (K, widths, epilogue) in h200.FUSED_SHAPES.items():
        if shapes and name not in shapes:
            continue
        for fmt in formats:
            entry = tuple(h200.make_weight(fmt, K, n, j) for j, n in enumerate(widths))
            for rows in h200.ROWS:
                mx.eval(h200.fused_product("mlx_metile", fmt, mx.zeros((rows, K), mx.bfloat16), entry, epilogue))
        print(f"table: {name}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", nargs="*", default=["generate"], choices=["generate", "matrix", "matrix-full", "table"])
    ap.add_argument("--shapes", nargs="*", help="table: these of bench/h200.py's shapes only (default: all)")
    ap.add_argument("--formats", nargs="*", help="table: these formats only (default: all)")
    args = ap.parse_args()
    ops._backend = lambda stream: "cuda"
    mx.fast.precompiled_cuda_kernel = lambda **kw: [
        mx.zeros(s, d) for s, d in zip(kw["output_shapes"], kw["output_dtypes"])
    ]
    ops.planned = lambda *args: None  # every call through ops._project (Projection keeps no plan)
    before = len(list(cache_root("cuda").iterdir()))
    t0 = time.perf_counter()
    for what in args.what:
        if what == "generate":
            generate(t0)
        elif what == "table":
            table(args.shapes, args.formats)
        else:
            matrix(full=what == "matrix-full")
        print(f"{what} done: {time.perf_counter() - t0:.0f} s", flush=True)
    after = len(list(cache_root("cuda").iterdir()))
    print(f"{after - before} kernels compiled into {cache_root('cuda')} ({after} there)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
