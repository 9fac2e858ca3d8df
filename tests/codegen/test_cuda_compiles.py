"""The generated CUDA for every variant compiles (nvcc, or NVRTC where nvcc is
missing -> cubin for sm_90 and portable PTX) on a machine without a GPU.
Running it needs the GPU machine: bench/h200.py checks it there against a
float64 reference and stock MLX. (All variants also compiled with
MLX_METILE_CUDA_COMPILER=nvrtc on 2026-11-29.)"""

from __future__ import annotations

import itertools
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from mlx_metile.compiler.lower_mma_staged import gate_up_16
from mlx_metile.compiler.schedule import ROW_BUCKETS, TILED_BUCKET
from mlx_metile.runtime import compile_projection
from mlx_metile.runtime.cuda import MAGIC, binary_kind, compiler, find_nvcc, ptx
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
    # an even number of groups per row: the mma schedule's cp.async mainloop (4-byte scale pairs)
    for act, (bits, group) in itertools.product(["f16", "bf16"], [(4, 64), (8, 128)]):
        yield ProjectionSpec(act, (WeightFormat(act, bits, group),), k_multiple=256)


SPECS = list(_specs())


def sm90_code(data: bytes) -> bool:
    """Machine code of the kind this machine's compiler gives for sm_90 (nvcc: a
    compressed fatbin; NVRTC: a cubin)."""
    return data[:4] == MAGIC[binary_kind("sm_90", compiler()[0])]


def ptxas_usage(art) -> dict[str, int] | None:
    """Registers and spill-store bytes ptxas reports for `art` on sm_90 (None without nvcc)."""
    nvcc = find_nvcc()
    if nvcc is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.cu"
        src.write_text(art.source)
        cmd = [nvcc, "-cubin", "-arch=sm_90", "-Xptxas", "-v", "-o", str(Path(tmp) / "k.cubin"), str(src)]
        log = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    return {
        "registers": int(re.search(r"Used (\d+) registers", log).group(1)),
        "spill": int(re.search(r"(\d+) bytes spill stores", log).group(1)),
    }


@pytest.fixture
def fresh_kernels():
    """Kernels compiled under this test's settings, none cached from another's."""
    compile_projection.cache_clear()
    yield
    compile_projection.cache_clear()


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name())
def test_every_row_bucket_compiles_for_sm90(spec):
    for bucket in (*ROW_BUCKETS, TILED_BUCKET):
        art = compile_projection(spec, bucket, "cuda")
        code = ptx(art, "sm_90")
        assert sm90_code(code), "an sm_90 build is machine code"


@pytest.mark.parametrize("spec", SPECS[:3], ids=lambda s: s.name())
def test_portable_ptx(spec):
    art = compile_projection(spec, 4, "cuda")
    text = ptx(art, "compute_75").decode()
    assert f".visible .entry {art.entry}(" in text and ".target sm_75" in text


def test_fused_and_dense_tensor_core_variants_compile(fresh_kernels, monkeypatch):
    """Concatenated q/k/v (the default) and dense weights (opt-in) on the
    tensor-core schedule compile for sm_90."""
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_FUSED", "1")
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_DENSE", "1")
    monkeypatch.setenv("MLX_METILE_CUDA_ARCH", "sm_90")
    specs = [
        ProjectionSpec("bf16", tuple(WeightFormat("bf16", 4, 64, True, "bf16") for _ in range(3)), k_multiple=64),
        ProjectionSpec("f16", tuple(WeightFormat("f16", 8, 32) for _ in range(2)), "gelu", k_multiple=64),
        ProjectionSpec("bf16", tuple(WeightFormat("bf16") for _ in range(3)), k_multiple=64),
        ProjectionSpec("f16", (WeightFormat("f16", has_bias=True, bias_dtype="f16"),), None, True, k_multiple=32),
    ]
    for spec in specs:
        for bucket in (1, 8, 32):
            art = compile_projection(spec, bucket, "cuda")
            assert art.schedule.kind == "mma", spec.name()
            assert sm90_code(ptx(art, "sm_90"))


MAINLOOPS = [
    {"BATCH": "1"},
    {"BATCH": "2", "TILES": "2", "WARPS": "8"},
    {"BATCH": "4"},
    {"BATCH": "4", "TILES": "4", "WARPS": "16"},
]


