"""The extension's own CUDA launch primitive (src/cuda/cuda_kernel.h) on the GPU machine: the
same kernels give the same bits through it as through MLX's precompiled-kernel op
(MLX_METILE_CUDA_PRIMITIVE=0), for strided inputs too, inside mx.compile, with outputs read on
the CPU, and its output pool reuses and (past its limit) frees buffers without changing a
result. Skipped, and saying so, where there is no CUDA GPU or the extension was built without
the primitive (no CUDA toolkit at build time)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import mlx.core as mx
import numpy as np
import pytest

import mlx_metile as mt
from mlx_metile import dispatch
from mlx_metile.backends.extension import _ext
from tests.helpers import rand

pytestmark = [
    pytest.mark.skipif(not mx.cuda.is_available(), reason="needs MLX's CUDA backend and an NVIDIA GPU"),
    pytest.mark.skipif(
        not getattr(_ext, "HAS_CUDA_PRIMITIVE", False),
        reason="the extension was built without the CUDA primitive (no CUDA toolkit at build time)",
    ),
]

K, N = 512, 384


def _quantized(seed: int, bits: int, group: int) -> mt.QuantizedWeight:
    w = rand((N, K), mx.bfloat16, seed, 0.05)
    return mt.QuantizedWeight(*mx.quantize(w, group_size=group, bits=bits), group, bits)


def _calls():
    """(name, function of x) for a single product, SwiGLU, q/k/v and a residual add."""
    q4, q8, up = _quantized(2, 4, 64), _quantized(3, 8, 32), _quantized(4, 4, 64)
    dense = rand((N, K), mx.bfloat16, 5, 0.05)
    res = rand((1, N), mx.bfloat16, 6)
    return [
        ("int4", lambda x: [mt.quantized_linear(x, q4.w, q4.scales, q4.biases, group_size=64, bits=4)]),
        ("int8", lambda x: [mt.quantized_linear(x, q8.w, q8.scales, q8.biases, group_size=32, bits=8)]),
        ("bf16", lambda x: [mt.linear(x, dense)]),
        ("swiglu", lambda x: [mt.fused_linear(x, [q4, up], epilogue="swiglu")]),
        ("qkv", lambda x: mt.fused_linear(x, [q4, q8, up])),
        ("residual", lambda x: [mt.fused_linear(x, [dense], residual=mx.broadcast_to(res, (x.shape[0], N)))]),
    ]


def _run(fn, x, primitive: bool, env) -> list[np.ndarray]:
    env.set("MLX_METILE_CUDA_PRIMITIVE", "1" if primitive else "0")
    dispatch.clear_kernel_caches()  # so that the plans looked at below are this setting's only
    with mt.trace() as t:
        mx.eval(fn(x))
    assert {r.backend for r in t.records} == {"cuda"}
    outs = fn(x)  # (untraced: the call keeps its plan)
    mx.eval(outs)
    launches = [p.native for p in dispatch._PLANS.values() if getattr(p, "native", None) is not None]
    assert launches and all(launch.primitive == primitive for launch in launches)
    return [np.array(o.astype(mx.float32)) for o in outs]


def _host_copy(x: mx.array) -> mx.array:
    """A row-contiguous copy made through numpy (bf16 values are exact in float32)."""
    return mx.array(np.array(x.astype(mx.float32))).astype(x.dtype)


@pytest.mark.parametrize("rows", [1, 5, 32])
def test_same_bits_as_mlx_precompiled_kernel_op(rows, env):
    x = rand((rows, K), mx.bfloat16, 1)
    for name, fn in _calls():
        ours = _run(fn, x, True, env)
        theirs = _run(fn, x, False, env)
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            assert np.array_equal(a, b), name
            assert np.isfinite(a).all() and np.abs(a).max() > 0, name  # (a real result, not zeros)


def test_strided_inputs_are_copied_first(env):
    """x transposed or sliced with a step (not row-contiguous) gives its contiguous copy's bits."""
    env.set("MLX_METILE_CUDA_PRIMITIVE", "1")
    q4 = _quantized(2, 4, 64)
    xt = rand((K, 4), mx.bfloat16, 7).T  # (4, K), column-major
    xs = rand((8, 2 * K), mx.bfloat16, 8)[::2, ::2]  # (4, K), strided both ways
    for x in (xt, xs):
        mx.eval(x)  # (a view: MLX evaluates a transpose or a slice without copying)
        strided = mt.quantized_linear(x, q4.w, q4.scales, q4.biases)
        copied = mt.quantized_linear(_host_copy(x), q4.w, q4.scales, q4.biases)
        assert np.array_equal(np.array(strided.astype(mx.float32)), np.array(copied.astype(mx.float32)))


