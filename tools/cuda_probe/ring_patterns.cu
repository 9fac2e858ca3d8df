// Copy-only probe of shared-memory ring patterns for MLX's int4 (or, built with -DBITS=8, int8)
// group-64 layout on the H200: how fast does each way of staging w[N][K * BITS / 32] (uint32) +
// scales/biases[N][K/64] (bf16) into shared memory stream from HBM, with nothing computed? The
// int4 kernel's ring copies alone (the harness's nomath diagnostic) ran at 49% of DRAM peak where
// whole-column direct loads (int4_loads.cu) read 3.4-3.6 TB/s; this asks whether the ring's
// 128-byte runs are why. The int8 kernel's time is its ring's copies
// (bench/results/ncu/h200-2026-11-30-q8g64-r1-4096x14336*.txt).
// Build and run: nvcc -O3 -arch=sm_90 [-DBITS=8] -o probe ring_patterns.cu && ./probe [N]
// Prints one JSON line per pattern: median us and GB/s over launches rotating through a pool
// of weight sets 8x larger than L2.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bulk_copy.cuh"
#include "probe_common.cuh"

#ifndef BITS
#define BITS 4
#endif
constexpr int K = 4096, GS = 64;
constexpr int COLB = K * BITS / 8, SCB = K / GS * 2;  // bytes of one column's weights, scales
constexpr int GB = GS * BITS / 8;                     // bytes of one column's group
constexpr int QB = COLB / 4;                          // bytes of a column in a warp's quarter of K
constexpr int POOL = 8;

struct Set {
  const char* w;
  const char* s;
  const char* z;
};

__device__ __forceinline__ void cp16(void* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
template <int N>  // 4 or 8 bytes
__device__ __forceinline__ void cp_small(void* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(d), "l"(src), "n"(N) : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait_groups() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// touch the slot so the copies count: one word per lane
__device__ __forceinline__ unsigned touch(const unsigned char* slot, int lane) {
  return *reinterpret_cast<const unsigned*>(slot + lane * 4);
}

// A warp's ring of D slots over `nst` stages: issue(s) starts stage s's copies (and commits
// them), the warp waits for stage s (cp.async groups, then arrived(s): the stage's mbarrier where
// there is one) and touches slot(s), while stages s+1 .. s+D-1 are in flight. LATE: the
// generated kernels' order - stage s + D - 1 is issued after the wait for stage s (so D - 2
// stages are in flight during the wait).
template <int D, bool LATE = false, class Issue, class Slot, class Arrived>
__device__ __forceinline__ void stream_ring(int nst, int lane, Issue issue, Slot slot, Arrived arrived) {
  unsigned acc = 0;
  for (int s = 0; s < D - 1; ++s) issue(s);
  auto next = [&](int s) {
    if (s + D - 1 < nst)
      issue(s + D - 1);
    else
      commit();
  };
#pragma unroll 1
  for (int s = 0; s < nst; ++s) {
    if (LATE) {
      wait_groups<D - 2>();
      next(s);
    } else {
      next(s);
      wait_groups<D - 1>();
    }
    arrived(s);
    __syncwarp();
    acc ^= touch(slot(s), lane);
    __syncwarp();
  }
  if (acc == 0x9e3779b9u) sink = acc;
}

// The default kernels' ring: block = 4 warps x 32 columns, each warp a quarter of K; a stage =
// 32 columns x 128 bytes (4 groups of int4, 2 of int8), lane/8 picks the column within 4, lane%8
// the 16-byte piece; scales and biases 2 bytes a group of a column; D slots, warps independent.
constexpr int CUR_SLOT = 32 * 160 + 512;
template <int D, bool LATE = false>
__global__ void __launch_bounds__(128, 4) ring_cur(Set st) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  extern __shared__ __align__(128) unsigned char dyn[];  // 4 warps x D slots (3 exceed 48 KB)
  auto ring = [&](int w, int slot) { return dyn + (w * D + slot) * CUR_SLOT; };
  const int n0 = blockIdx.x * 32;
  const int kb0 = warp * QB;                     // byte offset of this warp's K range
  constexpr int nst = QB / 128, GPS = 128 / GB;  // stages, groups a stage
  auto issue = [&](int s) {
    unsigned char* dst = ring(warp, s % D);
    for (int i = 0; i < 8; ++i) {
      const int c = i * 4 + lane / 8;
      cp16(dst + c * 160 + (lane % 8) * 16, st.w + size_t(n0 + c) * COLB + kb0 + s * 128 + (lane % 8) * 16);
    }
    const int sg = (kb0 / GB + s * GPS) * 2;  // scale byte offset
    cp_small<2 * GPS>(dst + 5120 + lane * 8, st.s + size_t(n0 + lane) * SCB + sg);
    cp_small<2 * GPS>(dst + 5376 + lane * 8, st.z + size_t(n0 + lane) * SCB + sg);
    commit();
  };
  stream_ring<D, LATE>(nst, lane, issue, [&](int s) { return ring(warp, s % D); }, [](int) {});
}

// Long runs: the same block and K split, but a stage = 8 columns x the warp's whole K range (512
// bytes of int4, 1024 of int8), every copy instruction 512 contiguous bytes of one column.
constexpr int LONG_ROW = QB + 16, LONG_SLOT = 8 * LONG_ROW + 512;
template <int D>
__global__ void __launch_bounds__(128, 4) ring_long(Set st) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  constexpr int ROW = LONG_ROW;
  extern __shared__ __align__(128) unsigned char dyn[];
  auto ring = [&](int w, int slot) { return dyn + (w * D + slot) * LONG_SLOT; };
  const int n0 = blockIdx.x * 32;
  const int kb0 = warp * QB;
  constexpr int nst = 4;
  auto issue = [&](int s) {
    unsigned char* dst = ring(warp, s % D);
    for (int c = 0; c < 8; ++c)
      for (int q = 0; q < QB / 512; ++q)
        cp16(dst + c * ROW + q * 512 + lane * 16, st.w + size_t(n0 + s * 8 + c) * COLB + kb0 + q * 512 + lane * 16);
    // 8 columns x 16 groups x 2 bytes = 256 bytes each of scales and biases: lanes 0-15 / 16-31
    const int c = lane / 4, piece = lane % 4;  // 8 columns x 4 pieces of 8 bytes
    const int sg = kb0 / GB * 2;
    cp_small<8>(dst + 8 * ROW + c * 32 + piece * 8, st.s + size_t(n0 + s * 8 + c) * SCB + sg + piece * 8);
    cp_small<8>(dst + 8 * ROW + 256 + c * 32 + piece * 8, st.z + size_t(n0 + s * 8 + c) * SCB + sg + piece * 8);
    commit();
  };
  stream_ring<D>(nst, lane, issue, [&](int s) { return ring(warp, s % D); }, [](int) {});
}

