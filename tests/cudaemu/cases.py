"""Random data for a spec, the CUDA kernel of a row bucket and column layout run on the CPU
(host.py), and float64 references with the tolerances of the H200 matrix."""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np

from mlx_metile import settings
from mlx_metile.backends.cuda_device import build_target
from mlx_metile.formats import dequantize_exact, microscaling
from mlx_metile.pipeline import compile_projection
from mlx_metile.schedule import takes_mma
from mlx_metile.schedule.cuda_layouts import ONE_TILE, TILES
from mlx_metile.schedule.cuda_mma import MmaRules
from mlx_metile.spec import ProjectionSpec, WeightFormat

from ..helpers import artifact, bits, rand
from . import host

MX = {"bf16": mx.bfloat16, "f16": mx.float16, "f32": mx.float32}
ULP = {"bf16": 2.0**-8, "f16": 2.0**-11}
_ERF = np.vectorize(math.erf)
EPILOGUES = {  # float64 references of the elementwise epilogues
    None: lambda z: z,
    "gelu": lambda z: 0.5 * z * (1 + _ERF(z / math.sqrt(2))),
    "gelu_approx": lambda z: 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3))),
    "silu": lambda z: z / (1 + np.exp(-z)),
}

q4 = WeightFormat("bf16", 4, 64)
q8 = WeightFormat("bf16", 8, 64)


def rules(spec: ProjectionSpec) -> MmaRules:
    """The tensor-core rules of `spec` under the current settings and CUDA build target."""
    cfg = settings.current()
    return MmaRules(spec, cfg, build_target(cfg))


def kernel(spec: ProjectionSpec, bucket: int, layout: int):
    """The CUDA kernel of `spec` for `bucket` rows in column `layout` (schedule.cuda_layouts) under
    the current settings; specs the tensor-core schedules do not take get the SIMT one."""
    cfg = settings.current()
    target = build_target(cfg)
    if not takes_mma(spec, target, cfg):
        return artifact(spec, bucket, target)
    return compile_projection(spec, MmaRules(spec, cfg, target).schedule(bucket, layout), "cuda")


