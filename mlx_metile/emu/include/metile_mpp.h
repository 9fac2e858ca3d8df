// MetalPerformancePrimitives' tensor ops for the emulator: matmul2d_descriptor, matmul2d<desc,
// scope> with run(left, right, destination) over tensors and cooperative tensors, and
// reduce_rows / reduce_columns.
//
// Cooperative-tensor layout (what MLX's NAX kernels rely on when they write slots directly): an
// operand of R x C elements (R along dimension 1, C along dimension 0, as stored - the left operand
// is K x M when transpose_left) is cut into 16 x 16 fragments in row-major order; fragment f
// belongs to SIMD group f % N of the scope (N = 1 for execution_simdgroup) and fills slots
// 8 * (f / N) .. +7 of each of its lanes. Slot j of lane l holds fragment element
//   row = ((qid & 4) | ((l >> 1) & 3)) + (j >> 2) * 8,  col = ((qid & 2) | (l & 1)) * 4 + j % 4,
// qid = l >> 2: a lane holds 2 rows x 4 columns, rows r and r + 8. Elements past R or C are
// invalid slots. Row-reduction results: slot j of lane l holds row 16 * rf + that row formula with
// j in {0, 1}; column results: slot j holds column 16 * cf + that column formula with j in 0..3.
//
// run is a collective of the whole scope (metile_rt_group_op): one thread computes it, reading
// tensor operands once (device and threadgroup accesses are checked and counted) and the slots of
// every thread's cooperative tensors. Accumulation is in float (int for integer operands), fma in
// ascending k from the destination's value (multiply_accumulate) or zero (multiply), rounded once
// to the destination type. Elements of a tensor operand outside its extents read as zero; outside
// the destination's extents nothing is written.
#pragma once
#include "metile_tensor.h"

