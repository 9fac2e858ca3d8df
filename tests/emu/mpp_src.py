"""Hand-written MSL kernels for the MetalPerformancePrimitives (matmul2d) tests."""

HEADER = """
#include <metal_stdlib>
#include <metal_tensor>
#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>
using namespace metal;
using namespace mpp::tensor_ops;
using ext2 = dextents<int32_t, 2>;
"""

# Layout probes. Threadgroup g sets slot (g % SLOTS) of lane (g / SLOTS) of one cooperative input to
# 1 (every other slot of every lane 0); the other input is a device tensor; each thread then dumps
# its destination slots raw: out[g][lane][slot]. M, N, K, TL: the descriptor.
ONE_HOT = (
    HEADER
    + """
template <int M, int N, int K, bool TL, bool COOP_LEFT>
void probe(device const half* other, device float* out, uint g, ushort lane) {
  constexpr auto desc = matmul2d_descriptor(M, N, K, TL, false, true, matmul2d_descriptor::mode::multiply);
  matmul2d<desc, execution_simdgroup> op;
  auto ct_c = op.template get_destination_cooperative_tensor<half, half, float>();
  if constexpr (COOP_LEFT) {
    auto ct_a = op.template get_left_input_cooperative_tensor<half, half, float>();
    constexpr int SLOTS = ct_a.get_capacity();
    for (int i = 0; i < SLOTS; ++i) ct_a[i] = (lane == g / SLOTS && i == int(g % SLOTS)) ? 1.0h : 0.0h;
    tensor<device const half, ext2, tensor_inline> b(other, ext2(N, K));  // K x N, row-major
    op.run(ct_a, b, ct_c);
  } else {
    auto ct_b = op.template get_right_input_cooperative_tensor<half, half, float>();
    constexpr int SLOTS = ct_b.get_capacity();
    for (int i = 0; i < SLOTS; ++i) ct_b[i] = (lane == g / SLOTS && i == int(g % SLOTS)) ? 1.0h : 0.0h;
    tensor<device const half, ext2, tensor_inline> a(other, TL ? ext2(M, K) : ext2(K, M));
    op.run(a, ct_b, ct_c);
  }
  for (int i = 0; i < ct_c.get_capacity(); ++i) out[(g * 32 + lane) * ct_c.get_capacity() + i] = ct_c[i];
}

#define PROBE(NAME, M, N, K, TL, LEFT)                                                              \\
  kernel void NAME(device const half* other [[buffer(0)]], device float* out [[buffer(1)]],     \\
                   uint g [[threadgroup_position_in_grid]], ushort lane [[thread_index_in_simdgroup]]) { \\
    probe<M, N, K, TL, LEFT>(other, out, g, lane);                                                  \\
  }
PROBE(left_16x32x16, 16, 32, 16, false, true)
PROBE(right_16x32x16, 16, 32, 16, false, false)
PROBE(left_16x16x32, 16, 16, 32, false, true)
PROBE(left_t_16x16x32, 16, 16, 32, true, true)
PROBE(right_16x16x32, 16, 16, 32, false, false)
"""
)

