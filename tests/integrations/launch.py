"""The tests' shorthand for mlx_metile.integrations.launch: `python -m MODULE OUT *ARGS` on real
ring ranks from the checkout's root, every rank's JSON in rank order."""

from __future__ import annotations

import sys
from pathlib import Path

from mlx_metile.integrations.launch import RankFailure
from mlx_metile.integrations.launch import launch as launch_ranks

ROOT = Path(__file__).resolve().parents[2]

__all__ = ["RankFailure", "launch"]


def launch(ranks: int, module: str, args: list[str], out: Path, timeout: float) -> list[dict]:
    return launch_ranks(ranks, [sys.executable, "-m", module, str(out), *args], out, timeout, cwd=ROOT)
