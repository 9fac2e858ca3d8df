"""The AIR room's errors."""

from __future__ import annotations

from .metallib import MetallibError


class AirError(ValueError):
    """AIR this executor cannot run: malformed metadata, an unsupported intrinsic or parameter,
    a function constant not set. The message names the kernel and what is wrong."""


class ToolError(RuntimeError):
    """An LLVM tool the executor needs is missing or failed; the message says which and why."""


__all__ = ["AirError", "MetallibError", "ToolError"]
