"""Rows of x holding an Inf or a NaN on the CUDA tensor-core kernels (the CPU harness): each output
in the class - finite, NaN, +Inf, -Inf - of float64 over the dequantized weights. The affine
kernels factor each group's sum as s * sum(q x) + b * sum(x), inf - inf for such a row; they
recompute an output that is not finite from the weights dequantized one by one (lower/mma.py,
exact_rows). Dense and microscaled weights have no bias term: their products propagate as is."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from mlx_metile import formats
from mlx_metile.schedule.cuda_layouts import ONE_TILE, TILES
from mlx_metile.spec import ProjectionSpec, WeightFormat
from mlx_metile.tune import gate
from mlx_metile.tune.site import Site

from ..helpers import bits
from .cases import MX, ULP, Case, kernel, q4, q8, set_knobs, values

ZERO_COL, INF_K = 3, 5  # the weight of column 3 at k 5 made exactly 0: Inf * 0 is NaN there


def classes(v: np.ndarray) -> np.ndarray:
    """0 finite, 1 NaN, 2 +Inf, 3 -Inf (gate.py's)."""
    return gate._classes(v)


def plant_zero_weight(case: Case) -> None:
    """Column ZERO_COL's group holding INF_K gets bias 0 and q = 0 at INF_K (4 or 8-bit weights,
    16-bit scales): its dequantized weight there is exactly 0, the others s * q."""
    f = case.spec.weights[0]
    for i in range(len(case.spec.weights)):
        w, b = case.buffers[f"w{i}"].copy(), case.buffers[f"biases{i}"].copy()
        word, shift = divmod(INF_K * f.bits, 32)
        w[ZERO_COL, word] &= np.uint32(~(((1 << f.bits) - 1) << shift) & 0xFFFFFFFF)
        old = values(b[ZERO_COL, INF_K // f.group_size], f.dtype)
        b[ZERO_COL, INF_K // f.group_size] = 0
        case.replace(**{f"w{i}": w, f"biases{i}": b})
        lo = INF_K // f.group_size * f.group_size
        dq = case.w[i]
        dq[ZERO_COL, lo : lo + f.group_size] -= old  # s * q + b - b: exact in float64
        dq[ZERO_COL, INF_K] = 0.0


def poison(case: Case) -> None:
    """Row 0: +Inf at INF_K (NaN at ZERO_COL, +-Inf by the weights' signs elsewhere); of 2 rows or
    more the last row -Inf at the last k; of 3 or more the middle row a NaN; of 5 or more row 1
    +Inf and -Inf; the other rows finite."""
    x, K = case.x.copy(), case.K
    rows = x.shape[0]
    x[0, INF_K] = np.inf
    if rows > 1:
        x[rows - 1, K - 1] = -np.inf
    if rows > 2:
        x[rows // 2, 3] = np.nan
    if rows >= 5:
        x[1, 7], x[1, K // 2 + 1] = np.inf, -np.inf
    xa = mx.array(x.astype(np.float32)).astype(MX[case.spec.act_dtype])
    case.replace(x=bits(xa))
    case.x = np.array(xa.astype(mx.float32), np.float64)


def float64_outputs(case: Case, rows: int) -> list[np.ndarray]:
    """The spec's outputs in float64, products summed elementwise (no BLAS shortcuts past an
    Inf), SwiGLU as the gate's reference writes it."""
    x = case.x[:rows]
    with np.errstate(all="ignore"):
        z = [(x[:, None, :] * w[None, :, :]).sum(-1) + b for w, b in zip(case.w, case.bias)]
        if case.spec.epilogue == "swiglu":
            return [gate._silu64(z[0]) * z[1]]
    return z if case.spec.outputs > 1 else z[:1]


def check_classes(case: Case, got: list[np.ndarray], rows: int, what: str) -> None:
    """Every element's class is float64's; finite rows within Case.check's tolerance."""
    act = case.spec.act_dtype
    finite_rows = np.isfinite(case.x[:rows]).all(axis=1)
    for j, (y, want) in enumerate(zip(got, float64_outputs(case, rows))):
        v = values(y, act)
        cg, cw = classes(v), classes(want)
        wrong = np.argwhere(cg != cw)
        assert not len(wrong), (
            f"{what} y{j}: {len(wrong)} elements in the wrong class, first {wrong[0].tolist()}: "
            f"{v[tuple(wrong[0])]} where float64 gives {want[tuple(wrong[0])]}"
        )
        assert (cw[~finite_rows] != 0).all(), "a row of x holding an Inf or a NaN gave a finite output"
        if case.spec.epilogue is None:
            e, xf = want[finite_rows], case.x[:rows][finite_rows]
            tol = ULP[act] * np.abs(e) + (case.K + 2) * 2.0**-24 * (np.abs(xf) @ np.abs(case.w[j]).T)
            assert (np.abs(v[finite_rows] - e) <= tol).all(), f"{what} y{j}: a finite row off float64"


AFFINE = [  # (spec, K, N, settings, kernel): each affine tensor-core kernel and both widths
    (ProjectionSpec("bf16", (q4,), k_multiple=256), 512, 40, {}, "staged"),
    (ProjectionSpec("bf16", (q8,), k_multiple=256), 512, 40, {"STAGED": "0"}, "direct"),
    (ProjectionSpec("bf16", (WeightFormat("bf16", 4, 64, True, "bf16"),) * 2, "swiglu", k_multiple=256), 512, 24,
     {"XSHARE": "2"}, "shared x"),
    (ProjectionSpec("bf16", (WeightFormat("bf16", 3, 32),), k_multiple=256), 512, 40, {"STAGED": "0"},
     "direct 3-bit stream"),
    (ProjectionSpec("bf16", (WeightFormat("bf16", 3, 32),), k_multiple=256), 512, 40, {"STAGED_LOWBIT": "1"}, "staged 3-bit g32 stream"),
    (ProjectionSpec("bf16", (WeightFormat("bf16", 3, 64),), k_multiple=256), 512, 40, {"STAGED_LOWBIT": "1"}, "staged 3-bit stream"),
    (ProjectionSpec("f16", (WeightFormat("f16", 5, 64),), k_multiple=256), 512, 40, {"STAGED_LOWBIT": "1"}, "staged 5-bit stream"),
]  # fmt: skip


@pytest.mark.parametrize("spec,K,N,settings,which", AFFINE, ids=[c[4] for c in AFFINE])
def test_affine_tensor_core_rows_with_inf_get_the_float64_class(env, spec, K, N, settings, which):
    """At 1, 5, 16 and 32 rows (each bucket's kernel; 32 in the several-tile layout): NaN, +Inf
    and -Inf where float64 has them (NaN at the zero weight and where both signs meet), finite
    rows within tolerance, and the poisoned rows (first, middle, last) the bits they have alone."""
    set_knobs(env, settings)
    case = Case(spec, K, N, rows=32)
    plant_zero_weight(case)
    for bucket, rows, layout in ((1, 1, ONE_TILE), (8, 5, ONE_TILE), (16, 16, ONE_TILE), (32, 32, TILES)):
        sub = Case(spec, K, N, rows=rows)
        sub.buffers, sub.w, sub.bias, sub.x = dict(case.buffers), case.w, case.bias, case.x[:rows].copy()
        sub.buffers["x"] = case.buffers["x"][:rows]
        poison(sub)
        art = kernel(spec, bucket, layout)
        assert "metile_affine_dot<" in art.source
        if which == "shared x" and rows == 32:
            assert art.schedule.xshare, art.schedule.describe()
        if which.startswith("direct"):
            assert not art.schedule.staged, art.schedule.describe()
        if which.startswith("staged"):
            assert art.schedule.staged, art.schedule.describe()
        got = sub.run(bucket, rows, layout)
        check_classes(sub, got, rows, f"{which} rows={rows}")
        sub.invariant(got, f"{which} with Inf", layout=layout, bucket=1)


AS_IS = [  # (spec, K, N, kind): no recomputation - no bias term, or each weight dequantized (SIMT: CUDA_MMA=0)
    (ProjectionSpec("bf16", (WeightFormat("bf16"),), k_multiple=256), 512, 48, "mma"),
    (ProjectionSpec("bf16", (WeightFormat("u8", 4, 32, False, "f32", "mxfp4"),), k_multiple=256), 512, 40, "mma"),
    (ProjectionSpec("bf16", (WeightFormat("bf16", 3, 32),), k_multiple=256), 512, 40, "simd_splitk"),
]


@pytest.mark.parametrize("spec,K,N,kind", AS_IS, ids=["dense", "mxfp4", "simt_q3g32"])
def test_dense_microscaled_and_simt_rows_with_inf_get_the_float64_class(env, spec, K, N, kind):
    """Dense and mxfp4 weights on the tensor cores (0 * Inf is NaN at a zero weight, as in
    float64) and the SIMT kernel of affine 3-bit weights propagate as float64 without a slow path."""
    if kind == "simd_splitk":
        env.set("MLX_METILE_CUDA_MMA", "0")
    case = Case(spec, K, N, rows=5)
    poison(case)
    art = kernel(spec, 8, ONE_TILE)
    assert art.schedule.kind == kind and "metile_affine_dot" not in art.source, art.schedule.describe()
    check_classes(case, case.run(8, 5), 5, spec.name())


def test_the_gates_edge_draws_pass_the_affine_kernel():
    """tune/gate.py's draws with a NaN in one row and +Inf / -Inf in others, at bucket 8 of an
    int4 group-64 weight: the kernel's outputs pass check_outputs against stock and float64 - and
    the factored sums' NaN in place of an Inf would not (the check can fail)."""
    rng = np.random.default_rng(5)
    K, N = 512, 40
    dense = mx.array((rng.standard_normal((N, K)) * 0.05).astype(np.float32)).astype(mx.bfloat16)
    wq, s, b = mx.quantize(dense, group_size=64, bits=4)
    weight = formats.QuantizedWeight(wq, s, b, 64, 4)
    site = Site.of(mx.zeros((8, K), mx.bfloat16), [weight])
    spec = ProjectionSpec("bf16", (q4,), k_multiple=256)
    case = Case(spec, K, N, rows=8)
    case.replace(w0=bits(wq), scales0=bits(s), biases0=bits(b))
    edges = [d for d in gate.draws(site, 8, rng) if d.label.startswith("edge")]
    assert len(edges) == 2
    for d in edges:
        case.replace(x=bits(d.x))
        y = case.run(8, 8)[0]
        got = mx.array(y).view(mx.bfloat16)
        stock = site.stock(d.x, None)
        want, bounds = gate.reference(site, d)
        reason, _ = gate.check_outputs(d.label, [got], stock, want, bounds)
        assert reason is None, reason
        if "Inf" in d.label:
            assert np.isinf(want[0]).any()
            broken = np.array(y)
            broken[np.isinf(values(y, "bf16"))] = 0x7FC0  # NaN where an Inf is
            reason, _ = gate.check_outputs(d.label, [mx.array(broken).view(mx.bfloat16)], stock, want, bounds)
            assert reason is not None and "nan" in reason
