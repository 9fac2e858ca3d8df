"""What the translator takes for kernels written like MLX's: headers of their own, template kernels
named by [[host_name]], function constants, address-space qualified overloads, literal suffixes."""

import numpy as np
import pytest

from mlx_metile.emu import CompileError, Kernel, TranslateError

HEADER = """
#pragma once
#include <metal_stdlib>
using namespace metal;
struct Acc {
  float v;
  Acc() thread : v(0.0f) {}
  Acc() threadgroup : v(0.0f) {}
  void add(float x) thread { v += x; }
  void add(float x) device { v += x; }
};
inline float load_scaled(const device float* p, int i) { return p[i] * 2.0h; }
inline float load_scaled(const threadgroup float* p, int i) { return p[i] * 2.0h; }
template <typename T> struct elem {};
template <typename T> struct elem<device T*> { using type = T; };
template <typename T> struct elem<threadgroup T*> { using type = T; };
"""

SOURCE = """
#include "acc.h"
constant bool scale_output [[function_constant(0)]];
constant int repeats [[function_constant(1)]];
constant bool unused_flag [[function_constant(2)]];

template <typename T, int N>
[[kernel, max_total_threads_per_threadgroup(64)]] void sum_rows(
    const device T* x [[buffer(0)]],
    device float* y [[buffer(1)]],
    const constant float& scale [[buffer(2), function_constant(scale_output)]],
    uint row [[threadgroup_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float tile[N];
  tile[lane] = float(x[row * N + lane]);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  Acc acc;
  for (int r = 0; r < repeats; ++r) acc.add(load_scaled(tile, lane));
  typename elem<device float*>::type total = simd_sum(acc.v) * 0.25;
  if (scale_output) total *= scale;
  if (is_function_constant_defined(unused_flag)) total += 1000.0f;
  if (lane == 0) y[row] = total + 0.5bf;
}

#define INSTANTIATE(T, N) \\
  template [[host_name("sum_rows_" #T "_" #N)]] [[kernel]] decltype(sum_rows<T, N>) sum_rows<T, N>;
INSTANTIATE(half, 32)
INSTANTIATE(float, 32)
"""


@pytest.fixture(scope="module")
def include(tmp_path_factory):
    d = tmp_path_factory.mktemp("inc")
    (d / "acc.h").write_text(HEADER)
    return d


@pytest.mark.parametrize("scale", [False, True])
def test_template_kernel_header_constants_and_overloads(include, scale, rng):
    k = Kernel(SOURCE, "sum_rows_half_32", include_dirs=[include], function_constants={0: scale, "repeats": 3})
    x = rng.standard_normal((4, 32)).astype(np.float16)
    y = np.zeros(4, np.float32)
    buffers = [x, y] + ([np.array([-1.5], np.float32)] if scale else [])  # buffer(2) exists only if scaled
    k.dispatch_threadgroups(4, 32, buffers)
    # each lane adds 2 x[i] three times; the sum * 0.25 (f32; terms exact), then 0.5 (a bfloat literal)
    ref = x.astype(np.float64).sum(axis=1) * 6 * 0.25 * (-1.5 if scale else 1.0) + 0.5
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_kernel_names_listed_and_constants_checked(include):
    with pytest.raises(TranslateError, match=r"`sum_rows` is a kernel template: .*sum_rows_half_32, sum_rows_float_32"):
        Kernel(SOURCE, "sum_rows", include_dirs=[include], function_constants={0: False, 1: 1})
    with pytest.raises(TranslateError, match=r"no kernel named 'sum' .*sum_rows, sum_rows_half_32"):
        Kernel(SOURCE, "sum", include_dirs=[include], function_constants={0: False, 1: 1})
    with pytest.raises(TranslateError, match=r"function_constants: 7 is not declared .*repeats \(1\)"):
        Kernel(SOURCE, "sum_rows_float_32", include_dirs=[include], function_constants={0: False, 1: 1, 7: True})
    with pytest.raises(TranslateError, match=r"function constant `scale_output` is bool; got 2"):
        Kernel(SOURCE, "sum_rows_float_32", include_dirs=[include], function_constants={0: 2, 1: 1})
    with pytest.raises(CompileError, match=r"uses function constant `repeats` \(index 1\) but no value was given"):
        Kernel(SOURCE, "sum_rows_float_32", include_dirs=[include], function_constants={0: False})


def test_missing_header_and_errors_in_headers(include, tmp_path):
    with pytest.raises(TranslateError, match=r"'acc.h' file not found"):
        Kernel(SOURCE, "sum_rows_half_32", function_constants={0: False, 1: 1})
    with pytest.raises(TranslateError, match=r"include_dirs: .* is not a directory"):
        Kernel(SOURCE, "sum_rows_half_32", include_dirs=[tmp_path / "none"])
    (tmp_path / "acc.h").write_text(HEADER.replace("v += x; }\n  void add", "v += oops; }\n  void add"))
    with pytest.raises(CompileError, match=r"acc\.h:9:\d+: error: use of undeclared identifier 'oops'"):
        Kernel(SOURCE, "sum_rows_half_32", include_dirs=[tmp_path], function_constants={0: False, 1: 1})
