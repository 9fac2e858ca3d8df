"""The tournament end to end over what runs here (MLX_METILE_EMULATE=1): the emulated MSL (the
simdgroup schedule, NAX direct and staged), our AIR forms as metallibs whose bitcode runs on the
CPU, and planted wrong AIR and MSL builds - each gated
for accuracy through the very dispatch a decided call takes. The wrong ones are rejected with the
element and error that condemn them; a chosen AIR form, installed, is what later calls run. Timings
are planted (no time is measured); nothing here ran on Metal."""

from __future__ import annotations

import re

import mlx.core as mx
import numpy as np
import pytest

import mlx_metile as mt
from mlx_metile import dispatch
from mlx_metile.air.candidate import FORMS
from mlx_metile.air.llvm14 import assemble
from mlx_metile.air.metallib import Metallib
from mlx_metile.artifact import Artifact
from mlx_metile.backends import metal_builds, primitive
from mlx_metile.backends.metal_builds import air_artifact
from mlx_metile.pipeline import compile_projection
from mlx_metile.schedule import Route
from mlx_metile.tune import candidates as C
from mlx_metile.tune import gate as gates
from mlx_metile.tune import tournament
from mlx_metile.tune.site import Site

from ..conftest import requires_emulator
from .conftest import K
from .planted import PlantedClock

pytestmark = requires_emulator
MS = 1e-3
KEEP = ("air", "air:unpack-vector")  # two forms keep the test's builds few; test_candidates lists all


def _negate_last_store_msl(source: str) -> str:
    """The last output store writes the value's negation: one output column's row 3 of each tile."""
    stores = list(re.finditer(r"(y0\[[^\]]+\] = )(t\d+);", source))
    m = stores[-1]
    return source[: m.start()] + f"{m.group(1)}-{m.group(2)};" + source[m.end() :]


def _negate_last_store_air(text: str) -> str:
    stores = list(re.finditer(r"  store bfloat (%\.\d+), bfloat addrspace\(1\)\* ", text))
    m = stores[-1]
    return (
        text[: m.start()]
        + f"  %planted = fneg bfloat {m.group(1)}\n  store bfloat %planted, bfloat addrspace(1)* "
        + text[m.end() :]
    )


def planted_msl(spec, schedule) -> Artifact:
    a = compile_projection(spec, schedule, "msl")
    return Artifact("msl", _negate_last_store_msl(a.source), a.entry, schedule, a.params)


def planted_air(spec, schedule) -> Artifact:
    a = air_artifact(spec, schedule)
    text = _negate_last_store_air(a.source)
    lib = Metallib.of_bitcode([(a.entry, assemble(text, a.entry))], air_version=(2, 8), language=(4, 0)).to_bytes()
    return Artifact("air", text, a.entry, schedule, a.params, route="metallib", library=lib)


@pytest.fixture
def emulated(env, monkeypatch):
    """The emulator as the backend, the AIR forms cut to KEEP, and two planted builds as a kind."""
    env.set("MLX_METILE_EMULATE", "1")
    for name in list(FORMS):
        if name not in KEEP:
            monkeypatch.delitem(FORMS, name)
    monkeypatch.setitem(metal_builds.BUILDS, "msl:planted", planted_msl)
    monkeypatch.setitem(metal_builds.BUILDS, "air:planted", planted_air)

    def admit(site, bucket):
        schedule = C.simdgroup_schedule(site, bucket)
        return [C.Candidate(n, "planted", Route("emulator", n, schedule=schedule, build=n), identity=n)
                for n in ("msl:planted", "air:planted")]  # fmt: skip

    monkeypatch.setitem(C.KINDS, "planted", C.Kind("planted", 0.05, admit))
    yield
    metal_builds.forget()
    dispatch.clear_kernel_caches()


def x_like(rows=1):
    return mx.zeros((rows, K), mx.bfloat16)


