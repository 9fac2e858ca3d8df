"""The read floor of a product on MLX's CUDA backend: a kernel that only reads a weight's
bytes (packed weights, scales, biases), launched exactly as mlx-metile's kernels are
(`mx.fast.precompiled_cuda_kernel`, inside the same `mx.compile`d loop over the same pool),
so its time is what any single-kernel product of those bytes costs there - the launch, the
ramp-up and tail of one grid, and the bytes at the rate one grid reaches at that size.

Used by bench/h200.py; needs nvcc (the GPU machine has it).
"""

from __future__ import annotations

import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

import mlx.core as mx

# Up to three buffers of 16-byte words, read grid-stride with four loads in flight per
# thread; one word written per block, only if the XOR of everything read hits a constant
# (which keeps the loads and almost never stores). Byte counts must be multiples of 16.
SOURCE = r"""
__device__ __forceinline__ unsigned read_words(const uint4* __restrict__ p, int n) {
  const int stride = gridDim.x * blockDim.x;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = __ldg(p + i), b = __ldg(p + i + stride), c = __ldg(p + i + 2 * stride), d = __ldg(p + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = __ldg(p + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  return acc;
}
extern "C" __global__ void metile_read_floor(const uint4* a, const uint4* b, const uint4* c, unsigned* out,
                                             int na, int nb, int nc) {
  const unsigned acc = read_words(a, na) ^ read_words(b, nb) ^ read_words(c, nc);
  if (acc == 0x9E3779B9u) out[blockIdx.x] = acc;
}
"""
BLOCKS = 2048  # about 16 blocks of 256 threads per SM of the H200: the fastest plain read measured
THREADS = 256  # (bench/results/h200-ab-2026-11-29-session7.json, fixed_cost)


@lru_cache(maxsize=1)
def _cubin(arch: str = "sm_90") -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "read_floor.cu", Path(tmp) / "read_floor.cubin"
        src.write_text(SOURCE)
        subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-O3", str(src), "-o", str(dst)], check=True)
        return dst.read_bytes()


def read_all(arrays: tuple[mx.array, ...]) -> mx.array:
    """Reads every byte of `arrays` (one to three) in one kernel; returns its (meaningless) output."""
    if not 1 <= len(arrays) <= 3:
        raise ValueError(f"arrays: expected one to three arrays, got {len(arrays)}")
    counts = []
    for a in arrays:
        if a.nbytes % 16:
            raise ValueError(f"arrays: every array must hold a multiple of 16 bytes, got {a.nbytes}")
        counts.append(a.nbytes // 16)
    inputs = list(arrays) + [arrays[0]] * (3 - len(arrays))
    counts += [0] * (3 - len(arrays))
    (out,) = mx.fast.precompiled_cuda_kernel(
        name="metile_read_floor",
        compiled_source=_cubin(),
        inputs=inputs,
        output_shapes=[(BLOCKS,)],
        output_dtypes=[mx.uint32],
        scalars=counts,
        grid=(BLOCKS * THREADS, 1, 1),
        threadgroup=(THREADS, 1, 1),
        shared_memory=0,
        ensure_row_contiguous=True,
    )
    return out
