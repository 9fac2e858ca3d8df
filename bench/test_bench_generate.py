"""End-to-end generation with and without mlx_metile.patch, same run, default
device: prefill and decode tokens/s at batch 1 and batch 8, on a random-weight
Llama built with mlx-lm's own classes (nothing downloaded). "decode" evaluates each
token before building the next; "decode_async" overlaps them as mlx-lm's generate
does (the next token's graph is built while the GPU computes this one); "verify" runs
one forward of VERIFY draft tokens on the prefilled cache (speculative decoding's check).

    python -m pytest bench/test_bench_generate.py --benchmark-json bench/results/<machine>-generate-<date>.json

BENCH_HIDDEN, BENCH_LAYERS, BENCH_INTERMEDIATE and BENCH_HEAD_DIM size the model (Llama-3.1-8B's
blocks: 4096, 32, 14336, 128); BENCH_DECODE the tokens decoded per round; BENCH_FORMATS which of
bf16,int4,int8 (default bf16,int4); BENCH_MAX_ROWS patch's max_rows (default: patch's own);
BENCH_IMPLS which of stock, mlx_metile (patch's defaults), mlx_metile_norms_apart and
mlx_metile_norms_fused (patch(fuse_norms=False / True): the RMSNorms as separate ops, or the input
norm inside the q/k/v kernel, to time the fusion; the default has been False since the nineteenth
session) - default stock,mlx_metile.
Dense projections are replaced on every backend (patch's dense=True; on CUDA its default leaves
them to stock MLX).
"""

from __future__ import annotations

import os

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.models.cache import make_prompt_cache

import mlx_metile as mt
from mlx_metile import ops

from .random_llama import PATCH_OPTIONS, random_llama

HIDDEN = int(os.environ.get("BENCH_HIDDEN", "512"))
LAYERS = int(os.environ.get("BENCH_LAYERS", "2"))
INTERMEDIATE = int(os.environ.get("BENCH_INTERMEDIATE", str(HIDDEN * 3)))
HEAD_DIM = int(os.environ.get("BENCH_HEAD_DIM", "64"))
PROMPT = 24
DECODE = int(os.environ.get("BENCH_DECODE", "8"))
VERIFY = 4
FORMATS = os.environ.get("BENCH_FORMATS", "bf16,int4").split(",")  # of bf16, int4, int8 (group 64)
MAX_ROWS = int(os.environ["BENCH_MAX_ROWS"]) if os.environ.get("BENCH_MAX_ROWS") else None  # patch's default
IMPLS = os.environ.get("BENCH_IMPLS", "stock,mlx_metile").split(",")
if not set(IMPLS) <= {"stock", *PATCH_OPTIONS}:
    raise ValueError(f"BENCH_IMPLS: expected some of stock,{','.join(PATCH_OPTIONS)}, got {IMPLS}")


def _model(fmt: str, impl: str) -> nn.Module:
    model = random_llama(fmt, LAYERS, HIDDEN, INTERMEDIATE, HEAD_DIM)
    if impl != "stock":  # (bf16 too: what its kernels give)
        report = mt.patch(model, max_rows=MAX_ROWS, dense=True, **PATCH_OPTIONS[impl])
        assert report and not report.declined, str(report)  # (a partly patched model is not what is timed)
    return model


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("phase", ["prefill", "decode", "decode_async", "verify"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_generation(benchmark, fmt, phase, batch, impl):
    patched = impl != "stock"
    model = _model(fmt, impl)
    prompt = mx.random.randint(0, 8192, (batch, PROMPT))

    def prefill():
        cache = make_prompt_cache(model)
        mx.eval(model(prompt, cache=cache))
        return cache

    def step(tok, cache):
        return mx.argmax(model(tok, cache=cache)[:, -1], axis=-1)[:, None]

    def decode(cache):
        tok = prompt[:, -1:]
        for _ in range(DECODE):
            tok = step(tok, cache)
            mx.eval(tok)

    def decode_async(cache):
        tok = step(prompt[:, -1:], cache)
        mx.async_eval(tok)
        for _ in range(DECODE - 1):
            nxt = step(tok, cache)  # built while the GPU computes tok
            mx.async_eval(nxt)
            mx.eval(tok)
            tok = nxt
        mx.eval(tok)

    def verify(cache):
        mx.eval(model(prompt[:, -VERIFY:], cache=cache))

    tokens = batch * {"prefill": PROMPT, "verify": VERIFY}.get(phase, DECODE)
    benchmark.group = f"{fmt} {phase} batch={batch}"
    benchmark.extra_info.update({"format": fmt, "phase": phase, "batch": batch, "tokens": tokens, "impl": impl})
    if patched:
        benchmark.extra_info["max_rows"] = MAX_ROWS
        benchmark.extra_info["cuda_launch"] = ops.cuda_launch_kind()  # (on the CUDA path)
    if phase == "prefill":
        benchmark.pedantic(prefill, rounds=3, iterations=1, warmup_rounds=1)
    else:  # the prompt is prefilled in setup, outside the timing
        run = {"decode": decode, "decode_async": decode_async, "verify": verify}[phase]
        benchmark.pedantic(run, setup=lambda: ((prefill(),), {}), rounds=3, iterations=1, warmup_rounds=1)
