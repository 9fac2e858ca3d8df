"""The generated CUDA kernels run on the CPU (mlx_metile/emu/cuda_host.py: the kernel text
itself, with its inline PTX replaced by C++), checked against float64 references with the
tolerances of the H200 matrix (bench/h200.py), and for row and tile invariance bit for bit.
What this cannot check - the PTX of mma.sync, cp.async and lop3 - runs on the GPU."""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
import pytest

from mlx_metile.compiler.lower import LowerError
from mlx_metile.emu import cuda_host
from mlx_metile.reference import dequantize_exact
from mlx_metile.runtime import compile_projection
from mlx_metile.spec import ProjectionSpec, WeightFormat

from ..helpers import bits, rand

MX = {"bf16": mx.bfloat16, "f16": mx.float16, "f32": mx.float32}
ULP = {"bf16": 2.0**-8, "f16": 2.0**-11}
_ERF = np.vectorize(math.erf)
EPILOGUES = {  # float64 references of the elementwise epilogues
    None: lambda z: z,
    "gelu": lambda z: 0.5 * z * (1 + _ERF(z / math.sqrt(2))),
    "gelu_approx": lambda z: 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3))),
    "silu": lambda z: z / (1 + np.exp(-z)),
}


@pytest.fixture(autouse=True)
def cuda_kernels(monkeypatch):
    """CUDA kernels for sm_90 under the default settings, none cached from another test."""
    monkeypatch.setenv("MLX_METILE_CUDA_ARCH", "sm_90")
    compile_projection.cache_clear()
    yield
    compile_projection.cache_clear()


def _values(bits: np.ndarray, act: str) -> np.ndarray:
    if act == "bf16":
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return bits.view(np.float16).astype(np.float64)


class Case:
    """Random data for `spec` (bf16/f16 activations) over K and N columns per weight (or a
    tuple of each weight's), its kernel buffers by parameter name, and the float64 values of
    x and of each weight."""

    def __init__(self, spec: ProjectionSpec, K: int, N: int | tuple[int, ...], rows: int, seed: int = 0):
        self.Ns = tuple(N) if isinstance(N, tuple) else (N,) * len(spec.weights)
        self.spec, self.K, self.N = spec, K, self.Ns[0]
        act = MX[spec.act_dtype]
        x = rand((rows, K), act, seed)
        self.buffers = {"x": bits(x)}
        self.x = np.array(x.astype(mx.float32), np.float64)
        self.w = []
        for i, f in enumerate(spec.weights):
            dense = rand((self.Ns[i], K), MX[f.dtype] if not f.quantized else act, seed + 1 + i, 0.05)
            if f.quantized:
                wq, s, b = mx.quantize(dense, group_size=f.group_size, bits=f.bits)
                s, b = s.astype(MX.get(f.dtype, mx.float32)), b.astype(MX.get(f.dtype, mx.float32))
                self.buffers |= {f"w{i}": bits(wq), f"scales{i}": bits(s), f"biases{i}": bits(b)}
                self.w.append(dequantize_exact(wq, s, b, f.group_size, f.bits))
            else:
                self.buffers[f"w{i}"] = bits(dense)
                self.w.append(np.array(dense.astype(mx.float32), np.float64))
        self.bias = []
        for i, f in enumerate(spec.weights):
            b = rand((self.Ns[i],), MX[f.bias_dtype], seed + 10 + i) if f.has_bias else None
            if b is not None:
                self.buffers[f"bias{i}"] = bits(b)
            self.bias.append(0.0 if b is None else np.array(b.astype(mx.float32), np.float64))
        self.residual = 0.0
        if spec.has_residual:
            r = rand((rows, self.N), act, seed + 20)
            self.buffers["residual"] = bits(r)
            self.residual = np.array(r.astype(mx.float32), np.float64)

    def run(self, bucket: int, rows: int, layout: int = 1) -> list[np.ndarray]:
        """The CUDA kernel of `bucket` in column `layout` (lower_mma_staged.column_layout; 1:
        one tile) over the first `rows` rows; its outputs' bits."""
        art = compile_projection(self.spec, bucket, "cuda", layout)
        named = dict(self.buffers)
        for name in ("x", "residual"):  # the first `rows` rows
            if name in named:
                named[name] = np.ascontiguousarray(named[name][:rows])
        n_out = self.spec.outputs
        outs = {f"y{j}": np.zeros((rows, n), np.uint16) for j, n in enumerate(self.Ns[:n_out])}
        buffers = [named.get(p.name, outs.get(p.name)) for p in art.params if p.kind == "buffer"]
        scalars = {"M": rows, "K": self.K, **{f"N{i}": n for i, n in enumerate(self.Ns)}}
        cols = self.N if self.spec.epilogue == "swiglu" else sum(self.Ns)
        cuda_host.run(art, buffers, scalars, rows, cols)
        return [outs[f"y{j}"] for j in range(n_out)]

    def check(self, got: list[np.ndarray], rows: int, what: str) -> None:
        """Each output against float64 within one rounding of the output plus f32
        accumulation (K * 2**-24 * sum |x||w|), as the H200 matrix checks; epilogues
        other than the identity get 1e-4 of the largest output more (their f32 math)."""
        x, act, spec = self.x[:rows], self.spec.act_dtype, self.spec
        z = [x @ w.T + b for w, b in zip(self.w, self.bias)]
        mags = [np.abs(x) @ np.abs(w).T for w in self.w]
        if spec.epilogue == "swiglu":
            exact = [z[0] / (1 + np.exp(-z[0])) * z[1]]
            slack = [1e-2 * np.abs(z[0] * z[1]).max()]
        else:
            exact = [EPILOGUES[spec.epilogue](zi) for zi in (z if self.spec.outputs > 1 else z[:1])]
            slack = [0.0 if spec.epilogue is None else 1e-4 * np.abs(e).max() for e in exact]
        if spec.has_residual:
            exact[0] = exact[0] + self.residual[:rows]
        for j, (y, e, mag, sl) in enumerate(zip(got, exact, mags, slack)):
            tol = ULP[act] * np.abs(e) + (self.K + 2) * 2.0**-24 * mag + sl
            err = np.abs(_values(y, act) - e)
            assert (err <= tol).all(), f"{what} y{j}: worst error {err.max():.3g}, tolerance there {tol.max():.3g}"


