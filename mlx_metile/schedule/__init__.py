"""The schedule room: `Schedule` (every knob of a kernel as a value) and `choose`, which decides
it from hand rules per target, tuned tables (data files), the tuner's decisions (`tuned`) and the
settings' overrides."""

from .buckets import MAX_ROWS_PER_PROGRAM, ROW_BUCKETS, TILED_BUCKET, row_bucket
from .choice import NORM_FUSED_MAX_COLUMNS, Shape, choose, fuses_norm, norm_pays, rules, takes_mma, tensor_cores
from .schedule import SIMD_WIDTH, Schedule
from .tuned import Route

__all__ = [
    "MAX_ROWS_PER_PROGRAM",
    "NORM_FUSED_MAX_COLUMNS",
    "ROW_BUCKETS",
    "SIMD_WIDTH",
    "TILED_BUCKET",
    "Route",
    "Schedule",
    "Shape",
    "choose",
    "fuses_norm",
    "norm_pays",
    "row_bucket",
    "rules",
    "takes_mma",
    "tensor_cores",
]