namespace mpp {
namespace tensor_ops {

enum class reduction_operation { sum, max, min };

struct matmul2d_descriptor {
  enum class mode { multiply, multiply_accumulate };
  int m, n, k;
  bool transpose_left, transpose_right;
  bool relaxed_precision;
  mode matmul_mode;
  constexpr matmul2d_descriptor(int m_, int n_, int k_ = (int)metal::dynamic_extent, bool transpose_left_ = false,
                                bool transpose_right_ = false, bool relaxed_precision_ = false,
                                mode matmul_mode_ = mode::multiply)
      : m(m_),
        n(n_),
        k(k_),
        transpose_left(transpose_left_),
        transpose_right(transpose_right_),
        relaxed_precision(relaxed_precision_),
        matmul_mode(matmul_mode_) {}
};

template <class E>
struct reduction_operation_identity {
  static constexpr E sum_identity = (E)0;
  static constexpr E max_identity = metal::numeric_limits<E>::lowest();
  static constexpr E min_identity = metal::numeric_limits<E>::max();
};

namespace __detail {

inline int frag_row(uint lane, int j) { return (int)((((lane >> 2) & 4) | ((lane >> 1) & 3)) + (j >> 2) * 8); }
inline int frag_col(uint lane, int j) { return (int)(((((lane >> 2) & 2) | (lane & 1)) * 4) + j % 4); }
inline uint scope_simdgroup(int scope) { return scope > 0 ? metile_rt_simdgroup() : 0; }

template <int Rank>
struct coord {
  int row, col;
  bool valid;
  metal::array<int, Rank> index() const {
    if constexpr (Rank == 2)
      return {{col, row}};
    else
      return {{row}};
  }
};

enum { LEFT = 0, RIGHT = 1, DESTINATION = 2 };

template <class T, int V>
constexpr __SIZE_TYPE__ dep = V > 0 ? (__SIZE_TYPE__)V : 0;

template <int Operand, int Rows, int Cols, int Scope>
struct matrix_layout {
  static_assert(Rows > 0 && Cols > 0, "matmul2d: cooperative operands need static m, n and k");
  static constexpr int operand = Operand, rows = Rows, cols = Cols, scope = Scope, rank = 2;
  static constexpr int nsimd = Scope > 0 ? Scope : 1;
  static constexpr int frag_rows = (Rows + 15) / 16, frag_cols = (Cols + 15) / 16;
  static constexpr int frags = frag_rows * frag_cols;
  static constexpr int capacity = 8 * ((frags + nsimd - 1) / nsimd);
  static coord<2> at(uint lane, uint sg, int i) {
    int f = (i / 8) * nsimd + (int)sg, j = i % 8;
    if (f >= frags) return {0, 0, false};
    int r = (f / frag_cols) * 16 + frag_row(lane, j), c = (f % frag_cols) * 16 + frag_col(lane, j);
    return {r, c, r < Rows && c < Cols};
  }
  static coord<2> here(int i) { return at(metile_rt_lane(), scope_simdgroup(Scope), i); }
};

// Reductions of a Rows x Cols destination: along its rows (one value per row) or columns.
template <bool AlongRows, int Rows, int Cols, int Scope>
struct reduction_layout {
  static constexpr int rows = Rows, cols = Cols, scope = Scope, rank = 1;
  static constexpr int nsimd = Scope > 0 ? Scope : 1;
  static constexpr int frags = AlongRows ? (Rows + 15) / 16 : (Cols + 15) / 16;
  static constexpr int per_frag = AlongRows ? 2 : 4;
  static constexpr int capacity = per_frag * ((frags + nsimd - 1) / nsimd);
  static coord<1> at(uint lane, uint sg, int i) {
    int f = (i / per_frag) * nsimd + (int)sg, j = i % per_frag;
    if (f >= frags) return {0, 0, false};
    int p = AlongRows ? f * 16 + frag_row(lane, j * 4) : f * 16 + frag_col(lane, j);
    return {p, 0, p < (AlongRows ? Rows : Cols)};
  }
  static coord<1> here(int i) { return at(metile_rt_lane(), scope_simdgroup(Scope), i); }
};

template <class T>
struct operand_traits {
  static_assert(metal::__is_tensor<T>::value || metal::__is_cooperative_tensor<T>::value,
                "matmul2d::run: operands are tensors or cooperative tensors");
};
template <class E, class X, class L>
struct operand_traits<metal::tensor<E, X, L>> {
  using elem = typename metal::tensor<E, X, L>::value_type;
  static constexpr bool cooperative = false;
  using layout = void;
};
template <class E, class X, class L>
struct operand_traits<metal::cooperative_tensor<E, X, L>> {
  using elem = E;
  static constexpr bool cooperative = true;
  using layout = L;
};

struct run_ctx {
  const void* left;
  const void* right;
  void* dest;
  uint lane, sg;
};

// Reads of other threads' memory (their contexts and cooperative tensors, on their stacks): not
// the kernel's accesses, so not instrumented.
__attribute__((no_sanitize("thread"))) inline run_ctx read_ctx(void* const* ctxs, int k) {
  return *(const run_ctx*)ctxs[k];
}
__attribute__((no_sanitize("thread"))) inline bool same_bytes(const void* a, const void* b, int n) {
  const unsigned char *x = (const unsigned char*)a, *y = (const unsigned char*)b;
  for (int i = 0; i < n; ++i)
    if (x[i] != y[i]) return false;
  return true;
}
template <class C, class Acc>
__attribute__((no_sanitize("thread"))) void gather(const void* obj, uint lane, uint sg, Acc* m) {
  using Layout = typename C::layout;
  const C* t = (const C*)obj;
  for (int i = 0; i < C::__capacity; ++i) {
    coord<2> c = Layout::at(lane, sg, i);
    if (c.valid) m[c.row * Layout::cols + c.col] = (Acc)t->__slots[i];
  }
}
template <class C, class Acc>
__attribute__((no_sanitize("thread"))) void scatter(void* obj, uint lane, uint sg, const Acc* m) {
  using Layout = typename C::layout;
  using E = typename C::element_type;
  C* t = (C*)obj;
  for (int i = 0; i < C::__capacity; ++i) {
    coord<2> c = Layout::at(lane, sg, i);
    if (c.valid) t->__slots[i] = (E)m[c.row * Layout::cols + c.col];
  }
}

[[gnu::noinline]] inline void nonuniform(const char* which, int lane) {
  char msg[200];
  __builtin_snprintf(msg, sizeof msg,
                     "the %s operand differs between thread 0 and thread %d of the scope (every thread must pass the "
                     "same tensor)",
                     which, lane);
  metile_rt_fault(METILE_FAULT_COLLECTIVE, nullptr, 0, __builtin_return_address(0), msg);
}

template <class T>
inline void check_uniform(void* const* ctxs, int count, int which) {
  if constexpr (!operand_traits<T>::cooperative) {
    run_ctx c0 = read_ctx(ctxs, 0);
    const void* p0 = which == 0 ? c0.left : which == 1 ? c0.right : c0.dest;
    for (int k = 1; k < count; ++k) {
      run_ctx c = read_ctx(ctxs, k);
      const void* p = which == 0 ? c.left : which == 1 ? c.right : c.dest;
      if (!same_bytes(p0, p, (int)sizeof(T))) nonuniform(which == 0 ? "left" : which == 1 ? "right" : "destination", k);
    }
  }
}

template <class Acc>
inline Acc mac(Acc a, Acc b, Acc c) {
  if constexpr (metal::is_integral<Acc>::value)
    return c + a * b;
  else
    return __builtin_fmaf(a, b, c);
}

constexpr int KC = 16;  // k is read in chunks: every tensor element once per run

template <matmul2d_descriptor D, class Scope, class L, class R, class Dst>
void run_impl(void* const* ctxs, int count) {
  using LT = operand_traits<L>;
  using RT = operand_traits<R>;
  using DT = operand_traits<Dst>;
  using Acc =
      metal::conditional_t<metal::is_integral<typename LT::elem>::value && metal::is_integral<typename RT::elem>::value,
                           int, float>;
  constexpr int M = D.m, N = D.n;
  constexpr bool static_k = D.k > 0;
  check_uniform<L>(ctxs, count, 0);
  check_uniform<R>(ctxs, count, 1);
  check_uniform<Dst>(ctxs, count, 2);
  run_ctx self = read_ctx(ctxs, 0);  // the calling thread's own

  int K = D.k;
  if constexpr (!static_k) {
    if constexpr (!LT::cooperative) {
      const L& t = *(const L*)self.left;
      K = D.transpose_left ? t.get_extent(1) : t.get_extent(0);
    } else {
      const R& t = *(const R*)self.right;
      K = D.transpose_right ? t.get_extent(0) : t.get_extent(1);
    }
  }

  Acc acc[M][N];
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) acc[m][n] = 0;
  if constexpr (D.matmul_mode == matmul2d_descriptor::mode::multiply_accumulate) {
    if constexpr (DT::cooperative) {
      for (int k = 0; k < count; ++k) {
        run_ctx c = read_ctx(ctxs, k);
        gather<Dst>(c.dest, c.lane, c.sg, &acc[0][0]);
      }
    } else {
      const Dst& t = *(const Dst*)self.dest;
      for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n)
          if (t.__inside(n, m)) acc[m][n] = (Acc)t.__at(n, m);
    }
  }

