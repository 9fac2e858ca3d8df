"""The tuner over the CUDA candidates for bench/h200.py's shapes, on the GPU machine: a tournament per
shape, format and row bucket (against stock MLX, the accuracy gate first), stored in an sqlite store
and written as a decisions file - what the package ships as schedule/tables/cuda_decisions.json.

    python tools/h200/tune_cuda.py --out DIR [--shapes ...] [--formats ...] [--rows ...]
        [--budget S] [--precompile]

DIR gets decisions.sqlite3, cuda_decisions.json and tournaments.txt (every decision with its
records and rejections). --precompile, on a machine without a GPU: every candidate is compiled once
into the kernel cache (MLX_METILE_CACHE; tools/h200/precompile.py says how it travels), nothing gated
or timed. A decisions file the package ships (schedule/tables/cuda_decisions.json) is a run's file,
copied by hand once a benchmark of its routes against the rules (tools/h200/tuned_vs_rules.sh) shows
they pay.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import mlx.core as mx  # noqa: E402

from bench import cases  # noqa: E402
from mlx_metile import settings  # noqa: E402
from mlx_metile.tune import KINDS, Protocol, Store, export_decisions, tournament  # noqa: E402

# bench/h200.py's shapes; "+res": with a residual added (a model's o and down projections, as
# mlx_metile.patch fuses them into bench/test_bench_generate.py's Llama)
SHAPES = ["llama8b_qkv_fused_4096x6144", "llama8b_gateup_swiglu_fused_4096x2x14336", "llama8b_qkvo_4096x4096+res",
          "llama8b_down_14336x4096+res", "llama8b_qkvo_4096x4096", "llama8b_down_14336x4096"]  # fmt: skip
SHAPE_NAMES = [*cases.SHAPES, *cases.FUSED_SHAPES, *(f"{n}+res" for n in cases.SHAPES)]
FORMATS = ["int4", "int8", "bf16"]
ROWS = [1, 2, 4, 8, 16, 32]


def weights_of(fmt: str, K: int, widths: tuple[int, ...]) -> list:
    out = []
    for j, n in enumerate(widths):
        p = cases.make_weight(fmt, K, n, j)
        out.append(p[0] if fmt == "bf16" else cases.quantized_weight(fmt, p))
    mx.eval([a for w in out for a in ((w,) if isinstance(w, mx.array) else (w.w, w.scales))])
    return out


def compile_candidates(x, ws, epilogue, residual, rows) -> None:
    """Each candidate of each row bucket called once on zeros (its kernel compiled; no gate, whose
    float64 references take minutes on a small CPU)."""
    from mlx_metile.schedule import row_bucket
    from mlx_metile.tune.candidates import NATIVE, candidates
    from mlx_metile.tune.site import Site

    site = Site.of(x, ws, None, epilogue, residual)
    for bucket in sorted({row_bucket(r) for r in rows}):
        xb = mx.zeros((bucket, x.shape[-1]), x.dtype)
        rb = None if residual is None else mx.zeros((bucket, residual.shape[-1]), residual.dtype)
        for c in candidates(site, bucket):
            if c.family != NATIVE:
                mx.eval(c.runner(site)(xb, rb))


def sites(shapes: list[str]):
    """(name, K, output widths, epilogue, residual) of each shape."""
    for name in shapes:
        base, residual = name.removesuffix("+res"), name.endswith("+res")
        if base in cases.SHAPES:
            K, N = cases.SHAPES[base]
            yield name, K, (N,), None, residual
        else:
            K, widths, epilogue = cases.FUSED_SHAPES[base]
            yield name, K, widths, epilogue, residual


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--shapes", nargs="*", default=SHAPES, choices=SHAPE_NAMES)
    ap.add_argument("--formats", nargs="*", default=FORMATS, choices=list(cases.FORMATS))
    ap.add_argument("--rows", nargs="*", type=int, default=ROWS)
    ap.add_argument("--budget", type=float, default=20.0, help="seconds of timing per tournament at most")
    ap.add_argument("--chain", type=int, default=16, help="products per timed evaluation, chained (0: one each)")
    ap.add_argument("--deadline", type=float, default=0, help="start no new shape and format after S seconds")
    ap.add_argument("--precompile", action="store_true", help="compile the candidates only (no GPU)")
    args = ap.parse_args()
    if args.precompile:
        from tools.h200.precompile import stub_the_launch

        stub_the_launch()
    # a decisions file drops the compiler (a machine builds with its own), so nvcc against NVRTC
    # is not tuned here
    KINDS.pop("cuda_compiler", None)
    args.out.mkdir(parents=True, exist_ok=True)
    store = Store(args.out / "decisions.sqlite3")
    # the timed calls rotate through weights 8x the H200's L2, as bench/h200.py's pools, chained
    # and compiled as its chained mode (the per-call regime's decisions did not carry to it)
    protocol = Protocol(
        budget_s=args.budget, max_rounds=12, confirm_max_rounds=12, pool_bytes=cases.POOL_BYTES, chain=args.chain
    )
    decisions, t0 = [], time.perf_counter()
    with open(args.out / "tournaments.txt", "a") as log:
        for name, K, widths, epilogue, residual in sites(args.shapes):
            for fmt in args.formats:
                if args.deadline and time.perf_counter() - t0 > args.deadline:
                    print(f"deadline: {name} {fmt} not tuned", flush=True)
                    continue
                ws = weights_of(fmt, K, widths)
                x = mx.zeros((1, K), mx.bfloat16)
                res = mx.zeros((1, widths[0]), mx.bfloat16) if residual else None
                if args.precompile:
                    compile_candidates(x, ws, epilogue, res, args.rows)
                    print(f"{time.perf_counter() - t0:6.0f} s  {name} {fmt}: compiled", flush=True)
                    continue
                found = tournament(x, ws, epilogue, res, rows=list(args.rows), store=store, protocol=protocol, seed=0)
                for d in found.values():
                    decisions.append(d)
                    print(d, file=log, flush=True)
                chosen = ", ".join(f"{b}:{d.chosen}" for b, d in found.items())
                print(f"{time.perf_counter() - t0:6.0f} s  {name} {fmt}: {chosen}", flush=True)
    if not args.precompile:
        path = export_decisions(decisions, args.out / "cuda_decisions.json", about=__doc__.split("\n\n")[0])
        print(f"{len(decisions)} decisions -> {path}")
    else:
        cache = settings.current().cache_root / "cuda"
        print(f"candidates compiled into {cache} ({len(list(cache.iterdir()))} kernels there)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
