"""The NAX schedules without running them: choose gives them only when asked and only on NAX
targets; the lowerings refuse illegal Schedules with a LowerError naming what is wrong; the MSL
dialect prints the NAX statements, the CUDA and AIR printers refuse them."""

from __future__ import annotations

import pytest

from mlx_metile.codegen import CUDARenderer, MSLRenderer
from mlx_metile.codegen.ast import CoopLoad, CoopTensor, NaxOp, NaxRun, Slot, SlotLoop, TensorView, Var
from mlx_metile.codegen.cstyle import RenderError
from mlx_metile.formats import WeightFormat
from mlx_metile.lower import LowerError
from mlx_metile.pipeline import compile_projection, lower_projection
from mlx_metile.schedule import Route, Shape, choose, tuned
from mlx_metile.schedule.nax import nax_schedule, staged_bytes
from mlx_metile.spec import ProjectionSpec
from mlx_metile.targets import CPU, EMULATOR, MetalTarget, cuda_target

Q4 = ProjectionSpec("bf16", (WeightFormat("bf16", 4, 64),), k_multiple=64)
SHAPE = Shape(4096, 4096)


def test_default_is_the_simdgroup_schedule_even_with_nax():
    assert EMULATOR.nax
    assert choose(Q4, 8, EMULATOR, SHAPE).kind == "simd_splitk"
    assert choose(Q4, 64, EMULATOR, SHAPE).kind == "tiled"


@pytest.mark.parametrize("policy", ["nax_direct", "nax_staged"])
def test_asked_for_on_a_nax_target(policy, env):
    env.set("MLX_METILE_METAL_SCHEDULE", policy)
    for rows, bm in ((1, 16), (16, 16), (17, 32), (32, 32), (33, 64), (500, 64)):
        s = choose(Q4, rows, EMULATOR, SHAPE)
        assert (s.kind, s.BM, s.NC % 32, s.BK) == (policy, bm, 0, 4 * s.VK)
    # a CUDA target is not a Metal one: the setting does not apply there
    assert choose(Q4, 8, cuda_target("sm_90"), SHAPE).kind == "mma"


@pytest.mark.parametrize("target", [CPU, MetalTarget("msl", generation=15, macos=(26, 2))], ids=["cpu", "m3"])
def test_asked_for_without_nax_is_an_error(target, env):
    env.set("MLX_METILE_METAL_SCHEDULE", "nax_staged")
    with pytest.raises(ValueError, match=r"MLX_METILE_METAL_SCHEDULE=nax_staged: the target .* no neural accelerators"):
        choose(Q4, 8, target, SHAPE)


def test_tuned_nax_decision_on_a_target_without_nax_is_an_error():
    schedule = nax_schedule(Q4, 8, "nax_direct", EMULATOR)
    route = Route("metal", "nax_direct", schedule=schedule)
    with tuned.forcing(CPU, Q4, SHAPE, route), pytest.raises(ValueError, match="tuned decision 'nax_direct'"):
        choose(Q4, 8, CPU, SHAPE)
    with tuned.forcing(EMULATOR, Q4, SHAPE, route):
        assert choose(Q4, 8, EMULATOR, SHAPE) == schedule


def test_f32_activations_are_declined(env):
    env.set("MLX_METILE_METAL_SCHEDULE", "nax_direct")
    spec = ProjectionSpec("f32", (WeightFormat("f32"),))
    with pytest.raises(ValueError, match="f32 activations are declined"):
        choose(spec, 8, EMULATOR, SHAPE)
    bf16_schedule = nax_schedule(ProjectionSpec("bf16", (WeightFormat("f32"),)), 8, "nax_direct", EMULATOR)
    with pytest.raises(LowerError, match="f32 activations are declined"):
        lower_projection(spec, bf16_schedule)


@pytest.mark.parametrize("bits", [0, 2, 3, 4, 5, 6, 8])
def test_staged_weights_fit_threadgroup_memory(bits):
    w = WeightFormat("bf16", bits, 64 if bits else 0)
    for spec in (ProjectionSpec("bf16", (w,)), ProjectionSpec("bf16", (w, w), "swiglu")):
        s = nax_schedule(spec, 32, "nax_staged", EMULATOR)
        assert staged_bytes(spec, s.SG, s.NC, s.U, s.row_pad) <= EMULATOR.threadgroup_memory
        assert s.row_pad == 16 and lower_projection(spec, s).threads_per_group == 32 * s.SG


