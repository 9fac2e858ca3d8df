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
  METILE_OP_MMA
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
