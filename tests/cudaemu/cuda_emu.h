// Generated CUDA on the CPU, for tests (host.py): the CUDA names the generated kernels use. A
// block's CUDA threads are fibers on the launching OS thread, each on its own stack: a thread
// runs until it waits at a barrier (__syncthreads, __syncwarp, and the warp exchanges of
// shuffles and mma.sync), and a barrier opens once every thread of it that has not returned has
// arrived. Blocks run one after another; __shared__ variables become function statics, shared
// by the running block's threads. The kernels' inline PTX is replaced by calls into this file
// (host.py says which): mma.sync by an exchange of the warp's fragments, cp.async by a copy.
// Only C headers: a kernel's build is mostly the parsing of what it includes.
#pragma once

#include <stddef.h>
#include <stdint.h>
#if defined(__x86_64__) && defined(__linux__)
#define METILE_EMU_ASM_SWITCH 1  // a switch of the callee-saved registers, as the Metal emulator's runtime
#else
#include <ucontext.h>  // elsewhere (glibc's swapcontext also sets the signal mask: a system call a switch)
#endif

#define __global__
#define __device__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

extern "C" {  // libm's, as the kernels call them
float expf(float);
float tanhf(float);
float fmaf(float, float, float);
float fmaxf(float, float);
float fminf(float, float);
}

namespace metile_emu {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};

struct Barrier {
  int expected = 0;  // the threads of it that have not returned
  int arrived = 0;
  unsigned phase = 0;  // times it opened
};

constexpr int MAX_WARPS = 32;  // 1024 threads a block

struct Warp {
  Barrier sync;
  uint64_t exchange[32] = {};
  unsigned a[32][4] = {};  // mma.sync fragments of the warp's lanes
  unsigned b[32][2] = {};
};

struct Block {
  Barrier sync;
  Warp warps[MAX_WARPS];
};

struct Fiber {
#ifdef METILE_EMU_ASM_SWITCH
  void* sp = nullptr;  // its saved stack pointer while it does not run
#else
  ucontext_t context;
#endif
  Dim3 index;
  const Barrier* waiting = nullptr;  // the barrier it waits at, and that barrier's phase then
  unsigned phase = 0;
  bool done = false;
};

// What the running fiber sees: the scheduler sets them before it resumes one (a fiber sees them
// change only across its own switches, calls the compiler cannot see into).
inline Dim3 thread_index, block_index;
inline Block* block = nullptr;
inline Fiber* running = nullptr;
inline void (*body)(void**) = nullptr;
inline void** body_args = nullptr;

inline void fiber_main(void*);

#ifdef METILE_EMU_ASM_SWITCH
extern "C" void metile_emu_switch(void** save_sp, void* new_sp);
extern "C" void metile_emu_start();
// Callee-saved registers plus MXCSR / x87 control word; a new fiber's stack is laid out so that
// the first switch to it "returns" into metile_emu_start with fiber_main in r13, its argument in r12.
asm(R"(
.text
.globl metile_emu_switch
.hidden metile_emu_switch
.type metile_emu_switch,@function
metile_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size metile_emu_switch, .-metile_emu_switch
.globl metile_emu_start
.hidden metile_emu_start
.type metile_emu_start,@function
metile_emu_start:
  movq %r12, %rdi
  callq *%r13
  ud2
.size metile_emu_start, .-metile_emu_start
)");

inline void* scheduler_sp = nullptr;

inline void to_scheduler(Fiber* self) { metile_emu_switch(&self->sp, scheduler_sp); }
inline void resume(Fiber& f) { metile_emu_switch(&scheduler_sp, f.sp); }

inline void prepare(Fiber& f, char* stack, size_t bytes) {
  // 16-aligned top; the slot above the return address 16-aligned, as a call leaves it
  void** sp = reinterpret_cast<void**>(reinterpret_cast<uintptr_t>(stack + bytes) & ~uintptr_t(15));
  *--sp = reinterpret_cast<void*>(&metile_emu_start);  // return address
  *--sp = nullptr;                                     // rbp
  *--sp = nullptr;                                     // rbx
  *--sp = &f;                                          // r12: the argument
  *--sp = reinterpret_cast<void*>(&fiber_main);        // r13: the function
  *--sp = nullptr;                                     // r14
  *--sp = nullptr;                                     // r15
  uint32_t fpu[2];
  asm volatile("stmxcsr %0" : "=m"(fpu[0]));
  asm volatile("fnstcw %0" : "=m"(fpu[1]));
  __builtin_memcpy(--sp, fpu, 8);
  f.sp = sp;
}
#else
inline ucontext_t scheduler;