// Whole columns: K not split; warp w of a 32-column block takes columns w*8 .. w*8+7, a stage
// = 2 columns x the whole column (copy instructions of 512 contiguous bytes each).
constexpr int COL_SLOT = 2 * (COLB + 16) + 2 * 2 * SCB;
template <int D>
__global__ void __launch_bounds__(128, 4) ring_col(Set st) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  extern __shared__ __align__(128) unsigned char dyn[];
  auto ring = [&](int w, int slot) { return dyn + (w * D + slot) * COL_SLOT; };
  const int n0 = blockIdx.x * 32 + warp * 8;
  constexpr int nst = 4;
  auto issue = [&](int s) {
    unsigned char* dst = ring(warp, s % D);
    for (int c = 0; c < 2; ++c)
      for (int q = 0; q < COLB / 512; ++q)
        cp16(dst + c * (COLB + 16) + q * 512 + lane * 16, st.w + size_t(n0 + s * 2 + c) * COLB + q * 512 + lane * 16);
    // 2 columns x 128 bytes of scales (contiguous: 256 bytes), biases the same: 16 lanes each
    if (lane < 16)
      cp16(dst + 2 * (COLB + 16) + lane * 16, st.s + size_t(n0 + s * 2) * SCB + lane * 16);
    else
      cp16(dst + 2 * (COLB + 16) + 256 + (lane - 16) * 16, st.z + size_t(n0 + s * 2) * SCB + (lane - 16) * 16);
    commit();
  };
  stream_ring<D>(nst, lane, issue, [&](int s) { return ring(warp, s % D); }, [](int) {});
}

