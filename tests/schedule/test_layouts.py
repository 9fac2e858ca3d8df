"""What each CUDA column layout changes in a Schedule (mlx_metile.schedule.cuda_layouts): ONE_WAVE
and ONE_TILE_WIDE are ONE_TILE's kernels with a few fields moved - the same sums, other launch
bounds or ring depths - so that choosing them by the grid's size changes speed only."""

from __future__ import annotations

from mlx_metile import settings
from mlx_metile.schedule import takes_mma
from mlx_metile.schedule.cuda_layouts import ONE_TILE, ONE_TILE_WIDE, ONE_WAVE, WAVE_BLOCKS
from mlx_metile.schedule.cuda_mma import ONE_WAVE_DENSE_WARPS, MmaRules
from tests.schedule import decisions

BUCKETS = (1, 2, 4, 8, 16, 32)
TARGET = decisions.TARGETS["sm_90"]


def mma_specs(cfg):
    specs = {c.spec for c in decisions.cases() if c.target == "sm_90"}
    return sorted((s for s in specs if takes_mma(s, TARGET, cfg)), key=lambda s: s.name())


def moved(a, b) -> set[str]:
    """The fields (but the layout's own) in which Schedules a and b differ."""
    x, y = a.knobs(), b.knobs()
    return {f for f in x if x[f] != y[f] and f != "layout"}


def test_one_wave_kernels_are_one_tile_s_but_for_the_launch_bound():
    """ONE_WAVE (grids of 4-5 blocks per SM): staged single products of 4/8-bit weights at 1-8 rows
    ask for WAVE_BLOCKS blocks per SM; everything else is ONE_TILE's, but single 2-byte dense
    products, which split K over ONE_WAVE_DENSE_WARPS warps. (Ring depths fixed by
    MLX_METILE_CUDA_MMA_STAGES=4: ONE_WAVE has a stage table of its own.)"""
    cfg = settings.parse({"MLX_METILE_CUDA_MMA_STAGES": "4"})
    bounds = 0
    for spec in mma_specs(cfg):
        rules = MmaRules(spec, cfg, TARGET)
        w, single = spec.weights[0], len(spec.weights) == 1 and spec.epilogue is None
        for bucket in BUCKETS:
            wave, tile = rules.schedule(bucket, ONE_WAVE), rules.schedule(bucket, ONE_TILE)
            if single and not w.quantized:
                assert wave.SG == ONE_WAVE_DENSE_WARPS < tile.SG, (spec.name(), bucket)
                assert moved(wave, tile) <= {"SG", "NC", "stages"}, (spec.name(), bucket)
            elif single and bucket <= 8 and wave.staged:
                assert moved(wave, tile) == {"blocks"} and wave.blocks == WAVE_BLOCKS, (spec.name(), bucket)
                bounds += 1
            else:
                assert moved(wave, tile) == set(), (spec.name(), bucket, moved(wave, tile))
    assert bounds > 50


def test_one_tile_wide_kernels_are_one_tile_s_but_for_ring_depths_and_shared_x():
    """ONE_TILE_WIDE (one-tile grids of 2-4 blocks per SM) moves the stages of the rings only, and
    at 32 rows may share x among a block's warps (the same K ranges, summed in the same order)."""
    cfg = settings.parse({})
    depths = shared = 0
    for spec in mma_specs(cfg):
        rules = MmaRules(spec, cfg, TARGET)
        for bucket in BUCKETS:
            wide, tile = rules.schedule(bucket, ONE_TILE_WIDE), rules.schedule(bucket, ONE_TILE)
            fields = moved(wide, tile)
            if wide.xshare:
                assert (wide.splits or wide.SG) == (tile.splits or tile.SG) and bucket == 32, spec.name()
                shared += 1
            else:
                assert fields <= {"stages"}, (spec.name(), bucket, fields)
                depths += fields == {"stages"}
    assert depths > 10 and shared > 0, (depths, shared)