@pytest.mark.parametrize("knobs", MAINLOOPS, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_mma_mainloop_variants_compile(fresh_kernels, monkeypatch, knobs):
    """Every tuning setting of the tensor-core mainloop (batches, tiles, warps)
    compiles for each weight kind. The K split is aligned to 4 chunks exactly
    when K holds whole multiples of 4 groups (whatever the batch, so that all
    row buckets split K alike), and then a batch of 2 or 4 chunks loads each
    column's scales in one vector."""
    for name, value in knobs.items():
        monkeypatch.setenv(f"MLX_METILE_CUDA_MMA_{name}", value)
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_DENSE", "1")
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_STAGED", "0")  # the direct loads' mainloop
    q4, q8 = WeightFormat("bf16", 4, 64), WeightFormat("f16", 8, 32)
    batch = int(knobs["BATCH"])
    specs = [  # (spec, whether the K split is aligned)
        (ProjectionSpec("bf16", (q4, q4), "swiglu", k_multiple=256), True),
        (ProjectionSpec("f16", (q8,), None, True, k_multiple=128), True),
        (ProjectionSpec("f16", (q8,), None, True, k_multiple=64), False),
        (ProjectionSpec("bf16", (q4, q4, q4), k_multiple=256), True),
        (ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=64), False),
    ]
    scales = {1: "unsigned short", 2: "unsigned", 4: "uint2"}[batch]
    for spec, aligned in specs:
        for bucket in (1, 32):
            art = compile_projection(spec, bucket, "cuda")
            assert art.schedule.kind == "mma", spec.name()
            assert (f"/ {art.schedule.SG * 4} * 4;" in art.source) == aligned, spec.name()
            if spec.weights[0].quantized:
                vector = aligned and batch > 1
                want = scales if vector else "unsigned short"
                assert f"const {want} s0_0a_0 = " in art.source, spec.name()
            assert sm90_code(ptx(art, "sm_90"))


def test_wide_mma_chunks_compile(fresh_kernels, monkeypatch):
    """MLX_METILE_CUDA_MMA_WIDE=1: pairs of groups per chunk, 16-byte weight loads
    for 4-bit group 64, x masked per group; falls back where the group count
    may be odd."""
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_WIDE", "1")
    q4 = WeightFormat("bf16", 4, 64)
    for spec in (
        ProjectionSpec("bf16", (q4, q4), "swiglu", k_multiple=256),
        ProjectionSpec("f16", (WeightFormat("f16", 8, 32),), None, True, k_multiple=64),
        ProjectionSpec("bf16", (q4, q4, q4), k_multiple=256),
    ):
        for bucket in (1, 32):
            art = compile_projection(spec, bucket, "cuda")
            assert "const unsigned mA = t < 2" in art.source, spec.name()
            assert sm90_code(ptx(art, "sm_90"))
    wide = compile_projection(ProjectionSpec("bf16", (q4,), k_multiple=256), 1, "cuda").source
    assert "const uint4 w0_0av0_0 = " in wide and "2 * (ch0 + 0)" in wide
    odd = compile_projection(ProjectionSpec("bf16", (q4,), k_multiple=64), 1, "cuda").source
    assert "mA" not in odd


def k_split(art) -> tuple:
    """What a tensor-core kernel's K split is made of: its K ranges and the lines giving
    their chunks (part of every row's sum order; the shared-x kernel, whose warps walk
    every range, names a range's length per_range)."""
    lines = [ln.strip().replace("per_range", "per_warp") for ln in art.source.splitlines()]
    split = tuple(ln for ln in lines if ln.startswith(("const int chunks", "const int per_warp")))
    assert len(split) == 2, art.entry
    return (art.schedule.splits or art.schedule.SG, *split)


@pytest.mark.parametrize(
    "knobs",
    [{}, {"GROUPS": "8"}, {"STAGED": "0"}, {"STAGED": "0", "BATCH": "4"}, {"WIDE": "1"}, {"BATCH": "2", "TILES": "2"}],
    ids=str,
)
def test_mma_k_split_is_the_same_for_every_row_bucket(fresh_kernels, monkeypatch, knobs):
    """Row invariance on CUDA: the K split (warps, chunk size, each warp's range) is
    part of a row's sum order, so every row bucket of a spec must split K alike -
    an earlier build tied it to the per-bucket batch and the H200 matrix caught it."""
    for name, value in knobs.items():
        monkeypatch.setenv(f"MLX_METILE_CUDA_MMA_{name}", value)
    q4, q8 = WeightFormat("bf16", 4, 64), WeightFormat("f16", 8, 32)
    for spec in (
        ProjectionSpec("bf16", (q4, q4), "swiglu", k_multiple=256),
        ProjectionSpec("f16", (q8,), None, True, k_multiple=64),
        ProjectionSpec("bf16", (q4, q4, q4), k_multiple=256),
    ):
        splits = {k_split(compile_projection(spec, bucket, "cuda")) for bucket in (1, 16, 32)}
        assert len(splits) == 1, (spec.name(), splits)


STAGED_SPECS = [  # (spec, groups per stage by default, or 0: not staged)
    (ProjectionSpec("bf16", (WeightFormat("bf16", 4, 64, True, "bf16"),) * 2, "swiglu", k_multiple=256), 4),
    (ProjectionSpec("bf16", (WeightFormat("bf16", 4, 32),), k_multiple=256), 8),
    (ProjectionSpec("f16", (WeightFormat("f16", 4, 128),), None, True, k_multiple=256), 2),
    (ProjectionSpec("bf16", (WeightFormat("bf16", 8, 64),) * 2, "swiglu", k_multiple=256), 2),
    (ProjectionSpec("f16", (WeightFormat("f16", 8, 32),), k_multiple=128), 4),
    (ProjectionSpec("f16", (WeightFormat("f32", 4, 32),), k_multiple=256), 4),  # f32 scales: 16 bytes a column
    (ProjectionSpec("bf16", (WeightFormat("bf16", 4, 64),) * 3, k_multiple=256), 4),  # fused q/k/v
    (ProjectionSpec("bf16", (WeightFormat("bf16", 4, 32),), k_multiple=64), 2),  # fewer groups: K holds 2
    (ProjectionSpec("bf16", (WeightFormat("bf16", 4, 64),), k_multiple=64), 0),  # K may not hold a stage
    # rings over 48 KB: 74 KB of dynamic shared memory (ring_rule), so 3 blocks per SM at 1-8 rows
    (ProjectionSpec("bf16", (WeightFormat("bf16", 8, 128),) * 2, "swiglu", k_multiple=256), 2),
]
WIDE_RING_SPEC = STAGED_SPECS[-1][0]


