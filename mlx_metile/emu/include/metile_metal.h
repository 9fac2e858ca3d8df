// The Metal Shading Language subset used by compute kernels, as C++ for the
// CPU emulator. Every kernel translation unit includes this first (the
// driver passes it with -include; <metal_stdlib> also resolves here).
//
// half and bfloat are the compiler's _Float16 / __bf16, compiled with excess
// precision off, so every operation rounds to the type like the GPU does.
#pragma once
#include <stdint.h>

#include "emu_rt.h"

typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef uint64_t ulong;
typedef _Float16 half;
typedef __bf16 bfloat;
typedef __SIZE_TYPE__ size_t;
typedef __PTRDIFF_TYPE__ ptrdiff_t;

template <class T, int N>
using vec = T __attribute__((ext_vector_type(N)));

#define METILE_VEC_TYPES(T) \
  typedef vec<T, 2> T##2;   \
  typedef vec<T, 3> T##3;   \
  typedef vec<T, 4> T##4;
METILE_VEC_TYPES(float)
METILE_VEC_TYPES(half)
METILE_VEC_TYPES(bfloat)
METILE_VEC_TYPES(int)
METILE_VEC_TYPES(uint)
METILE_VEC_TYPES(short)
METILE_VEC_TYPES(ushort)
METILE_VEC_TYPES(char)
METILE_VEC_TYPES(uchar)
METILE_VEC_TYPES(long)
METILE_VEC_TYPES(ulong)
METILE_VEC_TYPES(bool)
#undef METILE_VEC_TYPES

#include "metile_traits.h"

namespace metal {
using ::vec;
template <class T, int N>
struct is_vector<vec<T, N>> : true_type {};
#define METILE_VEC_NAMES(T) using ::T##2, ::T##3, ::T##4;
METILE_VEC_NAMES(float)
METILE_VEC_NAMES(half)
METILE_VEC_NAMES(bfloat)
METILE_VEC_NAMES(int)
METILE_VEC_NAMES(uint)
METILE_VEC_NAMES(short)
METILE_VEC_NAMES(ushort)
METILE_VEC_NAMES(char)
METILE_VEC_NAMES(uchar)
METILE_VEC_NAMES(long)
METILE_VEC_NAMES(ulong)
METILE_VEC_NAMES(bool)
#undef METILE_VEC_NAMES
}  // namespace metal

#define METAL_FUNC inline __attribute__((always_inline))

#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
#define FLT_MAX 3.40282347e+38f
#define FLT_MIN 1.17549435e-38f
#define MAXFLOAT 3.40282347e+38f
#define HALF_MAX ((half)65504.0f)
#define M_PI_F 3.14159265358979323846f
#define M_LOG2E_F 1.44269504088896340736f
#define M_SQRT2_F 1.41421356237309504880f

