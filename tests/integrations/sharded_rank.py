"""One rank of the tensor-parallel tests (tests/integrations/test_sharded.py starts it with mlx.launch):

    python -m tests.integrations.sharded_rank OUT CASE [CASE ...]

CASE is ARCH:FMT (the model built here, then `model.shard(group)`), ARCH:FMT:DIR (the model of
DIR, saved by sharded_models.save, through `mlx_lm.utils.sharded_load`), or `declines` (see
run_declines), or `formats` (see run_formats). For each case the rank
computes, from one seed, greedy tokens and speculative-decoding tokens (3 drafted tokens: 4-row
verification steps) of the unsharded model, the stock-sharded model and the patched-sharded model,
the gap between the unsharded model's top two logits where the tokens part, logits differences,
and whether restore() gives the stock-sharded logits back bit for bit. It writes OUT/rank{r}.log (its
stdout and stderr) and, when every case ran, OUT/rank{r}.json; the test judges."""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

PROMPT = [3, 17, 42, 7, 99, 5, 64, 12]
# Calls of up to 4 rows (decoding, 4-row verification steps) through mlx_metile, longer ones (the
# prompt) through the stock sharded layers: the replacements' hand-back to MLX is exercised too.
MAX_ROWS = 4


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    rank = int(os.environ.get("MLX_RANK", "0"))
    log = open(out / f"rank{rank}.log", "w", buffering=1)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    try:
        import mlx.core as mx

        group = mx.distributed.init(backend="ring", strict=True)
        results = {}
        for case in argv[1:]:
            start = time.perf_counter()
            run = {"declines": run_declines, "formats": run_formats}.get(case)
            results[case] = run(group) if run else run_case(case, group)
            results[case]["seconds"] = time.perf_counter() - start
        results["_group"] = [group.rank(), group.size()]
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        return 1
    tmp = out / f"rank{rank}.json.tmp"
    tmp.write_text(json.dumps(results))
    tmp.rename(out / f"rank{rank}.json")
    return 0


def run_case(case: str, group) -> dict:
    import mlx.core as mx
    import numpy as np
    from mlx_lm.generate import generate_step, speculative_generate_step

    import mlx_metile as mt
    from mlx_metile.integrations import mlx_lm as integration
    from mlx_metile.integrations.sharded import gather_reports

    from .sharded_models import make

    arch, fmt, *where = case.split(":")
    options = {"max_rows": MAX_ROWS}
    if where and where[-1].startswith("tolerance="):  # "arch:fmt[:model dir][:tolerance=t]"
        options["tolerance"] = float(where.pop()[len("tolerance=") :])
    prompt = mx.array(PROMPT, dtype=mx.uint32)

    def argmax(lp):
        return mx.argmax(lp, axis=-1)

    def greedy(model) -> list[int]:
        return [int(t) for t, _ in generate_step(prompt, model, max_tokens=10, sampler=argmax)]

    def speculative(model, draft) -> list[int]:
        steps = speculative_generate_step(prompt, model, draft, num_draft_tokens=3, max_tokens=10, sampler=argmax)
        return [int(t) for t, _, _ in steps]

    unsharded = make(arch, fmt)
    draft = make(arch, fmt, seed=2)  # (a local model: the draft is not sharded)
    if where:
        from mlx_lm.utils import sharded_load

        sharded, _ = sharded_load(where[0], tensor_group=group)
    else:
        sharded = make(arch, fmt)
        sharded.shard(group)
    res: dict = {"types": sorted({type(m).__name__ for m in sharded.modules()})}
    res["tokens"] = {"unsharded": greedy(unsharded), "stock": greedy(sharded)}
    res["speculative"] = {"unsharded": speculative(unsharded, draft), "stock": speculative(sharded, draft)}
    want = integration.synthetic_logits(unsharded)
    stock = integration.synthetic_logits(sharded)
    report = mt.patch(sharded, **options)
    res["report"] = str(report)
    res["criterion"], res["phases"] = report.criterion, sorted(report.phases)
    res["gathered"] = gather_reports(report, group)
    res["replaced"] = [list(r) for r in report.replaced]
    res["allowed"], res["max_diff"] = report.allowed, report.max_diff
    layer = sharded.model.layers[0]
    res["patched_types"] = {
        n: type(m).__name__
        for n, m in (("o_proj", layer.self_attn.o_proj), ("q_proj", layer.self_attn.q_proj), ("mlp", layer.mlp))
    }
    res["tokens"]["patched"] = greedy(sharded)
    with mt.trace() as t:
        res["speculative"]["patched"] = speculative(sharded, draft)
    res["verification_rows"] = sorted({r.rows for r in t if r.backend == "cpu"})
    res["stock_rows"] = sorted({r.rows for r in t if r.backend.startswith("mlx")})
    got = integration.synthetic_logits(sharded)
    scale = float(mx.abs(want).max())
    res["logits_vs_unsharded"] = {
        "stock": float(mx.abs(stock - want).max()) / scale,
        "patched": float(mx.abs(got - want).max()) / scale,
    }
    # where two token lists part: the unsharded model's top-2 logit gap there, relative to its scale
    res["gaps"] = {}
    for kind in ("tokens", "speculative"):
        ref = res[kind]["unsharded"]
        for name, toks in res[kind].items():
            first = next((i for i, (a, b) in enumerate(zip(ref, toks)) if a != b), None)
            if first is not None:
                seq = mx.array(PROMPT + ref[:first], dtype=mx.uint32)
                last = unsharded(seq[None])[0, -1].astype(mx.float32)
                top2 = np.sort(np.array(last))[-2:]
                res["gaps"][f"{kind}/{name}"] = float(top2[1] - top2[0]) / float(mx.abs(last).max())
    report.restore()
    res["restored_types"] = sorted({type(m).__name__ for m in sharded.modules()})
    res["restored_equal"] = bool(mx.array_equal(integration.synthetic_logits(sharded), stock))
    return res