@pytest.mark.parametrize("spec,groups", STAGED_SPECS, ids=lambda v: v.name() if hasattr(v, "name") else str(v))
def test_staged_mma_kernels_compile(fresh_kernels, monkeypatch, spec, groups):
    """The staged tensor-core schedule (cp.async ring per warp) is the default for
    4/8-bit weights wherever K holds whole stages and the rings fit; every row
    bucket compiles for sm_90 with the same K split."""
    monkeypatch.setenv("MLX_METILE_CUDA_ARCH", "sm_90")
    assert gate_up_16(spec, 16) == (spec is STAGED_SPECS[0][0]), spec.name()  # the one 4-bit group-64 gate/up
    splits = set()
    for bucket in (1, 16, 32):
        art = compile_projection(spec, bucket, "cuda")
        assert art.schedule.kind == "mma", spec.name()
        assert ("metile_cp16(" in art.source) == bool(groups), spec.name()
        if groups:
            assert f"const int ch0 = (c_begin + (st) * {groups});" in art.source, spec.name()
            # registers capped for 4 or 2 blocks; 3 for the 16-row 4-bit group-64 gate/up
            bounds = {1: "(128, 4)", 16: "(128, 3)" if gate_up_16(spec, 16) else "(128)", 32: "(128, 2)"}[bucket]
            if spec is WIDE_RING_SPEC:
                assert art.dynamic_shared > 48 * 1024
                bounds = "(128, 3)" if bucket == 1 else bounds  # (the rings let no more share an SM)
            assert f"__launch_bounds__{bounds}" in art.source, spec.name()
        splits.add(k_split(art))
        assert sm90_code(ptx(art, "sm_90"))
    assert len(splits) == 1, splits


def test_staged_falls_back_where_the_rings_do_not_fit(fresh_kernels, monkeypatch):
    """Rings of 2 stages over the shared memory allowed (the 8-bit group-128 SwiGLU's with the
    48 KB budget of MLX_METILE_CUDA_MMA_SMEM=48): the direct loads."""
    monkeypatch.setenv("MLX_METILE_CUDA_ARCH", "sm_90")
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_SMEM", "48")
    art = compile_projection(WIDE_RING_SPEC, 1, "cuda")
    assert art.schedule.kind == "mma" and "metile_cp16(" not in art.source and art.dynamic_shared == 0
    assert sm90_code(ptx(art, "sm_90"))


def test_staged_falls_back_where_a_stage_would_not_fit_one_copy(fresh_kernels, monkeypatch):
    """8 groups of f32 scales (32 bytes a column) or of 8-bit group 128 (1 KB a column)
    take the direct loads instead of a copy the ring cannot express."""
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_GROUPS", "8")
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_WARPS", "1")
    for fmt in (WeightFormat("f32", 4, 32), WeightFormat("bf16", 8, 128)):
        art = compile_projection(ProjectionSpec("bf16", (fmt,), k_multiple=1024), 1, "cuda")
        assert art.schedule.kind == "mma" and "metile_cp16(" not in art.source
        assert sm90_code(ptx(art, "sm_90"))


def test_interleaved_k_stages_split_alike_in_every_bucket(fresh_kernels, monkeypatch):
    """MLX_METILE_CUDA_MMA_INTERLEAVE=1: warp w takes stages w, w + W, ... - the same lines
    in every row bucket (the sum order), and the kernels compile for sm_90."""
    monkeypatch.setenv("MLX_METILE_CUDA_ARCH", "sm_90")
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_INTERLEAVE", "1")
    spec = STAGED_SPECS[0][0]
    splits = set()
    for bucket in (1, 16, 32):
        art = compile_projection(spec, bucket, "cuda")
        lines = [ln.strip() for ln in art.source.splitlines()]
        splits.add(tuple(ln for ln in lines if ln.startswith(("const int k_stages", "const int nst", "const int ch0"))))
        assert "c_begin" not in art.source
        assert sm90_code(ptx(art, "sm_90"))
    assert len(splits) == 1 and len(next(iter(splits))) == 3, splits


