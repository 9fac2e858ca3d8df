/* Calls from an emulated kernel into the emulator runtime. */
#ifndef METILE_EMU_RT_H
#define METILE_EMU_RT_H
#include <stdint.h>

enum metile_collective_op {
  METILE_OP_SUM = 0,
  METILE_OP_PRODUCT,
  METILE_OP_MAX,
  METILE_OP_MIN,
  METILE_OP_AND,
  METILE_OP_OR,
  METILE_OP_XOR,
  METILE_OP_SHUFFLE,
  METILE_OP_SHUFFLE_DOWN,
  METILE_OP_SHUFFLE_UP,
  METILE_OP_SHUFFLE_XOR,
  METILE_OP_BROADCAST,
  METILE_OP_MMA,
  METILE_OP_GROUP /* metile_rt_group_op: an operation of a whole execution scope */
};

enum metile_type_code {
  METILE_T_F32 = 0,
  METILE_T_F16,
  METILE_T_BF16,
  METILE_T_I32,
  METILE_T_U32,
  METILE_T_I16,
  METILE_T_U16,
  METILE_T_I8,
  METILE_T_U8,
  METILE_T_I64,
  METILE_T_U64
};

#ifdef __cplusplus
extern "C" {
#endif
void metile_rt_barrier(const char* file, int line);
void metile_rt_collective(int op, int tcode, int width, const void* in, int nbytes, int arg, void* out,
                          const char* file, int line);
uint32_t metile_rt_lane(void);
uint32_t metile_rt_simdgroup(void);
uint32_t metile_rt_simdgroups(void);

/* An operation every thread of an execution scope enters together (MPP's matmul2d::run,
 * reduce_rows): the thread's SIMD group (simdgroups == 0) or the whole threadgroup, which must
 * have exactly `simdgroups` SIMD groups. When all threads of the scope wait at the same site,
 * one of them calls fn(ctx of each thread, in thread order, count) on its own stack, then all
 * continue. A thread of the scope that returned, waits elsewhere, or a scope of the wrong size
 * is a fault. Memory fn touches is checked and counted like the kernel's own. */
typedef void (*metile_group_fn)(void* const* ctxs, int count);
void metile_rt_group_op(int simdgroups, void* ctx, metile_group_fn fn, const char* what, const char* file, int line);

/* A fault the shim detects (kind: metile_fault_kind): at file:line when file is given, else at
 * the code address pc (a return address in the kernel object). Does not return. */
void metile_rt_fault(int kind, const char* file, int line, void* pc, const char* message);
#ifdef __cplusplus
}
#endif

/* Lane layout of an 8x8 simdgroup_matrix: lane l holds elements (row, col)
 * and (row, col + 1), the layout MLX's Metal kernels rely on. */
static inline void metile_frag_coord(int lane, int* row, int* col) {
  int qid = lane / 4;
  *row = (qid & 4) + ((lane / 2) % 4);
  *col = (qid & 2) * 2 + (lane % 2) * 2;
}
#endif
