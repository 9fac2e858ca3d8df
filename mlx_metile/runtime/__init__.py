"""Artifacts, the compile pipeline and its caches."""

from .artifact import Artifact
from .pipeline import compile_projection, emulation_enabled, emulator_object

__all__ = ["Artifact", "compile_projection", "emulation_enabled", "emulator_object"]