inline void to_scheduler(Fiber* self) { swapcontext(&self->context, &scheduler); }
inline void resume(Fiber& f) { swapcontext(&scheduler, &f.context); }
inline void start_running() { fiber_main(running); }

inline void prepare(Fiber& f, char* stack, size_t bytes) {
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = stack;
  f.context.uc_stack.ss_size = bytes;
  f.context.uc_link = nullptr;
  makecontext(&f.context, start_running, 0);
}
#endif

inline Warp& warp() { return block->warps[thread_index.x / 32]; }

inline void open(Barrier& b) {
  b.arrived = 0;
  ++b.phase;
}

inline void arrive_and_wait(Barrier& b) {
  if (++b.arrived == b.expected) return open(b);
  Fiber* self = running;
  self->waiting = &b;
  self->phase = b.phase;
  to_scheduler(self);
}

// A returning thread leaves its barriers: the rest no longer wait for it.
inline void leave(Barrier& b) {
  if (--b.expected > 0 && b.arrived == b.expected) open(b);
}

inline void fiber_main(void* fiber) {
  body(body_args);
  Fiber* self = static_cast<Fiber*>(fiber);
  leave(block->warps[self->index.x / 32].sync);
  leave(block->sync);
  self->done = true;
  to_scheduler(self);  // (never resumed)
}

// Resume, in index order, each thread that can run, until all have returned: 0; 1 where every
// thread left waits at a barrier that cannot open (threads that diverge at __syncthreads).
inline int run_block(Fiber* fibers, int threads) {
  for (;;) {
    bool alive = false, ran = false;
    for (int t = 0; t < threads; ++t) {
      Fiber& f = fibers[t];
      if (f.done) continue;
      alive = true;
      if (f.waiting && f.waiting->phase == f.phase) continue;
      f.waiting = nullptr;
      running = &f;
      thread_index = f.index;
      resume(f);
      ran = true;
    }
    if (!alive) return 0;
    if (!ran) return 1;
  }
}

// `kernel(args)` over gx x gy blocks of `threads` threads, thread t on the `stack_bytes` from
// stacks[t] (host.py maps them once, with a guard page below each): 0; 1 for a
// deadlock (above); 2 for a block size the emulator does not take.
inline int launch(int gx, int gy, int threads, void (*kernel)(void**), void** args, char** stacks, size_t stack_bytes) {
  if (threads <= 0 || threads % 32 || threads > 32 * MAX_WARPS) return 2;
  body = kernel;
  body_args = args;
  Fiber* fibers = new Fiber[threads];
  Block* current = new Block;
  int status = 0;
  for (int by = 0; by < gy && !status; ++by) {
    for (int bx = 0; bx < gx && !status; ++bx) {
      *current = Block{};
      current->sync.expected = threads;
      for (int w = 0; w < threads / 32; ++w) current->warps[w].sync.expected = 32;
      block = current;
      block_index = {unsigned(bx), unsigned(by), 0};
      for (int t = 0; t < threads; ++t) {
        Fiber& f = fibers[t];
        f.index = {unsigned(t), 0, 0};
        f.waiting = nullptr;
        f.done = false;
        prepare(f, stacks[t], stack_bytes);
      }
      status = run_block(fibers, threads);
    }
  }
  delete current;
  delete[] fibers;
  return status;
}