# Apple's documented pattern: a threadgroup of 4 SIMD groups computes a 64 x 32 tile of
# C[M,N] = A[M,K] @ B[K,N] from device tensors with a dynamic k; edge tiles are masked by the
# slices' extents. TRANSPOSE_RIGHT reads B stored N x K.
SIMDGROUPS4 = (
    HEADER
    + """
template <bool TR>
void tile(device const half* A, device const half* B, device float* C, constant uint3& mnk, uint2 tgid) {
  uint M = mnk.x, N = mnk.y, K = mnk.z;
  tensor<device const half, ext2, tensor_inline> tA(A, ext2(K, M));
  tensor<device const half, ext2, tensor_inline> tB(B, TR ? ext2(K, N) : ext2(N, K));
  tensor<device float, ext2, tensor_inline> tC(C, ext2(N, M));
  constexpr auto desc = matmul2d_descriptor(64, 32, static_cast<int>(dynamic_extent), false, TR, false,
                                            matmul2d_descriptor::mode::multiply);
  matmul2d<desc, execution_simdgroups<4>> op;
  auto mA = tA.slice(0, tgid.y * 64);
  auto mC = tC.slice(tgid.x * 32, tgid.y * 64);
  if (TR) {
    auto mB = tB.slice(0, tgid.x * 32);
    op.run(mA, mB, mC);
  } else {
    auto mB = tB.slice(tgid.x * 32, 0);
    op.run(mA, mB, mC);
  }
}
kernel void gemm_nn(device const half* A [[buffer(0)]], device const half* B [[buffer(1)]],
                    device float* C [[buffer(2)]], constant uint3& mnk [[buffer(3)]],
                    uint2 tgid [[threadgroup_position_in_grid]]) {
  tile<false>(A, B, C, mnk, tgid);
}
kernel void gemm_nt(device const half* A [[buffer(0)]], device const half* B [[buffer(1)]],
                    device float* C [[buffer(2)]], constant uint3& mnk [[buffer(3)]],
                    uint2 tgid [[threadgroup_position_in_grid]]) {
  tile<true>(A, B, C, mnk, tgid);
}
"""
)

# A 32 x 32 product accumulated into a cooperative destination over k in static chunks of 16, with
# the A tile staged through threadgroup memory, then its row sums / maxima and column sums.
COOPERATIVE = (
    HEADER
    + """
kernel void coop(device const bfloat* A [[buffer(0)]], device const bfloat* B [[buffer(1)]],
                 device float* C [[buffer(2)]], device float* rows [[buffer(3)]], device float* cols [[buffer(4)]],
                 device float* row_max [[buffer(5)]], constant uint& K [[buffer(6)]],
                 ushort lane [[thread_index_in_simdgroup]]) {
  constexpr auto desc = matmul2d_descriptor(32, 32, 16, false, false, false,
                                            matmul2d_descriptor::mode::multiply_accumulate);
  matmul2d<desc, execution_simdgroup> op;
  threadgroup bfloat As[32 * 16];
  tensor<device const bfloat, ext2, tensor_inline> tB(B, ext2(32, K));
  tensor<threadgroup bfloat, ext2, tensor_inline> tA(As, ext2(16, 32));
  auto acc = op.get_destination_cooperative_tensor<decltype(tA), decltype(tB), float>();
  for (int i = 0; i < acc.get_capacity(); ++i) acc[i] = 0.0f;
  for (uint k = 0; k < K; k += 16) {
    for (int i = lane; i < 32 * 16; i += 32) As[i] = A[(i / 16) * K + k + i % 16];
    simdgroup_barrier(mem_flags::mem_threadgroup);
    auto b = tB.slice<32, 16>(0, k);
    op.run(tA, b, acc);
    simdgroup_barrier(mem_flags::mem_threadgroup);
  }
  acc.store(tensor<device float, ext2, tensor_inline>(C, ext2(32, 32)));
  auto rs = op.get_row_reduction_destination_cooperative_tensor<decltype(tA), decltype(tB), float>();
  auto cs = op.get_column_reduction_destination_cooperative_tensor<decltype(tA), decltype(tB), float>();
  auto rm = op.get_row_reduction_destination_cooperative_tensor<decltype(tA), decltype(tB), float>();
  reduce_rows(acc, rs);
  reduce_columns(acc, cs);
  reduce_rows(acc, rm, reduction_operation::max, -INFINITY);
  for (int i = 0; i < rs.get_capacity(); ++i)
    if (rs.is_valid_element(i)) {
      rows[rs.get_multidimensional_index(i)[0]] = rs[i];
      row_max[rm.get_multidimensional_index(i)[0]] = rm[i];
    }
  for (int i = 0; i < cs.get_capacity(); ++i)
    if (cs.is_valid_element(i)) cols[cs.get_multidimensional_index(i)[0]] = cs[i];
}
"""
)

