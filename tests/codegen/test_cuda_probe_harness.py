"""The MLX-free A/B harness (tools/cuda_probe/generated_harness.py) writes one
CUDA file holding each variant's kernel under its own settings - a harness that
silently compiled every variant alike would report no difference."""

import subprocess
import sys
from pathlib import Path

from mlx_metile.backends.cuda_compile import find_nvcc

ROOT = Path(__file__).resolve().parents[2]


def test_harness_holds_each_variant_under_its_settings(tmp_path):
    out = tmp_path / "ab.cu"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools/cuda_probe/generated_harness.py"),
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


def test_harness_times_q_k_v_with_each_output_after_the_last(tmp_path):
    """--epilogue qkv: three weights of --n's widths concatenated into one kernel, whose outputs
    lie one after another in y (so the first variant's reference covers all three), the grid over
    their summed columns, the weight bytes of all three counted."""
    out = tmp_path / "qkv.cu"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools/cuda_probe/generated_harness.py"),
            str(out),
            "--format",
            "q4g64",
            "--epilogue",
            "qkv",
            "--k",
            "1024",
            "--n",
            "256,64,64",
            "--rows",
            "1,16",
            "--variant",
            "default=",
            "--variant",
            "s2=MLX_METILE_CUDA_MMA_STAGES=2",
        ],
        check=True,
        cwd=ROOT,
    )
    src = out.read_text()
    assert "const int N[] = {256, 64, 64};" in src
    launch = next(ln for ln in src.splitlines() if "v0_1::" in ln and "<<<" in ln)
    assert "y + (size_t)rows * 0," in launch and "y + (size_t)rows * 256," in launch
    assert "y + (size_t)rows * 320," in launch and "N[0], N[1], N[2]" in launch
    assert "dim3(24, (rows + 8 - 1) / 8, 1)" in launch  # 384 columns in blocks of 16
    assert "(size_t)rows * 384 * 2" in src  # the outputs compared: all three
    weights = 384 * 1024 // 2 + 2 * 384 * (1024 // 64) * 2  # packed weights, scales and biases
    assert f"const double bytes = {float(weights)};" in src
    default, s2 = src.split("namespace v1_1", 1)
    assert "metile_cp_wait<2>" in default and "metile_cp_wait<2>" not in s2  # 4 stages, then 2


def test_a_variant_holds_only_its_own_cuda_settings_and_restores_the_others(env):
    from mlx_metile import settings
    from tools.cuda_probe.variants import cuda_settings

    env.set("MLX_METILE_CUDA_MMA_GROUPS", "2")
    env.set("MLX_METILE_CUDA_ARCH", "sm_90")  # (the build target is kept)
    with cuda_settings("MLX_METILE_CUDA_MMA_STAGES=3;CUDA_MMA_STAGED=0") as cfg:
        assert cfg.knob("stages") == 3 and cfg.knob("groups") is None and not cfg.cuda_mma_staged
        assert cfg.cuda_arch == "sm_90"
    after = settings.current()
    assert after.knob("groups") == 2 and after.knob("stages") is None and after.cuda_mma_staged


def test_a_misspelt_variant_setting_is_refused(tmp_path):
    """A name no setting declares would otherwise time the default kernel under another name."""
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools/cuda_probe/generated_harness.py"),
            str(tmp_path / "ab.cu"),
            "--variant",
            "default=",
            "--variant",
            "s2=MLX_METILE_CUDA_MMA_STAGS=2",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode != 0 and "MLX_METILE_CUDA_MMA_STAGS" in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "ab.cu").exists()
