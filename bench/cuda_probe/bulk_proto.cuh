// Prototype (hand-written, for timing against the generated kernel only): the 4-bit group-64
// product at up to 8 rows with the block's stages brought by bulk copies (cp.async.bulk, one per
// column's contiguous run), each stage 16 columns x the whole K (KC = K), the 4 warps splitting
// it in contiguous quarters - the generated kernel's sum order, so results should be bit-identical.
#pragma once
#include <cuda_bf16.h>

namespace proto {

__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(bar));
  asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(a), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect(unsigned long long* bar, unsigned bytes) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(bar));
  asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(a), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(bar));
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(d),
               "l"(src), "r"(bytes), "r"(b)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(bar));
  asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared.b64 p, [%0], %1;\n @!p bra W;\n}" ::"r"(a),
               "r"(parity)
               : "memory");
}
__device__ __forceinline__ void mma(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                    unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ unsigned q4(unsigned w, int q) {
  unsigned d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(w >> (4 * q)), "r"(0x000F000Fu), "r"(0x43004300u));
  return d;
}
__device__ __forceinline__ float lo(unsigned v) { return __uint_as_float((v & 0xFFFFu) << 16); }
__device__ __forceinline__ float hi(unsigned v) { return __uint_as_float((v >> 16) << 16); }

