"""Metal's candidates as values (pure Python: a MetalTarget of each GPU generation and macOS, no
device): the simdgroup MSL, the AIR forms, NAX direct and staged (the NAX rules' schedules) only
where the target has NAX, patched archives only with MLX_METILE_PATCHED_ARCHIVES on a GPU whose
code the native room decodes; and what a decision of them is keyed by. Nothing here runs on Metal."""

from dataclasses import replace

import mlx.core as mx
import pytest

from mlx_metile import dispatch
from mlx_metile.air.candidate import FORMS
from mlx_metile.backends import metal_archive, metal_device
from mlx_metile.backends.metal_builds import air_artifact
from mlx_metile.call import check
from mlx_metile.schedule import Route, Schedule, Shape
from mlx_metile.schedule.nax import nax_schedule, unsupported
from mlx_metile.schedule.schedule import NAX_KINDS
from mlx_metile.targets import EMULATOR, MetalTarget
from mlx_metile.tune import Protocol, identity
from mlx_metile.tune import candidates as C
from mlx_metile.tune.site import Site
from mlx_metile.tune.tournament import context, key_of, route_dict, route_of

from .conftest import K

TARGETS = {  # (generation, macOS): M1, M3 on macOS 26.2, M5 before and after 26.2, M5 on 27
    "m1-15.0": (13, (15, 0)),
    "m3-26.2": (15, (26, 2)),
    "m5-26.1": (17, (26, 1)),
    "m5-26.2": (17, (26, 2)),
    "m5-27.0": (17, (27, 0)),
}
NAX_TARGETS = {"m5-26.2", "m5-27.0"}


def metal_site(weights, target: MetalTarget, epilogue=None, x_dtype=mx.bfloat16):
    """The site as the dispatch on that Metal device would see it (nothing is run)."""
    call = check("fused_linear", mx.zeros((1, K), x_dtype), weights, [None] * len(weights), epilogue, None)
    site = Site.of_call(call)
    return replace(site, backend="metal", target=target, spec=dispatch.spec_of(call, target, None),
                   shape=Shape(call.K, call.columns))  # fmt: skip


def target(name: str) -> MetalTarget:
    generation, macos = TARGETS[name]
    return MetalTarget("msl", generation=generation, macos=macos)


def names(cands) -> list[str]:
    return [c.name for c in cands]


@pytest.mark.parametrize("name", list(TARGETS))
def test_every_metal_target_has_the_msl_and_air_candidates(weight, name):
    cands = C.candidates(metal_site([weight], target(name)), 8)
    assert names(cands)[:2] == ["native", "msl"] and [c.name for c in cands if c.family == "air"] == list(FORMS)
    simd = cands[1].route.schedule
    assert simd.kind == "simd_splitk" and cands[1].route.backend == "metal" and cands[1].route.build is None
    for c in cands:
        if c.family == "air":
            assert c.route.build == c.name and c.route.schedule == simd and "AIR 2.8.0" in c.identity
    assert len({c.identity for c in cands}) == len(cands)


@pytest.mark.parametrize("name", list(TARGETS))
def test_nax_only_where_the_target_has_it(weight, name):
    t = target(name)
    assert t.nax == (name in NAX_TARGETS)
    site = metal_site([weight], t)
    cands = C.candidates(site, 8)
    nax = [c for c in cands if c.family == "metal_nax"]
    if name in NAX_TARGETS:
        assert [c.name for c in nax] == list(NAX_KINDS) == ["nax_direct", "nax_staged"]
        assert [c.route for c in nax] == [
            Route("metal", kind, schedule=nax_schedule(site.spec, 8, kind, t)) for kind in NAX_KINDS
        ]
    else:
        assert nax == []
    others = [c for c in cands if c.family != "metal_nax" and c.route is not None and c.route.schedule is not None]
    assert others and not any(c.route.schedule.nax for c in others)  # MSL, AIR: the simdgroup schedule


def test_a_set_without_nax_never_lists_nax(weight, gate_up, env):
    """Not even where the user asks the rules for a NAX schedule (MLX_METILE_METAL_SCHEDULE), nor with
    archives on: every candidate of a target without NAX runs a simdgroup schedule."""
    env.set("MLX_METILE_PATCHED_ARCHIVES", "1")
    env.set("MLX_METILE_METAL_SCHEDULE", "nax_direct")
    for name in TARGETS:
        if name in NAX_TARGETS:
            continue
        for weights, epilogue in (([weight], None), (gate_up, "swiglu")):
            for bucket in (1, 32, 64):
                for c in C.candidates(metal_site(weights, target(name), epilogue), bucket):
                    assert c.family != "metal_nax" and c.name not in NAX_KINDS
                    assert c.route.schedule is None or not c.route.schedule.nax


def test_no_nax_for_a_spec_the_nax_lowerings_decline(env):
    """f32 activations: matmul2d's operands here are bf16 / f16 (schedule.nax.unsupported)."""
    w = mx.zeros((64, K), mx.float32)
    site = metal_site([w], target("m5-26.2"), x_dtype=mx.float32)
    assert unsupported(site.spec) is not None
    assert not [c for c in C.candidates(site, 8) if c.family == "metal_nax"]


def test_the_emulator_lists_nax_as_its_target_has_it(weight, env):
    env.set("MLX_METILE_EMULATE", "1")
    call = check("fused_linear", mx.zeros((1, K), mx.bfloat16), [weight], [None], None, None)
    site = Site.of_call(call)
    assert site.backend == "emulator" and site.target == EMULATOR
    nax = [c for c in C.candidates(site, 8) if c.family == "metal_nax"]
    assert [(c.name, c.route.backend, c.route.schedule.kind) for c in nax] == [
        ("nax_direct", "emulator", "nax_direct"),
        ("nax_staged", "emulator", "nax_staged"),
    ]


