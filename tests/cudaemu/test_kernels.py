"""The generated CUDA kernels run on the CPU (host.py: the kernel text itself, with its inline PTX
replaced by C++), checked against float64 references with the tolerances of the GPU matrix (tests/gpu/), and
for row invariance bit for bit: a row computed alone has the bits it has among others
(Case.invariant: the first, middle and last rows). What this cannot check - the PTX of
mma.sync, cp.async and lop3 - runs on the GPU."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from mlx_metile.formats import microscaling
from mlx_metile.lower import LowerError
from mlx_metile.pipeline import compile_projection
from mlx_metile.schedule.cuda_layouts import ONE_TILE, TILES
from mlx_metile.spec import ProjectionSpec, WeightFormat

from ..helpers import artifact, bits, rand
from .cases import ULP, Case, kernel, q4, q8, rules, same, set_knobs, values

CASES = [  # (spec, K, N): every schedule the CUDA op takes at 1..32 rows
    (ProjectionSpec("bf16", (q4,), k_multiple=256), 512, 96),  # staged ring, 4-bit
    (ProjectionSpec("bf16", (q8,), k_multiple=256), 512, 48),  # 8-bit nibble split
    (ProjectionSpec("f16", (WeightFormat("f16", 4, 32),), k_multiple=256), 512, 40),  # f16, group 32, N tail
    (ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=256), 512, 48),  # dense, 8 warps
    (ProjectionSpec("bf16", (q4, q4), "swiglu", k_multiple=256), 512, 32),  # gate/up SwiGLU
    (ProjectionSpec("bf16", (q4,) * 3, k_multiple=256), 512, 24),  # q/k/v in one accumulator
    (ProjectionSpec("bf16", (q4,), k_multiple=64), 17 * 64, 32),  # odd group count: direct loads
    (ProjectionSpec("f16", (WeightFormat("f16"),), k_multiple=32), 96, 40),  # split-K (warp shuffles)
]


@pytest.mark.parametrize("spec,K,N", CASES, ids=[c[0].name() for c in CASES])
def test_cuda_kernels_on_the_cpu_match_float64_and_are_row_invariant(spec, K, N):
    """Within tolerance at 2, 3, 16 and 20 rows, and the first, middle and last rows of each
    equal to that row computed alone (1 row) by the 8-row kernel and by the 1-row one."""
    case = Case(spec, K, N, rows=20)
    for bucket, rows in ((8, 2), (8, 3), (16, 16), (32, 20)):
        got = case.run(bucket, rows)
        case.check(got, rows, f"{spec.name()} rows={rows}")
        case.invariant(got, spec.name())
        case.invariant(got, spec.name(), bucket=1)


WIDTHS = [  # (spec, K, N): affine 2, 3 and 5 bits on the SIMT kernel (f32 x, past 32 rows, CUDA_MMA=0)
    (ProjectionSpec("bf16", (WeightFormat("bf16", 2, 32),), k_multiple=256), 512, 40),
    (ProjectionSpec("bf16", (WeightFormat("bf16", 3, 32),), k_multiple=256), 512, 40),  # values straddle words
    (ProjectionSpec("bf16", (WeightFormat("bf16", 5, 64),) * 2, "swiglu", k_multiple=256), 512, 24),
]

LOW_BITS = [  # (spec, K, N): affine 2, 3, 5 and 6 bits on the tensor cores' direct loads
    (ProjectionSpec("bf16", (WeightFormat("bf16", 2, 64),), k_multiple=256), 512, 40),
    (ProjectionSpec("f16", (WeightFormat("f16", 3, 128),), k_multiple=256), 512, 24),  # values straddle words
    (ProjectionSpec("bf16", (WeightFormat("bf16", 5, 128),) * 2, "swiglu", k_multiple=256), 512, 24),
    (ProjectionSpec("bf16", (WeightFormat("bf16", 6, 64, True, "bf16"),), k_multiple=256), 512, 40),
    (ProjectionSpec("f16", (WeightFormat("f16", 2, 128),), k_multiple=128), 384, 24),  # 3 chunks: uneven K ranges
]

STREAMS = [  # (spec, K, N): a lane's quarter of a group not whole words (the covering words, shifted)
    (ProjectionSpec("bf16", (WeightFormat("bf16", 2, 32),), k_multiple=256), 512, 40),
    (ProjectionSpec("f16", (WeightFormat("f16", 2, 32),), k_multiple=256), 512, 40),
    (ProjectionSpec("bf16", (WeightFormat("bf16", 3, 32, True, "bf16"),), k_multiple=32), 96, 40),  # 3 chunks
    (ProjectionSpec("f16", (WeightFormat("f16", 3, 64),), k_multiple=256), 512, 24),
    (ProjectionSpec("bf16", (WeightFormat("bf16", 5, 32),) * 2, "swiglu", k_multiple=256), 512, 24),
    (ProjectionSpec("bf16", (WeightFormat("bf16", 5, 64),), k_multiple=64), 320, 40),  # 5 chunks: uneven K ranges
    (ProjectionSpec("f16", (WeightFormat("f16", 6, 32),) * 3, k_multiple=256), 512, (24, 16, 8)),  # q/k/v
]


def check_direct_loads(spec, K: int, N: int) -> None:
    """The spec on the tensor cores' direct loads at 1, 5, 16 and 32 rows (each row bucket's kernel):
    within tolerance of float64, and rows of each the bits of that row computed alone (the 1-row kernel)."""
    assert rules(spec).supported()
    case = Case(spec, K, N, rows=32)
    for bucket, rows in ((1, 1), (8, 5), (16, 16), (32, 32)):
        art = kernel(spec, bucket, ONE_TILE)
        assert art.schedule.kind == "mma" and not art.schedule.staged, art.schedule.describe()
        got = case.run(bucket, rows)
        case.check(got, rows, f"{spec.name()} rows={rows}")
        case.invariant(got, spec.name(), bucket=1)


@pytest.mark.parametrize("spec,K,N", LOW_BITS, ids=[c[0].name() for c in LOW_BITS])
def test_low_bit_tensor_core_kernels_match_float64_and_are_row_invariant(env, spec, K, N):
    """2, 3, 5 and 6-bit weights where a lane's quarter of a group is whole words (the direct
    loads, the staged ring turned off; it takes some by default: test_staged_affine_widths.py):
    within tolerance at 1, 5, 16 and 32 rows, rows alike alone (the 1-row kernel)."""
    env.set("MLX_METILE_CUDA_MMA_STAGED", "0")
    check_direct_loads(spec, K, N)


@pytest.mark.parametrize("spec,K,N", STREAMS, ids=[c[0].name() for c in STREAMS])
def test_low_bit_streams_of_partial_words_match_float64_and_are_row_invariant(env, spec, K, N):
    """2, 3, 5 and 6-bit weights where a lane's quarter of a group starts or ends inside a word
    (values straddling the covering words too; the direct loads, the staged ring turned off):
    within tolerance at 1, 5 and 32 rows, every row of the 32 the bits it has alone (the 1-row
    kernel)."""
    env.set("MLX_METILE_CUDA_MMA_STAGED", "0")
    assert rules(spec).supported()
    case = Case(spec, K, N, rows=32)
    for bucket, rows in ((1, 1), (8, 5), (32, 32)):
        art = kernel(spec, bucket, ONE_TILE)
        assert art.schedule.kind == "mma" and not art.schedule.staged, art.schedule.describe()
        assert "__funnelshift_r(" in art.source
        got = case.run(bucket, rows)
        case.check(got, rows, f"{spec.name()} rows={rows}")
        case.invariant(got, spec.name(), bucket=1)
    alone = [case.run(1, 1, start=r) for r in range(32)]
    for j, y in enumerate(got):
        assert np.array_equal(np.concatenate([a[j] for a in alone]), y), f"{spec.name()} y{j}: a row differs alone"


@pytest.mark.parametrize("spec,K,N", WIDTHS, ids=[c[0].name() for c in WIDTHS])
def test_cuda_simt_kernels_of_other_formats_match_float64_and_are_row_invariant(env, spec, K, N):
    """Affine 2, 3 and 5 bits on the SIMT kernel (the tensor-core schedules off)."""
    env.set("MLX_METILE_CUDA_MMA", "0")
    assert kernel(spec, 8, ONE_TILE).schedule.kind == "simd_splitk"
    case = Case(spec, K, N, rows=20)
    for bucket, rows in ((1, 1), (8, 3), (32, 20)):
        got = case.run(bucket, rows)
        case.check(got, rows, f"{spec.name()} rows={rows}")
        case.invariant(got, spec.name(), bucket=1)


def mx_format(mode: str, bias: str = "") -> WeightFormat:
    group, width = {"mxfp4": (32, 4), "mxfp8": (32, 8), "nvfp4": (16, 4)}[mode]
    return WeightFormat("u8", width, group, bool(bias), bias or "f32", mode)


MICROSCALED = [  # (spec, K, N): MLX's microscaling modes on the tensor cores' direct loads
    (ProjectionSpec("bf16", (mx_format("mxfp4"),), k_multiple=256), 512, 40),
    (ProjectionSpec("f16", (mx_format("mxfp4", "f16"),), k_multiple=256), 512, 24),  # an output bias
    (ProjectionSpec("bf16", (mx_format("mxfp8", "bf16"),), k_multiple=256), 512, 24),
    (ProjectionSpec("f16", (mx_format("mxfp8"),), k_multiple=256), 512, 40),
    (ProjectionSpec("bf16", (mx_format("nvfp4"),) * 2, "swiglu", k_multiple=256), 512, 24),
    (ProjectionSpec("f16", (mx_format("nvfp4"),), k_multiple=32), 96, 40),  # 3 chunks: uneven K ranges
    (ProjectionSpec("bf16", (mx_format("mxfp8"),) * 3, k_multiple=256), 512, (40, 16, 24)),  # q/k/v
]


@pytest.mark.parametrize("spec,K,N", MICROSCALED, ids=[c[0].name() for c in MICROSCALED])
def test_microscaled_tensor_core_kernels_match_float64_and_are_row_invariant(env, spec, K, N):
    """mxfp4, mxfp8 and nvfp4 on the tensor cores' direct loads (the staged ring turned off; it
    takes them by default where K holds whole stages: test_staged_microscaled.py): within tolerance of float64
    from the exact dequantisation at 1, 5, 16 and 32 rows (each row bucket's kernel), and the
    first, middle and last rows of each the bits of that row computed alone by the 1-row kernel."""
    env.set("MLX_METILE_CUDA_MMA_STAGED", "0")
    check_direct_loads(spec, K, N)


@pytest.mark.parametrize("weight", [WeightFormat("bf16", 3, 32), WeightFormat("f16", 5, 32)], ids=["q3g32", "q5g32"])
def test_staged_ring_refuses_low_bit_stages_of_odd_copies_by_name(env, weight):
    """Stages of 2 groups of 3 or 5-bit group 32 (MLX_METILE_CUDA_MMA_GROUPS=2: 24 and 40 bytes a
    column, 3 and 5 copies of 8 bytes, no run of 2 side by side): MmaRules does not stage them
    (the direct loads), and a staged Schedule of 2 groups given anyway is refused naming the
    format rather than copying a ring wrongly."""
    env.set("MLX_METILE_CUDA_MMA_GROUPS", "2")
    spec = ProjectionSpec("bf16", (weight,), k_multiple=256)
    assert rules(spec).supported() and not rules(spec).stageable
    staged = rules(ProjectionSpec("bf16", (q4,), k_multiple=256)).schedule(16, TILES)
    assert staged.staged and staged.groups == 2
    size = 2 * weight.group_size * weight.bits // 8
    with pytest.raises(LowerError, match=f"staged ring .* not {size} bytes of {weight.short()}"):
        compile_projection(spec, staged, "cuda")


def _pack(codes: np.ndarray, width: int) -> np.ndarray:
    """[N, K] codes of `width` bits as MLX packs them: uint32 words, least-significant first."""
    per_word = 32 // width
    c = codes.astype(np.uint32).reshape(codes.shape[0], -1, per_word) << (width * np.arange(per_word, dtype=np.uint32))
    return np.bitwise_or.reduce(c, axis=2).astype(np.uint32)


@pytest.mark.parametrize("mode,act", [("mxfp8", "bf16"), ("mxfp8", "f16"), ("nvfp4", "f16"), ("mxfp4", "bf16")])
def test_microscaled_kernels_decode_every_code_and_scale_exactly(mode, act):
    """Every e2m1 / e4m3 code (but NaN) under random scales (e8m0 2**-7..2**7; e4m3 of both signs),
    read out one at a time: row r of x is one-hot at k_r = 16 r + r % 16 (a new group each row),
    so y[r, n] is one dequantised element, exact in the output dtype - equal to float64 of
    microscaling.dequantize_exact. Then a NaN code (e4m3 0x7F), a NaN scale (nvfp4) or an inf
    scale over a group of zeros (mxfp4) makes its column NaN and leaves the others alone."""
    spec = ProjectionSpec(act, (mx_format(mode),), k_multiple=256)
    f = spec.weights[0]
    K, N, rows = 512, 8, 32
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 2**f.bits, (N, K))
    ks = 16 * np.arange(rows) + np.arange(rows) % 16
    codes[:, ks] = (32 * np.arange(N)[:, None] + np.arange(rows)[None, :]) % 2**f.bits  # each code at some (r, n)
    if f.bits == 8:
        codes[(codes & 0x7F) == 0x7F] = 0x00  # NaN codes: on their own below
    if mode == "nvfp4":
        scales = rng.integers(0, 256, (N, K // f.group_size)).astype(np.uint8)
        scales[(scales & 0x7F) == 0x7F] = 0x38  # (1.0)
    else:
        scales = rng.integers(120, 135, (N, K // f.group_size)).astype(np.uint8)
    case = Case(spec, K, N, rows=rows)
    x = np.zeros((rows, K), np.float32)
    x[np.arange(rows), ks] = 1.0
    case.replace(x=bits(mx.array(x).astype(mx.bfloat16 if act == "bf16" else mx.float16)))

    def run(codes: np.ndarray, scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        words = _pack(codes, f.bits)
        case.replace(w0=words, scales0=scales)
        w64 = microscaling.dequantize_exact(mx.array(words), mx.array(scales), f.group_size, f.bits, mode)
        return values(case.run(8, rows)[0], act), w64

    y, w64 = run(codes, scales)
    exact = w64[:, ks].T  # y[r, n] = w[n, k_r]
    bad = np.argwhere(y != exact)
    assert not len(bad), (
        f"{len(bad)} elements differ, first (r, n) = {bad[0]}: {y[tuple(bad[0])]} != {exact[tuple(bad[0])]}"
    )
    nan_codes, nan_scales = codes.copy(), scales.copy()
    if f.bits == 8:
        nan_codes[3, 5] = 0x7F
    elif mode == "nvfp4":
        nan_scales[3, 2] = 0x7F
    else:  # e8m0 255 is inf; times a group of zero codes NaN
        nan_scales[3, 2] = 255
        nan_codes[3, 2 * f.group_size : 3 * f.group_size] = 0
    y_nan, w_nan = run(nan_codes, nan_scales)
    assert np.isnan(w_nan[3]).any() and np.isnan(y_nan[:, 3]).all(), y_nan[:, 3]
    rest = [c for c in range(N) if c != 3]
    assert np.array_equal(y_nan[:, rest], y[:, rest])


VARIANTS = [  # (spec, K, N, settings): epilogues, bias and residual, scales dtypes, the non-default paths
    (ProjectionSpec("bf16", (WeightFormat("bf16", 4, 128, True, "bf16"),), "gelu", True, k_multiple=256), 512, 40, {}),
    (ProjectionSpec("bf16", (WeightFormat("f32", 8, 128, True, "f32"),), "silu", k_multiple=256), 512, 32, {}),
    (ProjectionSpec("f16", (WeightFormat("f16", 8, 64),), "gelu_approx", k_multiple=256), 512, 32, {}),
    (ProjectionSpec("bf16", (q8,), k_multiple=256), 512, 32, {"Q8SPLIT": "0"}),
    (
        ProjectionSpec("bf16", (WeightFormat("bf16", has_bias=True, bias_dtype="bf16"),), k_multiple=64),
        256,
        32,
        {"DENSE": "1"},
    ),
    (ProjectionSpec("bf16", (q4,), k_multiple=256), 512, 32, {"WIDE": "1"}),
    # interleaved K stages: 5 stages over 4 warps (one warp takes two), SwiGLU, dense over 8 warps
    (ProjectionSpec("bf16", (q4,), k_multiple=256), 1280, 32, {"INTERLEAVE": "1"}),
    # x later in a stage: half of it after the first chunks' math (2), one chunk ahead (3)
    (ProjectionSpec("bf16", (q4,), k_multiple=256), 1280, 32, {"LATE": "2"}),
    (ProjectionSpec("bf16", (WeightFormat("bf16", 8, 32),), k_multiple=256), 1280, 32, {"LATE": "3"}),
    (ProjectionSpec("bf16", (q4, q4), "swiglu", k_multiple=256), 768, 16, {"INTERLEAVE": "1"}),
    (ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=64), 320, 32, {"INTERLEAVE": "1"}),
    # rings over 48 KB in dynamic shared memory: SwiGLU with two tiles; 4 tiles of 8 stages
    (ProjectionSpec("bf16", (q4, q4), "swiglu", k_multiple=256), 1024, 48, {"SMEM": "96"}),
    (ProjectionSpec("bf16", (q4,), k_multiple=256), 2048, 80, {"SMEM": "160", "TILES": "4", "STAGES": "8"}),
    (ProjectionSpec("f16", (WeightFormat("f16", has_bias=True, bias_dtype="f16"),) * 3, k_multiple=256), 256, 16, {}),
]


@pytest.mark.parametrize(
    "spec,K,N,settings", VARIANTS, ids=[f"{c[0].name()}-{','.join(c[3]) or 'default'}" for c in VARIANTS]
)
def test_cuda_variants_on_the_cpu_match_float64(env, spec, K, N, settings):
    """Each variant's tensor-core kernel within tolerance at 16 rows, its rows the same bits alone;
    its ring is in dynamic shared memory exactly where the SMEM knob or a measured ring rule
    (MmaRules.ring_rule's KB) asks for more than the 48 KB a kernel declares statically."""
    set_knobs(env, settings)
    art = kernel(spec, 16, TILES)
    assert art.schedule.kind == "mma"
    ring_kb = rules(spec).ring_rule(TILES, 16)[0]
    assert (art.dynamic_shared > 48 * 1024) == ("SMEM" in settings or ring_kb > 48), art.schedule.describe()
    case = Case(spec, K, N, rows=16)
    got = case.run(16, 16)
    case.check(got, 16, f"{spec.name()} {settings}")
    case.invariant(got, f"{spec.name()} {settings}")


SECTOR = [  # (spec, K, N, settings): the sector layout (MmaRules.sector)
    (ProjectionSpec("bf16", (WeightFormat("bf16", 4, 128),), k_multiple=256), 1024, 40, {}),  # chunks of 4 slices
    (ProjectionSpec("f16", (WeightFormat("f16", 8, 128),), k_multiple=256), 1024, 24, {}),
    (ProjectionSpec("bf16", (WeightFormat("bf16", 4, 128),), k_multiple=256), 512, 24, {"STAGED": "0"}),  # direct loads
    (ProjectionSpec("bf16", (q8, q8), "swiglu", k_multiple=256), 512, 16, {"XSECTOR": "1"}),  # asked for at g64
]


@pytest.mark.parametrize(
    "spec,K,N,settings", SECTOR, ids=[f"{c[0].name()}-{','.join(c[3]) or 'default'}" for c in SECTOR]
)
def test_sector_layout_matches_float64_and_is_row_invariant(env, spec, K, N, settings):
    """Lane t's k of a chunk at t * 8 + 32 s: the x loads, the ring's (or global) word loads and
    the unpacking agree - within the float64 tolerance, and rows alike alone and among 5, 16 and 32."""
    set_knobs(env, settings)
    art = kernel(spec, 16, ONE_TILE)
    assert art.schedule.sector and "+ 32 + t * 8)" in art.source, "x not in the sector layout"
    assert ("metile_cp16(" in art.source) == ("STAGED" not in settings)
    case = Case(spec, K, N, rows=32)
    for bucket, rows in ((8, 5), (16, 16), (32, 32)):
        got = case.run(bucket, rows)
        case.check(got, rows, f"{spec.name()} {settings} rows={rows}")
        case.invariant(got, f"{spec.name()} {settings}")


def test_concatenated_outputs_of_unequal_widths_match_float64_and_are_row_invariant():
    """Fused q/k/v of widths 40, 16 and 24 in one accumulator (member boundaries inside 16-column
    tiles): each output within float64's tolerance, and rows alike alone and among 9."""
    spec = ProjectionSpec("bf16", (q4,) * 3, k_multiple=256)
    case = Case(spec, 512, (40, 16, 24), rows=9)
    got = case.run(16, 9)
    assert [y.shape for y in got] == [(9, 40), (9, 16), (9, 24)]
    case.check(got, 9, "q/k/v of unequal widths")
    case.invariant(got, "q/k/v of unequal widths")


def _with_norm(case: Case, seed: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """A random RMSNorm weight g among `case`'s buffers; float64 of bf16(x * g) (rounded once, as
    the kernel's B operand: MLX's bf16 product) and of each row's 1 / sqrt(mean(x^2) + eps), [rows, 1]."""
    g = (rand((case.K,), mx.bfloat16, seed, 0.5) + 1.0).astype(mx.bfloat16)
    case.replace(norm=bits(g))
    x = mx.array(case.x.astype(np.float32)).astype(mx.bfloat16)
    xg = np.array((x * g).astype(mx.float32), np.float64)
    return xg, 1.0 / np.sqrt((case.x**2).mean(axis=1, keepdims=True) + eps)


NORM_CASES = [  # (weight, K, N, k_multiple): RMSNorm fused into the tensor-core kernels
    (q4, 512, 48, 256),  # staged ring
    (q8, 512, 40, 256),
    (WeightFormat("bf16"), 512, 48, 256),  # dense, 8 warps
    (q4, 17 * 64, 32, 64),  # odd group count: direct loads
    (mx_format("nvfp4"), 512, 40, 256),  # microscaled: staged ring
]


@pytest.mark.parametrize("weight,K,N,k_multiple", NORM_CASES, ids=["q4", "q8", "dense", "q4direct", "nvfp4"])
def test_fused_rms_norm_matches_float64_and_keeps_rows_invariant(weight, K, N, k_multiple):
    """spec.norm_eps: y = (bf16(x * g) @ W.T) / sqrt(mean(x^2) + eps), against float64 of that
    formula (x * g rounded to bf16 once, as the kernel's B operand) within one output rounding, f32
    accumulation and 1e-4 for the f32 sum of squares and rsqrt; a row alone equals that row among 5
    and 20, bit for bit, and the several-tile layout gives the one-tile layout's bits."""
    eps = 1e-5
    spec = ProjectionSpec("bf16", (weight,), k_multiple=k_multiple, norm_eps=eps)
    case = Case(spec, K, N, rows=20)
    xg, inv = _with_norm(case, 31, eps)
    exact = (xg @ case.w[0].T) * inv
    mag = (np.abs(xg) @ np.abs(case.w[0]).T) * inv
    by_layout = {}
    for bucket, rows, layout in ((8, 5, ONE_TILE), (32, 20, ONE_TILE), (32, 20, TILES)):
        got = case.run(bucket, rows, layout=layout)
        e = exact[:rows]
        tol = ULP["bf16"] * np.abs(e) + (K + 2) * 2.0**-24 * mag[:rows] + 1e-4 * np.abs(e)
        err = np.abs(values(got[0], "bf16") - e)
        assert (err <= tol).all(), f"rows={rows} layout={layout}: worst error {err.max():.3g}"
        case.invariant(got, f"norm layout={layout}", bucket=1)
        if rows == 20:
            by_layout[layout] = got
    assert same(by_layout[TILES], by_layout[ONE_TILE]), "the column tiles per block changed the bits"


def test_fused_rms_norm_is_refused_where_its_kernel_is_not_the_k_split_one():
    """f16 activations (not written yet) and targets without the tensor-core schedule refuse the
    spec by name, rather than computing x without its norm."""
    spec = ProjectionSpec("f16", (WeightFormat("f16", 4, 64),), k_multiple=256, norm_eps=1e-5)
    with pytest.raises(LowerError, match="RMSNorm"):
        kernel(spec, 8, ONE_TILE)
    with pytest.raises(ValueError, match="RMSNorm"):
        artifact(ProjectionSpec("bf16", spec.weights, k_multiple=256, norm_eps=1e-5), 8, "msl")


@pytest.mark.parametrize("epilogue,count", [("swiglu", 2), (None, 3)], ids=["gate_up", "qkv"])
def test_fused_rms_norm_before_swiglu_and_concatenated_weights(epilogue, count):
    """The norm's two consumers in a transformer block: the SwiGLU gate/up (two accumulators) and
    q/k/v (three weights' columns in one accumulator), against float64 of the formula above."""
    eps = 1e-6
    spec = ProjectionSpec("bf16", (q4,) * count, epilogue, k_multiple=256, norm_eps=eps)
    K, rows = 512, 9
    case = Case(spec, K, 32 if epilogue else (32, 16, 16), rows=rows)
    xg, inv = _with_norm(case, 32, eps)
    z = [(xg @ w.T) * inv for w in case.w]
    mags = [(np.abs(xg) @ np.abs(w).T) * inv for w in case.w]
    got = case.run(16, rows)
    if epilogue == "swiglu":
        exact, tol = [z[0] / (1 + np.exp(-z[0])) * z[1]], [1e-2 * np.abs(z[0] * z[1]).max()]
    else:
        exact = z
        tol = [(K + 2) * 2.0**-24 * m + 1e-4 * np.abs(e) for e, m in zip(z, mags)]
    for y, e, t in zip(got, exact, tol):
        err = np.abs(values(y, "bf16") - e)
        assert (err <= ULP["bf16"] * np.abs(e) + t).all(), f"worst error {err.max():.3g}"
    case.invariant(got, f"norm {epilogue or 'q/k/v'}", bucket=1)
