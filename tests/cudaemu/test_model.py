"""A tiny mlx-lm model patched by mlx_metile on the CUDA path, end to end on the CPU: the op's
launch through MLX's precompiled-kernel op is replaced by the generated CUDA kernels run on the
CPU (host.py) with the arguments, scalars and grid the op passes - so the
plumbing and the kernels are checked together, against the unpatched model."""

from __future__ import annotations

import importlib

import mlx.core as mx
import numpy as np
import pytest

import mlx_metile as mt
from mlx_metile import dispatch
from mlx_metile.backends import cuda_compile
from mlx_metile.backends.cuda_launch import NormFirstPlan
from mlx_metile.formats import dequantize_exact
from mlx_metile.integrations import mlx_lm as integration

from ..helpers import bits
from ..integrations.models import make
from . import host


@pytest.fixture
def cuda_on_cpu(monkeypatch):
    """ops on the CUDA path, each launch run by the CPU emulator; yields the launches."""
    artifacts, launches = {}, []

    def binary(artifact, arch=None):
        artifacts[artifact.key] = artifact
        return artifact.key.encode()

    def precompiled_cuda_kernel(**kw):
        artifact = artifacts[kw["compiled_source"].decode()]
        assert kw["name"] == artifact.entry
        inputs = [mx.contiguous(a) for a in kw["inputs"]]
        mx.eval(inputs)
        buffers = [bits(a) for a in inputs]
        outs = [bits(mx.zeros(shape, dtype)) for shape, dtype in zip(kw["output_shapes"], kw["output_dtypes"])]
        names = [p.name for p in artifact.params if p.kind == "scalar"]
        (gx, gy, _), (tx, ty, _) = kw["grid"], kw["threadgroup"]
        assert kw["threadgroup"] == artifact.threads_per_group and gx % tx == 0 and gy % ty == 0
        host.launch(artifact, buffers + outs, dict(zip(names, kw["scalars"])), (gx // tx, gy // ty))
        launches.append(artifact.entry)
        return [mx.array(o).view(d) for o, d in zip(outs, kw["output_dtypes"])]

    monkeypatch.setattr(dispatch, "backend_of", lambda stream: "cuda")
    monkeypatch.setattr(cuda_compile, "ptx", binary)
    monkeypatch.setattr(mx.fast, "precompiled_cuda_kernel", precompiled_cuda_kernel)
    dispatch.clear_kernel_caches()  # (no plan of another test's fake launches)
    yield launches
    dispatch.clear_kernel_caches()


@pytest.mark.parametrize(
    "arch,fmt,fuse_norms", [("llama", "q4g64-bf16", True), ("llama", "bfloat16", False), ("qwen2", "q4g64-bf16", False)]
)
def test_patched_model_on_the_cuda_path_matches_the_unpatched_one(cuda_on_cpu, arch, fmt, fuse_norms):
    model, reference = make(arch, fmt), make(arch, fmt)
    report = mt.patch(model, fuse_norms=fuse_norms)  # its verification probes run the CUDA kernels (on the CPU)
    kinds = {k for _, k in report.replaced}
    assert {"qkv", "mlp_swiglu", "residual"} <= kinds, str(report)
    assert report.max_diff <= report.allowed
    assert cuda_on_cpu and all(e.startswith("proj_") for e in cuda_on_cpu), cuda_on_cpu
    # fuse_norms: the input RMSNorm went into the fused q/k/v kernels (bf16 activations and norm
    # weights); the post-attention one stays its own op before gate/up (schedule.norm_pays). Without it
    # (patch's default) no kernel takes a norm.
    assert any("_swiglu" not in e and "_rms" in e for e in cuda_on_cpu) == fuse_norms, cuda_on_cpu
    assert not any("_swiglu" in e and "_rms" in e for e in cuda_on_cpu), cuda_on_cpu
    got, want = integration.synthetic_logits(model), integration.synthetic_logits(reference)
    scale = float(mx.abs(want).max())
    err = float(mx.abs(got.astype(mx.float32) - want.astype(mx.float32)).max())
    assert err <= 2 * report.allowed * scale, f"{arch}/{fmt}: logits differ by {err:.3g} (scale {scale:.3g})"


def test_leading_dimensions_and_strided_inputs_reach_the_kernel_as_rows(cuda_on_cpu):
    """x and the residual go to the kernel with their leading dimensions (no reshape node),
    a transposed x and residual included (MLX makes launch inputs row-contiguous); the
    results match a float64 product of the dequantized weights within one bf16 step of the
    largest output (the kernel accumulates in f32 and rounds once)."""
    k, n = 128, 64
    w = mx.quantize(mx.random.normal((n, k), key=mx.random.key(1)).astype(mx.bfloat16) * 0.1, group_size=64, bits=4)
    x = mx.random.normal((3, 2, k), key=mx.random.key(2)).astype(mx.bfloat16).transpose(1, 0, 2)
    res = mx.random.normal((3, 2, n), key=mx.random.key(3)).astype(mx.bfloat16).transpose(1, 0, 2)
    want = np.array(x.astype(mx.float32), np.float64) @ dequantize_exact(*w, 64, 4).T
    want += np.array(res.astype(mx.float32))
    proj = mt.Projection([mt.QuantizedWeight(*w, 64, 4)])
    for _ in range(2):  # the checked call, then the planned one
        y = proj(x, res)
        assert y.shape == (2, 3, n)
        err = np.abs(np.array(y.astype(mx.float32)) - want).max()
        assert err <= np.abs(want).max() * 2**-7, err
    assert len(cuda_on_cpu) == 2


def _gate_up_with_norm() -> tuple[list, mx.array, mx.array]:
    """4-bit gate/up weights (K = 512, 64 columns each), a bf16 norm weight and a 3-row bf16 x."""
    k, n = 512, 64
    gate, up = (
        mx.quantize(mx.random.normal((n, k), key=mx.random.key(i)).astype(mx.bfloat16) * 0.05, group_size=64, bits=4)
        for i in (1, 2)
    )
    weights = [mt.QuantizedWeight(*gate, 64, 4), mt.QuantizedWeight(*up, 64, 4)]
    g = (mx.random.normal((k,), key=mx.random.key(3)) * 0.2 + 1).astype(mx.bfloat16)
    return weights, g, mx.random.normal((3, k), key=mx.random.key(4)).astype(mx.bfloat16) * 3


def test_rms_norm_goes_into_the_projection_kernel_on_the_cuda_path(cuda_on_cpu, monkeypatch):
    """fused_linear(norm=(g, eps)) on the CUDA path: one launch of a kernel with the norm (no
    rms_norm op before it), within one bf16 step of the largest output of
    fused_linear(mx.fast.rms_norm(x, g, eps)) (the kernel rounds x * g once, stock rounds
    x / rms and then its product with g); its planned repeats and a Projection give the same bits.
    SwiGLU here only through the kernel (schedule.norm_pays composes it in use)."""
    rules = importlib.import_module("mlx_metile.schedule.choice")
    monkeypatch.setattr(rules, "norm_pays", lambda epilogue, columns: True)
    weights, g, x = _gate_up_with_norm()
    fused = mt.fused_linear(x, weights, epilogue="swiglu", norm=(g, 1e-5))
    assert len(cuda_on_cpu) == 1 and "_rms" in cuda_on_cpu[-1]
    want = mt.fused_linear(mx.fast.rms_norm(x, g, 1e-5), weights, epilogue="swiglu")
    scale = float(mx.abs(want).max())
    assert float(mx.abs(fused.astype(mx.float32) - want.astype(mx.float32)).max()) <= 2**-7 * scale
    again = mt.fused_linear(x, weights, epilogue="swiglu", norm=(g, 1e-5))  # a planned call
    bound = mt.Projection(weights, epilogue="swiglu", norm=(g, 1e-5))
    assert np.array_equal(bits(again), bits(fused)) and np.array_equal(bits(bound(x)), bits(fused))
    assert np.array_equal(bits(bound(x)), bits(fused))  # the Projection's own plan


def test_a_norm_that_ops_composes_is_planned_too(cuda_on_cpu):
    """Before SwiGLU (schedule.norm_pays) the norm is mx.fast.rms_norm, then the plain kernel; a
    repeat of the call, and a Projection's, go through a plan of that (cuda_launch.NormFirstPlan:
    no checking path per call) and give the bits of the composition written out."""
    weights, g, x = _gate_up_with_norm()
    want = bits(mt.fused_linear(mx.fast.rms_norm(x, g, 1e-5), weights, epilogue="swiglu"))
    first = mt.fused_linear(x, weights, epilogue="swiglu", norm=(g, 1e-5))
    plan = dispatch.planned("fused_linear", x, weights, [None, None], "swiglu", None, (g, 1e-5))
    assert isinstance(plan, NormFirstPlan), plan
    again = mt.fused_linear(x, weights, epilogue="swiglu", norm=(g, 1e-5))
    bound = mt.Projection(weights, epilogue="swiglu", norm=(g, 1e-5))
    outs = [bound(x), bound(x)]  # (checked, then its own plan)
    assert any(isinstance(p, NormFirstPlan) for p in bound._plans.values())
    assert not any("_rms" in e for e in cuda_on_cpu), cuda_on_cpu
    for y in (first, again, *outs):
        assert np.array_equal(bits(y), want)
