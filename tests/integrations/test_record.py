"""patch()'s verification record (mlx_metile/integrations/record.py): a repeat patch() of the same
model, code and options skips the verification runs; anything in the key changed, a declined part,
a damaged record or the setting off, and verification runs again."""

from __future__ import annotations

import argparse
import json

import mlx.core as mx
import numpy as np
import pytest

import mlx_metile as mt
from mlx_metile import cache
from mlx_metile.integrations import mlx_lm as integration
from mlx_metile.integrations import record
from mlx_metile.tune import identity

from .models import make, plant_wrong_output_projection

VERIFYING = {"float32 reference", "unpatched model", "patched model"}


@pytest.fixture
def store(env, tmp_path):
    """The record on, in a cache of this test's own; the records' folder."""
    env.set("MLX_METILE_CACHE", str(tmp_path / "cache"))
    env.set("MLX_METILE_VERIFY_RECORD", "1")
    return tmp_path / "cache" / record.SUB


def verified(report) -> bool:
    """Whether the verification runs ran (by the report, not by time)."""
    ran = report.runs > 0 and "patched model" in report.phases  # (the unpatched model may not run)
    assert ran != report.record.startswith("cached record"), str(report)
    return ran


def patched_logits(model, **options):
    report = mt.patch(model, **options)
    out = np.array(integration.synthetic_logits(model))
    report.restore()
    return report, out


def test_a_repeat_patch_uses_the_record_and_says_so(store):
    model = make("llama", "q4g64-bf16")
    first, first_logits = patched_logits(model)
    assert verified(first) and first.record.startswith("recorded "), str(first)
    key = first.record.split()[-1]
    assert len(list(store.glob("*.json"))) == 1
    second, second_logits = patched_logits(model)
    assert not verified(second) and second.record == f"cached record {key}", str(second)
    assert second.runs == 0 and not (VERIFYING | {"probes"}) & set(second.phases), second.phases
    assert f"verified: cached record {key}" in str(second)
    assert second.replaced == first.replaced and not second.declined
    assert (second.max_diff, second.allowed, second.criterion) == (first.max_diff, first.allowed, first.criterion)
    assert first.criterion == "batch bound", str(first)
    np.testing.assert_array_equal(second_logits, first_logits)  # the same parts on, the same kernels
    # a model loaded again (other arrays, the same values) is the same model
    third, _ = patched_logits(make("llama", "q4g64-bf16"))
    assert not verified(third), str(third)


def test_one_changed_weight_element_verifies_again(store):
    model = make("llama", "q4g64-bf16")
    assert verified(patched_logits(model)[0])
    scales = model.model.layers[1].mlp.down_proj.scales
    scales[0, 0] = scales[0, 0] * 1.5  # element 0 is always among the fingerprint's samples
    mx.eval(scales)
    again, _ = patched_logits(model)
    assert verified(again) and again.record.startswith("recorded "), str(again)
    dense = make("llama", "float32")
    before = record.fingerprint(dense)
    w = dense.model.layers[0].self_attn.q_proj.weight
    w[0, 0] = w[0, 0] + 1e-3
    assert record.fingerprint(dense) != before


@pytest.mark.parametrize("options", [{"max_rows": 16}, {"fuse_norms": True}, {"tolerance": 0.01}, {"seed": 3}])
def test_a_changed_option_verifies_again(store, options):
    model = make("llama", "q4g64-bf16")
    assert verified(patched_logits(model)[0])
    assert verified(patched_logits(model, **options)[0])
    assert not verified(patched_logits(model, **options)[0])  # (and that one is recorded in turn)


@pytest.mark.parametrize("change", ["mlx_metile version", "lowering sources", "mlx version"])
def test_a_changed_version_or_source_verifies_again(store, monkeypatch, change):
    model = make("llama", "q4g64")
    assert verified(patched_logits(model)[0])
    if change == "mlx_metile version":
        monkeypatch.setattr(identity, "_package_version", lambda: "99.0")
    elif change == "lowering sources":
        monkeypatch.setattr(identity, "sources_hash", lambda: "0" * 24)
    else:
        monkeypatch.setattr(mx, "__version__", "0.0.1")
    assert verified(patched_logits(model)[0])


def test_a_verification_that_declines_a_part_is_not_recorded(store, monkeypatch):
    """The planted wrong kernel of test_patch.py: the output projection off by 25% in calls of one
    row. Its verification declines lm_head; nothing is recorded, so the next patch verifies again
    (and declines it again)."""
    model = make("llama", "q4g64-bf16")
    plant_wrong_output_projection(monkeypatch, model)
    for _ in range(2):
        report = mt.patch(model)
        assert verified(report) and report.record == "", str(report)
        assert {(p, k) for p, k, _ in report.declined} == {("lm_head", "projection")}, str(report)
        report.restore()
    assert not store.exists() or not list(store.glob("*.json"))


def test_a_damaged_record_warns_and_verification_runs(store):
    model = make("llama", "q4g64")
    mt.patch(model).restore()
    (path,) = store.glob("*.json")
    path.write_bytes(path.read_bytes()[:-7])  # truncated: its checksum no longer matches
    with pytest.warns(RuntimeWarning, match="damaged"):
        report = mt.patch(model)
    assert verified(report) and report.record.startswith("recorded "), str(report)
    report.restore()
    cache.store(
        path, b"{not json", json.loads(path.read_text())["key"]
    )  # a sound sidecar over a file that is no record
    with pytest.warns(RuntimeWarning, match="unreadable"):
        report = mt.patch(model)
    assert verified(report), str(report)


def test_the_setting_off_always_verifies_and_records_nothing(store, env):
    env.set("MLX_METILE_VERIFY_RECORD", "0")
    model = make("llama", "q4g64")
    for _ in range(2):
        report, _ = patched_logits(model)
        assert verified(report) and report.record == "", str(report)
        assert "verification record" not in report.phases
    assert not store.exists()


def test_cache_clear_removes_the_record(store, capsys):
    from mlx_metile.cli import cache as cli_cache
    from mlx_metile.cli.info import caches

    model = make("llama", "q4g64")
    assert verified(patched_logits(model)[0])
    assert any(path == store for _, path, _ in caches())  # `mlx-metile info` and `cache` list it
    cli_cache.clear(argparse.Namespace(dry_run=False))
    assert f"removed {store}" in capsys.readouterr().out
    assert not store.exists()
    assert verified(patched_logits(model)[0])


def test_a_sharded_model_is_verified_every_time(store, monkeypatch):
    """Every rank must run verification's collectives alike: a model some rules place in a
    tensor-parallel group ("rank 0 of 2") is never looked up nor recorded."""

    class OneOfTwo:
        def discover(self, model, max_rows, declined, dense):
            return [], set()

        def agreement(self, model):
            return None

        def describe(self, model):
            return "rank 0 of 2"

    monkeypatch.setattr(integration, "EXTRA_RULES", [*integration.EXTRA_RULES, OneOfTwo()])
    model = make("llama", "q4g64")
    for _ in range(2):
        report, _ = patched_logits(model)
        assert verified(report) and report.record == "" and report.shard == "rank 0 of 2", str(report)
    assert not store.exists()
