"""The verification record: what `patch()` verified, so that patching the same model again with
the same code and options skips the verification runs.

A record is keyed by everything that decides what verification would find: mlx-metile's version
and the hash of its lowering's sources (kernels, schedules, backends, the C++ extension), the
settings that change what runs, MLX's and mlx-lm's versions, the device and backend, the model's
class, configuration and module tree, patch()'s options, each part verification would judge
(path, kind, weight formats), and a sampled fingerprint of every parameter (name, shape, dtype and
SAMPLES strided elements, hashed). The fingerprint is a sample, not a full hash: it sees any change
of shape, dtype or format and a change of a sampled element, not a change confined to elements
between the samples.

Only a verification that kept every part is recorded; one that declined anything (or failed) is
not, so that such a model is verified on every patch(). Records are files under the cache root's
`verified/` (one per key, with the caches' checksummed sidecar); a damaged one is removed with a
warning and verification runs. MLX_METILE_VERIFY_RECORD=0 turns the record off.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import warnings
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from .. import cache, settings

RECORD_VERSION = 1
SAMPLES = 64  # strided elements per parameter in the fingerprint
SUB = "verified"


def enabled() -> bool:
    return settings.current().verify_record


def _config(model: nn.Module) -> object:
    args = getattr(model, "args", None)
    if args is None:
        return None
    if dataclasses.is_dataclass(args) and not isinstance(args, type):
        return dataclasses.asdict(args)
    return dict(vars(args)) if hasattr(args, "__dict__") else repr(args)


def _name(value: object) -> str:
    t = value if isinstance(value, type) else type(value)
    return f"{t.__module__}.{t.__qualname__}"


def fingerprint(model: nn.Module) -> str:
    """SHA-256 over every parameter's name, shape, dtype and SAMPLES strided elements (the first
    among them), their bytes as stored."""
    params = sorted(tree_flatten(model.parameters()), key=lambda kv: kv[0])
    samples = []
    for _, a in params:
        flat = a.reshape(-1)
        stride = max(1, flat.size // SAMPLES)
        samples.append(mx.view(flat[::stride][:SAMPLES], mx.uint8))
    mx.eval(samples)
    h = hashlib.sha256()
    for (name, a), s in zip(params, samples):
        h.update(f"{name}\0{tuple(a.shape)}\0{a.dtype}\0".encode())
        h.update(bytes(memoryview(s)))
    return h.hexdigest()


def key_document(model: nn.Module, parts: list, options: dict, modules: list[tuple[str, str]]) -> dict:
    """What a record is keyed by (see the module's doc); `modules`: (path, class) of every module."""
    from importlib.metadata import PackageNotFoundError, version

    from ..dispatch import backend_of
    from ..tune import identity

    try:
        lm = version("mlx-lm")
    except PackageNotFoundError:  # pragma: no cover - patch() is for mlx-lm models
        lm = "not installed"
    backend = backend_of(mx.default_stream(mx.default_device()))
    return {
        "record": RECORD_VERSION,
        "mlx_metile": identity.versions()["mlx_metile"],
        "sources": identity.sources_hash(),
        "settings": identity.keyed_settings(),
        "mlx": mx.__version__,
        "mlx_lm": lm,
        "device": identity.device_identity(backend),
        "model": _name(model),
        "config": _config(model),
        "modules": hashlib.sha256(json.dumps(modules).encode()).hexdigest(),
        "options": options,
        "parts": [[p.path, p.kind, p.formats, p.needs.path if p.needs is not None else None] for p in parts],
        "weights": fingerprint(model),
    }


def key_of(document: dict) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()


def _path(key: str) -> Path:
    return cache.root(SUB) / f"{key[:40]}.json"


def lookup(key: str) -> dict | None:
    """The recorded result for `key` ({"max_diff", "allowed", "replaced", "criterion"}), or None where
    there is none or it is damaged (then with a warning)."""
    path = _path(key)
    data = cache.load(path, key)  # (a damaged file: removed, with a warning)
    if data is None:
        return None
    try:
        entry = json.loads(data)
        result = {k: entry[k] for k in ("max_diff", "allowed", "replaced", "criterion")}
        if entry["key"] != key or not all(isinstance(result[k], (int, float)) for k in ("max_diff", "allowed")):
            raise ValueError("another key or malformed numbers")
        if not isinstance(result["criterion"], str):
            raise ValueError("a malformed criterion")
        return result
    except (ValueError, KeyError, TypeError) as e:
        warnings.warn(
            f"mlx_metile: verification record {path} is unreadable ({e}); verifying", RuntimeWarning, stacklevel=4
        )
        cache.discard(path)
        return None


def store(
    key: str, document: dict, max_diff: float, allowed: float, replaced: list[tuple[str, str]], criterion: str
) -> None:
    """Record a verification that kept every part, and which criterion decided (a cache that cannot
    be written: a warning)."""
    entry = {"key": key, "document": document, "max_diff": max_diff, "allowed": allowed, "replaced": replaced}
    entry["criterion"] = criterion
    try:
        cache.store(_path(key), json.dumps(entry, sort_keys=True, default=str).encode(), key)
    except OSError as e:
        warnings.warn(f"mlx_metile: cannot write the verification record: {e}", RuntimeWarning, stacklevel=4)
