// Metal-on-CPU emulator runtime: runs each threadgroup's threads as fibers
// on one OS thread, with Metal's barrier and SIMD-group semantics, and checks
// every memory access of the kernel (which is compiled with ThreadSanitizer
// instrumentation whose callbacks are defined here, not by the TSan runtime).
//
// Built once per emulator version by the Python driver, as a shared library
// that every kernel object links against. Not instrumented itself.
#include <dlfcn.h>
#include <link.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <mutex>
#include <type_traits>
#include <vector>

#include "emu_abi.h"
#include "emu_rt.h"

namespace {

// ---------------------------------------------------------------- fibers --
#if defined(__x86_64__) && defined(__linux__)
extern "C" void metile_fiber_switch(void** save_sp, void* new_sp);
extern "C" void metile_fiber_start();
// Callee-saved registers plus MXCSR / x87 control word; a new fiber's stack
// is laid out so the first switch "returns" into metile_fiber_start with the
// fiber's function in r13 and its argument in r12.
asm(R"(
.text
.globl metile_fiber_switch
.hidden metile_fiber_switch
.type metile_fiber_switch,@function
metile_fiber_switch:
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
.size metile_fiber_switch, .-metile_fiber_switch
.globl metile_fiber_start
.hidden metile_fiber_start
.type metile_fiber_start,@function
metile_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
.size metile_fiber_start, .-metile_fiber_start
)");
#else
#error "the emulator's fiber switch is written for x86-64 Linux only"
#endif

constexpr size_t kStackSize = 256 * 1024;
constexpr size_t kGuard = 4096;
constexpr int kMaxThreads = 1024;
constexpr size_t kMaxThreadgroupBytes = 32 * 1024;
constexpr int kSimdWidth = 32;
constexpr int kPayload = 32;

// PARKED: in a group operation that is resolved; its executor releases it.
enum FiberState { RUNNABLE, WAIT_BARRIER, WAIT_COLLECTIVE, PARKED, DONE };

struct Site {
  const char* file;
  int line;
  int op;
};

struct Fiber {
  char* stack_lo = nullptr;  // usable stack (above the guard page)
  void* sp = nullptr;
  FiberState state = DONE;
  Site site{};
  metile_thread_ctx ctx{};
  // collective exchange
  int tcode = 0, width = 0, arg = 0;
  alignas(16) unsigned char in[kPayload];
  alignas(16) unsigned char out[kPayload];
  // group operation (METILE_OP_GROUP)
  metile_group_fn group_fn = nullptr;
  void* group_ctx = nullptr;
  int group_scope = 0;  // 0: the SIMD group; N: the threadgroup of N SIMD groups
  const char* group_what = "";
  bool group_exec = false;  // this fiber runs the resolved operation
  std::vector<void*> group_ctxs;
  std::vector<Fiber*> group_members;
};

struct Region {
  char* lo;
  uint64_t size;
};

struct Dispatch {
  const metile_kernel_info* kernel;
  metile_result* result;
  std::vector<Fiber*> fibers;  // this threadgroup's threads
  int nthreads;
  void* sched_sp;
  sigjmp_buf jb;
  bool faulted;
  // memory the kernel may touch
  Region buffers[METILE_EMU_MAX_BUFFERS];
  int nbuf;
  char* tg_dyn_lo;
  uint64_t tg_dyn_size;
  char* tg_static_lo;
  uint64_t tg_static_size;
  std::vector<unsigned char> shadow_static, shadow_dyn;
  uintptr_t image_lo, image_hi;
  char* guard_hit;  // stack-overflow detection
  // the group operation being executed: faults inside it are reported at its call site
  const char* group_file;
  int group_line;
  const char* group_what;
};

thread_local Dispatch* g_disp = nullptr;
thread_local Fiber* g_cur = nullptr;
thread_local std::vector<Fiber*> g_pool;
std::mutex g_dispatch_mutex;  // threadgroup variables are static per kernel

Fiber* pool_fiber(int i) {
  while ((int)g_pool.size() <= i) {
    void* mem =
        mmap(nullptr, kStackSize + kGuard, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) return nullptr;
    mprotect(mem, kGuard, PROT_NONE);
    Fiber* f = new Fiber();
    f->stack_lo = (char*)mem + kGuard;
    g_pool.push_back(f);
  }
  return g_pool[i];
}

void fiber_main(void* arg);

void fiber_prepare(Fiber* f) {
  // Top of stack, 16-aligned; the address after the return slot must be
  // 16-aligned so the call in metile_fiber_start sees a normal frame.
  uintptr_t top = ((uintptr_t)(f->stack_lo + kStackSize)) & ~(uintptr_t)15;
  void** sp = (void**)top;
  *--sp = (void*)&metile_fiber_start;  // return address
  *--sp = nullptr;                     // rbp
  *--sp = nullptr;                     // rbx
  *--sp = (void*)f;                    // r12: argument
  *--sp = (void*)&fiber_main;          // r13: function
  *--sp = nullptr;                     // r14
  *--sp = nullptr;                     // r15
  uint32_t fpu[2];
  asm volatile("stmxcsr %0" : "=m"(fpu[0]));
  asm volatile("fnstcw %0" : "=m"(fpu[1]));
  *--sp = *(void**)fpu;
  f->sp = sp;
}

void to_scheduler() {
  Fiber* f = g_cur;
  metile_fiber_switch(&f->sp, g_disp->sched_sp);
}

void fiber_main(void* arg) {
  Fiber* f = (Fiber*)arg;
  g_disp->kernel->thread_entry(&f->ctx);
  f->state = DONE;
  to_scheduler();
  __builtin_trap();  // a finished fiber is never resumed
}

// ---------------------------------------------------------------- faults --
[[noreturn]] void fault_at(int kind, const char* file, int line, uintptr_t pc, const char* fmt, ...) {
  Dispatch* d = g_disp;
  metile_result* r = d->result;
  size_t used = 0;
  if (d->group_file && !file) {  // inside a group operation: its call site, not the shim's code
    file = d->group_file;
    line = d->group_line;
    pc = 0;
    used = (size_t)snprintf(r->message, sizeof r->message, "in %s: ", d->group_what);
  }
  r->fault_kind = kind;
  r->fault_line = line;
  r->fault_pc_offset = pc;
  snprintf(r->fault_file, sizeof r->fault_file, "%s", file ? file : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->message + used, sizeof r->message - used, fmt, ap);
  va_end(ap);
  d->faulted = true;
  siglongjmp(d->jb, 1);  // abandons the fiber; its stack is reused
}

uintptr_t code_offset(void* pc) {
  Dl_info info;
  if (pc && dladdr(pc, &info) && info.dli_fbase) return (uintptr_t)pc - (uintptr_t)info.dli_fbase;
  return 0;
}

struct sigaction g_old_actions[32];
const int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};

