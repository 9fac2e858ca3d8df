"""MLX's macOS wheel, mlx-metal 0.32.4, fetched with pip into the test cache: MLX's own Metal kernel
headers (NAX ones included) and its Apple-compiled `mlx/lib/mlx.metallib` - code nobody here wrote,
on which the emulator and the AIR executor are proven. It installs nothing on this machine.

`wheel_root()` returns the unpacked wheel (the directory holding `mlx/`). Where pip cannot reach a
package registry the calling test is skipped, saying so; any other failure fails the test."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

VERSION = "0.32.4"
KERNELS = Path("mlx/include/mlx/backend/metal/kernels")
METALLIB = Path("mlx/lib/mlx.metallib")

# pip's words when no registry answered (as opposed to a broken pip or a bad wheel).
_UNREACHABLE = (
    "Could not find a version that satisfies",
    "No matching distribution found",
    "Max retries exceeded",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "Connection refused",
    "timed out",
)


def _cache() -> Path:
    from mlx_metile import settings

    return settings.current().cache_root / f"mlx-metal-{VERSION}"


def _download(into: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--platform", "macosx_14_0_arm64", f"mlx-metal=={VERSION}", "-d", str(into), "-q"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    wheels = sorted(into.glob(f"mlx_metal-{VERSION}-*.whl"))
    if done.returncode == 0 and wheels:
        return wheels[0]
    said = (done.stdout + done.stderr).strip()
    if any(words in said for words in _UNREACHABLE):
        pytest.skip(f"mlx-metal {VERSION} could not be fetched: no package registry reachable ({said[-300:]})")
    raise RuntimeError(f"pip download mlx-metal=={VERSION} failed (exit {done.returncode}): {said[-2000:]}")


def wheel_root() -> Path:
    root = _cache() / "wheel"
    if (root / METALLIB).is_file() and (root / KERNELS / "quantized.h").is_file():
        return root
    _cache().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=_cache()) as work:
        wheel = _download(Path(work))
        unpacked = Path(work) / "wheel"
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(unpacked)
        try:
            os.replace(unpacked, root)  # atomic: a concurrent fetch that finished first wins
        except OSError:
            if not (root / METALLIB).is_file():
                raise
    return root
