"""The NAX schedules (nax_direct, nax_staged) through the normal compile path - choose under
MLX_METILE_METAL_SCHEDULE, the lowering, the MSL, the emulator's MPP subset - against the float64
reference, for a representative subset of formats and fusions; row invariance bit for bit within
each schedule; direct against staged and against the simdgroup schedule; and the emulator's byte
counts of the weights, scales and biases per call at 1-32 rows.

Tolerance (tests/kernels/cases.py): f32 accumulation over K, one rounding of the output, and
(operand_rounding) one rounding of each dequantized weight to x's dtype, matmul2d's operand type:
2**-p of sum |x||w| with p x's significand bits - exact, so absent, for dense weights of x's dtype.
"""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
import pytest

import mlx_metile as mt
from mlx_metile import call as calls
from mlx_metile import dispatch
from mlx_metile.emu import Kernel
from mlx_metile.formats import inputs
from mlx_metile.pipeline import compile_projection
from mlx_metile.schedule import Shape, choose
from mlx_metile.targets import EMULATOR

from ..conftest import requires_emulator
from ..helpers import bits, rand
from ..kernels.cases import Case, check, microscaled_weight, quantized_weight

pytestmark = requires_emulator
POLICIES = ["nax_direct", "nax_staged"]
BF, F16 = mx.bfloat16, mx.float16


def cases() -> dict[str, Case]:
    """K tails of the 4 column groups' K step where the format allows (K = 192 of BK 256 for
    group 64, 160 of 128 for group 32, an odd K for dense weights); odd N."""
    xb = rand((70, 192), BF, 1)
    return {
        "dense_bf16_oddK_bias": Case(rand((70, 67), BF, 2), [rand((37, 67), BF, 3, 0.2)], [rand((37,), BF, 4)]),
        "dense_f16_gelu": Case(rand((70, 64), F16, 5), [rand((40, 64), F16, 6, 0.2)], [None], "gelu"),
        "int4_g64": Case(xb, [quantized_weight(37, 192, BF, 4, 64, 7)], [None]),
        "int8_g32_f16_bias": Case(
            rand((70, 160), F16, 8), [quantized_weight(40, 160, F16, 8, 32, 9)], [rand((40,), F16, 10)]
        ),
        "int3_g64": Case(xb, [quantized_weight(24, 192, BF, 3, 64, 11)], [None]),  # values straddle words
        "mxfp4": Case(rand((70, 256), BF, 12), [microscaled_weight(24, 256, BF, "mxfp4", 13)], [None]),
        "qkv_int8_g64_bias": Case(
            xb,
            [
                quantized_weight(40, 192, BF, 8, 64, 14),
                quantized_weight(8, 192, BF, 8, 64, 15),
                quantized_weight(8, 192, BF, 8, 64, 16),
            ],
            [rand((40,), BF, 17), rand((8,), BF, 18), None],
        ),  # fmt: skip
        "swiglu_int4_g64": Case(
            xb,
            [quantized_weight(24, 192, BF, 4, 64, 19), quantized_weight(24, 192, BF, 4, 64, 20)],
            [None, None],
            "swiglu",
        ),  # fmt: skip
        "down_dense_bf16_residual": Case(
            rand((70, 64), BF, 21), [rand((24, 64), BF, 22, 0.2)], [None], None, rand((70, 24), BF, 23)
        ),
    }