def test_swizzled_rings_are_unpadded_and_fit_three_stages_in_four_blocks(fresh_kernels, monkeypatch):
    """MLX_METILE_CUDA_MMA_SWIZZLE=1: ring rows lose their 16-byte padding, so the int4 ring
    of 4 warps x 3 stages fits 55 KB (4 blocks per SM of the H200's 228 KB); the kernels
    compile for sm_90."""
    monkeypatch.setenv("MLX_METILE_CUDA_ARCH", "sm_90")
    spec = ProjectionSpec("bf16", (WeightFormat("bf16", 4, 64),), k_multiple=256)
    for name, value in (("SWIZZLE", "1"), ("STAGES", "3"), ("SMEM", "55")):
        monkeypatch.setenv(f"MLX_METILE_CUDA_MMA_{name}", value)
    art = compile_projection(spec, 8, "cuda")
    assert art.schedule.SG == 4 and art.schedule.BN == 32
    assert art.dynamic_shared == 4 * 3 * 32 * (128 + 16), art.dynamic_shared  # no padding
    assert "__launch_bounds__(128, 4)" in art.source and "^ (g & 7)" in art.source
    assert sm90_code(ptx(art, "sm_90"))


def test_staged_settings_are_checked(fresh_kernels, monkeypatch):
    spec = STAGED_SPECS[0][0]
    for var, bad in (("GROUPS", "3"), ("STAGES", "9"), ("MINBLOCKS", "x"), ("INTERLEAVE", "2"), ("SWIZZLE", "3")):
        monkeypatch.setenv(f"MLX_METILE_CUDA_MMA_{var}", bad)
        with pytest.raises(ValueError, match=f"MLX_METILE_CUDA_MMA_{var}"):
            compile_projection(spec, 1, "cuda")
        monkeypatch.delenv(f"MLX_METILE_CUDA_MMA_{var}")
        compile_projection.cache_clear()


def test_staged_ring_takes_two_tiles_where_they_fit_and_the_output_is_wide(fresh_kernels, monkeypatch):
    """Wide outputs take 2 column tiles per block on the staged ring (x loaded once for
    both); narrow or shallow ones (lower_mma_staged.column_layout) and rings that would not fit 2
    stages keep 1.
    Tiles move loads only: the K split is the same for every bucket and both widths. Rings
    of more than 32 rows (SwiGLU with 2 tiles: 64) copy their scales in two warp-wide passes."""
    monkeypatch.setenv("MLX_METILE_CUDA_ARCH", "sm_90")
    single = ProjectionSpec("bf16", (WeightFormat("bf16", 4, 64),), k_multiple=256)
    splits = set()
    for layout, tiles in ((0, 2), (1, 1)):  # TILES, ONE_TILE
        for bucket in (1, 16, 32):
            art = compile_projection(single, bucket, "cuda", layout)
            assert art.schedule.BN == 16 * tiles and "metile_cp16(" in art.source
            splits.add(k_split(art))
            assert sm90_code(ptx(art, "sm_90"))
    assert len(splits) == 1, splits
    swiglu = STAGED_SPECS[0][0]
    assert compile_projection(swiglu, 1, "cuda").schedule.BN == 16  # 2 tiles' rings would not fit
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_GROUPS", "2")  # smaller stages: 2 tiles fit ...
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_BANKPAD", "0")  # ... in rows padded by 16 bytes
    compile_projection.cache_clear()
    art = compile_projection(swiglu, 16, "cuda")
    assert art.schedule.BN == 32 and "metile_cp16(" in art.source and "csok1" in art.source
    assert sm90_code(ptx(art, "sm_90"))


def test_column_layouts_of_the_benchmark_shapes_and_their_warps(fresh_kernels, monkeypatch):
    """lower_mma_staged.column_layout by output width and K (the op passes it for every row
    bucket of a weight), and the warps and K ranges each layout gives 4-bit, 8-bit and dense
    weights: more K ranges only in SPREAD (all formats) and DEEP (8-bit), and in DEEP at 16-32
    rows 4 warps of two ranges each. Every kernel still builds for sm_90."""
    from mlx_metile.compiler.lower_mma_staged import DEEP, ONE_TILE, ONE_WAVE, SPREAD, TILES, column_layout

    monkeypatch.setenv("MLX_METILE_CUDA_ARCH", "sm_90")
    layouts = {(n, k): column_layout(n, k) for n, k in ((14336, 4096), (4096, 4096), (4096, 14336), (1024, 4096))}
    layouts |= {(n, k): column_layout(n, k) for n, k in ((8960, 1536), (1536, 8960), (256, 1536))}
    # single 4/8-bit products over 2048 <= K < 4096 whose one-tile grids exceed 5 blocks per SM: TILES
    assert [column_layout(n, k, True) for n, k in ((11008, 2048), (18944, 3584), (10576, 2048))] == [TILES] * 3
    assert [column_layout(n, k, True) for n, k in ((11008, 1536), (10560, 2048), (8192, 2048))] == [
        ONE_TILE,
        ONE_WAVE,
        column_layout(8192, 2048),
    ]
    assert column_layout(11008, 2048) == ONE_TILE  # dense, SwiGLU, concatenated q/k/v
    assert layouts == {
        (14336, 4096): TILES,
        (4096, 4096): ONE_TILE,
        (4096, 14336): DEEP,
        (1024, 4096): DEEP,
        (8960, 1536): ONE_WAVE,
        (1536, 8960): SPREAD,
        (256, 1536): ONE_TILE,
    }
    expected = {  # (format bits, layout): (warps, K ranges) at rows 1-8, 16, 32
        (4, SPREAD): [(8, 8)] * 3,
        (8, SPREAD): [(8, 8)] * 3,
        (0, SPREAD): [(16, 16)] * 3,
        (4, DEEP): [(4, 4)] * 3,
        (8, DEEP): [(8, 8), (4, 8), (4, 8)],
        (0, DEEP): [(8, 8)] * 3,
    }
    for (bits, layout), want in expected.items():
        w = WeightFormat("bf16", bits, 64) if bits else WeightFormat("bf16")
        spec = ProjectionSpec("bf16", (w,), k_multiple=256)
        arts = [compile_projection(spec, b, "cuda", layout) for b in (8, 16, 32)]
        assert [(a.schedule.SG, a.schedule.splits or a.schedule.SG) for a in arts] == want, (bits, layout)
        assert all(a.schedule.BN == 16 and "metile_cp16(" in a.source for a in arts)
        assert sm90_code(ptx(arts[-1], "sm_90"))
    with pytest.raises(ValueError, match="layout: expected one of"):
        compile_projection(ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=256), 8, "cuda", 6)


