"""The CUDA launch path's Python plumbing, with MLX's precompiled-kernel op
replaced by a recorder (no GPU here): argument order, scalars, grid and block,
output shapes, the 32-row limit, and opt-in gradients. The kernels themselves
are checked on the H200 (tests/gpu)."""

from __future__ import annotations

import types

import mlx.core as mx
import numpy as np
import pytest

import mlx_metile as mt
from mlx_metile import dispatch
from mlx_metile.backends import cuda_launch
from mlx_metile.backends.cuda_device import build_target
from mlx_metile.schedule import NORM_FUSED_MAX_COLUMNS

from ..helpers import rand


def test_swiglu_launch_arguments(fake_cuda):
    k, n, rows = 256, 40, 3
    x = rand((rows, k), mx.bfloat16, 1)
    g = mt.QuantizedWeight(*mx.quantize(rand((n, k), mx.bfloat16, 2, 0.1), group_size=64, bits=4), 64, 4)
    u = mt.QuantizedWeight(*mx.quantize(rand((n, k), mx.bfloat16, 3, 0.1), group_size=64, bits=4), 64, 4)
    with mt.trace() as t:
        y = mt.fused_linear(x, [g, u], epilogue="swiglu")
    assert y.shape == (rows, n) and y.dtype == mx.bfloat16
    (kw,) = fake_cuda
    assert kw["compiled_source"].startswith(b"PTX:proj_bf16")
    shapes = [(rows, k), g.w.shape, g.scales.shape, g.biases.shape, u.w.shape, u.scales.shape, u.biases.shape]
    assert [tuple(a.shape) for a in kw["inputs"]] == [tuple(sh) for sh in shapes]
    assert kw["inputs"][1] is g.w and kw["inputs"][4] is u.w  # the weights as stored, no copy
    assert kw["scalars"] == [rows, k, n, n]  # M, K, N0, N1 in the kernel's order
    assert kw["output_shapes"] == [(rows, n)] and kw["output_dtypes"] == [mx.bfloat16]
    tx = kw["threadgroup"][0]
    assert kw["threadgroup"] == (tx, 1, 1) and tx % 32 == 0
    gx, gy, gz = kw["grid"]
    assert gx % tx == 0 and gy >= 1 and gz == 1 and (gx // tx) * 16 >= n  # whole blocks covering the columns
    assert kw["ensure_row_contiguous"] is True
    assert kw["shared_memory"] == 0  # default rings fit 48 KB of static shared memory
    assert [r.backend for r in t.records] == ["cuda"]


def test_rings_over_48_kb_are_launched_with_their_dynamic_shared_memory(fake_cuda, env):
    """MLX_METILE_CUDA_MMA_SMEM=96: SwiGLU's rings of two tiles (88 KB) are dynamic shared
    memory, and the launch asks MLX for exactly the bytes the kernel declares it uses."""
    env.set("MLX_METILE_CUDA_ARCH", "sm_90")
    env.set("MLX_METILE_CUDA_MMA_SMEM", "96")
    k, n = 4096, 8448
    x = rand((2, k), mx.bfloat16, 1)
    w = [
        mt.QuantizedWeight(*mx.quantize(rand((n, k), mx.bfloat16, s, 0.1), group_size=64, bits=4), 64, 4)
        for s in (2, 3)
    ]
    mt.fused_linear(x, w, epilogue="swiglu")
    (kw,) = fake_cuda
    # 4 warps x 2 stages x 64 ring rows x (128 weight bytes + 32 padding + 8 + 8 of scales and biases)
    assert kw["shared_memory"] == 4 * 2 * 64 * (128 + 32 + 16)
    assert kw["grid"][0] // kw["threadgroup"][0] == n // 32  # two 16-column tiles per block


def test_wide_deep_products_take_two_column_tiles_per_block(fake_cuda):
    """Products of narrow_columns(SMs) columns or more over K >= SHORT_K launch blocks of 32
    columns (2 tiles on the staged ring); narrower or shallower ones blocks of 16 - but single
    group-64 products over 2048 <= K < SHORT_K whose one-tile grids take 2-4 blocks per SM
    (ONE_TILE_WIDE), which take 2 tiles in every row bucket (schedule.cuda_layouts.bucket_layout)."""
    from mlx_metile.schedule.cuda_layouts import SHORT_K, narrow_columns

    NARROW_COLUMNS = narrow_columns(build_target().layout_sms)
    x = rand((2, SHORT_K), mx.bfloat16, 1)
    w = rand((NARROW_COLUMNS, SHORT_K), mx.bfloat16, 2, 0.1)
    q = mx.quantize(w, group_size=64, bits=4)
    q_short = mx.quantize(w[:, : SHORT_K // 2], group_size=64, bits=4)
    q_shorter = mx.quantize(w[:, :1536], group_size=64, bits=4)
    cases = (
        (x, q, NARROW_COLUMNS, 32),
        (x, tuple(a[:-16] for a in q), NARROW_COLUMNS - 16, 16),
        (x[:, : SHORT_K // 2], q_short, NARROW_COLUMNS, 32),  # bucket_layout
        (x[:, :1536], q_shorter, NARROW_COLUMNS, 16),
    )
    for xs, (wq, s, b), n, per_block in cases:
        mt.quantized_linear(xs, wq, s, b, group_size=64, bits=4)
        kw = fake_cuda[-1]
        assert kw["output_shapes"] == [(2, n)]
        assert kw["grid"][0] // kw["threadgroup"][0] == -(-n // per_block), (n, xs.shape)


def test_wide_quantized_products_over_a_k_of_2048_to_4096_take_two_tiles(fake_cuda):
    """schedule.cuda_layouts.QUANTIZED_SHORT_K: a single product of 4/8-bit weights over 2048 <= K < SHORT_K
    whose one-tile grid would exceed 5 blocks per SM launches blocks of 32 columns (TILES); its SwiGLU
    form, dense weights and K = 1536 keep blocks of 16."""
    n, k = 11008, 2048
    x = rand((2, k), mx.bfloat16, 1)
    w = rand((n, k), mx.bfloat16, 2, 0.1)
    q = mt.QuantizedWeight(*mx.quantize(w, group_size=64, bits=4), 64, 4)
    q_short = mt.QuantizedWeight(*mx.quantize(w[:, :1536], group_size=64, bits=4), 64, 4)
    cases = (
        (lambda: mt.fused_linear(x, [q]), 32),
        (lambda: mt.fused_linear(x, [q, q], epilogue="swiglu"), 16),
        (lambda: mt.linear(x, w), 16),
        (lambda: mt.fused_linear(x[:, :1536], [q_short]), 16),
    )
    for i, (call, per_block) in enumerate(cases):
        call()
        kw = fake_cuda[-1]
        assert kw["grid"][0] // kw["threadgroup"][0] == -(-n // per_block), i


def test_more_than_32_rows_run_stock_mlx(fake_cuda, env):
    x = rand((40, 64), mx.float32, 1)
    w = rand((8, 64), mx.float32, 2)
    with mt.trace() as t:
        y = mt.linear(x, w)
    assert not fake_cuda and [r.backend for r in t.records] == ["mlx"]
    np.testing.assert_allclose(np.array(y), np.array(x @ w.T), rtol=1e-6, atol=1e-6)
    env.set("MLX_METILE_CUDA_MAX_ROWS", "64")
    with mt.trace() as t:
        mt.linear(x, w)
    assert len(fake_cuda) == 1 and [r.backend for r in t.records] == ["cuda"]


def test_gradients_are_opt_in(fake_cuda, env):
    x = rand((2, 64), mx.float32, 1)
    w = rand((8, 64), mx.float32, 2)
    cot = rand((2, 8), mx.float32, 3)

    def loss(x):
        return (mt.linear(x, w) * cot).sum()

    env.set("MLX_METILE_CUDA_GRADIENTS", "1")
    got = mx.grad(loss)(x)
    np.testing.assert_allclose(np.array(got), np.array(cot @ w), rtol=1e-6, atol=1e-6)


def test_repeated_calls_reuse_their_plan_and_still_check_new_shapes(fake_cuda, env):
    """A call like an earlier one (same shapes, dtypes and settings) launches with that
    call's arguments and its own arrays, without re-checking; a new shape, dtype or
    setting takes the full path - which still rejects bad arguments."""
    k, n = 128, 24
    w = rand((n, k), mx.float16, 2, 0.1)
    bias = rand((n,), mx.float16, 3)
    xs = [rand((2, 3, k), mx.float16, s) for s in (4, 5)]
    outs = [mt.linear(x, w, bias) for x in xs]
    assert len(dispatch._PLANS) == 1 and len(fake_cuda) == 2
    first, second = fake_cuda
    assert {a: v for a, v in first.items() if a != "inputs"} == {a: v for a, v in second.items() if a != "inputs"}
    assert second["inputs"][1] is w and second["inputs"][2] is bias
    assert second["inputs"][0] is xs[1]  # x as given: no reshape node (the kernel reads rows of any shape)
    assert second["output_shapes"] == [(2, 3, n)] and all(y.shape == (2, 3, n) for y in outs)
    mt.linear(xs[0].astype(mx.float32), w, bias)  # new dtype: a second plan, x in f32 (MLX's promotion)
    assert len(dispatch._PLANS) == 2 and fake_cuda[-1]["output_dtypes"] == [mx.float32]
    with pytest.raises(ValueError, match="bias: expected shape"):
        mt.linear(xs[0], w, bias[:-1])
    with mt.trace() as t:  # traced calls take the full path, which records them
        mt.linear(xs[0], w, bias)
    assert [r.backend for r in t.records] == ["cuda"]
    env.set("MLX_METILE_CUDA_MAX_ROWS", "4")  # a settings change reaches planned shapes too
    calls = len(fake_cuda)
    mt.linear(xs[0], w, bias)
    assert len(fake_cuda) == calls  # 6 rows > 4: stock MLX
    dispatch.clear_kernel_caches()
    assert not dispatch._PLANS


def test_quantized_calls_reuse_their_plan_with_their_own_weights(fake_cuda):
    """Two quantized weights of one format and shape share a plan; each call launches
    with its own packed weights, scales and biases. A QuantizedWeight cannot be
    changed in place (a plan keyed by its shapes would then be wrong for it)."""
    k, n = 256, 32
    x = rand((1, k), mx.bfloat16, 1)
    qs = [mx.quantize(rand((n, k), mx.bfloat16, s, 0.1), group_size=64, bits=4) for s in (2, 3)]
    for q in qs:
        mt.quantized_linear(x, *q, group_size=64, bits=4)
    assert len(dispatch._PLANS) == 1
    for kw, q in zip(fake_cuda, qs):
        assert all(a is b for a, b in zip(kw["inputs"][1:], q))
    qw = mt.QuantizedWeight(*qs[0], 64, 4)
    with pytest.raises(AttributeError, match="immutable"):
        qw.w = qs[1][0]


@pytest.mark.skipif(not hasattr(cuda_launch._ext, "CudaLaunch"), reason="the C++ extension is not built")
def test_plans_launch_from_cpp_with_the_python_launch_arguments(fake_cuda, monkeypatch):
    """Where MLX's op is its own, a plan launches through _ext.CudaLaunch, made from the
    arguments the Python launch passes; here (MLX without the CUDA backend) the C++ launch
    reaches MLX's op, which raises as MLX's Python op does."""
    made = []
    real = cuda_launch._ext.CudaLaunch
    monkeypatch.setattr(
        cuda_launch, "_ext", types.SimpleNamespace(CudaLaunch=lambda *a, **kw: made.append(real(*a, **kw)) or made[-1])
    )
    monkeypatch.setattr(cuda_launch, "native_launch", lambda: True)
    k, n = 64, 24
    x, w, res = rand((2, 3, k), mx.float16, 1), rand((n, k), mx.float16, 2), rand((2, 3, n), mx.float32, 3)
    with pytest.raises(RuntimeError, match="No CUDA back-end"):
        mt.fused_linear(x, [w], residual=res)
    assert not fake_cuda  # (the recorder stands in for MLX's Python op only)
    monkeypatch.setattr(cuda_launch, "native_launch", lambda: False)
    mt.fused_linear(x, [w], residual=res)
    (launch,), (kw,) = made, fake_cuda
    assert (launch.name, launch.binary, launch.scalars) == (kw["name"], kw["compiled_source"], kw["scalars"])
    assert (tuple(launch.grid), tuple(launch.threadgroup)) == (kw["grid"], kw["threadgroup"])
    assert launch.shared_memory == kw["shared_memory"] and launch.out_columns == [n]
    assert launch.out_dtype == mx.float16 and kw["output_dtypes"] == [mx.float16]
    assert launch.x_cast is None and launch.residual_cast == mx.float16  # the residual cast to the output dtype
    assert kw["inputs"][-1].dtype == mx.float16


def test_rms_norm_is_the_kernels_second_input_where_it_fuses(fake_cuda):
    """fused_linear(norm=(g, eps)) on CUDA: one launch, its kernel named for the norm, x then g
    then the weights' arrays as inputs; with a float32 norm weight (stock would promote x), over
    more than 32 rows, or f16 activations the norm is mx.fast.rms_norm before a plain kernel."""
    x = rand((2, 256), mx.bfloat16, 1)
    w = rand((64, 256), mx.bfloat16, 2, 0.1)
    q = mt.QuantizedWeight(*mx.quantize(w, group_size=64, bits=4), 64, 4)
    g = rand((256,), mx.bfloat16, 3)
    mx.eval(mt.fused_linear(x, [q], norm=(g, 1e-6)))
    kw = fake_cuda[-1]
    assert "_rms" in kw["name"] and len(fake_cuda) == 1
    assert kw["inputs"][1] is g and kw["inputs"][2] is q.w
    for call in (
        lambda: mt.fused_linear(x, [q], norm=(g.astype(mx.float32), 1e-6)),
        lambda: mt.fused_linear(x.astype(mx.float16), [w.astype(mx.float16)], norm=(g.astype(mx.float16), 1e-6)),
    ):
        mx.eval(call())
        assert "_rms" not in fake_cuda[-1]["name"]
    launches = len(fake_cuda)
    mx.eval(mt.fused_linear(rand((40, 256), mx.bfloat16, 4), [q], norm=(g, 1e-6)))  # stock MLX past 32 rows
    assert len(fake_cuda) == launches


def test_rms_norm_fuses_only_where_it_measured_faster(fake_cuda):
    """schedule.norm_pays: the norm goes into q/k/v-like kernels of at most NORM_FUSED_MAX_COLUMNS
    outputs, at every row count the kernels take (rows stay invariant); before SwiGLU or over
    more columns it is mx.fast.rms_norm before a plain kernel (the H200 measurements in
    mlx_metile/schedule/choice.py)."""
    K = 256
    q = [mt.QuantizedWeight(*mx.quantize(rand((n, K), mx.bfloat16, i, 0.1), group_size=64, bits=4), 64, 4)
         for i, n in enumerate((64, 64, NORM_FUSED_MAX_COLUMNS - 128))]  # fmt: skip
    g = rand((K,), mx.bfloat16, 5)
    wide = mt.QuantizedWeight(*mx.quantize(rand((NORM_FUSED_MAX_COLUMNS + 64, K), mx.bfloat16, 6), 64, 4), 64, 4)
    x = {rows: rand((rows, K), mx.bfloat16, 7) for rows in (1, 16, 32)}
    fused = [
        lambda: mt.fused_linear(x[16], q[:2], norm=(g, 1e-5)),
        lambda: mt.fused_linear(x[32], q[:2], norm=(g, 1e-5)),
        lambda: mt.fused_linear(x[1], q, norm=(g, 1e-5)),  # NORM_FUSED_MAX_COLUMNS in all
    ]
    apart = [
        lambda: mt.fused_linear(x[16], q[:2], epilogue="swiglu", norm=(g, 1e-5)),
        lambda: mt.fused_linear(x[1], [wide], norm=(g, 1e-5)),
    ]
    for calls, with_norm in ((fused, True), (apart, False)):
        for call in calls:
            mx.eval(call())
            assert ("_rms" in fake_cuda[-1]["name"]) is with_norm, fake_cuda[-1]["name"]


@pytest.mark.skipif(not hasattr(cuda_launch._ext, "CudaLaunch"), reason="the C++ extension is not built")
def test_the_own_primitive_is_asked_for_only_where_the_build_has_it(monkeypatch, env):
    """A build without the CUDA primitive (here: MLX's CPU build) refuses primitive=True, naming
    the argument; the op asks for it only where the build has it and MLX_METILE_CUDA_PRIMITIVE
    is not "0", and hands the primitive's pool MLX_METILE_CUDA_POOL_MB."""
    ext = cuda_launch._ext
    args = ("k", b"\x00" * 16, [8], mx.float16, [1, 2], (8, 1, 1), (8, 1, 1), 0, None, None)
    assert ext.CudaLaunch(*args).primitive is False
    if ext.HAS_CUDA_PRIMITIVE:
        assert ext.CudaLaunch(*args, primitive=True).primitive is True
    else:
        with pytest.raises(ValueError, match="primitive"):
            ext.CudaLaunch(*args, primitive=True)
    env.set("MLX_METILE_CUDA_PRIMITIVE", "0")
    assert cuda_launch.own_primitive() is False
    assert cuda_launch.launch_kind() == "native"
    env.set("MLX_METILE_CUDA_PRIMITIVE", "1")
    assert cuda_launch.own_primitive() is ext.HAS_CUDA_PRIMITIVE
    assert cuda_launch.launch_kind() == ("primitive" if ext.HAS_CUDA_PRIMITIVE else "native")
    env.set("MLX_METILE_CUDA_NATIVE_LAUNCH", "0")
    assert cuda_launch.launch_kind() == "python"
    limits = []  # (a CUDA build's extension: it has the primitive and its pool)
    fake = types.SimpleNamespace(HAS_CUDA_PRIMITIVE=True, cuda_set_output_pool_limit=limits.append)
    monkeypatch.setattr(cuda_launch, "_ext", fake)
    env.set("MLX_METILE_CUDA_POOL_MB", "256")
    assert cuda_launch.own_primitive() is True and limits == [256]
    with pytest.raises(ValueError, match="MLX_METILE_CUDA_POOL_MB"):  # refused when the settings are read
        env.set("MLX_METILE_CUDA_POOL_MB", "lots")
