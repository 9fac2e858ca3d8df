"""Patched binary-archive candidates (macOS only; MLX_METILE_PATCHED_ARCHIVES): the AIR metallib of a
schedule, the binary archive Metal builds for its pipeline (serialised by the C++ core), that archive
patched by mlx_metile.native (each rewrite verified by interpretation), and the result stored in the
cache under the key the seed names - GPU architecture, OS build, compiler identity, source and
options, launch layout, rewrite version - with those fields written beside it. The Metal path loads
it with FailOnBinaryArchiveMiss (src/metal/metal_archive.cpp), so a kernel missing from it is an
error, not a fresh compile that would answer like the unpatched kernel.

None of this has run: it needs an Apple GPU, which no machine of this project has."""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

from .. import cache
from ..air import llvm14
from ..air.candidate import FORMS
from ..artifact import Artifact
from ..native.patching import patch_archive
from ..native.rewrite import REWRITE_VERSION, Policy
from ..schedule import Schedule
from . import metal_device
from .extension import require

ARCHIVE_FORM = "air"  # the AIR form whose pipeline is archived and patched
POLICY = Policy()


def launch_layout(schedule: Schedule) -> dict:
    """What a dispatch of the archived pipeline looks like: threads per threadgroup and the grid's rule."""
    return {
        "threads_per_group": [schedule.threads, 1, 1],
        "rows_per_group": schedule.BM,
        "columns_per_group": schedule.BN,
    }


def rewrite_identity(policy: Policy = POLICY) -> str:
    return f"native.rewrite v{REWRITE_VERSION} {policy!r}"


def archive_fields(base: Artifact, policy: Policy = POLICY) -> dict:
    """The key fields of a patched archive of `base` (an AIR metallib artifact) on this device."""
    d = metal_device.device()
    return {
        "gpu_architecture": d.architecture,
        "os_build": d.os_version,
        "compiler": {"metal": d.os_version, "llvm14": llvm14.version()},
        "source": {
            "air_sha256": hashlib.sha256(base.source.encode()).hexdigest(),
            "metallib_sha256": hashlib.sha256(base.library).hexdigest(),
            "entry": base.entry,
            "options": FORMS[ARCHIVE_FORM].describe(),
        },
        "launch_layout": launch_layout(base.schedule),
        "rewrite_version": rewrite_identity(policy),
    }


def archive_artifact(base: Artifact, library_path: str, policy: Policy = POLICY) -> Artifact:
    """`base` (the AIR metallib artifact, in the cache at `library_path`) with the patched archive of
    its pipeline: from the cache where this device, OS, compiler, source, layout and rewrite version
    made it before, else serialised by Metal and patched now."""
    fields = archive_fields(base, policy)
    key = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
    folder = cache.root("metal") / "archives" / key[:32]
    stored = folder / "patched.archive"
    data = cache.load(stored, key)
    if data is None:
        with tempfile.TemporaryDirectory(prefix="mlx_metile-archive-") as work:
            raw = Path(work) / "serialised.archive"
            require().metal_serialize_archive(library_path, base.entry, str(raw), base.key)
            patched = patch_archive(raw.read_bytes(), metal_device.device().generation, policy)
        folder.mkdir(parents=True, exist_ok=True)
        described = {**fields, "rewrites": list(patched.accepted)}
        cache.store(folder / "fields.json", json.dumps(described, indent=1, sort_keys=True).encode(), key)
        cache.store(stored, patched.data, key)
        data = patched.data
    return Artifact(
        base.target,
        base.source,
        base.entry,
        base.schedule,
        base.params,
        route="archive",
        library=base.library,
        archive=data,
    )
