"""The column layouts of the tensor-core kernels (schedule.cuda_layouts) on the CPU: within the
float64 tolerance, row invariant within a layout, and bit for bit the same where two layouts or
two block shapes add a row's K in the same order."""

from __future__ import annotations

import pytest

from mlx_metile import settings
from mlx_metile.schedule.cuda_layouts import DEEP, ONE_TILE, ONE_TILE_WIDE, ONE_WAVE, SPREAD, TILES, bucket_layout
from mlx_metile.schedule.geometry import TILE
from mlx_metile.spec import ProjectionSpec, WeightFormat

from .cases import Case, cancelling, kernel, q4, q8, same, set_knobs

EVERY = ((8, 5), (16, 16), (32, 20))  # (row bucket, rows)


@pytest.mark.parametrize(
    "spec,K,N,knobs,buckets",
    [
        (ProjectionSpec("bf16", (q4,), k_multiple=256), 512, 80, {}, EVERY),
        (ProjectionSpec("bf16", (q8,), k_multiple=256), 512, 48, {}, EVERY),
        # at 32 rows two SwiGLU tiles would hold too many partial sums: one tile there; with
        # smaller stages SwiGLU's 64-row ring copies its scales in two passes (rows padded by 16
        # bytes, so that two such tiles' rings fit 48 KB)
        (
            ProjectionSpec("bf16", (q4, q4), "swiglu", k_multiple=256),
            512,
            48,
            {"GROUPS": "2", "BANKPAD": "0"},
            EVERY[:2],
        ),
        # 8-bit group 128 takes two tiles only at 32 rows, in dynamic shared memory
        (ProjectionSpec("bf16", (WeightFormat("bf16", 8, 128),), k_multiple=256), 1024, 48, {}, EVERY[2:]),
    ],
    ids=["q4", "q8", "swiglu-groups2", "q8g128"],
)
def test_two_column_tiles_give_the_bits_of_one(env, spec, K, N, knobs, buckets):
    """The staged ring with two 16-column tiles per block (TILES, wide and deep products) computes
    what one tile does, bit for bit, in each row bucket given."""
    set_knobs(env, knobs)
    case = Case(spec, K, N, rows=20)
    for bucket, rows in buckets:
        tiles = kernel(spec, bucket, TILES)
        assert tiles.schedule.BN > TILE, f"{tiles.schedule.describe()}: one tile, the comparison would be with itself"
        two = case.run_kernel(tiles, rows)
        one = case.run(bucket, rows, layout=ONE_TILE)
        case.check(two, rows, f"{spec.name()} two tiles rows={rows}")
        assert same(two, one), (spec.name(), bucket)


@pytest.mark.parametrize("bits,layout", [(8, ONE_WAVE), (4, ONE_TILE_WIDE), (8, ONE_TILE_WIDE), (0, ONE_TILE_WIDE)])
def test_the_layout_of_each_row_bucket_keeps_the_bits_of_the_one_tile_layouts(bits, layout):
    """cuda_layouts.bucket_layout may give single products of ONE_WAVE / ONE_TILE_WIDE shapes TILES
    in some row buckets: a row computed alone in the one-tile layout (1 row) equals the same row
    among 20 in TILES (32 rows) and in whatever layout bucket_layout gives each row bucket, bit for bit."""
    K = 2048 if layout == ONE_TILE_WIDE else 1536  # (the K of the shapes that take `layout`)
    weight = WeightFormat("bf16", bits, 64) if bits else WeightFormat("bf16")
    case = Case(ProjectionSpec("bf16", (weight,), k_multiple=256), 512, 48, rows=20)
    among = case.run(32, 20, layout=TILES)
    case.check(among, 20, f"{weight} TILES rows=20")
    case.invariant(among, f"{weight} TILES", layout=layout, bucket=1)
    for bucket, rows in EVERY:
        chosen = bucket_layout(layout, K, bucket, weight, settings.current())
        got = case.run(bucket, rows, layout=chosen)
        case.invariant(got, f"{weight} bucket {bucket} layout {chosen}", layout=layout, bucket=1)


SPREAD_CASES = [  # (spec, K, N): the SPREAD layout of very narrow, deep products
    (ProjectionSpec("bf16", (q4,), k_multiple=256), 2048, 24),
    (ProjectionSpec("bf16", (q8,), k_multiple=256), 2048, 16),
    (ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=256), 1024, 24),
]


@pytest.mark.parametrize("spec,K,N", SPREAD_CASES, ids=[c[0].name() for c in SPREAD_CASES])
def test_spread_layout_splits_k_over_more_warps_and_stays_row_invariant(spec, K, N):
    """SPREAD: one tile, K over more warps than TILES's in every row bucket, staged; within
    tolerance and each row's bits the same alone and among 3, 16 and 20 rows."""
    usual = kernel(spec, 8, TILES).schedule.splits or kernel(spec, 8, TILES).schedule.SG
    for bucket in (8, 16, 32):
        art = kernel(spec, bucket, SPREAD)
        assert art.schedule.SG > usual and art.schedule.BN == TILE, art.schedule.describe()
        assert "metile_cp16" in art.source, "the spread layout keeps the staged ring"
    case = Case(spec, K, N, rows=20)
    for bucket, rows in ((8, 3), (16, 16), (32, 20)):
        got = case.run(bucket, rows, SPREAD)
        case.check(got, rows, f"{spec.name()} spread rows={rows}")
        case.invariant(got, f"{spec.name()} spread", layout=SPREAD)