const char* signal_words(int sig) {
  switch (sig) {
    case SIGSEGV: return "segmentation fault";
    case SIGBUS: return "bus error";
    case SIGFPE: return "arithmetic trap (integer division by zero?)";
    default: return "illegal instruction (trap or unreachable code)";
  }
}

void on_signal(int sig, siginfo_t* info, void* uctx) {
  Dispatch* d = g_disp;
  if (d && g_cur) {
    void* pc = (void*)((ucontext_t*)uctx)->uc_mcontext.gregs[REG_RIP];
    char* addr = (char*)info->si_addr;
    metile_result* r = d->result;
    r->fault_kind = METILE_FAULT_SIGNAL;
    r->fault_line = 0;
    r->fault_pc_offset = code_offset(pc) + 1;  // symbolizer takes pc-1
    r->fault_file[0] = 0;
    bool overflow = addr >= g_cur->stack_lo - kGuard && addr < g_cur->stack_lo;
    snprintf(r->message, sizeof r->message, "%s%s (address %p)",
             overflow ? "thread stack overflow (recursion or large local arrays): " : "", signal_words(sig),
             (void*)addr);
    d->faulted = true;
    siglongjmp(d->jb, 1);
  }
  struct sigaction* old = &g_old_actions[sig];
  if (old->sa_flags & SA_SIGINFO) {
    if (old->sa_sigaction) return old->sa_sigaction(sig, info, uctx);
  } else if (old->sa_handler != SIG_IGN && old->sa_handler != SIG_DFL) {
    return old->sa_handler(sig);
  }
  signal(sig, SIG_DFL);  // not ours: let the default action happen
  raise(sig);
}

void install_signal_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : kSignals) {
      struct sigaction sa;
      memset(&sa, 0, sizeof sa);
      sa.sa_sigaction = on_signal;
      sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
      sigemptyset(&sa.sa_mask);
      sigaction(sig, &sa, &g_old_actions[sig]);
    }
  });
}

// --------------------------------------------------------- memory checks --
int image_range_cb(struct dl_phdr_info* info, size_t, void* data) {
  Dispatch* d = (Dispatch*)data;
  uintptr_t base = info->dlpi_addr;
  uintptr_t entry = (uintptr_t)d->kernel->thread_entry;
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    lo = std::min<uintptr_t>(lo, base + ph.p_vaddr);
    hi = std::max<uintptr_t>(hi, base + ph.p_vaddr + ph.p_memsz);
  }
  if (entry >= lo && entry < hi) {
    d->image_lo = lo;
    d->image_hi = hi;
    return 1;
  }
  return 0;
}

void describe_wild(char* out, size_t n, uintptr_t p) {
  // Name the buffer the address runs past (the closest one starting below
  // it), else the closest one above.
  Dispatch* d = g_disp;
  int below = -1, above = -1;
  for (int i = 0; i < d->nbuf; ++i) {
    uintptr_t lo = (uintptr_t)d->buffers[i].lo;
    if (!lo) continue;
    if (lo <= p && (below < 0 || lo > (uintptr_t)d->buffers[below].lo)) below = i;
    if (lo > p && (above < 0 || lo < (uintptr_t)d->buffers[above].lo)) above = i;
  }
  int best = below >= 0 ? below : above;
  if (best >= 0) {
    long long off = (long long)(p - (uintptr_t)d->buffers[best].lo);
    snprintf(out, n, "buffer(%d)%+lld, buffer is %llu bytes", best, off, (unsigned long long)d->buffers[best].size);
  } else {
    snprintf(out, n, "address %p", (void*)p);
  }
}

