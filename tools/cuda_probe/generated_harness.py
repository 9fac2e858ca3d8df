"""The kernel-alone A/B harness: one .cu file holding several variants (settings) of one
projection's generated CUDA kernel and a main() that times each, without MLX, on a pool of weight
sets larger than the L2, and compares every variant's output with the first variant's (put first
a schedule that passed tests/gpu on the GPU: it is the reference).

    python tools/cuda_probe/generated_harness.py OUT.cu --format q4g64 --epilogue swiglu \\
        --variant default= --variant staged0=MLX_METILE_CUDA_MMA_STAGED=0
    nvcc -O3 -arch=sm_90 -o harness OUT.cu && ./harness   # on the GPU machine (or run_ab.sh)

Prints one JSON line per variant and row count: median microseconds, effective
weight GB/s, and the largest difference from the reference relative to its
largest magnitude. A variant named `cublas` (dense bf16 single products) times
cuBLAS's `cublasGemmEx` (bf16 in and out, f32 compute: what PyTorch's F.linear calls)
on the same pool the same way - link with -lcublas. It chooses the schedules' defaults
(docs/SCHEDULES.md); the measurements through MLX are bench/h200.py's.

A variant's settings are MLX_METILE_CUDA_* assignments (variants.py) and two of the
harness's own: HACK=name[,name] (diagnostics.py's rewrites of the source) and BUCKET=b (at most
row bucket b's kernel, launched over ceil(rows / b) row blocks).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mlx_metile import settings as metile_settings  # noqa: E402
from mlx_metile.backends.cuda_device import build_target  # noqa: E402
from mlx_metile.formats import WeightFormat, microscaling  # noqa: E402
from mlx_metile.pipeline import compile_projection  # noqa: E402
from mlx_metile.schedule import Shape, choose, row_bucket, takes_mma  # noqa: E402
from mlx_metile.schedule.cuda_layouts import LAYOUT_NAMES, LAYOUTS  # noqa: E402
from mlx_metile.schedule.cuda_mma import MmaRules  # noqa: E402
from mlx_metile.spec import ProjectionSpec  # noqa: E402
from tools.cuda_probe import diagnostics  # noqa: E402
from tools.cuda_probe.variants import cuda_settings  # noqa: E402

MAIN = r"""
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

__global__ void fill_bits(unsigned* p, size_t n, unsigned seed, unsigned mask) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned v = (unsigned)i * 2654435761u ^ seed;
    v ^= v >> 15; v *= 2246822519u; v ^= v >> 13; v *= 3266489917u; v ^= v >> 16;
    p[i] = v & mask;
  }
}
// bytes lo..hi from the hash
__global__ void fill_u8(unsigned char* p, size_t n, unsigned seed, unsigned lo, unsigned hi) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned v = (unsigned)i * 2654435761u ^ seed;
    v ^= v >> 15; v *= 2246822519u; v ^= v >> 13;
    p[i] = (unsigned char)(lo + v % (hi - lo + 1));
  }
}
// bf16 values lo + (hi - lo) * u, u from the hash
__global__ void fill_bf16(__nv_bfloat16* p, size_t n, unsigned seed, float lo, float hi) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned v = (unsigned)i * 2654435761u ^ seed;
    v ^= v >> 15; v *= 2246822519u; v ^= v >> 13;
    p[i] = __float2bfloat16(lo + (hi - lo) * (v & 0xFFFFFF) / 16777216.0f);
  }
}

static void* alloc_bits(size_t bytes, unsigned seed, unsigned mask) {
  void* p; cudaMalloc(&p, bytes);
  fill_bits<<<1024, 256>>>((unsigned*)p, bytes / 4, seed, mask);
  return p;
}
static void* alloc_u8(size_t n, unsigned seed, unsigned lo, unsigned hi) {
  void* p; cudaMalloc(&p, n);
  fill_u8<<<1024, 256>>>((unsigned char*)p, n, seed, lo, hi);
  return p;
}
static void* alloc_bf16(size_t n, unsigned seed, float lo, float hi) {
  void* p; cudaMalloc(&p, n * 2);
  fill_bf16<<<1024, 256>>>((__nv_bfloat16*)p, n, seed, lo, hi);
  return p;
}
static float bf2f(unsigned short h) { unsigned u = (unsigned)h << 16; float f; memcpy(&f, &u, 4); return f; }

