"""The A/B harness's diagnostic rewrites (tools/cuda_probe/diagnostics.py) remove what they
name from a generated staged kernel - and refuse a kernel without it, so that a diagnostic
never silently times the unchanged kernel."""

import pytest

from mlx_metile.formats import WeightFormat
from mlx_metile.spec import ProjectionSpec
from tests.helpers import artifact
from tools.cuda_probe import diagnostics

Q4 = ProjectionSpec("bf16", (WeightFormat("bf16", 4, 64),), k_multiple=256)
DENSE = ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=256)


@pytest.fixture
def sources(env):
    """The 8-row staged kernels of a 4-bit and a dense 4096 -> 14336 product for sm_90 (the TILES
    layout: two column tiles per block)."""
    env.set("MLX_METILE_CUDA_ARCH", "sm_90")
    return artifact(Q4, 8, "cuda", columns=14336).source, artifact(DENSE, 8, "cuda", columns=14336).source


def test_each_diagnostic_removes_what_it_names(sources):
    q4, _ = sources
    assert diagnostics.X_LOAD.search(q4) and "metile_cp_small<" in q4
    assert not diagnostics.X_LOAD.search(diagnostics.apply("nox", q4))
    assert "continue; }" in diagnostics.apply("nomath", q4) and "continue; }" not in q4
    no_scales = diagnostics.apply("noscales", q4)
    assert "metile_cp_small<" not in no_scales and no_scales.count("metile_cp16(") == q4.count("metile_cp16(")
    both = diagnostics.apply("nomath,noscales", q4)
    assert "continue; }" in both and "metile_cp_small<" not in both
    # the sums of x per group: MMAs whose A operand is all ones, and only those
    ones = q4.count("metile_mma_bf16(cx")
    no_sums = diagnostics.apply("noxsum", q4)
    assert ones > 0 and no_sums.count("metile_mma_bf16(cx") == 0
    assert no_sums.count("metile_mma_bf16(") == q4.count("metile_mma_bf16(") - ones
    # half of K per block: block 2c + h takes K ranges h * warps .. of column block c
    half = diagnostics.apply("khalf", q4)
    assert "const int pid0 = (int)blockIdx.x >> 1, khalf = blockIdx.x & 1;" in half
    assert "const int c_begin = (khalf * (int)(blockDim.x >> 5) + warp) * per_warp;" in half


def test_a_diagnostic_refuses_a_kernel_without_its_part(sources):
    _, dense = sources
    with pytest.raises(ValueError, match="noscales"):
        diagnostics.apply("noscales", dense)  # dense weights have no scales
    with pytest.raises(ValueError, match="noxsum"):
        diagnostics.apply("noxsum", dense)  # nor sums of x for biases
    with pytest.raises(ValueError, match="unknown diagnostic"):
        diagnostics.apply("nothing", dense)


def test_bulk_rewrite_brings_each_stage_by_bulk_copies(sources):
    q4, _ = sources
    bulk = diagnostics.apply("bulkw", q4)
    # every 16-byte weight copy of a stage becomes one bulk copy of the lane's ring row; the
    # scales' and biases' small copies stay, and the stage loop waits on the slot's mbarrier
    assert q4.count("metile_cp16(dst") > 0 and bulk.count("metile_cp16(dst") == 0
    assert bulk.count("metile_cp_small<") == q4.count("metile_cp_small<")
    issues = q4.count("unsigned char* const dst = ring + (")
    assert bulk.count("if (bok) bulk(dst + lane * ") == issues
    assert bulk.count("fence.proxy.async.shared::cta") == issues
    assert bulk.count("mbar_wait(&metile_bars[warp][rd]") == 1
    unfenced = diagnostics.apply("bulkwnf", q4)
    assert "fence.proxy.async" not in unfenced and unfenced.count("if (bok) bulk(") == issues


def test_bulk_rewrite_refuses_a_swizzled_ring(env):
    # 8-bit group 64 swizzles its unpadded ring rows by default; a bulk copy cannot
    env.set("MLX_METILE_CUDA_ARCH", "sm_90")
    q8 = ProjectionSpec("bf16", (WeightFormat("bf16", 8, 64),), k_multiple=256)
    with pytest.raises(ValueError, match="padded ring rows"):
        diagnostics.apply("bulkw", artifact(q8, 8, "cuda", columns=14336).source)