inline bool check_shadow(std::vector<unsigned char>& shadow, uint64_t off, uint64_t n, bool write) {
  unsigned char* s = shadow.data() + off;
  if (write) {
    memset(s, 1, n);
    return true;
  }
  if (n == 4) {  // the common case: one float or int
    uint32_t v;
    memcpy(&v, s, 4);
    return v == 0x01010101u;
  }
  for (uint64_t i = 0; i < n; ++i)
    if (!s[i]) return false;
  return true;
}

__attribute__((noinline)) void check_access(const void* addr, uint64_t n, bool write, void* pc) {
  Dispatch* d = g_disp;
  if (!d || !g_cur) return;  // outside a kernel thread: not ours to check
  uintptr_t p = (uintptr_t)addr;
  // threadgroup memory
  if (p - (uintptr_t)d->tg_static_lo < d->tg_static_size) {
    uint64_t off = p - (uintptr_t)d->tg_static_lo;
    if (off + n > d->tg_static_size)
      fault_at(
          METILE_FAULT_OUT_OF_BOUNDS, nullptr, 0, code_offset(pc),
          "out-of-bounds threadgroup access: %s of %llu bytes at offset %llu of %llu bytes of threadgroup variables",
          write ? "write" : "read", (unsigned long long)n, (unsigned long long)off,
          (unsigned long long)d->tg_static_size);
    if (!check_shadow(d->shadow_static, off, n, write))
      fault_at(METILE_FAULT_UNINIT_THREADGROUP, nullptr, 0, code_offset(pc),
               "read of threadgroup memory never written: %llu bytes at offset %llu of the threadgroup variables",
               (unsigned long long)n, (unsigned long long)off);
    return;
  }
  if (p - (uintptr_t)d->tg_dyn_lo < d->tg_dyn_size) {
    uint64_t off = p - (uintptr_t)d->tg_dyn_lo;
    if (off + n > d->tg_dyn_size)
      fault_at(METILE_FAULT_OUT_OF_BOUNDS, nullptr, 0, code_offset(pc),
               "out-of-bounds threadgroup access past the [[threadgroup(i)]] buffers");
    if (!check_shadow(d->shadow_dyn, off, n, write))
      fault_at(METILE_FAULT_UNINIT_THREADGROUP, nullptr, 0, code_offset(pc),
               "read of threadgroup memory never written: %llu bytes at offset %llu of [[threadgroup(i)]] memory",
               (unsigned long long)n, (unsigned long long)off);
    return;
  }
  // device / constant buffers
  for (int i = 0; i < d->nbuf; ++i) {
    Region& b = d->buffers[i];
    if (p - (uintptr_t)b.lo < b.size) {
      if (p + n > (uintptr_t)b.lo + b.size)
        fault_at(METILE_FAULT_OUT_OF_BOUNDS, nullptr, 0, code_offset(pc),
                 "out-of-bounds device access: %s of %llu bytes at buffer(%d)+%llu straddles its end (%llu bytes)",
                 write ? "write" : "read", (unsigned long long)n, i, (unsigned long long)(p - (uintptr_t)b.lo),
                 (unsigned long long)b.size);
      if (write)
        d->result->bytes_written[i] += n;
      else
        d->result->bytes_read[i] += n;
      return;
    }
  }
  // the thread's own stack, the kernel's constant data
  if (p - (uintptr_t)g_cur->stack_lo < kStackSize) return;
  if (p >= d->image_lo && p < d->image_hi && !write) return;
  char where[160];
  describe_wild(where, sizeof where, p);
  fault_at(METILE_FAULT_OUT_OF_BOUNDS, nullptr, 0, code_offset(pc),
           "out-of-bounds device access: %s of %llu bytes at %s", write ? "write" : "read", (unsigned long long)n,
           where);
}

// ------------------------------------------------------------ collectives --
template <class T>
struct Lanes {
  static T get(const Fiber* f, int e) {
    T v;
    memcpy(&v, f->in + e * sizeof(T), sizeof(T));
    return v;
  }
  static void put(Fiber* f, int e, T v) { memcpy(f->out + e * sizeof(T), &v, sizeof(T)); }
};

template <class T>
T identity(int op) {
  if (op == METILE_OP_MAX) return std::numeric_limits<T>::lowest();
  if (op == METILE_OP_MIN) return std::numeric_limits<T>::max();
  if (op == METILE_OP_PRODUCT) return T(1);
  if (op == METILE_OP_AND) return T(~0);
  return T(0);
}
template <>
_Float16 identity<_Float16>(int op) {
  if (op == METILE_OP_MAX) return (_Float16)-__builtin_inff();
  if (op == METILE_OP_MIN) return (_Float16)__builtin_inff();
  if (op == METILE_OP_PRODUCT) return (_Float16)1.0f;
  return (_Float16)0.0f;
}
template <>
__bf16 identity<__bf16>(int op) {
  if (op == METILE_OP_MAX) return (__bf16)-__builtin_inff();
  if (op == METILE_OP_MIN) return (__bf16)__builtin_inff();
  if (op == METILE_OP_PRODUCT) return (__bf16)1.0f;
  return (__bf16)0.0f;
}

template <class T>
T combine(int op, T a, T b) {
  switch (op) {
    case METILE_OP_SUM: return T(a + b);
    case METILE_OP_PRODUCT: return T(a * b);
    case METILE_OP_MAX: return a > b ? a : b;
    case METILE_OP_MIN: return a < b ? a : b;
    default: break;
  }
  if constexpr (std::is_integral_v<T>) {
    if (op == METILE_OP_AND) return a & b;
    if (op == METILE_OP_OR) return a | b;
    if (op == METILE_OP_XOR) return a ^ b;
  }
  return a;
}

