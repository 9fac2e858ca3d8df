"""Kernel settings of a tuning variant, given as text: "VAR=v;VAR=v" (names with or without the
MLX_METILE_ prefix), or "default" for none - the A/B harness's variants and the sweep's settings
(tools/h200/cuda_sweep.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from mlx_metile import settings

KEPT = ("MLX_METILE_CUDA_ARCH",)  # the build target stays as the caller set it


def assignments(text: str) -> dict[str, str]:
    """{"MLX_METILE_...": value} of the text; ValueError for an item without "=" or a name that
    is not a CUDA setting of mlx-metile."""
    out = {}
    for item in filter(None, "" if text == "default" else text.split(";")):
        name, eq, value = item.partition("=")
        name = name.strip()
        name = name if name.startswith(settings.PREFIX) else settings.PREFIX + name
        if not eq or not name.startswith(settings.PREFIX + "CUDA_") or name not in settings.DECLARED:
            raise ValueError(f"{item!r}: expected MLX_METILE_CUDA_<NAME>=value of a declared setting")
        out[name] = value
    return out


@contextmanager
def cuda_settings(text: str) -> Iterator[settings.Settings]:
    """Within the block these assignments are the only MLX_METILE_CUDA_* settings (besides KEPT):
    the others are unset, the settings reparsed, and everything restored after.
    The compile cache is keyed by the chosen Schedule and the dispatch's launch plans by the
    settings' reload count, so nothing needs clearing."""
    cleared = {n: None for n in settings.DECLARED if n.startswith(settings.PREFIX + "CUDA_") and n not in KEPT}
    with settings.override(**{**cleared, **assignments(text)}) as cfg:
        yield cfg