def run_declines(group) -> dict:
    """A sharded float32 llama with three shardings patch() does not understand: layer 0's k_proj a
    plain Linear over the rank's slice (computing what the AllToShardedLinear did), layer 1's MLP
    holding a group of its own (as mlx-lm's MoE `sharding_group`), the output projection wrapped
    by `fully_shard` (parameters gathered every call). What patch() makes of it, logits before,
    after and after restore(), and which modules kept their types."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.nn.layers.distributed import fully_shard

    import mlx_metile as mt
    from mlx_metile.integrations import mlx_lm as integration

    from .sharded_models import make

    model = make("llama", "float32")
    model.shard(group)
    attn0, mlp1 = model.model.layers[0].self_attn, model.model.layers[1].mlp
    k = attn0.k_proj
    plain = nn.Linear(k.weight.shape[1], k.weight.shape[0], bias=False)
    plain.weight = k.weight
    attn0.k_proj = plain
    mlp1.sharding_group = group
    model.lm_head = fully_shard(model.lm_head, group=group)
    kept = {"attn0": attn0, "attn0.o_proj": attn0.o_proj, "mlp1": mlp1, "mlp1.down_proj": mlp1.down_proj}
    before = integration.synthetic_logits(model)
    report = mt.patch(model)
    layers = model.model.layers
    now = {"attn0": layers[0].self_attn, "attn0.o_proj": layers[0].self_attn.o_proj, "mlp1": layers[1].mlp}
    now["mlp1.down_proj"] = layers[1].mlp.down_proj
    after = integration.synthetic_logits(model)
    scale = float(mx.abs(before).max())
    res = {
        "report": str(report),
        "declined": [list(d) for d in report.declined],
        "replaced": [list(r) for r in report.replaced],
        "allowed": report.allowed,
        "left_intact": {name: now[name] is mod for name, mod in kept.items()},
        "lm_head": type(model.lm_head).__name__,
        "diff": float(mx.abs(after - before).max()) / scale,
    }
    report.restore()
    res["restored_equal"] = bool(mx.array_equal(integration.synthetic_logits(model), before))
    return res


ROW_FORMATS = ("bfloat16", "q2g64", "q3g32", "q5g64", "q6g32", "q8g64", "mxfp4", "mxfp8", "nvfp4")
COLUMN_FORMATS = ("mxfp4", "mxfp8", "nvfp4")  # (affine: the q/k/v, gate/up of the model cases)


def run_formats(group) -> dict:
    """One linear layer (128 -> 64, with a bias) per weight format, sharded both ways by mlx.nn's
    shard_linear: max |mlx_metile replacement - stock sharded layer| and |stock sharded - the
    unsharded layer| on 4 rows, relative to the output's scale."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.nn.layers.distributed import shard_linear

    from mlx_metile.integrations.sharded import ColumnShardedProjection, RowShardedProjection

    from .sharded_models import MODES, quantization

    out = {}
    for fmt in sorted(set(ROW_FORMATS) | set(COLUMN_FORMATS)):
        mx.random.seed(3)
        layer = nn.Linear(128, 64)
        layer.bias = mx.random.normal((64,))  # (nonzero: a bias added per rank would show)
        dtype = mx.bfloat16 if fmt == "bfloat16" else mx.float32
        layer.set_dtype(dtype)
        q = quantization(fmt)
        if q is not None:
            layer = nn.QuantizedLinear.from_linear(layer, q["group_size"], q["bits"], mode=q["mode"])
            assert (q["mode"] in MODES) == (q["mode"] != "affine")
        x = mx.random.normal((4, 128), key=mx.random.key(5)).astype(dtype)
        full = layer(x).astype(mx.float32)
        for sharding, cls, fmts in (
            ("sharded-to-all", RowShardedProjection, ROW_FORMATS),
            ("all-to-sharded", ColumnShardedProjection, COLUMN_FORMATS),
        ):
            if fmt not in fmts:
                continue
            stock = shard_linear(layer, sharding, group=group)
            k = 128 // group.size()  # a row-sharded layer reads the rank's slice of the input features
            xs = x[:, group.rank() * k : (group.rank() + 1) * k] if sharding == "sharded-to-all" else x
            want = stock(xs).astype(mx.float32)
            got = cls(stock, 32)(xs).astype(mx.float32)
            if sharding == "all-to-sharded":  # this rank's slice of the unsharded layer's output
                n = want.shape[-1]
                full_part = full[:, group.rank() * n : (group.rank() + 1) * n]
            else:
                full_part = full
            scale = float(mx.abs(want).max())
            out[f"{sharding}/{fmt}"] = {
                "patched": float(mx.abs(got - want).max()) / scale,
                "stock_vs_unsharded": float(mx.abs(want - full_part).max()) / scale,
                "type": type(stock).__name__,
            }
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
