"""Hand-written MSL kernels used by the emulator tests."""

TILED_GEMM = """
#include <metal_stdlib>
using namespace metal;
// C[M,N] = A[M,K] @ B[K,N], 16x16 tiles through threadgroup memory, any M,N,K.
kernel void tiled_gemm(device const float* A [[buffer(0)]], device const float* B [[buffer(1)]],
                       device float* C [[buffer(2)]], constant uint3& mnk [[buffer(3)]],
                       uint2 gid [[thread_position_in_grid]], uint2 lid [[thread_position_in_threadgroup]]) {
  threadgroup float As[16][16];
  threadgroup float Bs[16][16];
  uint M = mnk.x, N = mnk.y, K = mnk.z;
  uint row = gid.y, col = gid.x;
  float acc = 0.0f;
  for (uint k0 = 0; k0 < K; k0 += 16) {
    uint ak = k0 + lid.x, bk = k0 + lid.y;
    As[lid.y][lid.x] = (row < M && ak < K) ? A[row * K + ak] : 0.0f;
    Bs[lid.y][lid.x] = (bk < K && col < N) ? B[bk * N + col] : 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint k = 0; k < 16; ++k) acc = fma(As[lid.y][k], Bs[k][lid.x], acc);
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (row < M && col < N) C[row * N + col] = acc;
}
"""

SIMDGROUP_GEMM = """
#include <metal_stdlib>
using namespace metal;
// One simdgroup computes an 8x8 tile of C = A @ B with simdgroup matrices; M,N,K multiples of 8.
template <typename T>
void gemm_tile(device const T* A, device const T* B, device float* C, uint N, uint K, uint2 tile) {
  simdgroup_matrix<float, 8, 8> acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  for (uint k = 0; k < K; k += 8) {
    simdgroup_matrix<T, 8, 8> a, b;
    simdgroup_load(a, A, K, ulong2(k, tile.y * 8));
    simdgroup_load(b, B, N, ulong2(tile.x * 8, k));
    simdgroup_multiply_accumulate(acc, a, b, acc);
  }
  simdgroup_store(acc, C, N, ulong2(tile.x * 8, tile.y * 8));
}
kernel void sg_gemm_f32(device const float* A [[buffer(0)]], device const float* B [[buffer(1)]],
                        device float* C [[buffer(2)]], constant uint2& nk [[buffer(3)]],
                        uint2 tg [[threadgroup_position_in_grid]]) {
  gemm_tile(A, B, C, nk.x, nk.y, tg);
}
kernel void sg_gemm_f16(device const half* A [[buffer(0)]], device const half* B [[buffer(1)]],
                        device float* C [[buffer(2)]], constant uint2& nk [[buffer(3)]],
                        uint2 tg [[threadgroup_position_in_grid]]) {
  gemm_tile(A, B, C, nk.x, nk.y, tg);
}
kernel void sg_transpose_load(device const float* A [[buffer(0)]], device float* C [[buffer(1)]]) {
  simdgroup_matrix<float, 8, 8> a;
  simdgroup_load(a, A, 8, ulong2(0, 0), true);
  simdgroup_store(a, C, 8);
  vec<float, 2> e = a.thread_elements();
  (void)e;
}
"""

ROW_REDUCE = """
#include <metal_stdlib>
using namespace metal;
// out[row] = sum / max of x[row, :]; one threadgroup per row, any threadgroup size
// (the last simdgroup may be partial).
kernel void row_reduce(device const float* x [[buffer(0)]], device float* sums [[buffer(1)]],
                       device float* maxes [[buffer(2)]], constant uint& n [[buffer(3)]],
                       uint row [[threadgroup_position_in_grid]], uint lid [[thread_index_in_threadgroup]],
                       uint tpg [[threads_per_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                       uint sg [[simdgroup_index_in_threadgroup]], uint nsg [[simdgroups_per_threadgroup]]) {
  threadgroup float part_sum[32];
  threadgroup float part_max[32];
  float s = 0.0f, m = -INFINITY;
  for (uint i = lid; i < n; i += tpg) {
    float v = x[row * n + i];
    s += v;
    m = max(m, v);
  }
  s = simd_sum(s);
  m = simd_max(m);
  if (lane == 0) { part_sum[sg] = s; part_max[sg] = m; }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lid == 0) {
    float ts = 0.0f, tm = -INFINITY;
    for (uint g = 0; g < nsg; ++g) { ts += part_sum[g]; tm = max(tm, part_max[g]); }
    sums[row] = ts;
    maxes[row] = tm;
  }
}
"""

SHUFFLES = """
#include <metal_stdlib>
using namespace metal;
kernel void shuffles(device const int* x [[buffer(0)]], device int* out [[buffer(1)]],
                     uint lane [[thread_index_in_simdgroup]], uint gid [[thread_position_in_grid]]) {
  int v = x[gid];
  out[gid * 6 + 0] = simd_shuffle(v, (lane * 7) % 32);
  out[gid * 6 + 1] = simd_shuffle_down(v, 3);
  out[gid * 6 + 2] = simd_shuffle_up(v, 5);
  out[gid * 6 + 3] = simd_shuffle_xor(v, 9);
  out[gid * 6 + 4] = simd_broadcast(v, 4);
  out[gid * 6 + 5] = simd_min(v);
}
"""

HALF_BFLOAT_OPS = """
#include <metal_stdlib>
using namespace metal;
// Element-wise arithmetic in half and bfloat: every operation rounds to the type.
kernel void low_precision(device const half* a [[buffer(0)]], device const half* b [[buffer(1)]],
                          device half* h_out [[buffer(2)]], device const bfloat* c [[buffer(3)]],
                          device const bfloat* d [[buffer(4)]], device bfloat* b_out [[buffer(5)]],
                          device float* f_out [[buffer(6)]], uint i [[thread_position_in_grid]]) {
  half x = a[i], y = b[i];
  h_out[i * 3 + 0] = x * y + x;
  h_out[i * 3 + 1] = (x - y) * (x + y);
  h_out[i * 3 + 2] = half(float(x) * 3.0f);
  bfloat u = c[i], v = d[i];
  b_out[i * 3 + 0] = u * v + u;
  b_out[i * 3 + 1] = (u - v) * (u + v);
  b_out[i * 3 + 2] = bfloat(float(u) / 3.0f);
  half4 h4 = half4(x, y, x, y) * half4(y);
  f_out[i] = float(h4.x + h4.w);
}
"""

VECTORS = """
#include <metal_stdlib>
using namespace metal;
kernel void vectors(device const float4* a [[buffer(0)]], device float4* out [[buffer(1)]],
                    device uint2* pos [[buffer(2)]],
                    ushort2 tid [[thread_position_in_grid]], uint3 tpg [[threads_per_grid]]) {
  uint i = tid.y * tpg.x + tid.x;
  float4 v = a[i];
  float2 lo = v.xy, hi = v.zw;
  float3 s = float3(lo, hi.x) + float3(1.0f);
  out[i] = float4(s.zyx, dot(lo, hi)) + float4(exp(0.0f), rsqrt(4.0f), tanh(0.0f), clamp(v.w, 0.0f, 1.0f));
  out[i].w = select(out[i].w, -1.0f, v.x > 100.0f);
  pos[i] = uint2(tid);
}
"""
