"""Our projection kernels as AIR, run on the CPU by the AIR executor: bit for bit the emulated MSL
of the same schedule (the same AST printed twice: C++ compiled by clang against the emulator's
Metal header, LLVM IR by our AIR dialect), and within float64 tolerances of the reference.

Kernels cover the simd_splitk schedule at BM = 1, 4, 8 and 32 (rows 1..32; a BM-row kernel is
dispatched at fewer rows too), the tiled schedule (40 rows), dense and affine 4- and 8-bit weights
and mxfp4, bf16 / f16 / f32 activations, a bias, SwiGLU and the residual epilogue. (BM = 2 and 16
are the same lowering at other sizes; tests/air/test_air_forms.py runs the forms at BM = 1.)"""

from __future__ import annotations

import numpy as np
import pytest

from mlx_metile.air.candidate import air_candidate
from mlx_metile.formats import WeightFormat as W
from mlx_metile.spec import ProjectionSpec as P

from ..conftest import requires_emulator
from ..helpers import artifact
from .projections import check_reference, dispatch, emulated, problem

pytestmark = requires_emulator
K, N = 128, 40

CASES = {
    # three formats and a bias fused in one kernel (BM = 32, rows 17 masks 15 of them)
    "bf16_int4_int8_mxfp4_bias": (
        P("bf16", (W("bf16", 4, 64, True, "bf16"), W("bf16", 8, 32), W("u8", 4, 32, mode="mxfp4"))),
        (17, 32),
    ),
    "f16_swiglu_int4": (P("f16", (W("f16", 4, 32), W("f16", 4, 32)), "swiglu"), (1,)),
    "f16_dense": (P("f16", (W("f16"),)), (5, 8)),
    "f32_int8_residual": (P("f32", (W("f32", 8, 64),), None, True), (3, 4)),
    "bf16_int4_tiled": (P("bf16", (W("bf16", 4, 64),), k_multiple=64), (40,)),
}


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    spec, rows = CASES[request.param]
    msl = artifact(spec, max(rows), K=K, columns=N)
    return request.param, spec, rows, msl, air_candidate(spec, msl.schedule)


def test_air_is_bit_identical_to_emulated_msl(case):
    name, spec, rows, msl, cand = case
    assert msl.schedule.kind == ("tiled" if name.endswith("tiled") else "simd_splitk")
    for m in rows:
        pr = problem(spec, m, K, N, seed=m)
        want = emulated(msl, pr)
        got = dispatch(cand.function, cand, pr)
        check_reference(pr, got)
        for j, (a, b) in enumerate(zip(got, want)):
            assert a.dtype == b.dtype and np.array_equal(a, b), f"{name}, rows {m}: y{j} differs from the MSL"
