"""Tiny random-weight mlx-lm models for tensor-parallel runs (nothing downloaded): 8 query and 4
key/value heads, so 2 and 4 ranks each keep grouped-query attention, and group-32 quantization,
so every rank's slice of o/down (128/4 = 32 input features at 4 ranks) still holds whole groups."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import llama, qwen3

COMMON = dict(
    hidden_size=128,
    num_hidden_layers=2,
    intermediate_size=256,
    num_attention_heads=8,
    num_key_value_heads=4,
    rms_norm_eps=1e-5,
    vocab_size=128,
)
ARCHS = {
    "llama": (llama, dict(tie_word_embeddings=False)),  # untied output projection
    "qwen3": (qwen3, dict(head_dim=16, tie_word_embeddings=True, max_position_embeddings=256, rope_theta=10000.0)),
}
MODES = {"mxfp4": (32, 4), "mxfp8": (32, 8), "nvfp4": (16, 4)}  # MLX's (group size, bits) of each mode


def config(arch: str) -> dict:
    return dict(model_type=arch, **COMMON, **ARCHS[arch][1])


def quantization(fmt: str) -> dict | None:
    """mlx-lm's `quantization` config entry of a format name (None for float ones): q4g32, mxfp4, ..."""
    base = fmt.split("-")[0]
    if base in MODES:
        return {"group_size": MODES[base][0], "bits": MODES[base][1], "mode": base}
    if base.startswith("q"):
        bits, group = base[1:].split("g")
        return {"group_size": int(group), "bits": int(bits), "mode": "affine"}
    return None


def make(arch: str, fmt: str, seed: int = 1) -> nn.Module:
    """The same weights on every process for one (arch, fmt, seed): float32, bfloat16, q{bits}g{group},
    mxfp4 / mxfp8 / nvfp4; a "-bf16" suffix makes the model bfloat16 before quantizing."""
    module, _ = ARCHS[arch]
    mx.random.seed(seed)
    model = module.Model(module.ModelArgs.from_dict(config(arch)))
    if fmt.endswith("-bf16") or fmt == "bfloat16":
        model.set_dtype(mx.bfloat16)
    base = fmt.split("-")[0]
    if base in MODES:
        nn.quantize(model, mode=base)
    elif base.startswith("q"):
        q = quantization(fmt)
        nn.quantize(model, group_size=q["group_size"], bits=q["bits"])
    mx.eval(model.parameters())
    return model


def save(path: Path, arch: str, fmt: str, seed: int = 1) -> Path:
    """A model directory `mlx_lm.utils.sharded_load` reads: mlx-lm's own save_model / save_config, and
    a word-level tokenizer of the model's 128 ids (from `tokenizers`, saved by `transformers`)."""
    from mlx_lm.utils import save_config, save_model
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    model = make(arch, fmt, seed)
    path.mkdir(parents=True, exist_ok=True)
    save_model(path, model)
    cfg = config(arch)
    q = quantization(fmt)
    if q is not None:
        cfg["quantization"] = q if q["mode"] != "affine" else {"group_size": q["group_size"], "bits": q["bits"]}
    save_config(cfg, path / "config.json")
    vocab = {f"t{i}": i for i in range(COMMON["vocab_size"])}
    tok = Tokenizer(WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", eos_token="t1").save_pretrained(path)
    (path / "made_by.json").write_text(json.dumps({"arch": arch, "fmt": fmt, "seed": seed}))
    return path
