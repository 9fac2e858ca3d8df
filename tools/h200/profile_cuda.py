"""One projection on MLX's CUDA backend, for Nsight Compute: mlx-metile's kernel, stock MLX's,
the read floor's (bench/read_floor.py: a kernel that only reads the same bytes, launched the way
ours are) or PyTorch's `F.linear` (cuBLAS; bf16 only), after three warm-up evaluations, with
the profiler switched on around one more evaluation alone. `--qkv N_KV`: q/k/v instead (widths
N, N_KV, N_KV), mlx-metile's fused kernel, or (`--who separate`) its three separate products:

    ncu --profile-from-start off --clock-control none --section SpeedOfLight \\
        python tools/h200/profile_cuda.py int4 1 --who ours --k 4096 --n 14336

(tools/h200/profile.sh runs a list of cases so.)
"""

from __future__ import annotations

import argparse
import ctypes
import sys
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import mlx_metile as mt  # noqa: E402

WHO = ("ours", "separate", "stock", "floor", "torch")


def profiler_switch(on: bool) -> None:
    """cuProfilerStart / Stop on the primary context of device 0 (which MLX and PyTorch use)."""
    cuda = ctypes.CDLL("libcuda.so.1")
    ctx = ctypes.c_void_p()
    if cuda.cuCtxGetCurrent(ctypes.byref(ctx)) != 0 or not ctx.value:
        device = ctypes.c_int()
        if cuda.cuDeviceGet(ctypes.byref(device), 0) or cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device):
            raise RuntimeError("no CUDA context to profile")
        cuda.cuCtxSetCurrent(ctx)
    rc = cuda.cuProfilerStart() if on else cuda.cuProfilerStop()
    if rc != 0:
        raise RuntimeError(f"cuProfiler{'Start' if on else 'Stop'} returned {rc}")


def qkv(fmt: str, rows: int, k: int, widths: tuple[int, ...], who: str):
    """A function that evaluates q/k/v once: mlx-metile's fused kernel ("ours") or its three
    separate products ("separate")."""
    if who not in ("ours", "separate"):
        raise SystemExit(f"--qkv: --who ours or separate, got {who!r}")
    x = mx.random.normal((rows, k)).astype(mx.bfloat16)
    ws = [(mx.random.normal((n, k)) * k**-0.5).astype(mx.bfloat16) for n in widths]
    if fmt != "bf16":
        bits = 4 if fmt == "int4" else 8
        ws = [mt.QuantizedWeight(*mx.quantize(w, group_size=64, bits=bits), 64, bits) for w in ws]
    mx.eval(x, ws)

    def run():
        outs = mt.fused_linear(x, ws) if who == "ours" else [mt.fused_linear(x, [w]) for w in ws]
        mx.eval(outs)
        mx.synchronize()

    return run


def product(fmt: str, rows: int, k: int, n: int, who: str):
    """A function that evaluates the product once, `who`'s way."""
    if who == "separate":
        raise SystemExit("--who separate: with --qkv only")
    w = (mx.random.normal((n, k)) * k**-0.5).astype(mx.bfloat16)
    x = mx.random.normal((rows, k)).astype(mx.bfloat16)
    mx.eval(w, x)
    if who == "torch":
        if fmt != "bf16":
            raise SystemExit("--who torch: only bf16 (F.linear)")
        import numpy as np
        import torch
        import torch.nn.functional as F

        tw = torch.from_numpy(np.array(w.astype(mx.float32))).to("cuda", torch.bfloat16)
        tx = torch.from_numpy(np.array(x.astype(mx.float32))).to("cuda", torch.bfloat16)
        return lambda: (F.linear(tx, tw), torch.cuda.synchronize())
    if fmt == "bf16":
        fns = {"ours": lambda: mt.linear(x, w), "stock": lambda: x @ w.T}
        arrays = (w,)
    else:
        bits = 4 if fmt == "int4" else 8
        q = mx.quantize(w, group_size=64, bits=bits)
        mx.eval(q)
        fns = {
            "ours": lambda: mt.quantized_linear(x, *q, group_size=64, bits=bits),
            "stock": lambda: mx.quantized_matmul(x, *q, transpose=True, group_size=64, bits=bits),
        }
        arrays = tuple(q)
    if who == "floor":
        from bench.read_floor import read_all

        fns["floor"] = lambda: read_all(arrays)
    fn = fns[who]
    return lambda: (mx.eval(fn()), mx.synchronize())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("format", choices=("int4", "int8", "bf16"))
    parser.add_argument("rows", type=int)
    parser.add_argument("--who", choices=WHO, default="ours")
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--n", type=int, default=14336)
    parser.add_argument("--qkv", type=int, default=0, metavar="N_KV", help="q/k/v of widths N, N_KV, N_KV")
    args = parser.parse_args()
    if not 1 <= args.rows <= 32:
        raise SystemExit(f"rows: expected 1..32, got {args.rows}")
    for name in ("k", "n"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name}: expected a positive width, got {getattr(args, name)}")
    if args.qkv < 0:
        raise SystemExit(f"--qkv: expected the k/v width (0: a single product), got {args.qkv}")
    mx.set_default_device(mx.gpu)
    if args.qkv:
        run = qkv(args.format, args.rows, args.k, (args.n, args.qkv, args.qkv), args.who)
    else:
        run = product(args.format, args.rows, args.k, args.n, args.who)
    for _ in range(3):
        run()
    profiler_switch(True)
    run()
    profiler_switch(False)
    widths = f"{args.n} + 2 x {args.qkv}" if args.qkv else args.n
    print(f"profiled {args.who} {args.format} rows {args.rows} {args.k} -> {widths}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
