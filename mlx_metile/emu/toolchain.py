"""Finding clang and the per-user cache the emulator builds into."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

from .. import cache
from ..settings import current, environment_path

MIN_CLANG = 17
INSTALL_HINT = (
    "the Metal emulator needs clang >= 17 with compiler-rt: install Debian's "
    "`clang-19 libclang-rt-19-dev` (apt-get install clang-19 libclang-rt-19-dev) "
    "or point MLX_METILE_CLANG at a clang binary"
)


class ToolchainError(RuntimeError):
    """No usable clang was found."""


def _version(clang: str) -> int:
    out = subprocess.run([clang, "--version"], capture_output=True, text=True, check=False)
    m = re.search(r"clang version (\d+)", out.stdout)
    return int(m.group(1)) if m else 0


@lru_cache(maxsize=1)
def find_clang() -> str:
    """MLX_METILE_CLANG, else the newest clang-NN (or clang) on PATH."""
    explicit = current().clang  # (checked to be an executable file by the settings)
    if explicit:
        return explicit
    candidates = []
    for d in environment_path():
        if not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            m = re.fullmatch(r"clang-(\d+)", name)
            if m:
                candidates.append((int(m.group(1)), os.path.join(d, name)))
    plain = shutil.which("clang")
    if plain:
        candidates.append((_version(plain), plain))
    for ver, path in sorted(candidates, reverse=True):
        if ver >= MIN_CLANG:
            return path
    raise ToolchainError(f"no clang >= {MIN_CLANG} found; {INSTALL_HINT}")


def tool_beside_clang(name: str) -> str | None:
    """llvm-symbolizer / llvm-cxxfilt of the same LLVM release, if installed."""
    clang = find_clang()
    suffix = re.search(r"-(\d+)$", clang)
    for cand in ([f"{name}-{suffix.group(1)}"] if suffix else []) + [name]:
        found = shutil.which(cand)
        if found:
            return found
    return None


def cache_root(sub: str) -> Path:
    """A folder of the package's cache (mlx_metile.cache.root)."""
    return cache.root(sub)


def cache_dir() -> Path:
    return cache_root("emu")


def run_clang(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([find_clang(), *args], capture_output=True, text=True, check=False)
