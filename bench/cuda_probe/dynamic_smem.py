"""Does MLX's precompiled-kernel op give a kernel more than 48 KB of dynamic shared memory?
(MLX's source sets CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES when shared_memory >
48000, once: when the kernel is first fetched from its module, keyed by name and binary;
larger rings for the staged schedule would need it.) Each size gets its own kernel name,
so its own first launch: the session-5 version of this probe launched one binary at
ascending sizes, so the attribute was configured at 16 KB and never again, and every size
over 48 KB failed. On the GPU machine, with MLX's CUDA build importable and nvcc on PATH:

    python bench/cuda_probe/dynamic_smem.py

For each size, a kernel fills `size` bytes of dynamic shared memory and sums them back in
another order; its output is compared with numpy. Prints one JSON line per size.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import mlx.core as mx
import numpy as np

SOURCE = r"""
extern "C" __global__ void NAME(const float* x, float* y, int words) {
  extern __shared__ float buf[];
  for (int i = threadIdx.x; i < words; i += blockDim.x) buf[i] = x[i % 1024] + (float)(i % 7);
  __syncthreads();
  float acc = 0.0f;
  for (int i = threadIdx.x; i < words; i += blockDim.x) acc += buf[words - 1 - i];
  y[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
"""
THREADS, BLOCKS = 256, 4


def cubin(name: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "k.cu", Path(tmp) / "k.cubin"
        src.write_text(SOURCE.replace("NAME", name))
        subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-O3", str(src), "-o", str(out)], check=True)
        return out.read_bytes()


def expected(x: np.ndarray, words: int) -> np.ndarray:
    buf = x[np.arange(words) % 1024].astype(np.float64) + np.arange(words) % 7
    per_thread = np.array([buf[words - 1 - np.arange(t, words, THREADS)].sum() for t in range(THREADS)])
    return np.tile(per_thread, BLOCKS)


def main() -> None:
    x = np.random.default_rng(0).standard_normal(1024).astype(np.float32)
    for size in (16 << 10, 48 << 10, 64 << 10, 96 << 10, 160 << 10, 227 << 10):
        words = size // 4
        row = {"shared_memory": size}
        name = f"fill_smem_{size}"
        try:
            (y,) = mx.fast.precompiled_cuda_kernel(
                name=name,
                compiled_source=cubin(name),
                inputs=[mx.array(x)],
                output_shapes=[(BLOCKS * THREADS,)],
                output_dtypes=[mx.float32],
                scalars=[words],
                grid=(BLOCKS * THREADS, 1, 1),
                threadgroup=(THREADS, 1, 1),
                shared_memory=size,
            )
            got = np.array(y, dtype=np.float64)
            want = expected(x, words)
            row["max_rel_err"] = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
            row["ok"] = row["max_rel_err"] < 1e-5
        except Exception as e:  # report the failure of this size and go on to the next
            row["error"] = f"{type(e).__name__}: {e}"[:300]
            row["ok"] = False
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
