"""Settings that override the CUDA schedules (MLX_METILE_CUDA_MMA_<KNOB> and the switches): each
value set reaches the Schedule `choose` makes, rows stay invariant under it, and a value outside
the knob's range is refused naming the variable.

Evaluated over the sm_90 cases of tests/schedule/decisions.py's grid for a subset of its formats
(dense, each bit width and group size, each scale dtype) and shapes (one of each column layout,
SwiGLU, q/k/v, small ones), rows 1-32."""

from __future__ import annotations

from functools import lru_cache

import pytest

from mlx_metile import settings
from mlx_metile.schedule import TILED_BUCKET
from mlx_metile.schedule.cuda_layouts import TILES
from mlx_metile.schedule.cuda_mma import MmaRules
from mlx_metile.schedule.geometry import TILE, chunk_bytes, chunk_k, lane_load_bytes, slot_bytes
from mlx_metile.settings import MMA_KNOBS
from mlx_metile.targets.cuda import STATIC_SHARED_BYTES
from tests.schedule import decisions
from tests.schedule.test_invariants import k_ranges, sum_order

TARGET = decisions.TARGETS["sm_90"]
BUCKETS = (1, 2, 4, 8, 16, 32)
FORMATS = {("bf16", 0, 0), ("f16", 0, 0), ("bf16", 4, 32), ("bf16", 4, 64), ("f16", 4, 128)}
FORMATS |= {("f32", 8, 32), ("bf16", 8, 64), ("bf16", 8, 128), ("f32", 4, 64)}
# (K, columns) of each column layout (TILES, ONE_TILE, SPREAD, DEEP, ONE_WAVE, ONE_TILE_WIDE and
# its per-bucket TILES), of SwiGLU and q/k/v, and small ones (direct loads, SIMT)
SHAPES = {(4096, 14336), (4096, 4096), (8960, 1536), (4096, 1024), (1536, 8960), (3072, 8192), (2048, 11008)}
SHAPES |= {(4096, 6144), (1536, 2048), (128, 96), (96, 1000), (128, 64), (256, 256)}


def sampled(case) -> bool:
    w = case.spec.weights[0]
    return (w.dtype, w.bits, w.group_size) in FORMATS and (case.shape.K, case.shape.columns) in SHAPES


CASES = [c for c in decisions.cases() if c.target == "sm_90" and sampled(c)]


def knob(name: str, value) -> settings.Settings:
    """The settings of an environment holding MLX_METILE_CUDA_MMA_<name>=value alone."""
    return settings.parse({f"MLX_METILE_CUDA_MMA_{name}": str(value)})


@lru_cache(maxsize=64)
def evaluate(cfg: settings.Settings) -> list[tuple]:
    """(case, Schedules of BUCKETS) under `cfg`."""
    return [(c, [decisions.choose(c.spec, r, TARGET, c.shape, cfg) for r in BUCKETS]) for c in CASES]


def chosen(cfg) -> list[tuple]:
    """(case, Schedule) of every tensor-core decision."""
    return [(c, s) for c, ss in evaluate(cfg) for s in ss if s.kind == "mma"]


