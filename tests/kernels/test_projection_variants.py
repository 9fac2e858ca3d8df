"""Every projection variant's generated MSL, executed in the emulator through
the primitive, against a float64 reference; plus the CPU path, and row
invariance (a row's bits alone == inside 2..33 rows) on both."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

import mlx_metile as mt

from ..conftest import requires_emulator
from ..helpers import bits, rand
from .cases import Case, check, microscaled_weight, quantized_weight

ACT = [mx.float32, mx.float16, mx.bfloat16]
ROWS = list(range(1, 34))


def _assert_row_invariant(case: Case) -> None:
    alone = [[bits(o) for o in _as_list(case.run_rows(r, r + 1))] for r in range(33)]
    for rows in (2, 5, 17, 32, 33):
        outs = [bits(o) for o in _as_list(case.run(rows))]
        for r in range(rows):
            for i, o in enumerate(outs):
                np.testing.assert_array_equal(o[r], alone[r][i][0], err_msg=f"row {r} of {rows}, output {i}")


def _as_list(o):
    return o if isinstance(o, list) else [o]


def quantized_case(act, b: int, group: int) -> Case:
    k, n = 384, 37  # K: three groups of 128 (a K tail for every BK); N: a column tail
    return Case(rand((33, k), act, 11), [quantized_weight(n, k, act, b, group, 12)], [None])


def epilogue_case(act, epilogue: str | None, residual: bool) -> Case:
    k = 67
    if epilogue == "swiglu":
        ws = [rand((37, k), act, 21, 0.2), rand((37, k), act, 22, 0.2)]
        bs = [None, None]
    elif epilogue is None and not residual:  # q/k/v with biases, as qwen2 has
        ws = [rand((37, k), act, 21, 0.2), rand((13, k), act, 22, 0.2), rand((13, k), act, 23, 0.2)]
        bs = [rand((37,), act, 24), rand((13,), act, 25), rand((13,), act, 26)]
    else:
        ws = [rand((37, k), act, 21, 0.2)]
        bs = [rand((37,), act, 24)]
    res = rand((33, 37), act, 27) if residual else None
    return Case(rand((33, k), act, 20), ws, bs, epilogue, res)


def mixed_cases() -> dict[str, Case]:
    act = mx.bfloat16
    x = rand((33, 256), act, 31)
    return {
        "qkv_int4_g64_bias": Case(
            x,
            [
                quantized_weight(40, 256, act, 4, 64, 32),
                quantized_weight(8, 256, act, 4, 64, 33),
                quantized_weight(8, 256, act, 4, 64, 34),
            ],
            [rand((40,), act, 35), rand((8,), act, 36), rand((8,), act, 37)],
        ),
        "swiglu_int8_g32": Case(
            x,
            [quantized_weight(24, 256, act, 8, 32, 38), quantized_weight(24, 256, act, 8, 32, 39)],
            [None, None],
            "swiglu",
        ),
        "down_int4_g128_residual": Case(
            x, [quantized_weight(24, 256, act, 4, 128, 40)], [None], None, rand((33, 24), act, 41)
        ),
        "dense_and_int4_fused": Case(
            x, [rand((16, 256), act, 42, 0.1), quantized_weight(16, 256, act, 4, 32, 43)], [None, None]
        ),
        # every mode in one fused call (q/k/v of different formats)
        "qkv_mxfp4_int4_nvfp4_bias": Case(
            x,
            [
                microscaled_weight(32, 256, act, "mxfp4", 44),
                quantized_weight(8, 256, act, 4, 64, 45),
                microscaled_weight(8, 256, act, "nvfp4", 46),
            ],
            [rand((32,), act, 47), None, rand((8,), act, 48)],
        ),
        "swiglu_mxfp8": Case(
            x,
            [microscaled_weight(24, 256, act, "mxfp8", 49), microscaled_weight(24, 256, act, "mxfp8", 50)],
            [None, None],
            "swiglu",
        ),
        "down_nvfp4_residual": Case(
            x, [microscaled_weight(24, 256, act, "nvfp4", 51)], [None], None, rand((33, 24), act, 52)
        ),
    }


def _both_paths(case: Case, env, emulate: bool) -> None:
    if emulate:
        env.set("MLX_METILE_EMULATE", "1")
    for rows in ROWS:
        check(case, rows)
    _assert_row_invariant(case)


# every affine width MLX offers but 1; 3, 5 and 6-bit values straddle 32-bit words
BITS = [2, 3, 4, 5, 6, 8]
# the emulated grid: 4 and 8 bits in full, the other widths over a group size each and every
# activation dtype at 3 bits (each case compiles a kernel per row bucket)
EMULATED = [(a, g, b) for a in ACT for g in (32, 64, 128) for b in (4, 8)]
EMULATED += [(mx.bfloat16, 32, 2), (mx.bfloat16, 64, 5), (mx.bfloat16, 128, 6)]
EMULATED += [(a, 64, 3) for a in ACT]


@requires_emulator
@pytest.mark.parametrize("act,group,nbits", EMULATED)
def test_quantized_emulated(act, group, nbits, env):
    _both_paths(quantized_case(act, nbits, group), env, emulate=True)


@pytest.mark.parametrize("act", ACT)
@pytest.mark.parametrize("group", [32, 64, 128])
@pytest.mark.parametrize("nbits", BITS)
def test_quantized_cpu(act, group, nbits, env):
    _both_paths(quantized_case(act, nbits, group), env, emulate=False)


MICROSCALING = ["mxfp4", "mxfp8", "nvfp4"]


def microscaled_case(act, mode: str) -> Case:
    k, n = 384, 37  # K: 12 groups of 32 (24 of 16), a K tail for every BK; N: a column tail
    return Case(rand((33, k), act, 13), [microscaled_weight(n, k, act, mode, 14)], [None])


# every mode, in bf16 (the CPU path takes every activation dtype; the MSL decodes alike for all)
MICRO_EMULATED = [(mx.bfloat16, m) for m in MICROSCALING]


@requires_emulator
@pytest.mark.parametrize("act,mode", MICRO_EMULATED)
def test_microscaled_emulated(act, mode, env):
    _both_paths(microscaled_case(act, mode), env, emulate=True)


@pytest.mark.parametrize("act", ACT)
@pytest.mark.parametrize("mode", MICROSCALING)
def test_microscaled_cpu(act, mode, env):
    _both_paths(microscaled_case(act, mode), env, emulate=False)


EPILOGUES = [(None, False), ("swiglu", False), ("gelu", False), ("gelu_approx", False), ("silu", False), (None, True)]


@requires_emulator
@pytest.mark.parametrize("act", ACT)
@pytest.mark.parametrize("epilogue,residual", EPILOGUES)
def test_epilogues_emulated(act, epilogue, residual, env):
    _both_paths(epilogue_case(act, epilogue, residual), env, emulate=True)


@pytest.mark.parametrize("act", ACT)
@pytest.mark.parametrize("epilogue,residual", EPILOGUES)
def test_epilogues_cpu(act, epilogue, residual, env):
    _both_paths(epilogue_case(act, epilogue, residual), env, emulate=False)


# (the microscaled SwiGLU and residual fusions run on the CPU path only: same MSL epilogues)
EMULATED_MIXED = [name for name in mixed_cases() if name not in ("swiglu_mxfp8", "down_nvfp4_residual")]


@requires_emulator
@pytest.mark.parametrize("name", EMULATED_MIXED)
def test_mixed_fusions_emulated(name, env):
    _both_paths(mixed_cases()[name], env, emulate=True)


@pytest.mark.parametrize("name", list(mixed_cases()))
def test_mixed_fusions_cpu(name, env):
    _both_paths(mixed_cases()[name], env, emulate=False)


@pytest.mark.parametrize("mode", MICROSCALING)
def test_microscaled_linear_matches_stock_mlx(mode):
    """Against mx.quantized_matmul of the mode, whose output has x's dtype like ours; MLX rounds
    more often than we do in half precision, so the bound is a few ulp of the output's scale."""
    x = rand((9, 256), mx.float16, 1)
    qw = microscaled_weight(40, 256, mx.float16, mode, 2)
    ours = mt.quantized_linear(x, qw.w, qw.scales, mode=mode)
    stock = mx.quantized_matmul(x, qw.w, qw.scales, None, transpose=True, mode=mode)
    assert ours.dtype == stock.dtype == mx.float16
    scale = float(mx.abs(stock).max())
    np.testing.assert_allclose(np.array(ours, np.float32), np.array(stock, np.float32), atol=8 * 2**-11 * scale)


@pytest.mark.parametrize("nbits,group", [(4, 64), (8, 128)])
def test_quantized_linear_matches_stock_mlx(nbits, group):
    """Against mx.quantized_matmul itself; MLX rounds more often than we do in
    half precision, so the bound is a few ulp of the output's scale."""
    x = rand((9, 256), mx.float16, 1)
    qw = quantized_weight(40, 256, mx.float16, nbits, group, 2)
    ours = mt.quantized_linear(x, qw.w, qw.scales, qw.biases, group_size=group, bits=nbits)
    stock = mx.quantized_matmul(x, qw.w, qw.scales, qw.biases, transpose=True, group_size=group, bits=nbits)
    scale = float(mx.abs(stock).max())
    np.testing.assert_allclose(np.array(ours, np.float32), np.array(stock, np.float32), atol=8 * 2**-11 * scale)
