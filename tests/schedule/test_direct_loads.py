"""The tables' direct_loads: TILES products of the formats and row buckets listed keep exactly the
schedule the ring turned off gives; the buckets not listed stage; a ring setting turns the table off
(the rules alone: the shipped decisions file off)."""

from __future__ import annotations

import pytest

from mlx_metile import settings
from mlx_metile.backends.cuda_device import build_target
from mlx_metile.formats import WeightFormat
from mlx_metile.schedule import Shape, choose
from mlx_metile.schedule.cuda_layouts import TILES
from mlx_metile.schedule.tables import cuda_tables
from mlx_metile.spec import ProjectionSpec

GATE = Shape(4096, 14336)  # Llama-3.1-8B's gate / up: TILES at every row bucket


def spec(wf: WeightFormat, swiglu: bool = False) -> ProjectionSpec:
    return ProjectionSpec("bf16", (wf,) * (2 if swiglu else 1), "swiglu" if swiglu else None, False, k_multiple=256)


CASES = [
    (WeightFormat("bf16", 2, 64, False, "bf16"), False),
    (WeightFormat("bf16", 2, 64, False, "bf16"), True),
    (WeightFormat("bf16", 5, 32, False, "bf16"), False),
    (WeightFormat("u8", 8, 32, False, "bf16", "mxfp8"), False),
    (WeightFormat("u8", 4, 16, False, "bf16", "nvfp4"), True),
]


@pytest.mark.parametrize("wf,swiglu", CASES)
def test_listed_buckets_take_the_schedule_of_the_ring_turned_off(env, wf, swiglu):
    env.set("MLX_METILE_CUDA_DECISIONS", "0")  # the rules alone (the shipped file has routes of this shape)
    target, s = build_target(), spec(wf, swiglu)
    listed = cuda_tables().direct_loads[(wf.short(), "swiglu" if swiglu else "single")]
    assert listed, wf.short()
    for bucket in (1, 2, 4, 8, 16, 32):
        chosen = choose(s, bucket, target, GATE, settings.current())
        assert chosen.layout == TILES
        if bucket in listed:
            env.set("MLX_METILE_CUDA_MMA_STAGED", "0")
            assert chosen == choose(s, bucket, target, GATE, settings.current()), bucket
            env.unset("MLX_METILE_CUDA_MMA_STAGED")
            assert not chosen.staged
        else:
            assert chosen.staged, bucket


def test_a_ring_setting_turns_the_table_off(env):
    env.set("MLX_METILE_CUDA_DECISIONS", "0")
    target, s = build_target(), spec(WeightFormat("bf16", 2, 64, False, "bf16"), True)
    assert not choose(s, 1, target, GATE, settings.current()).staged
    env.set("MLX_METILE_CUDA_MMA_GROUPS", "4")
    assert choose(s, 1, target, GATE, settings.current()).staged
