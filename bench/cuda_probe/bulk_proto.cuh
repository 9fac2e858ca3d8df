// Prototypes (hand-written, for timing against the generated kernel only; proto_harness.py puts
// them beside it in one binary): the 4-bit group-64 product at up to 8 rows with its stages brought
// by bulk copies (cp.async.bulk, one per column's contiguous run), each stage 16 columns x KC k,
// the 4 compute warps splitting a stage in contiguous quarters - the generated kernel's sum order
// where KC = K, so results are then bit-identical. Three ways to run the ring: one wave of blocks
// (bulk_q4), persistent blocks (bulk_q4p), persistent with a producer warp (bulk_q4ws).
#pragma once
#include <cuda_bf16.h>

#include "bulk_copy.cuh"

namespace proto {

__device__ __forceinline__ void mma(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                    unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// nibbles q and q + 4 of w as bf16 128 + q pairs (the generated kernel's metile_q4_bf16)
__device__ __forceinline__ unsigned q4(unsigned w, int q) {
  unsigned d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(w >> (4 * q)), "r"(0x000F000Fu), "r"(0x43004300u));
  return d;
}
__device__ __forceinline__ float lo(unsigned v) { return __uint_as_float((v & 0xFFFFu) << 16); }
__device__ __forceinline__ float hi(unsigned v) { return __uint_as_float((v >> 16) << 16); }

// A slot of KC k: 16 columns' weights (rows padded by 32 bytes: rows g on distinct banks), then
// their scales and biases (rows padded by 16).
template <int KC>
struct Slot {
  static constexpr int WROW = KC / 2 + 32, SROW = KC / 32 + 16;
  static constexpr int WB = 16 * WROW, SB = 16 * SROW, BYTES = WB + 2 * SB;
  static constexpr int GPW = KC / 64 / 4;  // groups a warp computes per stage
  static constexpr unsigned COPIED = 16 * (KC / 2) + 2 * 16 * (KC / 32);
};

// One warp issues the stage: 16 columns from `n0`, k from part `kst` of KC; lanes 0-15 a column's
// weights and scales, lanes 16-31 its biases, all completing on `bar` (lane 0 expects the bytes).
template <int KC>
__device__ __forceinline__ void issue_stage(unsigned char* dst, unsigned long long* bar, const unsigned* w,
                                            const __nv_bfloat16* s, const __nv_bfloat16* z, int n0, int kst, int K,
                                            int lane) {
  using L = Slot<KC>;
  const int col = lane & 15, n = n0 + col;
  const char* sz = reinterpret_cast<const char*>(lane < 16 ? s : z) + (size_t)n * (K / 32) + kst * (KC / 32);
  if (lane == 0) mbar_expect(bar, L::COPIED);
  if (lane < 16) {
    bulk(dst + col * L::WROW, reinterpret_cast<const char*>(w) + (size_t)n * (K / 2) + kst * (KC / 2), KC / 2, bar);
    bulk(dst + L::WB + col * L::SROW, sz, KC / 32, bar);
  } else {
    bulk(dst + L::WB + L::SB + col * L::SROW, sz, KC / 32, bar);
  }
}

// A warp's chunk of 4 groups from a slot: the lane's words of columns g and g + 8, and their scales
// and biases (4 groups: one uint2 each).
struct Chunk {
  uint2 wa[4], wb[4], sa, sb, za, zb;
};
template <int KC>
__device__ __forceinline__ Chunk load_chunk(const unsigned char* slot, int g, int t, int grp0) {
  using L = Slot<KC>;
  Chunk c;
  c.sa = *reinterpret_cast<const uint2*>(slot + L::WB + g * L::SROW + grp0 * 2);
  c.sb = *reinterpret_cast<const uint2*>(slot + L::WB + (g + 8) * L::SROW + grp0 * 2);
  c.za = *reinterpret_cast<const uint2*>(slot + L::WB + L::SB + g * L::SROW + grp0 * 2);
  c.zb = *reinterpret_cast<const uint2*>(slot + L::WB + L::SB + (g + 8) * L::SROW + grp0 * 2);
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    c.wa[b] = *reinterpret_cast<const uint2*>(slot + g * L::WROW + (grp0 + b) * 32 + t * 8);
    c.wb[b] = *reinterpret_cast<const uint2*>(slot + (g + 8) * L::WROW + (grp0 + b) * 32 + t * 8);
  }
  return c;
}