int main() {
  const int K = @K@, rows_list[] = {@ROWS@};
  const int N[] = {@NS@};
  const int POOL = @POOL@;
  std::vector<std::vector<void*>> sets(POOL);
  for (int p = 0; p < POOL; ++p) {
@ALLOC@
  }
  void* x = alloc_bf16((size_t)32 * K, 7u, -1.0f, 1.0f);
  void* y; cudaMalloc(&y, (size_t)32 * @NOUT@ * 2);
  std::vector<unsigned short> ref((size_t)32 * @NOUT@), got(ref.size());
  const double bytes = @BYTES@;
  cudaEvent_t ev[41];
  for (auto& e : ev) cudaEventCreate(&e);
  for (int rows : rows_list) {
@VARIANTS@
  }
  return 0;
}
"""

VARIANT = r"""
    {  // variant @NAME@
      cudaFuncSetAttribute((const void*)@ENTRY@, cudaFuncAttributeMaxDynamicSharedMemorySize, @SMEM@);
      auto launch = [&](int p) {
        @ENTRY@<<<@GRID@, dim3(@TX@, 1, 1), @SMEM@>>>(@ARGS@);
      };
      for (int i = 0; i < 2 * POOL; ++i) launch(i % POOL);
      cudaEventRecord(ev[0]);
      for (int i = 0; i < 40; ++i) { launch(i % POOL); cudaEventRecord(ev[i + 1]); }
      cudaEventSynchronize(ev[40]);
      std::vector<float> ms;
      for (int i = 0; i < 40; ++i) { float m; cudaEventElapsedTime(&m, ev[i], ev[i + 1]); ms.push_back(m); }
      std::sort(ms.begin(), ms.end());
      launch(0);
      cudaMemcpy(@FIRST@ ? ref.data() : got.data(), y, (size_t)rows * @NOUT@ * 2, cudaMemcpyDeviceToHost);
      double diff = 0, mag = 0;
      for (size_t i = 0; i < (size_t)rows * @NOUT@; ++i) {
        const double r = bf2f(ref[i]), v = @FIRST@ ? r : bf2f(got[i]);
        diff = std::max(diff, std::fabs(v - r)); mag = std::max(mag, std::fabs(r));
      }
      const double us = ms[20] * 1e3;
      printf("{\"variant\": \"@NAME@\", \"rows\": %d, \"us\": %.2f, \"GBps\": %.0f, \"rel_diff\": %.3g, \"error\": \"%s\"}\n",
             rows, us, bytes / (us * 1e3), mag > 0 ? diff / mag : diff, cudaGetErrorString(cudaGetLastError()));
      fflush(stdout);
    }
"""


# cuBLAS on the same pool: y[rows, N] = x[rows, K] W[N, K]^T, in cuBLAS's column-major terms
# y^T (N x rows) = op_T(W as K x N) x^T (K x rows)
CUBLAS_LAUNCH = (
    "cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, N[0], rows, K, &one, sets[p][0], CUDA_R_16BF, K, x, "
    "CUDA_R_16BF, K, &zero, y, CUDA_R_16BF, N[0], CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)"
)


def cublas_variant(name: str) -> str:
    """The VARIANT block with cuBLAS's product in place of a generated kernel."""
    text = VARIANT.replace(
        "      cudaFuncSetAttribute((const void*)@ENTRY@, cudaFuncAttributeMaxDynamicSharedMemorySize, @SMEM@);\n",
        "",
    )
    text = text.replace("@ENTRY@<<<@GRID@, dim3(@TX@, 1, 1), @SMEM@>>>(@ARGS@);", CUBLAS_LAUNCH + ";")
    return text.replace("@NAME@", name).replace("@FIRST@", "false").replace("@NOUT@", "N[0]")


