"""The H200 benchmark: mlx-metile's ops against stock MLX (and PyTorch where installed) on MLX's
CUDA backend, all in one run, written as one JSON file with the machine, versions and date.

    python bench/h200.py --out bench/results/h200-<what>-<date>.json [--quick] [--shapes ...]
        [--formats ...] [--rows ...] [--fused-rows ...] [--modes eager compiled chained]
        [--products-per-eval N] [--untuned]

For rows x formats x model shapes (bench/cases.py): the effective weight bandwidth of each side,
each timed product using the next weight of a pool several times the 60 MB L2, with the copy
roofline measured in the same run and (compiled and chained timing) the read floor of each weight:
a kernel that only reads its bytes, launched the same way (bench/read_floor.py). Then q/k/v and
gate/up+SwiGLU fused against the same projections called separately (eager).
The correctness of these kernels on the GPU is `pytest tests/gpu`.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx.core as mx  # noqa: E402

import mlx_metile as mt  # noqa: E402
from bench import cases, torch_cuda  # noqa: E402
from bench.cases import FORMATS, FUSED_SHAPES, ROWS, SHAPES, chain, flat, make_pool, product_step, products  # noqa: E402
from bench.timing import copy_roofline, timed_pair, timed_with_host  # noqa: E402
from mlx_metile import settings  # noqa: E402
from mlx_metile.backends.cuda_launch import launch_kind  # noqa: E402
from mlx_metile.cli import machine  # noqa: E402

# eager: the graph built in Python per evaluation; compiled: mx.compile; chained: compiled, each
# product taking the previous one's output (cases.chain), as a model's layers do
MODES = ("eager", "compiled", "chained")
DEFAULT_MODES = ("eager", "compiled")
IMPLS = ("mlx_metile", "stock")
FLOOR_KEY = {"compiled": "read_floor", "chained": "read_floor_chained"}  # where each mode's read floor goes


def bench_case(
    fmt, K, N, rows, pool, nbytes, modes, count, torch=None, fused: str | None | bool = False, untuned: bool = False
) -> dict:
    """One shape, format and row count: each mode's time per product of both sides (and their
    host part), the read floors, and PyTorch's time where it runs. `untuned`: in the compiled
    and chained modes also mlx-metile with no decisions file (MLX_METILE_CUDA_DECISIONS=off: the
    hand rules alone), traced under that setting."""
    x = mx.random.normal((rows, K)).astype(mx.bfloat16)
    if fused is not False:  # one x per product (see cases.products)
        x = [mx.random.normal((rows, K), key=mx.random.key(1000 + i)).astype(mx.bfloat16) for i in range(count)]
        mx.eval(x)
    r: dict = {}
    ours, stock = products(fmt, pool, fused, count)
    if torch is not None and fused is False:  # PyTorch is compared on single products only
        if fmt == "bf16":
            r["torch"] = torch_cuda.linear(torch, K, N, rows, nbytes, count)
        elif fmt == "int4":
            try:
                r["torch"] = torch_cuda.int4(torch, K, N, rows, count)
            except Exception as e:  # a private PyTorch op: its signature has changed between releases
                r["torch_error"] = repr(e)
    for mode in modes:
        if mode == "chained":
            fo, fs = (mx.compile(chain(product_step(impl, fmt, fused), pool, count)) for impl in IMPLS)
            x_in = x[0] if fused is not False else x  # a chain makes its own x per product
        else:
            wrap = mx.compile if mode == "compiled" else (lambda f: f)
            fo, fs = wrap(ours), wrap(stock)
            x_in = x
        t_ours, h_ours = (t / count for t in timed_with_host(lambda fo=fo, x_in=x_in: fo(x_in)))
        t_stock, h_stock = (t / count for t in timed_with_host(lambda fs=fs, x_in=x_in: fs(x_in)))
        if untuned and mode != "eager":
            r[f"{mode}_untuned"] = untuned_case(mode, fmt, fused, pool, ours, count, x_in, nbytes, t_stock, fo)
        r[mode] = {
            "t_ours": t_ours,
            "t_stock": t_stock,
            "host_ours": h_ours,  # of t_ours, the host's part (see timing.timed_with_host)
            "host_stock": h_stock,
            "gbs_ours": nbytes / t_ours / 1e9,
            "gbs_stock": nbytes / t_stock / 1e9,
            "speedup": t_stock / t_ours,
        }
        if mode in FLOOR_KEY:
            key = (fmt, K, N, mode)  # the floor does not depend on the rows: once per pool
            if key not in _floors:
                _floors[key] = read_floor_case(pool, x_in, nbytes, count, chained=mode == "chained")
            r[FLOOR_KEY[mode]] = _floors[key]
    return r


_floors: dict = {}


def untuned_case(mode, fmt, fused, pool, ours, count, x_in, nbytes, t_stock, tuned) -> dict:
    """The mode's mlx-metile side with the hand rules alone: compiled and traced (its first call)
    under MLX_METILE_CUDA_DECISIONS=off, timed after, like the tuned side; then both sides again in
    alternating evaluations (`paired`: the tuned side's time over the rules', both under the same
    drift of the machine - the figure to compare them by; the separate times differ by the order)."""
    f = mx.compile(chain(product_step("mlx_metile", fmt, fused), pool, count) if mode == "chained" else ours)
    with settings.override(MLX_METILE_CUDA_DECISIONS="off"):
        mx.eval(f(x_in))
    t, host = (t / count for t in timed_with_host(lambda: f(x_in)))
    t_tuned, t_rules = (t / count for t in timed_pair(lambda: tuned(x_in), lambda: f(x_in)))
    paired = {"t_tuned": t_tuned, "t_rules": t_rules, "tuned_over_rules": t_tuned / t_rules}
    return {"t_ours": t, "host_ours": host, "gbs_ours": nbytes / t / 1e9, "speedup": t_stock / t, "paired": paired}


def read_floor_case(pool: list, x, nbytes: int, count: int, chained: bool = False) -> dict:
    """The same compiled loop over the same pool with each product replaced by a kernel that
    only reads the weight's bytes (bench/read_floor.py): what one kernel launched through
    MLX costs for these bytes. `chained`: as the chained mode's products (cases.chain), each
    kernel also reading its x."""
    try:
        from bench.read_floor import MAX_BUFFERS, read_all

        if chained:
            if len(flat(pool[0])) >= MAX_BUFFERS:  # no room for x, so nothing to chain on (q/k/v's 9 arrays)
                return {"error": f"a chained floor reads x beside the weights' arrays: at most {MAX_BUFFERS - 1}"}
            floor = mx.compile(chain(lambda x, p: [read_all((*flat(p), x))], pool, count))
        else:
            floor = mx.compile(lambda x: [read_all(flat(pool[i % len(pool)])) for i in range(count)])
        t, host = (t / count for t in timed_with_host(lambda: floor(x)))
    except Exception as e:  # no nvcc on the machine: the column stays empty
        return {"error": repr(e)}
    return {"t": t, "gbs": nbytes / t / 1e9, "host": host}


def bench_fused(K, N_q, N_kv, N_ff, rows) -> dict:
    """q/k/v and gate/up+SwiGLU fused vs the same projections called separately through mlx_metile
    (eager: 32 calls per evaluation, the two ways alternated over 15 evaluations, medians)."""
    out = {}
    size = 8
    x = mx.random.normal((rows, K)).astype(mx.bfloat16)
    qkv = [
        tuple((mx.random.normal((n, K)) * K**-0.5).astype(mx.bfloat16) for n in (N_q, N_kv, N_kv)) for _ in range(size)
    ]
    gu = [
        tuple(
            mx.quantize((mx.random.normal((N_ff, K)) * K**-0.5).astype(mx.bfloat16), group_size=64, bits=4)
            for _ in range(2)
        )
        for _ in range(size)
    ]
    mx.eval(qkv, gu)
    reps = 32
    t_f, t_s = timed_pair(
        lambda: [mt.fused_linear(x, list(qkv[i % size])) for i in range(reps)],
        lambda: [mt.linear(x, w) for i in range(reps) for w in qkv[i % size]],
    )
    t_f, t_s = t_f / reps, t_s / reps
    out["qkv_bf16"] = {"t_fused": t_f, "t_separate": t_s, "speedup": t_s / t_f}

    def fused():
        return [
            mt.fused_linear(x, [mt.QuantizedWeight(*g, 64, 4), mt.QuantizedWeight(*u, 64, 4)], epilogue="swiglu")
            for g, u in (gu[i % size] for i in range(reps))
        ]

    def separate():
        outs = []
        for i in range(reps):
            g, u = gu[i % size]
            a = mt.quantized_linear(x, *g, group_size=64, bits=4)
            b = mt.quantized_linear(x, *u, group_size=64, bits=4)
            outs.append(a * mx.sigmoid(a) * b)
        return outs

    t_f, t_s = (t / reps for t in timed_pair(fused, separate))
    out["gate_up_swiglu_int4"] = {"t_fused": t_f, "t_separate": t_s, "speedup": t_s / t_f}
    return out


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive count, got {value}")
    return value


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="rows 1, 4, 16 (unless --rows)")
    ap.add_argument("--shapes", nargs="*", default=[*SHAPES, *FUSED_SHAPES], choices=[*SHAPES, *FUSED_SHAPES])
    ap.add_argument("--formats", nargs="*", default=["bf16", "int4", "int8"], choices=list(FORMATS))
    ap.add_argument(
        "--products-per-eval",
        type=positive,
        default=cases.PRODUCTS_PER_EVAL,
        help="products per mx.eval (a model's decode step evaluates a few hundred projections at once)",
    )
    ap.add_argument("--modes", nargs="*", default=list(DEFAULT_MODES), choices=list(MODES))
    ap.add_argument("--rows", nargs="*", type=positive, default=None, help="row counts (default: 1-32)")
    ap.add_argument(
        "--untuned",
        action="store_true",
        help="compiled / chained: also mlx-metile with the hand rules alone (no decisions file)",
    )
    ap.add_argument(
        "--fused-rows",
        nargs="*",
        type=positive,
        default=[1, 4, 16],
        help="row counts of the eager fused-against-separate comparison (none: skip it)",
    )
    return ap


def main() -> int:
    args = parser().parse_args()
    count = args.products_per_eval
    modes = [m for m in MODES if m in args.modes]
    mx.set_default_device(mx.gpu)
    report = machine.facts()
    report["products_per_eval"] = count
    report["cuda_launch"] = launch_kind()  # primitive | native (MLX's op from C++) | python
    report["cuda_decisions"] = str(settings.current().cuda_decisions)  # None: the package's file
    report["copy_roofline_bytes_per_s"], report["copy_roofline_method"] = copy_roofline()
    print(f"copy roofline {report['copy_roofline_bytes_per_s'] / 1e12:.2f} TB/s", flush=True)
    rows_list = args.rows or ([1, 4, 16] if args.quick else ROWS)
    torch = torch_cuda.cuda_torch()
    report["torch"] = torch.__version__ if torch is not None else None
    report["cases"] = []
    for shape_name in args.shapes:
        if shape_name in FUSED_SHAPES:
            K, widths, fused = FUSED_SHAPES[shape_name]
            N = sum(widths)
        else:
            (K, N), widths, fused = SHAPES[shape_name], (), False
        for fmt in args.formats:
            pool, nbytes = make_pool(fmt, K, N, widths)
            for rows in rows_list:
                try:
                    r = bench_case(fmt, K, N, rows, pool, nbytes, modes, count, torch, fused, args.untuned)
                except Exception as e:
                    r = {"error": repr(e)}
                r.update({"shape": shape_name, "K": K, "N": N, "format": fmt, "rows": rows, "weight_bytes": nbytes})
                report["cases"].append(r)
                print(json.dumps(r), flush=True)
                Path(args.out).write_text(json.dumps(report, indent=1))  # keep what finished
            del pool
    try:
        report["fused"] = {rows: bench_fused(4096, 4096, 1024, 14336, rows) for rows in args.fused_rows}
    except Exception:
        report["fused"] = {"error": traceback.format_exc()}
    print(json.dumps(report.get("fused"))[:3000], flush=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
