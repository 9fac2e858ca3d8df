"""Planted timings and planted candidates for the tuner's tests.

PlantedClock stands in for the wall clock: each entrant's per-call seconds are given (a number,
or a function of the entrant's sample index), so the protocol's rules are checked exactly, with
no time measured (each batch calls its function once). The planted candidates compute the right outputs through mlx_metile's own CPU
path (which passes the gate: tests/tune/test_gate.py) and then break them in one planted way."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import mlx.core as mx
import numpy as np

import mlx_metile as mt
from mlx_metile import formats

CONTROL = "native (control)"


class PlantedClock:
    def __init__(self, per_call: dict[str, float | Callable[[int], float]]):
        self.per_call = dict(per_call)
        self.t = 0.0
        self.index: dict[str, int] = defaultdict(int)
        self.log: list[tuple[str, int]] = []  # (entrant, calls) of every batch, in order

    def now(self) -> float:
        return self.t

    def batch(self, name: str, fn, calls: int) -> float:
        planted = self.per_call.get(name, self.per_call.get("native") if name == CONTROL else None)
        if planted is None:
            raise KeyError(f"no planted time for {name!r}")
        fn()  # once per batch: what it raises is raised, what it computes is computed
        i = self.index[name]
        self.index[name] += 1
        seconds = (planted(i) if callable(planted) else planted) * calls
        self.t += seconds
        self.log.append((name, calls))
        return seconds


def right(x, weights, biases=None, epilogue=None, residual=None):
    """fused_linear through mlx_metile's CPU path, as a list."""
    outs = mt.fused_linear(x, weights, biases=biases, epilogue=epilogue, residual=residual)
    return outs if isinstance(outs, list) else [outs]


def _np(a: mx.array) -> np.ndarray:
    return np.array(a.astype(mx.float32))


def wrong_in_one_element(x, weights, biases=None, epilogue=None, residual=None):
    outs = right(x, weights, biases, epilogue, residual)
    v = _np(outs[0])
    v[-1, v.shape[1] // 2] += 1.0 + abs(v[-1, v.shape[1] // 2])
    return [mx.array(v).astype(outs[0].dtype), *outs[1:]]


def wrong_beyond_one_row(x, weights, biases=None, epilogue=None, residual=None):
    """Right for one row; every other row of a call of several is scaled by 1.25."""
    outs = right(x, weights, biases, epilogue, residual)
    if x.shape[0] == 1:
        return outs
    v = _np(outs[0])
    v[1:] *= 1.25
    return [mx.array(v).astype(outs[0].dtype), *outs[1:]]


def truncated_beyond_one_row(x, weights, biases=None, epilogue=None, residual=None):
    """Accurate, but a row's bits depend on the call's rows: a call of several rows rounds its
    f32 sums toward zero to bf16 (within one bf16 step, inside the gate's bound), a call of one
    row to nearest (the CPU path). Plain products of bf16 activations only."""
    if x.shape[0] == 1:
        return right(x, weights, biases, epilogue, residual)
    w64 = formats.reference(weights[0])
    with np.errstate(invalid="ignore", over="ignore"):  # (the gate's NaN and Inf draws)
        sums = (np.array(x.astype(mx.float32)) @ w64.T.astype(np.float32)).astype(np.float32)
    bits = (sums.view(np.uint32) >> 16).astype(np.uint16)
    return [mx.array(bits).view(mx.bfloat16)]


class NanOnDraw:
    """Right, but the `draw`-th call (0-based) puts a NaN in one element."""

    def __init__(self, draw: int):
        self.draw, self.calls = draw, 0

    def __call__(self, x, weights, biases=None, epilogue=None, residual=None):
        outs = right(x, weights, biases, epilogue, residual)
        self.calls += 1
        if self.calls - 1 != self.draw:
            return outs
        v = _np(outs[0])
        v[0, 0] = np.nan
        return [mx.array(v).astype(outs[0].dtype), *outs[1:]]


def bimodal(fast: float, slow: float, every: int = 3) -> Callable[[int], float]:
    """Per-call seconds: `slow` on every `every`-th sample, else `fast`."""
    return lambda i: slow if i % every == every - 1 else fast
