"""Accesses the optimiser would widen past 16 bytes are still checked and counted: the kernel
build turns vectorisation off, since ThreadSanitizer's instrumentation sees accesses of 1 to 16
bytes only."""

import numpy as np

from mlx_metile.emu import Kernel

# 16 iterations of two bfloat stores each: 64 contiguous bytes per thread, which the loop and SLP
# vectorisers would merge into stores too wide to be instrumented.
SRC = """
#include <metal_stdlib>
using namespace metal;
template <typename U>
void dequantize(const device uchar* w, float s, float b, threadgroup U* out) {
  for (int i = 0; i < 16; i++) {
    out[2 * i] = static_cast<U>(s * (w[i] & 0x0f) + b);
    out[2 * i + 1] = static_cast<U>(s / 16.0f * (w[i] & 0xf0) + b);
  }
}
kernel void k(device const uchar* w [[buffer(0)]], device float* y [[buffer(1)]],
              uint i [[thread_index_in_threadgroup]]) {
  threadgroup bfloat t[32 * 32];
  dequantize(w + 16 * i, 0.5f, 1.0f, t + 32 * i);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (int j = 0; j < 32; ++j) y[i * 32 + j] = float(t[((i + 1) % 32) * 32 + j]);
}
"""


def test_threadgroup_stores_of_a_dequantizing_loop_are_seen():
    w = (np.arange(512) % 251).astype(np.uint8)
    y = np.zeros((32, 32), np.float32)
    stats = Kernel(SRC, "k").dispatch_threadgroups(1, 32, [w, y])
    q = w.reshape(32, 16).astype(np.float32)
    lo, hi = 0.5 * (q.astype(np.uint8) & 0x0F) + 1.0, 0.5 / 16 * (q.astype(np.uint8) & 0xF0) + 1.0
    expected = np.stack([lo, hi], axis=2).reshape(32, 32)  # exact in bfloat16: multiples of 1/2 below 128
    np.testing.assert_array_equal(y, np.roll(expected, -1, axis=0))
    assert stats.bytes_written[1] == y.nbytes
