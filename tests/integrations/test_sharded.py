"""patch() on tensor-parallel mlx-lm models, on real ranks: mlx.launch with the ring backend over
127.0.0.1 on the CPU, each rank building one tiny random-weight model from one seed
(tests/integrations/sharded_rank.py computes, this file judges)."""

from __future__ import annotations

import pytest

from .launch import launch
from .sharded_models import save

RANK = "tests.integrations.sharded_rank"
# One launch's bound: its ranks import mlx-lm, build the kernels of their slices and decode a few
# tokens (about 30-60 s on 2 CPU cores); a rank that hangs in a collective fails the test here.
TIMEOUT = 300.0
FOUR = ["qwen3:float32", "llama:q4g32"]  # dense and 4-bit (model.shard) on 4 ranks


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> tuple[list[str], list[dict]]:
    """2 ranks: a float32 llama sharded by model.shard, a 4-bit qwen3 (tied embeddings) saved with
    mlx-lm's own utilities and loaded through mlx_lm.utils.sharded_load, the declined shardings,
    and one layer per weight format."""
    model_dir = save(tmp_path_factory.mktemp("model") / "qwen3-q4g32", "qwen3", "q4g32")
    cases = ["llama:float32", f"qwen3:q4g32:{model_dir}", "declines", "formats"]
    return cases, launch(2, RANK, cases, tmp_path_factory.mktemp("two_ranks"), TIMEOUT)


@pytest.fixture(scope="module")
def two_ranks_bf16(tmp_path_factory) -> tuple[str, list[dict]]:
    """2 ranks: a bf16 int4 llama sharded by model.shard, patched at tolerance 0.05 (its float32
    reference exists; the bf16 rounding is ~1e-2 of the logits' scale)."""
    case = "llama:q4g64-bf16:tolerance=0.05"
    return case, launch(2, RANK, [case], tmp_path_factory.mktemp("two_ranks_bf16"), TIMEOUT)


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory) -> list[dict]:
    return launch(4, RANK, FOUR, tmp_path_factory.mktemp("four_ranks"), TIMEOUT)


def _same_or_near_tie(name: str, ref: list[int], got: list[int], gap: float | None, allowed: float, exact: bool):
    """Token lists agree; for low-precision models they may part only where the unsharded model was
    itself undecided: its top-2 logit gap within twice what verification allowed (the rule of
    tests/integrations/test_patch.py)."""
    if exact or ref == got:
        assert ref == got, f"{name}: {got} != {ref}"
        return
    assert gap is not None and gap <= 2 * allowed, f"{name}: tokens part without a near tie (gap {gap}, {got} != {ref})"


def _check_case(ranks: list[dict], case: str) -> None:
    fmt = case.split(":")[1]
    exact = fmt == "float32"
    n = len(ranks)
    first = ranks[0][case]
    for r, results in enumerate(ranks):
        assert results["_group"] == [r, n]
        res = results[case]
        stock_row = "QuantizedShardedToAllLinear" if fmt.startswith("q") else "ShardedToAllLinear"
        assert stock_row in res["types"], res["types"]
        assert res["patched_types"] == {"o_proj": "RowShardedProjection", "q_proj": "QKVMember", "mlp": "ShardedSwiGLU"}
        kinds = {tuple(x) for x in res["replaced"]}
        for layer in (0, 1):
            assert (f"model.layers.{layer}.self_attn", "qkv") in kinds, res["report"]
            assert (f"model.layers.{layer}.mlp", "mlp_swiglu") in kinds, res["report"]
            assert (f"model.layers.{layer}.self_attn.o_proj", "projection") in kinds, res["report"]
        assert not any(kind == "residual" for _, kind in kinds)  # never fused before the all-reduce
        assert res["max_diff"] <= res["allowed"]
        assert f"(rank {r} of {n})" in res["report"]
        assert len(res["gathered"]) == n and all(f"(rank {i} of {n})" in g for i, g in enumerate(res["gathered"]))
        # every rank took the same decisions and decoded the same tokens
        assert res["replaced"] == first["replaced"] and res["tokens"] == first["tokens"]
        for kind in ("tokens", "speculative"):
            ref = res[kind]["unsharded"]
            for name in ("stock", "patched"):
                gap = res["gaps"].get(f"{kind}/{name}")
                _same_or_near_tie(f"rank {r} {case} {kind}/{name}", ref, res[kind][name], gap, res["allowed"], exact)
        assert 4 in res["verification_rows"], res["verification_rows"]  # 3 drafted + 1: through mlx_metile
        assert max(res["verification_rows"]) <= 4 < min(res["stock_rows"])  # the prompt: the stock layers
        # patched-sharded logits: within what verification allowed of stock-sharded, which is itself
        # this far from the unsharded model's (summation order over the ranks); a residual or bias
        # added on every rank would be off by the size of the activations
        diffs = res["logits_vs_unsharded"]
        assert diffs["patched"] <= res["allowed"] + diffs["stock"], diffs
        assert res["restored_equal"] and res["restored_types"] == res["types"]


