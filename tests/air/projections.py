"""Projection kernels dispatched as the ops dispatch them - the emulated MSL artifact and the AIR
candidate of the same schedule - on the same numpy buffers, and their float64 reference."""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from mlx_metile.emu import Kernel
from mlx_metile.spec import ProjectionSpec

from ..helpers import SIGNIFICAND, projection_tolerance

DTYPES = {"bf16": mx.bfloat16, "f16": mx.float16, "f32": mx.float32}


def raw(a: mx.array) -> np.ndarray:
    """A buffer's bytes as numpy holds them (16-bit floats as their bits)."""
    if a.dtype in (mx.bfloat16, mx.float16):
        return np.array(a.view(mx.uint16))
    return np.array(a)


def values(a: np.ndarray, dtype: str) -> np.ndarray:
    """A buffer of `dtype` as float64 values."""
    if dtype == "f32":
        return a.astype(np.float64)
    return np.array(mx.array(a).view(DTYPES[dtype]).astype(mx.float32), dtype=np.float64)


@dataclass
class Problem:
    """Buffers of one call (by parameter name), the scalars, and each weight's float64 value."""

    spec: ProjectionSpec
    rows: int
    k: int
    n: int
    inputs: dict
    weights: list  # [N, K] float64 per weight, as the kernel dequantises it
    biases: list  # [N] float64 or None per weight

    def buffers(self) -> dict:
        out = {name: a.copy() for name, a in self.inputs.items()}
        dt = np.float32 if self.spec.act_dtype == "f32" else np.uint16
        for j in range(self.spec.outputs):
            out[f"y{j}"] = np.zeros((self.rows, self.n), dt)
        return out

    @property
    def columns(self) -> int:
        """The launch's columns: every weight's, SwiGLU's gate and up sharing theirs."""
        return self.n if self.spec.epilogue == "swiglu" else self.n * len(self.spec.weights)

    def scalars(self) -> dict:
        return {"M": self.rows, "K": self.k, **{f"N{i}": self.n for i in range(len(self.spec.weights))}}


def problem(spec: ProjectionSpec, rows: int, k: int, n: int, seed: int = 0) -> Problem:
    mx.random.seed(seed)
    act = DTYPES[spec.act_dtype]
    inputs = {"x": raw((mx.random.normal((rows, k))).astype(act))}
    weights, biases = [], []
    for i, fmt in enumerate(spec.weights):
        w = (mx.random.normal((n, k)) * 0.1).astype(DTYPES.get(fmt.dtype, mx.bfloat16))
        if fmt.quantized and not fmt.affine:
            q, s = mx.quantize(w, group_size=fmt.group_size, bits=fmt.bits, mode=fmt.mode)
            inputs[f"w{i}"], inputs[f"scales{i}"] = raw(q), raw(s)
            deq = mx.dequantize(q, s, group_size=fmt.group_size, bits=fmt.bits, mode=fmt.mode)
        elif fmt.quantized:
            q, s, b = mx.quantize(w, group_size=fmt.group_size, bits=fmt.bits)
            inputs[f"w{i}"], inputs[f"scales{i}"], inputs[f"biases{i}"] = raw(q), raw(s), raw(b)
            # in f32, as the kernel dequantises (MLX's in the scales' dtype rounds each weight)
            f32 = mx.float32
            deq = mx.dequantize(q, s.astype(f32), b.astype(f32), group_size=fmt.group_size, bits=fmt.bits)
        else:
            inputs[f"w{i}"] = raw(w)
            deq = w
        weights.append(np.array(deq.astype(mx.float32), dtype=np.float64))
        if fmt.has_bias:
            bias = mx.random.normal((n,)).astype(DTYPES[fmt.bias_dtype])
            inputs[f"bias{i}"] = raw(bias)
            biases.append(np.array(bias.astype(mx.float32), dtype=np.float64))
        else:
            biases.append(None)
    if spec.has_residual:
        inputs["residual"] = raw(mx.random.normal((rows, n)).astype(act))
    return Problem(spec, rows, k, n, inputs, weights, biases)


def dispatch(kernel, launch, pr: Problem) -> list[np.ndarray]:
    """Run `kernel` (an emulator Kernel or an AIR Function) with `launch`'s grid and params."""
    bufs, scal = pr.buffers(), pr.scalars()
    args = [bufs[p.name] if p.kind == "buffer" else scal[p.name] for p in launch.params]
    kernel.dispatch_threadgroups(launch.grid(pr.rows, pr.columns), launch.threads_per_group, args)
    return [bufs[f"y{j}"] for j in range(pr.spec.outputs)]


def emulated(artifact, pr: Problem) -> list[np.ndarray]:
    return dispatch(Kernel(artifact.source, artifact.entry), artifact, pr)


def check_reference(pr: Problem, outs: list[np.ndarray]) -> None:
    """Each output against float64: linear outputs within projection_tolerance (one rounding of the
    output, f32 accumulation); SwiGLU's silu(gate) * up within the same error propagated through
    the product (|d(silu)/dg| < 1.1) plus one more rounding of the output."""
    spec, act = pr.spec, DTYPES[pr.spec.act_dtype]
    x = values(pr.inputs["x"], spec.act_dtype)
    got = [values(o, spec.act_dtype) for o in outs]
    if spec.epilogue == "swiglu":
        g, u = (x @ w.T for w in pr.weights)
        tg, tu = (projection_tolerance(x, w, mx.float32, roundings=0) for w in pr.weights)
        silu = g / (1 + np.exp(-g))
        exact = silu * u
        tol = 1.1 * tg * np.abs(u) + np.abs(silu) * tu + 1.1 * tg * tu
        tol += 2 * 2.0 ** -SIGNIFICAND[act] * np.abs(exact) + 2.0**-24 * 8 * np.abs(exact) + 1e-30
        pairs = [(got[0], exact, tol)]
    else:
        pairs = []
        for i, w in enumerate(pr.weights):
            exact = x @ w.T + (pr.biases[i] if pr.biases[i] is not None else 0)
            tol = projection_tolerance(x, w, act, roundings=1, bias=pr.biases[i])
            if spec.has_residual:
                r = values(pr.inputs["residual"], spec.act_dtype)
                exact = exact + r
                tol = tol + 2.0 ** -SIGNIFICAND[act] * np.abs(exact)
            pairs.append((got[i if spec.outputs > 1 else 0], exact, tol))
            if spec.outputs == 1:
                break
    for j, (y, exact, tol) in enumerate(pairs):
        err = np.abs(y - exact)
        bad = err > tol
        assert not bad.any(), f"y{j}: {bad.sum()} elements beyond tolerance, worst {err.max():.3g}"