  // Cooperative inputs, as stored (K x M for a transposed left operand).
  constexpr int LR = LT::cooperative ? (D.transpose_left ? D.k : M) : 1;
  constexpr int LC = LT::cooperative ? (D.transpose_left ? M : D.k) : 1;
  constexpr int RR = RT::cooperative ? (D.transpose_right ? N : D.k) : 1;
  constexpr int RC = RT::cooperative ? (D.transpose_right ? D.k : N) : 1;
  Acc lstore[LR][LC], rstore[RR][RC];
  if constexpr (LT::cooperative)
    for (int k = 0; k < count; ++k) {
      run_ctx c = read_ctx(ctxs, k);
      gather<L>(c.left, c.lane, c.sg, &lstore[0][0]);
    }
  if constexpr (RT::cooperative)
    for (int k = 0; k < count; ++k) {
      run_ctx c = read_ctx(ctxs, k);
      gather<R>(c.right, c.lane, c.sg, &rstore[0][0]);
    }

  for (int k0 = 0; k0 < K; k0 += KC) {
    int kc = K - k0 < KC ? K - k0 : KC;
    Acc a[M][KC], b[KC][N];
    for (int m = 0; m < M; ++m)
      for (int kk = 0; kk < kc; ++kk) {
        int k = k0 + kk;
        if constexpr (LT::cooperative) {
          a[m][kk] = D.transpose_left ? lstore[k][m] : lstore[m][k];
        } else {
          const L& t = *(const L*)self.left;
          int i0 = D.transpose_left ? m : k, i1 = D.transpose_left ? k : m;
          a[m][kk] = t.__inside(i0, i1) ? (Acc)t.__at(i0, i1) : (Acc)0;
        }
      }
    for (int kk = 0; kk < kc; ++kk)
      for (int n = 0; n < N; ++n) {
        int k = k0 + kk;
        if constexpr (RT::cooperative) {
          b[kk][n] = D.transpose_right ? rstore[n][k] : rstore[k][n];
        } else {
          const R& t = *(const R*)self.right;
          int i0 = D.transpose_right ? k : n, i1 = D.transpose_right ? n : k;
          b[kk][n] = t.__inside(i0, i1) ? (Acc)t.__at(i0, i1) : (Acc)0;
        }
      }
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n)
        for (int kk = 0; kk < kc; ++kk) acc[m][n] = mac<Acc>(a[m][kk], b[kk][n], acc[m][n]);
  }

