"""The facts every result file carries: the date, the machine, the versions and the settings
that differ from mlx-metile's defaults (none: the defaults)."""

from __future__ import annotations

import datetime
import platform
import sys
from dataclasses import fields

import mlx.core as mx

import mlx_metile
from mlx_metile import settings


def changed_settings() -> dict[str, str]:
    """The settings fields whose values are not the defaults (e.g. {"cuda_mma_dense": "1"})."""
    now, default = settings.current(), settings.Settings()
    skip = {"xdg_cache_home", "cuda_home"}  # other programs' variables, not mlx-metile's choices
    return {
        f.name: str(getattr(now, f.name))
        for f in fields(now)
        if f.name not in skip and getattr(now, f.name) != getattr(default, f.name)
    }


def facts() -> dict:
    """Date (UTC), device, platform and versions of this process, and its changed settings."""
    device = mx.default_device()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": str(device),
        "device_info": {k: str(v) for k, v in mx.device_info(device).items()},
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "mlx": mx.__version__,
        "mlx_metile": mlx_metile.__version__,
        "settings": changed_settings(),
    }
