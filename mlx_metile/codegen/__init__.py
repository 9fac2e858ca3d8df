"""Renderers: a shared C-like core with one dialect per target."""

from .msl import MSLRenderer

RENDERERS = {"msl": MSLRenderer}

__all__ = ["MSLRenderer", "RENDERERS"]
