// The Metal compiler's __metal_* builtins that kernels written against Apple's own headers call
// (MLX's bf16_math.h), more of the math and SIMD-group library, and quad-group functions.
// Included by metile_metal.h after its core; computes in float like the rest of the shim
// (half and bfloat round once), so fast and precise variants are the same function.
#pragma once

#define __METAL_FAST_MATH__ true
#define __METAL_PRECISE_MATH__ false
#define __METAL_MAYBE_FAST_MATH__ false

namespace metal {

// ---- math the core lacks (element-wise, float computes)
#define METILE_MATH1(NAME, EXPR)                                     \
  template <class T>                                                 \
  inline T NAME(T x) {                                               \
    return __metile::map1(x, [](float v) { return (float)(EXPR); }); \
  }
METILE_MATH1(acos, __builtin_acosf(v))
METILE_MATH1(acosh, __builtin_acoshf(v))
METILE_MATH1(asin, __builtin_asinf(v))
METILE_MATH1(asinh, __builtin_asinhf(v))
METILE_MATH1(atan, __builtin_atanf(v))
METILE_MATH1(atanh, __builtin_atanhf(v))
METILE_MATH1(cosh, __builtin_coshf(v))
METILE_MATH1(sinh, __builtin_sinhf(v))
METILE_MATH1(tan, __builtin_tanf(v))
METILE_MATH1(cospi, __builtin_cosf(v * 3.14159265358979323846f))
METILE_MATH1(sinpi, __builtin_sinf(v * 3.14159265358979323846f))
METILE_MATH1(tanpi, __builtin_tanf(v * 3.14159265358979323846f))
METILE_MATH1(exp10, __builtin_powf(10.0f, v))
METILE_MATH1(log10, __builtin_log10f(v))
METILE_MATH1(log1p, __builtin_log1pf(v))
METILE_MATH1(expm1, __builtin_expm1f(v))
METILE_MATH1(fract, v - __builtin_floorf(v))
METILE_MATH1(sign, v > 0.0f ? 1.0f : (v < 0.0f ? -1.0f : 0.0f))
#undef METILE_MATH1

template <class T>
inline T atan2(T y, T x) {
  return __metile::map2(y, x, [](auto a, auto b) { return __builtin_atan2f((float)a, (float)b); });
}
template <class T>
inline T fmod(T x, T y) {
  return __metile::map2(x, y, [](auto a, auto b) { return __builtin_fmodf((float)a, (float)b); });
}
template <class T>
inline T copysign(T x, T y) {
  return __metile::map2(x, y, [](auto a, auto b) { return __builtin_copysignf((float)a, (float)b); });
}
template <class T>
inline T powr(T x, T y) {
  return pow(x, y);
}
template <class T>
inline T divide(T x, T y) {
  return x / y;
}
template <class T>
inline T max3(T x, T y, T z) {
  return max(max(x, y), z);
}
template <class T>
inline T min3(T x, T y, T z) {
  return min(min(x, y), z);
}
template <class T>
inline T median3(T x, T y, T z) {
  return max(min(x, y), min(max(x, y), z));
}
template <class T>
inline T fmax3(T x, T y, T z) {
  return max3(x, y, z);
}
template <class T>
inline T fmin3(T x, T y, T z) {
  return min3(x, y, z);
}
template <class T>
inline T fmedian3(T x, T y, T z) {
  return median3(x, y, z);
}
template <class T>
inline T step(T edge, T x) {
  return __metile::map2(edge, x, [](auto e, auto v) { return v < e ? 0.0f : 1.0f; });
}
template <class T>
inline bool isfinite(T x) {
  return __builtin_isfinite((float)x);
}
template <class T>
inline bool signbit(T x) {
  return __builtin_signbit((float)x);
}

}  // namespace metal

// ---- the compiler's builtins: float in, float out; `fast` is accepted and ignored
#define METILE_BUILTIN1(NAME, FN) \
  inline float __metal_##NAME(float x, bool = false) { return metal::FN(x); }
METILE_BUILTIN1(fabs, fabs)
METILE_BUILTIN1(acos, acos)
METILE_BUILTIN1(acosh, acosh)
METILE_BUILTIN1(asin, asin)
METILE_BUILTIN1(asinh, asinh)
METILE_BUILTIN1(atan, atan)
METILE_BUILTIN1(atanh, atanh)
METILE_BUILTIN1(ceil, ceil)
METILE_BUILTIN1(cos, cos)
METILE_BUILTIN1(cosh, cosh)
METILE_BUILTIN1(cospi, cospi)
METILE_BUILTIN1(exp, exp)
METILE_BUILTIN1(exp10, exp10)
METILE_BUILTIN1(exp2, exp2)
METILE_BUILTIN1(floor, floor)
METILE_BUILTIN1(fract, fract)
METILE_BUILTIN1(log, log)
METILE_BUILTIN1(log10, log10)
METILE_BUILTIN1(log2, log2)
METILE_BUILTIN1(rint, rint)
METILE_BUILTIN1(round, round)
METILE_BUILTIN1(rsqrt, rsqrt)
METILE_BUILTIN1(sin, sin)
METILE_BUILTIN1(sinh, sinh)
METILE_BUILTIN1(sinpi, sinpi)
METILE_BUILTIN1(sqrt, sqrt)
METILE_BUILTIN1(tan, tan)
METILE_BUILTIN1(tanh, tanh)
METILE_BUILTIN1(tanpi, tanpi)
METILE_BUILTIN1(trunc, trunc)
#undef METILE_BUILTIN1
#define METILE_BUILTIN2(NAME, FN) \
  inline float __metal_##NAME(float x, float y, bool = false) { return metal::FN(x, y); }