// Row g of the block's 8 rows of x (row 0 where it lies past M; ok says whether it is real)
__device__ __forceinline__ const __nv_bfloat16* x_row(const __nv_bfloat16* x, int g, int M, int K, bool& ok) {
  const int row = blockIdx.y * 8 + g;
  ok = row < M;
  return x + (size_t)(ok ? row : 0) * K;
}

// The lane's 16 k of x (row g) for each of the chunk's 4 groups from k0 (its quarter t of each)
__device__ __forceinline__ void load_x(uint4 (&x0)[4], uint4 (&x1)[4], const __nv_bfloat16* xr, bool ok, int k0,
                                       int t) {
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const int kx = k0 + b * 64 + t * 16;
    x0[b] = ok ? *reinterpret_cast<const uint4*>(xr + kx) : make_uint4(0, 0, 0, 0);
    x1[b] = ok ? *reinterpret_cast<const uint4*>(xr + kx + 8) : make_uint4(0, 0, 0, 0);
  }
}

// Software-pipelined x: the chunk at hand takes what was loaded ahead (xn), then the next chunk's
// x is loaded - chunk cg + 4 of stage part kst, or after the stage's last chunk the first of the
// next part (next_kst) - before the chunk at hand is computed.
template <int KC>
__device__ __forceinline__ void take_x(uint4 (&xv0)[4], uint4 (&xv1)[4], uint4 (&xn0)[4], uint4 (&xn1)[4],
                                       const __nv_bfloat16* xr, bool ok, int kst, int next_kst, int g0, int cg, int t) {
#pragma unroll
  for (int b = 0; b < 4; ++b) xv0[b] = xn0[b], xv1[b] = xn1[b];
  if (cg + 4 < Slot<KC>::GPW)
    load_x(xn0, xn1, xr, ok, kst * KC + (g0 + cg + 4) * 64, t);
  else
    load_x(xn0, xn1, xr, ok, next_kst * KC + g0 * 64, t);
}

// The chunk's math, as the generated kernel does it: per group, the sums of x (MMA against ones)
// and of q x (the weights 128 + q against x), then part += s * sum(q x) + (b - 128 s) * sum(x).
__device__ __forceinline__ void chunk_math(const uint4 (&xv0)[4], const uint4 (&xv1)[4], const Chunk& ch,
                                           float (&part)[4]) {
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    float cx[4] = {};
    const unsigned one = 0x3F803F80u;
    mma(cx, one, one, one, one, xv0[b].x, xv0[b].y);
    mma(cx, one, one, one, one, xv0[b].z, xv0[b].w);
    mma(cx, one, one, one, one, xv1[b].x, xv1[b].y);
    mma(cx, one, one, one, one, xv1[b].z, xv1[b].w);
    const unsigned x00 = __byte_perm(xv0[b].x, xv0[b].z, 0x5410), x01 = __byte_perm(xv0[b].x, xv0[b].z, 0x7632);
    const unsigned x20 = __byte_perm(xv0[b].y, xv0[b].w, 0x5410), x21 = __byte_perm(xv0[b].y, xv0[b].w, 0x7632);
    const unsigned x10 = __byte_perm(xv1[b].x, xv1[b].z, 0x5410), x11 = __byte_perm(xv1[b].x, xv1[b].z, 0x7632);
    const unsigned x30 = __byte_perm(xv1[b].y, xv1[b].w, 0x5410), x31 = __byte_perm(xv1[b].y, xv1[b].w, 0x7632);
    const uint2 wa = ch.wa[b], wb = ch.wb[b];
    float c[4] = {};
    mma(c, q4(wa.x, 0), q4(wb.x, 0), q4(wa.x, 1), q4(wb.x, 1), x00, x01);
    mma(c, q4(wa.x, 2), q4(wb.x, 2), q4(wa.x, 3), q4(wb.x, 3), x20, x21);
    mma(c, q4(wa.y, 0), q4(wb.y, 0), q4(wa.y, 1), q4(wb.y, 1), x10, x11);
    mma(c, q4(wa.y, 2), q4(wb.y, 2), q4(wa.y, 3), q4(wb.y, 3), x30, x31);
    const unsigned sw_a = b < 2 ? ch.sa.x : ch.sa.y, sw_b = b < 2 ? ch.sb.x : ch.sb.y;
    const unsigned zw_a = b < 2 ? ch.za.x : ch.za.y, zw_b = b < 2 ? ch.zb.x : ch.zb.y;
    const float sca = (b & 1) ? hi(sw_a) : lo(sw_a), scb = (b & 1) ? hi(sw_b) : lo(sw_b);
    const float bia = fmaf(-128.0f, sca, (b & 1) ? hi(zw_a) : lo(zw_a));
    const float bib = fmaf(-128.0f, scb, (b & 1) ? hi(zw_b) : lo(zw_b));
    part[0] = fmaf(sca, c[0], fmaf(bia, cx[0], part[0]));
    part[1] = fmaf(sca, c[1], fmaf(bia, cx[1], part[1]));
    part[2] = fmaf(scb, c[2], fmaf(bib, cx[0], part[2]));
    part[3] = fmaf(scb, c[3], fmaf(bib, cx[1], part[3]));
  }
}

