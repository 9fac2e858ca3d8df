"""Shared x (lower/mma_xshare.py) on the CPU: warps that own their columns over all of K, x staged
once per block, add the K ranges' sums in the K-split kernel's order - every output bit equals
that kernel's."""

from __future__ import annotations

import pytest

from mlx_metile.lower import LowerError
from mlx_metile.schedule.cuda_layouts import ONE_TILE_WIDE, TILES
from mlx_metile.spec import ProjectionSpec, WeightFormat

from .cases import Case, cancelling, kernel, q4, q8, same, set_knobs

# (spec, K, N, bucket, layout, settings; {}: the default): K = 1280 holds 20 groups, K ranges 8, 8, 4, 0
XSHARE = [
    (ProjectionSpec("bf16", (q4,), k_multiple=256), 1280, 80, 16, TILES, {"XSHARE": "4"}),
    (ProjectionSpec("bf16", (q4, q4), "swiglu", k_multiple=256), 1280, 40, 32, TILES, {}),
    (ProjectionSpec("bf16", (q4, q4), "swiglu", k_multiple=256), 1280, 40, 32, ONE_TILE_WIDE, {}),
    (ProjectionSpec("bf16", (q4, q4), "swiglu", k_multiple=256), 1280, 40, 16, TILES, {"XSHARE": "2"}),
    (ProjectionSpec("bf16", (q8,), k_multiple=256), 1024, 48, 32, TILES, {"XSHARE": "2"}),
    (ProjectionSpec("f16", (WeightFormat("f16", 4, 128),), k_multiple=256), 1024, 48, 16, TILES, {"XSHARE": "8"}),
    (ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=256), 512, 48, 32, TILES, {"XSHARE": "4"}),
    (ProjectionSpec("bf16", (q4,) * 3, k_multiple=256), 512, (40, 24, 24), 16, TILES, {"XSHARE": "2"}),  # q/k/v
]


@pytest.mark.parametrize(
    "spec,K,N,bucket,layout,settings",
    XSHARE,
    ids=[f"{c[0].name()}-{c[3]}-L{c[4]}-{'-'.join(c[5].values()) or 'default'}" for c in XSHARE],
)
def test_shared_x_gives_the_bits_of_the_k_split_kernel(env, spec, K, N, bucket, layout, settings):
    """Every output bit of the shared-x kernel (the knob's, or the default's where it shares x)
    equals the K-split kernel's (XSHARE=0) - an empty K range, a partial block of columns and rows
    past M included - and each row equals that row computed alone by the 8-row kernel."""
    set_knobs(env, settings)
    art = kernel(spec, bucket, layout)
    schedule = art.schedule
    assert schedule.xshare, f"{schedule.describe()}: not shared x (give the case XSHARE explicitly)"
    if "XSHARE" in settings:
        assert schedule.xshare == int(settings["XSHARE"])
    assert schedule.SG == schedule.xshare
    case = Case(spec, K, N, rows=bucket)
    rows = bucket - 3
    shared = case.run_kernel(art, rows)
    case.check(shared, rows, f"{spec.name()} shared x rows={rows}")
    case.invariant(shared, f"{spec.name()} shared x", layout=layout)
    env.set("MLX_METILE_CUDA_MMA_XSHARE", "0")
    split = kernel(spec, bucket, layout)
    assert split.schedule.xshare == 0
    assert same(shared, case.run_kernel(split, rows)), f"{spec.name()}: shared x changed bits"


def test_shared_x_adds_the_k_ranges_in_order(env):
    """On data whose K ranges' sums are about +S, +S, -S, -S (cancelling: another order of
    adding them changes the bf16 bits), the shared-x kernel gives the K-split kernel's bits;
    8 K ranges instead of 4 do not (the check can fail)."""
    spec = ProjectionSpec("bf16", (q4,), k_multiple=256)
    case = cancelling(Case(spec, 2048, 48, rows=16), 1024)
    set_knobs(env, {"XSHARE": "0", "WARPS": "4"})
    split = case.run(16, 16, TILES)
    for warps in ("2", "4", "8"):
        set_knobs(env, {"XSHARE": warps})
        assert same(case.run(16, 16, TILES), split), f"{warps} warps"
    set_knobs(env, {"XSHARE": "0", "WARPS": "8"})
    assert not same(case.run(16, 16, TILES), split), "the check cannot fail"


def test_shared_x_over_the_shared_memory_of_a_block_is_refused(env):
    """Settings whose rings would not fit one block's shared memory fail at compile time, by name."""
    set_knobs(env, {"XSHARE": "8", "TILES": "4", "STAGES": "8"})
    with pytest.raises(LowerError, match="shared memory"):
        kernel(ProjectionSpec("bf16", (q4,), k_multiple=256), 16, TILES)