// Fibers of one SIMD group: lanes[l] is null where the lane does not exist
// or has returned (an inactive lane in Metal's terms).
template <class T>
void resolve_typed(Fiber** lanes, int op, int width) {
  Fiber* any = nullptr;
  for (int l = 0; l < kSimdWidth; ++l)
    if (lanes[l]) any = lanes[l];
  for (int e = 0; e < width; ++e) {
    if (op <= METILE_OP_XOR) {
      // xor butterfly: the same tree for every lane, commutative steps only
      T v[kSimdWidth];
      for (int l = 0; l < kSimdWidth; ++l) v[l] = lanes[l] ? Lanes<T>::get(lanes[l], e) : identity<T>(op);
      for (int off = 1; off < kSimdWidth; off <<= 1) {
        T nv[kSimdWidth];
        for (int l = 0; l < kSimdWidth; ++l) nv[l] = combine<T>(op, v[l], v[l ^ off]);
        memcpy(v, nv, sizeof v);
      }
      for (int l = 0; l < kSimdWidth; ++l)
        if (lanes[l]) Lanes<T>::put(lanes[l], e, v[l]);
    } else {
      for (int l = 0; l < kSimdWidth; ++l) {
        Fiber* f = lanes[l];
        if (!f) continue;
        int a = f->arg, src = l;
        switch (op) {
          case METILE_OP_SHUFFLE: src = a; break;
          case METILE_OP_BROADCAST: src = any->arg; break;
          case METILE_OP_SHUFFLE_DOWN: src = l + a; break;
          case METILE_OP_SHUFFLE_UP: src = l - a; break;
          case METILE_OP_SHUFFLE_XOR: src = l ^ a; break;
        }
        // Reading a lane that is absent or inactive keeps the lane's own value.
        if (src < 0 || src >= kSimdWidth || !lanes[src]) src = l;
        Lanes<T>::put(f, e, Lanes<T>::get(lanes[src], e));
      }
    }
  }
}

void resolve_mma(Fiber** lanes) {
  float A[8][8] = {}, B[8][8] = {}, C[8][8] = {};
  for (int l = 0; l < kSimdWidth; ++l) {
    if (!lanes[l]) continue;
    int r, c;
    metile_frag_coord(l, &r, &c);
    const float* v = (const float*)lanes[l]->in;
    A[r][c] = v[0], A[r][c + 1] = v[1];
    B[r][c] = v[2], B[r][c + 1] = v[3];
    C[r][c] = v[4], C[r][c + 1] = v[5];
  }
  for (int l = 0; l < kSimdWidth; ++l) {
    if (!lanes[l]) continue;
    int r, c;
    metile_frag_coord(l, &r, &c);
    float* out = (float*)lanes[l]->out;
    for (int j = 0; j < 2; ++j) {
      float acc = C[r][c + j];
      for (int k = 0; k < 8; ++k) acc = __builtin_fmaf(A[r][k], B[k][c + j], acc);
      out[j] = acc;
    }
  }
}

void resolve(Fiber** lanes, int op, int tcode, int width) {
  if (op == METILE_OP_MMA) return resolve_mma(lanes);
  switch (tcode) {
    case METILE_T_F32: return resolve_typed<float>(lanes, op, width);
    case METILE_T_F16: return resolve_typed<_Float16>(lanes, op, width);
    case METILE_T_BF16: return resolve_typed<__bf16>(lanes, op, width);
    case METILE_T_I32: return resolve_typed<int32_t>(lanes, op, width);
    case METILE_T_U32: return resolve_typed<uint32_t>(lanes, op, width);
    case METILE_T_I16: return resolve_typed<int16_t>(lanes, op, width);
    case METILE_T_U16: return resolve_typed<uint16_t>(lanes, op, width);
    case METILE_T_I8: return resolve_typed<int8_t>(lanes, op, width);
    case METILE_T_U8: return resolve_typed<uint8_t>(lanes, op, width);
    case METILE_T_I64: return resolve_typed<int64_t>(lanes, op, width);
    case METILE_T_U64: return resolve_typed<uint64_t>(lanes, op, width);
  }
}

const char* op_name(int op);
const char* site_name(const Fiber* f) { return f->site.op == METILE_OP_GROUP ? f->group_what : op_name(f->site.op); }

// A resolved group operation: `members` wait parked while members[0] runs it.
void start_group(const std::vector<Fiber*>& members) {
  Fiber* exec = members[0];
  exec->group_ctxs.clear();
  for (Fiber* m : members) {
    exec->group_ctxs.push_back(m->group_ctx);
    m->state = PARKED;
  }
  exec->group_members = members;
  exec->group_exec = true;
  exec->state = RUNNABLE;
}

