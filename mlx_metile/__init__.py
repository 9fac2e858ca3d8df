"""mlx-metile: fused, row-reusing projection kernels for MLX from a small tile compiler."""

from . import nn
from .formats import QuantizedWeight
from .integrations import PatchReport, patch
from .ops import fused_linear, linear, matmul, quantized_linear
from .projection import Projection
from .trace import Trace, TraceRecord, trace
from .tune import autotune

__version__ = "0.1.0"

__all__ = [
    "PatchReport",
    "Projection",
    "QuantizedWeight",
    "Trace",
    "TraceRecord",
    "autotune",
    "fused_linear",
    "linear",
    "matmul",
    "nn",
    "patch",
    "quantized_linear",
    "trace",
]