// A tile's output from the 4 warps' partial sums in `red` (warp, element, lane), added in warp order
__device__ __forceinline__ void store_tile(const float (*red)[4][32], __nv_bfloat16* y, int n0, int lane, int M,
                                           int N) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float v = red[0][e][lane] + red[1][e][lane] + red[2][e][lane] + red[3][e][lane];
    const int n = n0 + g + (e >= 2 ? 8 : 0), row = blockIdx.y * 8 + 2 * t + (e & 1);
    if (row < M && n < N) y[(size_t)row * N + n] = __float2bfloat16(v);
  }
}

__device__ __forceinline__ void init_barriers(unsigned long long* bars, int n, unsigned count) {
  if (threadIdx.x == 0) {
    for (int i = 0; i < n; ++i) mbar_init(&bars[i], count);
    mbar_init_fence();
  }
  __syncthreads();
}

// One wave: block b takes CT tiles of 16 columns from 32 b in turn, K / KC stages each, D slots;
// all 4 warps compute every stage and one __syncthreads frees its slot.
template <int KC, int CT, int D, int MINB>
__global__ void __launch_bounds__(128, MINB)
    bulk_q4(const __nv_bfloat16* __restrict__ x, const unsigned* __restrict__ w, const __nv_bfloat16* __restrict__ s,
            const __nv_bfloat16* __restrict__ z, __nv_bfloat16* __restrict__ y, int M, int K, int N) {
  using L = Slot<KC>;
  extern __shared__ __align__(128) unsigned char dyn[];
  __shared__ __align__(8) unsigned long long bars[D];
  __shared__ float red[CT][4][4][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int ks = K / KC, S = CT * ks;
  const int nbase = blockIdx.x * 16 * CT;
  bool xok;
  const __nv_bfloat16* xr = x_row(x, g, M, K, xok);
  init_barriers(bars, D, 1);
  auto issue = [&](int st) {
    issue_stage<KC>(dyn + (st % D) * L::BYTES, &bars[st % D], w, s, z, nbase + st / ks * 16, st % ks, K, lane);
  };
  if (warp == 0)
    for (int st = 0; st < D && st < S; ++st) issue(st);
  float part[CT][4] = {};
#pragma unroll 1
  for (int st = 0; st < S; ++st) {
    const int tile = st / ks, kst = st % ks;
    mbar_wait(&bars[st % D], (st / D) & 1);
    const unsigned char* slot = dyn + (st % D) * L::BYTES;
    const int g0 = warp * L::GPW;
#pragma unroll 1
    for (int cg = 0; cg < L::GPW; cg += 4) {
      const Chunk ch = load_chunk<KC>(slot, g, t, g0 + cg);
      uint4 xv0[4], xv1[4];
      load_x(xv0, xv1, xr, xok, kst * KC + (g0 + cg) * 64, t);
      float cur[4];
#pragma unroll
      for (int tt = 0; tt < CT; ++tt)  // (the tile's sums in registers: no dynamic index)
        if (tt == tile)
          for (int e = 0; e < 4; ++e) cur[e] = part[tt][e];
      chunk_math(xv0, xv1, ch, cur);
#pragma unroll
      for (int tt = 0; tt < CT; ++tt)
        if (tt == tile)
          for (int e = 0; e < 4; ++e) part[tt][e] = cur[e];
    }
    __syncthreads();  // every warp is done with the slot before it is refilled
    if (warp == 0 && st + D < S) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      issue(st + D);
    }
  }
#pragma unroll
  for (int tt = 0; tt < CT; ++tt)
#pragma unroll
    for (int e = 0; e < 4; ++e) red[tt][warp][e][lane] = part[tt][e];
  __syncthreads();
  if (warp == 0)
#pragma unroll
    for (int tt = 0; tt < CT; ++tt) store_tile(red[tt], y, nbase + tt * 16, lane, M, N);
}

