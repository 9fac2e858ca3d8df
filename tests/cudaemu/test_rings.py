"""The staged ring of the tensor-core kernels on the CPU: its stages, swizzles, padding, copies and
shared-memory size move bytes only, so every choice of them gives the same bits, and the kernel
stays within the float64 tolerance."""

from __future__ import annotations

import pytest

from mlx_metile.schedule.cuda_layouts import DEEP, LAYOUT_NAMES, ONE_TILE, ONE_TILE_WIDE, ONE_WAVE, TILES
from mlx_metile.spec import ProjectionSpec, WeightFormat

from .cases import Case, kernel, q4, q8, rules, same, set_knobs


def assert_ring_waits(art) -> None:
    """A staged kernel's loop waits for all but stages - 2 of its copies (the Schedule's stages)."""
    s = art.schedule
    assert s.staged and f"metile_cp_wait<{s.stages - 2}>" in art.source, s.describe()


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
def test_swizzled_rings_give_the_bits_of_padded_ones(env, spec, K, N, settings):
    """MLX_METILE_CUDA_MMA_SWIZZLE=1 moves bytes within the ring only: every output bit is
    the padded ring's (SWIZZLE=0), at 3 and 16 rows."""
    set_knobs(env, settings)
    case = Case(spec, K, N, rows=16)
    env.set("MLX_METILE_CUDA_MMA_SWIZZLE", "0")
    padded = [case.run(8, 3), case.run(16, 16)]
    env.set("MLX_METILE_CUDA_MMA_SWIZZLE", "1")
    art = kernel(spec, 16, ONE_TILE)
    assert "metile_cp16(" in art.source and "^ (g & " in art.source, "not the swizzled staged ring"
    swizzled = [case.run(8, 3), case.run(16, 16)]
    case.check(swizzled[1], 16, f"{spec.name()} swizzled")
    for a, b in zip(padded, swizzled):
        assert same(a, b), f"{spec.name()} {settings}: swizzling changed bits"


WIDTH_SWIZZLE = [  # (spec, K, N): the swizzle by load width (MmaRules.width_swizzle, SWIZZLE=2)
    (ProjectionSpec("bf16", (q8,), k_multiple=256), 1024, 48),  # 16-byte loads
    (ProjectionSpec("bf16", (q8,) * 2, "swiglu", k_multiple=256), 512, 40),
    (ProjectionSpec("bf16", (q4,), k_multiple=256), 1024, 40),  # 8-byte loads
    (ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=256), 512, 48),  # dense
]


@pytest.mark.parametrize("spec,K,N", WIDTH_SWIZZLE, ids=[c[0].name() for c in WIDTH_SWIZZLE])
def test_rings_swizzled_by_load_width_give_the_bits_of_padded_ones(env, spec, K, N):
    """Unpadded ring rows whose 16-byte pieces are swizzled by the lanes' load width (whatever
    (mask, multiplier) width_swizzle gives the spec) move bytes only: at 8, 16 and 32 rows
    (strided copies at 32) every output bit is the padded ring's (SWIZZLE=0), and the lanes'
    shared loads in the source use that swizzle."""
    env.set("MLX_METILE_CUDA_MMA_SWIZZLE", "2")
    mask, mult = rules(spec).width_swizzle()
    assert mask and mult, f"{spec.name()}: no width swizzle (rows under 128 bytes?): the case compares padded rings"
    case = Case(spec, K, N, rows=32)
    for bucket, rows, layout in ((8, 5, ONE_TILE), (16, 16, TILES), (32, 32, TILES)):
        env.set("MLX_METILE_CUDA_MMA_SWIZZLE", "2")
        art = kernel(spec, bucket, layout)
        assert (art.schedule.swizzle_mask, art.schedule.swizzle_mult) == (mask, mult), art.schedule.describe()
        assert f"^ ((g & {mask}) * {mult})" in art.source, "the lanes' shared loads are not swizzled by width"
        swizzled = case.run_kernel(art, rows)
        case.check(swizzled, rows, f"{spec.name()} width swizzle rows={rows}")
        env.set("MLX_METILE_CUDA_MMA_SWIZZLE", "0")
        padded = case.run(bucket, rows, layout)
        assert same(swizzled, padded), (spec.name(), bucket)