// KC: k per stage (K / KC stages per tile); CT: column tiles of 16 per block, in turn; D: slots;
// MINB: blocks per SM asked for
template <int KC, int CT, int D, int MINB>
__global__ void __launch_bounds__(128, MINB)
    bulk_q4(const __nv_bfloat16* __restrict__ x, const unsigned* __restrict__ w, const __nv_bfloat16* __restrict__ s,
            const __nv_bfloat16* __restrict__ z, __nv_bfloat16* __restrict__ y, int M, int K, int N) {
  constexpr int WROW = KC / 2 + 32;  // a column's bytes of a stage, padded: rows g on distinct banks
  constexpr int SROW = KC / 32 + 16;
  constexpr int WB = 16 * WROW, SB = 16 * SROW, SLOT = WB + 2 * SB;
  constexpr int GPW = KC / 64 / 4;  // groups per warp per stage
  extern __shared__ __align__(128) unsigned char dyn[];
  __shared__ __align__(8) unsigned long long bars[D];
  __shared__ float red[4][CT][4][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int ks = K / KC, S = CT * ks;
  const int nbase = blockIdx.x * 16 * CT;
  const int xrow = blockIdx.y * 8 + g;
  const bool xok = xrow < M;
  if (threadIdx.x == 0) {
    for (int i = 0; i < D; ++i) mbar_init(&bars[i], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  auto issue = [&](int st) {  // warp 0
    const int tile = st / ks, kst = st % ks;
    unsigned char* dst = dyn + (st % D) * SLOT;
    unsigned long long* bar = &bars[st % D];
    const int col = lane & 15, n = nbase + tile * 16 + col;
    if (lane == 0) mbar_expect(bar, 16 * (KC / 2) + 2 * 16 * (KC / 32));
    if (lane < 16) {
      bulk(dst + col * WROW, reinterpret_cast<const char*>(w) + (size_t)n * (K / 2) + kst * (KC / 2), KC / 2, bar);
      bulk(dst + WB + col * SROW, reinterpret_cast<const char*>(s) + (size_t)n * (K / 32) + kst * (KC / 32), KC / 32,
           bar);
    } else {
      bulk(dst + WB + SB + col * SROW, reinterpret_cast<const char*>(z) + (size_t)n * (K / 32) + kst * (KC / 32),
           KC / 32, bar);
    }
  };
  if (warp == 0)
    for (int st = 0; st < D && st < S; ++st) issue(st);
  float part[CT][4] = {};
#pragma unroll 1
  for (int st = 0; st < S; ++st) {
    const int tile = st / ks, kst = st % ks;
    mbar_wait(&bars[st % D], (st / D) & 1);
    const unsigned char* slot = dyn + (st % D) * SLOT;
    const int g0 = warp * GPW;
#pragma unroll 1
    for (int cg = 0; cg < GPW; cg += 4) {
      const uint2 sa = *reinterpret_cast<const uint2*>(slot + WB + g * SROW + (g0 + cg) * 2);
      const uint2 sb = *reinterpret_cast<const uint2*>(slot + WB + (g + 8) * SROW + (g0 + cg) * 2);
      const uint2 za = *reinterpret_cast<const uint2*>(slot + WB + SB + g * SROW + (g0 + cg) * 2);
      const uint2 zb = *reinterpret_cast<const uint2*>(slot + WB + SB + (g + 8) * SROW + (g0 + cg) * 2);
      uint4 xv0[4], xv1[4];
      uint2 wa[4], wb[4];
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int grp = g0 + cg + b;
        const int kx = kst * KC + grp * 64 + t * 16;
        xv0[b] = xok ? *reinterpret_cast<const uint4*>(x + (size_t)xrow * K + kx) : make_uint4(0, 0, 0, 0);
        xv1[b] = xok ? *reinterpret_cast<const uint4*>(x + (size_t)xrow * K + kx + 8) : make_uint4(0, 0, 0, 0);
        wa[b] = *reinterpret_cast<const uint2*>(slot + g * WROW + grp * 32 + t * 8);
        wb[b] = *reinterpret_cast<const uint2*>(slot + (g + 8) * WROW + grp * 32 + t * 8);
      }
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
        float c[4] = {};
        mma(c, q4(wa[b].x, 0), q4(wb[b].x, 0), q4(wa[b].x, 1), q4(wb[b].x, 1), x00, x01);
        mma(c, q4(wa[b].x, 2), q4(wb[b].x, 2), q4(wa[b].x, 3), q4(wb[b].x, 3), x20, x21);
        mma(c, q4(wa[b].y, 0), q4(wb[b].y, 0), q4(wa[b].y, 1), q4(wb[b].y, 1), x10, x11);
        mma(c, q4(wa[b].y, 2), q4(wb[b].y, 2), q4(wa[b].y, 3), q4(wb[b].y, 3), x30, x31);
        const unsigned sw_a = b < 2 ? sa.x : sa.y, sw_b = b < 2 ? sb.x : sb.y;
        const unsigned zw_a = b < 2 ? za.x : za.y, zw_b = b < 2 ? zb.x : zb.y;
        const float sca = (b & 1) ? hi(sw_a) : lo(sw_a), scb = (b & 1) ? hi(sw_b) : lo(sw_b);
        const float bia = fmaf(-128.0f, sca, (b & 1) ? hi(zw_a) : lo(zw_a));
        const float bib = fmaf(-128.0f, scb, (b & 1) ? hi(zw_b) : lo(zw_b));
#pragma unroll
        for (int tt = 0; tt < CT; ++tt) {
          if (tt != tile) continue;
          part[tt][0] = fmaf(sca, c[0], fmaf(bia, cx[0], part[tt][0]));
          part[tt][1] = fmaf(sca, c[1], fmaf(bia, cx[1], part[tt][1]));
          part[tt][2] = fmaf(scb, c[2], fmaf(bib, cx[0], part[tt][2]));
          part[tt][3] = fmaf(scb, c[3], fmaf(bib, cx[1], part[tt][3]));
        }
      }
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
    for (int e = 0; e < 4; ++e) red[warp][tt][e][lane] = part[tt][e];
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int tt = 0; tt < CT; ++tt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float v = red[0][tt][e][lane] + red[1][tt][e][lane] + red[2][tt][e][lane] + red[3][tt][e][lane];
        const int n = nbase + tt * 16 + g + (e >= 2 ? 8 : 0), r = blockIdx.y * 8 + 2 * t + (e & 1);
        if (r < M && n < N) y[(size_t)r * N + n] = __float2bfloat16(v);
      }
  }
}

// Persistent: block b takes tiles b, b + grid, ...; one ring of D slots streams across its tiles
// (stage j = tile j / ks, K part j % ks); x of a chunk loaded before the chunk ahead is computed.
template <int KC, int D, int MINB>
__global__ void __launch_bounds__(128, MINB)
    bulk_q4p(const __nv_bfloat16* __restrict__ x, const unsigned* __restrict__ w, const __nv_bfloat16* __restrict__ s,
             const __nv_bfloat16* __restrict__ z, __nv_bfloat16* __restrict__ y, int M, int K, int N) {
  constexpr int WROW = KC / 2 + 32;
  constexpr int SROW = KC / 32 + 16;
  constexpr int WB = 16 * WROW, SB = 16 * SROW, SLOT = WB + 2 * SB;
  constexpr int GPW = KC / 64 / 4;
  extern __shared__ __align__(128) unsigned char dyn[];
  __shared__ __align__(8) unsigned long long bars[D];
  __shared__ float red[2][4][4][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int ks = K / KC, tiles = N / 16;
  const int my_tiles = tiles > (int)blockIdx.x ? (tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
  const int S = my_tiles * ks;
  const int xrow = blockIdx.y * 8 + g;
  const bool xok = xrow < M;
  const __nv_bfloat16* xr = x + (size_t)(xok ? xrow : 0) * K;
  if (threadIdx.x == 0) {
    for (int i = 0; i < D; ++i) mbar_init(&bars[i], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  auto issue = [&](int j) {  // warp 0
    const int tile = blockIdx.x + (j / ks) * gridDim.x, kst = j % ks;
    unsigned char* dst = dyn + (j % D) * SLOT;
    unsigned long long* bar = &bars[j % D];
    const int col = lane & 15, n = tile * 16 + col;
    if (lane == 0) mbar_expect(bar, 16 * (KC / 2) + 2 * 16 * (KC / 32));
    if (lane < 16) {
      bulk(dst + col * WROW, reinterpret_cast<const char*>(w) + (size_t)n * (K / 2) + kst * (KC / 2), KC / 2, bar);
      bulk(dst + WB + col * SROW, reinterpret_cast<const char*>(s) + (size_t)n * (K / 32) + kst * (KC / 32), KC / 32,
           bar);
    } else {
      bulk(dst + WB + SB + col * SROW, reinterpret_cast<const char*>(z) + (size_t)n * (K / 32) + kst * (KC / 32),
           KC / 32, bar);
    }
  };
  if (warp == 0)
    for (int j = 0; j < D && j < S; ++j) issue(j);
  float part[4] = {};
  uint4 xn0[4], xn1[4];
  auto load_x = [&](int kst, int cg) {
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int kx = kst * KC + (warp * GPW + cg + b) * 64 + t * 16;
      xn0[b] = xok ? *reinterpret_cast<const uint4*>(xr + kx) : make_uint4(0, 0, 0, 0);
      xn1[b] = xok ? *reinterpret_cast<const uint4*>(xr + kx + 8) : make_uint4(0, 0, 0, 0);
    }
  };
  if (S > 0) load_x(0, 0);
#pragma unroll 1
  for (int j = 0; j < S; ++j) {
    const int tile = blockIdx.x + (j / ks) * gridDim.x, kst = j % ks;
    mbar_wait(&bars[j % D], (j / D) & 1);
    const unsigned char* slot = dyn + (j % D) * SLOT;
    const int g0 = warp * GPW;
#pragma unroll 1
    for (int cg = 0; cg < GPW; cg += 4) {
      uint4 xv0[4], xv1[4];
#pragma unroll
      for (int b = 0; b < 4; ++b) xv0[b] = xn0[b], xv1[b] = xn1[b];
      // the next chunk's x (of this stage, else of the next stage) before this chunk's math
      if (cg + 4 < GPW)
        load_x(kst, cg + 4);
      else if (j + 1 < S)
        load_x((j + 1) % ks, 0);
      const uint2 sa = *reinterpret_cast<const uint2*>(slot + WB + g * SROW + (g0 + cg) * 2);
      const uint2 sb = *reinterpret_cast<const uint2*>(slot + WB + (g + 8) * SROW + (g0 + cg) * 2);
      const uint2 za = *reinterpret_cast<const uint2*>(slot + WB + SB + g * SROW + (g0 + cg) * 2);
      const uint2 zb = *reinterpret_cast<const uint2*>(slot + WB + SB + (g + 8) * SROW + (g0 + cg) * 2);
      uint2 wa[4], wb[4];
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int grp = g0 + cg + b;
        wa[b] = *reinterpret_cast<const uint2*>(slot + g * WROW + grp * 32 + t * 8);
        wb[b] = *reinterpret_cast<const uint2*>(slot + (g + 8) * WROW + grp * 32 + t * 8);
      }
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
        float c[4] = {};
        mma(c, q4(wa[b].x, 0), q4(wb[b].x, 0), q4(wa[b].x, 1), q4(wb[b].x, 1), x00, x01);
        mma(c, q4(wa[b].x, 2), q4(wb[b].x, 2), q4(wa[b].x, 3), q4(wb[b].x, 3), x20, x21);
        mma(c, q4(wa[b].y, 0), q4(wb[b].y, 0), q4(wa[b].y, 1), q4(wb[b].y, 1), x10, x11);
        mma(c, q4(wa[b].y, 2), q4(wb[b].y, 2), q4(wa[b].y, 3), q4(wb[b].y, 3), x30, x31);
        const unsigned sw_a = b < 2 ? sa.x : sa.y, sw_b = b < 2 ? sb.x : sb.y;
        const unsigned zw_a = b < 2 ? za.x : za.y, zw_b = b < 2 ? zb.x : zb.y;
        const float sca = (b & 1) ? hi(sw_a) : lo(sw_a), scb = (b & 1) ? hi(sw_b) : lo(sw_b);
        const float bia = fmaf(-128.0f, sca, (b & 1) ? hi(zw_a) : lo(zw_a));
        const float bib = fmaf(-128.0f, scb, (b & 1) ? hi(zw_b) : lo(zw_b));
        part[0] = fmaf(sca, c[0], fmaf(bia, cx[0], part[0]));
        part[1] = fmaf(sca, c[1], fmaf(bia, cx[1], part[1]));
        part[2] = fmaf(scb, c[2], fmaf(bib, cx[0], part[2]));
        part[3] = fmaf(scb, c[3], fmaf(bib, cx[1], part[3]));
      }
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
    if (last && warp == 1) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float v = r[0][e][lane] + r[1][e][lane] + r[2][e][lane] + r[3][e][lane];
        const int n = tile * 16 + g + (e >= 2 ? 8 : 0), row = blockIdx.y * 8 + 2 * t + (e & 1);
        if (row < M && n < N) y[(size_t)row * N + n] = __float2bfloat16(v);
      }
    }
  }
}

template <int KC, int D, int MINB, int PER_SM>
void launchp(const void* x, const void* w, const void* s, const void* z, void* y, int M, int K, int N) {
  constexpr int SLOT = 16 * (KC / 2 + 32) + 2 * 16 * (KC / 32 + 16);
  static bool once = false;
  static int sms = 0;
  if (!once) {
    cudaFuncSetAttribute(bulk_q4p<KC, D, MINB>, cudaFuncAttributeMaxDynamicSharedMemorySize, D * SLOT);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    once = true;
  }
  bulk_q4p<KC, D, MINB><<<dim3(sms * PER_SM, (M + 7) / 8), 128, D * SLOT>>>(
      (const __nv_bfloat16*)x, (const unsigned*)w, (const __nv_bfloat16*)s, (const __nv_bfloat16*)z, (__nv_bfloat16*)y,
      M, K, N);
}

__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(bar));
  asm volatile("mbarrier.arrive.shared.b64 _, [%0];" ::"r"(a) : "memory");
}