  if constexpr (DT::cooperative) {
    for (int k = 0; k < count; ++k) {
      run_ctx c = read_ctx(ctxs, k);
      scatter<Dst>(c.dest, c.lane, c.sg, &acc[0][0]);
    }
  } else {
    const Dst& t = *(const Dst*)self.dest;
    using V = typename Dst::value_type;
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n)
        if (t.__inside(n, m)) t.__at(n, m) = (V)acc[m][n];
  }
}

struct reduce_ctx {
  const void* source;
  void* destination;
  uint lane, sg;
  reduction_operation op;
  float identity;
};
__attribute__((no_sanitize("thread"))) inline reduce_ctx read_reduce_ctx(void* const* ctxs, int k) {
  return *(const reduce_ctx*)ctxs[k];
}
template <class C>
__attribute__((no_sanitize("thread"))) void scatter_vector(void* obj, uint lane, uint sg, const float* v) {
  using Layout = typename C::layout;
  using E = typename C::element_type;
  C* t = (C*)obj;
  for (int i = 0; i < C::__capacity; ++i) {
    coord<1> c = Layout::at(lane, sg, i);
    if (c.valid) t->__slots[i] = (E)v[c.row];
  }
}

// One value per row (AlongRows) or column of the source, combined in ascending order in float
// from the identity, rounded once.
template <bool AlongRows, class Src, class Dst>
void reduce_impl(void* const* ctxs, int count) {
  using SL = typename Src::layout;
  constexpr int Rows = SL::rows, Cols = SL::cols;
  float m[Rows][Cols];
  bool valid[Rows][Cols];
  for (int r = 0; r < Rows; ++r)
    for (int c = 0; c < Cols; ++c) valid[r][c] = false;
  for (int k = 0; k < count; ++k) {
    reduce_ctx c = read_reduce_ctx(ctxs, k);
    gather<Src>(c.source, c.lane, c.sg, &m[0][0]);
    for (int i = 0; i < Src::__capacity; ++i) {
      coord<2> at = SL::at(c.lane, c.sg, i);
      if (at.valid) valid[at.row][at.col] = true;
    }
  }
  reduce_ctx self = read_reduce_ctx(ctxs, 0);
  constexpr int P = AlongRows ? Rows : Cols, Q = AlongRows ? Cols : Rows;
  float out[P];
  for (int p = 0; p < P; ++p) {
    float a = self.identity;
    for (int q = 0; q < Q; ++q) {
      int r = AlongRows ? p : q, c = AlongRows ? q : p;
      if (!valid[r][c]) continue;
      float x = m[r][c];
      a = self.op == reduction_operation::sum   ? a + x
          : self.op == reduction_operation::max ? (x > a ? x : a)
                                                : (x < a ? x : a);
    }
    out[p] = a;
  }
  for (int k = 0; k < count; ++k) {
    reduce_ctx c = read_reduce_ctx(ctxs, k);
    scatter_vector<Dst>(c.destination, c.lane, c.sg, out);
  }
}

}  // namespace __detail

