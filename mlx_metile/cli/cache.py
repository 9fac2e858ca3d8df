"""`mlx-metile cache` (where the caches are, their sizes: kernels, the tuner's store, patch()'s
verification records) and `mlx-metile cache clear`."""

from __future__ import annotations

import argparse
import shutil

from .info import caches, human


def show(args: argparse.Namespace) -> int:
    for name, path, size in caches():
        print(f"{name}: {path} ({human(size)})")
    return 0


def clear(args: argparse.Namespace) -> int:
    from .. import settings

    root = settings.current().cache_root
    if not root.is_dir():
        print(f"nothing to clear: {root} does not exist")
        return 0
    freed = 0
    for _, path, size in caches()[1:]:
        if args.dry_run:
            print(f"would remove {path} ({human(size)})")
        else:
            shutil.rmtree(path, ignore_errors=True)
            print(f"removed {path} ({human(size)})")
        freed += size
    print(f"{'would free' if args.dry_run else 'freed'} {human(freed)} under {root}")
    return 0


def add_parser(sub) -> None:
    c = sub.add_parser(
        "cache",
        help="the caches (kernels, tuner, verification records): where and how large; `cache clear` empties them",
    )
    c.set_defaults(func=show)
    actions = c.add_subparsers(dest="action", metavar="ACTION")
    cl = actions.add_parser(
        "clear", help="empty the cache root: kernels are rebuilt and models verified again when next needed"
    )
    cl.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    cl.set_defaults(func=clear)