def test_the_gate_runs_emulated_msl_and_air_and_rejects_the_planted_builds(weight, quick, emulated):
    times = {"native": 1 * MS, "emulator": 2 * MS, "nax_direct": 2 * MS, "nax_staged": 2 * MS, "air": 2 * MS,
             "air:unpack-vector": 2 * MS, "msl:planted": 0.1 * MS, "air:planted": 0.1 * MS}  # fmt: skip
    d = tournament(x_like(), [weight], rows=4, clock=PlantedClock(times), protocol=quick, seed=5)
    assert list(d.records)[:8] == [
        "native", "emulator", "nax_direct", "nax_staged", "air", "air:unpack-vector", "msl:planted", "air:planted"
    ]  # fmt: skip
    assert d.chosen == "native"
    for name in ("emulator", "nax_direct", "nax_staged", "air", "air:unpack-vector"):
        assert d.records[name].gate == "pass" and d.records[name].error < 1, (name, d.records[name])
        assert d.rejected[name].startswith("slower: median 2.000x")
    for name in ("msl:planted", "air:planted"):  # wrong at row 3: the 4-row draw finds it, with where and how much
        assert d.records[name].gate == "fail" and d.records[name].status == "gated out"
        assert re.match(r"accuracy, draw 0 \(4 rows\): output 0 \[3, \d+\]: \|error\| ", d.rejected[name]), d.rejected[
            name
        ]


def test_a_chosen_air_form_is_what_later_calls_run(weight, quick, emulated, monkeypatch):
    times = {"native": 1 * MS, "emulator": 2 * MS, "nax_direct": 2 * MS, "nax_staged": 2 * MS, "air": 0.5 * MS,
             "air:unpack-vector": 2 * MS, "msl:planted": 0.1 * MS, "air:planted": 0.1 * MS}  # fmt: skip
    d = tournament(x_like(), [weight], rows=4, clock=PlantedClock(times), protocol=quick, seed=6, install=True)
    assert d.chosen == "air" and d.route == Route("emulator", "air", schedule=d.route.schedule, build="air")
    built = []
    real = primitive.emulator_object
    monkeypatch.setattr(primitive, "emulator_object", lambda a: built.append(a.route) or real(a))
    x = mx.array(np.random.default_rng(0).standard_normal((3, K)).astype(np.float32)).astype(mx.bfloat16)
    with mt.trace() as calls:
        got = mt.fused_linear(x, [weight])
        mx.eval(got)
    assert built == ["metallib"] and [r.backend for r in calls] == ["emulator"]
    x64, w64 = np.array(x.astype(mx.float32), dtype=np.float64), mt.formats.reference(weight)
    ref = x64 @ w64.T
    bound = 2**-7 * np.abs(ref) + 2**-24 * K * (np.abs(x64) @ np.abs(w64).T)  # bf16 output, f32 sums of K products
    assert np.all(np.abs(np.array(got.astype(mx.float32)) - ref) <= bound)


def test_nax_passes_the_gate_with_its_operand_rounding_only(weight, emulated):
    """matmul2d's operands are bf16 here, so each dequantized weight is rounded to bf16 before the
    products - an error of up to 2**-8 of each |x w| term, which the NAX candidates declare
    (operand_rounding) and the gate then admits (tolerance.OPERAND); held to the f32-dequantization
    bound they fail. Their results are float64's over the bf16-rounded weights."""
    x = mx.array(np.random.default_rng(1).standard_normal((4, K)).astype(np.float32)).astype(mx.bfloat16)
    site = Site.of(x, [weight])
    (nax,) = [c for c in C.candidates(site, 4) if c.name == "nax_direct"]
    assert nax.operand_rounding
    run = {"nax_direct": nax.runner(site)}
    with_term = gates.gate(site, run, 4, np.random.default_rng(2), rounding={"nax_direct": True})["nax_direct"]
    without = gates.gate(site, run, 4, np.random.default_rng(2))["nax_direct"]
    assert with_term.passed and with_term.worst <= 1, with_term
    assert not without.passed and without.reason.startswith("accuracy, draw 0 (4 rows)"), without
    got = np.array(run["nax_direct"](x, None)[0].astype(mx.float32), dtype=np.float64)
    x64, w64 = np.array(x.astype(mx.float32), dtype=np.float64), mt.formats.reference(weight)
    f32 = mx.float32  # each weight dequantized in f32, as the kernel does, then rounded to bf16
    w32 = mx.dequantize(weight.w, weight.scales.astype(f32), weight.biases.astype(f32), group_size=64, bits=4)
    w_bf16 = np.array(w32.astype(mx.bfloat16).astype(f32), dtype=np.float64)

    def worst(w: np.ndarray) -> float:  # error over its bound: half a bf16 ulp (<= 2**-8 |ref|), f32 sums
        ref = x64 @ w.T
        return float((np.abs(got - ref) / (2**-8 * np.abs(ref) + 2**-24 * K * (np.abs(x64) @ np.abs(w).T))).max())

    assert worst(w_bf16) <= 1 < worst(w64)