@pytest.mark.parametrize(
    "name, enabled, listed",
    [("m1-15.0", True, True), ("m1-15.0", False, False), ("m3-26.2", True, False), ("m5-26.2", True, False)],
)
def test_archives_only_when_enabled_on_a_gpu_the_native_room_decodes(weight, env, name, enabled, listed):
    if enabled:
        env.set("MLX_METILE_PATCHED_ARCHIVES", "1")
    cands = C.candidates(metal_site([weight], target(name)), 4)
    archives = [c for c in cands if c.family == "metal_archive"]
    assert bool(archives) == listed
    if listed:
        (a,) = archives
        assert a.route.build == "archive" and a.route.schedule == cands[1].route.schedule
        assert "launch {'threads_per_group': [64, 1, 1]" in a.identity and "native.rewrite v1" in a.identity


def test_not_on_the_cpu_and_not_without_a_metal_target(weight):
    site = metal_site([weight], target("m5-26.2"))
    assert not [c for c in C.candidates(replace(site, backend="cpu"), 4) if c.family in ("metal", "metal_nax")]
    assert names(C.candidates(replace(site, backend="mlx", spec=None, target=None, shape=None), 4)) == ["native"]


# -- keys -------------------------------------------------------------------------------------
FAKE = metal_device.MetalDevice("applegpu_g13s", 13, (26, 2, 0), "Version 26.2 (Build 25C56)", False)


@pytest.fixture
def fake_device(monkeypatch):
    """A Metal device as the C++ core would report it (there is none here)."""
    state = {"device": FAKE}
    monkeypatch.setattr(metal_device, "device", lambda: state["device"])
    identity.device_identity.cache_clear()
    identity.compiler_identity.cache_clear()
    yield state
    identity.device_identity.cache_clear()
    identity.compiler_identity.cache_clear()


def archive_key(weight, protocol=None) -> tuple[str, dict]:
    site = metal_site([weight], target("m1-15.0"))
    cands = C.candidates(site, 4)
    ctx = context(site, 4, cands, protocol or Protocol(), 3, False)
    return key_of(ctx), ctx


def test_an_archive_decision_is_keyed_by_what_the_seed_names(weight, env, fake_device):
    env.set("MLX_METILE_PATCHED_ARCHIVES", "1")
    key, ctx = archive_key(weight)
    assert ctx["device"]["metal"] == {"architecture": "applegpu_g13s", "generation": 13, "macos": [26, 2, 0],
                                      "os_build": "Version 26.2 (Build 25C56)", "nax": False}  # fmt: skip
    assert ctx["compiler"]["metal"] == "Version 26.2 (Build 25C56)" and "14." in ctx["compiler"]["llvm14"]
    (archive,) = [c for c in ctx["candidates"] if c[1] == "metal_archive"]
    for field in (
        "launch",
        "native.rewrite v1",
        "fast_math=none",
        "LLVM version 14",
    ):  # layout, rewrite, options, compiler
        assert field in archive[2]
    fake_device["device"] = replace(FAKE, os_version="Version 26.3 (Build 25D12)")  # another OS build
    identity.device_identity.cache_clear()
    identity.compiler_identity.cache_clear()
    assert archive_key(weight)[0] != key


def test_a_new_rewrite_version_is_another_decision(weight, env, fake_device, monkeypatch):
    env.set("MLX_METILE_PATCHED_ARCHIVES", "1")
    key, _ = archive_key(weight)
    monkeypatch.setattr(metal_archive, "REWRITE_VERSION", 2)
    assert archive_key(weight)[0] != key


def test_the_archive_file_is_stored_with_its_fields(weight, fake_device):
    """The fields a stored archive carries (computed without a device to make one)."""
    site = metal_site([weight], target("m1-15.0"))
    art = air_artifact(site.spec, C.simdgroup_schedule(site, 4))
    fields = metal_archive.archive_fields(art)
    assert set(fields) == {"gpu_architecture", "os_build", "compiler", "source", "launch_layout", "rewrite_version"}
    assert fields["gpu_architecture"] == "applegpu_g13s" and fields["os_build"] == FAKE.os_version
    assert fields["launch_layout"] == {"threads_per_group": [64, 1, 1], "rows_per_group": 4, "columns_per_group": 16}
    assert len(fields["source"]["metallib_sha256"]) == 64 and fields["source"]["entry"] == art.entry


def test_a_metal_route_round_trips_through_the_store():
    s = Schedule("simd_splitk", 4, 8, 2, 64, 32, 8)
    r = Route("metal", "air:contract", schedule=s, build="air:contract")
    assert route_of(route_dict(r)) == r


@pytest.mark.parametrize("name", list(TARGETS))
def test_the_incumbent_is_the_msl_or_the_nax_kind_the_rules_are_asked_for(weight, env, name):
    cands = C.candidates(metal_site([weight], target(name)), 8)
    assert [c.name for c in cands if c.incumbent] == ["msl"]  # (the rules' simdgroup schedule, its MSL)
    env.set("MLX_METILE_METAL_SCHEDULE", "nax_staged")
    cands = C.candidates(metal_site([weight], target(name)), 8)
    # where the target has NAX the rules give nax_staged; where not, no candidate runs what they ask
    assert [c.name for c in cands if c.incumbent] == (["nax_staged"] if name in NAX_TARGETS else [])