def more_cases() -> dict[str, Case]:
    """The other formats and fusions, on fewer rows (test_more_formats_against_float64): affine 2,
    5 and 6 bits (5 and 6 straddle words; 6 at group 128, K = 256 a tail of its K step of 512),
    nvfp4 (group 16 under VK 32; K = 160, a tail of 128), SiLU, and q/k/v of three formats in one
    call - mxfp8 (group 32 under the 8-bit group 64's VK 64), affine 8-bit, dense bf16; then the
    affine groups 32 and 128 and the fusions over the newer formats."""
    xb = rand((32, 192), BF, 31)
    return {
        "int2_g64": Case(xb, [quantized_weight(37, 192, BF, 2, 64, 32)], [None]),
        "int5_g64_f16_bias": Case(
            rand((32, 192), F16, 33), [quantized_weight(40, 192, F16, 5, 64, 34)], [rand((40,), F16, 35)]
        ),
        "int6_g128": Case(rand((32, 256), BF, 36), [quantized_weight(24, 256, BF, 6, 128, 37)], [None]),
        "nvfp4_f16": Case(rand((32, 160), F16, 40), [microscaled_weight(24, 160, F16, "nvfp4", 41)], [None]),
        "dense_f16_silu": Case(rand((32, 48), F16, 42), [rand((24, 48), F16, 43, 0.2)], [None], "silu"),
        "qkv_mxfp8_int8_dense_bias": Case(
            xb,
            [
                microscaled_weight(32, 192, BF, "mxfp8", 44),
                quantized_weight(8, 192, BF, 8, 64, 45),
                rand((8, 192), BF, 46, 0.2),
            ],
            [rand((32,), BF, 47), None, rand((8,), BF, 48)],
        ),  # fmt: skip
        **group_cases(),
        **fused_cases(),
    }


def group_cases() -> dict[str, Case]:
    """Affine group 32 below 8 bits (K = 160, a tail of the K step of 128 - of 256 at 2 bits, VK
    64 over two groups; 224 for f16) and group 128 (K = 384, a tail of 512)."""
    return {
        "int2_g32_oddN": Case(rand((32, 160), BF, 50), [quantized_weight(37, 160, BF, 2, 32, 51)], [None]),
        "int3_g32_f16_bias": Case(
            rand((32, 224), F16, 52), [quantized_weight(40, 224, F16, 3, 32, 53)], [rand((40,), F16, 54)]
        ),
        "int4_g32": Case(rand((32, 160), BF, 55), [quantized_weight(24, 160, BF, 4, 32, 56)], [None]),
        "int5_g32": Case(rand((32, 160), BF, 57), [quantized_weight(24, 160, BF, 5, 32, 58)], [None]),
        "int6_g32_f16": Case(rand((32, 224), F16, 59), [quantized_weight(24, 224, F16, 6, 32, 60)], [None]),
        "int4_g128": Case(rand((32, 384), BF, 61), [quantized_weight(24, 384, BF, 4, 128, 62)], [None]),
        "int3_g128": Case(rand((32, 384), BF, 63), [quantized_weight(24, 384, BF, 3, 128, 64)], [None]),
    }


def fused_cases() -> dict[str, Case]:
    """SwiGLU and residuals over the newer formats; swiglu_nvfp4 has 70 rows for the GEMM-shaped
    tile (test_microscaled_gemm_tile)."""
    x70 = rand((70, 160), BF, 70)
    return {
        "swiglu_nvfp4": Case(
            x70,
            [microscaled_weight(24, 160, BF, "nvfp4", 71), microscaled_weight(24, 160, BF, "nvfp4", 72)],
            [None, None],
            "swiglu",
        ),  # fmt: skip
        "residual_mxfp8_bias": Case(
            rand((32, 160), BF, 73),
            [microscaled_weight(24, 160, BF, "mxfp8", 74)],
            [rand((24,), BF, 75)],
            None,
            rand((32, 24), BF, 76),
        ),  # fmt: skip
        "swiglu_int6_g64": Case(
            rand((32, 192), BF, 77),
            [quantized_weight(24, 192, BF, 6, 64, 78), quantized_weight(24, 192, BF, 6, 64, 79)],
            [None, None],
            "swiglu",
        ),  # fmt: skip
        "residual_int5_g64": Case(
            rand((32, 192), BF, 80), [quantized_weight(24, 192, BF, 5, 64, 81)], [None], None, rand((32, 24), BF, 82)
        ),
    }


CASES = cases()
MORE = more_cases()
for _c in [*CASES.values(), *MORE.values()]:
    _c.operand_rounding = True
GEMM = {"int4_g64", "swiglu_int4_g64"}  # also run above 32 rows (BM 64: one and two row blocks)


