"""patch() on tensor-parallel models: the layers of `mlx.nn.layers.distributed` that mlx-lm's
`model.shard(group)` (and so `mlx_lm.utils.sharded_load`) installs.

What MLX's layers compute, and what replaces them:
- AllToShardedLinear / QuantizedAllToShardedLinear (q/k/v, gate, up): each rank holds a slice of
  the output features; `x @ W_r.T + b_r`, no communication in the forward pass (the input's
  gradients are summed over the group). Fused here as on one machine: q/k/v in one call, gate/up
  with the SwiGLU epilogue, over the rank's slices.
- ShardedToAllLinear / QuantizedShardedToAllLinear (o, down): each rank holds a slice of the input
  features; `all_sum(x_r @ W_r.T) + b`. Replaced by the mlx_metile product of the rank's slice, the
  same all-reduce, then the bias once. The residual add is never fused into these projections
  (each rank would add it, and the all-reduce would sum it N times): a block whose MLP is sharded
  keeps its own `h + mlp(...)`, after the all-reduce.

Anything else that communicates is declined and left as it is, with everything under it: a
`FullyShardedModule` (parameters gathered every call) and any module holding a distributed group
of its own (an MoE that all-reduces its experts' sum, mlx-lm's `sharding_group`), whose call may
all-reduce what the rules would replace. So are q/k/v or gate/up/down that mix sharded and
unsharded layers, groups, or slice shapes that do not fit together.

Every rank runs patch() at once: verification runs the model (and its all-reduces) on each, and
each decision is taken on the largest difference over the ranks (`agreement`), so every rank keeps
the same parts and the ranks' collectives keep matching.
"""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx
import mlx.nn as nn
from mlx.nn.layers.distributed import (
    AllToShardedLinear,
    FullyShardedModule,
    QuantizedAllToShardedLinear,
    QuantizedShardedToAllLinear,
    ShardedToAllLinear,
    sum_gradients,
)

from .mlx_lm import (
    DENSE_DECLINED,
    EXTRA_RULES,
    PATCHED_TYPES,
    _mlp_part,
    _named,
    _probe,
    _qkv_part,
    _replace_part,
    _walk,
    _wanted,
    likeness,
)
from .modules import (
    FusedSwiGLU,
    MetileProjection,
    ProjectionCache,
    _record_fallback,
    carry_back,
    quantized_supported,
    rows_of,
)

COLUMN = (AllToShardedLinear, QuantizedAllToShardedLinear)  # output features sharded
ROW = (ShardedToAllLinear, QuantizedShardedToAllLinear)  # input features sharded, all-reduced
SHARDED = COLUMN + ROW
QKV = ("q_proj", "k_proj", "v_proj")
MLP = ("gate_proj", "up_proj", "down_proj")


def sharded_supported(layer: nn.Module) -> bool:
    """A tensor-parallel linear layer in a format the kernels take."""
    if isinstance(layer, (QuantizedAllToShardedLinear, QuantizedShardedToAllLinear)):
        return quantized_supported(layer)
    return isinstance(layer, SHARDED) and layer["weight"].dtype in (mx.float32, mx.float16, mx.bfloat16)


def _k(layer: nn.Module) -> int:
    """Input features of the rank's slice."""
    w = layer["weight"]
    return w.shape[1] * 32 // layer.bits if "scales" in layer else w.shape[1]


def _own_group(module: nn.Module) -> mx.distributed.Group | None:
    """A distributed group the module holds as an attribute of its own (None where it holds none)."""
    for value in vars(module).values():
        if isinstance(value, mx.distributed.Group) and value.size() > 1:
            return value
    return None


# -- replacement modules --------------------------------------------------------------------
class _Summed:
    """A Projection whose input's gradients are summed over the group first (AllToShardedLinear's
    sum_gradients: the identity in the forward pass)."""

    def __init__(self, projection, summing: Callable[[mx.array], mx.array]):
        self.projection, self.summing = projection, summing

    def __call__(self, x: mx.array, residual: mx.array | None = None):
        return self.projection(self.summing(x), residual)


class SummingCache(ProjectionCache):
    """A ProjectionCache over column-sharded layers: its Projection sums the input's gradients."""

    def __init__(self, group: mx.distributed.Group, epilogue: str | None = None):
        super().__init__(epilogue)
        self.summing = sum_gradients(group)
        self.wrapped: _Summed | None = None

    def get(self, layers: tuple, sources: tuple, norm: nn.RMSNorm | None = None) -> _Summed:
        projection = super().get(layers, sources, norm)
        if self.wrapped is None or self.wrapped.projection is not projection:
            self.wrapped = _Summed(projection, self.summing)
        return self.wrapped


