"""The AIR dialect's module: what Metal's loader reads (triple, datalayout, address spaces, kernel
argument metadata, module flags, versions, compile options), verified by LLVM 14, read back by the
executor's metadata reader and packed into a metallib. Rendering only: nothing is executed here."""

from __future__ import annotations

import re

import pytest

from mlx_metile.air import Library, Metallib
from mlx_metile.air.candidate import air_candidate
from mlx_metile.air.llvm14 import assemble, verify
from mlx_metile.air.metallib import unwrap_bitcode
from mlx_metile.codegen.air import DATALAYOUT, TRIPLE, AirForm, AIRRenderer
from mlx_metile.codegen.ast import KernelDef, KernelParam, Mma, Var
from mlx_metile.codegen.cstyle import RenderError
from mlx_metile.formats import WeightFormat
from mlx_metile.pipeline import compile_projection
from mlx_metile.spec import ProjectionSpec
from mlx_metile.spec import ProjectionSpec as P

from ..helpers import artifact

SPEC = ProjectionSpec("bf16", (WeightFormat("bf16", 4, 64, True, "bf16"),))
TILED_SPEC = ProjectionSpec("f16", (WeightFormat("f16", 8, 32), WeightFormat("f16", 8, 32)), "swiglu")


@pytest.fixture(scope="module")
def msl():
    return artifact(SPEC, 3, K=128, columns=40)


@pytest.fixture(scope="module")
def cand(msl):
    return air_candidate(SPEC, msl.schedule)


def test_module_header_and_versions(cand):
    text = cand.text
    assert f'target triple = "{TRIPLE}"' in text and TRIPLE == "air64_v28-apple-macosx26.0.0"
    assert f'target datalayout = "{DATALAYOUT}"' in text
    assert re.search(r'!\{i32 2, !"SDK Version", \[2 x i32\] \[i32 26, i32 0\]\}', text)
    for flag in ("air.max_device_buffers", "air.max_constant_buffers", "air.max_threadgroup_buffers"):
        assert re.search(rf'!\{{i32 7, !"{flag}", i32 31\}}', text), flag
    assert re.search(r"^!air.version = !\{!(\d+)\}", text, re.M)
    assert "!{i32 2, i32 8, i32 0}" in text and '!{!"Metal", i32 4, i32 0, i32 0}' in text
    assert '!{!"air.compile.fast_math_disable"}' in text
    assert '!{!"air.compile.fast_math_enable"}' in air_candidate(SPEC, cand.schedule, AirForm(fast_math="fast")).text


def test_kernel_signature_and_argument_metadata(cand, msl):
    # address spaces: device buffers 1, constant scalars 2; Metal's positions as tagged parameters
    sig = re.search(rf"^define void @{cand.entry}\((.*)\) #0 \{{$", cand.text, re.M).group(1)
    assert sig.count("addrspace(1)*") == sum(p.kind == "buffer" for p in msl.params)
    assert sig.count("i32 addrspace(2)*") == sum(p.kind == "scalar" for p in msl.params)
    kernel = Library.of_modules([cand.bitcode]).kernel(cand.entry)  # the executor's reader
    buffers = [p for p in kernel.params if p.kind == "buffer"]
    assert [(p.index, p.name) for p in buffers] == [(i, p.name) for i, p in enumerate(msl.params)]
    for p, want in zip(buffers, msl.params):
        assert p.address_space == (1 if want.kind == "buffer" else 2)
        assert p.access == ("read_write" if want.output else "read")
        assert p.elem == {"bf16": "bfloat", "u32": "uint", "i32": "int"}[want.dtype] if want.kind == "buffer" else "int"
    positions = {p.attribute for p in kernel.params if p.kind == "position"}
    assert positions == {
        "threadgroup_position_in_grid",
        "thread_index_in_simdgroup",
        "simdgroup_index_in_threadgroup",
        "thread_index_in_threadgroup",
    }
    assert kernel.max_threads == msl.schedule.threads


