// Generated CUDA on the CPU, for tests (mlx_metile/emu/cuda_host.py): the CUDA names the
// generated kernels use, over one OS thread per CUDA thread. Blocks run one after another;
// __shared__ variables become function statics, shared by the running block's threads.
// The kernels' inline PTX is replaced by calls into this file (cuda_host.py says which):
// mma.sync by an exchange of the warp's fragments, cp.async by a plain copy.
#pragma once

#include <array>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

namespace metile_emu {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};

struct Warp {
  std::barrier<> sync{32};
  std::uint64_t exchange[32] = {};
  std::array<unsigned, 4> a[32] = {};  // mma.sync fragments of the warp's lanes
  std::array<unsigned, 2> b[32] = {};
};

struct Block {
  explicit Block(int threads) : sync(threads), warps(threads / 32) {}
  std::barrier<> sync;
  std::vector<Warp> warps;
};

inline thread_local Dim3 thread_index, block_index;
inline thread_local Block* block = nullptr;

inline Warp& warp() { return block->warps[thread_index.x / 32]; }

inline float bits_to_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline unsigned float_to_bits(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}

// One OS thread per CUDA thread of a block, reused for every block of the grid in turn: a
// gate (the threads and this one) opens each block and closes it; within a block, threads
// that return leave its barriers so that the rest can finish.
inline void launch(int gx, int gy, int threads, const std::function<void()>& kernel) {
  std::barrier<> gate(threads + 1);
  std::unique_ptr<Block> current;
  Dim3 index;
  bool done = false;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      thread_index = {unsigned(t), 0, 0};
      for (;;) {
        gate.arrive_and_wait();  // a block opens, or the grid is done
        if (done) return;
        block_index = index;
        block = current.get();
        kernel();
        block->warps[t / 32].sync.arrive_and_drop();
        block->sync.arrive_and_drop();
        gate.arrive_and_wait();  // the block closes
      }
    });
  }
  for (int by = 0; by < gy; ++by) {
    for (int bx = 0; bx < gx; ++bx) {
      current = std::make_unique<Block>(threads);
      index = {unsigned(bx), unsigned(by), 0};
      gate.arrive_and_wait();
      gate.arrive_and_wait();
    }
  }
  done = true;
  gate.arrive_and_wait();
  for (auto& th : pool) th.join();
}

// D = A B + C of mma.sync.m16n8k16 (row.col), f32 accumulation in k order; `half_of`
// turns a 16-bit element into float. Fragments: lane = 4 g + t; A regs (row g, k 2t..),
// (row g+8, k 2t..), (row g, k 2t+8..), (row g+8, k 2t+8..); B regs (k 2t.., col g),
// (k 2t+8.., col g); C / D (row g, col 2t, 2t+1), (row g+8, col 2t, 2t+1).
template <class HalfToFloat>
inline void mma_m16n8k16(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1,
                         HalfToFloat half_of) {
  Warp& w = warp();
  const int lane = int(thread_index.x & 31);
  w.a[lane] = {a0, a1, a2, a3};
  w.b[lane] = {b0, b1};
  w.sync.arrive_and_wait();
  auto element = [&](unsigned reg, int k) { return half_of((reg >> (16 * (k & 1))) & 0xFFFFu); };
  auto a = [&](int row, int k) { return element(w.a[(row & 7) * 4 + (k & 7) / 2][(row >> 3) + 2 * (k >> 3)], k); };
  auto b = [&](int k, int col) { return element(w.b[col * 4 + (k & 7) / 2][k >> 3], k); };
  const int g = lane >> 2, t = lane & 3;
  float d[4];
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    float acc = c[i];
    for (int k = 0; k < 16; ++k) acc += a(row, k) * b(k, col);
    d[i] = acc;
  }
  w.sync.arrive_and_wait();  // every lane has read the fragments before any writes the next
  for (int i = 0; i < 4; ++i) c[i] = d[i];
}

inline float bf16_to_float(unsigned h) { return bits_to_float(h << 16); }
inline float f16_to_float(unsigned h) {
  const std::uint16_t bits = std::uint16_t(h);
  _Float16 v;
  std::memcpy(&v, &bits, 2);
  return float(v);
}

inline void mma_bf16(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
  mma_m16n8k16(c, a0, a1, a2, a3, b0, b1, bf16_to_float);
}
inline void mma_f16(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
  mma_m16n8k16(c, a0, a1, a2, a3, b0, b1, f16_to_float);
}

// cp.async with a source size: copy `size` bytes, zero-fill the rest of `total`.
inline void copy(void* dst, const void* src, int size, int total) {
  if (size) std::memcpy(dst, src, size);
  if (size < total) std::memset(static_cast<char*>(dst) + size, 0, total - size);
}

}  // namespace metile_emu

#define threadIdx (::metile_emu::thread_index)
#define blockIdx (::metile_emu::block_index)

struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }

struct __nv_bfloat16 {
  std::uint16_t bits;
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
struct __half {
  std::uint16_t bits;
};

inline float __uint_as_float(unsigned u) { return metile_emu::bits_to_float(u); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }  // (the GPU's is within 2 ulp of this)
inline float __bfloat162float(__nv_bfloat16 h) { return metile_emu::bf16_to_float(h.bits); }
inline __nv_bfloat16 __float2bfloat16(float f) {  // round to nearest even
  const unsigned u = metile_emu::float_to_bits(f);
  if (std::isnan(f)) return {std::uint16_t((u >> 16) | 0x40u)};
  return {std::uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16)};
}
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) { return {__float2bfloat16(lo), __float2bfloat16(hi)}; }
inline float __half2float(__half h) { return metile_emu::f16_to_float(h.bits); }
inline __half __float2half(float f) {
  const _Float16 v = _Float16(f);
  __half h;
  std::memcpy(&h.bits, &v, 2);
  return h;
}
inline __half __ushort_as_half(unsigned short u) { return {u}; }
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const std::uint64_t both = (std::uint64_t(y) << 32) | x;
  unsigned r = 0;
  for (int n = 0; n < 4; ++n) r |= unsigned((both >> (8 * ((s >> (4 * n)) & 7u))) & 0xFFu) << (8 * n);
  return r;
}
inline unsigned __cvta_generic_to_shared(const void*) { return 0; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

inline void __syncthreads() { metile_emu::block->sync.arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xFFFFFFFFu) { metile_emu::warp().sync.arrive_and_wait(); }

template <class T>
inline T __shfl_xor_sync(unsigned, T v, int mask) {
  static_assert(sizeof(T) <= 8, "a shuffled value fits 8 bytes");
  metile_emu::Warp& w = metile_emu::warp();
  const int lane = int(threadIdx.x & 31);
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  w.exchange[lane] = bits;
  w.sync.arrive_and_wait();
  bits = w.exchange[lane ^ mask];
  w.sync.arrive_and_wait();
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}
