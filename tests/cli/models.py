"""A tiny random-weight mlx-lm model saved to disk with mlx-lm's own utilities, with a word-level
tokenizer built offline (tokenizers + transformers), so `mlx_lm.load(path)` needs no download."""

from __future__ import annotations

from pathlib import Path

WORDS = ["<unk>", "<s>", "</s>", *"the a of to and in is it that for on with as was at by an be this are".split()]


def save_tiny_model(path: Path, seed: int = 0, bits: int | None = 4, layers: int = 2) -> Path:
    import mlx.core as mx
    import mlx.nn as nn
    from mlx_lm.models import llama
    from mlx_lm.utils import save_config, save_model
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(WORDS + [chr(c) for c in range(97, 123)])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # words joined by spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    config = dict(
        model_type="llama", hidden_size=64, num_hidden_layers=layers, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, rms_norm_eps=1e-5, vocab_size=len(vocab), tie_word_embeddings=False,
    )  # fmt: skip
    mx.random.seed(seed)
    model = llama.Model(llama.ModelArgs(**config))
    if bits:
        nn.quantize(model, group_size=32, bits=bits)
        config["quantization"] = {"group_size": 32, "bits": bits, "mode": "affine"}
    mx.eval(model.parameters())
    save_model(path, model)
    save_config(config, path / "config.json")
    fast.save_pretrained(path)
    return path