def test_single_products_of_small_one_tile_grids_take_tiles_where_measured(monkeypatch):
    """bucket_layout: over 2048 <= K < 4096, ONE_TILE_WIDE products of group-64 weights take TILES in
    every row bucket, 8-bit group-128 ones from 8 rows, 2-byte dense ones from 16; ONE_WAVE 8-bit
    group-64 products from 8 rows; other formats and layouts, and MLX_METILE_CUDA_MMA_LAYOUT, keep
    column_layout's."""
    from mlx_metile.compiler.lower_mma_staged import (
        ONE_TILE,
        ONE_TILE_WIDE,
        ONE_WAVE,
        TILES,
        bucket_layout,
        column_layout,
    )

    buckets = (1, 2, 4, 8, 16, 32)
    wide, wave = column_layout(8192, 3072, True), column_layout(8960, 1536, True)
    assert (wide, wave, column_layout(8192, 3072)) == (ONE_TILE_WIDE, ONE_WAVE, ONE_TILE_WIDE)

    def layouts(layout, k, fmt):
        return [bucket_layout(layout, k, b, fmt) for b in buckets]

    q4, q8, q8g128, q4g128 = (WeightFormat("bf16", b, g) for b, g in ((4, 64), (8, 64), (8, 128), (4, 128)))
    assert layouts(wide, 3072, q4) == layouts(wide, 2048, q8) == [TILES] * 6
    assert layouts(wide, 3072, q8g128) == [wide] * 3 + [TILES] * 3
    assert layouts(wide, 3072, WeightFormat("bf16")) == [wide] * 4 + [TILES] * 2
    assert layouts(wide, 3072, q4g128) == layouts(wide, 3072, WeightFormat("f32")) == [wide] * 6
    assert layouts(wave, 1536, q8) == [wave] * 3 + [TILES] * 3
    assert layouts(wave, 1536, q4) == layouts(wave, 1536, WeightFormat("bf16")) == [wave] * 6
    assert layouts(ONE_TILE, 4096, q8) == [ONE_TILE] * 6
    assert layouts(column_layout(8192, 4096, True), 4096, q8) == [ONE_TILE_WIDE] * 6  # K = 4096
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_LAYOUT", "5")
    assert layouts(wide, 3072, q8) == [wide] * 6


def test_layout_setting_forces_one_column_layout_for_every_product(monkeypatch):
    """MLX_METILE_CUDA_MMA_LAYOUT (A/B runs through MLX) overrides column_layout's rule for any
    shape, and a value outside LAYOUTS is refused by the variable's name."""
    from mlx_metile.compiler.lower_mma_staged import ONE_TILE, TILES, column_layout

    assert column_layout(18944, 3584, True) == TILES
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_LAYOUT", "1")
    assert column_layout(18944, 3584, True) == column_layout(1536, 8960) == ONE_TILE
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_LAYOUT", "6")
    with pytest.raises(ValueError, match="MLX_METILE_CUDA_MMA_LAYOUT: expected one of"):
        column_layout(14336, 4096)


