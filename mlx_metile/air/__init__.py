"""AIR (Apple's LLVM IR for Metal): metallib archives read and written byte for byte, and AIR
kernels run on the CPU - retargeted to x86-64 and executed on the Metal emulator's fiber runtime."""

from .errors import AirError, MetallibError, ToolError
from .library import Function, Library
from .metallib import FunctionConstant, Metallib, MetallibFunction

__all__ = [
    "AirError",
    "Function",
    "FunctionConstant",
    "Library",
    "Metallib",
    "MetallibError",
    "MetallibFunction",
    "ToolError",
]