METILE_BUILTIN2(atan2, atan2)
METILE_BUILTIN2(divide, divide)
METILE_BUILTIN2(fmax, fmax)
METILE_BUILTIN2(fmin, fmin)
METILE_BUILTIN2(fmod, fmod)
METILE_BUILTIN2(pow, pow)
METILE_BUILTIN2(powr, powr)
#undef METILE_BUILTIN2
#define METILE_BUILTIN3(NAME, FN) \
  inline float __metal_##NAME(float x, float y, float z, bool = false) { return metal::FN(x, y, z); }
METILE_BUILTIN3(fmax3, max3)
METILE_BUILTIN3(fmin3, min3)
METILE_BUILTIN3(fmedian3, median3)
#undef METILE_BUILTIN3
inline float __metal_fma(float x, float y, float z) { return __builtin_fmaf(x, y, z); }
inline float __metal_nextafter(float x, float y) { return __builtin_nextafterf(x, y); }
inline float __metal_ldexp(float x, int k, bool = false) { return __builtin_ldexpf(x, k); }
inline float __metal_frexp(float x, int* e) { return __builtin_frexpf(x, e); }

namespace metal {

// ---- SIMD-group functions the core lacks, composed of its shuffles
template <class T>
inline T simd_shuffle_rotate_down(T v, ushort delta, METILE_SITE) {
  ushort lane = (ushort)((metile_rt_lane() + delta) % 32);
  return __metile::collective(METILE_OP_SHUFFLE, v, lane, __file, __line);
}
template <class T>
inline T simd_shuffle_rotate_up(T v, ushort delta, METILE_SITE) {
  ushort lane = (ushort)((metile_rt_lane() + 32 - delta % 32) % 32);
  return __metile::collective(METILE_OP_SHUFFLE, v, lane, __file, __line);
}
// Lanes in blocks of `modulo`: lane l reads data[l + delta] within its block, past the end of
// the block filling_data[l + delta - modulo].
template <class T>
inline T simd_shuffle_and_fill_down(T data, T filling, ushort delta, ushort modulo, METILE_SITE) {
  uint l = metile_rt_lane(), base = l - l % modulo, src = l % modulo + delta;
  ushort from = (ushort)(base + (src < modulo ? src : src - modulo));
  T a = __metile::collective(METILE_OP_SHUFFLE, data, from, __file, __line);
  T b = __metile::collective(METILE_OP_SHUFFLE, filling, from, __file, __line);
  return src < modulo ? a : b;
}
template <class T>
inline T simd_shuffle_and_fill_down(T data, T filling, ushort delta, METILE_SITE) {
  return simd_shuffle_and_fill_down(data, filling, delta, (ushort)32, __file, __line);
}
template <class T>
inline T simd_shuffle_and_fill_up(T data, T filling, ushort delta, ushort modulo, METILE_SITE) {
  uint l = metile_rt_lane(), base = l - l % modulo, pos = l % modulo;
  ushort from = (ushort)(base + (pos >= delta ? pos - delta : pos + modulo - delta));
  T a = __metile::collective(METILE_OP_SHUFFLE, data, from, __file, __line);
  T b = __metile::collective(METILE_OP_SHUFFLE, filling, from, __file, __line);
  return pos >= delta ? a : b;
}
template <class T>
inline T simd_shuffle_and_fill_up(T data, T filling, ushort delta, METILE_SITE) {
  return simd_shuffle_and_fill_up(data, filling, delta, (ushort)32, __file, __line);
}
// Scans: lane l combines lanes 0..l in lane order.
template <class T>
inline T __metile_scan(T v, bool inclusive, bool product, const char* file, int line) {
  uint l = metile_rt_lane();
  T acc = product ? (T)1 : (T)0;
  for (ushort src = 0; src < 32; ++src) {
    T x = __metile::collective(METILE_OP_SHUFFLE, v, src, file, line);
    if (src < l || (inclusive && src == l)) acc = product ? (T)(acc * x) : (T)(acc + x);
  }
  return acc;
}
template <class T>
inline T simd_prefix_inclusive_sum(T v, METILE_SITE) {
  return __metile_scan(v, true, false, __file, __line);
}
template <class T>
inline T simd_prefix_exclusive_sum(T v, METILE_SITE) {
  return __metile_scan(v, false, false, __file, __line);
}
template <class T>
inline T simd_prefix_inclusive_product(T v, METILE_SITE) {
  return __metile_scan(v, true, true, __file, __line);
}
template <class T>
inline T simd_prefix_exclusive_product(T v, METILE_SITE) {
  return __metile_scan(v, false, true, __file, __line);
}

// ---- quad-group functions: lanes in groups of 4
template <class T>
inline T quad_shuffle(T v, ushort lane, METILE_SITE) {
  ushort from = (ushort)((metile_rt_lane() & ~3u) | (lane & 3u));
  return __metile::collective(METILE_OP_SHUFFLE, v, from, __file, __line);
}
template <class T>
inline T quad_shuffle_xor(T v, ushort mask, METILE_SITE) {
  return __metile::collective(METILE_OP_SHUFFLE_XOR, v, mask & 3, __file, __line);
}
template <class T>
inline T quad_broadcast(T v, ushort lane, METILE_SITE) {
  return quad_shuffle(v, lane, __file, __line);
}
template <class T>
inline T quad_shuffle_down(T v, ushort delta, METILE_SITE) {
  uint l = metile_rt_lane();
  ushort from = (ushort)((l & 3u) + delta < 4 ? l + delta : l);
  return __metile::collective(METILE_OP_SHUFFLE, v, from, __file, __line);
}
template <class T>
inline T quad_shuffle_up(T v, ushort delta, METILE_SITE) {
  uint l = metile_rt_lane();
  ushort from = (ushort)((l & 3u) >= delta ? l - delta : l);
  return __metile::collective(METILE_OP_SHUFFLE, v, from, __file, __line);
}
template <class T>
inline T quad_sum(T v, METILE_SITE) {
  v = v + __metile::collective(METILE_OP_SHUFFLE_XOR, v, 1, __file, __line);
  return v + __metile::collective(METILE_OP_SHUFFLE_XOR, v, 2, __file, __line);
}
template <class T>
inline T quad_max(T v, METILE_SITE) {
  v = max(v, __metile::collective(METILE_OP_SHUFFLE_XOR, v, 1, __file, __line));
  return max(v, __metile::collective(METILE_OP_SHUFFLE_XOR, v, 2, __file, __line));
}
template <class T>
inline T quad_min(T v, METILE_SITE) {
  v = min(v, __metile::collective(METILE_OP_SHUFFLE_XOR, v, 1, __file, __line));
  return min(v, __metile::collective(METILE_OP_SHUFFLE_XOR, v, 2, __file, __line));
}

}  // namespace metal