def test_inside_mx_compile_and_read_back_on_the_cpu(env):
    env.set("MLX_METILE_CUDA_PRIMITIVE", "1")
    q4, up = _quantized(2, 4, 64), _quantized(4, 4, 64)

    def mlp(x):
        return mt.fused_linear(x, [q4, up], epilogue="swiglu") * 2

    x = rand((3, K), mx.bfloat16, 9)
    eager = mlp(x)
    compiled = mx.compile(mlp)(x)
    a, b = np.array(eager.astype(mx.float32)), np.array(compiled.astype(mx.float32))
    assert np.array_equal(a, b)
    # read on the CPU (MLX moves the buffer to unified memory), then used on the GPU again
    x2 = mx.concatenate([eager, eager], axis=1)[:, :K]
    again = mt.fused_linear(x2, [q4, up], epilogue="swiglu")
    copied = mt.fused_linear(_host_copy(x2), [q4, up], epilogue="swiglu")
    assert np.array_equal(np.array(again.astype(mx.float32)), np.array(copied.astype(mx.float32)))


def test_the_output_pool_reuses_buffers(env):
    env.set("MLX_METILE_CUDA_PRIMITIVE", "1")
    q4 = _quantized(2, 4, 64)
    x = rand((2, K), mx.bfloat16, 10)
    first = mt.quantized_linear(x, q4.w, q4.scales, q4.biases)
    mx.eval(first)
    expected = np.array(first.astype(mx.float32))
    del first
    mx.synchronize()
    before = _ext.cuda_output_pool_stats()
    for _ in range(4):
        y = mt.quantized_linear(x, q4.w, q4.scales, q4.biases)
        assert np.array_equal(np.array(y.astype(mx.float32)), expected)
        del y
        mx.synchronize()
    after = _ext.cuda_output_pool_stats()
    assert after[1] - before[1] >= 4, (before, after)  # reused, not allocated again


def test_past_its_limit_the_pool_frees_without_changing_results():
    """In a process whose pool may keep 1 MiB: 64 outputs of 1 MiB each held at once, then
    dropped, then computed again - buffers are freed (after their work ran) and every result
    is the same as the first time."""
    script = textwrap.dedent(
        """
        import mlx.core as mx, numpy as np, mlx_metile as mt
        from mlx_metile.backends.extension import _ext
        from tests.helpers import rand
        w = rand((16384, 512), mx.bfloat16, 2, 0.05)
        q = mt.QuantizedWeight(*mx.quantize(w, group_size=64, bits=4), 64, 4)
        xs = [rand((32, 512), mx.bfloat16, 100 + i) for i in range(64)]
        def run():
            ys = [mt.quantized_linear(x, q.w, q.scales, q.biases) for x in xs]
            mx.eval(ys)
            return [np.array(y.astype(mx.float32)) for y in ys]
        first = run()
        mx.synchronize()
        second = run()
        mx.synchronize()
        third = run()
        stats = _ext.cuda_output_pool_stats()
        assert all(np.array_equal(a, b) and np.array_equal(a, c) for a, b, c in zip(first, second, third))
        assert stats[3] > 0 and stats[2] <= 1 << 20, stats
        print("ok", stats)
        """
    )
    env = dict(os.environ, MLX_METILE_CUDA_POOL_MB="1", MLX_METILE_CUDA_PRIMITIVE="1")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=root, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and "ok" in done.stdout, done.stdout + done.stderr
