"""Tiny random-weight mlx-lm models built from mlx-lm's own classes (nothing downloaded)."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import gemma, llama, qwen2, qwen3

COMMON = dict(
    hidden_size=128,
    num_hidden_layers=2,
    intermediate_size=256,
    num_attention_heads=4,
    rms_norm_eps=1e-5,
    vocab_size=128,
)
ARCHS = {
    # GQA, untied output projection
    "llama": (llama, dict(num_key_value_heads=2, tie_word_embeddings=False)),
    # q/k/v biases, tied embeddings
    "qwen2": (qwen2, dict(num_key_value_heads=2)),
    # q/k norms, explicit head_dim
    "qwen3": (
        qwen3,
        dict(
            num_key_value_heads=2,
            head_dim=32,
            tie_word_embeddings=True,
            max_position_embeddings=256,
            rope_theta=10000.0,
        ),
    ),
    # GeGLU MLP (not SwiGLU) and tied embeddings
    "gemma": (gemma, dict(num_key_value_heads=2, head_dim=32)),
}
FORMATS = ["float32", "bfloat16", "q4g32", "q4g64", "q8g128", "q4g64-bf16"]


def make(arch: str, fmt: str, seed: int = 1) -> nn.Module:
    module, extra = ARCHS[arch]
    args = module.ModelArgs(model_type=arch, **COMMON, **extra)
    mx.random.seed(seed)
    model = module.Model(args)
    if fmt.endswith("-bf16") or fmt == "bfloat16":
        model.set_dtype(mx.bfloat16)
    if fmt.split("-")[0] in ("mxfp4", "mxfp8", "nvfp4"):  # MLX's microscaling modes ("-bf16": bf16 model)
        nn.quantize(model, mode=fmt.split("-")[0])
    elif fmt.startswith("q"):
        bits, group = fmt[1:].split("-")[0].split("g")
        nn.quantize(model, group_size=int(group), bits=int(bits))
    mx.eval(model.parameters())
    return model


def plant_wrong_output_projection(monkeypatch, model) -> None:
    """Make mlx_metile's launch of `model`'s output projection 25% off in calls of one row only (the
    decode steps), every other call right: what verification must catch."""
    plant_output_projection_factor(monkeypatch, model, 1.25, one_row_only=True)


def plant_output_projection_factor(monkeypatch, model, factor: float, one_row_only: bool = False) -> None:
    """Multiply what mlx_metile's launch of `model`'s output projection returns by `factor` (in calls
    of one row only where `one_row_only`); every other launch is left as it is."""
    from mlx_metile.backends import primitive

    target, original = model.lm_head.weight, primitive.launch

    def wrong(artifact, arrays, call, rows, *rest):
        outs = original(artifact, arrays, call, rows, *rest)
        ours = any(getattr(w, "w", None) is target for w in call.weights)
        return [o * factor for o in outs] if ours and (rows == 1 or not one_row_only) else outs

    monkeypatch.setattr(primitive, "launch", wrong)
