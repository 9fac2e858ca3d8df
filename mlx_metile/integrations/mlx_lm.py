"""`mlx_metile.patch(model)`: swap an mlx-lm model's projections for fused,
row-reusing mlx_metile kernels, verify the model still computes what it did,
report what happened, and undo it on request.

Blocks are found by structure, not by model name:
- attention: a module with q_proj, k_proj, v_proj (Linear / QuantizedLinear of
  one input) -> one fused q/k/v call;
- MLP: a module with gate_proj, up_proj, down_proj -> gate/up with the SwiGLU
  epilogue, then down (verification declines it where the MLP is not SwiGLU);
- block: a module with self_attn, mlp, input_layernorm, post_attention_layernorm
  whose MLP was fused -> the residual add moves into the down projection;
- every other Linear / QuantizedLinear, and a tied embedding's output
  projection (`as_linear`) -> an mlx_metile projection.
Only instances change (module replacement or a per-instance class swap);
classes and other models are untouched.
"""

from __future__ import annotations

import math
import numbers
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from ..schedule import ROW_BUCKETS, row_bucket
from ..tune import autotune
from . import record
from .modules import (
    QUANTIZED_LINEAR,
    FusedSwiGLU,
    MetileProjection,
    QKVGroup,
    QKVMember,
    carry_back,
    embedding_as_linear,
    embedding_supported,
    format_name,
    fused_block_call,
    supported,
    swap_class,
)

PATCHED_TYPES = (MetileProjection, QKVMember, FusedSwiGLU)

# f32 sums in another order move f32 logits by ~1e-6 of their scale on the test
# models; this floor leaves a margin of 100x.
F32_FLOOR = 1e-4
# A patched low-precision model may be at most this much further from the
# float32 model than the unpatched one is (the patched model rounds once where
# stock MLX rounds after every op, so it is usually closer, not further).
ERROR_GROWTH = 1.5
# Above this many bytes of float16/bfloat16 parameters the float32 reference
# copy is not made; the fixed floors below are used instead.
F32_REFERENCE_LIMIT = 2 << 30
FIXED_FLOOR = {mx.float16: 2e-2, mx.bfloat16: 5e-2}
# Module probes run in float32 with inputs scaled so activations reach |g| ~ 2,
# where SiLU, GELU and friends differ by about 10%; f32 rounding is ~1e-6.
PROBE_TOLERANCE = 1e-3
# The phases of patch() that PatchReport.phases times, in the order the report lists them.
PHASES = (
    "discovery",
    "verification record",
    "float32 reference",
    "unpatched model",
    "probes",
    "patched model",
    "tuning",
)
# What decided a verification (PatchReport.criterion): what the logits were compared against, the
# scale max_diff and allowed are relative to, and the rule allowed came from (_verify).
CRITERIA = {
    "float32": (
        "float32 reference",
        "max |float32 reference|",
        "tolerance + floor, the float32 reference alone; the unpatched model not run",
    ),
    "batch bound": (
        "float32 reference",
        "max |float32 reference|",
        f"{ERROR_GROWTH} x the unpatched batch piece's distance + (tolerance + floor) x its scale",
    ),
    "bound": (
        "float32 reference",
        "max |unpatched logits|",
        f"{ERROR_GROWTH} x the unpatched model's distance + tolerance + floor",
    ),
    "unpatched": ("unpatched logits", "max |unpatched logits|", "tolerance + floor"),
}


@dataclass
class Part:
    path: str
    kind: str  # "qkv" | "mlp_swiglu" | "residual" | "projection" | "tied_output"
    apply: Callable[[], None]
    undo: Callable[[], None]
    needs: Part | None = None
    applied: bool = False
    probe: Callable[[], float] | None = None  # module-level check: relative output difference
    likeness: object = None  # equal for parts whose probes must agree (one of them probes: _probe_failures)
    probed: float = 0.0  # what the probe gave
    formats: str = ""  # its weights' formats, as the report names them

    def on(self) -> None:
        if not self.applied:
            self.apply()
            self.applied = True

    def off(self) -> None:
        if self.applied:
            self.undo()
            self.applied = False


