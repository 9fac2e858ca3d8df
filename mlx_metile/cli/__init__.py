"""The `mlx-metile` command: `demo`, `generate`, `bench`, `info`, `cache`, `tune`; `--version` on each."""

from __future__ import annotations

import argparse
import sys

from . import bench, cache, demo, generate, info, tune
from .errors import UsageError


def version() -> str:
    import mlx.core as mx

    import mlx_metile

    return f"mlx-metile {mlx_metile.__version__} (MLX {mx.__version__}, Python {sys.version.split()[0]})"


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="mlx-metile", description=__doc__)
    top.add_argument("--version", action="version", version=version())
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (demo, generate, bench, info, cache, tune):
        module.add_parser(sub)
    for command in sub.choices.values():
        command.add_argument("--version", action="version", version=version())
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as e:
        print(f"mlx-metile {args.command}: error: {e}", file=sys.stderr)
        return 2
