"""`python -m mlx_metile ...`: the `mlx-metile` command (mlx_metile/cli/)."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
