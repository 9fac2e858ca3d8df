// <metal_type_traits>, <metal_limits>, <metal_array> and <metal_numeric> as far as compute
// kernels (MLX's among them) use them. Included by metile_metal.h, before its address-space
// macros: nothing here names an address space (in the compiled build there is one memory).
#pragma once

namespace metal {

template <class T, T v>
struct integral_constant {
  static constexpr T value = v;
  using value_type = T;
  using type = integral_constant;
  constexpr operator value_type() const noexcept { return value; }
  constexpr value_type operator()() const noexcept { return value; }
};
template <bool B>
using bool_constant = integral_constant<bool, B>;
using true_type = bool_constant<true>;
using false_type = bool_constant<false>;

template <class A, class B>
struct is_same : false_type {};
template <class A>
struct is_same<A, A> : true_type {};
template <class A, class B>
constexpr bool is_same_v = is_same<A, B>::value;

template <bool C, class T = void>
struct enable_if {};
template <class T>
struct enable_if<true, T> {
  using type = T;
};
template <bool C, class T = void>
using enable_if_t = typename enable_if<C, T>::type;

template <bool C, class A, class B>
struct conditional {
  using type = A;
};
template <class A, class B>
struct conditional<false, A, B> {
  using type = B;
};
template <bool C, class A, class B>
using conditional_t = typename conditional<C, A, B>::type;

template <class T>
struct type_identity {
  using type = T;
};

// cv / reference / pointer
template <class T>
struct remove_const {
  using type = T;
};
template <class T>
struct remove_const<const T> {
  using type = T;
};
template <class T>
struct remove_volatile {
  using type = T;
};
template <class T>
struct remove_volatile<volatile T> {
  using type = T;
};
template <class T>
struct remove_cv {
  using type = typename remove_volatile<typename remove_const<T>::type>::type;
};
template <class T>
using remove_const_t = typename remove_const<T>::type;
template <class T>
using remove_volatile_t = typename remove_volatile<T>::type;
template <class T>
using remove_cv_t = typename remove_cv<T>::type;
template <class T>
struct remove_reference {
  using type = T;
};
template <class T>
struct remove_reference<T&> {
  using type = T;
};
template <class T>
struct remove_reference<T&&> {
  using type = T;
};
template <class T>
using remove_reference_t = typename remove_reference<T>::type;
template <class T>
struct remove_cvref {
  using type = remove_cv_t<remove_reference_t<T>>;
};
template <class T>
using remove_cvref_t = typename remove_cvref<T>::type;
template <class T>
struct remove_pointer {
  using type = T;
};
template <class T>
struct remove_pointer<T*> {
  using type = T;
};
template <class T>
struct remove_pointer<T* const> {
  using type = T;
};
template <class T>
using remove_pointer_t = typename remove_pointer<T>::type;
template <class T>
struct add_const {
  using type = const T;
};
template <class T>
using add_const_t = typename add_const<T>::type;
template <class T>
struct add_pointer {
  using type = remove_reference_t<T>*;
};
template <class T>
using add_pointer_t = typename add_pointer<T>::type;
// Address spaces: the qualifier is dropped (the lint build's clang address spaces too).
template <class T>
struct remove_address_space {
  using type = T;
};
#define METILE_AS(N)                                                 \
  template <class T>                                                 \
  struct remove_address_space<__attribute__((address_space(N))) T> { \
    using type = T;                                                  \
  };
METILE_AS(1)
METILE_AS(2)
METILE_AS(3)
#undef METILE_AS
template <class T>
using remove_address_space_t = typename remove_address_space<T>::type;
template <class T>
using remove_addrspace_t = remove_address_space_t<T>;

template <class T>
struct is_const : false_type {};
template <class T>
struct is_const<const T> : true_type {};
template <class T>
constexpr bool is_const_v = is_const<T>::value;
template <class T>
struct is_pointer : false_type {};
template <class T>
struct is_pointer<T*> : true_type {};
template <class T>
struct is_pointer<T* const> : true_type {};
template <class T>
constexpr bool is_pointer_v = is_pointer<T>::value;
template <class T>
struct is_reference : false_type {};
template <class T>
struct is_reference<T&> : true_type {};
template <class T>
struct is_reference<T&&> : true_type {};
template <class T>
constexpr bool is_reference_v = is_reference<T>::value;
template <class T>
struct is_void : is_same<remove_cv_t<T>, void> {};
template <class T>
constexpr bool is_void_v = is_void<T>::value;
template <class T>
struct is_array : false_type {};
template <class T, __SIZE_TYPE__ N>
struct is_array<T[N]> : true_type {};
template <class T>
constexpr bool is_array_v = is_array<T>::value;
template <class B, class D>
struct is_base_of : bool_constant<__is_base_of(B, D)> {};
template <class B, class D>
constexpr bool is_base_of_v = is_base_of<B, D>::value;
template <class F, class T>
struct is_convertible : bool_constant<__is_convertible_to(F, T)> {};
template <class F, class T>
constexpr bool is_convertible_v = is_convertible<F, T>::value;
template <class T>
struct is_trivially_copyable : bool_constant<__is_trivially_copyable(T)> {};
template <class T>
struct is_class : bool_constant<__is_class(T)> {};
template <class T>
constexpr bool is_class_v = is_class<T>::value;

template <class T>
T&& __declval(int);
template <class T>
T __declval(long);
template <class T>
decltype(__declval<T>(0)) declval() noexcept;

template <class T>
struct decay {
  using type = remove_cv_t<remove_reference_t<T>>;
};
template <class T>
using decay_t = typename decay<T>::type;

// arithmetic kinds (vectors are not scalars; ext_vector_type reports through is_vector)
template <class T>
struct __is_integral_base : false_type {};
#define METILE_INTEGRAL(T) \
  template <>              \
  struct __is_integral_base<T> : true_type {};
METILE_INTEGRAL(bool)
METILE_INTEGRAL(char)
METILE_INTEGRAL(signed char)
METILE_INTEGRAL(unsigned char)
METILE_INTEGRAL(short)
METILE_INTEGRAL(unsigned short)
METILE_INTEGRAL(int)
METILE_INTEGRAL(unsigned int)
METILE_INTEGRAL(long)
METILE_INTEGRAL(unsigned long)
METILE_INTEGRAL(long long)
METILE_INTEGRAL(unsigned long long)
#undef METILE_INTEGRAL
template <class T>
struct is_integral : __is_integral_base<remove_cv_t<T>> {};
template <class T>
constexpr bool is_integral_v = is_integral<T>::value;
template <class T>
struct __is_float_base : false_type {};
template <>
struct __is_float_base<float> : true_type {};
template <>
struct __is_float_base<_Float16> : true_type {};
template <>
struct __is_float_base<__bf16> : true_type {};
template <class T>
struct is_floating_point : __is_float_base<remove_cv_t<T>> {};
template <class T>
constexpr bool is_floating_point_v = is_floating_point<T>::value;
template <class T>
struct is_arithmetic : bool_constant<is_integral<T>::value || is_floating_point<T>::value> {};
template <class T>
constexpr bool is_arithmetic_v = is_arithmetic<T>::value;
template <class T>
struct is_scalar : bool_constant<is_arithmetic<T>::value || is_pointer<T>::value> {};
template <class T>
constexpr bool is_scalar_v = is_scalar<T>::value;
template <class T>
struct is_signed : bool_constant<is_arithmetic<T>::value && (remove_cv_t<T>(-1) < remove_cv_t<T>(0))> {};
template <class T>
constexpr bool is_signed_v = is_signed<T>::value;
template <class T>
struct is_unsigned : bool_constant<is_integral<T>::value && !is_signed<T>::value> {};
template <class T>
constexpr bool is_unsigned_v = is_unsigned<T>::value;
template <class T>
struct is_vector : false_type {};
template <class T>
constexpr bool is_vector_v = is_vector<T>::value;

template <class T>
struct make_unsigned {};
template <class T>
struct make_signed {};
#define METILE_SIGN_PAIR(S, U) \
  template <>                  \
  struct make_unsigned<S> {    \
    using type = U;            \
  };                           \
  template <>                  \
  struct make_unsigned<U> {    \
    using type = U;            \
  };                           \
  template <>                  \
  struct make_signed<S> {      \
    using type = S;            \
  };                           \
  template <>                  \
  struct make_signed<U> {      \
    using type = S;            \
  };
METILE_SIGN_PAIR(signed char, unsigned char)
METILE_SIGN_PAIR(short, unsigned short)
METILE_SIGN_PAIR(int, unsigned int)
METILE_SIGN_PAIR(long, unsigned long)
#undef METILE_SIGN_PAIR
template <class T>
using make_unsigned_t = typename make_unsigned<T>::type;
template <class T>
using make_signed_t = typename make_signed<T>::type;

// ---- <metal_limits>
template <class T>
struct numeric_limits {
  static constexpr bool is_specialized = false;
};
#define METILE_INT_LIMITS(T, LO, HI, DIGITS, SIGNED)         \
  template <>                                                \
  struct numeric_limits<T> {                                 \
    static constexpr bool is_specialized = true;             \
    static constexpr bool is_signed = SIGNED;                \
    static constexpr bool is_integer = true;                 \
    static constexpr int digits = DIGITS;                    \
    static constexpr T min() noexcept { return LO; }         \
    static constexpr T lowest() noexcept { return LO; }      \
    static constexpr T max() noexcept { return HI; }         \
    static constexpr T epsilon() noexcept { return (T)0; }   \
    static constexpr T infinity() noexcept { return (T)0; }  \
    static constexpr T quiet_NaN() noexcept { return (T)0; } \
  };
METILE_INT_LIMITS(bool, false, true, 1, false)
METILE_INT_LIMITS(char, (char)-128, (char)127, 7, true)
METILE_INT_LIMITS(signed char, (signed char)-128, (signed char)127, 7, true)
METILE_INT_LIMITS(unsigned char, (unsigned char)0, (unsigned char)255, 8, false)
METILE_INT_LIMITS(short, (short)-32768, (short)32767, 15, true)
METILE_INT_LIMITS(unsigned short, (unsigned short)0, (unsigned short)65535, 16, false)
METILE_INT_LIMITS(int, -2147483647 - 1, 2147483647, 31, true)
METILE_INT_LIMITS(unsigned int, 0u, 4294967295u, 32, false)
METILE_INT_LIMITS(long, -9223372036854775807l - 1, 9223372036854775807l, 63, true)
METILE_INT_LIMITS(unsigned long, 0ul, 18446744073709551615ul, 64, false)
#undef METILE_INT_LIMITS
#define METILE_FLOAT_LIMITS(T, BITS, MINBITS, MAXBITS, EPSBITS, DIGITS)                           \
  template <>                                                                                     \
  struct numeric_limits<T> {                                                                      \
    static constexpr bool is_specialized = true;                                                  \
    static constexpr bool is_signed = true;                                                       \
    static constexpr bool is_integer = false;                                                     \
    static constexpr bool has_infinity = true;                                                    \
    static constexpr bool has_quiet_NaN = true;                                                   \
    static constexpr int digits = DIGITS;                                                         \
    static constexpr T min() noexcept { return __builtin_bit_cast(T, (BITS)MINBITS); }            \
    static constexpr T max() noexcept { return __builtin_bit_cast(T, (BITS)MAXBITS); }            \
    static constexpr T lowest() noexcept { return -max(); }                                       \
    static constexpr T epsilon() noexcept { return __builtin_bit_cast(T, (BITS)EPSBITS); }        \
    static constexpr T infinity() noexcept { return __builtin_bit_cast(T, (BITS)(MAXBITS + 1)); } \
    static constexpr T quiet_NaN() noexcept {                                                     \
      return __builtin_bit_cast(T, (BITS)(MAXBITS + 1 + (1u << (DIGITS - 2))));                   \
    }                                                                                             \
    static constexpr T denorm_min() noexcept { return __builtin_bit_cast(T, (BITS)1); }           \
  };
METILE_FLOAT_LIMITS(float, unsigned int, 0x00800000u, 0x7f7fffffu, 0x34000000u, 24)
METILE_FLOAT_LIMITS(_Float16, unsigned short, 0x0400u, 0x7bffu, 0x1400u, 11)
METILE_FLOAT_LIMITS(__bf16, unsigned short, 0x0080u, 0x7f7fu, 0x3c00u, 8)
#undef METILE_FLOAT_LIMITS
template <class T>
struct numeric_limits<const T> : numeric_limits<T> {};

// ---- <metal_array>
template <class T, __SIZE_TYPE__ N>
struct array {
  T __elems[N > 0 ? N : 1];
  constexpr __SIZE_TYPE__ size() const { return N; }
  constexpr T& operator[](__SIZE_TYPE__ i) { return __elems[i]; }
  constexpr const T& operator[](__SIZE_TYPE__ i) const { return __elems[i]; }
  constexpr T* data() { return __elems; }
  constexpr const T* data() const { return __elems; }
  constexpr T* begin() { return __elems; }
  constexpr T* end() { return __elems + N; }
  constexpr const T* begin() const { return __elems; }
  constexpr const T* end() const { return __elems + N; }
};

}  // namespace metal
