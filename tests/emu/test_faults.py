"""Each fault class is reported as a Python exception naming the MSL line."""

import numpy as np
import pytest

from mlx_metile.emu import CompileError, Kernel, KernelFault, TranslateError

HEADER = "#include <metal_stdlib>\nusing namespace metal;\n"


def kernel(body: str, name: str = "k") -> Kernel:
    return Kernel(HEADER + body, name)


def test_thread_leaving_while_others_wait_at_barrier():
    k = kernel(
        """kernel void k(device float* x [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {
  if (i == 3) return;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  x[i] = 1.0f;
}"""
    )
    with pytest.raises(KernelFault, match=r"k\.metal:5: .*1 of 32 threads returned while 31 wait") as e:
        k.dispatch_threadgroups(1, 32, [np.zeros(32, np.float32)])
    assert e.value.kind == "barrier"


def test_lanes_in_different_collectives():
    k = kernel(
        """kernel void k(device float* x [[buffer(0)]], uint i [[thread_index_in_simdgroup]]) {
  float v = x[i];
  if (i < 16) v = simd_sum(v);
  else v = simd_max(v);
  x[i] = v;
}"""
    )
    with pytest.raises(KernelFault, match=r"k\.metal:\d: .*different collectives: lane 0 in simd_sum .*simd_max") as e:
        k.dispatch_threadgroups(1, 32, [np.zeros(32, np.float32)])
    assert e.value.kind == "collective"


def test_collective_waiting_on_lanes_at_a_barrier():
    k = kernel(
        """kernel void k(device float* x [[buffer(0)]], uint i [[thread_index_in_simdgroup]]) {
  if (i == 0) threadgroup_barrier(mem_flags::mem_threadgroup);
  else x[i] = simd_sum(x[i]);
}"""
    )
    with pytest.raises(KernelFault, match=r"k\.metal:5: .*simd_sum: thread \d+ waits for lanes"):
        k.dispatch_threadgroups(1, 32, [np.zeros(32, np.float32)])


@pytest.mark.parametrize("index", ["n", "n + 40", "-1"])
def test_out_of_bounds_device_access(index):
    k = kernel(
        f"""kernel void k(device float* x [[buffer(0)]], constant int& n [[buffer(1)]],
              uint i [[thread_position_in_grid]]) {{
  if (i == 0) x[{index}] = 1.0f;
}}"""
    )
    x = np.zeros(13, np.float32)
    with pytest.raises(
        KernelFault, match=r"k\.metal:5: .*out-of-bounds device access: write of 4 bytes at buffer\(0\)"
    ) as e:
        k.dispatch_threadgroups(1, 4, [x, 13])
    assert e.value.kind == "out_of_bounds"
    assert not x.any(), "a faulting dispatch must not write results back"


def test_read_of_threadgroup_memory_never_written():
    k = kernel(
        """kernel void k(device float* x [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {
  threadgroup float t[64];
  if (i < 31) t[i] = 1.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  x[i] = t[i];
}"""
    )
    with pytest.raises(
        KernelFault, match=r"k\.metal:7: .*read of threadgroup memory never written: 4 bytes at offset 124"
    ) as e:
        k.dispatch_threadgroups(1, 32, [np.zeros(32, np.float32)])
    assert e.value.kind == "uninitialized_threadgroup_read"


def test_threadgroup_memory_overflow():
    k = kernel(
        """kernel void k(device float* x [[buffer(0)]], threadgroup float* dyn [[threadgroup(0)]],
              uint i [[thread_index_in_threadgroup]]) {
  threadgroup float t[4096];
  t[i] = x[i];
  dyn[i] = t[i];
  x[i] = dyn[i];
}"""
    )
    with pytest.raises(ValueError, match=r"threadgroup memory overflow: 16384 bytes .* \+ 16400 bytes"):
        k.dispatch_threadgroups(1, 32, [np.zeros(32, np.float32)], [16400])
    k.dispatch_threadgroups(1, 32, [np.zeros(32, np.float32)], [16384])  # exactly at the limit


