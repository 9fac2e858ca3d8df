"""A random-weight Llama built with mlx-lm's own classes (nothing downloaded), for the
end-to-end benchmarks: Llama-3.1-8B's block shapes by default, a vocabulary of 8192."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import llama

FORMATS = ("bf16", "int4", "int8")  # int4 / int8: nn.quantize with group 64
# The patched variants the end-to-end benchmarks compare with stock (mlx_metile.patch's keyword
# arguments; "stock" is the unpatched model): patch's defaults, and each RMSNorm setting forced.
PATCH_OPTIONS = {
    "mlx_metile": {},
    "mlx_metile_norms_apart": {"fuse_norms": False},
    "mlx_metile_norms_fused": {"fuse_norms": True},
}


def random_llama(
    fmt: str = "int4", layers: int = 32, hidden: int = 4096, intermediate: int = 14336, head_dim: int = 128
) -> nn.Module:
    """The model with its parameters evaluated: bf16, or quantized as `fmt` says; 4 query
    heads per key/value head (Llama-3.1-8B's 32 / 8)."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt: expected one of {FORMATS}, got {fmt!r}")
    args = llama.ModelArgs(
        model_type="llama",
        hidden_size=hidden,
        num_hidden_layers=layers,
        intermediate_size=intermediate,
        num_attention_heads=hidden // head_dim,
        num_key_value_heads=hidden // head_dim // 4,
        rms_norm_eps=1e-5,
        vocab_size=8192,
        tie_word_embeddings=False,
    )
    mx.random.seed(0)
    model = llama.Model(args)
    model.set_dtype(mx.bfloat16)
    if fmt != "bf16":
        nn.quantize(model, group_size=64, bits=int(fmt[3:]))
    mx.eval(model.parameters())
    return model
