"""What patch() finds in a tensor-parallel model, in this process (a group of one: mlx.nn's
sharded layers hold every feature; nothing is computed, so no kernel is built). The ranks' own
numerics: test_sharded.py."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx.nn.layers.distributed import QuantizedShardedToAllLinear, ShardedToAllLinear, shard_linear

import mlx_metile as mt
from mlx_metile.integrations import mlx_lm as integration
from mlx_metile.integrations.sharded import (
    ColumnShardedProjection,
    RowShardedProjection,
    ShardedSwiGLU,
    sharded_supported,
)

from .sharded_models import make


def _sharded(fmt: str) -> nn.Module:
    model = make("llama", fmt)
    model.shard(mx.distributed.init())
    return model


def test_a_sharded_model_s_parts_and_restore():
    model = _sharded("q4g32")
    layer = model.model.layers[0]
    originals = (layer.self_attn.q_proj, layer.self_attn.o_proj, layer.mlp)
    report = mt.patch(model, verify=False)
    kinds = {(p, k) for p, k in report.replaced}
    assert ("model.layers.0.self_attn", "qkv") in kinds and ("model.layers.0.mlp", "mlp_swiglu") in kinds
    assert ("model.layers.0.self_attn.o_proj", "projection") in kinds and ("lm_head", "projection") in kinds
    assert type(layer.self_attn.o_proj) is RowShardedProjection and type(layer.mlp) is ShardedSwiGLU
    # the block's residual stays the block's own add, after the all-reduce
    assert not any(k == "residual" for _, k in kinds)
    assert ("model.layers.0", "residual") in {(p, k) for p, k, _ in report.declined}
    assert not hasattr(type(layer), "_metile_kind")
    assert {p.formats for p in report._parts if p.kind in ("qkv", "mlp_swiglu")} == {
        "q4g32"
    }  # (the sharded layers' format)
    report.restore()
    assert (layer.self_attn.q_proj, layer.self_attn.o_proj, layer.mlp) == originals
    assert type(layer.self_attn.o_proj) is QuantizedShardedToAllLinear


def test_dense_sharded_layers_follow_patch_s_dense_setting():
    report = mt.patch(_sharded("float32"), verify=False, dense=False)
    declined = {(p, k) for p, k, why in report.declined if why == integration.DENSE_DECLINED}
    assert {("model.layers.0.self_attn", "qkv"), ("model.layers.0.mlp", "mlp_swiglu")} <= declined
    assert ("model.layers.0.self_attn.o_proj", "projection") in declined
    assert not report.replaced


def test_a_lone_sharded_layer_is_replaced_by_its_kind():
    """Outside an attention or MLP, a column-sharded layer is one projection over its slice and a
    row-sharded one its slice's product, all-reduced."""
    model = _sharded("float32")
    group = mx.distributed.init()
    holder = nn.Module()
    holder.a = shard_linear(nn.Linear(128, 64), "all-to-sharded", group=group)
    holder.b = shard_linear(nn.Linear(64, 128), "sharded-to-all", group=group)
    model.extra = holder
    report = mt.patch(model, verify=False)
    assert type(holder.a) is ColumnShardedProjection and type(holder.b) is RowShardedProjection
    assert {("extra.a", "projection"), ("extra.b", "projection")} <= set(report.replaced)
    report.restore()
    assert type(holder.b) is ShardedToAllLinear


def test_supported_formats_of_sharded_layers():
    for fmt, ok in (("float32", True), ("q3g32", True), ("mxfp4", True), ("nvfp4", True)):
        layer = _sharded(fmt).model.layers[0].mlp.down_proj
        assert sharded_supported(layer) is ok, fmt
    assert not sharded_supported(nn.Linear(4, 4))  # (a plain layer is not a sharded one)