NV4, MX8, Q8G64 = (
    WeightFormat("u8", 4, 16, mode="nvfp4"),
    WeightFormat("u8", 8, 32, mode="mxfp8"),
    WeightFormat("bf16", 8, 64),
)
SMALL_GROUPS = {
    "nvfp4": ProjectionSpec("f16", (NV4,)),
    "nvfp4_swiglu": ProjectionSpec("bf16", (NV4, NV4), "swiglu"),
    "mxfp8_q8g64": ProjectionSpec("bf16", (MX8, Q8G64)),
    "q2g32": ProjectionSpec("bf16", (WeightFormat("bf16", 2, 32),)),
}


@pytest.mark.parametrize("name", list(SMALL_GROUPS))
@pytest.mark.parametrize("policy", ["nax_direct", "nax_staged"])
def test_groups_smaller_than_vk_are_whole_per_chunk(name, policy):
    """U, the k a chunk takes of each column group, is a multiple of every group smaller than
    VK, so a group's scale (and bias) index is exact and loaded once (the byte counts in
    test_nax_emulated.py show it); the staged weights still fit."""
    spec = SMALL_GROUPS[name]
    s = nax_schedule(spec, 32, policy, EMULATOR)
    small = [w.group_size for w in spec.weights if w.group_size < s.VK]
    assert small and s.VK % s.U == 0 and all(s.U % g == 0 for g in small), (s.VK, s.U, small)
    if policy == "nax_staged":
        assert staged_bytes(spec, s.SG, s.NC, s.U, s.row_pad) <= EMULATOR.threadgroup_memory
    assert lower_projection(spec, s).threads_per_group == 32 * s.SG


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"BM": 24}, "BM=24 must be a multiple of the fragment's 16 rows"),
        ({"NC": 48}, r"NC=48 must be a multiple of matmul2d's n = 32"),
        ({"SG": 33}, "SG=33 SIMD groups"),
        ({"U": 6}, "U=6 must be a multiple of the 4 k"),
    ],
)
def test_illegal_schedules_are_refused(changes, message):
    s = nax_schedule(Q4, 8, "nax_direct", EMULATOR).with_fields(**changes)
    with pytest.raises(LowerError, match=message):
        lower_projection(Q4, s)


def test_staged_weights_past_the_threadgroup_memory_are_refused():
    s = nax_schedule(Q4, 8, "nax_staged", EMULATOR)
    with pytest.raises(LowerError, match=r"take \d+ bytes of threadgroup memory, the target gives 4096"):
        lower_projection(Q4, s.with_fields(smem_block=4096))


def test_msl_prints_the_nax_statements():
    msl = MSLRenderer()
    assert msl.line(NaxOp("mm", 16, 32, 16, transpose_right=True)) == (
        "constexpr auto mm_desc = mpp::tensor_ops::matmul2d_descriptor(16, 32, 16, false, true, false, "
        "mpp::tensor_ops::matmul2d_descriptor::mode::multiply_accumulate); "
        "mpp::tensor_ops::matmul2d<mm_desc, metal::execution_simdgroup> mm;"
    )
    assert msl.line(CoopTensor("a", "mm", "left", "f32", "bf16", "bf16")) == (
        "auto a = mm.template get_left_input_cooperative_tensor<bfloat, bfloat, float>();"
    )
    assert msl.line(CoopTensor("c", "mm", "destination", "f32", "a", "b")) == (
        "auto c = mm.template get_destination_cooperative_tensor<decltype(a), decltype(b), float>();"
    )
    view = TensorView("v", "threadgroup", "f16", Var("ws"), (Var("k"), Var("n")), (Var("one"), Var("ld")))
    assert msl.line(view) == (
        "metal::tensor<threadgroup half, metal::dextents<int32_t, 2>, metal::tensor_inline> "
        "v(ws, metal::dextents<int32_t, 2>(k, n), metal::array<int32_t, 2>{one, ld});"
    )
    assert msl.line(CoopLoad("b", "v")) == "b.load(v);"
    assert msl.line(NaxRun("mm", "a", "b", "c")) == "mm.run(a, b, c);"
    assert msl.expr(Slot("c", Var("i"))) == "c[i]"
    assert msl.stmts([SlotLoop("i", "c", [])], 0) == [
        "#pragma unroll",
        "for (ushort i = 0; i < c.get_capacity(); ++i) {",
        "}",
    ]
    with pytest.raises(RenderError, match="cuda has no MetalPerformancePrimitives"):
        CUDARenderer().line(NaxRun("mm", "a", "b", "c"))


@pytest.mark.parametrize("policy", ["nax_direct", "nax_staged"])
def test_no_air_for_nax(policy):
    s = nax_schedule(Q4, 8, policy, EMULATOR)
    assert "mpp::tensor_ops::matmul2d" in compile_projection(Q4, s, "msl").source
    with pytest.raises(RenderError, match="NAX kernels .* have no AIR form"):
        compile_projection(Q4, s, "air")
