"""MLX_METILE_DEBUG=ir,msl,schedule,trace: print pipeline stages to stderr."""

from __future__ import annotations

import os
import sys


def enabled(stage: str) -> bool:
    flags = {s.strip() for s in os.environ.get("MLX_METILE_DEBUG", "").split(",") if s.strip()}
    return stage in flags or "all" in flags


def dump(stage: str, title: str, text: str) -> None:
    if enabled(stage):
        print(f"=== mlx_metile {stage}: {title} ===\n{text}", file=sys.stderr)
