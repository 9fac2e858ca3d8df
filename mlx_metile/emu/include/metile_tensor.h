// <metal_tensor> for the emulator: extents, tensors over device / threadgroup memory
// (tensor_inline: a pointer, extents and strides), slices, and cooperative tensors (the
// per-thread slots of a tensor spread over an execution scope, laid out by the operation that
// made them; see metile_mpp.h).
//
// Dimension 0 is the contiguous one: a row-major M x K matrix is extents(K, M) with strides
// {1, ld}; element (i0, i1) lives at data[i0 * stride0 + i1 * stride1].
//
// Included after metile_metal.h's address-space macros: nothing here spells an address space.
#pragma once
#include "emu_abi.h"
#include "metile_metal.h"

namespace metal {

constexpr __SIZE_TYPE__ dynamic_extent = (__SIZE_TYPE__)-1;

template <class IndexType, __SIZE_TYPE__... Extents>
struct extents {
  using index_type = IndexType;
  using size_type = __SIZE_TYPE__;
  static constexpr int __r = (int)sizeof...(Extents);
  static constexpr __SIZE_TYPE__ __static[__r > 0 ? __r : 1] = {Extents...};
  static constexpr int __dynamic = (0 + ... + (Extents == dynamic_extent ? 1 : 0));
  IndexType __e[__r > 0 ? __r : 1];

  constexpr extents() : __e{(IndexType)(Extents == dynamic_extent ? 0 : Extents)...} {}
  // The dynamic extents in order, or every extent.
  template <class... I, class = enable_if_t<(sizeof...(I) > 0) && (... && is_integral<I>::value)>>
  constexpr extents(I... values) : __e{(IndexType)(Extents == dynamic_extent ? 0 : Extents)...} {
    static_assert(sizeof...(I) == __dynamic || sizeof...(I) == __r,
                  "extents: give the dynamic extents, or all of them");
    IndexType v[] = {(IndexType)values...};
    int j = 0;
    for (int r = 0; r < __r; ++r)
      if (sizeof...(I) == __r)
        __e[r] = v[r];
      else if (__static[r] == dynamic_extent)
        __e[r] = v[j++];
  }
  static constexpr __SIZE_TYPE__ rank() { return __r; }
  static constexpr __SIZE_TYPE__ rank_dynamic() { return __dynamic; }
  static constexpr __SIZE_TYPE__ static_extent(__SIZE_TYPE__ r) { return __static[r]; }
  constexpr IndexType extent(__SIZE_TYPE__ r) const { return __e[r]; }
};

template <class I, __SIZE_TYPE__ R, __SIZE_TYPE__... E>
struct __make_dextents {
  using type = typename __make_dextents<I, R - 1, dynamic_extent, E...>::type;
};
template <class I, __SIZE_TYPE__... E>
struct __make_dextents<I, 0, E...> {
  using type = extents<I, E...>;
};
template <class I, __SIZE_TYPE__ R>
using dextents = typename __make_dextents<I, R>::type;

// Layout tags. All behave as tensor_inline here: a pointer, extents and strides.
struct tensor_inline {};
struct tensor_handle {};
struct tensor_offset {};

[[gnu::noinline]] inline void __metile_tensor_fault(const char* file, int line, const char* what, int dim, long origin,
                                                    long size, long extent) {
  char msg[256];
  __builtin_snprintf(msg, sizeof msg, "%s: [%ld, %ld) of dimension %d is outside its extent %ld", what, origin,
                     origin + size, dim, extent);
  metile_rt_fault(METILE_FAULT_OUT_OF_BOUNDS, file, line, nullptr, msg);
}

template <class ElementType, class Extents, class Layout = tensor_handle>
struct tensor {
  using element_type = ElementType;
  using value_type = remove_cv_t<remove_address_space_t<ElementType>>;
  using extents_type = Extents;
  using index_type = typename Extents::index_type;
  using layout = Layout;
  static constexpr int __r = Extents::__r;

  ElementType* __data;
  Extents __ext;
  index_type __strides[__r];

  tensor(ElementType* data, Extents e) : __data(data), __ext(e) {
    index_type s = 1;
    for (int r = 0; r < __r; ++r) {
      __strides[r] = s;
      s *= e.extent(r);
    }
  }
  tensor(ElementType* data, Extents e, array<index_type, __r> strides) : __data(data), __ext(e) {
    for (int r = 0; r < __r; ++r) __strides[r] = strides[r];
  }

  Extents get_extents() const { return __ext; }
  index_type get_extent(int r) const { return __ext.extent(r); }
  index_type get_stride(int r) const { return __strides[r]; }
  array<index_type, __r> get_strides() const {
    array<index_type, __r> s;
    for (int r = 0; r < __r; ++r) s[r] = __strides[r];
    return s;
  }
  ElementType* data() const { return __data; }
  bool __inside(long i0, long i1) const { return i0 >= 0 && i1 >= 0 && i0 < __ext.extent(0) && i1 < __ext.extent(1); }
  ElementType& __at(long i0, long i1) const { return __data[i0 * (long)__strides[0] + i1 * (long)__strides[1]]; }