@pytest.mark.parametrize("act", ["bf16", "f16"])
def test_one_wave_dense_products_split_k_over_fewer_warps_and_stay_row_invariant(act):
    """cuda_mma.ONE_WAVE_DENSE_WARPS: a single dense product in ONE_WAVE takes K in that many
    ranges in every row bucket, within tolerance and with each row's bits the same alone and
    among 3, 16 and 20 rows."""
    from mlx_metile.schedule.cuda_mma import ONE_WAVE_DENSE_WARPS

    spec = ProjectionSpec(act, (WeightFormat(act),), k_multiple=256)
    case = Case(spec, 1536, 40, rows=20)
    for bucket, rows in ((8, 3), (16, 16), (32, 20)):
        assert kernel(spec, bucket, ONE_WAVE).schedule.SG == ONE_WAVE_DENSE_WARPS
        got = case.run(bucket, rows, ONE_WAVE)
        case.check(got, rows, f"{spec.name()} one wave rows={rows}")
        case.invariant(got, f"{spec.name()} one wave", layout=ONE_WAVE)


def _ranges(schedule) -> int:
    """The K ranges of a block (part of each row's sum order)."""
    return schedule.splits or schedule.SG


DEEP_CASES = [  # (K, N): the DEEP layout (8-bit weights). K = 1280: ranges of 2 stages, the
    # last three empty; K = 2560: ranges of 3 stages, the seventh of 2 (its warp's first range
    # never reaches its end) and the eighth empty
    (1280, 24),
    (2560, 16),
]


@pytest.mark.parametrize("K,N", DEEP_CASES, ids=[f"K={c[0]}" for c in DEEP_CASES])
def test_deep_layout_two_k_ranges_per_warp_give_the_bits_of_a_warp_each(env, K, N):
    """DEEP: K in the same ranges at every row bucket, a warp per range up to DEEP_ROWS rows and two
    ranges per warp above. Each row's bits are the same alone and among 3, 16 and 20 rows, and the
    32-row kernel of two ranges a warp gives the bits of the one with a warp per range (WARPS =
    the ranges); half as many ranges give other bits on data whose ranges' sums cancel (the check
    can fail)."""
    from mlx_metile.schedule.cuda_mma import DEEP_ROWS

    spec = ProjectionSpec("bf16", (q8,), k_multiple=256)
    case = cancelling(Case(spec, K, N, rows=20), 128)
    schedules = {b: kernel(spec, b, DEEP).schedule for b in (8, 16, 32)}
    ranges = {_ranges(s) for s in schedules.values()}
    assert len(ranges) == 1, f"the K split differs between row buckets: {schedules}"
    (ranges,) = ranges
    assert all((s.SG < ranges) == (b > DEEP_ROWS) for b, s in schedules.items()), schedules
    got = {}
    for bucket, rows in ((8, 3), (16, 16), (32, 20)):
        got[bucket] = case.run(bucket, rows, DEEP)
        case.check(got[bucket], rows, f"{spec.name()} deep rows={rows}")
        case.invariant(got[bucket], f"{spec.name()} deep", layout=DEEP)
    env.set("MLX_METILE_CUDA_MMA_WARPS", str(ranges))
    assert kernel(spec, 32, DEEP).schedule.SG == ranges
    one_each = case.run(32, 20, DEEP)
    assert same(got[32], one_each), "two ranges per warp changed the sums"
    env.set("MLX_METILE_CUDA_MMA_WARPS", str(ranges // 2))  # another order, other bits
    assert not same(case.run(32, 20, DEEP), one_each), "the check cannot fail"


def test_deep_layout_with_concatenated_weights(env):
    """The DEEP layout's K ranges for q/k/v in one accumulator: the same at every row bucket, within
    tolerance, each row the same alone and among 16 and 20 rows, and the 32-row kernel of two
    ranges a warp equal to the one with a warp per range. SwiGLU's K split is the same at every
    row bucket too."""
    swiglu = ProjectionSpec("bf16", (q8, q8), "swiglu", k_multiple=256)
    assert len({_ranges(kernel(swiglu, b, DEEP).schedule) for b in (8, 16, 32)}) == 1
    spec = ProjectionSpec("bf16", (q8,) * 3, k_multiple=256)
    schedules = {b: kernel(spec, b, DEEP).schedule for b in (8, 16, 32)}
    assert len({_ranges(s) for s in schedules.values()}) == 1, schedules
    ranges = _ranges(schedules[32])
    assert schedules[32].SG < ranges, f"{schedules[32].describe()}: a warp per range, the comparison is with itself"
    case = Case(spec, 2560, 24, rows=20)
    got = {}
    for bucket, rows in ((16, 16), (32, 20)):
        got[bucket] = case.run(bucket, rows, DEEP)
        case.check(got[bucket], rows, f"{spec.name()} deep rows={rows}")
        case.invariant(got[bucket], f"{spec.name()} deep", layout=DEEP)
    env.set("MLX_METILE_CUDA_MMA_WARPS", str(ranges))
    assert kernel(spec, 32, DEEP).schedule.SG == ranges
    assert same(got[32], case.run(32, 20, DEEP))