def test_one_wave_layout_asks_for_five_blocks_per_sm_only_where_measured(fresh_kernels, monkeypatch):
    """lower_mma_staged.ONE_WAVE (grids of 4-5 blocks per SM): single products of 4/8-bit
    weights at 1-8 rows ask for 5 blocks per SM; their sources are ONE_TILE's but for the
    launch bound (so the same sums), and the SwiGLU gate/up, concatenated q/k/v and 16-32 rows
    keep ONE_TILE's kernels; single 2-byte dense products split K over 2 warps instead of 8. The bound holds for sm_90 without spilling at group 64."""
    from mlx_metile.compiler.lower_mma_staged import ONE_TILE, ONE_TILE_WIDE, ONE_WAVE, column_layout

    monkeypatch.setenv("MLX_METILE_CUDA_ARCH", "sm_90")
    # 4 stages in both: ONE_TILE's single 4-bit products keep 3 at 1-8 rows by default (ring_rule,
    # loads only; ONE_WAVE unmeasured with 3), which the STAGES knob overrides
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_STAGES", "4")
    widths = (8448, 8464, 10560, 10576)
    assert [column_layout(n, 1536) for n in widths] == [ONE_TILE_WIDE, ONE_WAVE, ONE_WAVE, ONE_TILE]
    q4, q8 = WeightFormat("bf16", 4, 64), WeightFormat("bf16", 8, 128)
    for spec in (ProjectionSpec("bf16", (q4,), k_multiple=256), ProjectionSpec("bf16", (q8,), k_multiple=256)):
        for bucket in (1, 8):
            wave, tile = (compile_projection(spec, bucket, "cuda", lay).source for lay in (ONE_WAVE, ONE_TILE))
            assert "__launch_bounds__(128, 5)" in wave and "__launch_bounds__(128, 4)" in tile
            assert wave.replace("__launch_bounds__(128, 5)", "__launch_bounds__(128, 4)") == tile
        for bucket in (16, 32):
            assert (
                compile_projection(spec, bucket, "cuda", ONE_WAVE).source
                == compile_projection(spec, bucket, "cuda", ONE_TILE).source
            )
    dense = WeightFormat("bf16")
    others = (
        ProjectionSpec("bf16", (q4, q4), "swiglu", k_multiple=256),
        ProjectionSpec("bf16", (q4,) * 3, k_multiple=256),  # concatenated q/k/v: unmeasured
        ProjectionSpec("bf16", (dense, dense), "swiglu", k_multiple=256),
        ProjectionSpec("f32", (WeightFormat("f32"),), k_multiple=256),
    )
    for spec in others:
        assert (
            compile_projection(spec, 8, "cuda", ONE_WAVE).source == compile_projection(spec, 8, "cuda", ONE_TILE).source
        )
    # single 2-byte dense products: K over 2 warps in every row bucket (ONE_WAVE_DENSE_WARPS), 8 in ONE_TILE
    for act in ("bf16", "f16"):
        single = ProjectionSpec(act, (WeightFormat(act),), k_multiple=256)
        for bucket in (1, 8, 16, 32):
            assert compile_projection(single, bucket, "cuda", ONE_WAVE).schedule.SG == 2, (act, bucket)
            assert compile_projection(single, bucket, "cuda", ONE_TILE).schedule.SG == 8, (act, bucket)
    usage = ptxas_usage(compile_projection(ProjectionSpec("bf16", (q4,), k_multiple=256), 8, "cuda", ONE_WAVE))
    if usage is not None:
        assert usage["registers"] <= 96 and usage["spill"] == 0, usage


def test_one_tile_wide_layout_differs_from_one_tile_only_in_the_dense_rings_at_1_to_4_rows(fresh_kernels, monkeypatch):
    """lower_mma_staged.ONE_TILE_WIDE (one-tile grids of 2-4 blocks per SM): ONE_TILE's kernels, but
    single dense products at 1-4 rows keep the 48 KB ring (one wave at 4 blocks per SM) instead of the
    deep ring's 80 KB of dynamic shared memory (2 per SM), and q/k/v of 4/8-bit weights take
    CONCAT_STAGES's rings (4-bit group 64: 2 stages at 1-16 rows, its 4 at 32); other quantized
    products, the SwiGLU gate/up and dense weights at 8-32 rows build the same sources as in ONE_TILE."""
    from mlx_metile.compiler.lower_mma_staged import ONE_TILE, ONE_TILE_WIDE, column_layout

    monkeypatch.setenv("MLX_METILE_CUDA_ARCH", "sm_90")
    assert [column_layout(n, k) for n, k in ((4224, 4096), (4225, 4096), (8192, 2048), (8447, 4096))] == [
        ONE_TILE,
        ONE_TILE_WIDE,
        ONE_TILE_WIDE,
        ONE_TILE_WIDE,
    ]
    assert [column_layout(n, k) for n, k in ((8448, 4096), (11008, 2048), (4096, 4096))] != [ONE_TILE_WIDE] * 3
    dense = ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=256)
    for bucket in (1, 2, 4):
        wide, tile = (compile_projection(dense, bucket, "cuda", lay) for lay in (ONE_TILE_WIDE, ONE_TILE))
        assert wide.dynamic_shared == 0 and tile.dynamic_shared > 48 * 1024, bucket
    q4, q8 = WeightFormat("bf16", 4, 64), WeightFormat("bf16", 8, 128)
    same = (
        ProjectionSpec("bf16", (q4,), k_multiple=256),
        ProjectionSpec("bf16", (q8,), k_multiple=256),
        ProjectionSpec("bf16", (WeightFormat("bf16"),) * 2, "swiglu", k_multiple=256),
        ProjectionSpec("bf16", (q8,) * 3, k_multiple=256),  # (no CONCAT_STAGES entry: 2 stages already)
    )
    qkv = ProjectionSpec("bf16", (q4,) * 3, k_multiple=256)
    for bucket in (1, 4, 8, 16, 32):
        wide, tile = (compile_projection(qkv, bucket, "cuda", lay).source for lay in (ONE_TILE_WIDE, ONE_TILE))
        assert "metile_cp_wait<2>();" in tile, bucket  # 4 stages
        assert (wide == tile) == (bucket == 32) and ("metile_cp_wait<0>();\n    __syncwarp" in wide) == (bucket < 32)
    for spec in same:
        for bucket in (1, 4, 8, 16, 32):
            assert (
                compile_projection(spec, bucket, "cuda", ONE_TILE_WIDE).source
                == compile_projection(spec, bucket, "cuda", ONE_TILE).source
            ), (spec.name(), bucket)
    for bucket in (8, 16, 32):
        assert (
            compile_projection(dense, bucket, "cuda", ONE_TILE_WIDE).source
            == compile_projection(dense, bucket, "cuda", ONE_TILE).source
        )


