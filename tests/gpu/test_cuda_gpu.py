"""On a machine with MLX's CUDA backend and an NVIDIA GPU: every op variant on mx.gpu against
float64, with row invariance (tests/gpu/matrix.py, one test per section), and gradients through
the CUDA path against the stock composition's. Elsewhere they are skipped, and say so: nothing
here runs without the GPU. `pytest tests/gpu` on the GPU machine (the quick matrix);
`pytest tests/gpu --gpu-matrix full` for the full one."""

from __future__ import annotations

import mlx.core as mx
import pytest

import mlx_metile as mt

from . import matrix

pytestmark = pytest.mark.skipif(
    not mx.cuda.is_available(), reason="needs MLX's CUDA backend and an NVIDIA GPU (not on this machine)"
)


@pytest.fixture
def on_gpu(env):
    """mx.gpu the default device, and our kernels for calls of up to MAX_ROWS_CHECKED rows."""
    env.set("MLX_METILE_CUDA_MAX_ROWS", str(matrix.MAX_ROWS_CHECKED))
    before = mx.default_device()
    mx.set_default_device(mx.gpu)
    yield
    mx.set_default_device(before)


@pytest.mark.parametrize("section", list(matrix.SECTIONS))
def test_matrix_matches_float64_and_keeps_rows_invariant(section, on_gpu, gpu_matrix):
    m = matrix.Matrix(seed=list(matrix.SECTIONS).index(section))
    quick = gpu_matrix == "quick"
    with mt.trace() as t:
        matrix.SECTIONS[section](m, quick)
    backends = {r.backend for r in t.records}
    assert backends == {"cuda"}, backends  # every call ran our kernels, none fell back to stock MLX
    assert m.cases == matrix.CASES[section][0 if quick else 1], m.cases  # the matrix checked what it says
    assert not m.failures, m.failures[:20]


def test_gradients_through_the_cuda_path_match_the_stock_composition(on_gpu, env):
    env.set("MLX_METILE_CUDA_GRADIENTS", "1")
    m = matrix.Matrix(seed=len(matrix.SECTIONS))
    with mt.trace() as t:
        names = matrix.gradients(m)
    assert {r.backend for r in t.records} == {"cuda"} and m.cases == len(names) == 5, (t.records, m.cases)
    assert not m.failures, m.failures
