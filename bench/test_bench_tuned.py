"""Decoding with a patched and tuned model against stock MLX, same run, default device: tokens/s of
batch-1..32 decoding (each token evaluated before the next is built; a batch of b sequences makes
calls of b rows) on a random-weight Llama built with mlx-lm's own classes (nothing downloaded),
int4 weights of group 64.

    python -m pytest bench/test_bench_tuned.py --bench-hidden 1024 --bench-layers 4 --bench-decode 2 \\
        --benchmark-json bench/results/<machine>-tuned-<date>.json
    python -m bench.render_tuned bench/results/<machine>-tuned-<date>.json

The tuned model is `mlx_metile.patch(model)` then `mlx_metile.autotune(model, rows=BATCHES)` into a
fresh store, so the tuning itself runs (or into MLX_METILE_TUNE_STORE where set, whose decisions
are used); its time and decisions go into the tuned results' extra_info. The stock model is an identical one (the same seed), unpatched. For each batch the
stock and the tuned runs are adjacent in time. --bench-hidden, --bench-layers, --bench-intermediate,
--bench-head-dim size the model and --bench-decode the tokens of a round (bench/conftest.py).
"""

from __future__ import annotations

import time

import mlx.core as mx
import pytest
from mlx_lm.models.cache import make_prompt_cache

import mlx_metile as mt
from mlx_metile import settings
from mlx_metile.tune import Store

from .random_llama import random_llama

BATCHES = (1, 2, 4, 8, 16, 32)
PROMPT = 2  # tokens prefilled (untimed) before the decoding that is timed
VOCAB = 8192


def _size(config) -> tuple[int, int, int, int, int]:
    get = config.getoption
    hidden = get("bench_hidden")
    size = (get("bench_layers"), hidden, get("bench_intermediate") or 3 * hidden, get("bench_head_dim"))
    if min(*size, get("bench_decode")) < 1 or hidden % (4 * size[3]):
        raise pytest.UsageError(f"--bench-*: expected positive sizes, hidden a multiple of 4 x head dim, got {size}")
    return (*size, get("bench_decode"))


@pytest.fixture(scope="module")
def models(pytestconfig, tmp_path_factory):
    layers, hidden, intermediate, head_dim, _ = _size(pytestconfig)
    stock = random_llama("int4", layers, hidden, intermediate, head_dim)
    tuned = random_llama("int4", layers, hidden, intermediate, head_dim)
    report = mt.patch(tuned)
    assert report and not report.declined, str(report)
    t0 = time.perf_counter()
    # MLX_METILE_TUNE_STORE: decisions already there are used (the count is in extra_info); else a fresh store
    given = settings.current().tune_store
    store = Store(given) if given is not None else Store(tmp_path_factory.mktemp("tune") / "decisions.sqlite3")
    tuning = mt.autotune(tuned, rows=BATCHES, store=store, progress=True)
    seconds = time.perf_counter() - t0
    print(tuning)
    decisions = {}
    for d in tuning.decisions:
        decisions.setdefault(d.bucket, {})[d.site] = {
            "chosen": d.chosen,
            "cpu_ratio": None if d.records.get("cpu") is None else d.records["cpu"].ratio,
            "cpu_confirm": None if d.records.get("cpu") is None else d.records["cpu"].confirm,
            "rejected": d.rejected,
        }
    stored = sum(d.from_store for d in tuning.decisions)
    return {"stock": stock, "tuned": tuned, "tune_seconds": seconds, "decisions": decisions, "from_store": stored}


@pytest.mark.parametrize("impl", ["stock", "tuned"])
@pytest.mark.parametrize("batch", BATCHES)  # (the outer loop: a batch's stock and tuned runs are adjacent)
def test_decode_tuned(benchmark, pytestconfig, models, batch, impl):
    model = models[impl]
    tokens = _size(pytestconfig)[-1]
    prompt = mx.random.randint(0, VOCAB, (batch, PROMPT), key=mx.random.key(batch))

    def prefill():
        cache = make_prompt_cache(model)
        mx.eval(model(prompt, cache=cache))
        return (cache,), {}

    def decode(cache):
        tok = prompt[:, -1:]
        for _ in range(tokens):
            tok = mx.argmax(model(tok, cache=cache)[:, -1], axis=-1)[:, None]
            mx.eval(tok)

    benchmark.group = f"int4 decode batch={batch}"
    benchmark.extra_info.update({"format": "int4", "phase": "decode", "batch": batch, "tokens": batch * tokens})
    benchmark.extra_info["impl"] = impl
    if impl == "tuned":
        benchmark.extra_info["tune_seconds"] = models["tune_seconds"]
        benchmark.extra_info["decisions_from_store"] = models["from_store"]
        benchmark.extra_info["decisions"] = models["decisions"].get(batch, {})
        (cache,), _ = prefill()
        with mt.trace() as t:  # what the tuned model's decoding runs at this batch (not its prefill)
            decode(cache)
        benchmark.extra_info["backends"] = sorted({r.backend for r in t.records})
    benchmark.pedantic(decode, setup=prefill, rounds=3, iterations=1, warmup_rounds=0)
