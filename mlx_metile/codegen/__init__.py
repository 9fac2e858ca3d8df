"""Renderers: a shared C-like core with one dialect per target."""

from .cuda import CUDARenderer
from .msl import MSLRenderer

RENDERERS = {"msl": MSLRenderer, "cuda": CUDARenderer}

__all__ = ["CUDARenderer", "MSLRenderer", "RENDERERS"]