# per mode: (AND mask of the element words, scale byte range): e4m3 codes with the top exponent bit
# clear are finite; e8m0 118..126 are 2^-9..2^-1, e4m3 0x28..0x38 are 2^-2..1
MX_FILL = {"mxfp4": ("0xFFFFFFFFu", 118, 126), "mxfp8": ("0xB7B7B7B7u", 118, 126), "nvfp4": ("0xFFFFFFFFu", 0x28, 0x38)}


def parse_format(text: str) -> tuple[str, int, int]:
    """(mode, bits, group size) of q4g64-style affine formats (2-8 bits), of mxfp4 / mxfp8 / nvfp4,
    and ("dense", 0, 0) for dense bf16 weights."""
    if text == "bf16":
        return "dense", 0, 0
    if text in microscaling.MODES:  # (group, bits, scale kind); codes and scales filled finite (MX_FILL)
        group, bits, _ = microscaling.MODES[text]
        return text, bits, group
    m = re.fullmatch(r"q([234568])g(32|64|128)", text)
    if not m:
        raise SystemExit(f"--format: expected bf16, mxfp4, mxfp8, nvfp4 or q4g64 style, got {text!r}")
    return "affine", int(m.group(1)), int(m.group(2))


def weight_format(mode: str, bits: int, group: int) -> WeightFormat:
    """A weight of the harness's format: bf16 values, scales and biases; uint8 scales for the microscaled modes."""
    if mode == "dense":
        return WeightFormat("bf16")
    if mode == "affine":
        return WeightFormat("bf16", bits, group, False, "bf16")
    return WeightFormat("u8", bits, group, False, "bf16", mode)


