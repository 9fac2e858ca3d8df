"""Where NAX kernels go on Metal: the dispatch builds Metal kernels for the device's own target (its
GPU generation and macOS, as the C++ core reports them), so the rules give a GPU without NAX the
simdgroup schedule; and the Metal launch refuses a NAX kernel where the device's verdict - MLX's
own test, recomputed by the C++ core - is no. Pure Python: a device as the C++ core would report
it (there is none here)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mlx_metile import dispatch
from mlx_metile.artifact import Artifact
from mlx_metile.backends import metal_device, primitive
from mlx_metile.schedule import Shape, choose
from mlx_metile.schedule.nax import nax_schedule
from mlx_metile.spec import ProjectionSpec, WeightFormat
from mlx_metile.targets import EMULATOR, MetalTarget

SPEC = ProjectionSpec("bf16", (WeightFormat("bf16", 4, 64),), k_multiple=64)
SHAPE = Shape(4096, 4096)
DEVICES = {
    "m1": metal_device.MetalDevice("applegpu_g13s", 13, (26, 2, 0), "Version 26.2 (Build 25C56)", False),
    "m5-26.1": metal_device.MetalDevice("applegpu_g17s", 17, (26, 1, 0), "Version 26.1 (Build 25B78)", False),
    "m5-26.2": metal_device.MetalDevice("applegpu_g17s", 17, (26, 2, 0), "Version 26.2 (Build 25C56)", True),
}


@pytest.fixture
def reported(monkeypatch):
    def use(name: str) -> metal_device.MetalDevice:
        monkeypatch.setattr(metal_device, "device", lambda: DEVICES[name])
        metal_device.metal_target.cache_clear()
        return DEVICES[name]

    yield use
    metal_device.metal_target.cache_clear()


@pytest.mark.parametrize("name", list(DEVICES))
def test_the_metal_target_is_the_device_s(reported, name):
    d = reported(name)
    target = dispatch.target_of("metal")
    assert target == MetalTarget("msl", generation=d.generation, macos=d.macos[:2])
    assert target.nax == d.nax == metal_device.nax_available()
    assert choose(SPEC, 8, target, SHAPE).kind == "simd_splitk"  # (the rules' default, NAX or not)


def test_the_emulator_keeps_its_own_target(reported):
    reported("m1")
    assert dispatch.target_of("emulator") == EMULATOR


def launch(artifact):
    call = SimpleNamespace(out_ns=[8], formats=(), epilogue=None, residual=None, columns=8)
    return primitive.launch(artifact, [], call, 1, {}, "metal", None)


@pytest.mark.parametrize("name", ["m1", "m5-26.1"])
def test_the_metal_launch_refuses_nax_where_mlx_does_not_run_it(reported, name):
    reported(name)
    artifact = Artifact("msl", "kernel void k() {}", "k", nax_schedule(SPEC, 8, "nax_staged", EMULATOR), ())
    with pytest.raises(RuntimeError, match="k is a NAX kernel .nax_staged.; MLX does not run NAX on this device"):
        launch(artifact)


def test_a_device_whose_verdict_disagrees_with_its_target_is_refused_too(reported, monkeypatch):
    """Generation 17 on macOS 26.2 but MLX's verdict no (a phone GPU needs 18): the verdict wins."""
    monkeypatch.setitem(DEVICES, "m5-26.2", metal_device.MetalDevice("applegpu_g17p", 17, (26, 2, 0), "", False))
    reported("m5-26.2")
    artifact = Artifact("msl", "kernel void k() {}", "k", nax_schedule(SPEC, 8, "nax_direct", EMULATOR), ())
    with pytest.raises(RuntimeError, match="MLX does not run NAX on this device"):
        launch(artifact)