def _nax(env, policy: str) -> None:
    env.set("MLX_METILE_EMULATE", "1")
    env.set("MLX_METILE_METAL_SCHEDULE", policy)


def _outs(case: Case, start: int, stop: int) -> list[mx.array]:
    o = case.run_rows(start, stop)
    return o if isinstance(o, list) else [o]


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("policy", POLICIES)
def test_against_float64_and_rows_invariant(name, policy, env):
    case = CASES[name]
    _nax(env, policy)
    rows = [1, 7, 16, 32] + ([33, 70] if name in GEMM else [])
    with mt.trace() as t:
        for r in rows:
            check(case, r)
    kernels = {rec.kernel for rec in t}
    assert all(rec.backend == "emulator" and f"_{policy}_m" in rec.kernel for rec in t), kernels
    # row invariance: row r alone equals row r among 2..32 rows (and 33 where BM 64 runs)
    alone = [[bits(o)[0] for o in _outs(case, r, r + 1)] for r in range(32)]
    for n in (2, 17, 32) + ((33,) if name in GEMM else ()):
        together = [bits(o) for o in _outs(case, 0, n)]
        for r in range(min(n, 32)):
            for i, o in enumerate(together):
                np.testing.assert_array_equal(o[r], alone[r][i], err_msg=f"{policy}: row {r} of {n}, output {i}")


@pytest.mark.parametrize("name", list(MORE))
@pytest.mark.parametrize("policy", POLICIES)
def test_more_formats_against_float64(name, policy, env):
    """Rows 1 (BM 16) and 17 (BM 32) only: the row tiles' code is the same for every format."""
    case = MORE[name]
    _nax(env, policy)
    with mt.trace() as t:
        for r in (1, 17):
            check(case, r)
    kernels = [rec.kernel for rec in t]
    assert len(kernels) == 2 and all(rec.backend == "emulator" and f"_{policy}_m" in rec.kernel for rec in t), kernels


@pytest.mark.parametrize("policy", POLICIES)
def test_more_formats_rows_invariant(policy, env):
    """5-bit affine (words straddled) with a bias: rows 0, 8, 16 alone (BM 16) equal bit for bit
    to the same rows among 17 (BM 32)."""
    case = MORE["int5_g64_f16_bias"]
    _nax(env, policy)
    together = bits(_outs(case, 0, 17)[0])
    for r in (0, 8, 16):
        np.testing.assert_array_equal(together[r], bits(_outs(case, r, r + 1)[0])[0], err_msg=f"{policy}: row {r}")


@pytest.mark.parametrize("policy", POLICIES)
def test_microscaled_gemm_tile(policy, env):
    """nvfp4 with SwiGLU above 32 rows (BM 64: one and two row blocks) against float64; rows 0,
    32, 40 and 69 alone equal bit for bit to the same rows among 70."""
    case = MORE["swiglu_nvfp4"]
    _nax(env, policy)
    with mt.trace() as t:
        for r in (33, 70):
            check(case, r)
    kernels = [rec.kernel for rec in t]
    assert len(kernels) == 2 and all(rec.backend == "emulator" and f"_{policy}_m" in rec.kernel for rec in t), kernels
    together = bits(_outs(case, 0, 70)[0])
    for r in (0, 32, 40, 69):
        np.testing.assert_array_equal(together[r], bits(_outs(case, r, r + 1)[0])[0], err_msg=f"{policy}: row {r}")


@pytest.mark.parametrize(
    "name", ["int4_g64", "dense_bf16_oddK_bias", "swiglu_int4_g64", "nvfp4_f16", "int2_g32_oddN", "int3_g128"]
)
def test_direct_and_staged_give_the_same_bits(name, env):
    """The two policies feed matmul2d the same operands in the same order (nvfp4: with U 32 in
    direct, 16 in staged)."""
    case = {**CASES, **MORE}[name]
    got = {}
    for policy in POLICIES:
        _nax(env, policy)
        got[policy] = [bits(o) for o in _outs(case, 0, 32)]
    for a, b in zip(*got.values()):
        np.testing.assert_array_equal(a, b)