def test_eight_bit_group_128_takes_two_tiles_in_dynamic_shared_memory_at_32_rows(fresh_kernels, monkeypatch):
    """lower_mma_staged.WIDE_RING_KB: 8-bit group-128 stages (256 bytes a column) fit 2 tiles'
    rings of 2 stages only in 74 KB (rows padded by 32 bytes), so at 32 rows the TILES layout sizes them at launch; at
    1-16 rows one tile in 48 KB as before; formats whose 2 tiles fit 48 KB are untouched."""
    from mlx_metile.compiler.lower_mma_staged import TILES

    monkeypatch.setenv("MLX_METILE_CUDA_ARCH", "sm_90")
    spec = ProjectionSpec("bf16", (WeightFormat("bf16", 8, 128),), k_multiple=256)
    arts = {b: compile_projection(spec, b, "cuda", TILES) for b in (8, 16, 32)}
    assert [arts[b].schedule.BN for b in (8, 16, 32)] == [16, 16, 32]
    assert arts[32].dynamic_shared == 4 * 2 * 32 * (256 + 32 + 8) and arts[16].dynamic_shared == 0
    assert "extern __shared__" in arts[32].source and "metile_cp16(" in arts[32].source
    assert sm90_code(ptx(arts[32], "sm_90"))
    q4 = ProjectionSpec("bf16", (WeightFormat("bf16", 4, 64),), k_multiple=256)
    assert compile_projection(q4, 32, "cuda", TILES).dynamic_shared == 0


@pytest.mark.skipif(find_nvcc() is None, reason="a fatbin needs nvcc (NVRTC gives cubins)")
def test_compressed_fatbin_holds_the_same_kernel_smaller(fresh_kernels, monkeypatch):
    """nvcc builds a compressed fatbin (magic 0xBA55ED50) of the sm_90 code alone by
    default, smaller than the cubin (MLX_METILE_CUDA_BINARY=cubin) MLX would otherwise
    hash at every launch."""
    monkeypatch.setenv("MLX_METILE_CUDA_COMPILER", "nvcc")
    spec = STAGED_SPECS[0][0]
    art = compile_projection(spec, 1, "cuda")
    fatbin = ptx(art, "sm_90")
    ptx.cache_clear()
    monkeypatch.setenv("MLX_METILE_CUDA_BINARY", "cubin")
    cubin = ptx(art, "sm_90")
    ptx.cache_clear()
    assert cubin[:4] == b"\x7fELF" and fatbin[:4] == b"\x50\xed\x55\xba"
    assert len(fatbin) < len(cubin) / 2
    monkeypatch.setenv("MLX_METILE_CUDA_BINARY", "elf")
    with pytest.raises(ValueError, match="MLX_METILE_CUDA_BINARY"):
        ptx(art, "sm_90")


def test_dense_weights_are_staged_by_default_and_compile(fresh_kernels, monkeypatch):
    """Dense weights take the staged ring by default (32 k of a column per chunk, no
    scales), with 8 warps where 8 rings of 2 stages fit shared memory (4 for gate/up's
    32-row ring), one K split for every row bucket; MLX_METILE_CUDA_MMA_DENSE=1 keeps
    the direct loads, =0 split-K; anything else is refused by name."""
    monkeypatch.setenv("MLX_METILE_CUDA_ARCH", "sm_90")
    specs = [  # (spec, warps by default)
        (ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=256), 8),
        (
            ProjectionSpec(
                "bf16", (WeightFormat("bf16", has_bias=True, bias_dtype="bf16"),) * 2, "swiglu", k_multiple=64
            ),
            4,
        ),
        (ProjectionSpec("f16", (WeightFormat("f16"),) * 3, k_multiple=128), 8),  # fused q/k/v
        (ProjectionSpec("f16", (WeightFormat("f16"),), None, True, k_multiple=64), 8),
    ]
    for mode, want in ((None, True), ("staged", True), ("1", False)):
        if mode is None:
            monkeypatch.delenv("MLX_METILE_CUDA_MMA_DENSE", raising=False)
        else:
            monkeypatch.setenv("MLX_METILE_CUDA_MMA_DENSE", mode)
        compile_projection.cache_clear()
        for spec, warps in specs:
            splits = set()
            for bucket in (1, 16, 32):
                art = compile_projection(spec, bucket, "cuda")
                assert art.schedule.kind == "mma", spec.name()
                assert ("metile_cp16(" in art.source) == want, (mode, spec.name())
                assert art.schedule.SG == (warps if want else 4), (mode, spec.name())
                splits.add(k_split(art))
                assert sm90_code(ptx(art, "sm_90"))
            assert len(splits) == 1, (mode, spec.name(), splits)
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_DENSE", "0")
    compile_projection.cache_clear()
    assert compile_projection(specs[0][0], 1, "cuda").schedule.kind == "simd_splitk"
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_DENSE", "yes")
    compile_projection.cache_clear()
    with pytest.raises(ValueError, match="MLX_METILE_CUDA_MMA_DENSE"):
        compile_projection(specs[0][0], 1, "cuda")