def kernel_schedule(spec: ProjectionSpec, bucket: int, shape: Shape, layout: int | None):
    """The schedule the op would choose for `bucket` under the current settings; with `layout`,
    the tensor-core schedule of that column layout instead (where the tensor cores take the spec)."""
    target, cfg = build_target(), metile_settings.current()
    if layout is None or not takes_mma(spec, target, cfg):
        return choose(spec, bucket, target, shape, cfg)
    return MmaRules(spec, cfg, target).schedule(bucket, layout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--format", default="q4g64")
    ap.add_argument(
        "--epilogue", choices=("none", "swiglu", "qkv"), default="swiglu", help="qkv: --n's weights, concatenated"
    )
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--n", default="14336", help="output columns; with --epilogue qkv one per weight (4096,1024,1024)")
    ap.add_argument("--rows", default="1,2,4,8,16,32")
    ap.add_argument("--pool", type=int, default=8)
    ap.add_argument("--variant", action="append", required=True, help="NAME=VAR=v;VAR=v (empty: defaults)")
    ap.add_argument(
        "--layout",
        type=int,
        choices=LAYOUTS,
        default=None,
        help="column layout, " + ", ".join(f"{i} {n}" for i, n in enumerate(LAYOUT_NAMES)) + " (default: the op's)",
    )
    args = ap.parse_args()
    mode, bits, group = parse_format(args.format)
    Ns = [int(n) for n in args.n.split(",")]
    if (args.epilogue == "qkv") != (len(Ns) > 1):
        raise SystemExit("--n: several widths with --epilogue qkv (and only there)")
    nw = 2 if args.epilogue == "swiglu" else len(Ns)
    Ns = Ns * nw if args.epilogue == "swiglu" else Ns
    spec = ProjectionSpec(
        "bf16",
        tuple(weight_format(mode, bits, group) for _ in range(nw)),
        "swiglu" if args.epilogue == "swiglu" else None,
        False,
        k_multiple=math.gcd(args.k, 256),  # as the op derives it for CUDA
    )
    rows = [int(r) for r in args.rows.split(",")]
    K, N = args.k, Ns[0]
    cols = N if args.epilogue == "swiglu" else sum(Ns)  # the op's: the gate's columns, else the concatenated ones
    n_out = sum(Ns) if args.epilogue == "qkv" else N  # outputs one after another in y
    alloc, params = [], None
    sources, variants = [], []
    blas = [text.partition("=")[0] for text in args.variant if text.partition("=")[0] == "cublas"]
    if blas and (bits or nw != 1):
        raise SystemExit("--variant cublas: dense bf16 single products only (--format bf16 --epilogue none)")
    if args.variant and args.variant[0].partition("=")[0] == "cublas":
        raise SystemExit("--variant cublas: not first (the first variant is the reference)")
    for vi, text in enumerate(args.variant):
        name, _, settings = text.partition("=")
        if name == "cublas":
            continue
        # HACK=nox,nomath: diagnostic rewrites of the source (diagnostics.py), not settings
        hacks = ",".join(a.partition("=")[2] for a in settings.split(";") if a.startswith("HACK="))
        # BUCKET=b: at most row bucket b's kernel, launched over ceil(rows / b) row blocks (grid y)
        cap = max([0] + [int(a.partition("=")[2]) for a in settings.split(";") if a.startswith("BUCKET=")])
        pseudo = ("HACK=", "BUCKET=")
        kernels = []
        with cuda_settings(";".join(a for a in settings.split(";") if not a.startswith(pseudo))):
            for bucket in sorted({row_bucket(r) for r in rows}):  # as the op picks kernels
                kernel_bucket = min(bucket, cap) if cap else bucket
                schedule = kernel_schedule(spec, kernel_bucket, Shape(K, cols), args.layout)
                kernels.append((bucket, compile_projection(spec, schedule, "cuda")))
        for bucket, art in kernels:
            entry = f"{art.entry}_v{vi}_b{bucket}"  # extern "C": unique across namespaces
            # each variant in its own namespace: their helpers share names
            body_src = (
                diagnostics.apply(hacks, art.source)
                .replace("#include <cuda_fp16.h>", "")
                .replace("#include <cuda_bf16.h>", "")
            )
            sources.append(f"namespace v{vi}_{bucket} {{\n{body_src.replace(art.entry, entry)}\n}}")
            entry = f"v{vi}_{bucket}::{entry}"
            params = art.params
            args_c = []
            for p in art.params:
                if p.kind == "scalar":
                    args_c.append({"M": "rows", "K": "K"}.get(p.name, p.name.replace("N", "N[") + "]"))
                elif p.output:  # output i after the rows x N[j] of the outputs before it
                    at = sum(Ns[: int(p.name[1:] or 0)]) if args.epilogue == "qkv" else 0
                    args_c.append(f"({ {'bf16': '__nv_bfloat16'}[p.dtype] }*)y + (size_t)rows * {at}")
                elif p.name == "x":
                    args_c.append("(const __nv_bfloat16*)x")
                else:
                    idx = [q.name for q in art.params if q.kind == "buffer" and not q.output and q.name != "x"].index(
                        p.name
                    )
                    ctype = {"u32": "unsigned", "bf16": "__nv_bfloat16", "u8": "unsigned char"}[p.dtype]
                    args_c.append(f"(const {ctype}*)sets[p][{idx}]")
            grid_x, bm = art.grid(1, cols)[0] * (2 if "khalf" in hacks else 1), art.schedule.BM
            row_blocks = f"(rows + {bm} - 1) / {bm}"
            grid = f"dim3({row_blocks}, {grid_x}, 1)" if "rowsfirst" in hacks else f"dim3({grid_x}, {row_blocks}, 1)"
            variants.append(
                (name, bucket, entry, grid, art.threads_per_group[0], ", ".join(args_c), art.dynamic_shared)
            )
    wbytes = 0
    for p in params:
        if p.kind != "buffer" or p.output or p.name == "x":
            continue
        i = int(p.name[-1])
        if p.name.startswith("w") and not bits:  # dense: values, not bit patterns (no NaNs)
            seed = f"{i * 4 + 1}u + p * 977u"
            alloc.append(f"    sets[p].push_back(alloc_bf16((size_t)N[{i}] * K, {seed}, -0.05f, 0.05f));")
            wbytes += Ns[i] * K * 2
        elif p.name.startswith("w"):
            seed, bytes_ = f"{i * 4 + 1}u + p * 977u", f"(size_t)N[{i}] * K * {bits} / 8"
            mask = MX_FILL[mode][0] if mode in MX_FILL else "0xFFFFFFFFu"
            alloc.append(f"    sets[p].push_back(alloc_bits({bytes_}, {seed}, {mask}));")
            wbytes += Ns[i] * K * bits // 8
        elif p.name.startswith("scales") and mode in MX_FILL:
            n, (_, lo, hi) = f"(size_t)N[{i}] * (K / {group})", MX_FILL[mode]
            alloc.append(f"    sets[p].push_back(alloc_u8({n}, {i * 4 + 2}u + p * 977u, {lo}, {hi}));")
            wbytes += Ns[i] * (K // group)
        elif p.name.startswith(("scales", "biases")):
            n = f"(size_t)N[{i}] * (K / {group})"
            lo, hi = ("0.001f", "0.01f") if p.name.startswith("scales") else ("-0.05f", "0.05f")
            alloc.append(f"    sets[p].push_back(alloc_bf16({n}, {i * 4 + 2}u + p * 977u, {lo}, {hi}));")
            wbytes += Ns[i] * (K // group) * 2
        else:
            alloc.append(f"    sets[p].push_back(alloc_bf16((size_t)N[{i}], 3u, 0.0f, 0.0f));")
    body = []
    for vi, (name, bucket, entry, grid, tx, args_c, smem) in enumerate(variants):
        lo = max([0] + [b for (nm, b, *_r) in variants if nm == name and b < bucket])
        first = "true" if vi < len({b for (_, b, *_r) in variants}) else "false"
        text = VARIANT
        for key, val in {
            "@NAME@": f"{name} m{bucket}",
            "@ENTRY@": entry,
            "@GRID@": grid,
            "@TX@": str(tx),
            "@ARGS@": args_c,
            "@SMEM@": str(smem),
            "@FIRST@": first,
            "@NOUT@": str(n_out),
        }.items():
            text = text.replace(key, val)
        body.append(f"    if (rows > {lo} && rows <= {bucket}) {text}")
    body += [f"    {cublas_variant(name)}" for name in blas]
    main_src = MAIN
    for key, val in {
        "@K@": str(K),
        "@ROWS@": ", ".join(map(str, rows)),
        "@NS@": ", ".join(map(str, Ns)),
        "@POOL@": str(args.pool),
        "@ALLOC@": "\n".join(alloc),
        "@NOUT@": str(n_out),
        "@BYTES@": f"{float(wbytes)}",
        "@VARIANTS@": "\n".join(body),
    }.items():
        main_src = main_src.replace(key, val)
    head = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <cstring>\n"
    if any("bulkw" in text for text in args.variant):  # the rewrite's mbarrier and bulk-copy helpers
        head += f'#include "{os.path.relpath(Path(__file__).with_name("bulk_copy.cuh"), Path(args.out).resolve().parent)}"\n'
    if blas:
        head += "#include <cublas_v2.h>\n"
        setup = "  cublasHandle_t blas; cublasCreate(&blas);\n  const float one = 1.0f, zero = 0.0f;\n"
        main_src = main_src.replace("  for (int rows : rows_list) {", setup + "  for (int rows : rows_list) {", 1)
    Path(args.out).write_text(head + "\n".join(sources) + main_src)


if __name__ == "__main__":
    main()