// Warp-specialized: warp 4 only issues the bulk copies of a ring of D slots (a slot: 16 columns x
// the whole K, KC = K), waiting on each slot's `empty` barrier; warps 0-3 wait on its `full`
// barrier, each computes its quarter of K (the generated kernel's sum order), and releases the
// slot by arriving on `empty` - no block-wide barrier a stage. A tile's four partial sums meet in
// shared memory behind a barrier of the four consumer warps only. Persistent: block b takes
// tiles b, b + grid, ...
template <int KC, int D, int MINB>
__global__ void __launch_bounds__(160, MINB)
    bulk_q4ws(const __nv_bfloat16* __restrict__ x, const unsigned* __restrict__ w, const __nv_bfloat16* __restrict__ s,
              const __nv_bfloat16* __restrict__ z, __nv_bfloat16* __restrict__ y, int M, int K, int N) {
  constexpr int WROW = KC / 2 + 32;
  constexpr int SROW = KC / 32 + 16;
  constexpr int WB = 16 * WROW, SB = 16 * SROW, SLOT = WB + 2 * SB;
  constexpr int GPW = KC / 64 / 4;
  extern __shared__ __align__(128) unsigned char dyn[];
  __shared__ __align__(8) unsigned long long full[D], empty[D];
  __shared__ float red[2][4][4][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int tiles = N / 16, ks = K / KC;  // a tile's stages: ks parts of K
  const int S = (tiles > (int)blockIdx.x ? (tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0) * ks;
  if (threadIdx.x == 0) {
    for (int i = 0; i < D; ++i) mbar_init(&full[i], 1), mbar_init(&empty[i], 4);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp == 4) {  // the producer
#pragma unroll 1
    for (int j = 0; j < S; ++j) {
      const int slot = j % D, tile = blockIdx.x + (j / ks) * gridDim.x, kb = (j % ks) * (KC / 2);
      mbar_wait(&empty[slot], ((j / D) & 1) ^ 1);
      unsigned char* dst = dyn + slot * SLOT;
      const int col = lane & 15, n = tile * 16 + col;
      if (lane == 0) mbar_expect(&full[slot], 16 * (KC / 2) + 2 * 16 * (KC / 32));
      __syncwarp();
      if (lane < 16) {
        bulk(dst + col * WROW, reinterpret_cast<const char*>(w) + (size_t)n * (K / 2) + kb, KC / 2, &full[slot]);
        bulk(dst + WB + col * SROW, reinterpret_cast<const char*>(s) + (size_t)n * (K / 32) + kb / 16, KC / 32,
             &full[slot]);
      } else {
        bulk(dst + WB + SB + col * SROW, reinterpret_cast<const char*>(z) + (size_t)n * (K / 32) + kb / 16, KC / 32,
             &full[slot]);
      }
    }
    return;
  }
  const int xrow = blockIdx.y * 8 + g;
  const bool xok = xrow < M;
  const __nv_bfloat16* xr = x + (size_t)(xok ? xrow : 0) * K;
  uint4 xn0[4], xn1[4];
  auto load_x = [&](int kst, int cg) {
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int kx = kst * KC + (warp * GPW + cg + b) * 64 + t * 16;
      xn0[b] = xok ? *reinterpret_cast<const uint4*>(xr + kx) : make_uint4(0, 0, 0, 0);
      xn1[b] = xok ? *reinterpret_cast<const uint4*>(xr + kx + 8) : make_uint4(0, 0, 0, 0);
    }
  };
  if (S > 0) load_x(0, 0);
  float part[4] = {};
#pragma unroll 1
  for (int j = 0; j < S; ++j) {
    const int slot = j % D, tile = blockIdx.x + (j / ks) * gridDim.x, kst = j % ks;
    mbar_wait(&full[slot], (j / D) & 1);
    const unsigned char* sl = dyn + slot * SLOT;
    const int g0 = warp * GPW;
#pragma unroll 1
    for (int cg = 0; cg < GPW; cg += 4) {
      uint4 xv0[4], xv1[4];
#pragma unroll
      for (int b = 0; b < 4; ++b) xv0[b] = xn0[b], xv1[b] = xn1[b];
      if (cg + 4 < GPW)
        load_x(kst, cg + 4);
      else
        load_x((j + 1) % ks, 0);  // (x is the same for every tile)
      const uint2 sa = *reinterpret_cast<const uint2*>(sl + WB + g * SROW + (g0 + cg) * 2);
      const uint2 sb = *reinterpret_cast<const uint2*>(sl + WB + (g + 8) * SROW + (g0 + cg) * 2);
      const uint2 za = *reinterpret_cast<const uint2*>(sl + WB + SB + g * SROW + (g0 + cg) * 2);
      const uint2 zb = *reinterpret_cast<const uint2*>(sl + WB + SB + (g + 8) * SROW + (g0 + cg) * 2);
      uint2 wa[4], wb[4];
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int grp = g0 + cg + b;
        wa[b] = *reinterpret_cast<const uint2*>(sl + g * WROW + grp * 32 + t * 8);
        wb[b] = *reinterpret_cast<const uint2*>(sl + (g + 8) * WROW + grp * 32 + t * 8);
      }
      if (cg + 4 >= GPW) {  // every shared load of the slot issued: release it once they landed
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[slot]);
      }
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
        float c[4] = {};
        mma(c, q4(wa[b].x, 0), q4(wb[b].x, 0), q4(wa[b].x, 1), q4(wb[b].x, 1), x00, x01);
        mma(c, q4(wa[b].x, 2), q4(wb[b].x, 2), q4(wa[b].x, 3), q4(wb[b].x, 3), x20, x21);
        mma(c, q4(wa[b].y, 0), q4(wb[b].y, 0), q4(wa[b].y, 1), q4(wb[b].y, 1), x10, x11);
        mma(c, q4(wa[b].y, 2), q4(wb[b].y, 2), q4(wa[b].y, 3), q4(wb[b].y, 3), x30, x31);
        const unsigned sw_a = b < 2 ? sa.x : sa.y, sw_b = b < 2 ? sb.x : sb.y;
        const unsigned zw_a = b < 2 ? za.x : za.y, zw_b = b < 2 ? zb.x : zb.y;
        const float sca = (b & 1) ? hi(sw_a) : lo(sw_a), scb = (b & 1) ? hi(sw_b) : lo(sw_b);
        const float bia = fmaf(-128.0f, sca, (b & 1) ? hi(zw_a) : lo(zw_a));
        const float bib = fmaf(-128.0f, scb, (b & 1) ? hi(zw_b) : lo(zw_b));
        part[0] = fmaf(sca, c[0], fmaf(bia, cx[0], part[0]));
        part[1] = fmaf(sca, c[1], fmaf(bia, cx[1], part[1]));
        part[2] = fmaf(scb, c[2], fmaf(bib, cx[0], part[2]));
        part[3] = fmaf(scb, c[3], fmaf(bib, cx[1], part[3]));
      }
    }
    if (kst < ks - 1) continue;
    float(*const r)[4][32] = red[(j / ks) & 1];