def test_q8_split_is_default_and_its_constants_are_exact(fresh_kernels, monkeypatch):
    """By default (MLX_METILE_CUDA_MMA_Q8SPLIT=0 turns it off) 8-bit weights with bf16 activations enter the MMA as
    128 + low nibble and 2048 + 16 * high nibble (both exact in bf16), two MMAs per word
    into one accumulator, 2176 * scale taken off the bias. The helpers' magic constants
    decode to exactly those values; f16 activations and 4-bit weights are unaffected."""
    import re
    import struct

    from mlx_metile.codegen.cuda import Q8_SPLIT_HELPERS
    from mlx_metile.compiler.lower_mma import Q8_SPLIT_OFFSET

    def bf16(bits: int) -> float:
        return struct.unpack("<f", struct.pack("<I", bits << 16))[0]

    lo, hi = re.findall(r"0x([0-9A-F]{4})[0-9A-F]{4}u\);", Q8_SPLIT_HELPERS)
    assert [bf16(int(lo, 16) | n) for n in range(16)] == [128.0 + n for n in range(16)]
    assert [bf16(int(hi, 16) | n) for n in range(16)] == [2048.0 + 16 * n for n in range(16)]
    assert Q8_SPLIT_OFFSET == 128 + 2048

    q8 = ProjectionSpec("bf16", (WeightFormat("bf16", 8, 64),) * 2, "swiglu", k_multiple=256)
    default = {b: compile_projection(q8, b, "cuda").source for b in (1, 32)}
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_Q8SPLIT", "1")
    for staged in ("1", "0"):
        monkeypatch.setenv("MLX_METILE_CUDA_MMA_STAGED", staged)
        compile_projection.cache_clear()
        for bucket in (1, 16, 32):
            art = compile_projection(q8, bucket, "cuda")
            assert "metile_q8hi_bf16(w" in art.source and "metile_q8_bf16(w" not in art.source
            assert "fmaf(-2176.0f, sc" in art.source
            assert sm90_code(ptx(art, "sm_90"))
    for other in (WeightFormat("f16", 8, 64), WeightFormat("bf16", 4, 64)):
        act = other.dtype
        art = compile_projection(ProjectionSpec(act, (other,), k_multiple=256), 1, "cuda")
        assert "metile_q8hi" not in art.source
    monkeypatch.delenv("MLX_METILE_CUDA_MMA_STAGED")
    compile_projection.cache_clear()
    assert {b: compile_projection(q8, b, "cuda").source for b in (1, 32)} == default  # on by default
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_Q8SPLIT", "0")
    compile_projection.cache_clear()
    for bucket in (1, 32):
        art = compile_projection(q8, bucket, "cuda")
        assert "metile_q8_bf16(w" in art.source and "metile_q8hi" not in art.source
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_Q8SPLIT", "yes")
    compile_projection.cache_clear()
    with pytest.raises(ValueError, match="MLX_METILE_CUDA_MMA_Q8SPLIT"):
        compile_projection(q8, 1, "cuda")


def test_ring_rows_are_padded_by_the_lanes_load_width(fresh_kernels, monkeypatch):
    """lower_mma_staged.row_pad: 4 lanes' bytes of a row - 32 for 8-byte loads, 64 for dense
    16-byte ones, 16 for 4-byte ones; 8-bit group 64 (16-byte loads) unpadded and swizzled by
    width instead. BANKPAD=0: 16 everywhere; =1: 4 x the load width everywhere."""
    from mlx_metile.compiler.lower_mma_staged import lane_load_bytes, row_pad, width_swizzle

    def spec(f):
        return ProjectionSpec("bf16", (f,), k_multiple=256)

    q4g64, q4g128, q8g64, q8g128 = (WeightFormat("bf16", b, g) for b, g in ((4, 64), (4, 128), (8, 64), (8, 128)))
    dense = WeightFormat("bf16")
    cases = {q4g64: (8, 32), q4g128: (4, 16), q8g64: (16, 0), q8g128: (8, 32), dense: (16, 64)}
    for f, (width, pad) in cases.items():
        assert (lane_load_bytes(spec(f)), row_pad(spec(f))) == (width, pad), f
    assert width_swizzle(spec(q8g64)) == (1, 4) and width_swizzle(spec(q4g64)) == (0, 0)
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_BANKPAD", "0")
    assert {row_pad(spec(f)) for f in cases} == {16} and width_swizzle(spec(q8g64)) == (0, 0)
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_BANKPAD", "1")
    assert [row_pad(spec(f)) for f in cases] == [32, 16, 64, 32, 64]
