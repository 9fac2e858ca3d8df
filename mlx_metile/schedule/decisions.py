"""Decisions files: tuned routes measured on a known GPU, shipped as data (tables/cuda_decisions.json,
where the package has one), or a file of the user's own (MLX_METILE_CUDA_DECISIONS). `tuned.lookup` reads one where the tuner
installed no decision for a call: an entry applies to calls of its exact CUDA architecture, spec
(its kernel name: formats, bias, epilogue, residual, K multiple), K, output columns and row bucket.

Settings that steer the schedules (MLX_METILE_CUDA_MMA_*, ...) turn the file off: the user's
knob then applies to the rules, as it would without a file.

A file is written by `mlx_metile.tune.export_decisions` from a tuner's store (tools/h200/tune_cuda.py
on the H200); nothing here measures or decides. A malformed file is a ValueError naming the file
and the entry, raised where it is first read.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from ..settings import Settings, current
from ..spec import ProjectionSpec
from ..targets import CudaTarget, Target
from .route import Route

SHIPPED = Path(__file__).with_name("tables") / "cuda_decisions.json"
FORMAT = 1  # the file's "format": what this module reads

Entry = tuple[str, str, int, int, int]  # (arch, spec name, bucket, K, columns)
_DEFAULTS = Settings()  # (steered() runs on every CUDA call the dispatch checks)


def steered(cfg: Settings) -> bool:
    """Whether a setting steers the CUDA schedules (an MLX_METILE_CUDA_MMA_* knob, the SIMT
    tuning, the tensor-core switches): then the hand rules under it decide, not a decisions file
    measured without it."""
    return bool(cfg.mma or cfg.cuda_tune) or any(
        getattr(cfg, f) != getattr(_DEFAULTS, f)
        for f in ("cuda_mma", "cuda_mma_dense", "cuda_mma_fused", "cuda_mma_staged", "cuda_mma_staged_lowbit")
    )


def path(cfg: Settings | None = None) -> Path | None:
    """The decisions file in effect: MLX_METILE_CUDA_DECISIONS, else the package's; None when off
    or where a setting steers the schedules (`steered`)."""
    cfg = cfg or current()
    chosen = cfg.cuda_decisions
    if chosen == "" or steered(cfg):
        return None
    return Path(chosen) if chosen is not None else SHIPPED


def present() -> bool:
    """Whether the file in effect holds any entry."""
    p = path()
    return p is not None and bool(load(str(p)))


def lookup(target: Target, spec: ProjectionSpec, bucket: int, shape, cfg: Settings | None = None) -> Route | None:
    if not isinstance(target, CudaTarget):
        return None
    p = path(cfg)
    if p is None:
        return None
    return load(str(p)).get((target.arch, spec.name(), bucket, shape.K, shape.columns))


def load(file: str) -> dict[Entry, Route]:
    """The entries of a decisions file (the package's may be absent: no entries), read again
    when the file changes."""
    p = Path(file)
    if p == SHIPPED and not shipped():
        return {}
    try:
        stamp = p.stat().st_mtime_ns
    except OSError:
        stamp = -1  # (parse() says what is wrong)
    return parse(file, stamp)


@lru_cache(maxsize=1)
def shipped() -> bool:
    """Whether the package has a decisions file (package data: looked for once, not on every call)."""
    return SHIPPED.is_file()


@lru_cache(maxsize=8)
def parse(file: str, stamp: int) -> dict[Entry, Route]:
    p = Path(file)
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"decisions file {file}: cannot be read as JSON ({e})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), list):
        raise ValueError(f'decisions file {file}: expected an object with "format": {FORMAT} and a list "entries"')
    out: dict[Entry, Route] = {}
    for i, e in enumerate(data["entries"]):
        try:
            k = (str(e["arch"]), str(e["spec"]), int(e["bucket"]), int(e["K"]), int(e["columns"]))
            route = Route.from_dict(e["route"])
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"decisions file {file}: entry {i}: {err!r}") from None
        if route.backend != "cuda":
            raise ValueError(f"decisions file {file}: entry {i}: a route of backend {route.backend!r}, expected 'cuda'")
        if k in out:
            raise ValueError(f"decisions file {file}: entry {i} repeats {k}")
        out[k] = route
    return out