// ---- the compiler's SIMD-group builtins
inline ushort __metal_get_thread_index_in_simdgroup(ushort) { return (ushort)metile_rt_lane(); }
inline uint __metal_get_thread_index_in_simdgroup(uint) { return metile_rt_lane(); }
inline ushort __metal_get_simdgroup_size(ushort) { return 32; }
inline uint __metal_get_simdgroup_size(uint) { return 32; }
#define METILE_SIMD_BUILTIN1(NAME)                 \
  template <class T>                               \
  inline T __metal_simd_##NAME(T v, METILE_SITE) { \
    return metal::simd_##NAME(v, __file, __line);  \
  }
METILE_SIMD_BUILTIN1(sum)
METILE_SIMD_BUILTIN1(product)
METILE_SIMD_BUILTIN1(max)
METILE_SIMD_BUILTIN1(min)
METILE_SIMD_BUILTIN1(xor)
METILE_SIMD_BUILTIN1(prefix_inclusive_sum)
METILE_SIMD_BUILTIN1(prefix_exclusive_sum)
METILE_SIMD_BUILTIN1(prefix_inclusive_product)
METILE_SIMD_BUILTIN1(prefix_exclusive_product)
#undef METILE_SIMD_BUILTIN1
#define METILE_SIMD_BUILTIN2(NAME)                           \
  template <class T>                                         \
  inline T __metal_simd_##NAME(T v, ushort a, METILE_SITE) { \
    return metal::simd_##NAME(v, a, __file, __line);         \
  }
METILE_SIMD_BUILTIN2(broadcast)
METILE_SIMD_BUILTIN2(shuffle)
METILE_SIMD_BUILTIN2(shuffle_down)
METILE_SIMD_BUILTIN2(shuffle_up)
METILE_SIMD_BUILTIN2(shuffle_xor)
METILE_SIMD_BUILTIN2(shuffle_rotate_down)
METILE_SIMD_BUILTIN2(shuffle_rotate_up)
#undef METILE_SIMD_BUILTIN2
template <class T>
inline T __metal_simd_shuffle_and_fill_down(T v, T f, ushort d, ushort m, METILE_SITE) {
  return metal::simd_shuffle_and_fill_down(v, f, d, m, __file, __line);
}
template <class T>
inline T __metal_simd_shuffle_and_fill_up(T v, T f, ushort d, ushort m, METILE_SITE) {
  return metal::simd_shuffle_and_fill_up(v, f, d, m, __file, __line);
}