#pragma unroll
    for (int e = 0; e < 4; ++e) r[warp][e][lane] = part[e], part[e] = 0.0f;
    asm volatile("bar.sync 1, 128;" ::: "memory");  // the four consumer warps only
    if (warp == ((j / ks) & 3)) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float v = r[0][e][lane] + r[1][e][lane] + r[2][e][lane] + r[3][e][lane];
        const int n = tile * 16 + g + (e >= 2 ? 8 : 0), row = blockIdx.y * 8 + 2 * t + (e & 1);
        if (row < M && n < N) y[(size_t)row * N + n] = __float2bfloat16(v);
      }
    }
  }
}

template <int KC, int D, int MINB, int PER_SM>
void launchws(const void* x, const void* w, const void* s, const void* z, void* y, int M, int K, int N) {
  constexpr int SLOT = 16 * (KC / 2 + 32) + 2 * 16 * (KC / 32 + 16);
  static bool once = false;
  static int sms = 0;
  if (!once) {
    cudaFuncSetAttribute(bulk_q4ws<KC, D, MINB>, cudaFuncAttributeMaxDynamicSharedMemorySize, D * SLOT);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    once = true;
  }
  bulk_q4ws<KC, D, MINB><<<dim3(sms * PER_SM, (M + 7) / 8), 160, D * SLOT>>>(
      (const __nv_bfloat16*)x, (const unsigned*)w, (const __nv_bfloat16*)s, (const __nv_bfloat16*)z, (__nv_bfloat16*)y,
      M, K, N);
}

template <int KC, int CT, int D, int MINB>
void launch(const void* x, const void* w, const void* s, const void* z, void* y, int M, int K, int N) {
  constexpr int SLOT = 16 * (KC / 2 + 32) + 2 * 16 * (KC / 32 + 16);
  static bool once = false;
  if (!once) {
    cudaFuncSetAttribute(bulk_q4<KC, CT, D, MINB>, cudaFuncAttributeMaxDynamicSharedMemorySize, D * SLOT);
    once = true;
  }
  bulk_q4<KC, CT, D, MINB><<<dim3(N / (16 * CT), (M + 7) / 8), 128, D * SLOT>>>(
      (const __nv_bfloat16*)x, (const unsigned*)w, (const __nv_bfloat16*)s, (const __nv_bfloat16*)z, (__nv_bfloat16*)y,
      M, K, N);
}

}  // namespace proto
