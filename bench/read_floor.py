"""The read floor of a product on MLX's CUDA backend: a kernel that only reads a weight's
bytes (packed weights, scales, biases), launched exactly as mlx-metile's kernels are
(`mx.fast.precompiled_cuda_kernel`, inside the same `mx.compile`d loop over the same pool),
so its time is what any single-kernel product of those bytes costs there - the launch, the
ramp-up and tail of one grid, and the bytes at the rate one grid reaches at that size.

Used by bench/h200.py and the H200 tools; needs nvcc (the GPU machine has it).
"""

from __future__ import annotations

import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

import mlx.core as mx

from mlx_metile.backends.cuda_compile import find_nvcc

# Up to nine buffers (q/k/v's packed weights, scales and biases) of 16-byte words, read
# grid-stride with four loads in flight per thread; one word written per block, only if the
# XOR of everything read hits a constant (which keeps the loads and almost never stores).
# Byte counts must be multiples of 16.
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
#if OUTPUTS == 1
extern "C" __global__ void metile_read_floor(const uint4* a0, const uint4* a1, const uint4* a2, const uint4* a3,
                                             const uint4* a4, const uint4* a5, const uint4* a6, const uint4* a7,
                                             const uint4* a8, unsigned* out, int n0, int n1, int n2, int n3, int n4,
                                             int n5, int n6, int n7, int n8) {
  const unsigned acc = read_words(a0, n0) ^ read_words(a1, n1) ^ read_words(a2, n2) ^ read_words(a3, n3) ^
                       read_words(a4, n4) ^ read_words(a5, n5) ^ read_words(a6, n6) ^ read_words(a7, n7) ^
                       read_words(a8, n8);
  if (acc == 0x9E3779B9u) out[blockIdx.x] = acc;
}
#else  // the same with three outputs (q/k/v's count), written as rarely
extern "C" __global__ void metile_read_floor_3(const uint4* a0, const uint4* a1, const uint4* a2, const uint4* a3,
                                               const uint4* a4, const uint4* a5, const uint4* a6, const uint4* a7,
                                               const uint4* a8, unsigned* out, unsigned* out1, unsigned* out2, int n0,
                                               int n1, int n2, int n3, int n4, int n5, int n6, int n7, int n8) {
  const unsigned acc = read_words(a0, n0) ^ read_words(a1, n1) ^ read_words(a2, n2) ^ read_words(a3, n3) ^
                       read_words(a4, n4) ^ read_words(a5, n5) ^ read_words(a6, n6) ^ read_words(a7, n7) ^
                       read_words(a8, n8);
  if (acc == 0x9E3779B9u) out[blockIdx.x] = out1[blockIdx.x] = out2[blockIdx.x] = acc;
}
#endif
"""
BLOCKS = 2048  # about 16 blocks of 256 threads per SM of the H200: the fastest plain read measured
THREADS = 256  # (bench/results/h200-kernel-ab-2026-11-29-spread-deep.json, fixed_cost_same_call_as_1)


@lru_cache(maxsize=2)
def _binary(outputs: int, arch: str = "sm_90") -> bytes:
    """The entry for `outputs` alone, as a compressed fatbin like mlx-metile's kernels: MLX
    hashes a precompiled kernel's whole binary at every launch, so a larger binary would
    add host time the products do not pay (a two-entry cubin of 19 KB does)."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise RuntimeError("the read floor needs nvcc (MLX_METILE_NVCC, PATH or /usr/local/cuda)")
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "read_floor.cu", Path(tmp) / "read_floor.fatbin"
        src.write_text(SOURCE)
        target = [f"-gencode=arch=compute_{arch[3:]},code={arch}", "-Xfatbin=-compress-all"]
        subprocess.run([nvcc, "-fatbin", *target, "-O3", f"-DOUTPUTS={outputs}", str(src), "-o", str(dst)], check=True)
        return dst.read_bytes()


MAX_BUFFERS = 9


def read_all(arrays: tuple[mx.array, ...], outputs: int = 1) -> mx.array:
    """Reads every byte of `arrays` (one to nine) in one kernel; returns its (meaningless)
    output. `outputs` = 3 gives the op three outputs (as fused q/k/v has), to time what an op's
    outputs cost MLX's host side."""
    if outputs not in (1, 3):
        raise ValueError(f"outputs: expected 1 or 3, got {outputs}")
    if not 1 <= len(arrays) <= MAX_BUFFERS:
        raise ValueError(f"arrays: expected one to {MAX_BUFFERS} arrays, got {len(arrays)}")
    counts = []
    for a in arrays:
        if a.nbytes % 16:
            raise ValueError(f"arrays: every array must hold a multiple of 16 bytes, got {a.nbytes}")
        counts.append(a.nbytes // 16)
    inputs = list(arrays) + [arrays[0]] * (MAX_BUFFERS - len(arrays))
    counts += [0] * (MAX_BUFFERS - len(arrays))
    outs = mx.fast.precompiled_cuda_kernel(
        name="metile_read_floor" if outputs == 1 else "metile_read_floor_3",
        compiled_source=_binary(outputs),
        inputs=inputs,
        output_shapes=[(BLOCKS,)] * outputs,
        output_dtypes=[mx.uint32] * outputs,
        scalars=counts,
        grid=(BLOCKS * THREADS, 1, 1),
        threadgroup=(THREADS, 1, 1),
        shared_memory=0,
        ensure_row_contiguous=True,
    )
    return outs[0] if outputs == 1 else outs
