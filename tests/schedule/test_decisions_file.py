"""Decisions files (schedule.decisions): the tuned CUDA routes choose() and the dispatch read where
the tuner installed none - the package's shipped file, a user's (MLX_METILE_CUDA_DECISIONS), or off."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from types import SimpleNamespace

import pytest

from mlx_metile.pipeline import lower_projection
from mlx_metile.schedule import Route, Shape, choose, decisions, rules, tuned
from mlx_metile.spec import ProjectionSpec, WeightFormat
from mlx_metile.targets import CPU, cuda_target
from mlx_metile.tune.export import entries_of

SPEC = ProjectionSpec("bf16", (WeightFormat("bf16", 4, 64),), k_multiple=64)
SHAPE = Shape(4096, 4096)
H200 = cuda_target("sm_90")
SUM_ORDER = ("kind", "VK", "splits", "wide", "q8split", "sector", "interleave", "layout", "xshare", "SG")


def write(path, entries, fmt=decisions.FORMAT):
    path.write_text(json.dumps({"format": fmt, "entries": entries}))
    return str(path)


def entry(route: Route, bucket=8, arch="sm_90", spec=SPEC, shape=SHAPE) -> dict:
    return {"arch": arch, "spec": spec.name(), "K": shape.K, "columns": shape.columns, "bucket": bucket,
            "route": route.as_dict()}  # fmt: skip


def test_an_entry_applies_to_its_exact_call_only(env, tmp_path):
    base = rules(SPEC, 8, H200, SHAPE)
    other = replace(base, batch=4 if base.batch != 4 else 1)
    env.set("MLX_METILE_CUDA_DECISIONS", write(tmp_path / "d.json", [entry(Route("cuda", "v", schedule=other))]))
    assert choose(SPEC, 8, H200, SHAPE) == other
    assert choose(SPEC, 5, H200, SHAPE) == other  # the same bucket
    assert choose(SPEC, 16, H200, SHAPE) == rules(SPEC, 16, H200, SHAPE)  # another bucket
    assert choose(SPEC, 8, cuda_target("sm_80"), SHAPE) == rules(SPEC, 8, cuda_target("sm_80"), SHAPE)
    assert choose(SPEC, 8, H200, Shape(4096, 8192)) == rules(SPEC, 8, H200, Shape(4096, 8192))
    assert tuned.lookup(CPU, SPEC, 8, SHAPE) is None
    assert rules(SPEC, 8, H200, SHAPE) == base  # the rules never read the file


def test_installed_decisions_come_first_and_off_turns_the_file_off(env, tmp_path):
    native = Route("cuda", "native", native=True)
    env.set("MLX_METILE_CUDA_DECISIONS", write(tmp_path / "d.json", [entry(native)]))
    assert tuned.lookup(H200, SPEC, 8, SHAPE) == native and tuned.active(cuda=True) and not tuned.active()
    mine = Route("cuda", "cuda")
    tuned.install({tuned.key(H200, SPEC, 8, SHAPE): mine})
    try:
        assert tuned.lookup(H200, SPEC, 8, SHAPE) == mine
    finally:
        tuned.forget()
    env.set("MLX_METILE_CUDA_MMA_BATCH", "2")  # a knob steers the rules: the file is not read
    assert decisions.path() is None and tuned.lookup(H200, SPEC, 8, SHAPE) is None
    env.unset("MLX_METILE_CUDA_MMA_BATCH")
    env.set("MLX_METILE_CUDA_DECISIONS", "off")
    assert decisions.path() is None and tuned.lookup(H200, SPEC, 8, SHAPE) is None


@pytest.mark.parametrize(
    "data, message",
    [
        ("not json", "cannot be read as JSON"),
        (json.dumps({"format": 99, "entries": []}), '"format": 1'),
        (json.dumps({"format": 1, "entries": [{"arch": "sm_90"}]}), "entry 0"),
        (json.dumps({"format": 1, "entries": [entry(Route("cpu", "cpu"))]}), "backend 'cpu'"),
        (json.dumps({"format": 1, "entries": [entry(Route("cuda", "a"))] * 2}), "entry 1 repeats"),
    ],
)
def test_a_malformed_file_is_an_error_naming_it(env, tmp_path, data, message):
    p = tmp_path / "bad.json"
    p.write_text(data)
    env.set("MLX_METILE_CUDA_DECISIONS", str(p))
    with pytest.raises(ValueError, match=message) as e:
        choose(SPEC, 8, H200, SHAPE)
    assert "bad.json" in str(e.value)


def test_a_changed_file_is_read_again(env, tmp_path):
    native = Route("cuda", "native", native=True)
    f = write(tmp_path / "d.json", [entry(native)])
    env.set("MLX_METILE_CUDA_DECISIONS", f)
    assert tuned.lookup(H200, SPEC, 8, SHAPE) == native
    write(tmp_path / "d.json", [entry(native, bucket=16)])
    os.utime(f, ns=(1, 10**18))  # (a new mtime even within the clock's resolution)
    assert tuned.lookup(H200, SPEC, 8, SHAPE) is None and tuned.lookup(H200, SPEC, 16, SHAPE) == native


def test_unknown_schedule_fields_are_refused():
    d = Route("cuda", "x", schedule=rules(SPEC, 8, H200, SHAPE)).as_dict()
    d["schedule"]["warp_specialised"] = 1
    with pytest.raises(ValueError, match="warp_specialised"):
        Route.from_dict(d)


def test_a_missing_file_setting_is_refused(env, tmp_path):
    with pytest.raises(ValueError, match="MLX_METILE_CUDA_DECISIONS"):
        env.set("MLX_METILE_CUDA_DECISIONS", str(tmp_path / "absent.json"))


def test_the_shipped_file_reads_and_every_schedule_lowers(env):
    """Each shipped kernel route is a schedule its lowering accepts for the entry's own spec: the
    entries are found by spec name, so the name must match a spec of the grid below."""
    env.unset("MLX_METILE_CUDA_DECISIONS")
    assert decisions.path() == decisions.SHIPPED
    shipped = decisions.load(str(decisions.SHIPPED))
    if not decisions.SHIPPED.exists():
        pytest.skip("no decisions file is shipped")
    assert shipped, "the shipped file holds no entry"
    by_name = {s.name(): s for s in _specs()}
    for (arch, name, bucket, K, columns), route in shipped.items():
        assert arch == "sm_90" and route.backend == "cuda" and route.compiler is None
        assert name in by_name, f"{name}: no spec of the benchmark grid has this name"
        if route.schedule is not None:
            lower_projection(by_name[name], route.schedule)  # raises where illegal
            base = rules(by_name[name], bucket, cuda_target(arch), Shape(K, columns))
            for f in SUM_ORDER:  # the tuner's variants move loads only: a row's bits stay the rules'
                assert getattr(route.schedule, f) == getattr(base, f), (name, bucket, f)


def _specs():
    for act in ("bf16",):
        micro = [WeightFormat("u8", b, g, mode=m) for m, b, g in (("mxfp4", 4, 32), ("mxfp8", 8, 32), ("nvfp4", 4, 16))]
        for w in (WeightFormat("bf16"), WeightFormat("bf16", 4, 64), WeightFormat("bf16", 8, 64), *micro):
            for k in (64, 128, 256, 512, 1024, 2048):
                yield ProjectionSpec(act, (w,), k_multiple=k)
                yield ProjectionSpec(act, (w,), has_residual=True, k_multiple=k)
                yield ProjectionSpec(act, (w, w), "swiglu", k_multiple=k)
                yield ProjectionSpec(act, (w, w, w), k_multiple=k)


def test_export_writes_cuda_decisions_without_their_compiler(tmp_path):
    sched = rules(SPEC, 8, H200, SHAPE)
    site = SimpleNamespace(spec=SPEC, target=H200, shape=SHAPE)
    cpu_site = SimpleNamespace(spec=SPEC, target=CPU, shape=SHAPE)

    def decision(route, s, gate="pass"):
        rec = SimpleNamespace(ratio=(0.5, 0.6, 0.7), family="cuda_schedule", gate=gate)
        rejected = {} if gate == "pass" else {"cuda": "accuracy, edge draw"}
        return SimpleNamespace(
            route=route,
            _site=s,
            bucket=8,
            site="q4g64",
            chosen=route.name,
            records={route.name: rec},
            rejected=rejected,
        )

    unjudged = []
    out = entries_of([decision(Route("cuda", "cuda:batch=2", schedule=sched, compiler="nvrtc"), site),
                      decision(Route("cpu", "cpu"), cpu_site),
                      decision(Route("cuda", "native", native=True), site, gate="fail")], unjudged)  # fmt: skip
    assert unjudged == [{"site": "q4g64", "bucket": 8, "why": "accuracy, edge draw"}]  # every kernel gated out
    assert len(out) == 1 and out[0]["spec"] == SPEC.name() and out[0]["bucket"] == 8
    route = Route.from_dict(out[0]["route"])
    assert route.schedule == sched and route.compiler is None and out[0]["ratio"] == [0.5, 0.6, 0.7]