namespace __metile {

template <class T>
struct traits {
  using elem = T;
  static constexpr int size = 1;
};
template <class T, int N>
struct traits<vec<T, N>> {
  using elem = T;
  static constexpr int size = N;
};
template <class A, class B>
struct same {
  static constexpr bool value = false;
};
template <class A>
struct same<A, A> {
  static constexpr bool value = true;
};

template <class T>
constexpr int type_code() {
  if constexpr (same<T, float>::value)
    return METILE_T_F32;
  else if constexpr (same<T, half>::value)
    return METILE_T_F16;
  else if constexpr (same<T, bfloat>::value)
    return METILE_T_BF16;
  else if constexpr (same<T, int>::value)
    return METILE_T_I32;
  else if constexpr (same<T, uint>::value || same<T, bool>::value)
    return METILE_T_U32;
  else if constexpr (same<T, short>::value)
    return METILE_T_I16;
  else if constexpr (same<T, ushort>::value)
    return METILE_T_U16;
  else if constexpr (same<T, char>::value || same<T, signed char>::value)
    return METILE_T_I8;
  else if constexpr (same<T, uchar>::value)
    return METILE_T_U8;
  else if constexpr (same<T, long>::value || same<T, long long>::value)
    return METILE_T_I64;
  else
    return METILE_T_U64;
}

// Vector constructors: float4(x), float4(a, b, c, d), float4(xy, zw),
// float4(half4) - the driver rewrites `float4(` into a call of this.
template <class V, int I>
inline void fill(V&) {}
template <class V, int I, class A, class... Rest>
inline void fill(V& v, A a, Rest... rest) {
  using E = typename traits<V>::elem;
  if constexpr (traits<A>::size == 1) {
    v[I] = (E)a;
  } else {
    for (int k = 0; k < traits<A>::size; ++k) v[I + k] = (E)a[k];
  }
  fill<V, I + traits<A>::size>(v, rest...);
}
template <class V, class... A>
inline V make(A... a) {
  using E = typename traits<V>::elem;
  constexpr int n = traits<V>::size;
  V v;
  if constexpr (sizeof...(A) == 1 && (... && (traits<A>::size == 1))) {
    for (int k = 0; k < n; ++k) v[k] = (E)(a, ...);
  } else {
    static_assert((0 + ... + traits<A>::size) == n, "vector constructor: component count mismatch");
    fill<V, 0>(v, a...);
  }
  return v;
}

// Element-wise application of a float function; half/bfloat round once.
template <class T, class F>
inline T map1(T x, F f) {
  using E = typename traits<T>::elem;
  if constexpr (traits<T>::size == 1) {
    return (T)f((float)x);
  } else {
    T r;
    for (int k = 0; k < traits<T>::size; ++k) r[k] = (E)f((float)x[k]);
    return r;
  }
}
template <class T, class F>
inline T map2(T x, T y, F f) {
  using E = typename traits<T>::elem;
  if constexpr (traits<T>::size == 1) {
    return (T)f(x, y);
  } else {
    T r;
    for (int k = 0; k < traits<T>::size; ++k) r[k] = (E)f((E)x[k], (E)y[k]);
    return r;
  }
}

// Binding the entry point's arguments (c->buffers[i], positions) to the kernel's parameter
// types; like the entry point itself these are not instrumented.
template <class F>
struct signature;
template <class R, class... A>
struct signature<R(A...)> {
  template <int I>
  using arg = __type_pack_element<I, A...>;
};
template <class A>
__attribute__((no_sanitize("thread"))) inline A bind_buffer(void* p) {
  using V = metal::remove_reference_t<A>;
  if constexpr (metal::is_reference<A>::value) {
    return *(V*)p;
  } else if constexpr (metal::is_pointer<A>::value) {
    return (A)p;
  } else {
    return *(V*)p;  // a buffer passed by value
  }
}
template <class A>
__attribute__((no_sanitize("thread"))) inline A bind_position(const uint32_t* comps) {
  using V = metal::remove_cv_t<A>;
  if constexpr (traits<V>::size == 1) {
    return (V)comps[0];
  } else {
    V v;
    for (int k = 0; k < traits<V>::size; ++k) v[k] = (typename traits<V>::elem)comps[k];
    return v;
  }
}
template <class A>
__attribute__((no_sanitize("thread"))) inline A bind_scalar(uint32_t value) {
  return (metal::remove_cv_t<A>)value;
}

template <class T>
inline T collective(int op, T v, int arg, const char* file, int line) {
  using E = typename traits<T>::elem;
  T out;
  metile_rt_collective(op, type_code<E>(), traits<T>::size, &v, (int)sizeof(T), arg, &out, file, line);
  return out;
}

}  // namespace __metile

#define METILE_SITE const char *__file = __builtin_FILE(), int __line = __builtin_LINE()

namespace metal {

enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
inline constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags((int)a | (int)b); }

