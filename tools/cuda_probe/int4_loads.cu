// Load-pattern probe for MLX's int4 layout on the H200 (no math): how fast can each
// way of reading w[N][K/8] (uint32) + scales/biases[N][K/64] (bf16) stream from HBM?
// Build and run: nvcc -O3 -arch=sm_90 -o probe int4_loads.cu && ./probe
// Prints one JSON line per pattern: median GB/s over launches rotating through a pool
// of weight sets 8x larger than L2.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "probe_common.cuh"

constexpr int K = 4096, N = 28672, GS = 64;
constexpr size_t WBYTES = size_t(N) * K / 2, SBYTES = size_t(N) * (K / GS) * 2;
constexpr int POOL = 8;

struct Set {
  const unsigned* w;
  const unsigned short* s;
  const unsigned short* z;
};

// the current mma pattern: block = W warps x 16 columns, K split over warps;
// lane (g, t) reads 8 bytes of columns g and g+8 per group (t-th quarter), B groups per batch
template <int W, int B>
__global__ void cur(Set st) {
  const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  const int chunks = K / GS, per = chunks / W, c0 = warp * per;
  const int na = blockIdx.x * 16 + g, nb = na + 8;
  unsigned acc = 0;
#pragma unroll 1
  for (int c = c0; c < c0 + per; c += B) {
    uint2 a[B], b[B];
    unsigned short sa[B], sb[B], za[B], zb[B];
#pragma unroll
    for (int u = 0; u < B; ++u) {
      a[u] = *reinterpret_cast<const uint2*>(st.w + size_t(na) * (K / 8) + (c + u) * 8 + t * 2);
      b[u] = *reinterpret_cast<const uint2*>(st.w + size_t(nb) * (K / 8) + (c + u) * 8 + t * 2);
      sa[u] = st.s[size_t(na) * (K / GS) + c + u];
      sb[u] = st.s[size_t(nb) * (K / GS) + c + u];
      za[u] = st.z[size_t(na) * (K / GS) + c + u];
      zb[u] = st.z[size_t(nb) * (K / GS) + c + u];
    }
#pragma unroll
    for (int u = 0; u < B; ++u) acc ^= a[u].x ^ a[u].y ^ b[u].x ^ b[u].y ^ sa[u] ^ sb[u] ^ za[u] ^ zb[u];
  }
  if (acc == 0x9e3779b9u) sink = acc;
}

// 16-byte lanes: lane (g, t) reads uint4 t of a 64-byte span (128 k) of columns g and g+8;
// U spans per iteration; W warps split K; CT column tiles of 16 per block
template <int W, int U, int CT>
__global__ void v16(Set st) {
  const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  constexpr int spans = K / 128, per = spans / W;
  const int s0 = warp * per;
  unsigned acc = 0;
#pragma unroll 1
  for (int sp = s0; sp < s0 + per; sp += U) {
    uint4 a[CT][U], b[CT][U];
    unsigned short sa[CT][U], sb[CT][U], za[CT][U], zb[CT][U];
#pragma unroll
    for (int ct = 0; ct < CT; ++ct) {
      const int na = (blockIdx.x * CT + ct) * 16 + g, nb = na + 8;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int kw = (sp + u) * 16 + t * 4;  // word offset
        const int grp = ((sp + u) * 128 + t * 32) / GS;
        a[ct][u] = *reinterpret_cast<const uint4*>(st.w + size_t(na) * (K / 8) + kw);
        b[ct][u] = *reinterpret_cast<const uint4*>(st.w + size_t(nb) * (K / 8) + kw);
        sa[ct][u] = st.s[size_t(na) * (K / GS) + grp];
        sb[ct][u] = st.s[size_t(nb) * (K / GS) + grp];
        za[ct][u] = st.z[size_t(na) * (K / GS) + grp];
        zb[ct][u] = st.z[size_t(nb) * (K / GS) + grp];
      }
    }
#pragma unroll
    for (int ct = 0; ct < CT; ++ct)
#pragma unroll
      for (int u = 0; u < U; ++u)
        acc ^= a[ct][u].x ^ a[ct][u].w ^ b[ct][u].y ^ b[ct][u].z ^ sa[ct][u] ^ sb[ct][u] ^ za[ct][u] ^ zb[ct][u];
  }
  if (acc == 0x9e3779b9u) sink = acc;
}