def test_too_many_threads_per_threadgroup():
    k = kernel("kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = 0; }")
    with pytest.raises(ValueError, match="1025 threads; Metal allows 1..1024"):
        k.dispatch_threadgroups(1, (1025, 1, 1), [np.zeros(2048, np.float32)])


def test_integer_division_by_zero_trap_is_caught():
    k = kernel(
        """kernel void k(device int* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  x[i] = 7 / x[i];
}"""
    )
    with pytest.raises(KernelFault, match=r"k\.metal:4: .*arithmetic trap") as e:
        k.dispatch_threadgroups(1, 4, [np.zeros(4, np.int32)])
    assert e.value.kind == "trap"
    # the process survives and the emulator keeps working
    x = np.ones(4, np.int32)
    k.dispatch_threadgroups(1, 4, [x])
    assert (x == 7).all()


def test_compile_error_reports_msl_line():
    with pytest.raises(CompileError, match=r"k\.metal:4:\d+: error: use of undeclared identifier 'oops'"):
        kernel("""kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  x[i] = oops;
}""")


@pytest.mark.parametrize(
    "body,message",
    [
        ("double d = x[i]; x[i] = (float)d;", "double_is_not_supported"),
        ("std::abort();", "the_std_namespace_is_not_available"),
        ("float* p = new float[4]; x[i] = p[0];", "dynamic_memory_is_not_supported"),
        ("goto done; done: x[i] = 0;", "goto_is_not_supported"),
        (
            "threadgroup float* p = x; p[i] = 0;",
            r"cannot initialize a variable of type 'threadgroup float \*' with an lvalue of type 'device float \*'",
        ),
    ],
)
def test_lint_rejects_what_msl_rejects(body, message):
    with pytest.raises(CompileError, match=message):
        kernel(f"kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {{ {body} }}")


def test_lint_rejects_virtual_and_exceptions():
    with pytest.raises(CompileError, match="virtual_is_not_supported"):
        kernel("struct S { virtual float f(); };\nkernel void k(device float* x [[buffer(0)]]) { x[0] = 0; }")
    with pytest.raises(CompileError, match="exceptions"):
        kernel("kernel void k(device float* x [[buffer(0)]]) { try { x[0] = 0; } catch (...) {} }")


def test_lint_rejects_recursion():
    with pytest.raises(CompileError, match=r"recursion is not supported in MSL: fact\(unsigned int\) -> fact"):
        kernel(
            """uint fact(uint n) { return n <= 1 ? 1 : n * fact(n - 1); }
kernel void k(device uint* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = fact(x[i]); }"""
        )


def test_lint_rejects_mutable_program_scope_variable():
    with pytest.raises(CompileError, match="program-scope variable `counter` is not `constant`"):
        kernel("float counter;\nkernel void k(device float* x [[buffer(0)]]) { x[0] = counter; }")
    # a constant table is fine
    k = kernel(
        "constant float table[3] = {1.0f, 2.0f, 4.0f};\n"
        "kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = table[i]; }"
    )
    x = np.zeros(3, np.float32)
    k.dispatch_threadgroups(1, 3, [x])
    np.testing.assert_array_equal(x, [1, 2, 4])


def test_initialised_threadgroup_variable_rejected():
    with pytest.raises(TranslateError, match=r"k\.metal:4: threadgroup variables cannot be initialised"):
        kernel("""kernel void k(device float* x [[buffer(0)]]) {
  threadgroup float t = 0.0f;
  x[0] = t;
}""")


def test_buffer_index_limit_and_unbound_buffer():
    with pytest.raises(TranslateError, match=r"\[\[buffer\(31\)\]\].*0..30"):
        kernel("kernel void k(device float* x [[buffer(31)]]) { x[0] = 0; }")
    k = kernel("kernel void k(device float* x [[buffer(0)]], device float* y [[buffer(1)]]) { x[0] = y[0]; }")
    with pytest.raises(ValueError, match=r"buffers\[1\] is not bound .* `y`"):
        k.dispatch_threadgroups(1, 1, [np.zeros(1, np.float32)])
