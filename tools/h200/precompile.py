"""Compile, on a machine without a GPU, the CUDA kernels that the benchmarks and GPU tests will ask
for on the H200, into the kernel cache (MLX_METILE_CACHE), so that a fresh GPU machine, which
keeps nothing from one loan to the next, does not spend its device time in nvcc.

Every op takes the CUDA path up to the kernel binary (compiled by the real pipeline); the launch
returns zeros (no GPU here). A cached binary is found only where the source, arch and nvcc path
match: set MLX_METILE_NVCC to the same path on both machines.

    MLX_METILE_CACHE=DIR MLX_METILE_NVCC=/usr/local/cuda/bin/nvcc python tools/h200/precompile.py \
        [generate] [matrix] [matrix-full] [table] [--shapes NAME ...] [--formats bf16 int4 ...]
        [--sections NAME ...]

generate (the default): the end-to-end benchmarks' kernels (bench/test_bench_generate.py,
tools/host/decode_host.py): the patched random Llama (Llama-3.1-8B's block shapes, one layer:
every layer asks for the same kernels); patch's verification declines every part here, but only
after trying each (its kernels, the f32 probes' included, compiled), so the model is then patched
without verification and runs the benchmarks' prefill, decode and verify calls at batch 1 and 8.
matrix / matrix-full: the correctness matrix and gradient check of tests/gpu (tests/gpu/matrix.py,
quick or full; their checks fail here, on zeros, which is expected). table: bench/h200.py's cases
(every shape, format and row count, single and fused).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import mlx.core as mx  # noqa: E402

import mlx_metile as mt  # noqa: E402
from bench import cases  # noqa: E402
from mlx_metile import dispatch, settings  # noqa: E402

PROMPT, VERIFY = 24, 4  # as bench/test_bench_generate.py


def generate(t0: float) -> None:
    from mlx_lm.models.cache import make_prompt_cache

    from bench.random_llama import random_llama

    for fmt in ("int4", "int8", "bf16"):
        model = random_llama(fmt, layers=1)
        max_rows = 4 if fmt == "bf16" else 32  # patch's CUDA defaults
        mt.patch(model, max_rows=max_rows, dense=True).restore()  # verification's kernels (its parts then declined)
        for fuse_norms in (True, False):  # (False: --bench-impls mlx_metile_norms_apart)
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


def matrix(full: bool, sections: list[str] | None = None) -> None:
    """The kernels of tests/gpu: its matrix with the row limit it sets, and the gradient check
    (`sections`: those sections only, no gradient check)."""
    from tests.gpu import matrix as gpu

    m = gpu.Matrix(seed=0)
    with settings.override(MLX_METILE_CUDA_MAX_ROWS=str(gpu.MAX_ROWS_CHECKED)):
        for name, section in gpu.SECTIONS.items():
            if sections and name not in sections:
                continue
            section(m, not full)
            print(f"matrix: {name}", flush=True)
    if not sections:
        with settings.override(MLX_METILE_CUDA_GRADIENTS="1"):
            gpu.gradients(m)
    print(f"matrix: {m.cases} cases ({len(m.failures)} failed on zeros, as expected)")


def table(shapes: list[str] | None, formats: list[str] | None) -> None:
    formats = formats or list(cases.FORMATS)
    for name, (K, N) in cases.SHAPES.items():
        if shapes and name not in shapes:
            continue
        for fmt in formats:
            entry = cases.make_weight(fmt, K, N, 0)
            for rows in cases.ROWS:
                mx.eval(cases.product("mlx_metile", fmt, mx.zeros((rows, K), mx.bfloat16), entry))
        print(f"table: {name}", flush=True)
    for name, (K, widths, epilogue) in cases.FUSED_SHAPES.items():
        if shapes and name not in shapes:
            continue
        for fmt in formats:
            entry = tuple(cases.make_weight(fmt, K, n, j) for j, n in enumerate(widths))
            for rows in cases.ROWS:
                mx.eval(cases.fused_product("mlx_metile", fmt, mx.zeros((rows, K), mx.bfloat16), entry, epilogue))
        print(f"table: {name}", flush=True)


def stub_the_launch() -> None:
    """Every call takes the CUDA path; its launch returns zeros of the outputs' shapes (the
    kernels are compiled when their launch is planned: backends/cuda_launch.py)."""
    dispatch.backend_of = lambda stream: "cuda"
    mx.fast.precompiled_cuda_kernel = lambda **kw: [
        mx.zeros(s, d) for s, d in zip(kw["output_shapes"], kw["output_dtypes"])
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", nargs="*", default=["generate"], choices=["generate", "matrix", "matrix-full", "table"])
    ap.add_argument("--shapes", nargs="*", choices=[*cases.SHAPES, *cases.FUSED_SHAPES], help="table: these only")
    ap.add_argument("--formats", nargs="*", choices=list(cases.FORMATS), help="table: these formats only")
    ap.add_argument("--sections", nargs="*", help="matrix: these sections of tests/gpu/matrix.py only")
    args = ap.parse_args()
    stub_the_launch()
    cache = settings.current().cache_root / "cuda"
    cache.mkdir(parents=True, exist_ok=True)
    before = len(list(cache.iterdir()))
    t0 = time.perf_counter()
    for what in args.what:
        if what == "generate":
            generate(t0)
        elif what == "table":
            table(args.shapes, args.formats)
        else:
            matrix(full=what == "matrix-full", sections=args.sections)
        print(f"{what} done: {time.perf_counter() - t0:.0f} s", flush=True)
    after = len(list(cache.iterdir()))
    print(f"{after - before} kernels compiled into {cache} ({after} there)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
