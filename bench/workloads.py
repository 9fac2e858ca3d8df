"""Benchmark workloads: weight pools, the op under test and the stock MLX
composition it replaces, measured in the same run.

Each timed call uses the next weight of a pool, so on GPUs the weights stream
from memory instead of sitting in cache (the pool should exceed the last-level
cache; BENCH_POOL sets its size)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx

import mlx_metile as mt

ROWS = [1, 2, 4, 8, 16, 32]
K = int(os.environ.get("BENCH_K", "2048"))
N = int(os.environ.get("BENCH_N", "2048"))
POOL = int(os.environ.get("BENCH_POOL", "4"))


@dataclass
class Workload:
    name: str
    ours: Callable[[mx.array, int], object]
    stock: Callable[[mx.array, int], object]
    weight_bytes: int  # bytes of weights (+ scales/biases) one call reads


def _dense(n: int, k: int, dtype) -> list[mx.array]:
    ws = [(mx.random.normal((n, k)) * k**-0.5).astype(dtype) for _ in range(POOL)]
    mx.eval(ws)
    return ws


def _quantized(n: int, k: int, dtype, bits: int, group: int) -> list[tuple]:
    qs = [
        mx.quantize((mx.random.normal((n, k)) * k**-0.5).astype(dtype), group_size=group, bits=bits)
        for _ in range(POOL)
    ]
    mx.eval(qs)
    return qs


def _nbytes(*arrays: mx.array) -> int:
    return sum(a.nbytes for a in arrays)


def linear(dtype=mx.bfloat16) -> Workload:
    ws = _dense(N, K, dtype)
    return Workload(
        f"linear_{dtype}",
        lambda x, i: mt.linear(x, ws[i % POOL]),
        lambda x, i: x @ ws[i % POOL].T,
        _nbytes(ws[0]),
    )


def quantized(bits: int, group: int = 64, dtype=mx.bfloat16) -> Workload:
    qs = _quantized(N, K, dtype, bits, group)
    return Workload(
        f"quantized_int{bits}_g{group}",
        lambda x, i: mt.quantized_linear(x, *qs[i % POOL], group_size=group, bits=bits),
        lambda x, i: mx.quantized_matmul(x, *qs[i % POOL], transpose=True, group_size=group, bits=bits),
        _nbytes(*qs[0]),
    )


def fused_qkv(dtype=mx.bfloat16) -> Workload:
    kv = N // 4
    pool = [(_dense(N, K, dtype)[0], _dense(kv, K, dtype)[0], _dense(kv, K, dtype)[0]) for _ in range(POOL)]
    return Workload(
        "fused_qkv",
        lambda x, i: mt.fused_linear(x, list(pool[i % POOL])),
        lambda x, i: [x @ w.T for w in pool[i % POOL]],
        _nbytes(*pool[0]),
    )


def fused_gate_up_int4(dtype=mx.bfloat16) -> Workload:
    pool = [(_quantized(N, K, dtype, 4, 64)[0], _quantized(N, K, dtype, 4, 64)[0]) for _ in range(POOL)]

    def stock(x, i):
        g, u = pool[i % POOL]
        a = mx.quantized_matmul(x, *g, transpose=True, group_size=64, bits=4)
        b = mx.quantized_matmul(x, *u, transpose=True, group_size=64, bits=4)
        return a * mx.sigmoid(a) * b

    return Workload(
        "fused_gate_up_swiglu_int4",
        lambda x, i: mt.fused_linear(x, [mt.QuantizedWeight(*w, 64, 4) for w in pool[i % POOL]], epilogue="swiglu"),
        stock,
        _nbytes(*pool[0][0], *pool[0][1]),
    )