@pytest.mark.parametrize("index", [0, 1], ids=["llama-float32-shard", "qwen3-q4g32-sharded_load"])
def test_two_ranks_patched_sharded_decodes_as_stock_sharded_and_unsharded(two_ranks, index):
    cases, ranks = two_ranks
    _check_case(ranks, cases[index])


def test_two_ranks_bf16_within_tolerance_of_float32_keep_every_part_without_the_unpatched_model(two_ranks_bf16):
    """Every rank takes the float32 check's decision (through all_max) and runs no unpatched model."""
    case, ranks = two_ranks_bf16
    _check_case(ranks, case)
    for results in ranks:
        res = results[case]
        assert res["criterion"] == "float32" and "unpatched model" not in res["phases"], res["report"]
        assert res["allowed"] == pytest.approx(0.05 + 1e-4), res["report"]


@pytest.mark.parametrize("case", FOUR)
def test_four_ranks_patched_sharded_decodes_as_stock_sharded_and_unsharded(four_ranks, case):
    assert len(four_ranks) == 4
    _check_case(four_ranks, case)


def test_every_weight_format_sharded_both_ways(two_ranks):
    """Row-sharded layers in every format the kernels take (dense bf16, affine 2-8 bits, mxfp4,
    mxfp8, nvfp4), column-sharded ones in the microscaled formats, on each rank's slice, against
    the stock sharded layer: float32 activations to 1e-5 of the output's scale (f32 sums in
    another order: ~1e-6), bf16 to 2e-2 (each output rounded to bf16, 2^-8, on either side);
    the stock sharded layer is as near the unsharded one (the bias added once)."""
    from .sharded_rank import COLUMN_FORMATS, ROW_FORMATS

    _, ranks = two_ranks
    want = {f"sharded-to-all/{f}" for f in ROW_FORMATS} | {f"all-to-sharded/{f}" for f in COLUMN_FORMATS}
    for results in ranks:
        res = results["formats"]
        assert set(res) - {"seconds"} == want
        for name, d in ((n, d) for n, d in res.items() if n != "seconds"):
            tol = 2e-2 if name.endswith("bfloat16") else 1e-5
            assert d["patched"] <= tol and d["stock_vs_unsharded"] <= tol, (name, d)
            quantized = not name.endswith("bfloat16")
            assert d["type"].startswith("Quantized") == quantized, (name, d)


def test_shardings_patch_does_not_understand_are_declined_and_left_intact(two_ranks):
    for results in two_ranks[1]:
        res = results["declines"]
        why = {(path, kind): reason for path, kind, reason in res["declined"]}
        assert "sharded in a way patch does not fuse" in why[("model.layers.0.self_attn", "qkv")], res["report"]
        assert "holds a distributed group of its own" in why[("model.layers.1.mlp", "sharded")], res["report"]
        assert "fully sharded module" in why[("lm_head", "sharded")], res["report"]
        assert all(res["left_intact"].values()), res["left_intact"]
        assert res["lm_head"] == "FullyShardedModule"
        replaced = {tuple(x) for x in res["replaced"]}
        assert ("model.layers.0.mlp", "mlp_swiglu") in replaced and ("model.layers.1.self_attn", "qkv") in replaced
        assert not any(p.startswith(("model.layers.0.self_attn", "model.layers.1.mlp", "lm_head")) for p, _ in replaced)
        assert res["diff"] <= res["allowed"], res["diff"]  # (float32: allowed is the 1e-4 floor)
        assert res["restored_equal"]
