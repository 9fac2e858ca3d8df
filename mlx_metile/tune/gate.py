"""The accuracy gate: every candidate, on fresh random inputs, against a float64 reference and the
stock composition, before any of it is timed.

Draws (a row bucket b): normal x at b rows, at an odd count of rows below b in the same bucket
(the tails), at b rows with a wide dynamic range; then edge draws - a NaN in one row, +Inf and
-Inf in others - whose non-finite outputs must propagate as stock's do. An element passes where

- the candidate's value is in the class (finite, NaN, +Inf, -Inf) of stock's or of the float64
  reference's (they differ where stock factors the affine bias out of its sum: an Inf times a
  zero quantized value is NaN there, while the dequantized weight is not zero), and
- where the candidate's value and the reference are finite, it is within tolerance.py's bound.

The optional row-invariance gate asks for bits: row r alone gives what it gives among the bucket's
rows (and among 2 rows for bucket 1). A failure's reason names the draw, the output, the element,
the values and the bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from .site import Site
from .tolerance import ACCUMULATION, FLOOR, INTERMEDIATE, OPERAND, ROUNDING, SLOPE

Runner = Callable[[mx.array, "mx.array | None"], list[mx.array]]


@dataclass(frozen=True)
class Draw:
    label: str
    x: mx.array
    residual: mx.array | None


@dataclass(frozen=True)
class GateResult:
    passed: bool
    reason: str | None = None
    worst: float = 0.0  # the largest |error| / bound over the finite elements of every draw

    def summary(self) -> str:
        return "pass" if self.passed else f"fail: {self.reason}"


def tail_rows(bucket: int) -> int | None:
    """An odd row count of the bucket below its top (None for buckets 1 and 2)."""
    low = bucket // 2 + 1
    for rows in range(bucket - 1, low - 1, -1):
        if rows % 2 and rows >= low:
            return rows
    return None


def draws(site: Site, bucket: int, rng: np.random.Generator, count: int = 3) -> list[Draw]:
    """`count` normal draws (the bucket's rows, its odd tail, a wide range) and two edge draws."""
    tail = tail_rows(bucket)
    out = []
    for i in range(count):
        rows = tail if (i % 3 == 1 and tail is not None) else bucket
        scale = 1.0 if i % 3 != 2 else float(np.exp(rng.uniform(-4, 4)))
        x, r = site.draw(rows, rng, scale)
        wide = f", x scaled by {scale:.3g}" if scale != 1.0 else ""
        out.append(Draw(f"draw {i} ({rows} rows{wide})", x, r))
    rows = bucket
    x, r = site.draw(rows, rng)
    xs = np.array(x.astype(mx.float32))
    k = rng.integers(0, site.K, 3)
    xs[0, k[0]] = np.nan
    out.append(Draw(f"edge draw ({rows} rows, NaN in row 0)", _like(xs, x.dtype), r))
    x, r = site.draw(rows, rng)
    xs = np.array(x.astype(mx.float32))
    xs[0 if rows == 1 else rows // 2, k[1]] = np.inf
    xs[rows - 1, k[2]] = -np.inf
    out.append(Draw(f"edge draw ({rows} rows, +Inf and -Inf)", _like(xs, x.dtype), r))
    return out


def _like(values: np.ndarray, dtype: mx.Dtype) -> mx.array:
    return mx.array(values).astype(dtype)


def _f64(a: mx.array) -> np.ndarray:
    return np.array(a.astype(mx.float32), dtype=np.float64)


def _silu64(v):
    with np.errstate(all="ignore"):
        return v * (1.0 / (1.0 + np.exp(-v)))


def _gelu64(v):
    from math import erf

    with np.errstate(all="ignore"):
        return 0.5 * v * (1.0 + np.vectorize(erf, otypes=[np.float64])(v * 0.70710678118654752))


def _gelu_approx64(v):
    with np.errstate(all="ignore"):
        return 0.5 * v * (1.0 + np.tanh(0.79788456080286536 * (v + 0.044715 * v * v * v)))


EPILOGUES64 = {"silu": _silu64, "gelu": _gelu64, "gelu_approx": _gelu_approx64}


def reference(site: Site, draw: Draw, operand_rounding: bool = False) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(float64 outputs, each element's bound) of a draw: the stock composition's formulas in
    float64 on the exactly dequantized weights, and tolerance.py's bound for the output dtype
    (`operand_rounding`: with the term of weights rounded to x's dtype)."""
    x = _f64(draw.x)
    ax = np.abs(np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0))
    zs, mags, errs = [], [], []
    with np.errstate(all="ignore"):
        for w, b, given in zip(site.weights64, site.biases64, site.weights):
            z = x @ w.T
            mag = ax @ np.abs(w).T
            exact = isinstance(given, mx.array) and given.dtype == draw.x.dtype
            operand = 0.0 if not operand_rounding or exact else OPERAND[draw.x.dtype]
            if b is not None:
                z = z + b
                mag = mag + np.abs(b)
            zs.append(z)
            mags.append(mag)
            errs.append((ACCUMULATION * site.K + operand) * mag)
        if site.epilogue == "swiglu":
            g, u = zs
            s = _silu64(g)
            outs = [s * u]
            err = SLOPE["silu"] * errs[0] * np.abs(u) + np.abs(s) * errs[1] + errs[0] * errs[1]
            mag_sum = [mags[0] * np.abs(u) + mags[1] * np.abs(s)]
            errs = [err]
            mags = mag_sum
        elif site.epilogue is not None:
            outs = [EPILOGUES64[site.epilogue](z) for z in zs]
            errs = [SLOPE[site.epilogue] * e for e in errs]
        else:
            outs = zs
        if draw.residual is not None:
            r = _f64(draw.residual)
            outs = [outs[0] + r]
            mags = [mags[0] + np.abs(r)]
    dtype = _out_dtype(site)
    bounds = []
    for out, err, mag in zip(outs, errs, mags):
        rel = ROUNDING[dtype] * np.abs(np.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0))
        bounds.append(rel + err + INTERMEDIATE * mag + FLOOR[dtype])
    return outs, bounds


def _out_dtype(site: Site) -> mx.Dtype:
    """The dtype the kernel rounds its outputs to (the bound's), f32 for any other."""
    return site.out_dtype if site.out_dtype in ROUNDING else mx.float32


def _classes(v: np.ndarray) -> np.ndarray:
    """0 finite, 1 NaN, 2 +Inf, 3 -Inf."""
    c = np.zeros(v.shape, np.int8)
    c[np.isnan(v)] = 1
    c[np.isposinf(v)] = 2
    c[np.isneginf(v)] = 3
    return c


_CLASS_NAMES = ("finite", "nan", "+inf", "-inf")


def _value(v: float) -> str:
    return f"{v:.6g}"


def check_outputs(
    label: str, got: list[mx.array], stock: list[mx.array], want: list[np.ndarray], bounds: list[np.ndarray]
) -> tuple[str | None, float]:
    """(the first failure's reason or None, the largest |error| / bound) of one draw."""
    if len(got) != len(stock):
        return f"{label}: {len(got)} outputs where stock gives {len(stock)}", float("inf")
    worst = 0.0
    for i, (g, s, w, b) in enumerate(zip(got, stock, want, bounds)):
        if not isinstance(g, mx.array):
            return f"{label}: output {i} is a {type(g).__name__}, not an mlx array", float("inf")
        if tuple(g.shape) != tuple(s.shape):
            return f"{label}: output {i} has shape {tuple(g.shape)} where stock's is {tuple(s.shape)}", float("inf")
        if g.dtype != s.dtype:
            return f"{label}: output {i} is {g.dtype} where stock's is {s.dtype}", float("inf")
        g64, s64 = _f64(g).reshape(w.shape), _f64(s).reshape(w.shape)
        cg, cs, cw = _classes(g64), _classes(s64), _classes(w)
        bad = (cg != cs) & (cg != cw)
        if bad.any():
            at = tuple(int(a) for a in np.argwhere(bad)[0])
            return (
                f"{label}: output {i} {list(at)} is {_value(g64[at])} where stock gives {_value(s64[at])} "
                f"and float64 {_value(w[at])} ({_CLASS_NAMES[cg[at]]} where neither is)",
                float("inf"),
            )
        finite = (cg == 0) & (cw == 0)
        if not finite.any():
            continue
        with np.errstate(all="ignore"):
            ratio = np.where(finite, np.abs(g64 - w) / b, 0.0)
        at = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        worst = max(worst, float(ratio[at]))
        if ratio[at] > 1.0:
            at_list = [int(a) for a in at]
            return (
                f"{label}: output {i} {at_list}: |error| {abs(g64[at] - w[at]):.3g} is {ratio[at]:.3g}x the bound "
                f"{b[at]:.3g} (got {_value(g64[at])}, float64 {_value(w[at])}, stock {_value(s64[at])})",
                worst,
            )
    return None, worst


def _bits(a: mx.array) -> np.ndarray:
    view = {mx.float32: mx.uint32, mx.float16: mx.uint16, mx.bfloat16: mx.uint16}.get(a.dtype)
    return np.array(a.view(view) if view is not None else a)


def invariance(run: Runner, site: Site, bucket: int, rng: np.random.Generator) -> str | None:
    """None where each of a few rows alone gives the bits it gives among the bucket's rows
    (2 rows for bucket 1); else the reason."""
    rows = max(bucket, 2)
    x, residual = site.draw(rows, rng)
    together = run(x, residual)
    mx.eval(together)
    for r in sorted({0, rows // 2, rows - 1}):
        alone = run(x[r : r + 1], None if residual is None else residual[r : r + 1])
        mx.eval(alone)
        for i, (t, a) in enumerate(zip(together, alone)):
            tb, ab = _bits(t[r : r + 1]), _bits(a)
            if tb.shape != ab.shape or not np.array_equal(tb, ab):
                col = int(np.argwhere(tb.reshape(-1) != ab.reshape(-1))[0][0]) if tb.shape == ab.shape else 0
                return (
                    f"row invariance: row {r} alone differs from row {r} among {rows} rows at output {i} column "
                    f"{col} ({_value(float(_f64(a).reshape(-1)[col]))} vs "
                    f"{_value(float(_f64(t[r]).reshape(-1)[col]))})"
                )
    return None


def gate(
    site: Site,
    runners: dict[str, Runner],
    bucket: int,
    rng: np.random.Generator,
    count: int = 3,
    invariant: bool = False,
    rounding: dict[str, bool] | None = None,
) -> dict[str, GateResult]:
    """Each runner's gate result over the same draws (the native one is compared, never gated);
    `rounding`: the runners whose kernels round their weights to x's dtype (tolerance.OPERAND)."""
    rounding = rounding or {}
    results: dict[str, GateResult] = {}
    failed: dict[str, str] = {}
    worst = dict.fromkeys(runners, 0.0)
    for d in draws(site, bucket, rng, count):
        stock = site.stock(d.x, d.residual)
        mx.eval(stock)
        want, bounds = reference(site, d)
        rounded = reference(site, d, operand_rounding=True)[1] if any(rounding.values()) else bounds
        for name, run in runners.items():
            if name in failed:
                continue
            try:
                got = run(d.x, d.residual)
                mx.eval(got)
            except Exception as e:  # a candidate that fails to build or run is rejected, with why
                failed[name] = f"error: {type(e).__name__}: {_first_line(e)}"
                continue
            bound = rounded if rounding.get(name) else bounds
            reason, w = check_outputs(f"accuracy, {d.label}", got, stock, want, bound)
            worst[name] = max(worst[name], w)
            if reason is not None:
                failed[name] = reason
    for name, run in runners.items():
        if name not in failed and invariant:
            try:
                reason = invariance(run, site, bucket, rng)
            except Exception as e:
                reason = f"error: {type(e).__name__}: {_first_line(e)}"
            if reason is not None:
                failed[name] = reason
        results[name] = GateResult(name not in failed, failed.get(name), worst[name])
    return results


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else "(no message)"
