"""End-to-end generation with and without mlx_metile.patch, same run, default device: prefill
and decode tokens/s at batch 1 and batch 8, on a random-weight Llama built with mlx-lm's own
classes (nothing downloaded). "decode" evaluates each token before building the next;
"decode_async" overlaps them as mlx-lm's generate does (the next token's graph is built while
the GPU computes this one); "verify" runs one forward of VERIFY draft tokens on the prefilled
cache (speculative decoding's check).

    python -m pytest bench/test_bench_generate.py --benchmark-json bench/results/<machine>-generate-<date>.json

--bench-hidden, --bench-layers, --bench-intermediate and --bench-head-dim size the model
(Llama-3.1-8B's blocks: 4096, 32, 14336, 128); --bench-decode the tokens decoded per round;
--bench-formats which of bf16,int4,int8; --bench-max-rows patch's max_rows; --bench-impls which
of stock, mlx_metile (patch's defaults), mlx_metile_norms_apart and mlx_metile_norms_fused
(patch(fuse_norms=False / True): the RMSNorms as separate ops, or the input norm inside the
q/k/v kernel, to time the fusion; patch's default is False). See bench/conftest.py.
Dense projections are replaced on every backend (patch's dense=True; on CUDA its default leaves
them to stock MLX).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.models.cache import make_prompt_cache

import mlx_metile as mt
from mlx_metile.backends.cuda_launch import launch_kind

from .random_llama import FORMATS, PATCH_OPTIONS, random_llama

PROMPT = 24
VERIFY = 4


@dataclass(frozen=True)
class Model:
    hidden: int
    layers: int
    intermediate: int
    head_dim: int
    decode: int  # tokens decoded per round
    max_rows: int | None  # patch's max_rows (None: its default)


def _choices(config, name: str, allowed) -> list[str]:
    values = config.getoption(name).split(",")
    if not values or not set(values) <= set(allowed):
        raise pytest.UsageError(f"--{name.replace('_', '-')}: expected some of {','.join(allowed)}, got {values}")
    return values


def pytest_generate_tests(metafunc):
    if metafunc.definition.name == "test_generation":
        metafunc.parametrize("fmt", _choices(metafunc.config, "bench_formats", FORMATS))
        metafunc.parametrize("impl", _choices(metafunc.config, "bench_impls", ("stock", *PATCH_OPTIONS)))


@pytest.fixture(scope="module")
def model_size(pytestconfig) -> Model:
    get = pytestconfig.getoption
    hidden = get("bench_hidden")
    sizes = (hidden, get("bench_layers"), get("bench_intermediate") or 3 * hidden, get("bench_head_dim"))
    decode, max_rows = get("bench_decode"), get("bench_max_rows")
    if min(*sizes, decode) < 1 or (max_rows is not None and max_rows < 0):
        raise pytest.UsageError(
            f"--bench-*: expected positive sizes, got {sizes}, decode {decode}, max rows {max_rows}"
        )
    if hidden % (4 * sizes[3]):  # (random_llama: hidden / head_dim query heads, a quarter of them k/v heads)
        raise pytest.UsageError(f"--bench-hidden: expected a multiple of 4 x --bench-head-dim, got {hidden}")
    return Model(*sizes, decode, max_rows)


def _model(fmt: str, impl: str, size: Model) -> nn.Module:
    model = random_llama(fmt, size.layers, size.hidden, size.intermediate, size.head_dim)
    if impl != "stock":  # (bf16 too: what its kernels give)
        report = mt.patch(model, max_rows=size.max_rows, dense=True, **PATCH_OPTIONS[impl])
        assert report and not report.declined, str(report)  # (a partly patched model is not what is timed)
    return model


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("phase", ["prefill", "decode", "decode_async", "verify"])
def test_generation(benchmark, model_size, fmt, phase, batch, impl):
    patched = impl != "stock"
    model = _model(fmt, impl, model_size)
    prompt = mx.random.randint(0, 8192, (batch, PROMPT))
    tokens_per_round = model_size.decode

    def prefill():
        cache = make_prompt_cache(model)
        mx.eval(model(prompt, cache=cache))
        return cache

    def step(tok, cache):
        return mx.argmax(model(tok, cache=cache)[:, -1], axis=-1)[:, None]

    def decode(cache):
        tok = prompt[:, -1:]
        for _ in range(tokens_per_round):
            tok = step(tok, cache)
            mx.eval(tok)

    def decode_async(cache):
        tok = step(prompt[:, -1:], cache)
        mx.async_eval(tok)
        for _ in range(tokens_per_round - 1):
            nxt = step(tok, cache)  # built while the GPU computes tok
            mx.async_eval(nxt)
            mx.eval(tok)
            tok = nxt
        mx.eval(tok)

    def verify(cache):
        mx.eval(model(prompt[:, -VERIFY:], cache=cache))

    tokens = batch * {"prefill": PROMPT, "verify": VERIFY}.get(phase, tokens_per_round)
    benchmark.group = f"{fmt} {phase} batch={batch}"
    benchmark.extra_info.update({"format": fmt, "phase": phase, "batch": batch, "tokens": tokens, "impl": impl})
    if patched:
        benchmark.extra_info["max_rows"] = model_size.max_rows
        benchmark.extra_info["cuda_launch"] = launch_kind()  # (on the CUDA path)
    if phase == "prefill":
        benchmark.pedantic(prefill, rounds=3, iterations=1, warmup_rounds=1)
    else:  # the prompt is prefilled in setup, outside the timing
        run = {"decode": decode, "decode_async": decode_async, "verify": verify}[phase]
        benchmark.pedantic(run, setup=lambda: ((prefill(),), {}), rounds=3, iterations=1, warmup_rounds=1)