@dataclass
class PatchReport:
    replaced: list[tuple[str, str]] = field(default_factory=list)
    formats: dict[tuple[str, str], str] = field(default_factory=dict)  # (path, kind) -> weight formats
    declined: list[tuple[str, str, str]] = field(default_factory=list)
    max_diff: float | None = None  # verified logits difference, relative to the scale CRITERIA names
    allowed: float | None = None
    criterion: str = ""  # which of CRITERIA decided (the key): what was compared, at what scale
    seconds: float = 0.0  # what patch() took, verification (and tuning) included
    phases: dict[str, float] = field(default_factory=dict)  # where that time went (PHASES), seconds
    runs: int = 0  # verification's runs of the patched model
    shard: str = ""  # for a tensor-parallel model, this process's place in it ("rank 0 of 2")
    tuning: object | None = None  # patch(tune=True): the mlx_metile.tune.Tuning of the patched calls
    record: str = ""  # "cached record <key>": verification skipped, its record used; "recorded <key>"
    _parts: list[Part] = field(default_factory=list, repr=False)

    def __bool__(self) -> bool:
        return bool(self.replaced)

    def __str__(self) -> str:
        where = f" ({self.shard})" if self.shard else ""
        lines = [
            f"mlx_metile.patch{where}: {len(self.replaced)} replaced, {len(self.declined)} declined in {self.seconds:.1f} s"
        ]
        if self.phases:
            lines.append(f"  time: {self.timings()}")
        if self.max_diff is not None:
            said = self.verdict()
            if self.record.startswith("cached"):
                said = f"{self.record} ({said} when recorded)"
            elif self.record:
                said += f"; {self.record}"
            lines.append(f"  verified: {said}")
        for path, kind in self.replaced:
            fmt = self.formats.get((path, kind))
            lines.append(f"  replaced {kind:12s} {path}" + (f" ({fmt})" if fmt else ""))
        for path, kind, why in self.declined:
            lines.append(f"  declined {kind:12s} {path}: {why}")
        if self.tuning is not None:
            lines.append(str(self.tuning))
        return "\n".join(lines)

    def verdict(self, long: bool = True) -> str:
        """What verification found: "max |logits - float32 reference| = 0.0093 x max |float32
        reference| (allowed 0.0501: <the rule of CRITERIA>)"; not `long`: without the rule."""
        if self.max_diff is None:
            return "not verified"
        against, scale, rule = CRITERIA.get(self.criterion, ("reference", "scale", ""))
        said = f"max |logits - {against}| = {self.max_diff:.3g} x {scale} (allowed {self.allowed:.3g}"
        return said + (f": {rule})" if rule and long else ")")

    def timings(self) -> str:
        """Where the time went: "unpatched model 9.8 s, float32 reference 1.6 s, ..." in PHASES' order."""
        said = []
        for name in PHASES:
            if name in self.phases:
                runs = f" ({self.runs} run{'s' if self.runs != 1 else ''})" if name == "patched model" else ""
                said.append(f"{name} {self.phases[name]:.1f} s{runs}")
        return ", ".join(said)

    def restore(self) -> None:
        """Put every original module back, in reverse order."""
        for part in reversed(self._parts):
            part.off()
        self._parts.clear()
        self.replaced.clear()


# -- discovery ---------------------------------------------------------------
def _children(module: nn.Module):
    """(container, key, child, path) for every child module, lists included."""
    for key, value in module.items():
        if isinstance(value, nn.Module):
            yield module, key, value, key
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if isinstance(item, nn.Module):
                    yield value, i, item, f"{key}.{i}"


def _set(container, key, value) -> None:
    container[key] = value


def _walk(module: nn.Module, prefix: str = ""):
    """Every module below `module`; a module this package installed is
    yielded but not entered (its children are the originals it computes)."""
    for container, key, child, path in _children(module):
        full = f"{prefix}{path}"
        yield container, key, child, full
        if not isinstance(child, PATCHED_TYPES):
            yield from _walk(child, full + ".")


class Rules(Protocol):
    """Discovery for layers the rules here do not know (integrations/sharded.py: tensor-parallel ones)."""

    def discover(self, model: nn.Module, max_rows: int, declined: list, dense: bool) -> tuple[list[Part], set[int]]:
        """The parts it replaces, and the ids of the modules it judged (left alone by the rules here)."""

    def agreement(self, model: nn.Module) -> Callable[[float], float] | None:
        """How a verified difference becomes one every process deciding alike sees (None: as it is)."""

    def describe(self, model: nn.Module) -> str:
        """The report's `shard`: this process's place in the model ("" where none)."""


EXTRA_RULES: list[Rules] = []  # (integrations/__init__.py imports sharded.py, which adds its rules)


def _agreement(model: nn.Module) -> Callable[[float], float]:
    agreements = [a for a in (rules.agreement(model) for rules in EXTRA_RULES) if a is not None]

    def agree(value: float) -> float:
        for a in agreements:
            value = a(value)
        return value

    return agree


DENSE_DECLINED = "dense projection: stock MLX was faster on this backend (patch(dense=True) replaces it)"


def _wanted(members: list, dense: bool) -> bool:
    """Whether projections of these formats are to be replaced (dense ones only where `dense`)."""
    return dense or all(isinstance(m, QUANTIZED_LINEAR) for m in members)