// warp per column: lane l reads uint4 l of a 512-byte span (1024 k); U spans per iteration;
// each warp takes C consecutive columns; scales: lane l reads group l*32/64 of the span
template <int U, int C>
__global__ void row(Set st) {
  const int lane = threadIdx.x & 31, warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  unsigned acc = 0;
#pragma unroll 1
  for (int c = 0; c < C; ++c) {
    const int n = warp * C + c;
#pragma unroll 1
    for (int sp = 0; sp < K / 1024; sp += U) {
      uint4 a[U];
      unsigned short s[U], z[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        a[u] = *reinterpret_cast<const uint4*>(st.w + size_t(n) * (K / 8) + (sp + u) * 128 + lane * 4);
        s[u] = st.s[size_t(n) * (K / GS) + ((sp + u) * 1024 + lane * 32) / GS];
        z[u] = st.z[size_t(n) * (K / GS) + ((sp + u) * 1024 + lane * 32) / GS];
      }
#pragma unroll
      for (int u = 0; u < U; ++u) acc ^= a[u].x ^ a[u].w ^ s[u] ^ z[u];
    }
  }
  if (acc == 0x9e3779b9u) sink = acc;
}

template <class F>
void timeit(const char* name, F launch) {
  time_launches(name, WBYTES + 2 * SBYTES, POOL, launch);
}

int main() {
  std::vector<Set> sets;
  for (const RawSet& r : weight_pool(WBYTES, SBYTES, POOL))
    sets.push_back({(const unsigned*)r.w, (const unsigned short*)r.s, (const unsigned short*)r.z});
  const size_t n16 = (WBYTES + 2 * SBYTES) / 16;
  const auto flats = flat_pool(WBYTES + 2 * SBYTES, POOL);
  int sms;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  auto F = [&](int p) { return flats[p]; };
  timeit("flat u1 grid=sms*8x256", [&](int p) { flat<1><<<sms * 8, 256>>>(F(p), n16); });
  timeit("flat u4 grid=sms*8x256", [&](int p) { flat<4><<<sms * 8, 256>>>(F(p), n16); });
  timeit("flat u4 grid=sms*4x256", [&](int p) { flat<4><<<sms * 4, 256>>>(F(p), n16); });
  timeit("flat u8 grid=sms*2x256", [&](int p) { flat<8><<<sms * 2, 256>>>(F(p), n16); });
  timeit("cur W4 B1", [&](int p) { cur<4, 1><<<N / 16, 128>>>(sets[p]); });
  timeit("cur W4 B2", [&](int p) { cur<4, 2><<<N / 16, 128>>>(sets[p]); });
  timeit("cur W4 B4", [&](int p) { cur<4, 4><<<N / 16, 128>>>(sets[p]); });
  timeit("cur W8 B2", [&](int p) { cur<8, 2><<<N / 16, 256>>>(sets[p]); });
  timeit("cur W8 B4", [&](int p) { cur<8, 4><<<N / 16, 256>>>(sets[p]); });
  timeit("v16 W4 U1", [&](int p) { v16<4, 1, 1><<<N / 16, 128>>>(sets[p]); });
  timeit("v16 W4 U2", [&](int p) { v16<4, 2, 1><<<N / 16, 128>>>(sets[p]); });
  timeit("v16 W4 U4", [&](int p) { v16<4, 4, 1><<<N / 16, 128>>>(sets[p]); });
  timeit("v16 W8 U1", [&](int p) { v16<8, 1, 1><<<N / 16, 256>>>(sets[p]); });
  timeit("v16 W8 U2", [&](int p) { v16<8, 2, 1><<<N / 16, 256>>>(sets[p]); });
  timeit("v16 W8 U4", [&](int p) { v16<8, 4, 1><<<N / 16, 256>>>(sets[p]); });
  timeit("v16 W2 U4", [&](int p) { v16<2, 4, 1><<<N / 16, 64>>>(sets[p]); });
  timeit("v16 W4 U2 CT2", [&](int p) { v16<4, 2, 2><<<N / 32, 128>>>(sets[p]); });
  timeit("v16 W8 U2 CT2", [&](int p) { v16<8, 2, 2><<<N / 32, 256>>>(sets[p]); });
  timeit("row U1 C1", [&](int p) { row<1, 1><<<N / 4, 128>>>(sets[p]); });
  timeit("row U2 C1", [&](int p) { row<2, 1><<<N / 4, 128>>>(sets[p]); });
  timeit("row U4 C1", [&](int p) { row<4, 1><<<N / 4, 128>>>(sets[p]); });
  timeit("row U4 C4", [&](int p) { row<4, 4><<<N / 16, 128>>>(sets[p]); });
  return 0;
}