class RowShardedProjection(MetileProjection):
    """A ShardedToAllLinear / QuantizedShardedToAllLinear: mlx_metile's product of the rank's slice,
    MLX's all-reduce over the layer's group, then the bias (once)."""

    def __init__(self, original: nn.Module, max_rows: int):
        super().__init__(original, max_rows)
        object.__setattr__(self, "projection", ProjectionCache(bias=False))

    def __call__(self, x: mx.array) -> mx.array:
        if rows_of(x) > self.max_rows:
            _record_fallback("linear", x, self.original.weight.shape[0])
            carry_back(self, self.original)
            return self.original(x)
        y = mx.distributed.all_sum(self.projection.get((self.original,), (self,))(x), group=self.original.group)
        return y + self["bias"] if "bias" in self else y


class ColumnShardedProjection(MetileProjection):
    """An AllToShardedLinear / QuantizedAllToShardedLinear outside a fusion: the rank's slice, bias included."""

    def __init__(self, original: nn.Module, max_rows: int):
        super().__init__(original, max_rows)
        object.__setattr__(self, "projection", SummingCache(original.group))

    def __call__(self, x: mx.array) -> mx.array:
        if rows_of(x) > self.max_rows:
            _record_fallback("linear", x, self.original.weight.shape[0])
            carry_back(self, self.original)
            return self.original(x)
        return self.projection.get((self.original,), (self,))(x)


class ShardedSwiGLU(FusedSwiGLU):
    """down(silu(gate(x)) * up(x)) of a tensor-parallel MLP: gate/up fused over the rank's slices of
    the intermediate features, down over the same slice, all-reduced, then down's bias; a residual
    handed in is added after that, once."""

    def __init__(self, original: nn.Module, max_rows: int):
        super().__init__(original, max_rows)
        object.__setattr__(self, "gate_up", SummingCache(original["gate_proj"].group, "swiglu"))
        object.__setattr__(self, "down", ProjectionCache(bias=False))

    def __call__(self, x: mx.array, residual: mx.array | None = None) -> mx.array:
        if rows_of(x) > self.max_rows:
            _record_fallback("fused_linear", x, self.gate_proj.weight.shape[0])
            carry_back(self, self.original)
            out = self.original(x)
            return out if residual is None else residual + out
        gate, up, down = self["gate_proj"], self["up_proj"], self["down_proj"]
        h = self.gate_up.get((gate, up), (gate, up))(x)
        y = mx.distributed.all_sum(self.down.get((down,), (down,))(h), group=down.group)
        if "bias" in down:
            y = y + down["bias"]
        return y if residual is None else residual + y


# -- discovery --------------------------------------------------------------------------------
def discover_sharded(model: nn.Module, max_rows: int, declined: list, dense: bool) -> tuple[list, set[int]]:
    """The parts replacing `model`'s tensor-parallel layers, and the ids of the modules judged here
    (the attentions and MLPs holding such layers, and everything under a declined module), which
    the single-machine rules must leave alone. Declined modules are added to `declined`."""
    parts: list = []
    skip: set[int] = set()
    taken: set[int] = set()  # ids of sharded layers a fusion took

    def leave(mod: nn.Module, path: str, kind: str, why: str) -> None:
        declined.append((path, kind, why))
        skip.add(id(mod))
        skip.update(id(m) for _, _, m, _ in _walk(mod))

    for container, key, mod, path in list(_walk(model)):
        if id(mod) in skip or isinstance(mod, PATCHED_TYPES) or hasattr(type(mod), "_metile_kind"):
            continue
        if isinstance(mod, FullyShardedModule):
            leave(mod, path, "sharded", "fully sharded module (parameters gathered every call): left to MLX")
            continue
        if not isinstance(mod, SHARDED) and _own_group(mod) is not None:
            leave(mod, path, "sharded", "holds a distributed group of its own (its call may all-reduce): left to MLX")
            continue
        if all(n in mod for n in QKV) and any(isinstance(mod[n], SHARDED) for n in QKV):
            members = [mod[n] for n in QKV]
            why = _qkv_misfit(members)
            if why:
                leave(mod, path, "qkv", why)
                continue
            skip.add(id(mod))
            taken.update(id(m) for m in members)
            if not _wanted(members, dense):
                declined.append((path, "qkv", DENSE_DECLINED))
            else:
                parts.append(_named(_qkv_part(mod, path, members, max_rows, SummingCache(members[0].group)), members))
        if all(n in mod for n in MLP) and any(isinstance(mod[n], SHARDED) for n in MLP):
            members = [mod[n] for n in MLP]
            why = _mlp_misfit(members)
            if why:
                leave(mod, path, "mlp_swiglu", why)
                continue
            skip.add(id(mod))
            taken.update(id(m) for m in members)
            if not _wanted(members, dense):
                declined.append((path, "mlp_swiglu", DENSE_DECLINED))
                continue
            fused = ShardedSwiGLU(mod, max_rows)
            part = _named(_mlp_part(container, key, mod, fused, path), members)
            part.probe = lambda mod=mod, fused=fused: _probe(mod, fused, mod["gate_proj"])
            part.likeness = (type(fused), likeness(mod))
            parts.append(part)
            if isinstance(container, nn.Module) and "self_attn" in container:
                block = path.rsplit(".", 1)[0] if "." in path else ""
                declined.append(
                    (block, "residual", "sharded MLP: the block adds the residual once, after the all-reduce")
                )
    for container, key, mod, path in list(_walk(model)):
        if not isinstance(mod, SHARDED) or id(mod) in taken or id(mod) in skip:
            continue
        if not _wanted([mod], dense):
            declined.append((path, "projection", DENSE_DECLINED))
        elif not sharded_supported(mod):
            declined.append((path, "projection", f"unsupported weight format of {type(mod).__name__}"))
        else:
            new = (RowShardedProjection if isinstance(mod, ROW) else ColumnShardedProjection)(mod, max_rows)
            parts.append(_named(_replace_part(container, key, mod, new, path, "projection"), [mod]))
    return parts, skip


