"""The tuned table: decisions of the tuner (mlx_metile.tune) that `choose` and the dispatch read.

An entry maps a call's (target, spec, row bucket, shape) to a `Route`: the stock MLX composition
("native"), or a backend's kernel with the Schedule it runs and, on CUDA, the compiler that built
it. The tuner installs entries; while it times a candidate it forces one route for a (target,
spec, shape) for every row bucket (`forcing`), so that candidates run through the very path a
decided call takes. Nothing here measures or decides: it holds what the tuner wrote.

`state()` names the table's contents (a counter of installs, and the route forced, if any): the
dispatch keys its compiled-kernel and launch-plan caches with it, so a changed decision is never
served a stale kernel or plan.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

from ..settings import Settings
from ..spec import ProjectionSpec
from ..targets import Target
from . import decisions
from .route import NATIVE, Route

__all__ = ["NATIVE", "Route", "active", "forcing", "forget", "install", "installed", "key", "lookup", "state"]

Key = tuple  # (target, spec, row bucket, Shape)

_table: dict[Key, Route] = {}
_installs = [0]
# ((target, spec, shape), route) pairs, innermost last: per thread (and task), so that a tuner timing
# a candidate in one thread never sends another thread's calls to it
_forced: ContextVar[tuple] = ContextVar("mlx_metile_tuned_forced", default=())
_lock = threading.Lock()


def key(target: Target, spec: ProjectionSpec, bucket: int, shape) -> Key:
    return (target, spec, bucket, shape)


def active(cuda: bool = False) -> bool:
    """Whether any decision is installed or forced - or, for a CUDA call (`cuda`), in the
    decisions file (the dispatch skips the lookup otherwise)."""
    return bool(_table) or bool(_forced.get()) or (cuda and decisions.present())


def lookup(target: Target, spec: ProjectionSpec, bucket: int, shape, cfg: Settings | None = None) -> Route | None:
    """The route forced or installed for a call, else the decisions file's (schedule.decisions),
    or None (choose's rules decide)."""
    forced = _forced.get()
    if forced:
        for (t, s, sh), route in reversed(forced):
            if t == target and s == spec and sh == shape:
                return route
    route = _table.get((target, spec, bucket, shape))
    return route if route is not None else decisions.lookup(target, spec, bucket, shape, cfg)


def install(entries: Mapping[Key, Route]) -> None:
    """Add (or replace) decisions."""
    with _lock:
        _table.update(entries)
        _installs[0] += 1


def forget() -> None:
    """Drop every installed decision (choose's rules decide again)."""
    with _lock:
        _table.clear()
        _installs[0] += 1


def installed() -> dict[Key, Route]:
    return dict(_table)


def state() -> tuple:
    """What the table holds now, as a hashable token for caches keyed by decisions."""
    forced = _forced.get()
    return (_installs[0], forced) if forced else (_installs[0],)


@contextmanager
def forcing(target: Target, spec: ProjectionSpec, shape, route: Route) -> Iterator[None]:
    """Within the block (and only in this thread), calls of (target, spec, shape) take `route` at
    every row bucket."""
    token = _forced.set((*_forced.get(), ((target, spec, shape), route)))
    try:
        yield
    finally:
        _forced.reset(token)