  // A view starting at (o0, o1): E0 x E1 elements, dynamic_extent meaning "to the end".
  template <__SIZE_TYPE__ E0 = dynamic_extent, __SIZE_TYPE__ E1 = dynamic_extent>
  tensor<ElementType, extents<index_type, E0, E1>, Layout> slice(index_type o0, index_type o1, METILE_SITE) const {
    static_assert(__r == 2, "the emulator slices 2-D tensors");
    index_type o[2] = {o0, o1};
    __SIZE_TYPE__ want[2] = {E0, E1};
    index_type size[2];
    for (int r = 0; r < 2; ++r) {
      index_type left = __ext.extent(r) - o[r];
      if (o[r] < 0 || left < 0) __metile_tensor_fault(__file, __line, "tensor::slice", r, o[r], 0, __ext.extent(r));
      size[r] = want[r] == dynamic_extent ? left : (index_type)want[r];
      if (size[r] > left) __metile_tensor_fault(__file, __line, "tensor::slice", r, o[r], size[r], __ext.extent(r));
    }
    extents<index_type, E0, E1> e(size[0], size[1]);
    array<index_type, 2> s{{__strides[0], __strides[1]}};
    return tensor<ElementType, extents<index_type, E0, E1>, Layout>(&__at(o0, o1), e, s);
  }
  template <__SIZE_TYPE__ E0 = dynamic_extent, __SIZE_TYPE__ E1 = dynamic_extent>
  tensor<ElementType, extents<index_type, E0, E1>, Layout> static_slice(index_type o0, index_type o1,
                                                                        METILE_SITE) const {
    return slice<E0, E1>(o0, o1, __file, __line);
  }
};

template <class T>
struct __is_tensor : false_type {};
template <class E, class X, class L>
struct __is_tensor<tensor<E, X, L>> : true_type {};

// Reported at the caller's line: the return address is in the code operator[] was inlined into.
[[gnu::noinline]] inline void __metile_slot_fault(int i, int capacity) {
  void* pc = __builtin_return_address(0);
  char msg[160];
  __builtin_snprintf(msg, sizeof msg, "cooperative tensor slot %d is out of range: its capacity is %d", i, capacity);
  metile_rt_fault(METILE_FAULT_OUT_OF_BOUNDS, nullptr, 0, pc, msg);
}

// A tensor whose elements are spread over the threads of an execution scope; Layout (made by the
// operation, metile_mpp.h) says which thread holds which element in which slot.
template <class ElementType, class Extents, class Layout>
struct cooperative_tensor {
  using element_type = ElementType;
  using value_type = ElementType;
  using extents_type = Extents;
  using layout = Layout;
  static constexpr int __capacity = Layout::capacity;

  ElementType __slots[__capacity];

  static constexpr uint16_t get_capacity() { return __capacity; }
  [[gnu::always_inline]] ElementType& operator[](int i) {
    if (i < 0 || i >= __capacity) __metile_slot_fault(i, __capacity);
    return __slots[i];
  }
  [[gnu::always_inline]] const ElementType& operator[](int i) const {
    if (i < 0 || i >= __capacity) __metile_slot_fault(i, __capacity);
    return __slots[i];
  }
  bool is_valid_element(int i) const { return i >= 0 && i < __capacity && Layout::here(i).valid; }
  bool get_mask(int i) const { return is_valid_element(i); }
  // The element's coordinates: [0] along dimension 0 (the column), [1] along dimension 1 (the row).
  array<int, Layout::rank> get_multidimensional_index(int i) const { return Layout::here(i).index(); }

  template <class E, class X, class L>
  void load(const tensor<E, X, L>& src) {
    for (int i = 0; i < __capacity; ++i) {
      auto c = Layout::here(i);
      if (!c.valid) continue;
      __slots[i] = src.__inside(c.col, c.row) ? (ElementType)src.__at(c.col, c.row) : (ElementType)0;
    }
  }
  template <class E, class X, class L>
  void store(const tensor<E, X, L>& dst) const {
    using V = typename tensor<E, X, L>::value_type;
    for (int i = 0; i < __capacity; ++i) {
      auto c = Layout::here(i);
      if (c.valid && dst.__inside(c.col, c.row)) dst.__at(c.col, c.row) = (V)__slots[i];
    }
  }
};

template <class T>
struct __is_cooperative_tensor : false_type {};
template <class E, class X, class L>
struct __is_cooperative_tensor<cooperative_tensor<E, X, L>> : true_type {};

// Execution scopes. execution_simdgroup: each SIMD group on its own; execution_simdgroups<N>: the
// threadgroup, which must have exactly N SIMD groups.
struct execution_thread {
  static constexpr int __simdgroups = -1;
};
struct execution_simdgroup {
  static constexpr int __simdgroups = 0;
};
template <int N>
struct execution_simdgroups {
  static_assert(N > 0, "execution_simdgroups<N>: N must be positive");
  static constexpr int __simdgroups = N;
};

}  // namespace metal