def test_llvm14_verifies_and_metallib_round_trip(cand):
    verify(cand.text, cand.entry)
    verify(cand.bitcode, cand.entry)
    raw = cand.metallib().to_bytes()
    back = Metallib.read(raw)
    assert back.names() == [cand.entry]
    assert cand.bitcode[:4] == bytes.fromhex("dec0170b")  # llvm-as wraps bitcode for an Apple triple
    assert back.functions[0].module_bitcode() == unwrap_bitcode(cand.bitcode)
    assert back.functions[0].version == (2, 8, 4, 0)
    assert Library.read(raw).kernel(cand.entry).name == cand.entry


def test_air_names_apple_intrinsics(cand):
    text = cand.text
    for name in ("air.fma.f32", "air.simd_shuffle_xor.f32", "air.convert.f.f32.u.i32"):
        assert f"declare float @{name}(" in text, name
    assert "fptrunc float" in text and "to bfloat" in text  # narrowing as Apple's AIR spells it
    assert "fpext bfloat" in text
    assert "fmuladd" not in text and " contract " not in text  # rounded after each operation
    assert "!llvm.loop" in text and '"llvm.loop.unroll.full"' in text  # MSL's #pragma unroll


def test_tiled_schedule_renders_threadgroup_memory_and_barriers():
    a = artifact(TILED_SPEC, 40, K=128, columns=40)
    assert a.schedule.kind == "tiled"
    c = air_candidate(TILED_SPEC, a.schedule)
    assert re.search(
        r"^@metile\.tg\.xs0 = internal addrspace\(3\) global \[\d+ x \[\d+ x float\]\] undef", c.text, re.M
    )
    assert "call void @air.wg.barrier(i32 2, i32 1)" in c.text
    verify(assemble(c.text, c.entry), c.entry)


def test_pipeline_air_target_is_the_same_kernel(msl):
    art = compile_projection(SPEC, msl.schedule, "air")
    assert art.target == "air" and art.entry == msl.entry and art.params == msl.params
    assert art.source == air_candidate(SPEC, msl.schedule).text


def test_forms_are_checked():
    for bad in (
        dict(fast_math="fastest"),
        dict(align="page"),
        dict(unpack="simd"),
        dict(convert="magic"),
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            AirForm(**bad)


def test_cuda_only_statements_are_refused():
    k = KernelDef("k", [KernelParam("y", "buffer", "f32", True)], [Mma("bf16", Var("c"), (), ())], [], 32)
    with pytest.raises(RenderError, match="Mma"):
        AIRRenderer().render(k)


# every weight format and epilogue the lowerings take, printed and verified by LLVM 14 (execution is
# test_air_candidates.py's, for a subset); int3 fields straddle words, nvfp4 has 16-wide groups
EVERY = {
    "mxfp8": P("bf16", (WeightFormat("u8", 8, 32, mode="mxfp8"),)),
    "nvfp4": P("bf16", (WeightFormat("u8", 4, 16, mode="nvfp4"),), k_multiple=64),
    "int2": P("bf16", (WeightFormat("bf16", 2, 64),)),
    "int3": P("bf16", (WeightFormat("bf16", 3, 32),)),
    "int6": P("f16", (WeightFormat("f16", 6, 128),)),
    "gelu": P("bf16", (WeightFormat("bf16", 4, 64),), "gelu"),
    "gelu_approx": P("f32", (WeightFormat("f32", 8, 64, True, "f32"),), "gelu_approx"),
}


@pytest.mark.parametrize(
    "name, rows", [(n, 2) for n in EVERY] + [("int3", 40), ("gelu", 40)], ids=[*EVERY, "int3_tiled", "gelu_tiled"]
)
def test_every_format_and_epilogue_verifies(name, rows):
    spec = EVERY[name]
    a = artifact(spec, rows, K=128, columns=40)
    for form in (AirForm(), AirForm(unpack="vector", fast_math="fast", load_metadata=True)):
        c = air_candidate(spec, a.schedule, form)
        assert c.bitcode[:4] == bytes.fromhex("dec0170b")  # llvm-as verified it
        assert c.entry == a.entry