// Bulk copies (TMA, cp.async.bulk): a block of C columns' weights is one contiguous region of
// C * COLB bytes, its scales and biases C * 128 each. Thread 0 issues a stage of CS columns
// (weights, scales, biases) on an mbarrier; all threads wait on it. D slots; the block loops
// over its C columns in C / CS stages.
template <int C, int CS, int D>
__global__ void __launch_bounds__(128) bulk_cols(Set st, int n_cols) {
  constexpr int SLOT = CS * COLB + 2 * CS * SCB;
  extern __shared__ __align__(128) unsigned char dyn[];
  __shared__ __align__(8) unsigned long long bars[D];
  const int lane = threadIdx.x & 31;
  constexpr int nst = C / CS;
  unsigned acc = 0;
  if (threadIdx.x == 0)
    for (int i = 0; i < D; ++i) mbar_init(&bars[i], 1);
  mbar_init_fence();
  __syncthreads();
  // persistent: block b takes column blocks b, b + grid, ...
  int phase[D] = {};
  for (int cb = blockIdx.x; cb * C < n_cols; cb += gridDim.x) {
    const int n0 = cb * C;
    auto issue = [&](int s) {
      if (threadIdx.x == 0) {
        unsigned char* dst = dyn + (s % D) * SLOT;
        unsigned long long* bar = &bars[s % D];
        mbar_expect(bar, SLOT);
        bulk(dst, st.w + size_t(n0 + s * CS) * COLB, CS * COLB, bar);
        bulk(dst + CS * COLB, st.s + size_t(n0 + s * CS) * SCB, CS * SCB, bar);
        bulk(dst + CS * COLB + CS * SCB, st.z + size_t(n0 + s * CS) * SCB, CS * SCB, bar);
      }
    };
    for (int s = 0; s < D - 1 && s < nst; ++s) issue(s);
#pragma unroll 1
    for (int s = 0; s < nst; ++s) {
      if (s + D - 1 < nst) issue(s + D - 1);
      mbar_wait(&bars[s % D], phase[s % D]);
      phase[s % D] ^= 1;
      acc ^= touch(dyn + (s % D) * SLOT, lane + (threadIdx.x >> 5) * 32);
      __syncthreads();  // the slot is free again before anyone refills it
    }
  }
  if (acc == 0x9e3779b9u) sink = acc;
}

// The default kernel's per-warp rings (4 warps x 32 columns, a quarter of K each), but each
// column's G groups of a stage (G * GB bytes) brought by one bulk copy that lane c issues for
// column c, completing on the warp's mbarrier of the slot; scales and biases by cp.async as now.
template <int G, int D>
__global__ void __launch_bounds__(128, 4) ring_bulk(Set st) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  constexpr int RUN = G * GB, STRIDE = RUN + 32, SLOT = 32 * STRIDE + 2 * 32 * 2 * G;
  extern __shared__ __align__(128) unsigned char dyn[];  // 4 warps x D slots of SLOT bytes
  __shared__ __align__(8) unsigned long long bars[4][D];
  auto ring = [&](int w, int slot) { return dyn + (w * D + slot) * SLOT; };
  const int n0 = blockIdx.x * 32;
  const int kb0 = warp * QB;
  constexpr int nst = QB / RUN;
  if (lane == 0)
    for (int i = 0; i < D; ++i) mbar_init(&bars[warp][i], 1);
  mbar_init_fence();
  __syncwarp();
  auto issue = [&](int s) {
    unsigned char* dst = ring(warp, s % D);
    unsigned long long* bar = &bars[warp][s % D];
    if (lane == 0) mbar_expect(bar, 32 * RUN);
    __syncwarp();
    bulk(dst + lane * STRIDE, st.w + size_t(n0 + lane) * COLB + kb0 + s * RUN, RUN, bar);
    const int sg = (kb0 / GB + s * G) * 2;
    if (G == 4) {
      cp_small<8>(dst + 32 * STRIDE + lane * 8, st.s + size_t(n0 + lane) * SCB + sg);
      cp_small<8>(dst + 32 * STRIDE + 256 + lane * 8, st.z + size_t(n0 + lane) * SCB + sg);
    } else {
      for (int q = 0; q < 2 * G / 16; ++q) {  // (G = 8, 16: one or two 16-byte pieces a column)
        cp16(dst + 32 * STRIDE + lane * 2 * G + q * 16, st.s + size_t(n0 + lane) * SCB + sg + q * 16);
        cp16(dst + 32 * STRIDE + 64 * G + lane * 2 * G + q * 16, st.z + size_t(n0 + lane) * SCB + sg + q * 16);
      }
    }
    commit();
  };
  stream_ring<D>(
      nst, lane, issue, [&](int s) { return ring(warp, s % D); },
      [&](int s) { mbar_wait(&bars[warp][s % D], (s / D) & 1); });
}

