"""The projection family as one tile program:

    y = epilogue(x @ W.T + bias) (+ residual)

for dense or affine-quantized weights, several weights fused behind one read
of x: without an epilogue (or with a per-output one) the weights' columns are
concatenated and each output takes its range; SwiGLU accumulates gate and up
side by side. Each weight format's dequantisation is its own (mlx_metile.formats). Tile sizes
BM/BN/BK are meta-parameters bound by the schedule.
"""

from __future__ import annotations

from ..formats import module_of
from ..ir.builder import Builder, T
from ..ir.nodes import Program
from ..spec import ProjectionSpec

_UNARY_EPILOGUES = {"gelu", "gelu_approx", "silu"}


def projection_program(spec: ProjectionSpec) -> Program:
    b = Builder(spec.name(), grid_rank=2)
    BM, BN, BK = b.meta_param("BM"), b.meta_param("BN"), b.meta_param("BK")
    act = spec.act_dtype
    b.buffer("x", act)
    if spec.norm_eps is not None:  # RMSNorm's weight, applied by the CUDA tensor-core lowering only
        b.buffer("norm", act)
    for i, wf in enumerate(spec.weights):
        module_of(wf).declare(b, i, wf)
        if wf.has_bias:
            b.buffer(f"bias{i}", wf.bias_dtype)
    if spec.has_residual:
        b.buffer("residual", act)
    for j in range(spec.outputs):
        b.buffer(f"y{j}", act, output=True)
    M = b.scalar("M")
    K = b.scalar("K")
    Ns = [b.scalar(f"N{i}") for i in range(len(spec.weights))]

    pid_n, pid_m = b.program_id(0), b.program_id(1)
    rows = pid_m * BM + b.arange(BM)
    cols = pid_n * BN + b.arange(BN)
    row_ok = rows < M

    # Column sets: SwiGLU keeps gate and up apart on the same columns; otherwise
    # weight i owns columns [base_i, base_i + N_i) of one concatenation.
    if spec.epilogue == "swiglu":
        sets = [[(0, 0)], [(1, 0)]]
    else:
        bases, acc_base = [], 0
        for i in range(len(spec.weights)):
            bases.append(acc_base)
            acc_base = Ns[i] + acc_base if i else Ns[i]
        sets = [[(i, bases[i]) for i in range(len(spec.weights))]]

    def owns(i: int, base: T | int) -> tuple[T, T]:
        """Weight i's local column index and whether this column is one of its own."""
        if isinstance(base, int):  # the first weight starts at column 0
            return cols, cols < Ns[i]
        local = cols - base
        return local, (local >= 0) & (local < Ns[i])

    accs = [b.zeros((BM, BN)) for _ in sets]
    with b.loop(0, K, BK, init=accs) as lp:
        ks = lp.iv + b.arange(BK)
        k_ok = ks < K
        xt = b.load("x", rows[:, None] * K + ks[None, :], row_ok[:, None] & k_ok[None, :])
        new = []
        for acc, members in zip(lp.carried, sets):
            w = None
            for i, base in members:
                local, ok = owns(i, base)
                wf = spec.weights[i]
                tile = module_of(wf).tile(b, i, wf, local, ok, ks, k_ok, K)
                w = tile if w is None else w + tile  # masks make the members disjoint
            new.append(b.dot(xt, w.T, acc))
        lp.yield_(*new)
    results = lp.results

    def with_bias(acc: T, members) -> T:
        for i, base in members:
            if spec.weights[i].has_bias:
                local, ok = owns(i, base)
                acc = acc + b.load(f"bias{i}", local, ok).to("f32")[None, :]
        return acc

    zs = [with_bias(r, m) for r, m in zip(results, sets)]
    if spec.epilogue == "swiglu":
        out = b.unary("silu", zs[0]) * zs[1]
    elif spec.epilogue in _UNARY_EPILOGUES:
        out = b.unary(spec.epilogue, zs[0])
    else:
        out = zs[0]
    if spec.has_residual:
        res = b.load("residual", rows[:, None] * Ns[0] + cols[None, :], row_ok[:, None] & (cols < Ns[0])[None, :])
        out = out + res.to("f32")
    out = out.to(act)

    if spec.outputs == 1 and (spec.epilogue == "swiglu" or spec.has_residual or len(spec.weights) == 1):
        b.store("y0", rows[:, None] * Ns[0] + cols[None, :], out, row_ok[:, None] & (cols < Ns[0])[None, :])
    else:
        for i, base in sets[0]:
            local, ok = owns(i, base)
            b.store(f"y{i}", rows[:, None] * Ns[i] + local[None, :], out, row_ok[:, None] & ok[None, :])
    return b.build()