// The SIMD group `s` waits in a group operation of SIMD-group scope.
void resolve_simdgroup_op(Dispatch* d, int s, Fiber** lanes, Fiber* first) {
  int size = std::min(kSimdWidth, d->nthreads - s * kSimdWidth);
  if (size < kSimdWidth)
    fault_at(METILE_FAULT_COLLECTIVE, first->site.file, first->site.line, 0,
             "%s runs on a whole SIMD group of %d threads; simdgroup %d of this threadgroup has %d", first->group_what,
             kSimdWidth, s, size);
  std::vector<Fiber*> members;
  for (int l = 0; l < kSimdWidth; ++l) {
    if (!lanes[l])
      fault_at(METILE_FAULT_COLLECTIVE, first->site.file, first->site.line, 0,
               "%s: lane %d of simdgroup %d returned without calling it (every thread of the execution scope must)",
               first->group_what, l, s);
    if (lanes[l]->group_fn != first->group_fn || lanes[l]->group_scope != first->group_scope)
      fault_at(METILE_FAULT_COLLECTIVE, lanes[l]->site.file, lanes[l]->site.line, 0,
               "lanes of simdgroup %d call different operations at line %d", s, first->site.line);
    members.push_back(lanes[l]);
  }
  start_group(members);
}

// Group operations of threadgroup scope (execution_simdgroups<N>).
bool resolve_threadgroup_ops(Dispatch* d) {
  Fiber* first = nullptr;
  int done = 0;
  for (Fiber* f : d->fibers) {
    if (f->state == DONE) {
      ++done;
      continue;
    }
    if (f->state != WAIT_COLLECTIVE || f->site.op != METILE_OP_GROUP || f->group_scope == 0) return false;
    if (!first) first = f;
  }
  if (!first) return false;
  for (Fiber* f : d->fibers)
    if (f->state != DONE && (f->site.line != first->site.line || strcmp(f->site.file, first->site.file) != 0 ||
                             f->group_fn != first->group_fn))
      fault_at(METILE_FAULT_COLLECTIVE, f->site.file, f->site.line, 0,
               "threads of the threadgroup wait in different operations: line %d and line %d", first->site.line,
               f->site.line);
  if (done)
    fault_at(METILE_FAULT_COLLECTIVE, first->site.file, first->site.line, 0,
             "%s: %d of %d threads returned without calling it (every thread of the execution scope must)",
             first->group_what, done, d->nthreads);
  int simdgroups = (d->nthreads + kSimdWidth - 1) / kSimdWidth;
  if (simdgroups != first->group_scope || d->nthreads != simdgroups * kSimdWidth)
    fault_at(METILE_FAULT_COLLECTIVE, first->site.file, first->site.line, 0,
             "%s runs on execution_simdgroups<%d> but the threadgroup has %d threads (%d SIMD groups)",
             first->group_what, first->group_scope, d->nthreads, simdgroups);
  start_group(d->fibers);
  return true;
}

const char* op_name(int op) {
  static const char* names[] = {"simd_sum",
                                "simd_product",
                                "simd_max",
                                "simd_min",
                                "simd_and",
                                "simd_or",
                                "simd_xor",
                                "simd_shuffle",
                                "simd_shuffle_down",
                                "simd_shuffle_up",
                                "simd_shuffle_xor",
                                "simd_broadcast",
                                "simdgroup_multiply_accumulate"};
  return op >= 0 && op <= METILE_OP_MMA ? names[op] : "collective";
}

// ------------------------------------------------------------- scheduling --
void fill_order(std::vector<int>& order, int n, uint32_t mode, uint64_t& rng) {
  order.resize(n);
  for (int i = 0; i < n; ++i) order[i] = mode == METILE_ORDER_REVERSED ? n - 1 - i : i;
  if (mode == METILE_ORDER_SHUFFLED)
    for (int i = n - 1; i > 0; --i) {
      rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
      std::swap(order[i], order[rng % (uint64_t)(i + 1)]);
    }
}

// Resolves every SIMD group whose live lanes all wait in one collective.
bool resolve_simdgroups(Dispatch* d) {
  bool progress = false;
  int ngroups = (d->nthreads + kSimdWidth - 1) / kSimdWidth;
  for (int s = 0; s < ngroups; ++s) {
    Fiber* lanes[kSimdWidth] = {};
    Fiber* first = nullptr;
    bool all_waiting = true;
    for (int l = 0; l < kSimdWidth; ++l) {
      int t = s * kSimdWidth + l;
      if (t >= d->nthreads) break;
      Fiber* f = d->fibers[t];
      if (f->state == DONE) continue;
      if (f->state != WAIT_COLLECTIVE) {
        all_waiting = false;
        break;
      }
      lanes[l] = f;
      if (!first) first = f;
    }
    if (!all_waiting || !first) continue;
    if (first->site.op == METILE_OP_GROUP && first->group_scope > 0) continue;  // resolve_threadgroup_ops
    for (int l = 0; l < kSimdWidth; ++l) {
      Fiber* f = lanes[l];
      if (f && (f->site.op != first->site.op || f->site.line != first->site.line ||
                strcmp(f->site.file, first->site.file) != 0 || f->tcode != first->tcode))
        fault_at(METILE_FAULT_COLLECTIVE, f->site.file, f->site.line, 0,
                 "lanes of simdgroup %d wait in different collectives: lane %d in %s at line %d, "
                 "lane %d in %s at line %d",
                 s, (int)first->ctx.thread_index_in_simdgroup, site_name(first), first->site.line, l, site_name(f),
                 f->site.line);
    }
    if (first->site.op == METILE_OP_GROUP) {
      resolve_simdgroup_op(d, s, lanes, first);
      progress = true;
      continue;
    }
    resolve(lanes, first->site.op, first->tcode, first->width);
    for (Fiber* f : lanes)
      if (f) f->state = RUNNABLE;
    progress = true;
  }
  return progress;
}