inline void threadgroup_barrier(mem_flags, METILE_SITE) { metile_rt_barrier(__file, __line); }
inline void simdgroup_barrier(mem_flags, METILE_SITE) {
  uint zero = 0;
  __metile::collective(METILE_OP_OR, zero, 0, __file, __line);
}

// ---- SIMD-group functions
template <class T>
inline T simd_sum(T v, METILE_SITE) {
  return __metile::collective(METILE_OP_SUM, v, 0, __file, __line);
}
template <class T>
inline T simd_product(T v, METILE_SITE) {
  return __metile::collective(METILE_OP_PRODUCT, v, 0, __file, __line);
}
template <class T>
inline T simd_max(T v, METILE_SITE) {
  return __metile::collective(METILE_OP_MAX, v, 0, __file, __line);
}
template <class T>
inline T simd_min(T v, METILE_SITE) {
  return __metile::collective(METILE_OP_MIN, v, 0, __file, __line);
}
template <class T>
inline T simd_and(T v, METILE_SITE) {
  return __metile::collective(METILE_OP_AND, v, 0, __file, __line);
}
template <class T>
inline T simd_or(T v, METILE_SITE) {
  return __metile::collective(METILE_OP_OR, v, 0, __file, __line);
}
template <class T>
inline T simd_xor(T v, METILE_SITE) {
  return __metile::collective(METILE_OP_XOR, v, 0, __file, __line);
}
template <class T>
inline T simd_shuffle(T v, ushort lane, METILE_SITE) {
  return __metile::collective(METILE_OP_SHUFFLE, v, lane, __file, __line);
}
template <class T>
inline T simd_shuffle_down(T v, ushort d, METILE_SITE) {
  return __metile::collective(METILE_OP_SHUFFLE_DOWN, v, d, __file, __line);
}
template <class T>
inline T simd_shuffle_up(T v, ushort d, METILE_SITE) {
  return __metile::collective(METILE_OP_SHUFFLE_UP, v, d, __file, __line);
}
template <class T>
inline T simd_shuffle_xor(T v, ushort m, METILE_SITE) {
  return __metile::collective(METILE_OP_SHUFFLE_XOR, v, m, __file, __line);
}
template <class T>
inline T simd_broadcast(T v, ushort lane, METILE_SITE) {
  return __metile::collective(METILE_OP_BROADCAST, v, lane, __file, __line);
}
inline bool simd_all(bool b, METILE_SITE) {
  return __metile::collective(METILE_OP_AND, (uint)b, 0, __file, __line) != 0;
}
inline bool simd_any(bool b, METILE_SITE) {
  return __metile::collective(METILE_OP_OR, (uint)b, 0, __file, __line) != 0;
}

// ---- math (float computes; half/bfloat compute in float and round once)
#define METILE_MATH1(NAME, EXPR)                                     \
  template <class T>                                                 \
  inline T NAME(T x) {                                               \
    return __metile::map1(x, [](float v) { return (float)(EXPR); }); \
  }
METILE_MATH1(exp, __builtin_expf(v))
METILE_MATH1(exp2, __builtin_exp2f(v))
METILE_MATH1(log, __builtin_logf(v))
METILE_MATH1(log2, __builtin_log2f(v))
METILE_MATH1(sqrt, __builtin_sqrtf(v))
METILE_MATH1(rsqrt, 1.0f / __builtin_sqrtf(v))
METILE_MATH1(tanh, __builtin_tanhf(v))
METILE_MATH1(sin, __builtin_sinf(v))
METILE_MATH1(cos, __builtin_cosf(v))
METILE_MATH1(erf, __builtin_erff(v))
METILE_MATH1(floor, __builtin_floorf(v))
METILE_MATH1(ceil, __builtin_ceilf(v))
METILE_MATH1(round, __builtin_roundf(v))
METILE_MATH1(rint, __builtin_rintf(v))
METILE_MATH1(trunc, __builtin_truncf(v))
METILE_MATH1(fabs, __builtin_fabsf(v))
METILE_MATH1(saturate, v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v))
#undef METILE_MATH1