STRIDED = [  # (spec, K, N, bucket): N ends in a partial block
    (ProjectionSpec("bf16", (q4,), k_multiple=256), 1024, 40, 32),
    (ProjectionSpec("bf16", (q4, q4), "swiglu", k_multiple=256), 1024, 24, 16),
    (ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=256), 512, 24, 32),
    (ProjectionSpec("bf16", (q8,), k_multiple=256), 512, 40, 8),
]


@pytest.mark.parametrize("spec,K,N,bucket", STRIDED, ids=[f"{c[0].name()}-{c[3]}" for c in STRIDED])
def test_strided_copies_give_the_bits_of_per_piece_ones(env, spec, K, N, bucket):
    """The ring's copies from one pointer per accumulator (pieces past the last column copy 0
    bytes; MLX_METILE_CUDA_MMA_STRIDED=1) fill the ring as a pointer per piece does (=0): every
    output bit alike, and the kernel the settings leave (either) gives them too."""
    case = Case(spec, K, N, rows=bucket)
    default = case.run(bucket, bucket, TILES)
    env.set("MLX_METILE_CUDA_MMA_STRIDED", "1")
    art = kernel(spec, bucket, TILES)
    assert art.schedule.strided and "cwb0" in art.source, f"{art.schedule.describe()}: copies not strided"
    strided = case.run_kernel(art, bucket)
    case.check(strided, bucket, f"{spec.name()} strided")
    env.set("MLX_METILE_CUDA_MMA_STRIDED", "0")
    art = kernel(spec, bucket, TILES)
    assert not art.schedule.strided and "cwb0" not in art.source
    per_piece = case.run_kernel(art, bucket)
    assert same(strided, per_piece), f"{spec.name()}: strided copies changed bits"
    assert same(default, per_piece), f"{spec.name()}: the default copies changed bits"


DENSE_RINGS = [  # (layout, row bucket, rows): where MmaRules.ring_rule may size dense rings over 48 KB
    (TILES, 16, 16),
    (TILES, 32, 16),
    (ONE_TILE, 4, 3),
    (ONE_TILE, 8, 8),
    (DEEP, 4, 4),
    (ONE_TILE_WIDE, 4, 3),
]


def test_dense_rings_in_dynamic_shared_memory_give_the_bits_of_the_48_kb_ones(env):
    """Dense weights' rings, however many KB and stages the ring rules give them (some over the 48
    KB a kernel declares statically, in dynamic shared memory), move loads only: within tolerance,
    and every output bit equals the 48 KB ring's (MLX_METILE_CUDA_MMA_SMEM=48), in each layout and
    row bucket; ONE_TILE and ONE_TILE_WIDE add K alike."""
    spec = ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=256)
    case = Case(spec, 512, 48, rows=16)
    dynamic, by_layout = [], {}
    for layout, bucket, rows in DENSE_RINGS:
        env.unset("MLX_METILE_CUDA_MMA_SMEM")
        art = kernel(spec, bucket, layout)
        assert_ring_waits(art)
        dynamic.append(art.dynamic_shared > 48 * 1024)
        wide = case.run_kernel(art, rows)
        case.check(wide, rows, f"dense ring layout={layout} rows={rows}")
        env.set("MLX_METILE_CUDA_MMA_SMEM", "48")
        static = kernel(spec, bucket, layout)
        assert static.dynamic_shared == 0, static.schedule.describe()
        assert same(wide, case.run_kernel(static, rows)), (layout, bucket)
        by_layout[layout, bucket] = wide
    assert any(dynamic), "no dense ring over 48 KB here: the test compares 48 KB rings only"
    assert same(by_layout[ONE_TILE, 4], by_layout[ONE_TILE_WIDE, 4])


def _q(bits: int, group: int) -> WeightFormat:
    return WeightFormat("bf16", bits, group)


