"""How a Metal kernel is built, by the name a tuned route gives (`Route.build`): None, the MSL
source (what Metal compiles, and the emulator runs); "air" / "air:<form>", our AIR in one of
mlx_metile.air.candidate.FORMS packed into a metallib (route "metallib": Metal loads it from a
path in the cache, the emulator runs the metallib's bitcode on the CPU through mlx_metile.air);
"archive", that metallib with a patched binary archive of its pipeline (route "archive": macOS
only, backends/metal_archive.py). `BUILDS` maps every name but None to its builder, so that a new
build is one entry (the tuner's tests plant wrong ones there)."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from .. import cache
from ..air.candidate import FORMS, air_candidate
from ..artifact import Artifact
from ..pipeline import compile_projection
from ..schedule import Schedule
from ..spec import ProjectionSpec
from .metal_archive import ARCHIVE_FORM, archive_artifact

Builder = Callable[[ProjectionSpec, Schedule], Artifact]


def air_artifact(spec: ProjectionSpec, schedule: Schedule, form: str = "air") -> Artifact:
    """The kernel of (spec, schedule) as our AIR in `form`, in a metallib of its own."""
    cand = air_candidate(spec, schedule, FORMS[form])
    return Artifact("air", cand.text, cand.entry, schedule, cand.params, route="metallib", library=_metallib(cand))


def _metallib(cand) -> bytes:
    return cand.metallib().to_bytes()


def _archive(spec: ProjectionSpec, schedule: Schedule) -> Artifact:
    base = air_artifact(spec, schedule, ARCHIVE_FORM)
    return archive_artifact(base, files(base)[0])  # (macOS: the device serialises the pipeline's archive)


BUILDS: dict[str, Builder] = {name: (lambda s, sc, n=name: air_artifact(s, sc, n)) for name in FORMS}
BUILDS["archive"] = _archive


@lru_cache(maxsize=512)
def build(spec: ProjectionSpec, schedule: Schedule, language: str, name: str | None = None) -> Artifact:
    """The artifact of (spec, schedule) built as `name` says (None: the source in `language`)."""
    if name is None:
        return compile_projection(spec, schedule, language)
    if name not in BUILDS:
        raise ValueError(f"unknown kernel build {name!r}; known: {', '.join(BUILDS)}")
    return BUILDS[name](spec, schedule)


@lru_cache(maxsize=512)
def files(artifact: Artifact) -> tuple[str, str]:
    """(metallib path, archive path) of an artifact's bytes, written into the cache once ("" where
    it has none): what the C++ Metal path loads, as MLX's extension example loads its metallib."""
    return _file(artifact.library, "metallib"), _file(artifact.archive, "archive")


def _file(data: bytes, suffix: str) -> str:
    if not data:
        return ""
    key = cache.digest(data)
    path = cache.root("metal") / f"{key[:32]}.{suffix}"
    if not cache.verified(path, key):
        cache.store(path, data, key)
    return str(Path(path))


def forget() -> None:
    build.cache_clear()
    files.cache_clear()
