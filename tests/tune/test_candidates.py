"""Candidates as values: what each backend admits, CUDA's schedule variants (each lowers, and each
keeps the rules' sum order), the compilers, and a new kind as one registration."""

from dataclasses import replace

import mlx.core as mx
import pytest

from mlx_metile import dispatch
from mlx_metile.air.candidate import FORMS
from mlx_metile.call import check
from mlx_metile.pipeline import compile_projection
from mlx_metile.schedule import Shape, choose
from mlx_metile.targets import cuda_target
from mlx_metile.tune import candidates as C
from mlx_metile.tune.site import Site

from . import planted
from .conftest import K, quantized


def cpu_site(weights, epilogue=None):
    return Site.of(mx.zeros((1, K), mx.bfloat16), weights, None, epilogue)


def cuda_site(weights, epilogue=None, k=K):
    """The site as the dispatch on an H200 (sm_90) would see it (nothing is run)."""
    call = check("fused_linear", mx.zeros((1, k), mx.bfloat16), weights, [None] * len(weights), epilogue, None)
    target = cuda_target("sm_90")
    site = Site.of_call(call)
    return replace(site, backend="cuda", target=target, spec=dispatch.spec_of(call, target, None),
                   shape=Shape(call.K, call.columns))  # fmt: skip


def test_on_the_cpu_native_and_the_cpp_path(weight):
    cs = C.candidates(cpu_site([weight]), 4)
    assert [(c.name, c.family) for c in cs] == [("native", "native"), ("cpu", "cpu")]
    assert cs[0].route.native and cs[1].route.backend == "cpu" and cs[1].route.schedule is None


def test_under_the_emulator_its_msl_nax_and_the_air_forms(weight, env):
    env.set("MLX_METILE_EMULATE", "1")
    names = [c.name for c in C.candidates(cpu_site([weight]), 4)]
    assert names[:4] == ["native", "emulator", "nax_direct", "nax_staged"]  # (the emulator's target has NAX)
    assert names[4:] == list(FORMS)  # (an int4 kernel: every AIR form differs)


def test_extras_follow_the_backend_s_candidates(weight):
    cs = C.candidates(cpu_site([weight]), 1, [("mine", planted.right)])
    assert [c.name for c in cs] == ["native", "cpu", "mine"] and cs[2].route is None and cs[2].family == "extra"
    assert cs[2].identity.startswith("extra ")


SUM_ORDER = ("VK", "splits", "wide", "q8split", "sector", "interleave", "layout", "xshare", "SG")


@pytest.mark.parametrize("bucket", [1, 8, 32])
@pytest.mark.parametrize("shape", ["q4g64 4096x4096", "q8g64 swiglu 4096x1024", "q4g128 14336"])
def test_cuda_schedule_variants_lower_and_keep_the_sum_order(shape, bucket):
    if shape == "q4g64 4096x4096":
        site = cuda_site([quantized(4096, 4096, 1)], k=4096)
    elif shape == "q8g64 swiglu 4096x1024":
        site = cuda_site([quantized(1024, 4096, 2, bits=8), quantized(1024, 4096, 3, bits=8)], "swiglu", k=4096)
    else:
        site = cuda_site([quantized(4096, 14336, 4, group=128)], k=14336)
    found = C.cuda_schedules(site, bucket)
    names = [n for n, _ in found]
    assert names[0] == "cuda" and len(set(names)) == len(names) and len(found) >= 3
    base = found[0][1]
    assert base == choose(site.spec, bucket, site.target, site.shape)
    assert len({s for _, s in found}) == len(found)  # distinct schedules only
    for name, schedule in found:
        for f in SUM_ORDER:
            assert getattr(schedule, f) == getattr(base, f), (name, f)
        artifact = compile_projection(site.spec, schedule, "cuda")  # every candidate lowers and renders
        assert artifact.schedule == schedule and "__global__" in artifact.source
    routes = [c for c in C.candidates(site, bucket) if c.family == "cuda_schedule"]
    assert [c.name for c in routes] == names and routes[0].route.schedule is None
    assert all(c.route.schedule == s for c, (_, s) in zip(routes[1:], found[1:]))