template <matmul2d_descriptor Descriptor, class Scope, class... Args>
class matmul2d {
  static_assert(Scope::__simdgroups >= 0,
                "matmul2d: the emulator runs execution_simdgroup and "
                "execution_simdgroups<N> scopes, not execution_thread");
  static_assert(Descriptor.m > 0 && Descriptor.n > 0, "matmul2d: m and n must be static and positive");
  static constexpr int S = Scope::__simdgroups;
  static constexpr int M = Descriptor.m, N = Descriptor.n, K = Descriptor.k;
  static constexpr bool TL = Descriptor.transpose_left, TR = Descriptor.transpose_right;

 public:
  static constexpr matmul2d_descriptor descriptor = Descriptor;
  using scope = Scope;
  using __left_layout = __detail::matrix_layout<__detail::LEFT, TL ? K : M, TL ? M : K, S>;
  using __right_layout = __detail::matrix_layout<__detail::RIGHT, TR ? N : K, TR ? K : N, S>;
  using __destination_layout = __detail::matrix_layout<__detail::DESTINATION, M, N, S>;

  matmul2d() = default;

  // (The extents depend on the element type only so that a descriptor with a dynamic k, whose
  // inputs cannot be cooperative, still names these types.)
  template <class LeftElementType, class RightElementType, class ElementType, class CoordType = int, class... A>
  using cooperative_tensor_left_input_t = metal::cooperative_tensor<
      LeftElementType,
      metal::extents<int, __detail::dep<LeftElementType, TL ? M : K>, __detail::dep<LeftElementType, TL ? K : M>>,
      __left_layout>;
  template <class LeftElementType, class RightElementType, class ElementType, class CoordType = int, class... A>
  using cooperative_tensor_right_input_t = metal::cooperative_tensor<
      RightElementType,
      metal::extents<int, __detail::dep<RightElementType, TR ? K : N>, __detail::dep<RightElementType, TR ? N : K>>,
      __right_layout>;
  template <class LeftOperand, class RightOperand, class ElementType, class CoordType = int, class... A>
  using cooperative_tensor_destination_t =
      metal::cooperative_tensor<ElementType, metal::extents<int, N, M>, __destination_layout>;
  template <class LeftOperand, class RightOperand, class ElementType, class CoordType = int, class... A>
  using cooperative_tensor_row_reduction_destination_t =
      metal::cooperative_tensor<ElementType, metal::extents<int, M>, __detail::reduction_layout<true, M, N, S>>;
  template <class LeftOperand, class RightOperand, class ElementType, class CoordType = int, class... A>
  using cooperative_tensor_column_reduction_destination_t =
      metal::cooperative_tensor<ElementType, metal::extents<int, N>, __detail::reduction_layout<false, M, N, S>>;

  template <class C>
  static C __fresh() {
    C c;
    __builtin_memset(c.__slots, 0xff, sizeof c.__slots);  // unset slots read as NaN / all ones
    return c;
  }
  template <class LeftElementType, class RightElementType, class ElementType, class CoordType = int, class... A>
  cooperative_tensor_left_input_t<LeftElementType, RightElementType, ElementType> get_left_input_cooperative_tensor()
      const {
    static_assert(K > 0, "a cooperative left operand needs a static k in the descriptor");
    return __fresh<cooperative_tensor_left_input_t<LeftElementType, RightElementType, ElementType>>();
  }
  template <class LeftElementType, class RightElementType, class ElementType, class CoordType = int, class... A>
  cooperative_tensor_right_input_t<LeftElementType, RightElementType, ElementType> get_right_input_cooperative_tensor()
      const {
    static_assert(K > 0, "a cooperative right operand needs a static k in the descriptor");
    return __fresh<cooperative_tensor_right_input_t<LeftElementType, RightElementType, ElementType>>();
  }
  template <class LeftOperand, class RightOperand, class ElementType, class CoordType = int, class... A>
  cooperative_tensor_destination_t<LeftOperand, RightOperand, ElementType> get_destination_cooperative_tensor() const {
    return __fresh<cooperative_tensor_destination_t<LeftOperand, RightOperand, ElementType>>();
  }
  template <class LeftOperand, class RightOperand, class ElementType, class CoordType = int, class... A>
  cooperative_tensor_row_reduction_destination_t<LeftOperand, RightOperand, ElementType>
  get_row_reduction_destination_cooperative_tensor() const {
    return __fresh<cooperative_tensor_row_reduction_destination_t<LeftOperand, RightOperand, ElementType>>();
  }
  template <class LeftOperand, class RightOperand, class ElementType, class CoordType = int, class... A>
  cooperative_tensor_column_reduction_destination_t<LeftOperand, RightOperand, ElementType>
  get_column_reduction_destination_cooperative_tensor() const {
    return __fresh<cooperative_tensor_column_reduction_destination_t<LeftOperand, RightOperand, ElementType>>();
  }