q4 = WeightFormat("bf16", 4, 64)
CASES = [  # (spec, K, N): every schedule the CUDA op takes at 1..32 rows
    (ProjectionSpec("bf16", (q4,), k_multiple=256), 512, 96),  # staged ring, 4-bit
    (ProjectionSpec("bf16", (WeightFormat("bf16", 8, 64),), k_multiple=256), 512, 48),  # 8-bit nibble split
    (ProjectionSpec("f16", (WeightFormat("f16", 4, 32),), k_multiple=256), 512, 40),  # f16, group 32, N tail
    (ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=256), 512, 48),  # dense, 8 warps
    (ProjectionSpec("bf16", (q4, q4), "swiglu", k_multiple=256), 512, 32),  # gate/up SwiGLU
    (ProjectionSpec("bf16", (q4,) * 3, k_multiple=256), 512, 24),  # q/k/v in one accumulator
    (ProjectionSpec("bf16", (q4,), k_multiple=64), 17 * 64, 32),  # odd group count: direct loads
    (ProjectionSpec("f16", (WeightFormat("f16"),), k_multiple=32), 96, 40),  # split-K (warp shuffles)
]


@pytest.mark.parametrize("spec,K,N", CASES, ids=[c[0].name() for c in CASES])
def test_cuda_kernels_on_the_cpu_match_float64_and_are_row_invariant(spec, K, N):
    case = Case(spec, K, N, rows=20)
    alone = case.run(8, 1)
    for bucket, rows in ((8, 3), (32, 20)):
        got = case.run(bucket, rows)
        case.check(got, rows, f"{spec.name()} rows={rows}")
        for y, y1 in zip(got, alone):  # row 0 alone equals row 0 among others, bit for bit
            assert np.array_equal(y[:1], y1), f"{spec.name()}: row 0 differs between 1 and {rows} rows"


def test_two_column_tiles_give_the_bits_of_one(monkeypatch):
    """The staged ring with two 16-column tiles per block (wide, deep products) computes
    what one tile does, bit for bit, in every row bucket; with smaller stages SwiGLU's
    64-row ring copies its scales in two passes and matches too; 8-bit group 128 has two
    tiles only at 32 rows, in dynamic shared memory (lower_mma_staged.WIDE_RING_KB)."""
    every = ((8, 5), (16, 16), (32, 20))
    for spec, K, N, groups, buckets in (
        (ProjectionSpec("bf16", (q4,), k_multiple=256), 512, 80, None, every),
        (ProjectionSpec("bf16", (WeightFormat("bf16", 8, 64),), k_multiple=256), 512, 48, None, every),
        # at 32 rows two SwiGLU tiles would hold too many partial sums: one tile there
        (ProjectionSpec("bf16", (q4, q4), "swiglu", k_multiple=256), 512, 48, "2", every[:2]),
        (ProjectionSpec("bf16", (WeightFormat("bf16", 8, 128),), k_multiple=256), 1024, 48, None, every[2:]),
    ):
        if groups:  # (rows padded by 16 bytes, so that two such tiles' rings fit 48 KB)
            monkeypatch.setenv("MLX_METILE_CUDA_MMA_GROUPS", groups)
            monkeypatch.setenv("MLX_METILE_CUDA_MMA_BANKPAD", "0")
            compile_projection.cache_clear()
        case = Case(spec, K, N, rows=20)
        for bucket, rows in buckets:
            assert compile_projection(spec, bucket, "cuda", 0).schedule.BN == 32
            two = case.run(bucket, rows, layout=0)
            one = case.run(bucket, rows, layout=1)
            case.check(two, rows, f"{spec.name()} two tiles rows={rows}")
            assert all(np.array_equal(a, b) for a, b in zip(two, one)), (spec.name(), bucket)


@pytest.mark.parametrize("bits,layout", [(8, 4), (4, 5), (8, 5), (0, 5)])
def test_tiles_of_larger_row_buckets_keep_the_bits_of_the_one_tile_layouts(bits, layout):
    """lower_mma_staged.bucket_layout gives single products of ONE_WAVE / ONE_TILE_WIDE shapes TILES
    in some row buckets: a row computed alone in the one-tile layout (1 row) equals the same row
    among 20 in TILES (32 rows), bit for bit."""
    from mlx_metile.compiler.lower_mma_staged import TILES, bucket_layout

    K = 2048 if layout == 5 else 1536
    weight = WeightFormat("bf16", bits, 64) if bits else WeightFormat("bf16")
    assert bucket_layout(layout, K, 32, weight) == TILES
    case = Case(ProjectionSpec("bf16", (weight,), k_multiple=256), 512, 48, rows=20)
    alone = case.run(1, 1, layout=layout)
    among = case.run(32, 20, layout=TILES)
    case.check(among, 20, f"{weight} TILES rows=20")
    assert np.array_equal(among[0][:1], alone[0])


SPREAD_CASES = [  # (spec, K, N, warps): the SPREAD layout of very narrow, deep products
    (ProjectionSpec("bf16", (q4,), k_multiple=256), 2048, 24, 8),
    (ProjectionSpec("bf16", (WeightFormat("bf16", 8, 64),), k_multiple=256), 2048, 16, 8),
    (ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=256), 1024, 24, 16),
]


@pytest.mark.parametrize("spec,K,N,warps", SPREAD_CASES, ids=[c[0].name() for c in SPREAD_CASES])
def test_spread_layout_splits_k_over_more_warps_and_stays_row_invariant(spec, K, N, warps):
    """lower_mma_staged.SPREAD: one tile, K over 8 (4/8-bit) or 16 (dense) warps in every row
    bucket, within tolerance and with row 0's bits the same alone and among 3, 16 and 32 rows."""
    from mlx_metile.compiler.lower_mma_staged import SPREAD

    case = Case(spec, K, N, rows=20)
    for bucket in (8, 16, 32):
        art = compile_projection(spec, bucket, "cuda", SPREAD)
        assert (art.schedule.SG, art.schedule.BN) == (warps, 16), art.schedule.describe()
        assert "metile_cp16" in art.source, "the spread layout keeps the staged ring"
    alone = case.run(8, 1, SPREAD)
    for bucket, rows in ((8, 3), (16, 16), (32, 20)):
        got = case.run(bucket, rows, SPREAD)
        case.check(got, rows, f"{spec.name()} spread rows={rows}")
        assert all(np.array_equal(y[:1], y1) for y, y1 in zip(got, alone)), f"{spec.name()}: row 0 differs"


