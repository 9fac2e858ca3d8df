"""The kernel caches' files: content-addressed, written atomically, verified before use.

Every cached file has a sidecar `<name>.sum` holding the key it was built for and the SHA-256
of its bytes. A file is used only where both match, so a truncated, zeroed, flipped or swapped
object is rebuilt (with a one-line warning), never loaded. Writers use temporary names unique
per process and thread and rename into place, so concurrent builders of one kernel both
succeed. A cache directory that cannot be written falls back to a private temporary one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
import warnings
from pathlib import Path

from .settings import current


class CacheError(RuntimeError):
    """A cache path that cannot be repaired (named in the message)."""


_fallback: dict[str, Path] = {}
_warned: set[str] = set()
_lock = threading.Lock()


def _warn_once(key: str, message: str) -> None:
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(f"mlx_metile: {message}", RuntimeWarning, stacklevel=3)


def _usable_dir(path: Path) -> bool:
    try:
        if path.exists() and not path.is_dir():
            path.unlink()  # a file where the cache's directory should be
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".probe.{os.getpid()}.{threading.get_ident()}"
        probe.write_bytes(b"")
        probe.unlink()
        return True
    except OSError:
        return False


def root(sub: str) -> Path:
    """A folder of the cache (MLX_METILE_CACHE, else $XDG_CACHE_HOME/mlx_metile, else
    ~/.cache/mlx_metile); a private temporary one, with a warning, where it cannot be written."""
    path = current().cache_root / sub
    if _usable_dir(path):
        return path
    with _lock:
        private = _fallback.get(sub)
        if private is None:
            private = _fallback[sub] = Path(tempfile.mkdtemp(prefix=f"mlx_metile-{sub}-"))
    _warn_once(f"root:{path}", f"the cache {path} cannot be written; using {private} for this process")
    return private


def temporary(path: Path) -> Path:
    """A name beside `path` that no other process or thread uses."""
    token = os.urandom(4).hex()
    return path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.{token}.tmp")


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sum_path(path: Path) -> Path:
    return path.with_name(path.name + ".sum")


def discard(path: Path) -> None:
    """Remove a cached file and its sidecar, whatever is in their place."""
    for p in (path, _sum_path(path)):
        try:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            elif p.exists() or p.is_symlink():
                p.unlink()
        except OSError as e:
            raise CacheError(f"cannot remove the damaged cache entry {p}: {e}") from None


def store(path: Path, data: bytes, key: str) -> None:
    """Write `data` for `key` at `path` (atomically), then its sidecar."""
    if path.is_dir() and not path.is_symlink():
        discard(path)
    for target, content in ((path, data), (_sum_path(path), f"{key} {digest(data)}\n".encode())):
        tmp = temporary(target)
        try:
            tmp.write_bytes(content)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)


def seal(path: Path, key: str) -> None:
    """Write the sidecar of a file a tool wrote in place (renamed to `path` already)."""
    data = path.read_bytes()
    tmp = temporary(_sum_path(path))
    try:
        tmp.write_bytes(f"{key} {digest(data)}\n".encode())
        os.replace(tmp, _sum_path(path))
    finally:
        tmp.unlink(missing_ok=True)


def load(path: Path, key: str) -> bytes | None:
    """The bytes cached at `path` for `key`, or None where there are none or they are damaged
    (then the entry is removed, with a warning, so that the caller rebuilds it)."""
    if not path.exists() and not _sum_path(path).exists() and not path.is_symlink():
        return None
    if (path.is_file() and not path.is_symlink()) and not _sum_path(path).exists():
        discard(path)  # written without a sidecar (or the sidecar lost): rebuilt, nothing to warn of
        return None
    problem = None
    try:
        if not path.is_file():
            problem = "not a regular file"
        else:
            data = path.read_bytes()
            recorded = _sum_path(path).read_text().split()
            if len(recorded) != 2 or recorded[0] != key:
                problem = "built for another key"
            elif recorded[1] != digest(data):
                problem = "its checksum does not match"
            else:
                return data
    except (OSError, UnicodeDecodeError) as e:
        problem = f"unreadable ({type(e).__name__})"
    _warn_once(f"damaged:{path}", f"cache entry {path} is damaged ({problem}); rebuilding it")
    discard(path)
    return None


def verified(path: Path, key: str) -> bool:
    """Whether `path` holds a sound entry for `key` (load() without keeping the bytes)."""
    return load(path, key) is not None