bool resolve_barrier(Dispatch* d) {
  Fiber* waiting = nullptr;
  int done = 0, at_barrier = 0;
  for (Fiber* f : d->fibers) {
    if (f->state == DONE) ++done;
    if (f->state == WAIT_BARRIER) {
      ++at_barrier;
      if (!waiting) waiting = f;
    }
  }
  if (!waiting) return false;
  if (at_barrier + done != d->nthreads) return false;  // others still in collectives
  if (done)
    fault_at(METILE_FAULT_BARRIER, waiting->site.file, waiting->site.line, 0,
             "threadgroup_barrier: %d of %d threads returned while %d wait at the barrier", done, d->nthreads,
             at_barrier);
  for (Fiber* f : d->fibers)
    if (f->site.line != waiting->site.line || strcmp(f->site.file, waiting->site.file) != 0)
      fault_at(METILE_FAULT_BARRIER, f->site.file, f->site.line, 0,
               "threads wait at different barriers: line %d and line %d", waiting->site.line, f->site.line);
  for (Fiber* f : d->fibers) f->state = RUNNABLE;
  return true;
}

[[noreturn]] void deadlock(Dispatch* d) {
  for (Fiber* f : d->fibers)
    if (f->state == WAIT_COLLECTIVE && f->site.op == METILE_OP_GROUP)
      fault_at(METILE_FAULT_COLLECTIVE, f->site.file, f->site.line, 0,
               "%s: thread %u waits for threads of its execution scope (%s) that are at a barrier or elsewhere",
               f->group_what, f->ctx.thread_index_in_threadgroup,
               f->group_scope ? "its threadgroup" : "its SIMD group");
  for (Fiber* f : d->fibers)
    if (f->state == WAIT_COLLECTIVE)
      fault_at(METILE_FAULT_COLLECTIVE, f->site.file, f->site.line, 0,
               "%s: thread %u waits for lanes of its simdgroup that are at a barrier or elsewhere", op_name(f->site.op),
               f->ctx.thread_index_in_threadgroup);
  fault_at(METILE_FAULT_DEADLOCK, nullptr, 0, 0, "threads cannot make progress");
}

void run_threadgroup(Dispatch* d, const metile_launch* L, const uint32_t group[3], uint64_t& rng,
                     std::vector<int>& order) {
  uint32_t size[3];
  for (int a = 0; a < 3; ++a) {
    size[a] = L->threads_per_group[a];
    if (L->grid_threads[0] | L->grid_threads[1] | L->grid_threads[2]) {
      uint32_t start = group[a] * L->threads_per_group[a];
      size[a] = std::min<uint32_t>(size[a], L->grid_threads[a] - start);
    }
  }
  int n = (int)(size[0] * size[1] * size[2]);
  d->nthreads = n;
  d->fibers.resize(n);
  uint32_t simdgroups = (n + kSimdWidth - 1) / kSimdWidth;
  for (int t = 0; t < n; ++t) {
    Fiber* f = pool_fiber(t);
    if (!f) fault_at(METILE_FAULT_LAUNCH, nullptr, 0, 0, "cannot allocate fiber stacks");
    d->fibers[t] = f;
    metile_thread_ctx& c = f->ctx;
    uint32_t local[3] = {t % size[0], (t / size[0]) % size[1], t / (size[0] * size[1])};
    for (int a = 0; a < 3; ++a) {
      c.thread_position_in_threadgroup[a] = local[a];
      c.threadgroup_position_in_grid[a] = group[a];
      c.thread_position_in_grid[a] = group[a] * L->threads_per_group[a] + local[a];
      c.threads_per_threadgroup[a] = size[a];
      c.threadgroups_per_grid[a] = L->threadgroups[a];
      c.threads_per_grid[a] = L->grid_threads[0] | L->grid_threads[1] | L->grid_threads[2]
                                  ? L->grid_threads[a]
                                  : L->threadgroups[a] * L->threads_per_group[a];
    }
    c.thread_index_in_threadgroup = t;
    c.thread_index_in_simdgroup = t % kSimdWidth;
    c.simdgroup_index_in_threadgroup = t / kSimdWidth;
    c.threads_per_simdgroup = kSimdWidth;
    c.simdgroups_per_threadgroup = simdgroups;
    f->state = RUNNABLE;
    fiber_prepare(f);
  }
  // fresh threadgroup memory: poisoned (NaN / all-ones) and marked unwritten
  memset(d->tg_static_lo, 0xff, d->tg_static_size);
  memset(d->tg_dyn_lo, 0xff, d->tg_dyn_size);
  std::fill(d->shadow_static.begin(), d->shadow_static.end(), 0);
  std::fill(d->shadow_dyn.begin(), d->shadow_dyn.end(), 0);
  for (;;) {
    fill_order(order, n, L->order, rng);
    bool ran = false;
    for (int i : order) {
      Fiber* f = d->fibers[i];
      if (f->state != RUNNABLE) continue;
      ran = true;
      g_cur = f;
      metile_fiber_switch(&d->sched_sp, f->sp);
      g_cur = nullptr;
    }
    bool all_done = true;
    for (Fiber* f : d->fibers) all_done &= f->state == DONE;
    if (all_done) break;
    if (resolve_simdgroups(d)) continue;
    if (resolve_threadgroup_ops(d)) continue;
    if (resolve_barrier(d)) continue;
    (void)ran;
    deadlock(d);
  }
  d->result->threads_run += n;
}

}  // namespace