def _discover(
    model: nn.Module, max_rows: int, declined: list, dense: bool = True, fuse_norms: bool = False
) -> list[Part]:
    extra: list[Part] = []
    skip: set[int] = set()  # the modules EXTRA_RULES judged, which the rules below leave alone
    for rules in EXTRA_RULES:
        found, judged = rules.discover(model, max_rows, declined, dense)
        extra += found
        skip |= judged
    parts: list[Part] = []
    covered: set[int] = set()  # ids of projections taken by a fusion
    mlp_parts: dict[int, Part] = {}
    tied = ties_embeddings(model)  # whether an embedding is also the output projection
    for container, key, mod, path in list(_walk(model)):
        if id(mod) in skip:
            continue
        if isinstance(mod, PATCHED_TYPES) or hasattr(type(mod), "_metile_kind"):
            declined.append((path, "-", "already patched"))
            continue
        names = ("q_proj", "k_proj", "v_proj")
        if all(n in mod for n in names):
            members = [mod[n] for n in names]
            if not _wanted(members, dense):
                declined.append((path, "qkv", DENSE_DECLINED))
                covered.update(id(m) for m in members)
            elif all(supported(m) for m in members) and len({_k(m) for m in members}) == 1:
                parts.append(_named(_qkv_part(mod, path, members, max_rows), members))
                covered.update(id(m) for m in members)
            else:
                declined.append((path, "qkv", "q/k/v are not supported projections of one input"))
        names = ("gate_proj", "up_proj", "down_proj")
        if all(n in mod for n in names) and not isinstance(mod, nn.Linear):
            members = [mod[n] for n in names]
            if not _wanted(members, dense):
                declined.append((path, "mlp_swiglu", DENSE_DECLINED))
                covered.update(id(m) for m in members)
            elif all(supported(m) for m in members) and _mlp_shapes_fit(members):
                fused = FusedSwiGLU(mod, max_rows)
                part = _named(_mlp_part(container, key, mod, fused, path), members)
                part.probe = lambda mod=mod, fused=fused: _probe(mod, fused, mod["gate_proj"])
                part.likeness = (type(fused), likeness(mod))
                parts.append(part)
                mlp_parts[id(mod)] = part
                covered.update(id(m) for m in members)
            else:
                declined.append((path, "mlp_swiglu", "gate/up/down are not supported projections of one SwiGLU MLP"))
    for container, key, mod, path in list(_walk(model)):
        if id(mod) in skip:
            continue
        if all(n in mod for n in ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm")):
            mlp = mod["mlp"]
            if id(mlp) in mlp_parts:
                parts.append(_named(_block_part(mod, path, mlp_parts[id(mlp)], fuse_norms), [mlp["down_proj"]]))
        if isinstance(mod, nn.Module) and isinstance(mod, (nn.Linear, nn.QuantizedLinear)) and id(mod) not in covered:
            if not _wanted([mod], dense):
                declined.append((path, "projection", DENSE_DECLINED))
            elif supported(mod):
                part = _replace_part(container, key, mod, MetileProjection(mod, max_rows), path, "projection")
                parts.append(_named(part, [mod]))
            else:
                declined.append((path, "projection", f"unsupported weight format {format_name(mod)}"))
        if isinstance(mod, (nn.Embedding, nn.QuantizedEmbedding)) and not hasattr(type(mod), "_metile_kind") and tied:
            if not (dense or isinstance(mod, nn.QuantizedEmbedding)):
                declined.append((path, "tied_output", DENSE_DECLINED))
            elif embedding_supported(mod):
                parts.append(_named(_tied_part(mod, path, max_rows), [mod]))
            else:
                declined.append((path, "tied_output", f"unsupported weight format {format_name(mod)}"))
    return extra + parts


def _named(part: Part, layers: list) -> Part:
    """The part with its layers' formats: one name, or each in order where they differ."""
    names = [format_name(m) for m in layers]
    part.formats = names[0] if len(set(names)) == 1 else "/".join(names)
    return part


def ties_embeddings(model: nn.Module) -> bool:
    """Whether the model's output projection is its embedding (`as_linear`): as its arguments say
    (mlx-lm's `tie_word_embeddings`), else where it has no `lm_head` of its own."""
    args = getattr(model, "args", None)
    if args is not None and hasattr(args, "tie_word_embeddings"):
        return bool(args.tie_word_embeddings)
    return "lm_head" not in model


def _probe(original: nn.Module, replacement: nn.Module, first: nn.Module) -> float:
    """max |replacement(x) - original(x)| / max |original(x)| on float32 inputs
    scaled so that `first`'s outputs have standard deviation 2."""
    x = mx.random.normal((4, _k(first)), key=mx.random.key(7))
    x = x * (2.0 / (float(mx.std(first(x).astype(mx.float32))) + 1e-12))
    want = original(x).astype(mx.float32)
    got = replacement(x).astype(mx.float32)
    return float(mx.abs(got - want).max()) / (float(mx.abs(want).max()) or 1.0)


def _k(layer: nn.Module) -> int:
    w = layer["weight"]
    return w.shape[1] * 32 // layer.bits if isinstance(layer, QUANTIZED_LINEAR) else w.shape[1]


def _replace_part(container, key, old: nn.Module, new: nn.Module, path: str, kind: str) -> Part:
    def undo():
        carry_back(new, old)
        _set(container, key, old)

    return Part(path, kind, lambda: _set(container, key, new), undo)


def _mlp_part(container, key, old: nn.Module, fused: FusedSwiGLU, path: str) -> Part:
    """The MLP replaced by `fused`, which watches its projections while installed."""
    plain = _replace_part(container, key, old, fused, path, "mlp_swiglu")

    def apply():
        plain.apply()
        fused.watch_children(True)

    def undo():
        fused.watch_children(False)
        plain.undo()

    return Part(path, "mlp_swiglu", apply, undo)


def _mlp_shapes_fit(members: list) -> bool:
    """gate and up of one input and width, down reading that width."""
    gate, up, down = members
    width = gate["weight"].shape[0]
    return _k(gate) == _k(up) and up["weight"].shape[0] == width and _k(down) == width


def _qkv_part(attn: nn.Module, path: str, members: list, max_rows: int, projection=None) -> Part:
    """q/k/v as one fused projection; `projection` replaces the group's own (a tensor-parallel one)."""
    group = QKVGroup(members, max_rows)
    if projection is not None:
        group.projection = projection
    names = ("q_proj", "k_proj", "v_proj")
    proxies = [QKVMember(group, i) for i in range(3)]

    def apply():
        for n, p in zip(names, proxies):
            attn[n] = p

    def undo():
        for n, m, p in zip(names, members, proxies):
            carry_back(p, m)
            attn[n] = m

    return Part(path, "qkv", apply, undo)


def _block_part(block: nn.Module, path: str, mlp_part: Part, fuse_norms: bool) -> Part:
    original = type(block)

    def apply():
        object.__setattr__(block, "metile_fuse_norms", fuse_norms)
        swap_class(block, "residual", {"__call__": fused_block_call})

    def undo():
        block.__class__ = original

    return Part(path, "residual", apply, undo, needs=mlp_part)


def _tied_part(emb: nn.Module, path: str, max_rows: int) -> Part:
    original = type(emb)

    def apply():
        object.__setattr__(emb, "metile_max_rows", max_rows)
        swap_class(emb, "tied_output", {"as_linear": embedding_as_linear})

    def undo():
        emb.__class__ = original

    return Part(path, "tied_output", apply, undo)


# -- verification --------------------------------------------------------------
def _vocab(model: nn.Module) -> int:
    args = getattr(model, "args", None)
    if args is not None and getattr(args, "vocab_size", None):
        return int(args.vocab_size)
    for _, _, mod, _ in _walk(model):
        if isinstance(mod, (nn.Embedding, nn.QuantizedEmbedding)):
            return int(mod.weight.shape[0])
    raise ValueError("model: cannot find the vocabulary size (no args.vocab_size, no embedding)")


# The synthetic workload's two pieces, each on its own tokens: "decode" (a prefill, single-token
# decode steps and a multi-row verification step, as speculative decoding makes, through one
# cache) and "batch" (a batch of two prompts, no cache). synthetic_logits is their rows in this order.
PIECES = ("decode", "batch")


def synthetic_logits(model: nn.Module, seed: int = 0) -> mx.array:
    """Logits of a prefill, single-token decode steps and a multi-row
    verification step (as speculative decoding makes), then of a batch of two, on synthetic
    tokens (the rows of PIECES, in order; float32, evaluated). Every token is
    drawn in advance, none is the argmax of a logit: two models being compared see the same
    tokens, so a near-tie in one logit cannot send them down different paths (with argmax tokens,
    patch declined parts of a 32-layer random-weight Llama on the H200 at 8-9% of the logits'
    scale while the set it kept was 1.3% apart; with tokens drawn in advance, none)."""
    return mx.concatenate([synthetic_piece(model, name, seed) for name in PIECES], axis=0)


def synthetic_piece(model: nn.Module, name: str, seed: int = 0) -> mx.array:
    """One piece of synthetic_logits (a name of PIECES): its rows, bit for bit, evaluated."""
    from mlx_lm.models.cache import make_prompt_cache

    if name not in PIECES:
        raise ValueError(f"name: expected one of {PIECES}, got {name!r}")
    vocab = _vocab(model)
    key = mx.random.key(seed)
    keys = mx.random.split(key, 3)
    prompt = mx.random.randint(0, vocab, (1, 9), key=key)
    if name == "decode":
        draft = mx.random.randint(0, vocab, (1, 4), key=keys[1])
        steps = mx.random.randint(0, vocab, (1, 3), key=keys[2])
        cache = make_prompt_cache(model)
        outs = [model(prompt, cache=cache)[:, -1:]]
        for i in range(steps.shape[1]):
            outs.append(model(steps[:, i : i + 1], cache=cache))
        outs.append(model(draft, cache=cache))
    else:
        batch = mx.concatenate([prompt[:, :5], mx.flip(prompt[:, :5], axis=1)], axis=0)
        outs = [model(batch).reshape(1, -1, vocab)]
    logits = mx.concatenate([o.astype(mx.float32).reshape(-1, vocab) for o in outs], axis=0)
    mx.eval(logits)
    return logits


def _float32_pieces(model: nn.Module, seed: int) -> dict[str, mx.array] | None:
    """Every synthetic piece of the model with its float16/bfloat16 parameters
    in float32 (quantized weights stay as they are), or None when that copy
    would exceed F32_REFERENCE_LIMIT or there is nothing to upcast."""
    from mlx.utils import tree_flatten, tree_map

    params = model.parameters()
    low = [a for _, a in tree_flatten(params) if a.dtype in (mx.float16, mx.bfloat16)]
    if not low or sum(a.nbytes for a in low) > F32_REFERENCE_LIMIT:
        return None
    up = tree_map(lambda a: a.astype(mx.float32) if a.dtype in (mx.float16, mx.bfloat16) else a, params)
    try:
        model.update(up)
        return {name: synthetic_piece(model, name, seed) for name in PIECES}
    finally:
        model.update(params)  # the original arrays, not copies


def _model_dtype(model: nn.Module) -> mx.Dtype:
    for _, _, mod, _ in _walk(model):
        if isinstance(mod, (nn.Embedding, nn.Linear)):
            return mod.weight.dtype
        if isinstance(mod, (nn.QuantizedEmbedding, nn.QuantizedLinear)) and mod.scales.dtype != mx.uint8:
            return mod.scales.dtype  # (microscaled layers' scales are uint8 codes: no activation dtype)
    for _, a in tree_flatten(model.parameters()):
        if a.dtype in (mx.float32, mx.float16, mx.bfloat16):
            return a.dtype
    return mx.float32


# -- patch -----------------------------------------------------------------------
def default_max_rows(model: nn.Module | None = None) -> int:
    """Rows up to which patched modules use mlx_metile kernels: 32 on the CPU and Metal
    paths. On MLX's CUDA backend 32 for models with quantized projections and 4 otherwise
    (dense projections, replaced there only with patch(dense=True)), where bf16 projections of
    8-32 rows were not faster than stock MLX's cuBLAS end to end (docs/SCHEDULES.md, "patch on
    CUDA")."""
    if not _default_device_is_cuda():
        return 32
    quantized = model is not None and any(isinstance(m, QUANTIZED_LINEAR) for _, _, m, _ in _walk(model))
    return 32 if quantized else 4


def default_dense() -> bool:
    """Whether patch replaces dense (bf16/f16/f32) projections by default: not on MLX's CUDA
    backend, where stock MLX's cuBLAS products were faster end to end on the H200 (batch-1
    decoding of an 8B-shaped bf16 Llama; docs/SCHEDULES.md, "patch on CUDA"); elsewhere yes."""
    return not _default_device_is_cuda()


def _default_device_is_cuda() -> bool:
    """Whether the default device is a GPU of MLX's CUDA backend."""
    from ..dispatch import gpu_backend

    return mx.default_device().type == mx.DeviceType.gpu and gpu_backend() == "cuda"


def patch(
    model: nn.Module,
    *,
    verify: bool = True,
    tolerance: float = 0.0,
    max_rows: int | None = None,
    dense: bool | None = None,
    fuse_norms: bool = False,
    seed: int = 0,
    tune: bool = False,
) -> PatchReport:
    """Swap the model's projections for mlx_metile's fused kernels.

    verify: run the model before and after on synthetic tokens (prefill, decode
      steps, a multi-row verification step, a batch of two) and keep only the
      parts whose logits match, bisecting when the whole set fails (_verify says what
      runs; the report's .phases where the time went). A verification that kept every part is
      recorded; patching the same model with the same code and options again uses the record
      instead of the runs (report.record says which; integrations/record.py, MLX_METILE_VERIFY_RECORD).
    tolerance: how much further (max |logits difference|, relative to the logits'
      scale) the patched model may be from the model computed in float32 than
      the unpatched model is, beyond ERROR_GROWTH x the unpatched model's own
      distance and F32_FLOOR. For float32 models this is the plain difference
      from the unpatched logits. Models with more than F32_REFERENCE_LIMIT bytes
      of half-precision parameters use FIXED_FLOOR instead of that reference.
    max_rows: calls with more rows (long prefill) stay on stock MLX; None picks
      default_max_rows(model) for the default device and the model's formats.
    dense: whether dense (bf16/f16/f32) projections are replaced too (quantized ones always
      are); None picks default_dense() for the default device. Declined ones are listed in
      the report with the reason.
    fuse_norms: whether a fused block's RMSNorms go into the projections after them where ops
      fuses them (schedule.norm_pays: the input norm into q/k/v; the post-attention norm stays its own
      op before the SwiGLU gate/up, where fusing measured slower). Off by default: on the H200 a
      32-layer Llama ran within 2% either way at 1-8 rows and 6-9% slower with it at 32 rows.
    tune: then decide each replaced call's route at every row bucket up to max_rows
      (mlx_metile.autotune: from the tuner's store, else by a tournament against stock MLX,
      which is kept wherever it is not beaten by its margin); the report's .tuning says what.
    Returns a PatchReport (falsy when nothing was replaced) with .restore()."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an mlx.nn.Module, got {type(model).__name__}")
    if isinstance(tolerance, bool) or not isinstance(tolerance, numbers.Real):
        raise TypeError(f"tolerance: expected a number, got {type(tolerance).__name__}")
    if not math.isfinite(float(tolerance)) or tolerance < 0:
        raise ValueError(f"tolerance: must be finite and >= 0, got {tolerance}")
    tolerance = float(tolerance)
    if max_rows is None:
        max_rows = default_max_rows(model)
    if isinstance(max_rows, bool) or not isinstance(max_rows, numbers.Integral):
        raise TypeError(f"max_rows: expected an integer, got {type(max_rows).__name__}")
    max_rows = int(max_rows)
    if max_rows < 1:
        raise ValueError(f"max_rows: must be >= 1, got {max_rows}")
    if dense is None:
        dense = default_dense()
    elif not isinstance(dense, bool):
        raise TypeError(f"dense: expected True, False or None, got {dense!r}")
    if not isinstance(fuse_norms, bool):
        raise TypeError(f"fuse_norms: expected True or False, got {fuse_norms!r}")
    if not isinstance(tune, bool):
        raise TypeError(f"tune: expected True or False, got {tune!r}")
    if tune:
        report = patch(
            model, verify=verify, tolerance=tolerance, max_rows=max_rows, dense=dense, fuse_norms=fuse_norms, seed=seed
        )
        if report:
            started = time.perf_counter()
            rows = sorted({b for b in ROW_BUCKETS if b <= max_rows} | {row_bucket(max_rows)})
            report.tuning = autotune(model, rows=rows)
            report.phases["tuning"] = time.perf_counter() - started
            report.seconds += report.phases["tuning"]
        return report
    started = time.perf_counter()
    report = PatchReport(shard=" ".join(filter(None, (rules.describe(model) for rules in EXTRA_RULES))))
    with _phase(report, "discovery"):
        parts = _discover(model, max_rows, report.declined, dense, fuse_norms)
    if verify and parts:
        options = dict(tolerance=tolerance, max_rows=max_rows, dense=dense, fuse_norms=fuse_norms, seed=seed)
        _verify_or_recall(model, parts, report, options)
    for p in parts:
        p.on()
    report._parts = parts
    report.replaced = [(p.path, p.kind) for p in parts]
    report.formats = {(p.path, p.kind): p.formats for p in parts if p.formats}
    report.seconds = time.perf_counter() - started
    return report


def _verify_or_recall(model: nn.Module, parts: list[Part], report: PatchReport, options: dict) -> None:
    """_verify, unless the verification record holds a verification of this model, code and options
    that kept every part (integrations/record.py); after one that kept every part, record it.
    (Not for sharded models: every rank must run verification's collectives alike.)"""
    key = document = None
    if record.enabled() and not report.shard:
        with _phase(report, "verification record"):
            modules = [(path, f"{type(m).__module__}.{type(m).__qualname__}") for _, _, m, path in _walk(model)]
            document = record.key_document(model, parts, options, modules)
            key = record.key_of(document)
            found = record.lookup(key)
        discovered = sorted([p.path, p.kind] for p in parts)
        if found is not None and sorted(map(list, found["replaced"])) == discovered:
            report.max_diff, report.allowed = float(found["max_diff"]), float(found["allowed"])
            report.criterion = found["criterion"]
            report.record = f"cached record {key[:12]}"
            return
    before = len(parts)
    _verify(model, parts, report, options["tolerance"], options["seed"])  # (declines what does not verify)
    if key is not None and len(parts) == before:
        replaced = [[p.path, p.kind] for p in parts]
        with _phase(report, "verification record"):
            record.store(key, document, report.max_diff, report.allowed, replaced, report.criterion)
        report.record = f"recorded {key[:12]}"


@contextmanager
def _phase(report: PatchReport, name: str):
    """Adds the time of the block to report.phases[name]."""
    started = time.perf_counter()
    try:
        yield
    finally:
        report.phases[name] = report.phases.get(name, 0.0) + time.perf_counter() - started


def _verify(model: nn.Module, parts: list[Part], report: PatchReport, tolerance: float, seed: int) -> None:
    """Keep in `parts` only what verifies (each removed one goes into report.declined with the
    reason); set report.max_diff, .allowed and .criterion (the key of CRITERIA that decided).
    Leaves every part off.

    The criterion: a set of parts verifies where max |logits of the model with them on -
    reference| <= ERROR_GROWTH x max |unpatched logits - reference| + (tolerance + floor) x
    max |unpatched logits| over synthetic_logits' rows; the reference is the float32 model where
    there is one (floor F32_FLOOR), else the unpatched model (floor FIXED_FLOOR; "unpatched").

    Where the float32 reference exists, the patched model (every runnable part on) runs first and
    the set is kept without running the unpatched model at all where max |its logits - reference|
    <= (tolerance + F32_FLOOR) x max |reference| over every row ("float32": within tolerance of
    the float32 truth). A set kept so meets the criterion as well, since max |reference| <=
    max |unpatched logits| + max |unpatched logits - reference| and this path is taken only where
    tolerance + F32_FLOOR <= ERROR_GROWTH. A low-precision model's own rounding usually keeps it from this path
    at tolerance 0 (bf16 logits are ~1e-2 of their scale from float32 ones).

    Otherwise the unpatched model runs only its "batch" piece: those rows are rows of the full
    run, bit for bit, so their two maxima are at most the full run's, and a set within the
    criterion computed on them is within the full one ("batch bound"; the patched model is still
    compared with the reference on every row, and its run above is reused). Where that does not
    decide either, the rest of the unpatched model runs and the full criterion decides ("bound";
    its scale max |unpatched logits|, the others' max |reference|). All parts are tried at once
    first; where they do not verify, the parts that need no other are bisected, then those that
    need a kept part on top of them. Each distinct set runs once (memoised). Every decision goes
    through `agree`: for a sharded model, every rank decides alike."""
    agree = _agreement(model)  # for a sharded model, the largest of every rank's value: all decide alike
    with _phase(report, "float32 reference"):
        _progress("patch: running the float32 reference")
        truth = _float32_pieces(model, seed)
    stock: dict[str, mx.array] = {}  # the unpatched model's pieces, as far as they were needed

    def unpatched(names: tuple[str, ...]) -> None:
        for p in parts:
            p.off()
        with _phase(report, "unpatched model"):
            for name in names:
                if name not in stock:
                    _progress(f"patch: running the unpatched model ({name})")
                    stock[name] = synthetic_piece(model, name, seed)

    against_f32 = truth is not None
    if truth is None:  # the unpatched model is the reference
        unpatched(PIECES)
        truth = dict(stock)
        floor = FIXED_FLOOR.get(_model_dtype(model), F32_FLOOR)
    else:
        floor = F32_FLOOR
    reference = mx.concatenate([truth[name] for name in PIECES], axis=0)
    with _phase(report, "probes"):
        _progress("patch: probing the fused modules")
        for p in _probe_failures(parts, agree):
            report.declined.append((p.path, p.kind, f"probe: outputs differ by {p.probed:.3g} x scale"))
            parts.remove(p)

    measured: dict[frozenset[int], float] = {}  # active set -> max |its logits - reference| (each set runs once)

    def distance(active: list[Part]) -> float:
        """max |logits of the model with `active` on - reference| (parts needing an inactive one stay off)."""
        on = frozenset(id(p) for p in active if p.needs is None or p.needs in active)
        for p in parts:
            p.off()
        for p in active:
            if p.needs is None or p.needs in active:
                p.on()
        if on not in measured:  # (every rank holds the same sets: their collectives still match)
            _progress(f"patch: verifying {len(on)} of {len(parts)} parts")
            with _phase(report, "patched model"):
                measured[on] = agree(float(mx.abs(synthetic_logits(model, seed) - reference).max()))
            report.runs += 1
        return measured[on]

    def within(value: float, bound: float, scale: float) -> bool:
        """Whether value <= bound on every rank (a zero scale or NaN anywhere: no)."""
        return agree(value - bound if scale > 0 else math.inf) <= 0

    runnable = [p for p in parts if p.needs is None] + [p for p in parts if p.needs is not None and p.needs in parts]
    kept: list[Part] | None = None
    try:
        if runnable and against_f32 and tolerance + F32_FLOOR <= ERROR_GROWTH:  # the float32 truth alone
            scale = float(mx.abs(reference).max())
            if within(distance(runnable), (tolerance + F32_FLOOR) * scale, scale):
                kept, allowed, report.criterion = runnable, tolerance + F32_FLOOR, "float32"
        if kept is None and runnable and against_f32:  # the batch piece's bound (see above)
            unpatched(("batch",))
            piece, ref = stock["batch"], truth["batch"]
            native, piece_scale = float(mx.abs(piece - ref).max()), float(mx.abs(piece).max())
            bound = ERROR_GROWTH * native + (tolerance + floor) * piece_scale
            if within(distance(runnable), bound, piece_scale):
                kept, report.criterion = runnable, "batch bound"
                scale = float(mx.abs(reference).max()) or 1.0
                allowed = bound / scale
        if kept is None:
            unpatched(PIECES)
            before = mx.concatenate([stock[name] for name in PIECES], axis=0)
            native, scale = float(mx.abs(before - reference).max()), float(mx.abs(before).max()) or 1.0
            measured.setdefault(frozenset(), agree(native))  # (nothing on: the unpatched run, bit for bit)
            allowed = ERROR_GROWTH * native / scale + tolerance + floor
            report.criterion = "bound" if against_f32 else "unpatched"

        def keep(candidates: list[Part], base: list[Part]) -> list[Part]:
            """The subset of candidates that verifies on top of `base`, by bisection."""
            if not candidates:
                return []
            d = distance(base + candidates) / scale
            if d <= allowed:
                return candidates
            if len(candidates) == 1:
                report.declined.append((candidates[0].path, candidates[0].kind, f"logits differ by {d:.3g} x scale"))
                return []
            mid = len(candidates) // 2
            left = keep(candidates[:mid], base)
            right = keep(candidates[mid:], base + left)
            return left + right

        if kept is None:
            if runnable and distance(runnable) / scale <= allowed:
                kept = runnable
            else:
                kept = keep([p for p in parts if p.needs is None], [])
                kept += keep([p for p in parts if p.needs is not None and p.needs in kept], kept)
        for p in parts:
            if p.needs is not None and p.needs not in kept:
                report.declined.append((p.path, p.kind, f"needs {p.needs.kind} at {p.needs.path}, which was declined"))
        report.max_diff = distance(kept) / scale
    finally:  # (a part that fails to run leaves the model as it was)
        for p in parts:
            p.off()
        _progress("")
    report.allowed = allowed
    if kept and not report.max_diff <= allowed:  # cannot happen if each step held; never leave a bad state
        raise RuntimeError("mlx_metile.patch: the verified set no longer verifies; the model was left unpatched")
    parts[:] = kept


def _probe_failures(parts: list[Part], agree: Callable[[float], float]) -> list[Part]:
    """The parts whose module-level probe fails. Parts of modules alike (_likeness: class, settings,
    array shapes and dtypes) probe once; only where that one fails are the others probed each.
    (The probe only declines early: whatever it passes, the logits check still judges.)"""
    failed, passed = [], set()
    for p in parts:
        if p.probe is None:
            continue
        key = p.likeness
        if key is not None and key in passed:
            continue
        p.probed = agree(p.probe())
        if p.probed > PROBE_TOLERANCE:
            failed.append(p)
        elif key is not None:
            passed.add(key)
    return failed


def likeness(value: object, _path: frozenset[int] = frozenset()) -> object:
    """A hashable value equal for modules that compute alike on inputs alike: the class and plain
    attributes (by value where hashable, else by identity) of every module, and the shape and dtype
    of every array, recursively. Modules of different likeness may still compute alike."""
    if isinstance(value, mx.array):
        return ("array", tuple(value.shape), str(value.dtype))
    if isinstance(value, (nn.Module, list, tuple, dict, set, frozenset)):
        if id(value) in _path:  # (a cycle: by identity)
            return ("id", id(value))
        _path = _path | {id(value)}
    if isinstance(value, nn.Module):
        attrs = tuple(sorted((str(k), likeness(v, _path)) for k, v in vars(value).items()))
        items = tuple(sorted((str(k), likeness(v, _path)) for k, v in value.items()))
        return (type(value), attrs, items)
    if isinstance(value, (list, tuple)):
        return (type(value), tuple(likeness(v, _path) for v in value))
    if isinstance(value, dict):
        return (dict, tuple(sorted((str(k), likeness(v, _path)) for k, v in value.items())))
    if isinstance(value, (set, frozenset)):
        return (frozenset, frozenset(likeness(v, _path) for v in value))
    try:
        hash(value)
    except TypeError:
        return ("id", id(value))
    return value


def _progress(stage: str) -> None:
    """One overwritten status line on stderr while patch() verifies, where stderr is a terminal."""
    if sys.stderr.isatty():
        print(f"\r{stage[:79]:79s}", end="" if stage else "\r", file=sys.stderr, flush=True)