@pytest.mark.parametrize("act", ["bf16", "f16"])
def test_one_wave_dense_products_split_k_over_two_warps_and_stay_row_invariant(act):
    """lower_mma_staged.ONE_WAVE_DENSE_WARPS: a single dense product in ONE_WAVE takes K in 2 ranges
    in every row bucket, within tolerance and with row 0's bits the same alone and among 3, 16 and
    20 rows."""
    from mlx_metile.compiler.lower_mma_staged import ONE_WAVE

    spec = ProjectionSpec(act, (WeightFormat(act),), k_multiple=256)
    case = Case(spec, 1536, 40, rows=20)
    alone = case.run(8, 1, ONE_WAVE)
    for bucket, rows in ((8, 3), (16, 16), (32, 20)):
        assert compile_projection(spec, bucket, "cuda", ONE_WAVE).schedule.SG == 2
        got = case.run(bucket, rows, ONE_WAVE)
        case.check(got, rows, f"{spec.name()} one wave rows={rows}")
        assert all(np.array_equal(y[:1], y1) for y, y1 in zip(got, alone)), f"{spec.name()}: row 0 differs"


def cancelling(case: Case, span: int, scale: float = 4096.0) -> Case:
    """`case` with its weight made of one block of `span` k repeated along K and x's rows
    made of one vector repeated with alternating signs times `scale` (plus noise): the K
    ranges' partial sums, about +-scale, cancel to a small output, so that adding them in
    another order changes its bf16 bits (outputs of random data round such changes away)."""
    f, K, rows = case.spec.weights[0], case.K, case.x.shape[0]
    block = rand((case.N, span), mx.bfloat16, 7, 0.05)
    dense = mx.concatenate([block] * (K // span), axis=1)
    wq, s, b = mx.quantize(dense, group_size=f.group_size, bits=f.bits)
    case.buffers |= {"w0": bits(wq), "scales0": bits(s), "biases0": bits(b)}
    case.w = [dequantize_exact(wq, s, b, f.group_size, f.bits)]
    v = np.array(rand((rows, span), mx.float32, 8))
    signs = np.repeat((-1.0) ** np.arange(K // span), span)
    x = np.tile(v, K // span) * signs * scale + np.array(rand((rows, K), mx.float32, 9))
    xb = mx.array(x.astype(np.float32)).astype(mx.bfloat16)
    case.buffers["x"], case.x = bits(xb), np.array(xb.astype(mx.float32), np.float64)
    return case


q8 = WeightFormat("bf16", 8, 64)
DEEP_CASES = [  # (spec, K, N): the DEEP layout (8-bit weights). K = 1280: ranges of 2 stages,
    # the last three empty; K = 2560: ranges of 3 stages, the seventh of 2 (its warp's first
    # range never reaches its end) and the eighth empty
    (ProjectionSpec("bf16", (q8,), k_multiple=256), 1280, 24),
    (ProjectionSpec("bf16", (q8,), k_multiple=256), 2560, 16),
]


@pytest.mark.parametrize("spec,K,N", DEEP_CASES, ids=[f"K={c[1]}" for c in DEEP_CASES])
def test_deep_layout_two_k_ranges_per_warp_give_the_bits_of_a_warp_each(monkeypatch, spec, K, N):
    """lower_mma_staged.DEEP: K in 8 ranges - 8 warps at up to 8 rows, 4 warps of two ranges
    each at 16 and 32 rows. Row 0's bits are the same alone and among 3, 16 and 32 rows, and
    the 32-row kernel of 4 warps gives the bits of the one with a warp per range."""
    from mlx_metile.compiler.lower_mma_staged import DEEP

    case = cancelling(Case(spec, K, N, rows=20), 128)
    warps = {b: compile_projection(spec, b, "cuda", DEEP).schedule for b in (8, 16, 32)}
    assert [(s.SG, s.splits or s.SG) for s in warps.values()] == [(8, 8), (4, 8), (4, 8)], warps
    alone = case.run(8, 1, DEEP)
    got = {}
    for bucket, rows in ((8, 3), (16, 16), (32, 20)):
        got[bucket] = case.run(bucket, rows, DEEP)
        case.check(got[bucket], rows, f"{spec.name()} deep rows={rows}")
        assert all(np.array_equal(y[:1], y1) for y, y1 in zip(got[bucket], alone)), f"{spec.name()}: row 0 differs"
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_WARPS", "8")
    compile_projection.cache_clear()
    assert compile_projection(spec, 32, "cuda", DEEP).schedule.SG == 8
    eight = case.run(32, 20, DEEP)
    assert all(np.array_equal(a, b) for a, b in zip(got[32], eight)), "two ranges per warp changed the sums"
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_WARPS", "4")  # 4 ranges: another order, other bits
    compile_projection.cache_clear()
    assert not all(np.array_equal(a, b) for a, b in zip(case.run(32, 20, DEEP), eight)), "the check cannot fail"


def test_deep_layout_with_concatenated_weights(monkeypatch):
    """The DEEP layout's K ranges for q/k/v in one accumulator: within tolerance, row 0 the
    same alone and among 16 and 32 rows, and the 32-row kernel of 4 warps equal to the one
    with a warp per range. SwiGLU's rings (two accumulators) would not fit 8 warps' 2 stages
    in 48 KB: it keeps a warp per range."""
    from mlx_metile.compiler.lower_mma_staged import DEEP

    swiglu = ProjectionSpec("bf16", (q8, q8), "swiglu", k_multiple=256)
    assert compile_projection(swiglu, 32, "cuda", DEEP).schedule.splits == 0
    spec = ProjectionSpec("bf16", (q8,) * 3, k_multiple=256)
    case = Case(spec, 2560, 24, rows=20)
    assert compile_projection(spec, 32, "cuda", DEEP).schedule.splits == 8
    alone = case.run(8, 1, DEEP)
    got = {}
    for bucket, rows in ((16, 16), (32, 20)):
        got[bucket] = case.run(bucket, rows, DEEP)
        case.check(got[bucket], rows, f"{spec.name()} deep rows={rows}")
        assert all(np.array_equal(y[:1], y1) for y, y1 in zip(got[bucket], alone)), f"{spec.name()}: row 0 differs"
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_WARPS", "8")
    compile_projection.cache_clear()
    assert all(np.array_equal(a, b) for a, b in zip(got[32], case.run(32, 20, DEEP)))


SWIZZLED = [  # (spec, K, N, settings): rows of 64, 128 and 256 bytes, dense, SwiGLU, 3 stages
    (ProjectionSpec("bf16", (q4,), k_multiple=256), 1024, 40, {}),
    (ProjectionSpec("bf16", (q4,), k_multiple=256), 1024, 40, {"GROUPS": "2"}),
    (ProjectionSpec("bf16", (q4,), k_multiple=512), 1024, 40, {"GROUPS": "8", "STAGES": "2"}),
    (ProjectionSpec("bf16", (q8,), k_multiple=256), 1024, 24, {"STAGES": "3", "SMEM": "55"}),
    (ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=256), 512, 24, {}),
    (ProjectionSpec("bf16", (q4, q4), "swiglu", k_multiple=256), 1024, 24, {}),
]


@pytest.mark.parametrize(
    "spec,K,N,settings", SWIZZLED, ids=[f"{c[0].name()}-{','.join(c[3]) or 'default'}" for c in SWIZZLED]
)
def test_swizzled_rings_give_the_bits_of_padded_ones(monkeypatch, spec, K, N, settings):
    """MLX_METILE_CUDA_MMA_SWIZZLE=1 moves bytes within the ring only: every output bit is
    the padded ring's, at 3 and 16 rows."""
    for name, value in settings.items():
        monkeypatch.setenv(f"MLX_METILE_CUDA_MMA_{name}", value)
    compile_projection.cache_clear()
    case = Case(spec, K, N, rows=16)
    padded = [case.run(8, 3), case.run(16, 16)]
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_SWIZZLE", "1")
    compile_projection.cache_clear()
    art = compile_projection(spec, 16, "cuda", 1)
    assert "metile_cp16(" in art.source and "^ (g & " in art.source, "not the swizzled staged ring"
    swizzled = [case.run(8, 3), case.run(16, 16)]
    case.check(swizzled[1], 16, f"{spec.name()} swizzled")
    for a, b in zip(padded, swizzled):
        assert all(np.array_equal(x, y) for x, y in zip(a, b)), f"{spec.name()} {settings}: swizzling changed bits"


VARIANTS = [  # (spec, K, N, settings): epilogues, bias and residual, scales dtypes, the non-default paths
    (ProjectionSpec("bf16", (WeightFormat("bf16", 4, 128, True, "bf16"),), "gelu", True, k_multiple=256), 512, 40, {}),
    (ProjectionSpec("bf16", (WeightFormat("f32", 8, 128, True, "f32"),), "silu", k_multiple=256), 512, 32, {}),
    (ProjectionSpec("f16", (WeightFormat("f16", 8, 64),), "gelu_approx", k_multiple=256), 512, 32, {}),
    (ProjectionSpec("bf16", (WeightFormat("bf16", 8, 64),), k_multiple=256), 512, 32, {"Q8SPLIT": "0"}),
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
def test_cuda_variants_on_the_cpu_match_float64(monkeypatch, spec, K, N, settings):
    for name, value in settings.items():
        monkeypatch.setenv(f"MLX_METILE_CUDA_MMA_{name}", value)
    compile_projection.cache_clear()
    art = compile_projection(spec, 16, "cuda")
    assert art.schedule.kind == "mma"
    from mlx_metile.compiler.lower_mma_staged import TILES, ring_rule

    # over 48 KB: the SMEM knob, or dense weights' wide rings at 16 rows (ring_rule)
    assert (art.dynamic_shared > 48 * 1024) == ("SMEM" in settings or ring_rule(spec, TILES, 16) != (0, 0))
    case = Case(spec, K, N, rows=16)
    alone = case.run(8, 1)
    got = case.run(16, 16)
    case.check(got, 16, f"{spec.name()} {settings}")
    assert all(np.array_equal(y[:1], y1) for y, y1 in zip(got, alone)), f"{spec.name()}: row 0 differs"


SECTOR = [  # (spec, K, N, settings): the sector layout (lower_mma.sector_layout)
    (ProjectionSpec("bf16", (WeightFormat("bf16", 4, 128),), k_multiple=256), 1024, 40, {}),  # the default at g128
    (ProjectionSpec("f16", (WeightFormat("f16", 8, 128),), k_multiple=256), 1024, 24, {}),
    (ProjectionSpec("bf16", (WeightFormat("bf16", 4, 128),), k_multiple=256), 512, 24, {"STAGED": "0"}),  # direct loads
    (ProjectionSpec("bf16", (q8, q8), "swiglu", k_multiple=256), 512, 16, {"XSECTOR": "1"}),  # asked for at g64
]


@pytest.mark.parametrize(
    "spec,K,N,settings", SECTOR, ids=[f"{c[0].name()}-{','.join(c[3]) or 'default'}" for c in SECTOR]
)
def test_sector_layout_matches_float64_and_is_row_invariant(monkeypatch, spec, K, N, settings):
    """Lane t's k of a chunk at t * 8 + 32 s: the x loads, the ring's (or global) word loads and
    the unpacking agree - within the float64 tolerance, and row 0 alike at 1, 5, 16 and 32 rows."""
    for name, value in settings.items():
        monkeypatch.setenv(f"MLX_METILE_CUDA_MMA_{name}", value)
    compile_projection.cache_clear()
    source = compile_projection(spec, 16, "cuda", 1).source
    assert "+ 32 + t * 8)" in source, "x not in the sector layout"
    assert ("metile_cp16(" in source) == ("STAGED" not in settings)
    case = Case(spec, K, N, rows=32)
    alone = case.run(8, 1)
    for bucket, rows in ((8, 5), (16, 16), (32, 32)):
        got = case.run(bucket, rows)
        case.check(got, rows, f"{spec.name()} {settings} rows={rows}")
        assert all(np.array_equal(y[:1], y1) for y, y1 in zip(got, alone)), f"{spec.name()}: row 0 differs at {rows}"


STRIDED = [  # (spec, K, N, bucket): where the copies are strided by default; N ends in a partial block
    (ProjectionSpec("bf16", (q4,), k_multiple=256), 1024, 40, 32),
    (ProjectionSpec("bf16", (q4, q4), "swiglu", k_multiple=256), 1024, 24, 16),  # lower_mma_staged.gate_up_16
    (ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=256), 512, 24, 32),
]


@pytest.mark.parametrize("spec,K,N,bucket", STRIDED, ids=[f"{c[0].name()}-{c[3]}" for c in STRIDED])
def test_strided_copies_give_the_bits_of_per_piece_ones(monkeypatch, spec, K, N, bucket):
    """The ring's copies from one pointer per accumulator (pieces past the last column copy
    0 bytes) fill the ring as a pointer per piece does: every output bit alike."""
    case = Case(spec, K, N, rows=bucket)
    assert "cwb0" in compile_projection(spec, bucket, "cuda", 0).source, "copies not strided"
    strided = case.run(bucket, bucket, 0)
    case.check(strided, bucket, f"{spec.name()} strided")
    monkeypatch.setenv("MLX_METILE_CUDA_MMA_STRIDED", "0")
    compile_projection.cache_clear()
    assert "cwb0" not in compile_projection(spec, bucket, "cuda", 0).source
    per_piece = case.run(bucket, bucket, 0)
    assert all(np.array_equal(a, b) for a, b in zip(strided, per_piece)), f"{spec.name()}: strided copies changed bits"


def test_unknown_inline_ptx_is_refused_by_name():
    """A PTX statement the emulator has no C++ for stops the translation (it never runs as
    something else), and so does text that is not a generated kernel."""
    source = '#include <cuda_fp16.h>\n__device__ void f(unsigned d) { asm("brev.b32 %0, %0;" : "+r"(d)); }\n'
    with pytest.raises(cuda_host.CudaEmulationError, match="brev.b32"):
        cuda_host.host_source(source)
    with pytest.raises(cuda_host.CudaEmulationError, match="not a generated CUDA kernel"):
        cuda_host.host_source("kernel void f() {}")


def test_concatenated_outputs_of_unequal_widths_match_float64_and_are_row_invariant():
    """Fused q/k/v of widths 40, 16 and 24 in one accumulator (member boundaries inside 16-column
    tiles): each output within float64's tolerance, and row 0 alike alone and among 9 rows."""
    spec = ProjectionSpec("bf16", (q4,) * 3, k_multiple=256)
    case = Case(spec, 512, (40, 16, 24), rows=9)
    alone = case.run(8, 1)
    got = case.run(16, 9)
    assert [y.shape for y in got] == [(9, 40), (9, 16), (9, 24)]
    case.check(got, 9, "q/k/v of unequal widths")
    assert all(np.array_equal(y[:1], y1) for y, y1 in zip(got, alone))


XSHARE = [  # (spec, K, N, bucket, settings; {}: the default): K = 1280 holds 20 groups, K ranges 8, 8, 4, 0
    (ProjectionSpec("bf16", (q4,), k_multiple=256), 1280, 80, 16, {"XSHARE": "4"}),
    (ProjectionSpec("bf16", (q4, q4), "swiglu", k_multiple=256), 1280, 40, 32, {}),
    (ProjectionSpec("bf16", (q4, q4), "swiglu", k_multiple=256), 1280, 40, 16, {"XSHARE": "2"}),
    (ProjectionSpec("bf16", (WeightFormat("bf16", 8, 64),), k_multiple=256), 1024, 48, 32, {"XSHARE": "2"}),
    (ProjectionSpec("f16", (WeightFormat("f16", 4, 128),), k_multiple=256), 1024, 48, 16, {"XSHARE": "8"}),  # sector
    (ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=256), 512, 48, 32, {"XSHARE": "4"}),  # 8 K ranges
    (ProjectionSpec("bf16", (q4,) * 3, k_multiple=256), 512, (40, 24, 24), 16, {"XSHARE": "2"}),  # q/k/v
]


def _set(monkeypatch, settings: dict[str, str]) -> None:
    for name, value in settings.items():
        monkeypatch.setenv(f"MLX_METILE_CUDA_MMA_{name}", value)
    compile_projection.cache_clear()


@pytest.mark.parametrize(
    "spec,K,N,bucket,settings", XSHARE, ids=[f"{c[0].name()}-{c[3]}-{'-'.join(c[4].values())}" for c in XSHARE]
)
def test_shared_x_gives_the_bits_of_the_k_split_kernel(monkeypatch, spec, K, N, bucket, settings):
    """Warps that own their columns over all of K, x staged once per block (lower_mma_xshare),
    add the K ranges' sums in the K-split kernel's order: every output bit equals that
    kernel's (an empty K range, a partial block of columns and rows past M included), and row 0
    equals row 0 computed alone by the 8-row kernel."""
    _set(monkeypatch, settings)
    schedule = compile_projection(spec, bucket, "cuda", 0).schedule
    assert schedule.xshare == int(settings.get("XSHARE", 4))
    assert schedule.SG == schedule.xshare
    case = Case(spec, K, N, rows=bucket)
    rows = bucket - 3
    shared = case.run(bucket, rows, 0)
    case.check(shared, rows, f"{spec.name()} shared x rows={rows}")
    alone = case.run(8, 1, 0)
    assert all(np.array_equal(y[:1], y1) for y, y1 in zip(shared, alone)), f"{spec.name()}: row 0 differs"
    _set(monkeypatch, {"XSHARE": "0"})
    assert compile_projection(spec, bucket, "cuda", 0).schedule.xshare == 0
    split = case.run(bucket, rows, 0)
    assert all(np.array_equal(a, b) for a, b in zip(shared, split)), f"{spec.name()}: shared x changed bits"


def test_shared_x_adds_the_k_ranges_in_order(monkeypatch):
    """On data whose K ranges' sums are about +S, +S, -S, -S (cancelling: another order of
    adding them changes the bf16 bits), the shared-x kernel gives the K-split kernel's bits;
    8 K ranges instead of 4 do not (the check can fail)."""
    spec = ProjectionSpec("bf16", (q4,), k_multiple=256)
    case = cancelling(Case(spec, 2048, 48, rows=16), 1024)
    _set(monkeypatch, {"XSHARE": "0"})
    split = case.run(16, 16, 0)
    for warps in ("2", "4", "8"):
        _set(monkeypatch, {"XSHARE": warps})
        assert all(np.array_equal(a, b) for a, b in zip(case.run(16, 16, 0), split)), f"{warps} warps"
    _set(monkeypatch, {"XSHARE": "0", "WARPS": "8"})
    assert not all(np.array_equal(a, b) for a, b in zip(case.run(16, 16, 0), split)), "the check cannot fail"


def test_shared_x_is_the_default_only_for_the_4_bit_gate_up_at_32_rows():
    """Where the H200 measured it faster (lower_mma_xshare.xshare_default)."""
    gate_up = ProjectionSpec("bf16", (q4, q4), "swiglu", k_multiple=256)
    single = ProjectionSpec("bf16", (q4,), k_multiple=256)
    q8 = WeightFormat("bf16", 8, 64)
    assert compile_projection(gate_up, 32, "cuda", 0).schedule.xshare == 4
    assert compile_projection(gate_up, 16, "cuda", 0).schedule.xshare == 0
    assert compile_projection(gate_up, 32, "cuda", 1).schedule.xshare == 0  # narrow: the one-tile layout
    assert compile_projection(gate_up, 32, "cuda", 5).schedule.xshare == 4  # ONE_TILE_WIDE (512 blocks)
    assert compile_projection(gate_up, 16, "cuda", 5).schedule.xshare == 0
    assert compile_projection(single, 32, "cuda", 0).schedule.xshare == 0
    gate_up_q8 = ProjectionSpec("bf16", (q8, q8), "swiglu", k_multiple=256)
    assert compile_projection(gate_up_q8, 32, "cuda", 0).schedule.xshare == 0
    g32 = WeightFormat("bf16", 4, 32)  # group 32: not measured
    assert (
        compile_projection(ProjectionSpec("bf16", (g32, g32), "swiglu", k_multiple=256), 32, "cuda", 0).schedule.xshare
        == 0
    )


def test_shared_x_over_the_shared_memory_of_a_block_is_refused(monkeypatch):
    """Settings whose rings would not fit one block's shared memory fail at compile time, by name."""
    _set(monkeypatch, {"XSHARE": "8", "TILES": "4", "STAGES": "8"})
    with pytest.raises(LowerError, match="shared memory"):
        compile_projection(ProjectionSpec("bf16", (q4,), k_multiple=256), 16, "cuda", 0)


def test_dense_rings_in_dynamic_shared_memory_give_the_bits_of_the_48_kb_ones(monkeypatch):
    """lower_mma_staged.ring_rule: dense weights take two tiles in a 100 KB ring at 16-32 rows
    of wide products, and 3 stages in 80 KB at 1-4 rows of one-tile ones (not in ONE_TILE_WIDE,
    which keeps 48 KB); both move loads only, so every output bit equals the 48 KB ring's
    (MLX_METILE_CUDA_MMA_SMEM=48)."""
    from mlx_metile.compiler.lower_mma_staged import DEEP, ONE_TILE, ONE_TILE_WIDE, TILES, ring_rule

    spec = ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=256)
    case = Case(spec, 512, 48, rows=16)
    for layout, bucket, rows, bn, stages in ((TILES, 16, 16, 32, 2), (ONE_TILE, 4, 3, 16, 3), (DEEP, 4, 4, 16, 3)):
        _set(monkeypatch, {})
        art = compile_projection(spec, bucket, "cuda", layout)
        assert art.schedule.BN == bn and art.dynamic_shared > 48 * 1024, (layout, bucket)
        assert f"metile_cp_wait<{stages - 2}>" in art.source, (layout, bucket)
        wide = case.run(bucket, rows, layout)
        case.check(wide, rows, f"dense ring layout={layout} rows={rows}")
        _set(monkeypatch, {"SMEM": "48"})
        assert compile_projection(spec, bucket, "cuda", layout).dynamic_shared == 0
        assert all(np.array_equal(a, b) for a, b in zip(wide, case.run(bucket, rows, layout))), (layout, bucket)
        monkeypatch.delenv("MLX_METILE_CUDA_MMA_SMEM")
    _set(monkeypatch, {})
    assert compile_projection(spec, 8, "cuda", ONE_TILE).dynamic_shared == 0  # 8 rows: the 48 KB ring
    assert compile_projection(spec, 4, "cuda", ONE_TILE_WIDE).dynamic_shared == 0
    deep = case.run(4, 3, ONE_TILE)
    assert all(np.array_equal(a, b) for a, b in zip(deep, case.run(4, 3, ONE_TILE_WIDE)))
    swiglu = ProjectionSpec("bf16", (WeightFormat("bf16"),) * 2, "swiglu", k_multiple=256)
    assert ring_rule(swiglu, TILES, 32) == ring_rule(swiglu, ONE_TILE, 1) == (0, 0)  # single products only


def _same_bits_as_4_stages(monkeypatch, case: Case, bucket: int, rows: int, layout: int, stages: int, what: str):
    """The default kernel of `bucket` in `layout` has a ring of `stages` (its loop waits for all but
    stages - 2 copies), is within float64's tolerance, and gives the bits of the 4-stage ring's."""
    spec = case.spec
    monkeypatch.delenv("MLX_METILE_CUDA_MMA_STAGES", raising=False)
    _set(monkeypatch, {})
    assert f"metile_cp_wait<{stages - 2}>" in compile_projection(spec, bucket, "cuda", layout).source
    fewer = case.run(bucket, rows, layout)
    case.check(fewer, rows, f"{stages}-stage ring {what} rows={rows}")
    _set(monkeypatch, {"STAGES": "4"})
    assert "metile_cp_wait<2>" in compile_projection(spec, bucket, "cuda", layout).source
    assert all(np.array_equal(a, b) for a, b in zip(fewer, case.run(bucket, rows, layout))), rows


@pytest.mark.parametrize("group", [64, 128])
def test_4_bit_one_tile_rings_of_3_stages_give_the_bits_of_4(monkeypatch, group):
    """lower_mma_staged.ring_rule: single 4-bit products in DEEP (ONE_TILE's kernel for 4-bit
    weights; ONE_TILE and ONE_TILE_WIDE by ONE_TILE_STAGES, below) take rings of 3 stages at 1-8
    rows (at 16 as DEEP_STAGES says, and 4 with the STAGES knob); the stages move loads only, so
    every output bit equals the 4-stage ring's."""
    from mlx_metile.compiler.lower_mma_staged import DEEP, SPREAD, TILES, ring_rule

    spec = ProjectionSpec("bf16", (WeightFormat("bf16", 4, group),), k_multiple=256)
    assert ring_rule(spec, TILES, 8) == ring_rule(spec, SPREAD, 8) == (0, 0)  # (measured no gain there)
    assert ring_rule(spec, DEEP, 8) == (0, 3)
    case = Case(spec, 4096, 40, rows=8)  # 4 stages of 4-bit weights per warp: a ring of 3 wraps
    _set(monkeypatch, {})
    assert "metile_cp_wait<1>" in compile_projection(spec, 8, "cuda", DEEP).source  # 3 stages
    sixteen = 4 if group == 128 else 2  # (DEEP_STAGES at 16 rows, below)
    assert f"metile_cp_wait<{sixteen - 2}>" in compile_projection(spec, 16, "cuda", DEEP).source
    for rows in (1, 5, 8):
        _same_bits_as_4_stages(monkeypatch, case, 8, rows, DEEP, 3, f"group={group}")


# (bits, group, row bucket, rows, layout name, stages of the layout's table in lower_mma_staged)
STAGE_TABLE_CASES = [
    (4, 32, 8, 5, "ONE_TILE", 2),
    (4, 64, 1, 1, "ONE_TILE", 2),
    (4, 128, 16, 16, "ONE_TILE", 2),
    (8, 32, 4, 3, "ONE_TILE", 3),
    (8, 64, 32, 20, "ONE_TILE", 2),
    (8, 64, 16, 16, "DEEP", 2),
    (4, 128, 32, 20, "DEEP", 2),
    (4, 32, 16, 9, "DEEP", 2),
    (8, 32, 8, 7, "ONE_WAVE", 2),
]


@pytest.mark.parametrize("bits,group,bucket,rows,layout_name,stages", STAGE_TABLE_CASES)
def test_stage_tables_give_the_bits_of_4_stages(monkeypatch, bits, group, bucket, rows, layout_name, stages):
    """lower_mma_staged.ONE_TILE_STAGES / DEEP_STAGES / ONE_WAVE_STAGES: single quantized products
    in ONE_TILE (and ONE_TILE_WIDE), DEEP and ONE_WAVE take rings of 2-3 stages by format and row
    bucket (8-bit group 128, and the layouts not measured, keep theirs); the stages move loads
    only, so every output bit equals the 4-stage ring's, over a K whose warps' ranges make the
    ring wrap."""
    from mlx_metile.compiler import lower_mma_staged as staged

    layout = getattr(staged, layout_name)
    spec = ProjectionSpec("bf16", (WeightFormat("bf16", bits, group),), k_multiple=256)
    assert staged.ring_rule(spec, layout, bucket) == (0, stages)
    assert staged.ring_rule(spec, staged.TILES, bucket) == (0, 0)
    q8g128 = ProjectionSpec("bf16", (WeightFormat("bf16", 8, 128),), k_multiple=256)
    assert staged.ring_rule(q8g128, layout, bucket) == (0, 0)
    case = Case(spec, 4096, 40, rows=rows)
    _same_bits_as_4_stages(monkeypatch, case, bucket, rows, layout, stages, f"int{bits} g{group} {layout_name}")


# (bits, group, row bucket, rows, stages of lower_mma_staged.CONCAT_STAGES)
CONCAT_STAGE_CASES = [(4, 64, 8, 6, 2), (8, 32, 32, 20, 3), (8, 64, 1, 1, 3)]


@pytest.mark.parametrize("bits,group,bucket,rows,stages", CONCAT_STAGE_CASES)
def test_concatenated_weights_stage_table_gives_the_bits_of_4_stages(monkeypatch, bits, group, bucket, rows, stages):
    """lower_mma_staged.CONCAT_STAGES: q/k/v (three 4/8-bit weights, one accumulator over their
    concatenated columns) in ONE_TILE_WIDE take rings of 2-3 stages by format and row bucket;
    other layouts, and the SwiGLU gate/up, keep theirs. Loads only: every bit of the three
    outputs equals the 4-stage ring's, against float64 too, over a K whose ranges make it wrap."""
    from mlx_metile.compiler import lower_mma_staged as staged

    fmt = WeightFormat("bf16", bits, group)
    spec = ProjectionSpec("bf16", (fmt,) * 3, k_multiple=256)
    assert staged.ring_rule(spec, staged.ONE_TILE_WIDE, bucket) == (0, stages)
    assert staged.ring_rule(spec, staged.ONE_TILE, bucket) == (0, 0)
    swiglu = ProjectionSpec("bf16", (fmt,) * 2, "swiglu", k_multiple=256)
    assert staged.ring_rule(swiglu, staged.ONE_TILE_WIDE, bucket) == (0, 0)
    case = Case(spec, 4096, (40, 16, 24), rows=rows)
    _same_bits_as_4_stages(monkeypatch, case, bucket, rows, staged.ONE_TILE_WIDE, stages, f"q/k/v int{bits} g{group}")


def test_8_bit_group_128_swiglu_takes_a_dynamic_ring_at_every_row_bucket(monkeypatch):
    """lower_mma_staged.ring_rule: the 8-bit group-128 SwiGLU gate/up, whose one-tile rings of 2
    stages exceed 48 KB, takes the staged ring in dynamic shared memory instead of the direct
    loads in the TILES layout at every row bucket (staged and direct loads may split K
    differently, a sum order): outputs within float64's tolerance, row 0 the same bits at 1, 8,
    16 and 32 rows, over a K whose ranges hold 3 stages per warp."""
    from mlx_metile.compiler.lower_mma_staged import TILES, ring_rule

    spec = ProjectionSpec("bf16", (WeightFormat("bf16", 8, 128),) * 2, "swiglu", k_multiple=256)
    assert ring_rule(spec, TILES, 1) == ring_rule(spec, TILES, 32) == (80, 0)
    _set(monkeypatch, {})
    case = Case(spec, 3072, 40, rows=32)
    alone = case.run(1, 1, TILES)
    for bucket, rows in ((8, 5), (16, 16), (32, 32)):
        art = compile_projection(spec, bucket, "cuda", TILES)
        assert art.dynamic_shared > 48 * 1024 and "metile_cp_wait<0>" in art.source, bucket  # 2 stages
        got = case.run(bucket, rows, TILES)
        case.check(got, rows, f"8-bit g128 SwiGLU rows={rows}")
        assert np.array_equal(got[0][:1], alone[0]), f"row 0 differs between 1 and {rows} rows"


WIDTH_SWIZZLE = [  # (spec, K, N, settings): the swizzle by load width (lower_mma_staged.width_swizzle)
    (ProjectionSpec("bf16", (WeightFormat("bf16", 8, 64),), k_multiple=256), 1024, 48, {}),  # the default at 8-bit g64
    (ProjectionSpec("bf16", (WeightFormat("bf16", 8, 64),) * 2, "swiglu", k_multiple=256), 512, 40, {}),
    (ProjectionSpec("bf16", (q4,), k_multiple=256), 1024, 40, {"SWIZZLE": "2"}),  # 8-byte loads
    (ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=256), 512, 48, {"SWIZZLE": "2"}),  # dense
]


@pytest.mark.parametrize(
    "spec,K,N,settings", WIDTH_SWIZZLE, ids=[f"{c[0].name()}-{','.join(c[3]) or 'default'}" for c in WIDTH_SWIZZLE]
)
def test_rings_swizzled_by_load_width_give_the_bits_of_padded_ones(monkeypatch, spec, K, N, settings):
    """Unpadded ring rows whose 16-byte pieces are swizzled by the lanes' load width move bytes
    only: at 8, 16 and 32 rows (strided copies at 32) every output bit is the padded ring's
    (MLX_METILE_CUDA_MMA_SWIZZLE=0)."""
    from mlx_metile.compiler.lower_mma_staged import width_swizzle

    _set(monkeypatch, settings)
    mask, mult = width_swizzle(spec)
    assert (mask, mult) != (0, 0)
    case = Case(spec, K, N, rows=32)
    for bucket, rows, layout in ((8, 5, 1), (16, 16, 0), (32, 32, 0)):
        _set(monkeypatch, settings)
        art = compile_projection(spec, bucket, "cuda", layout)
        assert f"^ ((g & {mask}) * {mult})" in art.source, "the lanes' shared loads are not swizzled by width"
        swizzled = case.run(bucket, rows, layout)
        case.check(swizzled, rows, f"{spec.name()} width swizzle rows={rows}")
        _set(monkeypatch, {"SWIZZLE": "0"})
        padded = case.run(bucket, rows, layout)
        assert all(np.array_equal(a, b) for a, b in zip(swizzled, padded)), (spec.name(), bucket)
        monkeypatch.delenv("MLX_METILE_CUDA_MMA_SWIZZLE")


def _with_norm(case: Case, seed: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """A random RMSNorm weight g among `case`'s buffers; float64 of bf16(x * g) (rounded once, as
    the kernel's B operand: MLX's bf16 product) and of each row's 1 / sqrt(mean(x^2) + eps), [rows, 1]."""
    g = (rand((case.K,), mx.bfloat16, seed, 0.5) + 1.0).astype(mx.bfloat16)
    case.buffers["norm"] = bits(g)
    x = mx.array(case.x.astype(np.float32)).astype(mx.bfloat16)
    xg = np.array((x * g).astype(mx.float32), np.float64)
    return xg, 1.0 / np.sqrt((case.x**2).mean(axis=1, keepdims=True) + eps)


NORM_CASES = [  # (weight, K, N, k_multiple): RMSNorm fused into the tensor-core kernels
    (WeightFormat("bf16", 4, 64), 512, 48, 256),  # staged ring
    (WeightFormat("bf16", 8, 64), 512, 40, 256),
    (WeightFormat("bf16"), 512, 48, 256),  # dense, 8 warps
    (WeightFormat("bf16", 4, 64), 17 * 64, 32, 64),  # odd group count: direct loads
]


@pytest.mark.parametrize("weight,K,N,k_multiple", NORM_CASES, ids=["q4", "q8", "dense", "q4direct"])
def test_fused_rms_norm_matches_float64_and_keeps_rows_invariant(weight, K, N, k_multiple):
    """spec.norm_eps: y = (bf16(x * g) @ W.T) / sqrt(mean(x^2) + eps), against float64 of that
    formula (x * g rounded to bf16 once, as the kernel's B operand) within one output rounding, f32
    accumulation and 1e-4 for the f32 sum of squares and rsqrt; row 0 alone equals row 0 among 20,
    bit for bit, and one tile equals two."""
    eps = 1e-5
    spec = ProjectionSpec("bf16", (weight,), k_multiple=k_multiple, norm_eps=eps)
    case = Case(spec, K, N, rows=20)
    xg, inv = _with_norm(case, 31, eps)
    exact = (xg @ case.w[0].T) * inv
    mag = (np.abs(xg) @ np.abs(case.w[0]).T) * inv
    alone = case.run(1, 1)
    for bucket, rows, layout in ((8, 5, 1), (32, 20, 1), (32, 20, 0)):
        got = case.run(bucket, rows, layout=layout)[0]
        e = exact[:rows]
        tol = ULP["bf16"] * np.abs(e) + (K + 2) * 2.0**-24 * mag[:rows] + 1e-4 * np.abs(e)
        err = np.abs(_values(got, "bf16") - e)
        assert (err <= tol).all(), f"rows={rows} layout={layout}: worst error {err.max():.3g}"
        assert np.array_equal(got[:1], alone[0]), f"row 0 differs between 1 and {rows} rows"


def test_fused_rms_norm_is_refused_where_its_kernel_is_not_the_k_split_one():
    """f16 activations (not written yet) and targets without the tensor-core schedule refuse the
    spec by name, rather than computing x without its norm."""
    spec = ProjectionSpec("f16", (WeightFormat("f16", 4, 64),), k_multiple=256, norm_eps=1e-5)
    with pytest.raises(LowerError, match="RMSNorm"):
        compile_projection(spec, 8, "cuda", 1)
    with pytest.raises(ValueError, match="RMSNorm"):
        compile_projection(ProjectionSpec("bf16", spec.weights, k_multiple=256, norm_eps=1e-5), 8, "msl")


@pytest.mark.parametrize("epilogue,count", [("swiglu", 2), (None, 3)], ids=["gate_up", "qkv"])
def test_fused_rms_norm_before_swiglu_and_concatenated_weights(epilogue, count):
    """The norm's two consumers in a transformer block: the SwiGLU gate/up (two accumulators) and
    q/k/v (three weights' columns in one accumulator), against float64 of the formula above."""
    eps = 1e-6
    q4 = WeightFormat("bf16", 4, 64)
    spec = ProjectionSpec("bf16", (q4,) * count, epilogue, k_multiple=256, norm_eps=eps)
    K, rows = 512, 9
    case = Case(spec, K, 32 if epilogue else (32, 16, 16), rows=rows)
    xg, inv = _with_norm(case, 32, eps)
    z = [(xg @ w.T) * inv for w in case.w]
    mags = [(np.abs(xg) @ np.abs(w).T) * inv for w in case.w]
    got = case.run(16, rows)
    alone = case.run(1, 1)
    if epilogue == "swiglu":
        exact, tol = [z[0] / (1 + np.exp(-z[0])) * z[1]], [1e-2 * np.abs(z[0] * z[1]).max()]
    else:
        exact = z
        tol = [(K + 2) * 2.0**-24 * m + 1e-4 * np.abs(e) for e, m in zip(z, mags)]
    for y, y1, e, t in zip(got, alone, exact, tol):
        err = np.abs(_values(y, "bf16") - e)
        assert (err <= ULP["bf16"] * np.abs(e) + t).all(), f"worst error {err.max():.3g}"
        assert np.array_equal(y[:1], y1)