template <class T>
inline T abs(T x) {
  using E = typename __metile::traits<T>::elem;
  if constexpr (__metile::traits<T>::size == 1) {
    return x < (E)0 ? (T)-x : x;
  } else {
    T r;
    for (int k = 0; k < __metile::traits<T>::size; ++k) r[k] = x[k] < (E)0 ? (E)-x[k] : x[k];
    return r;
  }
}
template <class T>
inline T pow(T x, T y) {
  return __metile::map2(x, y, [](auto a, auto b) { return __builtin_powf((float)a, (float)b); });
}
template <class T>
inline T min(T a, T b) {
  return __metile::map2(a, b, [](auto x, auto y) { return y < x ? y : x; });
}
template <class T>
inline T max(T a, T b) {
  return __metile::map2(a, b, [](auto x, auto y) { return x < y ? y : x; });
}
// fmin / fmax as Metal defines them: where one argument is a NaN, the other one
template <class T>
inline T fmin(T a, T b) {
  return __metile::map2(a, b, [](auto x, auto y) { return x != x ? y : y != y ? x : (y < x ? y : x); });
}
template <class T>
inline T fmax(T a, T b) {
  return __metile::map2(a, b, [](auto x, auto y) { return x != x ? y : y != y ? x : (x < y ? y : x); });
}
template <class T>
inline T clamp(T x, T lo, T hi) {
  return min(max(x, lo), hi);
}
template <class T>
inline T fma(T a, T b, T c) {
  using E = typename __metile::traits<T>::elem;
  if constexpr (__metile::traits<T>::size == 1) {
    return (T)__builtin_fmaf((float)a, (float)b, (float)c);
  } else {
    T r;
    for (int k = 0; k < __metile::traits<T>::size; ++k) r[k] = (E)__builtin_fmaf((float)a[k], (float)b[k], (float)c[k]);
    return r;
  }
}
template <class T>
inline T mix(T x, T y, T a) {
  return x + (y - x) * a;
}
template <class T>
inline T select(T a, T b, bool c) {
  return c ? b : a;
}
template <class T>
inline bool isnan(T x) {
  return __builtin_isnan((float)x);
}
template <class T>
inline bool isinf(T x) {
  return __builtin_isinf((float)x);
}
template <class T>
inline typename __metile::traits<T>::elem dot(T a, T b) {
  typename __metile::traits<T>::elem s = 0;
  for (int k = 0; k < __metile::traits<T>::size; ++k) s += a[k] * b[k];
  return s;
}
template <class To, class From>
inline To as_type(From x) {
  static_assert(sizeof(To) == sizeof(From), "as_type: sizes differ");
  return __builtin_bit_cast(To, x);
}

namespace fast {
using metal::cos;
using metal::exp;
using metal::exp2;
using metal::log;
using metal::log2;
using metal::max;
using metal::min;
using metal::pow;
using metal::rsqrt;
using metal::sin;
using metal::sqrt;
using metal::tanh;
}  // namespace fast
namespace precise {
using metal::cos;
using metal::exp;
using metal::exp2;
using metal::log;
using metal::log2;
using metal::max;
using metal::min;
using metal::pow;
using metal::rsqrt;
using metal::sin;
using metal::sqrt;
using metal::tanh;
}  // namespace precise