// ------------------------------------------------- kernel-facing entries --
extern "C" {

void metile_rt_barrier(const char* file, int line) {
  Fiber* f = g_cur;
  f->site = {file, line, -1};
  f->state = WAIT_BARRIER;
  to_scheduler();
}

void metile_rt_collective(int op, int tcode, int width, const void* in, int nbytes, int arg, void* out,
                          const char* file, int line) {
  Fiber* f = g_cur;
  f->site = {file, line, op};
  f->tcode = tcode;
  f->width = width;
  f->arg = arg;
  memcpy(f->in, in, nbytes);
  f->state = WAIT_COLLECTIVE;
  to_scheduler();
  memcpy(out, f->out, op == METILE_OP_MMA ? 2 * sizeof(float) : nbytes);
}

uint32_t metile_rt_lane(void) { return g_cur ? g_cur->ctx.thread_index_in_simdgroup : 0; }
uint32_t metile_rt_simdgroup(void) { return g_cur ? g_cur->ctx.simdgroup_index_in_threadgroup : 0; }
uint32_t metile_rt_simdgroups(void) { return g_cur ? g_cur->ctx.simdgroups_per_threadgroup : 1; }

void metile_rt_group_op(int simdgroups, void* ctx, metile_group_fn fn, const char* what, const char* file, int line) {
  Fiber* f = g_cur;
  f->site = {file, line, METILE_OP_GROUP};
  f->tcode = 0;
  f->group_fn = fn;
  f->group_ctx = ctx;
  f->group_scope = simdgroups;
  f->group_what = what;
  f->state = WAIT_COLLECTIVE;
  to_scheduler();
  if (!f->group_exec) return;
  f->group_exec = false;
  Dispatch* d = g_disp;
  d->group_file = file;
  d->group_line = line;
  d->group_what = what;
  fn(f->group_ctxs.data(), (int)f->group_ctxs.size());
  d->group_file = nullptr;
  for (Fiber* m : f->group_members)
    if (m != f) m->state = RUNNABLE;
}

void metile_rt_fault(int kind, const char* file, int line, void* pc, const char* message) {
  if (file) fault_at(kind, file, line, 0, "%s", message);
  fault_at(kind, nullptr, 0, code_offset(pc), "%s", message);
}

// ThreadSanitizer instrumentation calls, defined here instead of by its runtime.
#define METILE_TSAN_RW(N)                                                                            \
  void __tsan_read##N(void* a) { check_access(a, N, false, __builtin_return_address(0)); }           \
  void __tsan_write##N(void* a) { check_access(a, N, true, __builtin_return_address(0)); }           \
  void __tsan_unaligned_read##N(void* a) { check_access(a, N, false, __builtin_return_address(0)); } \
  void __tsan_unaligned_write##N(void* a) { check_access(a, N, true, __builtin_return_address(0)); } \
  void __tsan_volatile_read##N(void* a) { check_access(a, N, false, __builtin_return_address(0)); }  \
  void __tsan_volatile_write##N(void* a) { check_access(a, N, true, __builtin_return_address(0)); }
METILE_TSAN_RW(1)
METILE_TSAN_RW(2)
METILE_TSAN_RW(4)
METILE_TSAN_RW(8)
METILE_TSAN_RW(16)
#undef METILE_TSAN_RW

void __tsan_read_range(void* a, unsigned long n) { check_access(a, n, false, __builtin_return_address(0)); }
void __tsan_write_range(void* a, unsigned long n) { check_access(a, n, true, __builtin_return_address(0)); }
void* __tsan_memcpy(void* dst, const void* src, unsigned long n) {
  check_access(src, n, false, __builtin_return_address(0));
  check_access(dst, n, true, __builtin_return_address(0));
  return memcpy(dst, src, n);
}
void* __tsan_memmove(void* dst, const void* src, unsigned long n) {
  check_access(src, n, false, __builtin_return_address(0));
  check_access(dst, n, true, __builtin_return_address(0));
  return memmove(dst, src, n);
}
void* __tsan_memset(void* dst, int v, unsigned long n) {
  check_access(dst, n, true, __builtin_return_address(0));
  return memset(dst, v, n);
}
void __tsan_init(void) {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit(void) {}

// ----------------------------------------------------------------- launch --
static int launch_error(metile_result* r, const char* fmt, ...) {
  r->fault_kind = METILE_FAULT_LAUNCH;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->message, sizeof r->message, fmt, ap);
  va_end(ap);
  return r->fault_kind;
}

int metile_emu_dispatch(const metile_kernel_info* K, const metile_launch* L, metile_result* R) {
  memset(R, 0, sizeof *R);
  if (!K || K->abi_version != METILE_EMU_ABI_VERSION)
    return launch_error(R, "kernel object was built for another emulator ABI");
  uint64_t per_group = (uint64_t)L->threads_per_group[0] * L->threads_per_group[1] * L->threads_per_group[2];
  if (per_group == 0 || per_group > kMaxThreads)
    return launch_error(R, "threads per threadgroup is %llu; Metal allows 1..%d", (unsigned long long)per_group,
                        kMaxThreads);
  if (L->num_buffers > METILE_EMU_MAX_BUFFERS || L->num_tg_buffers > METILE_EMU_MAX_BUFFERS)
    return launch_error(R, "more than %d buffers bound", METILE_EMU_MAX_BUFFERS);
  uint64_t tg_static = (uint64_t)(K->tg_static_hi - K->tg_static_lo);
  uint64_t tg_dyn = 0;
  for (uint32_t i = 0; i < L->num_tg_buffers; ++i) tg_dyn += (L->tg_sizes[i] + 15) & ~15ull;
  if (tg_static + tg_dyn > kMaxThreadgroupBytes)
    return launch_error(R,
                        "threadgroup memory overflow: %llu bytes of threadgroup variables + %llu bytes of "
                        "[[threadgroup(i)]] buffers exceed Metal's %zu bytes",
                        (unsigned long long)tg_static, (unsigned long long)tg_dyn, kMaxThreadgroupBytes);

  std::lock_guard<std::mutex> lock(g_dispatch_mutex);
  install_signal_handlers();
  Dispatch d{};
  d.kernel = K;
  d.result = R;
  d.tg_static_lo = K->tg_static_lo;
  d.tg_static_size = tg_static;
  d.shadow_static.assign(tg_static, 0);
  d.shadow_dyn.assign(tg_dyn, 0);
  dl_iterate_phdr(image_range_cb, &d);

  // Copy buffers into one arena with red zones so that any stray access lands
  // outside every buffer and is reported.
  constexpr uint64_t kRed = 256;
  uint64_t total = kRed;
  for (uint32_t i = 0; i < L->num_buffers; ++i) total += ((L->buffer_sizes[i] + 63) & ~63ull) + kRed;
  std::vector<char> tg_dyn_mem(tg_dyn + 16);
  char* arena = (char*)aligned_alloc(64, (total + 63) & ~63ull);
  if (!arena) return launch_error(R, "out of memory for %llu bytes of buffers", (unsigned long long)total);
  char* cursor = arena + kRed;
  d.nbuf = (int)L->num_buffers;
  for (uint32_t i = 0; i < L->num_buffers; ++i) {
    if (!L->buffers[i]) {
      d.buffers[i] = {nullptr, 0};
      continue;
    }
    d.buffers[i] = {cursor, L->buffer_sizes[i]};
    memcpy(cursor, L->buffers[i], L->buffer_sizes[i]);
    cursor += ((L->buffer_sizes[i] + 63) & ~63ull) + kRed;
  }
  d.tg_dyn_lo = (char*)(((uintptr_t)tg_dyn_mem.data() + 15) & ~(uintptr_t)15);
  d.tg_dyn_size = tg_dyn;
  void* buffer_table[METILE_EMU_MAX_BUFFERS] = {};
  char* tg_table[METILE_EMU_MAX_BUFFERS] = {};
  for (int i = 0; i < d.nbuf; ++i) buffer_table[i] = d.buffers[i].lo;
  {
    char* c = d.tg_dyn_lo;
    for (uint32_t i = 0; i < L->num_tg_buffers; ++i) {
      tg_table[i] = c;
      c += (L->tg_sizes[i] + 15) & ~15ull;
    }
  }
  for (int t = 0; t < (int)per_group; ++t) {
    Fiber* f = pool_fiber(t);
    if (!f) {
      free(arena);
      return launch_error(R, "cannot allocate fiber stacks");
    }
    f->ctx.buffers = buffer_table;
    f->ctx.tg_buffers = tg_table;
  }

  // The signal alternate stack: faults on a fiber stack must not need it.
  static thread_local char* altstack = nullptr;
  if (!altstack) altstack = (char*)malloc(64 * 1024);
  stack_t ss{}, old_ss{};
  ss.ss_sp = altstack;
  ss.ss_size = 64 * 1024;
  sigaltstack(&ss, &old_ss);

  uint64_t rng = L->seed ? L->seed : 0x9e3779b97f4a7c15ull;
  std::vector<int> order;
  g_disp = &d;
  if (sigsetjmp(d.jb, 1) == 0) {
    uint64_t groups = (uint64_t)L->threadgroups[0] * L->threadgroups[1] * L->threadgroups[2];
    std::vector<uint64_t> gorder(groups);
    for (uint64_t i = 0; i < groups; ++i) gorder[i] = L->order == METILE_ORDER_REVERSED ? groups - 1 - i : i;
    if (L->order == METILE_ORDER_SHUFFLED)
      for (uint64_t i = groups; i > 1; --i) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        std::swap(gorder[i - 1], gorder[rng % i]);
      }
    for (uint64_t g : gorder) {
      uint32_t group[3] = {(uint32_t)(g % L->threadgroups[0]),
                           (uint32_t)((g / L->threadgroups[0]) % L->threadgroups[1]),
                           (uint32_t)(g / ((uint64_t)L->threadgroups[0] * L->threadgroups[1]))};
      run_threadgroup(&d, L, group, rng, order);
    }
  }
  g_disp = nullptr;
  g_cur = nullptr;
  sigaltstack(&old_ss, nullptr);
  if (!d.faulted)
    for (int i = 0; i < d.nbuf; ++i)
      if (d.buffers[i].lo) memcpy(L->buffers[i], d.buffers[i].lo, d.buffers[i].size);
  free(arena);
  return R->fault_kind;
}

}  // extern "C"
