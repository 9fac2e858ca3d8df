"""Projection test cases: MLX data, and a float64 reference with a tolerance
derived from the numerics contract (one output rounding after f32 work)."""

from __future__ import annotations

from dataclasses import dataclass
from math import erf

import mlx.core as mx
import numpy as np

import mlx_metile as mt

from ..helpers import SIGNIFICAND, f64, rand

# f32 transcendental functions and the A&S erf (|error| <= 1.5e-7) in epilogues
EPILOGUE_SLACK = 2.0**-20


@dataclass
class Case:
    x: mx.array
    weights: list  # mx.array or mt.QuantizedWeight
    biases: list
    epilogue: str | None = None
    residual: mx.array | None = None
    # the kernel rounds each dequantized weight once to x's dtype (NAX's matmul2d operands): one
    # more rounding of each weight, where it is not exact already (a dense weight of x's dtype)
    operand_rounding: bool = False

    def run_rows(self, start: int, stop: int):
        res = self.residual[start:stop] if self.residual is not None else None
        return mt.fused_linear(
            self.x[start:stop], self.weights, biases=self.biases, epilogue=self.epilogue, residual=res
        )

    def run(self, rows: int):
        return self.run_rows(0, rows)

    # -- reference ---------------------------------------------------------
    def weight64(self, w) -> np.ndarray:
        if isinstance(w, mt.QuantizedWeight) and w.mode != "affine":
            # MLX's own dequantisation in f32, exact for these formats: independent of our kernels
            return f64(mx.dequantize(w.w, w.scales, None, w.group_size, w.bits, mode=w.mode, dtype=mx.float32))
        if isinstance(w, mt.QuantizedWeight):
            # MLX's own dequantisation in f32: independent of our kernels
            d = mx.dequantize(w.w, w.scales.astype(mx.float32), w.biases.astype(mx.float32), w.group_size, w.bits)
            return f64(d)
        return f64(w)

    def reference(self, rows: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(exact outputs, allowed |error|) for the first `rows` rows."""
        x = f64(self.x[:rows])
        k = x.shape[-1]
        zs, accs = [], []
        for w, b in zip(self.weights, self.biases):
            w64 = self.weight64(w)
            z = x @ w64.T + (f64(b) if b is not None else 0)
            zs.append(z)
            # f32 accumulation, plus f32 rounding of dequantised weights
            mag = np.abs(x) @ np.abs(w64).T
            acc = (k + 2) * 2.0**-24 * mag + 2.0**-24 * np.abs(z)
            if self.operand_rounding and not (isinstance(w, mx.array) and w.dtype == self.x.dtype):
                acc = acc + 2.0 ** -SIGNIFICAND[self.x.dtype] * mag  # |w - round(w)| <= 2**-p |w|
            accs.append(acc)
        out_dtype = self.x.dtype
        if self.epilogue == "swiglu":
            g, u = zs
            sg = g / (1 + np.exp(-g))
            dsg = np.abs(1 / (1 + np.exp(-g)) * (1 + g * (1 - 1 / (1 + np.exp(-g)))))  # |silu'(g)|
            outs = [sg * u]
            errs = [np.abs(u) * dsg * accs[0] + np.abs(sg) * accs[1] + EPILOGUE_SLACK * np.abs(sg * u)]
        elif self.epilogue in ("gelu", "gelu_approx", "silu"):
            fn = {
                "gelu": lambda z: 0.5 * z * (1 + np.vectorize(erf)(z / np.sqrt(2))),
                "gelu_approx": lambda z: 0.5 * z * (1 + np.tanh(0.7978845608028654 * (z + 0.044715 * z**3))),
                "silu": lambda z: z / (1 + np.exp(-z)),
            }[self.epilogue]
            outs = [fn(z) for z in zs]
            # these epilogues have slope <= 1.2; their f32 evaluation adds EPILOGUE_SLACK
            errs = [1.2 * a + EPILOGUE_SLACK * (np.abs(z) + 1) for a, z in zip(accs, zs)]
        else:
            outs, errs = zs, accs
        if self.residual is not None:
            outs = [outs[0] + f64(self.residual[:rows])]
        ulp = 2.0 ** -SIGNIFICAND[out_dtype]
        return outs, [e + ulp * np.abs(o) for o, e in zip(outs, errs)]


def quantized_weight(n: int, k: int, dtype, bits: int, group: int, seed: int) -> mt.QuantizedWeight:
    w = rand((n, k), dtype, seed, 0.1)
    q, s, b = mx.quantize(w, group_size=group, bits=bits)
    return mt.QuantizedWeight(q, s, b, group, bits)


def check(case: Case, rows: int) -> None:
    got = case.run(rows)
    got = got if isinstance(got, list) else [got]
    exact, tol = case.reference(rows)
    assert len(got) == len(exact)
    for i, (g, e, t) in enumerate(zip(got, exact, tol)):
        err = np.abs(f64(g) - e)
        bad = err > t
        assert not bad.any(), (
            f"output {i}, rows={rows}: {bad.sum()} of {bad.size} beyond tolerance; "
            f"worst error {err.max():.3g}, smallest violated tolerance {t[bad].min():.3g}"
        )


def microscaled_weight(n: int, k: int, dtype, mode: str, seed: int) -> mt.QuantizedWeight:
    """A weight of MLX's mxfp4, mxfp8 or nvfp4 mode, quantized by MLX."""
    w, s = mx.quantize(rand((n, k), dtype, seed, 0.1), mode=mode)
    return mt.QuantizedWeight(w, s, mode=mode)
