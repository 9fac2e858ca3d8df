"""Metal-on-CPU emulator: compiles MSL compute kernels as C++ against a Metal
shim (clang) and runs them on CPU fibers with Metal's execution model."""

from .build import CompileError
from .kernel import DispatchStats, EmulatorError, Kernel, KernelFault
from .toolchain import ToolchainError, find_clang
from .translate import TranslateError

__all__ = [
    "CompileError",
    "DispatchStats",
    "EmulatorError",
    "Kernel",
    "KernelFault",
    "ToolchainError",
    "TranslateError",
    "find_clang",
]
