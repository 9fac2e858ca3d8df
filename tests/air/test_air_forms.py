"""The AIR forms of one kernel (f16 SwiGLU over int4 weights, simd_splitk), each compared with the
MSL's spelling in the IR (the plain AIR form prints what the MSL says, operation for operation) and
in the results on the CPU: fast-math flags (contract; fast), the alignment vector loads claim,
range and invariance metadata on loads, and the vector unpack / convert forms of int4 fields.

Every form is bit-identical to the emulated MSL here. That is a fact of this executor, not of a
GPU: x86-64 without FMA cannot contract a multiply and an add, and LLVM's O2 finds nothing in
these kernels to reassociate (the K sums are fma chains and SIMD-group shuffles); on an Apple GPU
`contract` lets the compiler fuse `q * s + b` and the epilogue, which changes bits. The other
forms compute the same values by construction (exact integer ops, conversions exact below 2**23)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from mlx_metile.air.candidate import air_candidate
from mlx_metile.air.llvm14 import optimize, verify, x86_assembly
from mlx_metile.codegen.air import AirForm
from mlx_metile.formats import WeightFormat as W
from mlx_metile.spec import ProjectionSpec as P

from ..conftest import requires_emulator
from ..helpers import artifact
from .projections import dispatch, emulated, problem

SPEC = P("f16", (W("f16", 4, 32), W("f16", 4, 32)), "swiglu")
K, N, ROWS = 128, 40, 1
FORMS = {
    "contract": AirForm(fast_math="contract"),
    "fast": AirForm(fast_math="fast"),
    "align_element": AirForm(align="element"),
    "load_metadata": AirForm(load_metadata=True),
    "vector_unpack": AirForm(unpack="vector"),
    "vector_unpack_uitofp": AirForm(unpack="vector", convert="llvm"),
    "vector_unpack_bits": AirForm(unpack="vector", convert="bits"),
}
FLAGS = r"\b(?:fast|contract|reassoc|nnan|ninf|nsz|arcp|afn) "


@pytest.fixture(scope="module")
def msl():
    return artifact(SPEC, ROWS, K=K, columns=N)


@pytest.fixture(scope="module")
def base(msl):
    return air_candidate(SPEC, msl.schedule)


def code(text: str) -> str:
    """The functions of a module (kernel and helpers), without its header and metadata."""
    return text[text.index("define void") : text.index("!llvm.module.flags")]


def count(pattern: str, text: str) -> int:
    return len(re.findall(pattern, text, re.M))


def test_fast_math_forms_only_add_flags(msl, base):
    plain = code(base.text)
    assert not re.search(FLAGS, plain)
    for name, flag in (("contract", "contract"), ("fast", "fast")):
        text = code(air_candidate(SPEC, msl.schedule, FORMS[name]).text)
        assert re.sub(FLAGS, "", text) == plain, name
        floats = count(r"= (?:fadd|fsub|fmul|fdiv|fneg) ", plain)
        assert floats > 0 and count(rf"= (?:fadd|fsub|fmul|fdiv|fneg) {flag} ", text) == floats, name


def test_contract_lets_an_fma_backend_fuse(msl, base):
    """The CPU executor has no FMA; compiled for one that has, `contract` fuses the dequantisation's
    and the epilogue's multiply-adds (explicit fma calls aside), which the MSL's rounding forbids."""
    fused = {}
    for name, c in (("precise", base), ("contract", air_candidate(SPEC, msl.schedule, FORMS["contract"]))):
        fused[name] = count(r"\bvfn?m(?:add|sub)\w*ss\b", x86_assembly(c.bitcode, what=name))
    assert fused["precise"] == 0
    # most of the q * s + b a lane computes per word loop (NC columns x U values x 2 weights) fuse
    assert fused["contract"] >= msl.schedule.NC * msl.schedule.U, fused


def test_alignment_form_changes_only_the_vector_loads(msl, base):
    text = code(air_candidate(SPEC, msl.schedule, FORMS["align_element"]).text)
    plain = code(base.text)
    wide = r"(load <4 x i32>, <4 x i32> addrspace\(1\)\* %q), align (\d+)"
    assert {a for _, a in re.findall(wide, plain)} == {"16"}
    assert {a for _, a in re.findall(wide, text)} == {"2", "4"}  # f16 x, u32 weights: their elements'
    assert re.sub(wide, r"\1", text) == re.sub(wide, r"\1", plain)


def test_load_metadata_form_lets_llvm_drop_the_signed_division(msl, base):
    form = air_candidate(SPEC, msl.schedule, FORMS["load_metadata"])
    scalars = sum(p.kind == "scalar" for p in base.params)
    pattern = r"load i32, i32 addrspace\(2\)\* %\w+\.ref, align 4, !range !\d+, !invariant.load !\d+$"
    assert count(pattern, form.text) == scalars
    assert re.search(r"^!\d+ = !\{i32 0, i32 -2147483648\}$", form.text, re.M)
    assert count(r"!invariant.load", code(base.text)) == 0
    plain_o2, form_o2 = optimize(base.bitcode), optimize(form.bitcode)
    assert count(r"= sdiv i32 ", plain_o2) == 1  # K / 32: K might be negative
    assert count(r"= sdiv i32 ", form_o2) == 0  # K in [0, 2**31): a shift


def test_vector_unpack_forms(msl, base):
    plain = code(base.text)
    scalar_fields = count(r"call float @air\.convert\.f\.f32\.u\.i32\(", plain)
    assert scalar_fields > 0 and count(r"= lshr i32 ", plain) == scalar_fields
    expect = {
        "vector_unpack": r"call <4 x float> @air\.convert\.f\.v4f32\.u\.v4i32\(",
        "vector_unpack_uitofp": r"= uitofp <4 x i32> ",
        "vector_unpack_bits": r"= fsub <4 x float> ",
    }
    for name, pattern in expect.items():
        c = air_candidate(SPEC, msl.schedule, FORMS[name])
        text = code(c.text)
        # every 4-bit field of a word: 8 per word, as two 4-lane shifts, masks and conversions
        assert count(r"call float @air\.convert\.f\.f32\.u\.i32\(", text) == 0, name
        assert count(r"= lshr i32 ", text) == 0, name
        assert count(r"= lshr <4 x i32> %\S+, <i32 0, i32 4, i32 8, i32 12>", text) == scalar_fields // 8, name
        assert count(r"= lshr <4 x i32> %\S+, <i32 16, i32 20, i32 24, i32 28>", text) == scalar_fields // 8, name
        assert count(pattern, text) == scalar_fields // 4, name
        verify(c.bitcode, name)


def test_int8_fields_unpack_as_one_vector_per_word(msl):
    spec = P("bf16", (W("bf16", 8, 32),))
    a = artifact(spec, 4, K=K, columns=N)
    plain = code(air_candidate(spec, a.schedule).text)
    text = code(air_candidate(spec, a.schedule, FORMS["vector_unpack"]).text)
    fields = count(r"call float @air\.convert\.f\.f32\.u\.i32\(", plain)
    assert fields > 0
    assert count(r"= lshr <4 x i32> %\S+, <i32 0, i32 8, i32 16, i32 24>", text) == fields // 4
    assert count(r"= and <4 x i32> %\S+, <i32 255, i32 255, i32 255, i32 255>", text) == fields // 4


@requires_emulator
@pytest.mark.parametrize("name", list(FORMS))
def test_form_results_are_the_msl_bits(msl, name):
    pr = problem(SPEC, ROWS, K, N, seed=7)
    want = emulated(msl, pr)
    c = air_candidate(SPEC, msl.schedule, FORMS[name])
    got = dispatch(c.function, c, pr)
    assert np.abs(want[0].astype(np.float64)).max() > 0
    assert np.array_equal(got[0], want[0]), f"{name}: differs from the MSL at {np.argwhere(got[0] != want[0])[:4]}"
