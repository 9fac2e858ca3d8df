"""The Metal routes on a Mac (macOS builds with a Metal device only; no machine of this project is
one, so these tests have never run): the device's report, and one projection through each route -
the MSL source, our AIR as a metallib loaded by path, NAX direct and staged where MLX runs NAX (else
refused) - against numpy float64. .github/workflows/macos.yml would run them."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

import mlx_metile as mt
from mlx_metile import dispatch, formats, settings
from mlx_metile.air import llvm14
from mlx_metile.backends import metal_device
from mlx_metile.backends.extension import has_metal
from mlx_metile.call import check
from mlx_metile.schedule import Route, Shape, row_bucket, tuned
from mlx_metile.schedule.nax import nax_schedule
from mlx_metile.schedule.simt import simt_schedule
from mlx_metile.targets import nax_available

pytestmark = pytest.mark.skipif(
    not (has_metal() and mx.metal.is_available()), reason="no Metal: this build or machine is not a Mac with a GPU"
)
K, N, ROWS = 256, 96, 5


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    w = mx.array((rng.standard_normal((N, K)) * K**-0.5).astype(np.float32)).astype(mx.bfloat16)
    weight = mt.QuantizedWeight(*mx.quantize(w, group_size=64, bits=4), 64, 4)
    x = mx.array(rng.standard_normal((ROWS, K)).astype(np.float32)).astype(mx.bfloat16)
    call = check("fused_linear", x, [weight], [None], None, None)
    target = metal_device.metal_target()
    return x, weight, target, dispatch.spec_of(call, target, None), Shape(K, N)


def within_bf16(got: mx.array, x: mx.array, weight, weights_rounded: bool = False) -> None:
    """Within one bf16 rounding and f32 sums of float64 (over each weight rounded to bf16 where the
    kernel rounds them: NAX's matmul2d operands)."""
    x64, w64 = np.array(x.astype(mx.float32), dtype=np.float64), formats.reference(weight)
    if weights_rounded:
        w32 = mx.dequantize(weight.w, weight.scales.astype(mx.float32), weight.biases.astype(mx.float32), 64, 4)
        w64 = np.array(w32.astype(mx.bfloat16).astype(mx.float32), dtype=np.float64)
    ref = x64 @ w64.T
    bound = 2**-8 * np.abs(ref) + 2**-24 * K * (np.abs(x64) @ np.abs(w64).T)  # half a bf16 ulp, f32 sums
    assert np.all(np.abs(np.array(got.astype(mx.float32), dtype=np.float64) - ref) <= bound)


def test_the_device_report_agrees_with_the_rule():
    d = metal_device.device()
    assert d.architecture.startswith("applegpu_g") and d.generation >= 13 and d.macos[0] >= 14
    if not d.architecture.endswith("p"):  # (MLX asks generation 18 of phone GPUs; the target's rule is the Macs')
        assert d.nax == nax_available(d.generation, d.macos[:2]) == metal_device.nax_available()


def run(problem, route: Route | None) -> mx.array:
    x, weight, target, spec, shape = problem
    if route is None:
        return mt.fused_linear(x, [weight])
    with tuned.forcing(target, spec, shape, route):
        return mt.fused_linear(x, [weight])


def test_the_msl_route(problem):
    x, weight, *_ = problem
    within_bf16(run(problem, None), x, weight)


@pytest.mark.skipif(not llvm14.available(), reason="LLVM 14's llvm-as is not installed (brew install llvm@14)")
def test_our_air_as_a_metallib_loaded_by_path(problem):
    x, weight, target, spec, _ = problem
    simd = simt_schedule(spec, row_bucket(ROWS), "msl", settings.current())  # (AIR prints the simdgroup schedules)
    route = Route("metal", "air", schedule=simd, build="air")
    within_bf16(run(problem, route), x, weight)


def test_nax_runs_only_where_mlx_runs_nax(problem):
    x, weight, target, spec, _ = problem
    if not metal_device.nax_available():
        with pytest.raises(ValueError, match="no neural accelerators"):
            nax_schedule(spec, row_bucket(ROWS), "nax_direct", target)
        return
    for kind in ("nax_direct", "nax_staged"):
        route = Route("metal", kind, schedule=nax_schedule(spec, row_bucket(ROWS), kind, target))
        within_bf16(run(problem, route), x, weight, weights_rounded=True)
