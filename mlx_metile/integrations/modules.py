"""Replacement modules that the mlx-lm patch installs. Each keeps the
original module's arrays under the same names (no copies), remembers the
original for restore(), and hands calls of more than `max_rows` rows (prefill)
back to the original MLX code, recording that in mlx_metile.trace()."""

from __future__ import annotations

import math
from itertools import chain

import mlx.core as mx
import mlx.nn as nn

from ..formats import QuantizedWeight
from ..formats import supported as format_supported
from ..ops import fused_linear
from ..projection import Projection
from ..schedule import norm_pays
from ..trace import TraceRecord, record

PROJECTIONS = (nn.Linear, nn.QuantizedLinear)


def weight_of(layer: nn.Module, arrays: nn.Module | None = None):
    """(dense array | QuantizedWeight, bias or None) of a Linear / QuantizedLinear, its arrays
    read from `arrays` (a replacement module mirroring them, which parameter updates reach)
    or else from the layer itself."""
    src = layer if arrays is None else arrays
    bias = src.get("bias")
    if isinstance(layer, nn.QuantizedLinear):
        return QuantizedWeight.from_quantized_linear(layer, src), bias
    return src["weight"], bias


# Bumped by every item assignment or deletion on a watched module: the replacement modules
# (MetileProjection, QKVMember, FusedSwiGLU) and, while a FusedSwiGLU is installed, the original
# projections it reads. nn.Module keeps arrays and children as dict items and sets them through
# item assignment (Module.__setattr__, Module.update, load_weights), so an unchanged version means
# no array a ProjectionCache reads was replaced.
_VERSION = [0]


def _watched_setitem(self, key, value) -> None:
    _VERSION[0] += 1
    dict.__setitem__(self, key, value)


def _watched_delitem(self, key) -> None:
    _VERSION[0] += 1
    dict.__delitem__(self, key)


class Watched:
    """Mixin of the replacement modules: item assignment bumps _VERSION (see there)."""

    __setitem__ = _watched_setitem
    __delitem__ = _watched_delitem


def watch(module: nn.Module) -> None:
    """Make item assignment on `module` (an original projection a FusedSwiGLU reads) bump
    _VERSION: its class becomes a subclass that does (isinstance is unchanged; unwatch undoes it)."""
    if not isinstance(module, Watched) and not hasattr(type(module), "_metile_kind"):
        swap_class(module, "watched", {"__setitem__": _watched_setitem, "__delitem__": _watched_delitem})


def unwatch(module: nn.Module) -> None:
    if getattr(type(module), "_metile_kind", None) == "watched":
        module.__class__ = type(module).__mro__[1]


class ProjectionCache:
    """A Projection over some layers' weights, made again only when one of the modules their
    arrays are read from, or one of its arrays, changed (so parameter updates reach the kernels).
    While _VERSION is unchanged nothing was replaced and the Projection is returned at once (a
    patched Llama block makes four of these calls a token); otherwise the object ids are
    compared, in C: the Projection holds the arrays and modules seen, so their ids cannot be
    reused meanwhile. Making it on every call cost about a fifth of a patched Llama block's host
    time (8B shapes, 1 row); the id check alone, about 2 us a call (H200 host, cProfile)."""

    def __init__(self, epilogue: str | None = None):
        self.epilogue = epilogue
        self.version = -1
        self.norm_ids: tuple = ()
        self.state: tuple = ()
        self.held: tuple = ()
        self.projection: Projection | None = None

    def get(self, layers: tuple, sources: tuple, norm: nn.RMSNorm | None = None) -> Projection:
        """The Projection of `layers` (their quantization settings, fixed) with each one's
        arrays read from the matching module of `sources` (watched modules), after `norm` where
        given (an RMSNorm, which is not watched: its module and weight are checked every call)."""
        extra = () if norm is None else (norm, norm["weight"])
        norm_ids = () if norm is None else (id(norm), id(extra[1]))
        if self.version == _VERSION[0] and norm_ids == self.norm_ids:
            return self.projection
        state = tuple(map(id, chain(layers, sources, *map(dict.values, sources), extra)))
        if state != self.state:
            pairs = [weight_of(layer, src) for layer, src in zip(layers, sources)]
            fused_norm = None if norm is None else (norm["weight"], float(norm.eps))
            self.projection = Projection(
                [w for w, _ in pairs], biases=[b for _, b in pairs], epilogue=self.epilogue, norm=fused_norm
            )
            self.held = (*layers, *sources, *chain(*map(dict.values, sources)), *extra)  # (their ids stay theirs)
            self.state = state
        self.version, self.norm_ids = _VERSION[0], norm_ids
        return self.projection