# (spec, row bucket, rows, layout): single 4/8-bit products in the one-tile layouts and q/k/v in
# ONE_TILE_WIDE, whose rings the stage tables size (MmaRules.ring_rule)
STAGE_CASES = [
    *((ProjectionSpec("bf16", (_q(4, g),), k_multiple=256), 8, r, DEEP) for g in (64, 128) for r in (1, 5, 8)),
    (ProjectionSpec("bf16", (_q(4, 64),), k_multiple=256), 16, 16, DEEP),
    (ProjectionSpec("bf16", (_q(4, 32),), k_multiple=256), 8, 5, ONE_TILE),
    (ProjectionSpec("bf16", (_q(4, 64),), k_multiple=256), 1, 1, ONE_TILE),
    (ProjectionSpec("bf16", (_q(4, 128),), k_multiple=256), 16, 16, ONE_TILE),
    (ProjectionSpec("bf16", (_q(8, 32),), k_multiple=256), 4, 3, ONE_TILE),
    (ProjectionSpec("bf16", (_q(8, 64),), k_multiple=256), 32, 20, ONE_TILE),
    (ProjectionSpec("bf16", (_q(8, 64),), k_multiple=256), 16, 16, DEEP),
    (ProjectionSpec("bf16", (_q(4, 128),), k_multiple=256), 32, 20, DEEP),
    (ProjectionSpec("bf16", (_q(4, 32),), k_multiple=256), 16, 9, DEEP),
    (ProjectionSpec("bf16", (_q(8, 32),), k_multiple=256), 8, 7, ONE_WAVE),
    (ProjectionSpec("bf16", (_q(4, 64),) * 3, k_multiple=256), 8, 6, ONE_TILE_WIDE),
    (ProjectionSpec("bf16", (_q(8, 32),) * 3, k_multiple=256), 32, 20, ONE_TILE_WIDE),
    (ProjectionSpec("bf16", (_q(8, 64),) * 3, k_multiple=256), 1, 1, ONE_TILE_WIDE),
]


@pytest.mark.parametrize(
    "spec,bucket,rows,layout",
    STAGE_CASES,
    ids=[f"{c[0].name()}-{c[1]}-{c[2]}-{LAYOUT_NAMES[c[3]]}" for c in STAGE_CASES],
)
def test_rings_of_every_stage_count_give_the_same_bits(env, spec, bucket, rows, layout):
    """The default ring (the stages the tables give) and rings of 2, 3 and 4 stages
    (MLX_METILE_CUDA_MMA_STAGES) move loads only: every output bit alike, within float64's
    tolerance, over a K whose warps' ranges make every ring wrap; each kernel's loop waits for
    its Schedule's stages."""
    cols = (40, 16, 24) if len(spec.weights) == 3 else 40
    case = Case(spec, 4096, cols, rows=rows)
    kernels = {}  # by source: the default ring first
    for stages in (None, "2", "3", "4"):
        if stages is None:
            env.unset("MLX_METILE_CUDA_MMA_STAGES")
        else:
            env.set("MLX_METILE_CUDA_MMA_STAGES", stages)
        art = kernel(spec, bucket, layout)
        assert_ring_waits(art)
        kernels.setdefault(art.key, art)
    assert len({art.schedule.stages for art in kernels.values()}) >= 2, "one ring size: nothing compared"
    default = case.run_kernel(next(iter(kernels.values())), rows)
    case.check(default, rows, f"{spec.name()} default ring rows={rows}")
    for art in kernels.values():
        assert same(default, case.run_kernel(art, rows)), f"{spec.name()}: a ring of {art.schedule.stages} stages"


def test_8_bit_group_128_swiglu_keeps_its_loads_at_every_row_bucket():
    """The 8-bit group-128 SwiGLU gate/up in TILES, whose one-tile rings of 2 stages exceed 48 KB:
    the same loads (staged ring, or the lanes' direct loads: they may split K differently, a sum
    order) at every row bucket, outputs within float64's tolerance, each row the same bits at 1,
    8, 16 and 32 rows, over a K whose ranges hold 3 stages per warp."""
    spec = ProjectionSpec("bf16", (_q(8, 128),) * 2, "swiglu", k_multiple=256)
    schedules = {b: kernel(spec, b, TILES).schedule for b in (1, 8, 16, 32)}
    assert len({(s.staged, s.splits or s.SG) for s in schedules.values()}) == 1, schedules
    for b in (1, 8, 16, 32):
        art = kernel(spec, b, TILES)
        if art.schedule.staged:
            assert_ring_waits(art)
    case = Case(spec, 3072, 40, rows=32)
    for bucket, rows in ((8, 5), (16, 16), (32, 32)):
        got = case.run(bucket, rows, TILES)
        case.check(got, rows, f"8-bit g128 SwiGLU rows={rows}")
        case.invariant(got, "8-bit g128 SwiGLU", layout=TILES, bucket=1)