def _qkv_misfit(members: list) -> str:
    """Why q/k/v cannot be one fused call over the rank's slices ("" where they can)."""
    if not all(isinstance(m, COLUMN) for m in members):
        names = ", ".join(type(m).__name__ for m in members)
        return f"q/k/v sharded in a way patch does not fuse ({names}): left to MLX"
    if len({id(m.group) for m in members}) != 1:
        return "q/k/v sharded over different groups: left to MLX"
    if not all(sharded_supported(m) for m in members) or len({_k(m) for m in members}) != 1:
        return "q/k/v are not supported projections of one input"
    return ""


def _mlp_misfit(members: list) -> str:
    """Why gate/up/down cannot be one sharded SwiGLU over the rank's slices ("" where they can)."""
    gate, up, down = members
    if not (isinstance(gate, COLUMN) and isinstance(up, COLUMN) and isinstance(down, ROW)):
        names = ", ".join(type(m).__name__ for m in members)
        return f"gate/up/down sharded in a way patch does not fuse ({names}): left to MLX"
    if len({id(m.group) for m in members}) != 1:
        return "gate/up/down sharded over different groups: left to MLX"
    if not all(sharded_supported(m) for m in members):
        return "gate/up/down are not supported projections of one SwiGLU MLP"
    width = gate["weight"].shape[0]
    if _k(gate) != _k(up) or up["weight"].shape[0] != width or _k(down) != width:
        return "gate/up/down slices do not fit together (one input, one intermediate slice): left to MLX"
    return ""


# -- ranks ------------------------------------------------------------------------------------
def groups_of(model: nn.Module) -> list[mx.distributed.Group]:
    """The distinct groups (of more than one process) the model's sharded layers and modules use,
    patched or not (a replacement's original layer is looked at too)."""
    seen: dict[int, mx.distributed.Group] = {}
    for mod in model.modules():
        for m in (mod, getattr(mod, "original", None)):
            group = m.group if isinstance(m, SHARDED) else _own_group(m) if isinstance(m, nn.Module) else None
            if group is not None and group.size() > 1:
                seen.setdefault(id(group), group)
    return list(seen.values())


def _common_group(model: nn.Module) -> mx.distributed.Group | None:
    groups = groups_of(model)
    if not groups:
        return None
    return groups[0] if len(groups) == 1 else mx.distributed.init()


def agreement(model: nn.Module) -> Callable[[float], float]:
    """For a sharded model, a function giving the largest of a value over the ranks (every rank
    must call it alike); for any other model, the identity."""
    group = _common_group(model)
    if group is None:
        return lambda v: v

    def agree(value: float) -> float:
        return float(mx.distributed.all_max(mx.array([value], dtype=mx.float32), group=group, stream=mx.cpu).item())

    return agree


def describe(model: nn.Module) -> str:
    """ "rank r of n" for a sharded model, "" for any other."""
    group = _common_group(model)
    return "" if group is None else f"rank {group.rank()} of {group.size()}"


def gather_reports(report, group: mx.distributed.Group | None = None) -> list[str]:
    """Every rank's printed report, in rank order (every rank of `group`, the world group by
    default, must call it)."""
    group = group or mx.distributed.init()
    data = mx.array(list(str(report).encode()), dtype=mx.uint8)
    lengths = mx.distributed.all_gather(mx.array([data.size], dtype=mx.int32), group=group, stream=mx.cpu).tolist()
    padded = mx.zeros((max(lengths),), dtype=mx.uint8)
    padded[: data.size] = data
    rows = mx.distributed.all_gather(padded[None], group=group, stream=mx.cpu).tolist()
    return [bytes(row[:n]).decode() for row, n in zip(rows, lengths)]


class ShardedRules:
    """patch()'s rules for tensor-parallel models (mlx_lm.Rules)."""

    discover = staticmethod(discover_sharded)
    describe = staticmethod(describe)

    @staticmethod
    def agreement(model: nn.Module) -> Callable[[float], float] | None:
        return None if _common_group(model) is None else agreement(model)


EXTRA_RULES.append(ShardedRules())
