"""MLX_METILE_DEBUG=ir,msl,schedule,trace: print pipeline stages to stderr."""

from __future__ import annotations

import sys

from ..settings import current


def enabled(stage: str) -> bool:
    return current().debugging(stage)


def dump(stage: str, title: str, text: str) -> None:
    if enabled(stage):
        print(f"=== mlx_metile {stage}: {title} ===\n{text}", file=sys.stderr)