def ring(case, s) -> int:
    return s.SG * s.stages * slot_bytes(case.spec, s.BN // TILE, s.groups, s.row_pad)


def k_split_staged(s) -> bool:
    return s.staged and not s.xshare


# -- what each knob's value does to the Schedule: check(case, schedule, value, settings) -> bool
def warps(c, s, v, cfg):
    """The K ranges; fewer warps only where v ranges' partial sums would overflow static shared memory."""
    if k_ranges(s) == v:
        return True
    partials = v * c.spec.accumulators * (s.BN // TILE) * (s.BM // 8) * 4 * 32 * 4
    return k_ranges(s) < v and partials > STATIC_SHARED_BYTES


def stages(c, s, v, cfg):
    """Stages of the rings; fewer only where v would not fit the block's ring budget."""
    if not s.staged:
        return True
    if s.xshare or s.stages == v:
        return s.stages == v
    budget = MmaRules(c.spec, cfg, TARGET).ring_budget(s.SG)
    return 2 <= s.stages < v and ring(c, s) // s.stages * (s.stages + 1) > budget


def minblocks(c, s, v, cfg):
    """Blocks per SM asked for: v on 4-warp blocks; blocks of more warps ask for as many warps."""
    if not s.staged:
        return True
    return s.blocks == v if s.SG <= 4 else (s.blocks == 0 if v == 0 else 1 <= s.blocks <= v)


def wide(c, s, v, cfg):
    w = c.spec.weights[0]
    allowed = w.quantized and w.dtype != "f32" and c.spec.k_divisor % (2 * w.group_size) == 0
    return s.wide == (v == 1 and allowed) and not (s.wide and s.staged)


def sector(c, s, v, cfg):
    w = c.spec.weights[0]
    return s.sector == (v == 1 and w.quantized and not s.wide and chunk_k(c.spec) >= 64)


def swizzle(c, s, v, cfg):
    if not s.staged:
        return True
    unpadded = s.swizzle_mult == 0 or s.row_pad == 0  # (a swizzled row needs no padding)
    if v == 0:
        return s.swizzle_mult == 0
    if v == 1:
        row_bytes = s.groups * chunk_bytes(c.spec)
        return (s.swizzle_mask, s.swizzle_mult) == (min(row_bytes // 16, 8) - 1, 1) and unpadded
    return unpadded


def bankpad(c, s, v, cfg):
    """=0: 16 bytes after every row; =1: 4 lanes' load width (at most 128), no swizzle by width."""
    if not s.staged:
        return True
    if v == 0:
        return s.row_pad == 16 and s.swizzle_mult == 0
    width = lane_load_bytes(c.spec, s.sector, s.wide)
    return s.swizzle_mult == 0 and s.row_pad == (4 * width % 128 or 16)


def xshare(c, s, v, cfg):
    can = s.staged and s.layout == TILES and s.BM >= 16
    return s.xshare == (v if can else 0)


def q8split(c, s, v, cfg):
    return s.q8split == (v == 1 and c.spec.weights[0].bits == 8 and c.spec.act_dtype == "bf16")


def strided(c, s, v, cfg):
    """Copies from one pointer per accumulator: only where each accumulator reads one weight."""
    return not s.strided or (v == 1 and s.staged and len(c.spec.weights) == c.spec.accumulators)


# knob: (values, check(case, schedule, value, settings), witness(schedule, value): the value shows)
KNOB_CHECKS = {
    "WARPS": ((1, 2, 4, 8, 16), warps, lambda s, v: k_ranges(s) == v),
    "BATCH": ((1, 2, 4), lambda c, s, v, cfg: s.staged or s.batch == v, lambda s, v: not s.staged),
    "TILES": ((1, 2, 4), lambda c, s, v, cfg: s.xshare or s.BN // TILE <= v, lambda s, v: s.BN // TILE == v),
    "WIDE": ((0, 1), wide, lambda s, v: s.wide == v),
    "MINBLOCKS": ((0, 3), minblocks, lambda s, v: s.staged and s.blocks == v),
    "GROUPS": ((2, 4, 8), lambda c, s, v, cfg: not s.staged or s.groups == v, lambda s, v: s.staged),
    "STAGES": ((2, 3, 5), stages, lambda s, v: s.staged and s.stages == v),
    "SMEM": (
        (48, 64, 100),
        lambda c, s, v, cfg: not k_split_staged(s) or ring(c, s) <= v * 1024,
        lambda s, v: s.staged,
    ),
    "Q8SPLIT": ((0, 1), q8split, lambda s, v: s.q8split == v),
    "XSECTOR": ((0, 1), sector, lambda s, v: s.sector == v),
    "STRIDED": ((0, 1), strided, lambda s, v: s.strided == v),
    "INTERLEAVE": ((0, 1), lambda c, s, v, cfg: s.interleave == (v == 1) and not (s.interleave and s.xshare), None),
    "SWIZZLE": ((0, 1, 2), swizzle, lambda s, v: s.staged and (s.swizzle_mult > 0) == (v > 0)),
    "LATE": ((0, 1, 2, 3), lambda c, s, v, cfg: not s.staged or s.late == v, lambda s, v: s.staged),
    "BANKPAD": ((0, 1), bankpad, lambda s, v: s.staged),
    "XSHARE": ((0, 2, 4, 8), xshare, lambda s, v: s.xshare == v),
    "LAYOUT": (tuple(range(6)), lambda c, s, v, cfg: s.layout == v, None),
}
SETTINGS = [(name, value) for name, (values, *_) in KNOB_CHECKS.items() for value in values]


def test_every_knob_is_checked():
    assert {name.lower() for name in KNOB_CHECKS} == set(MMA_KNOBS)


@pytest.mark.parametrize("name,value", SETTINGS, ids=[f"{n}={v}" for n, v in SETTINGS])
def test_a_knob_reaches_the_schedule(env, name, value):
    env.set(f"MLX_METILE_CUDA_MMA_{name}", str(value))
    assert settings.current().knob(name.lower()) == value
    cfg = knob(name, value)
    for case in CASES[::40]:  # (what the environment gives choose is what the checks below see)
        assert decisions.choose(case.spec, 8, TARGET, case.shape) == decisions.choose(
            case.spec, 8, TARGET, case.shape, cfg
        )
    _, check, witness = KNOB_CHECKS[name]
    decided = chosen(cfg)
    assert len(decided) > 500
    bad = [(c.key, s) for c, s in decided if not check(c, s, value, cfg)]
    assert not bad, f"{len(bad)} schedules, e.g. {bad[:3]}"
    if witness is not None:  # (and the grid shows the value acting somewhere)
        assert any(witness(s, value) for _, s in decided), f"no schedule shows {name}={value}"


# Knob values under which the K split depends on the row bucket: a row's bits then depend on
# how many rows share the call (the defaults never do this; test_invariants.py)
ROW_VARIANT = {
    ("WARPS", 16): "MLX_METILE_CUDA_MMA_WARPS=16: the warps of one K range each are halved where their "
    "partial sums exceed 48 KB (schedule.cuda_mma.MmaRules.shape: SwiGLU at 32 rows, 8 ranges instead of 16), "
    "and dense rings of 16 warps fit 2 stages at 8-32 rows but not in the 80 KB rule of 1-4 rows (direct loads, "
    "K ranges aligned to 1 chunk instead of 2)",
    ("WARPS", 8): "MLX_METILE_CUDA_MMA_WARPS=8: 4-bit group-128 SwiGLU rings of 8 warps do not fit 48 KB, so "
    "1-16 rows take the direct loads (K ranges aligned to 1 chunk) while 32 rows share x (aligned to a stage of "
    "2 groups): over K = 3072, ranges of 3 chunks against 4",
    ("GROUPS", 8): "MLX_METILE_CUDA_MMA_GROUPS=8: dense rings of 8 groups fit the 80 KB rule of 1-4 rows "
    "(ranges aligned to 8 chunks) but not the 48 KB of 8-32 rows (direct loads, aligned to 1 chunk)",
}


@pytest.mark.parametrize(
    "name,value",
    [
        pytest.param(n, v, marks=pytest.mark.xfail(strict=True, reason=ROW_VARIANT[n, v]))
        if (n, v) in ROW_VARIANT
        else (n, v)
        for n, v in SETTINGS
    ],
    ids=[f"{n}={v}" for n, v in SETTINGS],
)
def test_rows_stay_invariant_under_a_knob(name, value):
    for case, schedules in evaluate(knob(name, value)):
        orders = {sum_order(case.spec, s) for s in schedules}
        assert len(orders) == 1, (case.key, orders)


def kinds(cfg, *, where=lambda c: True) -> set[tuple]:
    return {(s.kind, s.staged) for c, ss in evaluate(cfg) if where(c) for s in ss}


def test_switches():
    """MLX_METILE_CUDA_MMA=0: the SIMT schedule everywhere; CUDA_MMA_STAGED=0: the direct loads;
    CUDA_MMA_DENSE=0: dense weights on SIMT, =1 on the direct loads; CUDA_MMA_FUSED=0: q/k/v on SIMT."""
    dense = lambda c: not c.spec.weights[0].quantized  # noqa: E731
    qkv = lambda c: len(c.spec.weights) == 3  # noqa: E731
    assert kinds(settings.parse({"MLX_METILE_CUDA_MMA": "0"})) == {("simd_splitk", False)}
    assert ("mma", True) not in kinds(settings.parse({"MLX_METILE_CUDA_MMA_STAGED": "0"}))
    assert kinds(settings.parse({"MLX_METILE_CUDA_MMA_DENSE": "0"}), where=dense) == {("simd_splitk", False)}
    assert kinds(settings.parse({"MLX_METILE_CUDA_MMA_DENSE": "1"}), where=dense) == {("mma", False)}
    assert kinds(settings.parse({"MLX_METILE_CUDA_MMA_FUSED": "0"}), where=qkv) == {("simd_splitk", False)}
    assert ("mma", True) in kinds(settings.parse({}), where=qkv)


def test_the_simt_tuning_reaches_the_schedule(env):
    env.set("MLX_METILE_CUDA_TUNE", "sg=8,budget=200,nc=3")
    target = decisions.TARGETS["compute_75"]
    for case in CASES[:50]:
        for rows in BUCKETS:
            s = decisions.choose(case.spec, rows, target, case.shape)
            assert s.kind == "simd_splitk" and s.SG == 8 and s.NC <= 3, case.key
        assert decisions.choose(case.spec, TILED_BUCKET, target, case.shape).kind == "tiled"


BAD = [(f"CUDA_MMA_{knob.upper()}", v) for knob, allowed in MMA_KNOBS.items() for v in (str(max(allowed) + 1), "x")]
BAD += [("CUDA_MMA_GROUPS", "3"), ("CUDA_MMA_WARPS", "3"), ("CUDA_MMA_MINBLOCKS", "-1"), ("CUDA_MMA_LAYOUT", "6")]
BAD += [("CUDA_MMA_DENSE", "yes"), ("CUDA_MMA", "2"), ("CUDA_MMA_STAGED", "maybe"), ("CUDA_MMA_FUSED", "2")]


@pytest.mark.parametrize("name,value", BAD, ids=[f"{n}={v}" for n, v in BAD])
def test_bad_values_are_refused_by_name(env, name, value):
    with pytest.raises(ValueError, match=f"MLX_METILE_{name}: expected "):
        env.set(f"MLX_METILE_{name}", value)
