"""The AIR executor on AIR nobody compiled from MSL (tests/air/own_air.py, LLVM 14 typed pointers):
positions, buffers, a constant buffer, threadgroup memory and a barrier, SIMD collectives, a
function constant; the emulator's faults as Python exceptions; the build cache."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from mlx_metile.air import AirError, Library, Metallib
from mlx_metile.air.build import build
from mlx_metile.air.retarget import _constant_literal
from mlx_metile.emu import KernelFault

from .own_air import MATH, MISC, assemble


@pytest.fixture(scope="module")
def bitcode() -> bytes:
    return assemble()


@pytest.fixture(scope="module")
def lib(bitcode) -> Library:
    # through a metallib's bytes, as an artifact of our own AIR would travel
    return Library.read(
        Metallib.of_bitcode([(n, bitcode) for n in ("probe", "oob", "divergent", "needs_unknown")]).to_bytes()
    )


def _probe_reference(x: np.ndarray, scale: float, n: int) -> np.ndarray:
    xs = (x * np.float32(scale)).astype(np.float32)
    groups = xs.reshape(-1, 64)
    rev = groups[:, ::-1].reshape(-1)
    simd = xs.reshape(-1, 32)
    sums = np.repeat(simd.astype(np.float64).sum(1), 32)
    lane = np.arange(xs.size)
    shuffled = xs[lane ^ 1]
    out = np.zeros((xs.size, 3), np.float64)
    out[:n] = np.stack([rev, sums, shuffled], 1)[:n]
    return out


@pytest.mark.parametrize("order", ["forward", "shuffled"])
def test_probe_matches_numpy(lib, order):
    fn = lib.function("probe", {"scale": 0.5})
    x = np.random.default_rng(0).standard_normal(3 * 64).astype(np.float32)
    y = np.zeros(3 * x.size, np.float32)
    stats = fn.dispatch_threadgroups(3, 64, [x, y, np.uint32(150)], order=order, seed=7)
    ref = _probe_reference(x, 0.5, 150)
    # reversal and shuffle move values (exact); the sum of 32 floats in f32 differs from the f64 sum by at most 32 ulp of sum |x|
    got = y.reshape(-1, 3)
    np.testing.assert_array_equal(got[:, [0, 2]], ref[:, [0, 2]].astype(np.float32))
    bound = 32 * 2.0**-24 * np.repeat(np.abs(x * 0.5).reshape(-1, 32).sum(1), 32)
    assert np.all(np.abs(got[:, 1] - ref[:, 1]) <= bound)
    assert stats.threads == 192 and stats.bytes_written[1] == 150 * 3 * 4


def test_constants_by_index_and_errors(lib):
    fn = lib.function("probe", {3: 2.0})
    assert fn.constants == {"scale": 2.0}
    assert fn is lib.function("probe", {"scale": 2.0})
    with pytest.raises(AirError, match=r"function constants not set: scale \(float, index 3\)"):
        lib.function("probe")
    with pytest.raises(AirError, match="has no function constant 'scales'"):
        lib.function("probe", {"scales": 1.0})
    with pytest.raises(AirError, match="is a float; got 'x'"):
        lib.function("probe", {"scale": "x"})


def test_out_of_bounds_read_is_a_fault(lib):
    fn = lib.function("oob", {"scale": 1.0})
    with pytest.raises(
        KernelFault, match=r"out-of-bounds device access: read of 4 bytes at buffer\(0\)\+400, buffer is 256 bytes"
    ) as e:
        fn.dispatch_threadgroups(1, 64, [np.zeros(64, np.float32), np.zeros(64, np.float32)])
    assert e.value.kind == "out_of_bounds"
    # located by the line table the build gives the disassembly
    line = int(e.value.location.split(":")[1])
    assert "load volatile float" in fn.source.read_text().split("\n")[line - 1]


def test_divergent_barrier_names_the_line_of_the_disassembly(lib):
    fn = lib.function("divergent", {"scale": 1.0})
    y = np.zeros(64, np.float32)
    with pytest.raises(KernelFault, match=r"kernel\.air\.ll:(\d+): divergent: .*1 of 64 threads returned") as e:
        fn.dispatch_threadgroups(1, 64, [y])
    assert e.value.kind == "barrier"
    line = int(e.value.location.split(":")[1])
    assert "@air.wg.barrier" in fn.source.read_text().split("\n")[line - 1]
    assert not y.any()  # a faulted dispatch writes nothing back


def test_unsupported_intrinsic_is_named(lib):
    with pytest.raises(AirError, match="does not implement: air.unknown_op.f32"):
        lib.function("needs_unknown", {"scale": 1.0})


def test_launch_checks(lib):
    fn = lib.function("probe", {"scale": 1.0})
    with pytest.raises(ValueError, match=r"buffers\[2\] is not bound but the kernel reads `n`"):
        fn.dispatch_threadgroups(1, 64, [np.zeros(64, np.float32), np.zeros(192, np.float32)])
    with pytest.raises(ValueError, match="the kernel allows at most 64"):
        fn.dispatch_threadgroups(1, 128, [np.zeros(128, np.float32), np.zeros(384, np.float32), 128])
    kernel = lib.kernel("probe")
    assert [(p.kind, p.index, p.name) for p in kernel.params if p.kind == "buffer"] == [
        ("buffer", 0, "x"),
        ("buffer", 1, "y"),
        ("buffer", 2, "n"),
    ]
    assert [p.attribute for p in kernel.params if p.kind == "position"] == [
        "threadgroup_position_in_grid",
        "thread_position_in_threadgroup",
        "thread_index_in_simdgroup",
    ]


def test_objects_are_cached_under_the_settings_cache_root(env, tmp_path, bitcode):
    env.set("MLX_METILE_CACHE", str(tmp_path))
    fn = Library.of_modules([bitcode]).function("probe", {"scale": 1.0})
    assert tmp_path / "air" in fn.path.parents
    again = Library.of_modules([bitcode]).function("probe", {"scale": 1.0})
    assert again.path == fn.path and again.path.stat().st_mtime_ns == fn.path.stat().st_mtime_ns
    other = Library.of_modules([bitcode]).function("probe", {"scale": 3.0})
    assert other.path != fn.path
    # a damaged object is rebuilt, not loaded (one this process has not loaded: dlopen keeps those by path)
    built = Library.of_modules([bitcode])
    kernel = built.kernel("probe")
    so, _ = build(built.disassembly("probe"), kernel, {"scale": 5.0}, hashlib.sha256(bitcode).hexdigest())
    damaged = so.with_name("damaged")
    damaged.write_bytes(b"\0" * 64)
    os.replace(damaged, so)
    with pytest.warns(RuntimeWarning, match="damaged"):
        rebuilt = built.function("probe", {"scale": 5.0})
    assert rebuilt.path == so
    x = np.ones(64, np.float32)
    y = np.zeros(192, np.float32)
    rebuilt.dispatch_threadgroups(1, 64, [x, y, np.uint32(64)])
    assert y[1] == 5.0 * 32


def test_pure_intrinsics_match_numpy():
    fn = Library.of_modules([assemble(MATH)]).function("math")
    x = np.random.default_rng(2).standard_normal(64).astype(np.float32) * 2
    x[5], x[6] = 3e9, -3e9  # int conversions saturate, as the GPU's do
    y = np.zeros(8 * 64, np.float32)
    with np.errstate(over="ignore"):
        fn.dispatch_threads(64, 32, [x, y])
        got = y.reshape(64, 8).astype(np.float64)
        xd = x.astype(np.float64)
        ulp = np.spacing(np.abs(got).astype(np.float32)).astype(np.float64)
        # libm's expf / tanhf and 1/sqrtf (two roundings): within 2 ulp of the float64 value
        for col, ref in ((0, np.exp(xd)), (1, 1 / np.sqrt(np.abs(xd) + 1)), (7, np.tanh(xd))):
            finite = np.isfinite(ref)
            assert np.all(np.abs(got[finite, col] - ref[finite]) <= 2 * ulp[finite, col]), col
    # fma is one rounding of the exact x*x+1 (exact in float64 here); fmax and conversions are exact
    np.testing.assert_array_equal(got[:, 2], (xd * xd + 1).astype(np.float32))
    np.testing.assert_array_equal(got[:, 3], np.maximum(x, 0))
    k = np.clip(np.trunc((x * np.float32(1000)).astype(np.float64)), -(2**31), 2**31 - 1)
    np.testing.assert_array_equal(got[:, 4], k.astype(np.float32))
    with np.errstate(over="ignore"):  # 3e9 is inf in half, on both sides
        np.testing.assert_array_equal(got[:, 5], x.astype(np.float16).astype(np.float32))
    c = np.clip(np.clip(np.trunc((x * np.float32(10)).astype(np.float64)), -(2**31), 2**31 - 1), -3, 3)
    simd_max = np.repeat(c.reshape(2, 32).max(1), 32)
    uniform = np.repeat([np.all(g == g[0]) for g in c.reshape(2, 32)], 32)
    np.testing.assert_array_equal(got[:, 6], c + simd_max + 100 + 1000 * uniform)


def test_dot_and_ldexp():
    fn = Library.of_modules([assemble(MISC)]).function("misc")
    x = np.random.default_rng(3).standard_normal(32).astype(np.float32)
    y = np.zeros(64, np.float32)
    fn.dispatch_threads(32, 32, [x, y])
    f = np.float32
    dot = ((x * f(2) + x * f(3)).astype(f) + f(4)).astype(f) + f(10)  # left to right, rounded in float32
    np.testing.assert_array_equal(y[0::2], dot.astype(f))
    np.testing.assert_array_equal(y[1::2], x * f(8))


@pytest.mark.parametrize(
    "ctype, llvm, value, literal",
    [
        ("bool", "i8", True, "1"),
        ("int", "i32", -5, "-5"),
        ("uint", "i32", 2**32 - 1, "-1"),
        ("short", "i16", 300, "300"),
        ("float", "float", 0.1, "0x3FB99999A0000000"),  # 0.1 rounded to float, written as a double
        ("half", "half", 1.0, "0xH3C00"),
        ("bfloat", "bfloat", 1.0, "0xR3F80"),
    ],
)
def test_function_constant_literals(ctype, llvm, value, literal):
    assert _constant_literal(ctype, llvm, value, "c") == literal


def test_function_constant_range_is_checked():
    with pytest.raises(AirError, match=r"must be in \[-32768, 32767\], got 40000"):
        _constant_literal("short", "i16", 40000, "c")
    with pytest.raises(AirError, match="is a bool; got 2"):
        _constant_literal("bool", "i8", 2, "c")
