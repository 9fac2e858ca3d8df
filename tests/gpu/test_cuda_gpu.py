"""On a machine with MLX's CUDA backend and an NVIDIA GPU (the lent H200): the ops on mx.gpu
against float64 and stock MLX, with row invariance - bench/h200.py's correctness matrix and
gradient check, as tests. Elsewhere (CI) they are skipped, and say so: nothing here runs without
the GPU. `pytest tests/gpu` on the GPU machine; `MLX_METILE_GPU_MATRIX=full` for the full matrix
(about 1070 cases) instead of the quick one (about 460)."""

from __future__ import annotations

import os

import mlx.core as mx
import pytest

pytestmark = pytest.mark.skipif(
    not mx.cuda.is_available(), reason="needs MLX's CUDA backend and an NVIDIA GPU (not on this machine)"
)


def test_every_variant_matches_float64_and_stock_mlx_and_keeps_rows_invariant():
    import mlx_metile as mt
    from bench.h200 import correctness

    full = os.environ.get("MLX_METILE_GPU_MATRIX", "quick") == "full"
    with mt.trace() as t:
        report = correctness(quick=not full)
    backends = {r.backend for r in t.records}
    assert backends == {"cuda"}, backends  # every call ran our kernels, none fell back to stock MLX
    assert report["cases"] >= (800 if full else 300), report["cases"]
    assert not report["failures"], report["failures"][:20]


def test_gradients_through_the_cuda_path_match_the_stock_composition():
    from bench.h200 import gradients_check

    report = gradients_check()
    assert report["backends"] == ["cuda"] and report["cases"] == 5, report
    assert not report["failures"], report["failures"]