  // Every thread of the scope calls run with the same tensors and its own cooperative tensors.
  template <class L, class R, class Dst>
  void run(L& left, R& right, Dst& destination, METILE_SITE) const {
    using LC = metal::remove_cv_t<L>;
    using RC = metal::remove_cv_t<R>;
    using DC = metal::remove_cv_t<Dst>;
    static_assert(!__detail::operand_traits<LC>::cooperative ||
                      metal::is_same<typename __detail::operand_traits<LC>::layout, __left_layout>::value,
                  "matmul2d::run: the left cooperative tensor was made for another descriptor or scope");
    static_assert(!__detail::operand_traits<RC>::cooperative ||
                      metal::is_same<typename __detail::operand_traits<RC>::layout, __right_layout>::value,
                  "matmul2d::run: the right cooperative tensor was made for another descriptor or scope");
    static_assert(!__detail::operand_traits<DC>::cooperative ||
                      metal::is_same<typename __detail::operand_traits<DC>::layout, __destination_layout>::value,
                  "matmul2d::run: the destination cooperative tensor was made for another descriptor or scope");
    static_assert(K > 0 || !__detail::operand_traits<LC>::cooperative || !__detail::operand_traits<RC>::cooperative,
                  "matmul2d::run: with a dynamic k, one input must be a tensor (k is read from it)");
    __detail::run_ctx ctx{&left, &right, &destination, metile_rt_lane(), __detail::scope_simdgroup(S)};
    metile_rt_group_op(S, &ctx, &__detail::run_impl<Descriptor, Scope, LC, RC, DC>, "matmul2d::run", __file, __line);
  }
};

template <class E, class SX, class DX, class SL, class DL>
inline void reduce_rows(metal::cooperative_tensor<E, SX, SL>& source, metal::cooperative_tensor<E, DX, DL>& destination,
                        reduction_operation op = reduction_operation::sum,
                        E identity = reduction_operation_identity<E>::sum_identity, METILE_SITE) {
  static_assert(metal::is_same<DL, __detail::reduction_layout<true, SL::rows, SL::cols, SL::scope>>::value,
                "reduce_rows: the destination must come from get_row_reduction_destination_cooperative_tensor "
                "of the source's operation");
  using S = metal::cooperative_tensor<E, SX, SL>;
  using D = metal::cooperative_tensor<E, DX, DL>;
  __detail::reduce_ctx ctx{&source, &destination,   metile_rt_lane(), __detail::scope_simdgroup(SL::scope),
                           op,      (float)identity};
  metile_rt_group_op(SL::scope, &ctx, &__detail::reduce_impl<true, S, D>, "reduce_rows", __file, __line);
}

template <class E, class SX, class DX, class SL, class DL>
inline void reduce_columns(metal::cooperative_tensor<E, SX, SL>& source,
                           metal::cooperative_tensor<E, DX, DL>& destination,
                           reduction_operation op = reduction_operation::sum,
                           E identity = reduction_operation_identity<E>::sum_identity, METILE_SITE) {
  static_assert(metal::is_same<DL, __detail::reduction_layout<false, SL::rows, SL::cols, SL::scope>>::value,
                "reduce_columns: the destination must come from get_column_reduction_destination_cooperative_"
                "tensor of the source's operation");
  using S = metal::cooperative_tensor<E, SX, SL>;
  using D = metal::cooperative_tensor<E, DX, DL>;
  __detail::reduce_ctx ctx{&source, &destination,   metile_rt_lane(), __detail::scope_simdgroup(SL::scope),
                           op,      (float)identity};
  metile_rt_group_op(SL::scope, &ctx, &__detail::reduce_impl<false, S, D>, "reduce_columns", __file, __line);
}

}  // namespace tensor_ops
}  // namespace mpp