def test_nax_and_simdgroup_bits_differ(env):
    """Row invariance does not cross schedules: matmul2d sums k in another order than the
    simdgroup schedule's lane butterfly, and rounds each dequantized weight to bf16 first."""
    case = CASES["int4_g64"]
    env.set("MLX_METILE_EMULATE", "1")
    simd = bits(_outs(case, 0, 16)[0])
    _nax(env, "nax_direct")
    nax = bits(_outs(case, 0, 16)[0])
    assert simd.shape == nax.shape and (simd != nax).any()


# -- bytes: the weights, scales and biases at most 1.05x their size per call (rows 1-32) ---------
BYTE_CASES = ["int4_g64", "int8_g32_f16_bias", "mxfp4", "dense_bf16_oddK_bias", "qkv_int8_g64_bias"]


def _buffers(case: Case, rows: int) -> tuple[dict[str, np.ndarray], list[str]]:
    bufs = {"x": bits(case.x[:rows])}
    weight_names = []
    for i, (w, b) in enumerate(zip(case.weights, case.biases)):
        names = [f"w{i}", f"scales{i}", f"biases{i}"][: len(inputs(w))]
        for n, a in zip(names, inputs(w)):
            bufs[n] = bits(a)
            weight_names.append(n)
        if b is not None:
            bufs[f"bias{i}"] = bits(b)
    return bufs, weight_names


@pytest.mark.parametrize("name", BYTE_CASES)
@pytest.mark.parametrize("policy", POLICIES)
def test_weights_read_once_per_call(name, policy, env):
    _check_bytes(CASES[name], policy, (1, 2, 4, 8, 16, 17, 32), env)


# a microscaled mode with group 16, 5 and 6 bits (straddling words), three formats in one call,
# group 32 below 8 bits (2 bits: two groups per lane's VK; 3 bits: straddling words), group 128
MORE_BYTE_CASES = [
    "nvfp4_f16",
    "int5_g64_f16_bias",
    "int6_g128",
    "qkv_mxfp8_int8_dense_bias",
    "int2_g32_oddN",
    "int3_g32_f16_bias",
    "int4_g128",
]


@pytest.mark.parametrize("name", MORE_BYTE_CASES)
@pytest.mark.parametrize("policy", POLICIES)
def test_more_formats_weights_read_once_per_call(name, policy, env):
    _check_bytes(MORE[name], policy, (1, 17, 32), env)


def _check_bytes(case: Case, policy: str, row_counts: tuple[int, ...], env) -> None:
    env.set("MLX_METILE_METAL_SCHEDULE", policy)
    c = calls.check("fused_linear", case.x, case.weights, case.biases, case.epilogue, case.residual)
    spec = dispatch.spec_of(c, EMULATOR, None)
    assert spec.k_multiple == math.gcd(c.K, 64)
    ns = list(c.Ns)
    for rows in row_counts:
        artifact = compile_projection(spec, choose(spec, rows, EMULATOR, Shape(c.K, c.columns)), "msl")
        assert artifact.schedule.kind == policy
        bufs, weight_names = _buffers(case, rows)
        out_ns = ns if spec.outputs > 1 else [ns[0]]
        for j, n in enumerate(out_ns):
            bufs[f"y{j}"] = np.zeros((rows, n), np.uint16)
        scalars = {"M": rows, "K": c.K, **{f"N{i}": n for i, n in enumerate(ns)}}
        order = [p.name for p in artifact.params]
        args = [bufs[p.name] if p.kind == "buffer" else scalars[p.name] for p in artifact.params]
        stats = Kernel(artifact.source, artifact.entry).dispatch_threadgroups(
            artifact.grid(rows, c.columns), artifact.threads_per_group, args
        )
        for wname in weight_names:
            got, size = stats.bytes_read[order.index(wname)], bufs[wname].nbytes
            assert size <= got <= 1.05 * size, f"{policy} rows={rows}: {wname} read {got} of {size} bytes"
        for j in range(len(out_ns)):
            assert stats.bytes_written[order.index(f"y{j}")] == bufs[f"y{j}"].nbytes