// ---- simdgroup matrices (8x8; lane layout in emu_rt.h)
template <class T, int R, int C>
struct simdgroup_matrix {
  static_assert(R == 8 && C == 8, "the emulator supports 8x8 simdgroup matrices");
  vec<T, 2> elems;
  simdgroup_matrix() = default;
  vec<T, 2>& thread_elements() { return elems; }
  const vec<T, 2>& thread_elements() const { return elems; }
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

template <class T, int R, int C>
inline simdgroup_matrix<T, R, C> make_filled_simdgroup_matrix(T v) {
  simdgroup_matrix<T, R, C> m;
  m.elems = vec<T, 2>{v, v};
  return m;
}

template <class T, class P>
inline void simdgroup_load(simdgroup_matrix<T, 8, 8>& m, P* src, ulong elements_per_row = 8,
                           ulong2 origin = ulong2{0, 0}, bool transpose = false) {
  int r, c;
  metile_frag_coord((int)metile_rt_lane(), &r, &c);
  for (int j = 0; j < 2; ++j) {
    ulong row = transpose ? c + j : r, col = transpose ? r : c + j;
    m.elems[j] = (T)src[(origin.y + row) * elements_per_row + origin.x + col];
  }
}
template <class T, class P>
inline void simdgroup_store(const simdgroup_matrix<T, 8, 8>& m, P* dst, ulong elements_per_row = 8,
                            ulong2 origin = ulong2{0, 0}, bool transpose = false) {
  int r, c;
  metile_frag_coord((int)metile_rt_lane(), &r, &c);
  for (int j = 0; j < 2; ++j) {
    ulong row = transpose ? c + j : r, col = transpose ? r : c + j;
    dst[(origin.y + row) * elements_per_row + origin.x + col] = m.elems[j];
  }
}
template <class TD, class TA, class TB, class TC>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                                          const simdgroup_matrix<TB, 8, 8>& b, const simdgroup_matrix<TC, 8, 8>& c,
                                          METILE_SITE) {
  float in[6] = {(float)a.elems[0], (float)a.elems[1], (float)b.elems[0],
                 (float)b.elems[1], (float)c.elems[0], (float)c.elems[1]};
  float out[2];
  metile_rt_collective(METILE_OP_MMA, METILE_T_F32, 6, in, (int)sizeof in, 0, out, __file, __line);
  d.elems = vec<TD, 2>{(TD)out[0], (TD)out[1]};
}
template <class TD, class TA, class TB>
inline void simdgroup_multiply(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                               const simdgroup_matrix<TB, 8, 8>& b, METILE_SITE) {
  simdgroup_matrix<TD, 8, 8> zero = make_filled_simdgroup_matrix<TD, 8, 8>((TD)0);
  simdgroup_multiply_accumulate(d, a, b, zero, __file, __line);
}

}  // namespace metal

#include "metile_builtins.h"

using namespace metal;

// ---- address spaces and keywords (last, so the code above may use the names)
#ifdef METILE_LINT
// Lint build: each address space is a distinct clang address space, so a
// pointer into one cannot be used as a pointer into another.
#define device __attribute__((address_space(1)))
#define constant __attribute__((address_space(2))) const
#define METILE_TG_PTR __attribute__((address_space(3)))
#define METILE_TG_STORAGE static __attribute__((address_space(3)))
#define METILE_TG_ESCAPE(x) ((void)0)
#else
#define device
#define constant const
#define METILE_TG_PTR
// Threadgroup variables live in one section so the runtime can poison,
// shadow and bound them; one threadgroup runs at a time.
#define METILE_TG_STORAGE static __attribute__((section("metile_tg"), aligned(16)))
#define METILE_TG_ESCAPE(x) asm volatile("" : : "r"(&(x)) : "memory")
#endif
#define thread
#define kernel

// What MSL rejects, rejected here too.
#define double metile_error_double_is_not_supported_in_msl
#define goto metile_error_goto_is_not_supported_in_msl
#define virtual metile_error_virtual_is_not_supported_in_msl
#define malloc metile_error_dynamic_memory_is_not_supported_in_msl
#define free metile_error_dynamic_memory_is_not_supported_in_msl
#define new metile_error_dynamic_memory_is_not_supported_in_msl
#define delete metile_error_dynamic_memory_is_not_supported_in_msl
#define std metile_error_the_std_namespace_is_not_available_in_msl
