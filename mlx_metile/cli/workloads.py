"""Benchmark workloads, shared by `mlx-metile bench` and the pytest-benchmark suites in bench/:
weight pools, the op under test and the stock MLX composition it replaces, measured in the same
run.

Each timed call uses the next weight of a pool, so on GPUs the weights stream from memory
instead of sitting in cache (the pool should exceed the last-level cache: `--bench-pool` in
bench/conftest.py sets its size, `--bench-k` and `--bench-n` the weights' shape)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx

import mlx_metile as mt

ROWS = [1, 2, 4, 8, 16, 32]


@dataclass(frozen=True)
class Size:
    K: int = 2048  # input width
    N: int = 2048  # output columns (fused q/k/v: q's; k and v take N / 4 each)
    pool: int = 4  # weights (sets) per workload, used in turn


@dataclass
class Workload:
    name: str
    ours: Callable[[mx.array, int], object]
    stock: Callable[[mx.array, int], object]
    weight_bytes: int  # bytes of weights (+ scales/biases) one call reads


def _dense(n: int, k: int, dtype, count: int) -> list[mx.array]:
    ws = [(mx.random.normal((n, k)) * k**-0.5).astype(dtype) for _ in range(count)]
    mx.eval(ws)
    return ws


def _quantized(n: int, k: int, dtype, bits: int, group: int, count: int) -> list[tuple]:
    qs = [
        mx.quantize((mx.random.normal((n, k)) * k**-0.5).astype(dtype), group_size=group, bits=bits)
        for _ in range(count)
    ]
    mx.eval(qs)
    return qs


def _nbytes(*arrays: mx.array) -> int:
    return sum(a.nbytes for a in arrays)


def linear(size: Size, dtype=mx.bfloat16) -> Workload:
    ws = _dense(size.N, size.K, dtype, size.pool)
    return Workload(
        f"linear_{dtype}",
        lambda x, i: mt.linear(x, ws[i % size.pool]),
        lambda x, i: x @ ws[i % size.pool].T,
        _nbytes(ws[0]),
    )


def quantized(size: Size, bits: int, group: int = 64, dtype=mx.bfloat16) -> Workload:
    qs = _quantized(size.N, size.K, dtype, bits, group, size.pool)
    return Workload(
        f"quantized_int{bits}_g{group}",
        lambda x, i: mt.quantized_linear(x, *qs[i % size.pool], group_size=group, bits=bits),
        lambda x, i: mx.quantized_matmul(x, *qs[i % size.pool], transpose=True, group_size=group, bits=bits),
        _nbytes(*qs[0]),
    )


def microscaled(size: Size, mode: str, dtype=mx.bfloat16) -> Workload:
    """MLX's mxfp4, mxfp8 or nvfp4 weights: uint32 codes and uint8 scales, no biases."""
    qs = [
        mx.quantize((mx.random.normal((size.N, size.K)) * size.K**-0.5).astype(dtype), mode=mode)
        for _ in range(size.pool)
    ]
    mx.eval(qs)
    return Workload(
        f"quantized_{mode}",
        lambda x, i: mt.quantized_linear(x, *qs[i % size.pool], mode=mode),
        lambda x, i: mx.quantized_matmul(x, *qs[i % size.pool], transpose=True, mode=mode),
        _nbytes(*qs[0]),
    )


# `mlx-metile bench --formats`: one product per format
FORMATS = {
    "bf16": lambda size: linear(size, mx.bfloat16),
    "f16": lambda size: linear(size, mx.float16),
    **{f"int{b}": (lambda size, b=b: quantized(size, b, 64)) for b in (2, 3, 4, 5, 6, 8)},
    **{mode: (lambda size, mode=mode: microscaled(size, mode)) for mode in ("mxfp4", "mxfp8", "nvfp4")},
}


def fused_qkv(size: Size, dtype=mx.bfloat16) -> Workload:
    K, N, kv = size.K, size.N, size.N // 4
    pool = [(*_dense(N, K, dtype, 1), *_dense(kv, K, dtype, 1), *_dense(kv, K, dtype, 1)) for _ in range(size.pool)]
    return Workload(
        "fused_qkv",
        lambda x, i: mt.fused_linear(x, list(pool[i % size.pool])),
        lambda x, i: [x @ w.T for w in pool[i % size.pool]],
        _nbytes(*pool[0]),
    )


def fused_gate_up_int4(size: Size, dtype=mx.bfloat16) -> Workload:
    K, N = size.K, size.N
    pool = [(*_quantized(N, K, dtype, 4, 64, 1), *_quantized(N, K, dtype, 4, 64, 1)) for _ in range(size.pool)]

    def stock(x, i):
        g, u = pool[i % size.pool]
        a = mx.quantized_matmul(x, *g, transpose=True, group_size=64, bits=4)
        b = mx.quantized_matmul(x, *u, transpose=True, group_size=64, bits=4)
        return a * mx.sigmoid(a) * b

    return Workload(
        "fused_gate_up_swiglu_int4",
        lambda x, i: mt.fused_linear(
            x, [mt.QuantizedWeight(*w, 64, 4) for w in pool[i % size.pool]], epilogue="swiglu"
        ),
        stock,
        _nbytes(*pool[0][0], *pool[0][1]),
    )
