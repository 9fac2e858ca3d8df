"""The generated CUDA for every variant compiles (nvcc, or NVRTC where nvcc is
missing -> cubin for sm_90 and portable PTX) on a machine without a GPU.
Running it needs the GPU machine: bench/h200.py checks it there against a
float64 reference and stock MLX. (All variants also compiled with
MLX_METILE_CUDA_COMPILER=nvrtc on 2026-11-29.)"""

from __future__ import annotations

import itertools

import pytest

from mlx_metile.compiler.schedule import ROW_BUCKETS, TILED_BUCKET
from mlx_metile.runtime import compile_projection
from mlx_metile.runtime.cuda import find_nvcc, ptx
from mlx_metile.runtime.nvrtc import find_nvrtc, include_dirs
from mlx_metile.spec import ProjectionSpec, WeightFormat

# nvcc where installed, else NVRTC (runtime.cuda.compiler())
pytestmark = pytest.mark.skipif(
    find_nvcc() is None and (find_nvrtc() is None or not include_dirs()), reason="neither nvcc nor NVRTC is installed"
)

ACT = ["f32", "f16", "bf16"]


def _specs():
    for act, (bits, group) in itertools.product(ACT, [(0, 0), (4, 32), (4, 64), (4, 128), (8, 32), (8, 64), (8, 128)]):
        yield ProjectionSpec(act, (WeightFormat(act, bits, group, True, act),), k_multiple=64)
    for act, epi in itertools.product(ACT, ["swiglu", "gelu", "gelu_approx", "silu"]):
        n = 2 if epi == "swiglu" else 1
        yield ProjectionSpec(act, tuple(WeightFormat(act) for _ in range(n)), epi)
    yield ProjectionSpec("bf16", tuple(WeightFormat("bf16", 4, 64, True, "bf16") for _ in range(3)), k_multiple=64)
    yield ProjectionSpec("bf16", (WeightFormat("bf16", 4, 64),), None, True, k_multiple=64)


SPECS = list(_specs())


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name())
def test_every_row_bucket_compiles_for_sm90(spec):
    for bucket in (*ROW_BUCKETS, TILED_BUCKET):
        art = compile_projection(spec, bucket, "cuda")
        code = ptx(art, "sm_90")
        assert code[:4] == b"\x7fELF", "an sm_90 build is a cubin"


@pytest.mark.parametrize("spec", SPECS[:3], ids=lambda s: s.name())
def test_portable_ptx(spec):
    art = compile_projection(spec, 4, "cuda")
    text = ptx(art, "compute_75").decode()
    assert f".visible .entry {art.entry}(" in text and ".target sm_75" in text


def test_opt_in_tensor_core_variants_compile(monkeypatch):
    """Fused q/k/v and dense weights on the tensor-core schedule (opt-in until
    they have run on a GPU) still compile for sm_90."""
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_FUSED", "1")
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_DENSE", "1")
    monkeypatch.setenv("MLX_METILE_CUDA_ARCH", "sm_90")
    compile_projection.cache_clear()
    pipelined = ProjectionSpec("bf16", (WeightFormat("bf16", 4, 64), WeightFormat("bf16", 4, 64)), "swiglu")
    specs = [
        ProjectionSpec("bf16", tuple(WeightFormat("bf16", 4, 64, True, "bf16") for _ in range(3)), k_multiple=64),
        ProjectionSpec("f16", tuple(WeightFormat("f16", 8, 32) for _ in range(2)), "gelu", k_multiple=64),
        ProjectionSpec("bf16", tuple(WeightFormat("bf16") for _ in range(3)), k_multiple=64),
        ProjectionSpec("f16", (WeightFormat("f16", has_bias=True, bias_dtype="f16"),), None, True, k_multiple=32),
    ]
    try:
        for spec in specs:
            for bucket in (1, 8, 32):
                art = compile_projection(spec, bucket, "cuda")
                assert art.schedule.kind == "mma", spec.name()
                assert ptx(art, "sm_90")[:4] == b"\x7fELF"
        # the register double-buffered mainloop, for every weight kind
        monkeypatch.setenv("MLX_METILE_CUDA_MMA_PIPELINE", "1")
        for spec in [pipelined, *specs]:
            compile_projection.cache_clear()
            art = compile_projection(spec, 4, "cuda")
            assert "_n = ch + 1 < c_end" in art.source
            assert ptx(art, "sm_90")[:4] == b"\x7fELF"
    finally:
        compile_projection.cache_clear()
