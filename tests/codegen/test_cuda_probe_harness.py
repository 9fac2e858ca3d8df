"""The MLX-free A/B harness (bench/cuda_probe/generated_harness.py) writes one
CUDA file holding each variant's kernel under its own settings - a harness that
silently compiled every variant alike would report no difference."""

import subprocess
import sys
from pathlib import Path

from mlx_metile.runtime.cuda import find_nvcc

ROOT = Path(__file__).resolve().parents[2]


def test_harness_holds_each_variant_under_its_settings(tmp_path):
    out = tmp_path / "ab.cu"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench/cuda_probe/generated_harness.py"),
            str(out),
            "--rows",
            "1,2,16",
            "--variant",
            "direct=MLX_METILE_CUDA_MMA_STAGED=0",
            "--variant",
            "staged=MLX_METILE_CUDA_MMA_GROUPS=2",
        ],
        check=True,
        cwd=ROOT,
    )
    src = out.read_text()
    namespaces = [ln for ln in src.splitlines() if ln.startswith("namespace v")]
    assert [ln.split()[1] for ln in namespaces] == ["v0_1", "v0_2", "v0_16", "v1_1", "v1_2", "v1_16"]
    direct, staged = src.split("namespace v1_1", 1)
    assert "metile_cp16(dst" not in direct and "metile_cp16(dst" in staged
    assert "const int ch0 = (c_begin + (st) * 2);" in staged
    # the kernels the op would pick: 1 row runs the tensor-core kernel of 8-row tiles
    assert "if (rows > 0 && rows <= 1)" in src and "if (rows > 2 && rows <= 16)" in src
    assert "(rows + 8 - 1) / 8" in src and "(rows + 16 - 1) / 16" in src
    assert src.count('"@FIRST@"') == 0 and "true ? ref.data()" in src and "false ? ref.data()" in src
    nvcc = find_nvcc()
    if nvcc is not None:  # the whole file builds (kernels of one variant share helper names)
        built = subprocess.run(
            [nvcc, "-arch=sm_90", "-diag-suppress", "177", "-o", str(tmp_path / "ab"), str(out)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert built.returncode == 0, built.stderr[-2000:]
