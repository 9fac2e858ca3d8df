"""The C++ core (`mlx_metile._ext`): the CPU, emulator and Metal primitive, and the CUDA launch
from C++; None where the package was installed without it."""

from __future__ import annotations

try:
    import mlx_metile._ext as _ext
except ImportError as e:  # pragma: no cover - only where the extension was not built
    _ext = None
    ERROR = str(e)
else:
    ERROR = ""


def require():
    """The extension, or a RuntimeError saying it is missing."""
    if _ext is None:
        raise RuntimeError(f"mlx_metile: the C++ extension is not built ({ERROR}); reinstall the package")
    return _ext


def has_metal() -> bool:
    return _ext is not None and bool(_ext.HAS_METAL)
