"""The tile IR: builder, verifier, printer and the reference interpreter."""

import numpy as np
import pytest

from mlx_metile import kernels  # (the top-level kernels/, installed as mlx_metile.kernels)
from mlx_metile.formats import WeightFormat
from mlx_metile.ir import Builder, VerifyError, bind_meta, format_program, interpret, verify
from mlx_metile.ir.numerics import bf16_bits_to_f32, f32_to_bf16_bits
from mlx_metile.spec import ProjectionSpec


def _vector_add():
    b = Builder("vadd", grid_rank=1)
    BLOCK = b.meta_param("BLOCK")
    b.buffer("a", "f32")
    b.buffer("c", "f32", output=True)
    n = b.scalar("n")
    idx = b.program_id(0) * BLOCK + b.arange(BLOCK)
    ok = idx < n
    v = b.load("a", idx, ok)
    b.store("c", idx, b.unary("exp", v) + 1.0, ok)
    return b.build()


def test_interpreter_runs_a_masked_program():
    prog = bind_meta(_vector_add(), {"BLOCK": 8})
    verify(prog)
    a = np.linspace(-1, 1, 13, dtype=np.float32)
    c = np.zeros(13, np.float32)
    interpret(prog, (2,), {"a": a, "c": c}, {"n": 13})
    np.testing.assert_allclose(c, np.exp(a) + 1, rtol=1e-6)


def test_verifier_rejects_unbound_meta_and_bad_stores():
    with pytest.raises(VerifyError, match="unbound meta-parameters|is not bound"):
        verify(_vector_add())
    b = Builder("bad", grid_rank=1)
    b.buffer("a", "f32")
    i = b.arange(4)
    b.store("a", i, b.load("a", i))
    with pytest.raises(VerifyError, match="store to input buffer 'a'"):
        verify(b.build())
    b = Builder("bad2", grid_rank=1)
    b.buffer("a", "f32")
    b.buffer("c", "f32", output=True)
    i = b.arange(4)
    x = b.load("a", i)[:, None]
    b.dot(x, x.T, b.zeros((4, 4)))
    with pytest.raises(VerifyError, match="dot must accumulate inside a loop"):
        verify(b.build())


def test_interpreter_bounds_checks_unmasked_loads():
    b = Builder("oob", grid_rank=1)
    b.buffer("a", "f32")
    b.buffer("c", "f32", output=True)
    i = b.arange(8)
    b.store("c", i, b.load("a", i))
    with pytest.raises(IndexError, match="load from 'a' at offset 7 outside its 4 elements"):
        interpret(b.build(), (1,), {"a": np.zeros(4, np.float32), "c": np.zeros(8, np.float32)}, {})


def test_printer_shows_loop_and_types():
    text = format_program(
        bind_meta(
            kernels.projection_program(ProjectionSpec("bf16", (WeightFormat("bf16"),))), {"BM": 4, "BN": 8, "BK": 256}
        )
    )
    assert "program proj_bf16_bf16(x: bf16*, w0: bf16*, y0: bf16* out, M: i32, K: i32, N0: i32)" in text
    assert "= for %k0 in range(" in text and "dot(" in text and ": f32[4, 8]" in text


def test_bf16_rounding_helpers_round_to_nearest_even():
    x = np.array([1.0, 1.00390625, 1.005859375, 1.0078125, -3.5], np.float32)  # 1+2^-8 is a tie
    np.testing.assert_array_equal(bf16_bits_to_f32(f32_to_bf16_bits(x)), [1.0, 1.0, 1.0078125, 1.0078125, -3.5])


@pytest.mark.parametrize("act", ["f32", "f16", "bf16"])
def test_projection_program_interpreted_matches_numpy(act):
    rng = np.random.default_rng(0)
    M, K, N = 5, 70, 19
    spec = ProjectionSpec(act, (WeightFormat(act, has_bias=True, bias_dtype="f32"),), epilogue="gelu")
    prog = bind_meta(kernels.projection_program(spec), {"BM": 4, "BN": 8, "BK": 32})
    verify(prog)
    x = rng.standard_normal((M, K)).astype(np.float32)
    w = (rng.standard_normal((N, K)) * 0.1).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32)

    def store(a):
        return f32_to_bf16_bits(a) if act == "bf16" else a.astype({"f32": np.float32, "f16": np.float16}[act])

    def load(a):
        return bf16_bits_to_f32(a) if act == "bf16" else a.astype(np.float32)

    xs, ws = store(x), store(w)
    y = store(np.zeros((M, N), np.float32))
    interpret(prog, (3, 2), {"x": xs, "w0": ws, "bias0": bias, "y0": y}, {"M": M, "K": K, "N0": N})
    from math import erf

    z = load(xs).astype(np.float64) @ load(ws).astype(np.float64).T + bias
    ref = 0.5 * z * (1 + np.vectorize(erf)(z / np.sqrt(2)))
    ulp = {"f32": 2.0**-24, "f16": 2.0**-11, "bf16": 2.0**-8}[act]
    np.testing.assert_allclose(load(y), ref, rtol=2 * ulp, atol=1e-5)


def test_reduce_over_an_axis():
    b = Builder("rowmax", grid_rank=1)
    b.buffer("a", "f32")
    b.buffer("s", "f32", output=True)
    b.buffer("m", "f32", output=True)
    i, j = b.arange(4), b.arange(8)
    tile = b.load("a", i[:, None] * 8 + j[None, :])
    b.store("s", i, b.reduce("sum", tile, 1))
    b.store("m", j, b.reduce("max", tile, 0))
    prog = b.build()
    verify(prog)
    a = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    s, m = np.zeros(4, np.float32), np.zeros(8, np.float32)
    interpret(prog, (1,), {"a": a, "s": s, "m": m}, {})
    np.testing.assert_allclose(s, a.sum(axis=1), rtol=1e-6)
    np.testing.assert_array_equal(m, a.max(axis=0))
    with pytest.raises(ValueError, match="reduce: axis 2 outside a rank-2 tile"):
        b.reduce("sum", tile, 2)


def test_a_spec_names_what_it_cannot_compute():
    import pytest

    from mlx_metile.formats import WeightFormat
    from mlx_metile.spec import ProjectionSpec

    for weights, epilogue, message in (
        ((WeightFormat("f16", 8, 32),), "swiglu", "'swiglu' takes two weights"),
        ((), None, "at least one weight"),
        ((WeightFormat("f16"),), "relu", "epilogue: 'relu' is not one of"),
    ):
        with pytest.raises(ValueError, match=message):
            ProjectionSpec("f16", weights, epilogue)