// The tiles of a persistent block b: b, b + grid, ...
__device__ __forceinline__ int persistent_tiles(int N) {
  const int tiles = N / 16;
  return tiles > (int)blockIdx.x ? (tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
}

// Persistent: one ring of D slots streams across the block's tiles (stage j: tile j / ks, K part
// j % ks); a chunk's x is loaded before the chunk ahead of it is computed.
template <int KC, int D, int MINB>
__global__ void __launch_bounds__(128, MINB)
    bulk_q4p(const __nv_bfloat16* __restrict__ x, const unsigned* __restrict__ w, const __nv_bfloat16* __restrict__ s,
             const __nv_bfloat16* __restrict__ z, __nv_bfloat16* __restrict__ y, int M, int K, int N) {
  using L = Slot<KC>;
  extern __shared__ __align__(128) unsigned char dyn[];
  __shared__ __align__(8) unsigned long long bars[D];
  __shared__ float red[2][4][4][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int ks = K / KC, S = persistent_tiles(N) * ks;
  bool xok;
  const __nv_bfloat16* xr = x_row(x, g, M, K, xok);
  const int g0 = warp * L::GPW;
  init_barriers(bars, D, 1);
  auto issue = [&](int j) {
    const int tile = blockIdx.x + (j / ks) * gridDim.x;
    issue_stage<KC>(dyn + (j % D) * L::BYTES, &bars[j % D], w, s, z, tile * 16, j % ks, K, lane);
  };
  if (warp == 0)
    for (int j = 0; j < D && j < S; ++j) issue(j);
  float part[4] = {};
  uint4 xn0[4], xn1[4];
  if (S > 0) load_x(xn0, xn1, xr, xok, g0 * 64, t);
#pragma unroll 1
  for (int j = 0; j < S; ++j) {
    const int tile = blockIdx.x + (j / ks) * gridDim.x, kst = j % ks;
    mbar_wait(&bars[j % D], (j / D) & 1);
    const unsigned char* slot = dyn + (j % D) * L::BYTES;
#pragma unroll 1
    for (int cg = 0; cg < L::GPW; cg += 4) {
      uint4 xv0[4], xv1[4];
      take_x<KC>(xv0, xv1, xn0, xn1, xr, xok, kst, (j + 1) % ks, g0, cg, t);
      chunk_math(xv0, xv1, load_chunk<KC>(slot, g, t, g0 + cg), part);
    }
    const bool last = kst == ks - 1;
    float(*const r)[4][32] = red[(j / ks) & 1];
    if (last) {
#pragma unroll
      for (int e = 0; e < 4; ++e) r[warp][e][lane] = part[e], part[e] = 0.0f;
    }
    __syncthreads();  // every warp is done with the slot (and has written its sums) before the refill
    if (warp == 0 && j + D < S) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      issue(j + D);
    }
    if (last && warp == 1) store_tile(r, y, tile * 16, lane, M, N);
  }
}

// Warp-specialized: warp 4 only issues the bulk copies of a ring of D slots, waiting on each slot's
// `empty` barrier; warps 0-3 wait on its `full` barrier, each computes its quarter of the stage
// and releases the slot by arriving on `empty` - no block-wide barrier a stage. A tile's four
// partial sums meet in shared memory behind a barrier of the four compute warps only. Persistent.
template <int KC, int D, int MINB>
__global__ void __launch_bounds__(160, MINB)
    bulk_q4ws(const __nv_bfloat16* __restrict__ x, const unsigned* __restrict__ w, const __nv_bfloat16* __restrict__ s,
              const __nv_bfloat16* __restrict__ z, __nv_bfloat16* __restrict__ y, int M, int K, int N) {
  using L = Slot<KC>;
  extern __shared__ __align__(128) unsigned char dyn[];
  __shared__ __align__(8) unsigned long long full[D], empty[D];
  __shared__ float red[2][4][4][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int ks = K / KC, S = persistent_tiles(N) * ks;
  if (threadIdx.x == 0)
    for (int i = 0; i < D; ++i) mbar_init(&empty[i], 4);
  init_barriers(full, D, 1);
  if (warp == 4) {  // the producer
#pragma unroll 1
    for (int j = 0; j < S; ++j) {
      const int slot = j % D, tile = blockIdx.x + (j / ks) * gridDim.x;
      mbar_wait(&empty[slot], ((j / D) & 1) ^ 1);
      issue_stage<KC>(dyn + slot * L::BYTES, &full[slot], w, s, z, tile * 16, j % ks, K, lane);
    }
    return;
  }
  bool xok;
  const __nv_bfloat16* xr = x_row(x, g, M, K, xok);
  const int g0 = warp * L::GPW;
  uint4 xn0[4], xn1[4];
  if (S > 0) load_x(xn0, xn1, xr, xok, g0 * 64, t);
  float part[4] = {};
#pragma unroll 1
  for (int j = 0; j < S; ++j) {
    const int slot = j % D, tile = blockIdx.x + (j / ks) * gridDim.x, kst = j % ks;
    mbar_wait(&full[slot], (j / D) & 1);
    const unsigned char* sl = dyn + slot * L::BYTES;
#pragma unroll 1
    for (int cg = 0; cg < L::GPW; cg += 4) {
      uint4 xv0[4], xv1[4];
      take_x<KC>(xv0, xv1, xn0, xn1, xr, xok, kst, (j + 1) % ks, g0, cg, t);  // (x is the same for every tile)
      const Chunk ch = load_chunk<KC>(sl, g, t, g0 + cg);
      if (cg + 4 >= L::GPW) {  // every shared load of the slot issued: release it once they landed
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[slot]);
      }
      chunk_math(xv0, xv1, ch, part);
    }
    if (kst < ks - 1) continue;
    float(*const r)[4][32] = red[(j / ks) & 1];
#pragma unroll
    for (int e = 0; e < 4; ++e) r[warp][e][lane] = part[e], part[e] = 0.0f;
    asm volatile("bar.sync 1, 128;" ::: "memory");  // the four compute warps only
    if (warp == ((j / ks) & 3)) store_tile(r, y, tile * 16, lane, M, N);
  }
}

// Launchers: the slots in dynamic shared memory, the kernel's limit raised at its first launch
template <class Kernel>
int allow_smem(Kernel kernel, int smem) {
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  return smem;
}

inline int sm_count() {
  static int sms = 0;
  if (!sms) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  return sms;
}

#define PROTO_LAUNCH(KERNEL, GRID, THREADS, SMEM)                                                       \
  static const int smem = allow_smem(KERNEL, SMEM);                                                     \
  KERNEL<<<GRID, THREADS, smem>>>((const __nv_bfloat16*)x, (const unsigned*)w, (const __nv_bfloat16*)s, \
                                  (const __nv_bfloat16*)z, (__nv_bfloat16*)y, M, K, N)

template <int KC, int CT, int D, int MINB>
void launch(const void* x, const void* w, const void* s, const void* z, void* y, int M, int K, int N) {
  PROTO_LAUNCH((bulk_q4<KC, CT, D, MINB>), dim3(N / (16 * CT), (M + 7) / 8), 128, D * Slot<KC>::BYTES);
}

template <int KC, int D, int MINB, int PER_SM>
void launchp(const void* x, const void* w, const void* s, const void* z, void* y, int M, int K, int N) {
  PROTO_LAUNCH((bulk_q4p<KC, D, MINB>), dim3(sm_count() * PER_SM, (M + 7) / 8), 128, D * Slot<KC>::BYTES);
}

template <int KC, int D, int MINB, int PER_SM>
void launchws(const void* x, const void* w, const void* s, const void* z, void* y, int M, int K, int N) {
  PROTO_LAUNCH((bulk_q4ws<KC, D, MINB>), dim3(sm_count() * PER_SM, (M + 7) / 8), 160, D * Slot<KC>::BYTES);
}

}  // namespace proto