template <int G, int D>
void run_ring_bulk(const char* name, std::vector<Set>& sets, int n) {
  constexpr int SLOT = 32 * (G * GB + 32) + 2 * 32 * 2 * G;
  cudaFuncSetAttribute(ring_bulk<G, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, 4 * D * SLOT);
  timeit(name, [&](int p) { ring_bulk<G, D><<<n / 32, 128, 4 * D * SLOT>>>(sets[p]); });
}

static size_t g_bytes;

template <class F>
void timeit(const char* name, F launch) {
  time_launches(name, g_bytes, POOL, launch);
}

// a per-warp ring kernel over 32-column blocks, its 4 warps' D slots in dynamic shared memory
template <class Kernel>
void run_rings(const char* name, Kernel kernel, std::vector<Set>& sets, int n, int smem) {
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  timeit(name, [&](int p) { kernel<<<n / 32, 128, smem>>>(sets[p]); });
}

template <int C, int CS, int D>
void run_bulk(const char* name, std::vector<Set>& sets, int n, int grid) {
  constexpr int SLOT = CS * COLB + 2 * CS * SCB;
  cudaFuncSetAttribute(bulk_cols<C, CS, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, D * SLOT);
  timeit(name, [&](int p) { bulk_cols<C, CS, D><<<grid, 128, D * SLOT>>>(sets[p], n); });
}

int main(int argc, char** argv) {
  const int N = argc > 1 ? atoi(argv[1]) : 14336;
  const size_t wbytes = size_t(N) * COLB, sbytes = size_t(N) * SCB;
  g_bytes = wbytes + 2 * sbytes;
  std::vector<Set> sets;
  for (const RawSet& r : weight_pool(wbytes, sbytes, POOL))
    sets.push_back({(const char*)r.w, (const char*)r.s, (const char*)r.z});
  const size_t n16 = g_bytes / 16;
  const auto flats = flat_pool(g_bytes, POOL);
  int sms;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  auto F = [&](int p) { return flats[p]; };
  timeit("flat u4 grid=sms*8x256", [&](int p) { flat<4><<<sms * 8, 256>>>(F(p), n16); });
  timeit("flat u8 grid=sms*2x256", [&](int p) { flat<8><<<sms * 2, 256>>>(F(p), n16); });
  run_rings("ring_cur D2 (default kernel's copies, 2 stages in flight at the wait)", ring_cur<2, false>, sets, N,
            8 * CUR_SLOT);
  run_rings("ring_cur D2 late (the generated kernel's order: 1 in flight at the wait)", ring_cur<2, true>, sets, N,
            8 * CUR_SLOT);
  run_rings("ring_cur D3 late", ring_cur<3, true>, sets, N, 12 * CUR_SLOT);
  run_rings("ring_cur D3", ring_cur<3, false>, sets, N, 12 * CUR_SLOT);
  run_rings("ring_long D2 (a warp's K range of 8 columns a stage)", ring_long<2>, sets, N, 8 * LONG_SLOT);
  run_rings("ring_col D2 (whole columns)", ring_col<2>, sets, N, 8 * COL_SLOT);
  run_ring_bulk<4, 2>("ring_bulk G4 D2 (per-warp rings, a bulk copy a column)", sets, N);
  run_ring_bulk<4, 3>("ring_bulk G4 D3", sets, N);
  run_ring_bulk<8, 2>("ring_bulk G8 D2 (256-byte runs)", sets, N);
  if (BITS == 4)
    run_ring_bulk<16, 2>("ring_bulk G16 D2 (512-byte runs, a warp's whole quarter of K in 2 stages)", sets, N);
  run_bulk<32, 8, 2>("bulk C32 CS8 D2 grid=N/32", sets, N, N / 32);
  run_bulk<32, 4, 3>("bulk C32 CS4 D3 grid=N/32", sets, N, N / 32);
  run_bulk<16, 4, 2>("bulk C16 CS4 D2 grid=N/16", sets, N, N / 16);
  run_bulk<16, 4, 4>("bulk C16 CS4 D4 grid=N/16", sets, N, N / 16);
  run_bulk<32, 8, 3>("bulk C32 CS8 D3 persistent grid=sms*2", sets, N, sms * 2);
  run_bulk<32, 4, 4>("bulk C32 CS4 D4 persistent grid=sms*3", sets, N, sms * 3);
  run_bulk<16, 2, 4>("bulk C16 CS2 D4 persistent grid=sms*4", sets, N, sms * 4);
  run_bulk<32, 8, 4>("bulk C32 CS8 D4 persistent grid=sms", sets, N, sms);
  return 0;
}
