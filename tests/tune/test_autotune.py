"""autotune / patch(tune=True) / `mlx-metile tune`: decisions for every call a patched model makes,
installed so that the model runs them; from the store the second time."""

import mlx.core as mx
import numpy as np
import pytest

import mlx_metile as mt
from mlx_metile.__main__ import main
from mlx_metile.tune import Store, autotune

from ..integrations.models import make
from .conftest import K
from .planted import PlantedClock

MS = 1e-3
SLOW_CPU = {"native": MS, "cpu": 3 * MS}
FAST_CPU = {"native": MS, "cpu": 0.3 * MS}


def logits(model, rows: int) -> mx.array:
    tokens = mx.arange(rows).reshape(1, rows) % 100
    return model(tokens).astype(mx.float32)


def backends(model, rows: int) -> set[str]:
    with mt.trace() as t:
        mx.eval(model(mx.zeros((1, rows), mx.int32)))
    return {r.backend for r in t.records}


@pytest.fixture
def model():
    m = make("llama", "q4g64-bf16")
    return m


def test_a_patched_model_runs_what_was_decided_per_bucket(model, store, quick):
    stock = {rows: logits(model, rows) for rows in (1, 8)}
    report = mt.patch(model, max_rows=8, verify=False)  # (verification is tests/integrations')
    assert report
    one = autotune(model, rows=(1,), clock=PlantedClock(SLOW_CPU), protocol=quick, store=store)
    eight = autotune(model, rows=(8,), clock=PlantedClock(FAST_CPU), protocol=quick, store=store)
    sites = {d.site for d in one.decisions}
    assert len(sites) == len(one.decisions) == 5  # q/k/v, o (+residual), gate/up, down (+residual), lm_head
    assert {d.chosen for d in one.decisions} == {"native"} and {d.chosen for d in eight.decisions} == {"cpu"}
    assert one.installed == 5 and eight.installed == 5
    assert backends(model, 1) == {"mlx (tuned)"} and backends(model, 8) == {"cpu"} and backends(model, 5) == {"cpu"}
    for rows in (1, 8):  # still the model: within patch's own verification distance of stock
        got, want = logits(model, rows), stock[rows]
        assert float(mx.abs(got - want).max()) <= 0.05 * float(mx.abs(want).max())
    text = str(one)
    assert text.startswith("mlx_metile.autotune: 5 decisions (0 from the store), 5 installed")
    again = autotune(model, rows=(1, 8), clock=PlantedClock(SLOW_CPU), protocol=quick, store=store)
    assert all(d.from_store for d in again.decisions) and {d.chosen for d in again.decisions} == {"native", "cpu"}
    report.restore()


def test_patch_tune_true_reads_the_store(model, tmp_path, env):
    path = tmp_path / "decisions.sqlite3"
    env.set("MLX_METILE_TUNE_STORE", str(path))
    report = mt.patch(model, max_rows=2, verify=False)
    filled = autotune(model, rows=(1, 2), clock=PlantedClock(SLOW_CPU), store=Store(path))  # the default protocol
    assert {d.chosen for d in filled.decisions} == {"native"}
    report.restore()
    mt.tune.forget()
    assert backends(model, 1) == set()  # (restored: no mlx_metile calls)
    report = mt.patch(model, max_rows=2, verify=False, tune=True)
    tuning = report.tuning
    assert len(tuning.decisions) == 10 and all(d.from_store for d in tuning.decisions)
    assert backends(model, 2) == {"mlx (tuned)"}
    assert "mlx_metile.autotune: 10 decisions (10 from the store)" in str(report)
    report.restore()


def test_a_projection_is_tuned(gate_up, store, quick):
    p = mt.Projection(gate_up, epilogue="swiglu")
    tuning = autotune(p, rows=(2, 4), clock=PlantedClock(FAST_CPU), protocol=quick, store=store)
    assert [d.bucket for d in tuning.decisions] == [2, 4] and {d.chosen for d in tuning.decisions} == {"cpu"}
    with mt.trace() as t:
        p(mx.ones((3, K), mx.bfloat16))
    assert t.records[0].backend == "cpu"


def test_what_autotune_refuses(model):
    with pytest.raises(ValueError, match="makes no mlx_metile projection calls; patch it first"):
        autotune(model, rows=(1,), store=None)
    with pytest.raises(TypeError, match="expected an mlx.nn.Module or an mlx_metile.Projection"):
        autotune(np.zeros(3))
    with pytest.raises(TypeError, match="tune: expected True or False"):
        mt.patch(model, tune="yes")


def test_the_command_line_tunes_and_shows(tmp_path, capsys):
    path = str(tmp_path / "cli.sqlite3")
    assert main(["tune", "--store", path, "--k", "128", "--n", "64", "--rows", "2"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("q4g64 K=128 N=64 x bfloat16, rows <= 2: ") and "[########################] 1/1" in err
    assert main(["tune", "--show", "--store", path]) == 0
    out, _ = capsys.readouterr()
    assert out.startswith(f"{path}: 1 decisions\nq4g64 K=128 N=64 x bfloat16, rows <= 2: ")
    assert "    cpu: " in out and "    native: " in out
    assert "(the incumbent), gate pass" in out.split("    cpu: ")[1].splitlines()[0]
