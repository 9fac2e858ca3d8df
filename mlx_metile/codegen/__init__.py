"""Renderers: a shared C-like core with one dialect per target (MSL, CUDA), and AIR (LLVM IR)."""

from .air import AirForm, AIRRenderer
from .cuda import CUDARenderer
from .msl import MSLRenderer

RENDERERS = {"msl": MSLRenderer, "cuda": CUDARenderer, "air": AIRRenderer}

__all__ = ["AIRRenderer", "AirForm", "CUDARenderer", "MSLRenderer", "RENDERERS"]
