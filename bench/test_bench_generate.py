"""End-to-end generation with and without mlx_metile.patch, same run, default
device: prefill and decode tokens/s at batch 1 and batch 8, on a random-weight
Llama built with mlx-lm's own classes (nothing downloaded).

    python -m pytest bench/test_bench_generate.py --benchmark-json bench/results/<machine>-generate-<date>.json
"""

from __future__ import annotations

import os

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.models import llama
from mlx_lm.models.cache import make_prompt_cache

import mlx_metile as mt

HIDDEN = int(os.environ.get("BENCH_HIDDEN", "512"))
LAYERS = int(os.environ.get("BENCH_LAYERS", "2"))
PROMPT = 24
DECODE = 8


def _model(fmt: str, patched: bool) -> nn.Module:
    args = llama.ModelArgs(
        model_type="llama",
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        intermediate_size=HIDDEN * 3,
        num_attention_heads=HIDDEN // 64,
        num_key_value_heads=HIDDEN // 256,
        rms_norm_eps=1e-5,
        vocab_size=8192,
        tie_word_embeddings=False,
    )
    mx.random.seed(0)
    model = llama.Model(args)
    model.set_dtype(mx.bfloat16)
    if fmt == "int4":
        nn.quantize(model, group_size=64, bits=4)
    mx.eval(model.parameters())
    if patched:
        report = mt.patch(model)
        assert report, str(report)
    return model


@pytest.mark.parametrize("patched", [False, True], ids=["stock", "mlx_metile"])
@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
@pytest.mark.parametrize("fmt", ["bf16", "int4"])
def test_generation(benchmark, fmt, phase, batch, patched):
    model = _model(fmt, patched)
    prompt = mx.random.randint(0, 8192, (batch, PROMPT))

    def prefill():
        cache = make_prompt_cache(model)
        mx.eval(model(prompt, cache=cache))
        return cache

    def decode(cache):
        tok = prompt[:, -1:]
        for _ in range(DECODE):
            tok = mx.argmax(model(tok, cache=cache)[:, -1], axis=-1)[:, None]
            mx.eval(tok)

    tokens = batch * (PROMPT if phase == "prefill" else DECODE)
    benchmark.group = f"{fmt} {phase} batch={batch}"
    benchmark.extra_info.update(
        {"format": fmt, "phase": phase, "batch": batch, "tokens": tokens, "impl": "mlx_metile" if patched else "stock"}
    )
    if phase == "prefill":
        benchmark.pedantic(prefill, rounds=3, iterations=1, warmup_rounds=1)
    else:  # the prompt is prefilled in setup, outside the timing
        benchmark.pedantic(decode, setup=lambda: ((prefill(),), {}), rounds=3, iterations=1, warmup_rounds=1)