inline float bits_to_float(unsigned u) {
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

inline unsigned float_to_bits(float f) {
  unsigned u;
  __builtin_memcpy(&u, &f, 4);
  return u;
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
  w.a[lane][0] = a0;
  w.a[lane][1] = a1;
  w.a[lane][2] = a2;
  w.a[lane][3] = a3;
  w.b[lane][0] = b0;
  w.b[lane][1] = b1;
  arrive_and_wait(w.sync);
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
  arrive_and_wait(w.sync);  // every lane has read the fragments before any writes the next
  for (int i = 0; i < 4; ++i) c[i] = d[i];
}

inline float bf16_to_float(unsigned h) { return bits_to_float(h << 16); }
inline float f16_to_float(unsigned h) {
  const uint16_t bits = uint16_t(h);
  _Float16 v;
  __builtin_memcpy(&v, &bits, 2);
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
  if (size) __builtin_memcpy(dst, src, size);
  if (size < total) __builtin_memset(static_cast<char*>(dst) + size, 0, total - size);
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
  uint16_t bits;
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
struct __half {
  uint16_t bits;
};
struct __half2 {
  __half x, y;
};

inline float __uint_as_float(unsigned u) { return metile_emu::bits_to_float(u); }
inline unsigned __float_as_uint(float f) { return __builtin_bit_cast(unsigned, f); }
inline float rsqrtf(float x) { return 1.0f / __builtin_sqrtf(x); }  // (the GPU's is within 2 ulp of this)
inline float __bfloat162float(__nv_bfloat16 h) { return metile_emu::bf16_to_float(h.bits); }
inline __nv_bfloat16 __float2bfloat16(float f) {  // round to nearest even
  const unsigned u = metile_emu::float_to_bits(f);
  if (__builtin_isnan(f)) return {uint16_t((u >> 16) | 0x40u)};
  return {uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16)};
}
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) { return {__float2bfloat16(lo), __float2bfloat16(hi)}; }
inline float __half2float(__half h) { return metile_emu::f16_to_float(h.bits); }
inline __half __float2half(float f) {
  const _Float16 v = _Float16(f);
  __half h;
  __builtin_memcpy(&h.bits, &v, 2);
  return h;
}
inline __half __ushort_as_half(unsigned short u) { return {u}; }
inline __half2 __floats2half2_rn(float lo, float hi) { return {__float2half(lo), __float2half(hi)}; }
// products and differences of two bf16 / f16 values are exact in float: one rounding, as the GPU's
inline __nv_bfloat162 __hmul2(__nv_bfloat162 a, __nv_bfloat162 b) {
  return __floats2bfloat162_rn(__bfloat162float(a.x) * __bfloat162float(b.x),
                               __bfloat162float(a.y) * __bfloat162float(b.y));
}
inline __half2 __hmul2(__half2 a, __half2 b) {
  return __floats2half2_rn(__half2float(a.x) * __half2float(b.x), __half2float(a.y) * __half2float(b.y));
}
inline __nv_bfloat162 __hsub2(__nv_bfloat162 a, __nv_bfloat162 b) {
  return __floats2bfloat162_rn(__bfloat162float(a.x) - __bfloat162float(b.x),
                               __bfloat162float(a.y) - __bfloat162float(b.y));
}
inline __half2 __hsub2(__half2 a, __half2 b) {
  return __floats2half2_rn(__half2float(a.x) - __half2float(b.x), __half2float(a.y) - __half2float(b.y));
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const uint64_t both = (uint64_t(y) << 32) | x;
  unsigned r = 0;
  for (int n = 0; n < 4; ++n) r |= unsigned((both >> (8 * ((s >> (4 * n)) & 7u))) & 0xFFu) << (8 * n);
  return r;
}
// CUDA's: the low word of hi:lo shifted right by shift & 31
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift) {
  return unsigned(((uint64_t(hi) << 32) | lo) >> (shift & 31u));
}
inline unsigned __cvta_generic_to_shared(const void*) { return 0; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

inline void __syncthreads() { metile_emu::arrive_and_wait(metile_emu::block->sync); }
inline void __syncwarp(unsigned = 0xFFFFFFFFu) { metile_emu::arrive_and_wait(metile_emu::warp().sync); }

template <class T>
inline T __shfl_xor_sync(unsigned, T v, int mask) {
  static_assert(sizeof(T) <= 8, "a shuffled value fits 8 bytes");
  metile_emu::Warp& w = metile_emu::warp();
  const int lane = int(threadIdx.x & 31);
  uint64_t bits = 0;
  __builtin_memcpy(&bits, &v, sizeof(T));
  w.exchange[lane] = bits;
  metile_emu::arrive_and_wait(w.sync);
  bits = w.exchange[lane ^ mask];
  metile_emu::arrive_and_wait(w.sync);
  T out;
  __builtin_memcpy(&out, &bits, sizeof(T));
  return out;
}
