"""The NVRTC compiler path (ctypes over the libnvrtc that MLX's CUDA wheel
depends on): the generated CUDA of each schedule compiles to a cubin for sm_90
and to portable PTX without nvcc; a source error surfaces NVRTC's log."""

from __future__ import annotations

import pytest

from mlx_metile.artifact import Artifact
from mlx_metile.backends import cuda_compile
from mlx_metile.backends.nvrtc import find_nvrtc, include_dirs
from mlx_metile.formats import WeightFormat
from mlx_metile.spec import ProjectionSpec

from ..helpers import artifact

pytestmark = pytest.mark.skipif(
    find_nvrtc() is None or not include_dirs(), reason="NVRTC or the CUDA headers (nvidia-cuda-runtime) missing"
)


@pytest.fixture
def nvrtc(env, tmp_path):
    env.set("MLX_METILE_CUDA_COMPILER", "nvrtc")
    env.set("MLX_METILE_CACHE", str(tmp_path))  # compile, do not reuse nvcc's cubins
    env.set("MLX_METILE_CUDA_ARCH", "sm_90")
    yield


CASES = [
    (ProjectionSpec("bf16", (WeightFormat("bf16", 4, 64),), k_multiple=64), 4, "mma"),
    (ProjectionSpec("f16", (WeightFormat("f16", 8, 32),) * 2, "swiglu", k_multiple=64), 16, "mma"),
    (ProjectionSpec("f32", (WeightFormat("f32", has_bias=True, bias_dtype="f32"),), "gelu"), 2, "simd_splitk"),
    (ProjectionSpec("bf16", (WeightFormat("bf16", 4, 64, True, "bf16"),) * 3, k_multiple=256), 8, "mma"),
    (ProjectionSpec("f32", (WeightFormat("f32", 4, 64, True, "f32"),) * 3, k_multiple=64), 8, "simd_splitk"),
    (ProjectionSpec("bf16", (WeightFormat("bf16", 4, 128),), None, True, k_multiple=64), 64, "tiled"),
]


@pytest.mark.parametrize("spec,bucket,kind", CASES, ids=[f"{c[2]}-{c[0].name()}" for c in CASES])
def test_nvrtc_compiles_each_schedule(nvrtc, spec, bucket, kind):
    assert cuda_compile.compiler()[0] == "nvrtc"
    art = artifact(spec, bucket, "cuda")
    assert art.schedule.kind == kind
    assert cuda_compile.ptx(art, "sm_90")[:4] == b"\x7fELF"
    text = cuda_compile.ptx(art, "compute_75" if kind != "mma" else "compute_80").decode()
    assert f".visible .entry {art.entry}(" in text and not text.endswith("\0")


def test_nvrtc_reports_the_compile_log(nvrtc):
    good = artifact(CASES[0][0], 4, "cuda")
    bad = Artifact(
        "cuda",
        good.source.replace("const int pid0", "const int pid0 = undeclared_name;//"),
        "broken",
        good.schedule,
        good.params,
    )
    with pytest.raises(cuda_compile.CudaCompileError, match="undeclared_name") as info:
        cuda_compile.ptx(bad, "sm_90")
    assert "built for sm_90" in str(info.value) and "MLX_METILE_CUDA_ARCH=compute_NN" in str(info.value)