def format_name(layer: nn.Module) -> str:
    """A layer's weight format as reports name it: `q4g64` (affine), `mxfp4` (another mode), `bf16`."""
    if isinstance(layer, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
        mode = getattr(layer, "mode", "affine")
        return f"q{layer.bits}g{layer.group_size}" if mode == "affine" else mode
    return {mx.float32: "f32", mx.float16: "f16", mx.bfloat16: "bf16"}.get(
        layer["weight"].dtype, str(layer["weight"].dtype)
    )


def quantized_supported(layer: nn.Module) -> bool:
    """A quantized layer (linear or embedding) in a format the kernels take."""
    return format_supported(getattr(layer, "mode", "affine"), layer.bits, layer.group_size)


def supported(layer: nn.Module) -> bool:
    if not isinstance(layer, PROJECTIONS):
        return False
    if isinstance(layer, nn.QuantizedLinear):
        return quantized_supported(layer)
    return layer["weight"].dtype in (mx.float32, mx.float16, mx.bfloat16)


def embedding_supported(emb: nn.Module) -> bool:
    """An embedding whose table the output projection can run on: float, or a supported quantized one."""
    if isinstance(emb, nn.QuantizedEmbedding):
        return quantized_supported(emb)
    return isinstance(emb, nn.Embedding) and emb["weight"].dtype in (mx.float32, mx.float16, mx.bfloat16)


def rows_of(x: mx.array) -> int:
    return math.prod(x.shape[:-1])


def _record_fallback(op: str, x: mx.array, n: int) -> None:
    record(TraceRecord(op, rows_of(x), x.shape[-1], (n,), ("-",), None, False, "mlx (rows > max_rows)", None))


def _mirror(dst: nn.Module, src: nn.Module) -> None:
    """Expose src's arrays under the same names, so the parameter tree is unchanged (and
    parameter updates reach dst, which the kernels then read)."""
    for key, value in src.items():
        if isinstance(value, mx.array):
            dst[key] = value


def carry_back(replacement: nn.Module, original: nn.Module) -> None:
    """On restore: the arrays a replacement mirrors (perhaps updated since), and the modules it
    keeps as children (perhaps swapped since: FusedSwiGLU's projections), back into the original."""
    for key, value in replacement.items():
        if isinstance(value, (mx.array, nn.Module)) and key in original:
            original[key] = value


class MetileProjection(Watched, nn.Module):
    """One Linear / QuantizedLinear computed by mlx_metile."""

    def __init__(self, original: nn.Module, max_rows: int):
        super().__init__()
        _mirror(self, original)
        object.__setattr__(self, "original", original)
        object.__setattr__(self, "max_rows", max_rows)
        object.__setattr__(self, "projection", ProjectionCache())
        object.__setattr__(self, "residual_next", None)  # added to the next call's output (fused_block_call)

    def __call__(self, x: mx.array) -> mx.array:
        residual = self.residual_next
        if residual is not None:
            object.__setattr__(self, "residual_next", None)  # (taken: the block sees it was)
        if rows_of(x) > self.max_rows:
            _record_fallback("linear", x, self.original.weight.shape[0])
            carry_back(self, self.original)  # (parameter updates reached self)
            out = self.original(x)
            return out if residual is None else residual + out
        return self.projection.get((self.original,), (self,))(x, residual)


class QKVGroup:
    """q/k/v projections of one attention computed by one fused call: the first
    member called with x computes all three; the others pick their result up
    when called with the same x. Where the block has announced (in `norm_next`) that
    x is its input RMSNorm's output, the call reads the norm's input instead and the
    norm runs inside the kernel (the norm's own node is then left unevaluated unless
    the attention uses x for something else)."""

    def __init__(self, originals: list[nn.Module], max_rows: int):
        self.originals = originals
        self.max_rows = max_rows
        self.pending: tuple[mx.array, list, list[int]] | None = None
        self.norm_next: tuple[mx.array, mx.array, nn.RMSNorm] | None = None  # (norm(x), x, norm)
        self.takes_norm = norm_pays(None, sum(m.weight.shape[0] for m in originals))  # (where ops fuses it)
        self.projection = ProjectionCache()
        self.members: list[nn.Module | None] = [None] * len(originals)  # the QKVMembers: their arrays

    def result(self, index: int, x: mx.array) -> mx.array:
        pending = self.pending
        if pending is not None and pending[0] is x and pending[1][index] is not None:
            out, pending[1][index] = pending[1][index], None
            pending[2][0] -= 1
            if not pending[2][0]:
                self.pending = None
            return out
        if rows_of(x) > self.max_rows:
            _record_fallback("fused_linear", x, self.originals[index].weight.shape[0])
            carry_back(self.members[index], self.originals[index])  # (parameter updates reached the member)
            return self.originals[index](x)
        announced = self.norm_next
        if announced is not None and announced[0] is x:
            _, raw, norm = announced
            outs = self.projection.get(tuple(self.originals), tuple(self.members), norm)(raw)
        else:
            outs = self.projection.get(tuple(self.originals), tuple(self.members))(x)
        outs = outs if isinstance(outs, list) else [outs]  # (a list of its own: results are taken from it)
        mine = outs[index]
        outs[index] = None
        self.pending = (x, outs, [len(outs) - 1])  # (x, the results not yet picked up, how many)
        return mine


class QKVMember(Watched, nn.Module):
    def __init__(self, group: QKVGroup, index: int):
        super().__init__()
        _mirror(self, group.originals[index])
        object.__setattr__(self, "group", group)
        object.__setattr__(self, "index", index)
        object.__setattr__(self, "original", group.originals[index])
        group.members[index] = self

    def __call__(self, x: mx.array) -> mx.array:
        return self.group.result(self.index, x)


class FusedSwiGLU(Watched, nn.Module):
    """down(silu(gate(x)) * up(x)) [+ residual] as two fused calls. Keeps the
    original projections as children under their names; while installed (watch_children)
    they are watched (see _VERSION), and so is a projection assigned in their place."""

    CHILDREN = ("gate_proj", "up_proj", "down_proj")
    watching = False  # (a class attribute: __init__'s assignments come through __setitem__)

    def __init__(self, original: nn.Module, max_rows: int):
        super().__init__()
        self.gate_proj = original.gate_proj
        self.up_proj = original.up_proj
        self.down_proj = original.down_proj
        object.__setattr__(self, "original", original)
        object.__setattr__(self, "max_rows", max_rows)
        object.__setattr__(self, "gate_up", ProjectionCache("swiglu"))
        object.__setattr__(self, "down", ProjectionCache())

    def watch_children(self, on: bool) -> None:
        """Watch the projections under CHILDREN (on), or give them their own classes back."""
        object.__setattr__(self, "watching", on)
        for name in self.CHILDREN:
            (watch if on else unwatch)(self[name])

    def __setitem__(self, key, value) -> None:
        if self.watching and key in self.CHILDREN and isinstance(value, nn.Module):
            unwatch(self[key])
            watch(value)
        _watched_setitem(self, key, value)

    def __call__(self, x: mx.array, residual: mx.array | None = None) -> mx.array:
        if rows_of(x) > self.max_rows:
            _record_fallback("fused_linear", x, self.gate_proj.weight.shape[0])
            carry_back(self, self.original)  # (a projection swapped in since reached self)
            out = self.original(x)
            return out if residual is None else residual + out
        gate, up, down = self["gate_proj"], self["up_proj"], self["down_proj"]  # (not Module.__getattr__: slower)
        h = self.gate_up.get((gate, up), (gate, up))(x)
        return self.down.get((down,), (down,))(h, residual)


def fused_block_call(self, x: mx.array, mask=None, cache=None):
    """A pre-norm block whose MLP adds the residual inside its down projection, and whose
    attention's output projection adds the first residual where it is an mlx_metile
    projection (one kernel and one graph node fewer per block; if the attention returns
    something other than that projection's output, patch's verification declines the block).
    With patch(fuse_norms=True) (off by default) its input RMSNorm goes into the fused q/k/v call
    where ops fuses it (schedule.norm_pays), announced to the group with the norm's output, which the
    attention still receives: whatever else it does with it stays correct. The post-attention norm
    stays its own op: ops never fuses a norm before the SwiGLU gate/up (slower on the H200)."""
    attn = self["self_attn"]
    o_proj = attn.get("o_proj")
    fuse = type(o_proj) is MetileProjection
    if fuse:
        object.__setattr__(o_proj, "residual_next", x)
    input_norm = self["input_layernorm"]
    xn = input_norm(x)
    q_proj = attn.get("q_proj")
    fusable = self.metile_fuse_norms and type(q_proj) is QKVMember and type(input_norm) is nn.RMSNorm
    group = q_proj.group if fusable and q_proj.group.takes_norm else None
    if group is not None:
        group.norm_next = (xn, x, input_norm)
    try:
        r = attn(xn, mask, cache)
    finally:
        if group is not None:
            group.norm_next = None
        taken = fuse and o_proj.residual_next is None  # then r = x + attention
        if fuse and not taken:  # the attention did not call it (or raised): nothing left pending
            object.__setattr__(o_proj, "residual_next", None)
    h = r if taken else x + r
    return self["mlp"](self["post_attention_layernorm"](h), residual=h)


def embedding_as_linear(self, x: mx.array) -> mx.array:
    """Tied output projection through mlx_metile."""
    if rows_of(x) > self.metile_max_rows:
        _record_fallback("linear", x, self.weight.shape[0])
        return type(self).__mro__[1].as_linear(self, x)
    if isinstance(self, nn.QuantizedEmbedding):
        return fused_linear(x, [QuantizedWeight.from_quantized_linear(self)])
    return fused_linear(x, [self.weight])


_swapped: dict[tuple[type, str], type] = {}


def swap_class(obj: nn.Module, kind: str, methods: dict) -> type:
    """Give one instance a subclass of its class with `methods` overridden;
    returns the original class. Other instances are untouched."""
    original = type(obj)
    key = (original, kind)
    if key not in _swapped:
        _swapped[key] = type(f"Metile{original.__name__}", (original,), {**methods, "_metile_kind": kind})
    obj.__class__ = _swapped[key]
    return original
