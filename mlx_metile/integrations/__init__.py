"""Integrations with model libraries (mlx-lm)."""

from . import sharded  # noqa: F401  (adds patch()'s rules for tensor-parallel models)
from .mlx_lm import PatchReport, patch

__all__ = ["PatchReport", "patch"]