def set_knobs(env, knobs: dict[str, str]) -> None:
    """MLX_METILE_CUDA_MMA_<name> = value for each of `knobs`."""
    for name, value in knobs.items():
        env.set(f"MLX_METILE_CUDA_MMA_{name}", value)


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    """Whether two kernels' outputs are equal bit for bit."""
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def values(bits_: np.ndarray, act: str) -> np.ndarray:
    if act == "bf16":
        return (bits_.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return bits_.view(np.float16).astype(np.float64)


class Case:
    """Random data for `spec` (bf16/f16 activations) over K and N columns per weight (or a
    tuple of each weight's), its kernel buffers by parameter name, and the float64 values of
    x and of each weight."""

    def __init__(self, spec: ProjectionSpec, K: int, N: int | tuple[int, ...], rows: int, seed: int = 0):
        self.Ns = tuple(N) if isinstance(N, tuple) else (N,) * len(spec.weights)
        self.spec, self.K, self.N = spec, K, self.Ns[0]
        act = MX[spec.act_dtype]
        x = rand((rows, K), act, seed)
        self.buffers = {"x": bits(x)}
        self.x = np.array(x.astype(mx.float32), np.float64)
        self.w = []
        for i, f in enumerate(spec.weights):
            dense = rand((self.Ns[i], K), MX[f.dtype] if not f.quantized else act, seed + 1 + i, 0.05)
            if f.quantized and not f.affine:  # microscaled: uint8 scales, no biases
                wq, s = mx.quantize(dense, mode=f.mode)
                self.buffers |= {f"w{i}": bits(wq), f"scales{i}": np.array(s)}
                self.w.append(microscaling.dequantize_exact(wq, s, f.group_size, f.bits, f.mode))
            elif f.quantized:
                wq, s, b = mx.quantize(dense, group_size=f.group_size, bits=f.bits)
                s, b = s.astype(MX.get(f.dtype, mx.float32)), b.astype(MX.get(f.dtype, mx.float32))
                self.buffers |= {f"w{i}": bits(wq), f"scales{i}": bits(s), f"biases{i}": bits(b)}
                self.w.append(dequantize_exact(wq, s, b, f.group_size, f.bits))
            else:
                self.buffers[f"w{i}"] = bits(dense)
                self.w.append(np.array(dense.astype(mx.float32), np.float64))
        self.bias = []
        for i, f in enumerate(spec.weights):
            b = rand((self.Ns[i],), MX[f.bias_dtype], seed + 10 + i) if f.has_bias else None
            if b is not None:
                self.buffers[f"bias{i}"] = bits(b)
            self.bias.append(0.0 if b is None else np.array(b.astype(mx.float32), np.float64))
        self._runs: dict[tuple, list[np.ndarray]] = {}
        self.residual = 0.0
        if spec.has_residual:
            r = rand((rows, self.N), act, seed + 20)
            self.buffers["residual"] = bits(r)
            self.residual = np.array(r.astype(mx.float32), np.float64)

    def replace(self, **buffers: np.ndarray) -> None:
        """New data for some buffers (outputs computed before are forgotten)."""
        self.buffers |= buffers
        self._runs.clear()

    def run(self, bucket: int, rows: int, layout: int = ONE_TILE, start: int = 0) -> list[np.ndarray]:
        """The CUDA kernel of `bucket` in column `layout` over `rows` rows from row `start`; its outputs' bits."""
        return self.run_kernel(kernel(self.spec, bucket, layout), rows, start)

    def run_kernel(self, art, rows: int, start: int = 0) -> list[np.ndarray]:
        key = (art.key, rows, start)
        if key in self._runs:  # (a kernel's outputs for given rows are computed once per case)
            return [y.copy() for y in self._runs[key]]
        named = dict(self.buffers)
        for name in ("x", "residual"):
            if name in named:
                named[name] = np.ascontiguousarray(named[name][start : start + rows])
        n_out = self.spec.outputs
        outs = {f"y{j}": np.zeros((rows, n), np.uint16) for j, n in enumerate(self.Ns[:n_out])}
        buffers = [named.get(p.name, outs.get(p.name)) for p in art.params if p.kind == "buffer"]
        scalars = {"M": rows, "K": self.K, **{f"N{i}": n for i, n in enumerate(self.Ns)}}
        cols = self.N if self.spec.epilogue == "swiglu" else sum(self.Ns)
        host.run(art, buffers, scalars, rows, cols)
        self._runs[key] = [outs[f"y{j}"] for j in range(n_out)]
        return [y.copy() for y in self._runs[key]]

    def invariant(self, got: list[np.ndarray], what: str, layout: int = ONE_TILE, bucket: int = 8) -> None:
        """Rows 0, the middle one and the last of `got` (outputs of several rows from row 0) have
        the bits of each computed alone, by the kernel of `bucket` in `layout`."""
        n = got[0].shape[0]
        for r in sorted({0, n // 2, n - 1}):
            alone = self.run(bucket, 1, layout, start=r)
            for j, (y, y1) in enumerate(zip(got, alone)):
                assert np.array_equal(y[r : r + 1], y1), f"{what} y{j}: row {r} differs between 1 and {n} rows"

    def check(self, got: list[np.ndarray], rows: int, what: str) -> None:
        """Each output against float64 within one rounding of the output plus f32
        accumulation (K * 2**-24 * sum |x||w|), as the H200 matrix checks; epilogues
        other than the identity get 1e-4 of the largest output more (their f32 math)."""
        x, act, spec = self.x[:rows], self.spec.act_dtype, self.spec
        z = [x @ w.T + b for w, b in zip(self.w, self.bias)]
        mags = [np.abs(x) @ np.abs(w).T for w in self.w]
        if spec.epilogue == "swiglu":
            exact = [z[0] / (1 + np.exp(-z[0])) * z[1]]
            slack = [1e-2 * np.abs(z[0] * z[1]).max()]
        else:
            exact = [EPILOGUES[spec.epilogue](zi) for zi in (z if self.spec.outputs > 1 else z[:1])]
            slack = [0.0 if spec.epilogue is None else 1e-4 * np.abs(e).max() for e in exact]
        if spec.has_residual:
            exact[0] = exact[0] + self.residual[:rows]
        for j, (y, e, mag, sl) in enumerate(zip(got, exact, mags, slack)):
            tol = ULP[act] * np.abs(e) + (self.K + 2) * 2.0**-24 * mag + sl
            err = np.abs(values(y, act) - e)
            assert (err <= tol).all(), f"{what} y{j}: worst error {err.max():.3g}, tolerance there {tol.max():.3g}"


def cancelling(case: Case, span: int, scale: float = 4096.0) -> Case:
    """`case` with its weight made of one block of `span` k repeated along K and x's rows
    made of one vector repeated with alternating signs times `scale` (plus noise): the K
    ranges' partial sums, about +-scale, cancel to a small output, so that adding them in
    another order changes its bf16 bits (outputs of random data round such changes away)."""
    f, K, rows = case.spec.weights[0], case.K, case.x.shape[0]
    block = rand((case.N, span), mx.bfloat16, 7, 0.05)
    dense = mx.concatenate([block] * (K // span), axis=1)
    if f.quantized and not f.affine:  # microscaled: uint8 scales, no biases
        wq, s = mx.quantize(dense, mode=f.mode)
        case.replace(w0=bits(wq), scales0=np.array(s))
        case.w = [microscaling.dequantize_exact(wq, s, f.group_size, f.bits, f.mode)]
    else:
        wq, s, b = mx.quantize(dense, group_size=f.group_size, bits=f.bits)
        case.replace(w0=bits(wq), scales0=bits(s), biases0=bits(b))
        case.w = [dequantize_exact(wq, s, b, f.group_size, f.bits)]
    v = np.array(rand((rows, span), mx.float32, 8))
    signs = np.repeat((-1.0) ** np.arange(K // span), span)
    x = np.tile(v, K // span) * signs * scale + np.array(rand((rows, K), mx.float32, 9))
    xb = mx.array(x.astype(np.float32)).astype(mx.bfloat16)
    case.replace(x=bits(xb))
    case.x = np.array(xb.astype(mx.float32), np.float64)
    return case


def direct(env, case: Case, bucket: int, rows: int, layout: int = ONE_TILE) -> list[np.ndarray]:
    """The direct-load kernel's outputs for `case` (the staged ring turned off), then the ring back on."""
    env.set("MLX_METILE_CUDA_MMA_STAGED", "0")
    art = kernel(case.spec, bucket, layout)
    assert art.schedule.kind == "mma" and not art.schedule.staged, art.schedule.describe()
    got = case.run_kernel(art, rows)
    env.unset("MLX_METILE_CUDA_MMA_STAGED")
    return got


def ring_sums_in_direct_order(env, spec: ProjectionSpec, K: int) -> None:
    """Every 128th k of x +-2**24 (signs alternating) over a weight of one 128-k block repeated: the K
    ranges' partial sums, near +-2**24 * w, cancel, so their f32 rounding shows in the bf16 outputs.
    The staged ring (stages of 4 groups) gives the direct loads' bits, while stages of 8 groups
    (GROUPS=8: other K ranges) give other bits - so the comparison sees the order of the sums."""
    case = cancelling(Case(spec, K, 32, rows=8), span=128, scale=0.0)
    x = case.x.copy()
    x[:, ::128] = 2.0**24 * (-1.0) ** np.arange(K // 128)
    case.replace(x=bits(mx.array(x.astype(np.float32)).astype(mx.bfloat16)))
    want = direct(env, case, 8, 8)
    art = kernel(spec, 8, ONE_TILE)
    assert art.schedule.staged and art.schedule.groups == 4, art.schedule.describe()
    assert same(case.run_kernel(art, 8), want)
    set_knobs(env, {"GROUPS": "8"})
    other = kernel(spec, 8, ONE_TILE)
    assert other.schedule.staged and other.schedule.groups == 8, other.schedule.describe()
    assert not same(case.run_kernel(other, 8), want), "other K ranges gave the same bits: the check is blind"


def ring_rows_match_direct(env, case: Case, scale_copy: int) -> None:
    """At 1, 4, 16 and 32 rows (each row bucket's kernel; 32 rows also in the several-tile layout)
    the staged ring's kernel - stages of 4 groups, a column's scales of a stage one copy of
    `scale_copy` bytes - within tolerance, the bits of the direct-load kernel, and the first, middle
    and last rows the bits of that row computed alone (the 1-row kernel)."""
    spec = case.spec
    for bucket, rows, layout in (
        (1, 1, ONE_TILE),
        (4, 4, ONE_TILE),
        (16, 16, ONE_TILE),
        (32, 32, ONE_TILE),
        (32, 32, TILES),
    ):
        art = kernel(spec, bucket, layout)
        assert art.schedule.kind == "mma" and art.schedule.staged, art.schedule.describe()
        assert art.schedule.groups == 4, art.schedule.describe()
        assert f"metile_cp_small<{scale_copy}>(" in art.source
        got = case.run_kernel(art, rows)
        what = f"{spec.name()} rows={rows} layout={layout}"
        case.check(got, rows, what)
        assert same(got, direct(env, case, bucket, rows, layout)), f"{what}: the direct loads give other bits"
        case.invariant(got, what, bucket=1)


def shared_x_matches_direct(env, spec: ProjectionSpec, label: str) -> None:
    """MLX_METILE_CUDA_MMA_XSHARE=4 (shared x, mma_xshare.py, over the same staged weights) on a
    32-row SwiGLU `spec`: within tolerance and the bits of the direct loads and of the K-split ring."""
    case = Case(spec, 1024, 64, rows=32)
    want = direct(env, case, 32, 32, TILES)
    split = case.run(32, 32, TILES)
    set_knobs(env, {"XSHARE": "4"})
    art = kernel(spec, 32, TILES)
    assert art.schedule.xshare == 4 and art.schedule.staged, art.schedule.describe()
    got = case.run_kernel(art, 32)
    case.check(got, 32, f"{label} shared x")
    assert same(got, want) and same(split, want)
