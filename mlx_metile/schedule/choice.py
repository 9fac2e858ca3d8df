"""`choose`: the one place a schedule is decided - hand rules per target, the tuned tables, and
the settings' overrides. The dispatch and the pipeline call only this."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..settings import Settings, current
from ..spec import ProjectionSpec
from ..targets import CudaTarget, Target
from .buckets import MAX_ROWS_PER_PROGRAM, row_bucket
from .cuda_layouts import DEEP, bucket_layout, column_layout
from .cuda_mma import MmaRules
from .nax import nax_schedule, require_nax
from .schedule import Schedule
from .simt import simt_schedule
from .tuned import lookup

# The fused RMSNorm measured faster than mx.fast.rms_norm before the same kernel for q/k/v (at most
# this many output columns, no SwiGLU); docs/SCHEDULES.md, "Norm fusion".
NORM_FUSED_MAX_COLUMNS = 8192


@dataclass(frozen=True)
class Shape:
    """What the rules read of a call's shape besides the spec: K and the output columns (the
    weights' concatenated N; for SwiGLU one weight's)."""

    K: int
    columns: int


def cuda_layout(spec: ProjectionSpec, rows: int, shape: Shape, target: CudaTarget, cfg: Settings) -> int:
    """The column layout of a CUDA product (cuda_layouts), per row bucket for single products."""
    one_weight = len(spec.weights) == 1 and spec.epilogue != "swiglu"
    w = spec.weights[0]
    layout = column_layout(shape.columns, shape.K, one_weight and w.quantized, target.layout_sms, cfg)
    if one_weight:
        layout = bucket_layout(layout, shape.K, row_bucket(rows), w, cfg)
    return layout


def tensor_cores(target: Target, cfg: Settings) -> bool:
    """Whether the target's tensor-core schedules are on (sm_80+, not MLX_METILE_CUDA_MMA=0)."""
    return isinstance(target, CudaTarget) and cfg.cuda_mma and target.tensor_cores


def takes_mma(spec: ProjectionSpec, target: Target, cfg: Settings) -> bool:
    return tensor_cores(target, cfg) and MmaRules(spec, cfg, target).supported()


def choose(spec: ProjectionSpec, rows: int, target: Target, shape: Shape, cfg: Settings | None = None) -> Schedule:
    """The schedule of `spec` for calls of `rows` rows (their row bucket) on `target`: the tuned
    table's where a decision names one (schedule.tuned, which also reads the decisions file:
    schedule.decisions), else the hand rules'. On Metal targets the rules give the simdgroup
    schedules unless MLX_METILE_METAL_SCHEDULE asks for a NAX one (never measured on an Apple GPU,
    so never the default: docs/SCHEDULES.md)."""
    bucket = row_bucket(rows)
    route = lookup(target, spec, bucket, shape, cfg)
    if route is not None and route.schedule is not None:
        if route.schedule.nax:
            require_nax(route.schedule.kind, target, spec, f"the tuned decision {route.name!r}")
        return route.schedule
    return _choose(spec, bucket, target, shape, cfg or current())


def rules(spec: ProjectionSpec, rows: int, target: Target, shape: Shape, cfg: Settings | None = None) -> Schedule:
    """The hand rules' schedule, whatever the tuner installed or a decisions file holds: what the
    tuner's candidates vary around."""
    return _choose(spec, row_bucket(rows), target, shape, cfg or current())


@lru_cache(maxsize=4096)
def _choose(spec: ProjectionSpec, bucket: int, target: Target, shape: Shape, cfg: Settings) -> Schedule:
    mma = takes_mma(spec, target, cfg)
    if spec.norm_eps is not None and not mma:
        raise ValueError(
            f"{spec.name()}: a fused RMSNorm needs CUDA's tensor-core schedule (sm_80+, bf16/f16 activations); "
            "elsewhere normalise x first (mx.fast.rms_norm)"
        )
    if mma and bucket <= MAX_ROWS_PER_PROGRAM:
        layout = cuda_layout(spec, bucket, shape, target, cfg)
        return MmaRules(spec, cfg, target).schedule(bucket, layout)
    if target.language == "msl" and cfg.metal_schedule != "simdgroup":
        return nax_schedule(spec, bucket, cfg.metal_schedule, target)
    return simt_schedule(spec, bucket, target.language, cfg)


def norm_pays(epilogue: str | None, columns: int) -> bool:
    """Whether an RMSNorm the kernel can take goes into it: no SwiGLU and at most
    NORM_FUSED_MAX_COLUMNS output columns (q/k/v). A rule on the weights only: one on the row
    count would change a row's bits with the batch."""
    return epilogue is None and columns <= NORM_FUSED_MAX_COLUMNS


def fuses_norm(spec: ProjectionSpec, rows: int, target: Target, shape: Shape, cfg: Settings | None = None) -> bool:
    """Whether `spec` (its norm_eps set) takes its RMSNorm inside the kernel: CUDA's tensor-core
    schedule at up to 32 rows with bf16 activations, not the DEEP layout (whose warps take two K
    ranges at 16-32 rows), not under MLX_METILE_CUDA_GRADIENTS (whose vjp composes stock ops), and
    where it pays (norm_pays). The caller checks the norm weight is bf16 too."""
    cfg = cfg or current()
    if not isinstance(target, CudaTarget) or spec.act_dtype != "bf16" or rows > MAX_ROWS_PER_PROGRAM:
        return False
    if cfg.cuda_gradients or not takes_mma(spec, target, cfg):
        return False
    if cuda_layout(spec, rows, shape, target, cfg) == DEEP:
        return False
    return norm_pays(spec.epilogue, shape.columns)
