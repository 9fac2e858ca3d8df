"""Integrations with model libraries (mlx-lm)."""

from .mlx_lm import PatchReport, patch

__all__ = ["PatchReport", "patch"]
