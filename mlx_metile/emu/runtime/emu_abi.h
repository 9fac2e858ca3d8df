/* The C ABI between an emulated kernel, the emulator runtime, and its callers
 * (the Python driver through ctypes, the MLX primitive through dlopen).
 * Data only: changing a field changes EMU_ABI_VERSION. */
#ifndef METILE_EMU_ABI_H
#define METILE_EMU_ABI_H
#include <stdint.h>

#define METILE_EMU_ABI_VERSION 1
#define METILE_EMU_MAX_BUFFERS 31

#ifdef __cplusplus
extern "C" {
#endif

/* What one emulated thread sees: the binding table and its position. */
typedef struct metile_thread_ctx {
  void* const* buffers;    /* [[buffer(i)]] -> address */
  char* const* tg_buffers; /* [[threadgroup(i)]] -> address */
  uint32_t thread_position_in_grid[3];
  uint32_t threadgroup_position_in_grid[3];
  uint32_t thread_position_in_threadgroup[3];
  uint32_t threads_per_threadgroup[3];
  uint32_t threadgroups_per_grid[3];
  uint32_t threads_per_grid[3];
  uint32_t thread_index_in_threadgroup;
  uint32_t thread_index_in_simdgroup;
  uint32_t simdgroup_index_in_threadgroup;
  uint32_t threads_per_simdgroup;
  uint32_t simdgroups_per_threadgroup;
} metile_thread_ctx;

/* Exported by every compiled kernel object as `metile_kernel`. */
typedef struct metile_kernel_info {
  uint32_t abi_version;
  void (*thread_entry)(const metile_thread_ctx*);
  char* tg_static_lo; /* threadgroup variables declared in kernel bodies */
  char* tg_static_hi;
  const char* name;
} metile_kernel_info;

enum metile_order { METILE_ORDER_FORWARD = 0, METILE_ORDER_REVERSED = 1, METILE_ORDER_SHUFFLED = 2 };

typedef struct metile_launch {
  uint32_t threadgroups[3];      /* number of threadgroups per axis */
  uint32_t threads_per_group[3]; /* threadgroup size */
  uint32_t grid_threads[3];      /* dispatch_threads: exact grid; all 0 for uniform */
  uint32_t num_buffers;
  void* buffers[METILE_EMU_MAX_BUFFERS]; /* caller memory; NULL = unbound */
  uint64_t buffer_sizes[METILE_EMU_MAX_BUFFERS];
  uint32_t num_tg_buffers;
  uint64_t tg_sizes[METILE_EMU_MAX_BUFFERS];
  uint32_t order;
  uint64_t seed;
} metile_launch;

enum metile_fault_kind {
  METILE_OK = 0,
  METILE_FAULT_LAUNCH = 1,        /* bad launch parameters or limits */
  METILE_FAULT_BARRIER = 2,       /* barrier divergence / thread left while others wait */
  METILE_FAULT_COLLECTIVE = 3,    /* lanes in different collectives */
  METILE_FAULT_OUT_OF_BOUNDS = 4, /* device access outside every bound buffer */
  METILE_FAULT_UNINIT_THREADGROUP = 5,
  METILE_FAULT_SIGNAL = 6, /* hardware trap: SIGSEGV, SIGFPE, SIGILL, SIGBUS */
  METILE_FAULT_DEADLOCK = 7
};

typedef struct metile_result {
  uint64_t bytes_read[METILE_EMU_MAX_BUFFERS];
  uint64_t bytes_written[METILE_EMU_MAX_BUFFERS];
  uint64_t threads_run;
  int32_t fault_kind;
  int32_t fault_line;       /* when the runtime knows the site itself */
  uint64_t fault_pc_offset; /* else: code offset in the kernel object, for the symbolizer */
  char fault_file[256];
  char message[1024];
} metile_result;

/* Exported by the runtime library. Returns fault_kind. */
int metile_emu_dispatch(const metile_kernel_info* kernel, const metile_launch* launch, metile_result* result);

#ifdef __cplusplus
}
#endif
#endif