# Each kernel breaks one rule of tensor ops; the tests expect the fault.
FAULTS = (
    HEADER
    + """
constexpr auto D16 = matmul2d_descriptor(16, 16, 16, false, false, true, matmul2d_descriptor::mode::multiply);

kernel void lane_skips_run(device float* out [[buffer(0)]], ushort lane [[thread_index_in_simdgroup]]) {
  matmul2d<D16, execution_simdgroup> op;
  auto a = op.get_left_input_cooperative_tensor<half, half, float>();
  auto b = op.get_right_input_cooperative_tensor<half, half, float>();
  auto c = op.get_destination_cooperative_tensor<decltype(a), decltype(b), float>();
  for (int i = 0; i < 8; ++i) a[i] = b[i] = 1.0h;
  if (lane == 5) return;
  op.run(a, b, c);
  out[lane] = c[0];
}

kernel void lane_at_barrier(device float* out [[buffer(0)]], ushort lane [[thread_index_in_simdgroup]]) {
  matmul2d<D16, execution_simdgroup> op;
  auto a = op.get_left_input_cooperative_tensor<half, half, float>();
  auto b = op.get_right_input_cooperative_tensor<half, half, float>();
  auto c = op.get_destination_cooperative_tensor<decltype(a), decltype(b), float>();
  for (int i = 0; i < 8; ++i) a[i] = b[i] = 1.0h;
  if (lane == 0) threadgroup_barrier(mem_flags::mem_none);
  else op.run(a, b, c);
  out[lane] = c[0];
}

kernel void slot_out_of_range(device float* out [[buffer(0)]], ushort lane [[thread_index_in_simdgroup]]) {
  matmul2d<D16, execution_simdgroup> op;
  auto a = op.get_left_input_cooperative_tensor<half, half, float>();
  for (int i = 0; i <= a.get_capacity(); ++i) a[i] = 1.0h;
  out[lane] = a[0];
}

kernel void slice_out_of_range(device float* out [[buffer(0)]], constant uint& row [[buffer(1)]]) {
  tensor<device float, ext2, tensor_inline> t(out, ext2(16, 16));
  auto s = t.slice<16, 16>(0, row);
  s.data()[0] = 1.0f;
}

kernel void four_simdgroups(device const half* A [[buffer(0)]], device float* C [[buffer(1)]]) {
  constexpr auto desc = matmul2d_descriptor(64, 32, 16, false, false, false, matmul2d_descriptor::mode::multiply);
  matmul2d<desc, execution_simdgroups<4>> op;
  tensor<device const half, ext2, tensor_inline> tA(A, ext2(16, 64));
  tensor<device const half, ext2, tensor_inline> tB(A, ext2(32, 16));
  tensor<device float, ext2, tensor_inline> tC(C, ext2(32, 64));
  op.run(tA, tB, tC);
}

kernel void per_lane_tensor(device const half* A [[buffer(0)]], device float* C [[buffer(1)]],
                            ushort lane [[thread_index_in_simdgroup]]) {
  matmul2d<D16, execution_simdgroup> op;
  tensor<device const half, ext2, tensor_inline> tA(A + (lane == 7 ? 16 : 0), ext2(16, 16));
  tensor<device float, ext2, tensor_inline> tC(C, ext2(16, 16));
  op.run(tA, tA, tC);
}

kernel void tensor_past_buffer(device const half* A [[buffer(0)]], device float* C [[buffer(1)]]) {
  matmul2d<D16, execution_simdgroup> op;
  tensor<device const half, ext2, tensor_inline> tA(A, ext2(16, 16));
  tensor<device float, ext2, tensor_inline> tC(C, ext2(16, 16));
  op.run(tA, tA, tC);
}
"""
)