@pytest.mark.parametrize("bits", [3, 4])
def test_the_direct_loads_are_a_cuda_variant_in_the_rings_sum_order_for_2_3_5_6_bits(bits):
    """The rules stage 3 and 4-bit sites alike; their direct loads (staged=0) are a variant, for 3
    bits in the ring's sum order (its stages are the direct loads' K ranges)."""
    site = cuda_site([quantized(4096, 4096, 1, bits=bits)], k=4096)
    found = dict(C.cuda_schedules(site, 1))
    ring, base = found["cuda"], found["cuda:staged=0"]
    assert ring.staged and not base.staged
    if bits == 3:
        assert all(getattr(ring, f) == getattr(base, f) for f in SUM_ORDER)
    assert "__global__" in compile_projection(site.spec, ring, "cuda").source


def test_cuda_candidates_stop_where_stock_takes_the_rows():
    site = cuda_site([quantized(256, 256, 5)], k=256)
    assert [c.name for c in C.candidates(site, 64)] == ["native"]


def test_the_other_cuda_compiler_is_a_candidate_where_both_are_found():
    from mlx_metile.backends.cuda_compile import compiler, find_nvcc
    from mlx_metile.backends.nvrtc import find_nvrtc

    site = cuda_site([quantized(256, 256, 6)], k=256)
    names = [c.name for c in C.candidates(site, 4) if c.family == "cuda_compiler"]
    if find_nvcc() is None or find_nvrtc() is None:
        assert names == []
    else:
        other = "nvrtc" if compiler()[0] == "nvcc" else "nvcc"
        assert names == [f"cuda+{other}"]
        assert compiler("nvrtc")[0] == "nvrtc" and compiler("nvcc")[0] == "nvcc"


def test_a_new_kind_is_one_registration(weight, monkeypatch):
    monkeypatch.setitem(C.KINDS, "probe", None)  # (removed again after the test)

    @C.register("probe", 0.1)
    def admit(site, bucket):
        return [] if bucket < 4 else [C.Candidate("probe", "probe", C.Route("cpu", "probe"), identity="p")]

    assert [c.name for c in C.candidates(cpu_site([weight]), 1)] == ["native", "cpu"]
    assert [c.name for c in C.candidates(cpu_site([weight]), 4)] == ["native", "cpu", "probe"]
    assert C.margin_of("probe") == 0.1
    with pytest.raises(ValueError, match="margin: expected a fraction"):
        C.register("bad", 1.5)


def test_the_incumbent_is_what_the_rules_run(weight, env):
    """One candidate per tournament runs what the dispatch runs with nothing decided: the C++ path,
    the emulator's MSL, CUDA's rules' schedule (not its variants, not the other compiler)."""
    incumbents = [c.name for c in C.candidates(cpu_site([weight]), 4) if c.incumbent]
    assert incumbents == ["cpu"]
    site = cuda_site([quantized(256, 256, 7)], k=256)
    cs = C.candidates(site, 4)
    assert [c.name for c in cs if c.incumbent] == ["cuda"] and C.incumbent_of(cs).route.schedule is None
    assert len([c for c in cs if c.family == "cuda_schedule"]) > 1
    assert C.incumbent_of(C.candidates(site, 64)) is None  # (stock takes the rows: no kernel candidate)
    env.set("MLX_METILE_EMULATE", "1")
    assert [c.name for c in C.candidates(cpu_site([weight]), 4) if c.incumbent] == ["emulator"]


def test_a_second_incumbent_is_refused(weight, monkeypatch):
    monkeypatch.setitem(C.KINDS, "probe", None)

    @C.register("probe", 0.1)
    def admit(site, bucket):
        return [C.Candidate("probe", "probe", C.Route("cpu", "probe"), identity="p", incumbent=True)]

    with pytest.raises(ValueError, match=r"\['cpu', 'probe'\] are each marked the incumbent"):
        C.candidates(cpu_site([weight]), 4)
